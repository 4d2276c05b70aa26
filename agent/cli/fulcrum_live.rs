//! `jpower schedule --live`: the search's choice run in real time through the agent's
//! scheduler (protocol version 6) on a simulated board, with the built-in workloads.
//!
//! Three connections, three threads, as three programs would: a trainer that runs
//! training minibatches of the chosen mode's time in turns, an inference server that runs
//! each batch it is granted for the time of the smallest engine batch that holds it, and
//! users that submit requests at the problem's rate (Poisson, from the seed) and take
//! each one's latency from its `served` event. The plan (batch size, target, the mode or
//! the per-phase pair) goes to the agent first, and the problem's budget to its guard
//! (the budget from before comes back after). The phase times are the workloads'
//! noise-free times on the board ([`Board::truth`]), and each turn loads a simulated
//! board's rails with its phase's utilisations ([`ConcurrentBoard::phase_loads`]): real
//! time passes, the work itself is simulated.
//!
//! The planner re-plans online, as a planner beside a real robot would: it measures the
//! arrival rate from the agent's count of queued requests and each phase's time from the
//! agent's minibatch totals (from the `compute` marker to the end, not the wait at the
//! gate), and searches again when the rate drifts (`--rate-change` makes the users change
//! it), when the training minibatches or the inference batches slow down or speed up
//! (`--slowdown` makes the trainer slower, `--infer-slowdown` the server: its model of the
//! board's phase is scaled by what it measured), or when someone changes the guard's
//! budget; the agent takes the new plan over at the next turn boundary.

use super::Target;
use crate::board::ina3221;
use crate::control::mode::PinnedMode;
use crate::ipc::client::{Client, ClientError};
use crate::ipc::codec::Encoding;
use crate::ipc::protocol::{
    Kind, LeaseKind, ModeRequest, Phase, PhaseModes, ReplyBody, RequestBody, SchedulePlan,
    ScheduleReply,
};
use crate::predict::fulcrum::interleave::TRAIN_SAMPLES;
use crate::predict::fulcrum::search::{self, Strategy};
use crate::predict::fulcrum::{Board, Problem, Setting, BATCHES};
use crate::sim::concurrent::{ConcurrentBoard, PhaseLoads, PhaseScales};
use crate::sim::kernel::LoadState;
use crate::sim::SimBoard;
use crate::support::rng::SplitMix64;
use crate::telemetry::ring::RingReader;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What the clients of one live run measured.
#[derive(Debug, Clone, Copy)]
struct Measured {
    seconds: f64,
    minibatches: u64,
    latencies_ms: (f64, f64),
}

fn request(c: &mut Client, body: RequestBody) -> Result<ReplyBody> {
    Ok(c.request(body)?)
}

/// Runs one minibatch of `kind` in a turn: begin, gate, compute for `work(turn's
/// requests)`'s milliseconds with the simulated board (if any) under its load, end. The
/// turn's request count.
fn turn(
    c: &mut Client,
    kind: Kind,
    id: u64,
    sim: Option<&SimBoard>,
    work: impl Fn(usize) -> (f64, LoadState),
) -> Result<usize> {
    request(c, RequestBody::MinibatchBegin { kind, id })?;
    let ReplyBody::Turn(t) = request(c, RequestBody::ScheduleGate { kind })? else {
        bail!("the agent answered schedule_gate with something else than a turn");
    };
    request(
        c,
        RequestBody::MinibatchPhase {
            kind,
            id,
            phase: Phase::Compute,
        },
    )?;
    let started = Instant::now();
    let (ms, load) = work(t.requests.len());
    if let Some(sim) = sim {
        sim.set_load(load)?;
    }
    let rest = Duration::from_secs_f64(ms / 1000.0).saturating_sub(started.elapsed());
    std::thread::sleep(rest);
    request(c, RequestBody::MinibatchEnd { kind, id })?;
    Ok(t.requests.len())
}

