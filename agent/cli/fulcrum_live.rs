//! `jpower schedule --live`: the search's choice run in real time through the agent's
//! scheduler (protocol version 6) on a simulated board, with the built-in workloads.
//!
//! Three connections, three threads, as three programs would: a trainer that runs
//! training minibatches of the chosen mode's time in turns, an inference server that runs
//! each batch it is granted for the time of the smallest engine batch that holds it, and
//! users that submit requests at the problem's rate (Poisson, from the seed) and take
//! each one's latency from its `served` event. The plan (batch size, target, the mode or
//! the per-phase pair) goes to the agent first, and the problem's budget to its guard
//! (the budget from before comes back after); the board runs the training load while
//! the schedule runs. The phase times are the workloads' noise-free times on the board
//! ([`Board::truth`]): real time passes, the work itself is simulated.

use super::Target;
use crate::control::mode::PinnedMode;
use crate::ipc::client::Client;
use crate::ipc::codec::Encoding;
use crate::ipc::protocol::{
    Kind, LeaseKind, ModeRequest, Phase, PhaseModes, ReplyBody, RequestBody, SchedulePlan,
    ScheduleReply,
};
use crate::predict::fulcrum::interleave::TRAIN_SAMPLES;
use crate::predict::fulcrum::{Board, Problem, Setting, BATCHES};
use crate::sim::concurrent::ConcurrentBoard;
use crate::sim::kernel::LoadState;
use crate::support::rng::SplitMix64;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Runs one minibatch of `kind` in a turn: begin, gate, compute for `ms(turn's requests)`,
/// end. The turn's request count.
fn turn(c: &mut Client, kind: Kind, id: u64, ms: impl Fn(usize) -> f64) -> Result<usize> {
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
    std::thread::sleep(Duration::from_secs_f64(ms(t.requests.len()) / 1000.0));
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

/// Runs `s` under `p` for about `seconds` through the agent that serves `target`'s
/// socket: the JSON object of what it measured.
pub fn run(
    target: &Target,
    board: &ConcurrentBoard,
    s: &Setting,
    p: &Problem,
    seconds: f64,
    seed: u64,
) -> Result<serde_json::Value> {
    let mut planner = target.agent()?.context(
        "no agent serves the socket: start one on the same board (jpower --sim BOARD agent)",
    )?;
    let socket = target.agent_socket()?;
    let mode = |i| board.space().get(i).expect("a mode of the space");
    let (train, infer) = (mode(s.train), mode(s.infer));
    request(
        &mut planner,
        RequestBody::SetMode {
            mode: knobs(&train),
            lease: LeaseKind::Session,
            timeout_ms: None,
        },
    )?;
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
    let before = match request(&mut planner, RequestBody::SchedulePlan(plan))? {
        ReplyBody::Schedule(r) => r,
        other => bail!("unexpected reply to schedule_plan: {other:?}"),
    };
    // The problem's budget is the guard's while the schedule runs; the one before comes
    // back after.
    let prior_budget = match request(&mut planner, RequestBody::Status)? {
        ReplyBody::Status(st) => st.budget_w,
        other => bail!("unexpected reply to status: {other:?}"),
    };
    set_budget(&mut planner, Some(p.budget_w))?;
    let (train_t, infer_t) = (board.truth(s.train), board.truth(s.infer));
    let requests = ((p.rate_per_s * seconds).round() as usize).max(1);
    let sim = target.root()?.1;
    if let Some(sim) = &sim {
        sim.set_load(LoadState::TRAINING)?;
    }
    let measured = run_clients(
        &socket,
        requests,
        p.rate_per_s,
        seed,
        train_t.train_ms,
        |n| {
            let k = BATCHES.iter().position(|&b| b as usize >= n).unwrap_or(0);
            infer_t.infer_ms[k]
        },
    );
    if let Some(sim) = &sim {
        sim.set_load(LoadState::default())?;
    }
    set_budget(&mut planner, prior_budget)?;
    let m = measured?;
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
    Ok(json!({
        "seconds": m.seconds,
        "throughput_per_s": TRAIN_SAMPLES * m.minibatches as f64 / m.seconds,
        "minibatches": m.minibatches,
        "requests": requests,
        "served": after.served - before.served,
        "late": after.late - before.late,
        "latency_p50_ms": m.latencies_ms.0,
        "latency_p99_ms": m.latencies_ms.1,
        "mean_power_w": mean_w,
        "mode_switches": after.mode_switches - before.mode_switches,
        "train_energy_j": after.train.energy_j - before.train.energy_j,
        "infer_energy_j": after.infer.energy_j - before.infer.energy_j,
    }))
}

/// The trainer, the server and the users on their own connections until the users'
/// `requests` are served.
fn run_clients(
    socket: &Path,
    requests: usize,
    rate_per_s: f64,
    seed: u64,
    train_ms: f64,
    infer_ms: impl Fn(usize) -> f64 + Sync,
) -> Result<Measured> {
    let connect =
        |name| -> Result<Client> { Ok(Client::connect(socket, Encoding::Bincode, name)?.0) };
    let (mut trainer, mut server, mut users) = (
        connect("trainer")?,
        connect("infer-server")?,
        connect("users")?,
    );
    let done = AtomicBool::new(false);
    let started = Instant::now();
    let (minibatches, latencies) = std::thread::scope(|scope| {
        let training = scope.spawn(|| -> Result<u64> {
            let mut n = 0;
            while !done.load(Ordering::Relaxed) {
                turn(&mut trainer, Kind::Train, n, |_| train_ms)?;
                n += 1;
            }
            Ok(n)
        });
        let serving = scope.spawn(|| -> Result<()> {
            let (mut served, mut id) = (0, 0);
            while served < requests {
                served += turn(&mut server, Kind::Infer, id, &infer_ms)?;
                id += 1;
            }
            Ok(())
        });
        let latencies = submit_and_wait(&mut users, requests, rate_per_s, seed);
        done.store(true, Ordering::Relaxed);
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

/// Submits `requests` at `rate_per_s` (Poisson) and waits for each one's `served`
/// event: their latencies, ms.
fn submit_and_wait(
    users: &mut Client,
    requests: usize,
    rate_per_s: f64,
    seed: u64,
) -> Result<Vec<f64>> {
    let mut gaps = SplitMix64::new(seed);
    for _ in 0..requests {
        request(users, RequestBody::ScheduleSubmit)?;
        let gap = -(1.0 - gaps.unit()).ln() / rate_per_s;
        std::thread::sleep(Duration::from_secs_f64(gap));
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