fn knobs(m: &PinnedMode) -> ModeRequest {
    ModeRequest::Knobs {
        cores: Some(m.cores),
        cpu_khz: Some(m.cpu_hz / 1000),
        gpu_hz: Some(m.gpu_hz),
        emc_hz: Some(m.emc_hz),
        snap: false,
    }
}

/// The `chosen` object of a setting.
pub(super) fn chosen(board: &ConcurrentBoard, s: &Setting) -> serde_json::Value {
    let mode = |i| board.space().get(i).expect("a mode of the space");
    let mut v = if s.per_phase() {
        json!({"train": mode(s.train), "infer": mode(s.infer)})
    } else {
        json!(mode(s.train))
    };
    v["infer_batch"] = json!(BATCHES[s.batch]);
    v
}

fn set_budget(c: &mut Client, watts: Option<f64>) -> Result<()> {
    request(c, RequestBody::SetBudget { watts })?;
    Ok(())
}

fn status(c: &mut Client) -> Result<ScheduleReply> {
    match request(c, RequestBody::ScheduleStatus)? {
        ReplyBody::Schedule(s) => Ok(s),
        other => bail!("unexpected reply to schedule_status: {other:?}"),
    }
}

/// The percentile `q` of sorted `v`.
fn percentile(v: &[f64], q: f64) -> f64 {
    let i = ((q / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1)) - 1;
    v.get(i).copied().unwrap_or(f64::NAN)
}

/// A change during a live run, `VALUE@SECONDS`: the users' arrival rate
/// (`--rate-change RATE@S`) or a phase's slowdown (`--slowdown FACTOR@S`,
/// `--infer-slowdown FACTOR@S`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    /// The new value: requests per second, or the factor of the minibatch's time.
    pub value: f64,
    /// When it changes, seconds into the run.
    pub at_s: f64,
}

impl std::str::FromStr for Change {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Change, String> {
        let (value, at) = text
            .split_once('@')
            .ok_or("VALUE@SECONDS, for example 60@2")?;
        let number = |v: &str, what: &str| {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or(format!("{what} {v:?} is not a number of at least 0"))
        };
        let change = Change {
            value: number(value, "the value")?,
            at_s: number(at, "the time")?,
        };
        if change.value == 0.0 {
            return Err("the new value is above 0".into());
        }
        Ok(change)
    }
}

/// What changes during a live run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Changes {
    /// The users' new arrival rate (`--rate-change`).
    pub rate: Option<Change>,
    /// The training minibatch's slowdown (`--slowdown`): the trainer computes this many
    /// times as long from then on, which the planner does not know but measures.
    pub slowdown: Option<Change>,
    /// The inference batch's slowdown (`--infer-slowdown`), likewise for the server.
    pub infer_slowdown: Option<Change>,
}

/// How often the planner reads the agent's counts.
const POLL: Duration = Duration::from_millis(200);
/// The window the planner measures the arrival rate over.
const RATE_WINDOW: Duration = Duration::from_secs(2);
/// A measured rate is a drift when it is this far from the planned one, relatively...
const DRIFT_SHARE: f64 = 0.25;
/// ...and this many standard deviations of a Poisson count at the planned rate, so that
/// the noise of a few dozen arrivals is not taken for a change.
const DRIFT_SIGMAS: f64 = 3.0;
/// A measured phase time is a drift when it is this far from the planned one,
/// relatively, and [`DRIFT_SIGMAS`] standard errors of the phase's spread over at least
/// [`DRIFT_MINIBATCHES`] minibatches of the window.
const PHASE_DRIFT_SHARE: f64 = 0.2;
/// The fewest minibatches a phase-time drift is measured over.
const DRIFT_MINIBATCHES: u64 = 5;
/// The least relative spread of a phase's time assumed (an inference batch's is not
/// profiled).
const MIN_SPREAD: f64 = 0.02;

/// The measured over the planned time of a phase, if it drifted: `n` minibatches took
/// `ms` where `planned_ms` was planned, each with a relative spread `spread`.
fn phase_drift(n: f64, ms: f64, planned_ms: f64, spread: f64) -> Option<f64> {
    if n < DRIFT_MINIBATCHES as f64 || planned_ms <= 0.0 {
        return None;
    }
    let ratio = ms / planned_ms;
    let error = DRIFT_SIGMAS * spread.max(MIN_SPREAD) / n.sqrt();
    let drift = (ratio - 1.0).abs();
    (drift > PHASE_DRIFT_SHARE && drift > error).then_some(ratio)
}

/// The phase times of the setting in force (a re-plan changes them): what the trainer
/// and the server compute for.
#[derive(Debug, Clone, Copy)]
struct Times {
    train_ms: f64,
    infer_ms: [f64; BATCHES.len()],
    loads: PhaseLoads,
}

impl Times {
    fn of(board: &ConcurrentBoard, s: &Setting) -> Times {
        Times {
            train_ms: board.truth(s.train).train_ms,
            infer_ms: board.truth(s.infer).infer_ms,
            loads: board.phase_loads(s),
        }
    }

    /// The time and load of the smallest engine batch that holds `n` requests.
    fn infer(&self, n: usize) -> (f64, LoadState) {
        let k = engine(n);
        (self.infer_ms[k], self.loads.infer[k])
    }
}

/// The index in [`BATCHES`] of the smallest engine batch that holds `n` requests.
fn engine(n: usize) -> usize {
    BATCHES.iter().position(|&b| b as usize >= n).unwrap_or(0)
}

/// The inference time `infer_ms` (per engine batch) of batches of 1 to `max_batch`
/// requests as `a + b n` (least squares over every size), `(a, b)`: the planned time of
/// `k` batches serving `r` requests is then `a k + b r`, whatever their sizes were.
fn per_batch_and_request(infer_ms: &[f64; BATCHES.len()], max_batch: u32) -> (f64, f64) {
    let sizes = 1..=max_batch.max(1) as usize;
    let n = sizes.clone().count() as f64;
    let (sx, sy, sxx, sxy) = sizes.fold((0.0, 0.0, 0.0, 0.0), |(sx, sy, sxx, sxy), x| {
        let y = infer_ms[engine(x)];
        let x = x as f64;
        (sx + x, sy + y, sxx + x * x, sxy + x * y)
    });
    let det = n * sxx - sx * sx;
    if det <= 0.0 {
        return (sy / n, 0.0);
    }
    let b = (n * sxy - sx * sy) / det;
    ((sy - b * sx) / n, b)
}

/// What the planner needs to plan again: the search, the board's profiles, the problem
/// in force and how the arrival rate and the budget are watched.
pub struct Replanner<'a> {
    /// The search that chose the first setting.
    pub strategy: Strategy,
    /// The board it profiles.
    pub board: &'a mut ConcurrentBoard,
    /// Seed of the search.
    pub seed: u64,
}

/// The plan of `s` under `p`.
fn plan_of(board: &ConcurrentBoard, s: &Setting, p: &Problem) -> (PinnedMode, SchedulePlan) {
    let mode = |i| board.space().get(i).expect("a mode of the space");
    let (train, infer) = (mode(s.train), mode(s.infer));
    let plan = SchedulePlan {
        max_batch: BATCHES[s.batch],
        slo_ms: p.slo_ms,
        rate_per_s: None,
        phase_modes: s.per_phase().then_some(PhaseModes {
            train_gpu_hz: train.gpu_hz,
            train_emc_hz: train.emc_hz,
            infer_gpu_hz: infer.gpu_hz,
            infer_emc_hz: infer.emc_hz,
        }),
    };
    (train, plan)
}

/// Sets the training mode under the planner's session lease, then the plan; the report.
fn apply(planner: &mut Client, train: &PinnedMode, plan: SchedulePlan) -> Result<ScheduleReply> {
    request(
        planner,
        RequestBody::SetMode {
            mode: knobs(train),
            lease: LeaseKind::Session,
            timeout_ms: None,
        },
    )?;
    match request(planner, RequestBody::SchedulePlan(plan))? {
        ReplyBody::Schedule(r) => Ok(r),
        other => bail!("unexpected reply to schedule_plan: {other:?}"),
    }
}

fn budget(c: &mut Client) -> Result<Option<f64>> {
    match request(c, RequestBody::Status)? {
        ReplyBody::Status(st) => Ok(st.budget_w),
        other => bail!("unexpected reply to status: {other:?}"),
    }
}

/// Runs `s` under `p` for about `seconds` through the agent that serves `target`'s
/// socket, the users' rate and the trainer's minibatches changing as `changes` says, and
/// re-plans online: the planner measures the arrival rate from the agent's count of
/// queued requests and the training minibatch's time from its minibatch totals over
/// [`RATE_WINDOW`], and plans again when either drifts from what it planned for, or when
/// the guard's budget is changed by someone else. The JSON object of what it measured.
pub fn run(
    target: &Target,
    re: Replanner<'_>,
    s: &Setting,
    p: &Problem,
    seconds: f64,
    changes: Changes,
) -> Result<serde_json::Value> {
    let mut planner = target.agent()?.context(
        "no agent serves the socket: start one on the same board (jpower --sim BOARD agent)",
    )?;
    let socket = target.agent_socket();
    // The agent must serve the simulated board the search ran on, the very one (its key
    // names its ring): another's frequency tables refused the plan with advice no CLI user
    // can take, and a real board's agent must not take a simulated board's plan.
    if let Some(id) = &target.sim {
        let key = crate::board::Board::discover(target.root()?.0)?.key();
        if let ReplyBody::Status(st) = request(&mut planner, RequestBody::Status)? {
            let ring = Path::new(&*st.ring_path).file_stem();
            if !st.simulated || ring != Some(std::ffi::OsStr::new(&key)) {
                bail!(
                    "the agent at {} serves {}{:?}, not the simulated board this schedule searched (--sim {id}): start the agent with the same --sim and --runtime-dir",
                    socket.display(),
                    if st.simulated { "the simulated " } else { "the real board " },
                    st.board,
                );
            }
        }
    }
    let (train, plan) = plan_of(re.board, s, p);
    let before = apply(&mut planner, &train, plan)?;
    // The problem's budget is the guard's while the schedule runs; the one before comes
    // back after, unless someone set another meanwhile (the planner followed it).
    let prior_budget = budget(&mut planner)?;
    set_budget(&mut planner, Some(p.budget_w))?;
    // The phase times the clients compute for: the board's own, whatever the planner
    // comes to believe of it.
    let world = re.board.clone();
    let phases = Times::of(&world, s);
    let segments = arrival_segments(p.rate_per_s, seconds, changes.rate);
    let requests = segments.iter().map(|(n, _)| n).sum::<usize>();
    let sim = target.root()?.1;
    let seed = re.seed;
    let measure = || -> Result<_> {
        let sensor = resolve_phases(&mut planner, &phases, s.batch)?;
        let times = Mutex::new(phases);
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let watched = Watched {
                problem: *p,
                setting: *s,
                world: &world,
                times: &times,
            };
            let planning = scope.spawn(|| watch(&mut planner, re, watched, &done));
            let measured = run_clients(&socket, &segments, seed, (&times, sim.as_ref()), changes);
            done.store(true, Ordering::Relaxed);
            let replans = planning.join().expect("the planner thread");
            measured.and_then(|m| Ok((m, replans?, sensor)))
        })
    };
    let measured = measure();
    // Whatever happened, the board's load and the guard's budget are given back.
    if let Some(sim) = &sim {
        sim.set_load(LoadState::default())?;
    }
    if budget(&mut planner)? == Some(p.budget_w) {
        set_budget(&mut planner, prior_budget)?;
    }
    let (m, replans, sensor) = measured?;
    let after = status(&mut planner)?;
    let mean_w = match request(
        &mut planner,
        RequestBody::Telemetry {
            window_ms: Some((m.seconds * 1000.0) as u64),
        },
    )? {
        ReplyBody::Telemetry(t) => t.window.map_or(f64::NAN, |w| w.mean_w),
        _ => f64::NAN,
    };
    // The target holds at its percentile where at most the rest of the requests were late,
    // and every request was served.
    let (served, late) = (after.served - before.served, after.late - before.late);
    let met_latency = served >= requests as u64
        && late as f64 <= (1.0 - p.percentile / 100.0) * served as f64 + 1e-9;
    // Unknown (null) where the ring held no window to judge.
    let met_budget = mean_w.is_finite().then_some(mean_w <= p.budget_w);
    Ok(json!({
        "met": met_budget.map(|b| b && met_latency),
        "met_latency": met_latency,
        "met_budget": met_budget,
        "seconds": m.seconds,
        "throughput_per_s": TRAIN_SAMPLES * m.minibatches as f64 / m.seconds,
        "minibatches": m.minibatches,
        "requests": requests,
        "served": served,
        "late": late,
        "latency_p50_ms": m.latencies_ms.0,
        "latency_p99_ms": m.latencies_ms.1,
        "mean_power_w": mean_w,
        "mode_switches": after.mode_switches - before.mode_switches,
        "train_energy_j": after.train.energy_j - before.train.energy_j,
        "infer_energy_j": after.infer.energy_j - before.infer.energy_j,
        "sensor": sensor,
        "rate_change": changes.rate.map(|c| json!({"rate_per_s": c.value, "at_s": c.at_s})),
        "slowdown": changes.slowdown.map(|c| json!({"factor": c.value, "at_s": c.at_s})),
        "infer_slowdown": changes.infer_slowdown.map(|c| json!({"factor": c.value, "at_s": c.at_s})),
        "replans": replans,
    }))
}

/// Lowers the agent's INA3221 averaging under the planner's session lease (it comes back
/// when the lease ends) until the sensors refresh within a quarter of the shortest phase
/// of `t` (an inference batch of one, or a training minibatch), so that each phase's
/// power shows in its own readings; where the board's refresh is fixed (an IIO driver),
/// says so and goes on. What it got, with the phases and the guard's window it judges
/// the budget over (the configuration's `budget_window_ms`, widened as the agent widens it
/// to 2.1 sample periods where its sampler runs slower), as the `sensor` object.
fn resolve_phases(planner: &mut Client, t: &Times, batch: usize) -> Result<serde_json::Value> {
    let shortest_ms = t.infer_ms[0].min(t.train_ms);
    let period_ms = t.train_ms + t.infer_ms[batch];
    let configured_ms = super::agent_config().budget_window_ms as f64;
    // Three channels: the most an INA3221 converts, so every chip refreshes in time.
    let samples = ina3221::averaging_for((shortest_ms * 250.0) as u32, 3);
    let (samples, refresh_ms, note) = match planner.request(RequestBody::SetAveraging { samples }) {
        Ok(ReplyBody::Averaging {
            samples,
            refresh_us,
            ..
        }) => (Some(samples), Some(f64::from(refresh_us) / 1000.0), None),
        Ok(other) => bail!("unexpected reply to set_averaging: {other:?}"),
        Err(ClientError::Agent { message, .. }) => (None, None, Some(message)),
        Err(e) => return Err(e.into()),
    };
    // The sampler's period, from the ring the agent samples into now (a new averaging
    // starts a new ring).
    let sample_ms = match planner.request(RequestBody::Status)? {
        ReplyBody::Status(st) => RingReader::open(Path::new(&*st.ring_path))
            .map_or(0.0, |r| r.info.period_ns as f64 / 1e6),
        _ => 0.0,
    };
    let guard_window_ms = configured_ms.max(2.1 * sample_ms);
    Ok(json!({
        "samples": samples,
        "refresh_ms": refresh_ms,
        "not_lowered": note,
        "shortest_phase_ms": shortest_ms,
        "period_ms": period_ms,
        "guard_window_ms": guard_window_ms,
        "guard_window_widened": guard_window_ms > configured_ms,
        "periods_per_guard_window": guard_window_ms / period_ms,
    }))
}

/// The users' arrivals: `(count, rate)` per segment, before and after the change, the
/// counts those rates give over the run's time, at least one request in all.
fn arrival_segments(rate: f64, seconds: f64, change: Option<Change>) -> Vec<(usize, f64)> {
    let count = |r: f64, s: f64| (r * s).round() as usize;
    let mut segments = match change {
        Some(c) if c.at_s < seconds => vec![
            (count(rate, c.at_s), rate),
            (count(c.value, seconds - c.at_s), c.value),
        ],
        _ => vec![(count(rate, seconds), rate)],
    };
    if segments.iter().all(|s| s.0 == 0) {
        if let Some(last) = segments.last_mut() {
            last.0 = 1;
        }
    }
    segments
}

/// What the planner watches: the problem and setting in force, the board as it is (its
/// phase times for the clients) and the times the clients compute for.
struct Watched<'a> {
    problem: Problem,
    setting: Setting,
    world: &'a ConcurrentBoard,
    times: &'a Mutex<Times>,
}

/// Counts' growth over the last [`RATE_WINDOW`] of readings.
struct Window<const N: usize>(std::collections::VecDeque<(Instant, [f64; N])>);

impl<const N: usize> Default for Window<N> {
    fn default() -> Window<N> {
        Window(std::collections::VecDeque::new())
    }
}

impl<const N: usize> Window<N> {
    /// Adds a reading; the growth over the window and its span once the window is at
    /// least three quarters full.
    fn push(&mut self, now: Instant, reading: [f64; N]) -> Option<([f64; N], f64)> {
        self.0.push_back((now, reading));
        while self
            .0
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW)
        {
            self.0.pop_front();
        }
        let ((t0, a), (t1, b)) = (self.0.front()?, self.0.back()?);
        let span = t1.duration_since(*t0);
        (span >= RATE_WINDOW * 3 / 4)
            .then(|| (std::array::from_fn(|i| b[i] - a[i]), span.as_secs_f64()))
    }
}

/// The phases' counts: training minibatches timed and their compute ms, inference
/// batches timed and theirs, requests served.
fn phase_counts(c: &mut Client, served: u64) -> Result<[f64; 5]> {
    match request(c, RequestBody::MinibatchTotals)? {
        ReplyBody::MinibatchTotals(t) => Ok([
            t.train.phased as f64,
            t.train.compute_ms,
            t.infer.phased as f64,
            t.infer.compute_ms,
            served as f64,
        ]),
        other => bail!("unexpected reply to minibatch_totals: {other:?}"),
    }
}

/// The planner's loop until `done`: every [`POLL`] the agent's count of queued requests,
/// its minibatch totals and the guard's budget; a drift of the measured rate, training
/// minibatch time or inference batch time, or a new budget, re-plans (the agent takes the
/// plan over at the next turn boundary, nothing queued is dropped). A phase time that
/// drifted scales the planner's model of the board's phase
/// ([`ConcurrentBoard::set_phase_scales`]) before it searches. The re-plans.
fn watch(
    planner: &mut Client,
    re: Replanner<'_>,
    mut w: Watched<'_>,
    done: &AtomicBool,
) -> Result<Vec<serde_json::Value>> {
    let started = Instant::now();
    let (mut arrivals, mut phases) = (Window::<1>::default(), Window::<5>::default());
    let mut replans = Vec::new();
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(POLL);
        let now = Instant::now();
        let p = &mut w.problem;
        let counts = status(planner)?;
        let rate = arrivals
            .push(now, [counts.queued as f64])
            .and_then(|([count], span)| {
                let expected = p.rate_per_s * span;
                let drift = (count - expected).abs();
                (drift > DRIFT_SHARE * expected && drift > DRIFT_SIGMAS * expected.sqrt())
                    .then_some(count / span)
            });
        let (train, infer) = (
            re.board.truth(w.setting.train),
            re.board.truth(w.setting.infer),
        );
        let (per_batch, per_request) =
            per_batch_and_request(&infer.infer_ms, BATCHES[w.setting.batch]);
        let grown = phases.push(now, phase_counts(planner, counts.served)?);
        let (slower, slower_infer) = grown.map_or((None, None), |([n, ms, k, infer_ms, r], _)| {
            (
                phase_drift(n, ms, n * train.train_ms, train.train_spread),
                phase_drift(k, infer_ms, per_batch * k + per_request * r, MIN_SPREAD),
            )
        });
        let budget_now = budget(planner)?.filter(|b| *b != p.budget_w);
        let why: Vec<&str> = [
            (rate.is_some(), "measured rate"),
            (slower.is_some(), "measured minibatch time"),
            (slower_infer.is_some(), "measured inference batch time"),
            (budget_now.is_some(), "budget"),
        ]
        .into_iter()
        .filter_map(|(drifted, why)| drifted.then_some(why))
        .collect();
        if why.is_empty() || done.load(Ordering::Relaxed) {
            continue;
        }
        // A window with (almost) no arrivals resolves a rate only down to one per window:
        // planning for that much inference is the safe side, and keeps the search (whose
        // simulated run spans a fixed count of requests) from running for minutes.
        p.rate_per_s = rate
            .unwrap_or(p.rate_per_s)
            .max(1.0 / RATE_WINDOW.as_secs_f64());
        p.budget_w = budget_now.unwrap_or(p.budget_w);
        let scales = re.board.phase_scales();
        re.board.set_phase_scales(PhaseScales {
            train: scales.train * slower.unwrap_or(1.0),
            infer: scales.infer * slower_infer.unwrap_or(1.0),
        });
        let choice = search::choose(re.strategy, re.board, p, re.seed);
        let (train, plan) = plan_of(re.board, &choice.setting, p);
        apply(planner, &train, plan)?;
        w.setting = choice.setting;
        *w.times.lock().unwrap_or_else(|e| e.into_inner()) = Times::of(w.world, &w.setting);
        replans.push(json!({
            "at_s": started.elapsed().as_secs_f64(),
            "why": why.join(" and "),
            "rate_per_s": p.rate_per_s,
            "budget_w": p.budget_w,
            "training_scale": re.board.phase_scales().train,
            "inference_scale": re.board.phase_scales().infer,
            "chosen": chosen(re.board, &choice.setting),
            "modes_profiled": choice.modes_profiled,
        }));
        // The rate and the phase times are measured afresh under the new plan.
        (arrivals, phases) = (Window::default(), Window::default());
    }
    Ok(replans)
}

/// The trainer, the server and the users on their own connections until the users'
/// requests are served.
fn run_clients(
    socket: &Path,
    segments: &[(usize, f64)],
    seed: u64,
    (times, sim): (&Mutex<Times>, Option<&SimBoard>),
    changes: Changes,
) -> Result<Measured> {
    let connect =
        |name| -> Result<Client> { Ok(Client::connect(socket, Encoding::Bincode, name)?.0) };
    let (mut trainer, mut server, mut users) = (
        connect("trainer")?,
        connect("infer-server")?,
        connect("users")?,
    );
    let server_line = server.stream().try_clone()?;
    let now = || *times.lock().unwrap_or_else(|e| e.into_inner());
    let done = AtomicBool::new(false);
    let started = Instant::now();
    let slow = |slowdown: Option<Change>| match slowdown {
        Some(c) if started.elapsed().as_secs_f64() >= c.at_s => c.value,
        _ => 1.0,
    };
    let (minibatches, latencies) = std::thread::scope(|scope| {
        let training = scope.spawn(|| -> Result<u64> {
            let mut n = 0;
            while !done.load(Ordering::Relaxed) {
                turn(&mut trainer, Kind::Train, n, sim, |_| {
                    let t = now();
                    (t.train_ms * slow(changes.slowdown), t.loads.train)
                })?;
                n += 1;
            }
            Ok(n)
        });
        // The server serves whatever waits (other clients' requests too) until the users
        // have all theirs; then its connection is shut, which ends a wait at the gate.
        let serving = scope.spawn(|| -> Result<()> {
            let mut id = 0;
            while !done.load(Ordering::Relaxed) {
                let served = turn(&mut server, Kind::Infer, id, sim, |n| {
                    let (ms, load) = now().infer(n);
                    (ms * slow(changes.infer_slowdown), load)
                });
                match served {
                    Ok(_) => id += 1,
                    Err(_) if done.load(Ordering::Relaxed) => break,
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        let latencies = submit_and_wait(&mut users, segments, seed);
        done.store(true, Ordering::Relaxed);
        let _ = server_line.shutdown(std::net::Shutdown::Both);
        let minibatches = training.join().expect("the trainer thread");
        serving.join().expect("the server thread")?;
        Ok::<_, anyhow::Error>((minibatches?, latencies?))
    })?;
    let mut latencies = latencies;
    latencies.sort_by(f64::total_cmp);
    Ok(Measured {
        seconds: started.elapsed().as_secs_f64(),
        minibatches,
        latencies_ms: (percentile(&latencies, 50.0), percentile(&latencies, 99.0)),
    })
}

/// Submits each segment's requests at its rate (Poisson) and waits for each one's
/// `served` event: their latencies, ms.
fn submit_and_wait(users: &mut Client, segments: &[(usize, f64)], seed: u64) -> Result<Vec<f64>> {
    let mut gaps = SplitMix64::new(seed);
    let mut requests = 0;
    for &(n, rate_per_s) in segments {
        for _ in 0..n {
            request(users, RequestBody::ScheduleSubmit)?;
            let gap = -(1.0 - gaps.unit()).ln() / rate_per_s;
            std::thread::sleep(Duration::from_secs_f64(gap));
        }
        requests += n;
    }
    let mut latencies = Vec::with_capacity(requests);
    let mut events = std::mem::take(&mut users.events).into_iter();
    while latencies.len() < requests {
        let event = match events.next() {
            Some(e) => e,
            None => users.read()?.body,
        };
        if let ReplyBody::Served { latency_ms, .. } = event {
            latencies.push(latency_ms);
        }
    }
    Ok(latencies)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_drifts_when_it_is_far_off_and_beyond_its_noise() {
        assert_eq!(phase_drift(10.0, 1600.0, 1000.0, 0.02), Some(1.6));
        assert_eq!(phase_drift(10.0, 700.0, 1000.0, 0.02), Some(0.7));
        assert_eq!(phase_drift(10.0, 1100.0, 1000.0, 0.02), None, "within 20%");
        assert_eq!(phase_drift(4.0, 1600.0, 1000.0, 0.02), None, "too few");
        assert_eq!(phase_drift(5.0, 1500.0, 1000.0, 1.0), None, "noisy");
        assert_eq!(phase_drift(5.0, 1.0, 0.0, 0.02), None, "nothing planned");
    }

    /// Found by review: a change at 0 s to a rate that rounds to no request, over a short
    /// run, submitted nothing and reported NaN latencies.
    #[test]
    fn a_live_run_submits_at_least_one_request() {
        let at = |value, at_s| Some(Change { value, at_s });
        assert_eq!(arrival_segments(0.5, 0.9, None), [(1, 0.5)]);
        assert_eq!(
            arrival_segments(0.5, 0.9, at(0.5, 0.0)),
            [(0, 0.5), (1, 0.5)]
        );
        assert_eq!(
            arrival_segments(30.0, 2.0, at(10.0, 1.0)),
            [(30, 30.0), (10, 10.0)]
        );
    }

    #[test]
    fn the_planned_time_of_batches_of_every_size_is_their_sum() {
        let infer_ms = [3.0, 4.0, 6.0, 9.5, 17.0, 33.0];
        for max_batch in [1, 3, 4, 16] {
            let (a, b) = per_batch_and_request(&infer_ms, max_batch);
            let sizes = 1..=max_batch as usize;
            let exact: f64 = sizes.clone().map(|n| infer_ms[engine(n)]).sum();
            let (k, r) = (sizes.clone().count() as f64, sizes.sum::<usize>() as f64);
            assert!((a * k + b * r - exact).abs() < 1e-9, "{max_batch}: {a} {b}");
        }
        assert_eq!(per_batch_and_request(&[5.0; 6], 8), (5.0, 0.0));
    }
}
