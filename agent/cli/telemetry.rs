//! `jpower watch`, `jpower energy -- CMD` and `jpower ring read`: the telemetry commands.
//!
//! `watch` and `energy` only read: with an agent running they read its ring; without one
//! they run a sampler of their own into a private ring, without the board lock, so that a
//! `jpower set` from another terminal still works. Lowering the sensors' averaging is a
//! write: the agent makes it under the command's session lease (`set_averaging`), or,
//! without an agent, the command owns the board, changing it through the controller and
//! putting it back when it finishes.

use super::{Output, Target};
use crate::board::ina3221;
use crate::board::Values;
use crate::control::state::{Owner, OwnerKind};
use crate::control::{Controller, Peek};
use crate::ipc::client::Client;
use crate::ipc::protocol::{ReplyBody, RequestBody};
use crate::support::clock::monotonic_ns;
use crate::telemetry::ring::RingReader;
use crate::telemetry::sampler::SamplerConfig;
use crate::telemetry::Telemetry;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// Sampling options shared by `watch` and `energy`.
#[derive(Debug, Clone, clap::Args)]
pub struct SampleArgs {
    /// Samples per second [default: 1000, or what the sensors' refresh allows].
    #[arg(allow_negative_numbers = true, long, value_parser = super::bounds::sample_rate)]
    pub rate: Option<f64>,
    /// INA3221 averaging: `keep` the board's, `auto` (the largest that refreshes at the
    /// rate), or a count (1, 4, 16, 64, 128, 256, 512, 1024). Put back afterwards.
    #[arg(allow_negative_numbers = true, long, default_value = "keep", value_parser = super::bounds::averaging)]
    pub averaging: String,
    /// SCHED_FIFO priority for the sampler thread, 1 to 99.
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=99))]
    pub rt_priority: Option<i32>,
    /// Pin the sampler thread to this CPU (one this process may run on).
    #[arg(allow_negative_numbers = true, long, value_parser = super::bounds::sampler_cpu)]
    pub sampler_cpu: Option<usize>,
}

impl SampleArgs {
    /// 1 kHz with the sensors' averaging lowered to match: what metering a minibatch or a
    /// sweep point needs.
    pub fn fast() -> SampleArgs {
        SampleArgs {
            rate: Some(1000.0),
            averaging: "auto".into(),
            rt_priority: None,
            sampler_cpu: None,
        }
    }
}

/// Arguments of `jpower watch`.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub sample: SampleArgs,
    /// Stop after this many seconds.
    #[arg(allow_negative_numbers = true, long, value_parser = super::bounds::seconds)]
    pub duration: Option<f64>,
    /// Stream every sample as a CSV row instead of the live table.
    #[arg(long)]
    pub csv: bool,
}

/// Arguments of `jpower energy`.
#[derive(Debug, clap::Args)]
pub struct EnergyArgs {
    #[command(flatten)]
    pub sample: SampleArgs,
    /// The command to measure (after `--`).
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `jpower ring ...`.
#[derive(Debug, clap::Subcommand)]
pub enum RingCommand {
    /// Print a ring's latest sample, or (--check) read it continuously and verify that
    /// every sample is whole (a torn read would break its totals or its order).
    Read {
        /// The ring file (`<runtime-dir>/telemetry/<board-key>.ring` for the agent's).
        path: PathBuf,
        /// Read continuously for this many seconds, checking every sample is whole and in
        /// order, instead of printing the latest.
        #[arg(allow_negative_numbers = true, long, value_name = "SECONDS", value_parser = super::bounds::seconds)]
        check: Option<f64>,
    },
}

/// A sampler session: telemetry running, and whatever the command changed on the board
/// (sensor averaging, modes, the measurement lock) put back when it finishes.
pub(super) struct Session {
    pub controller: Controller,
    pub telemetry: Telemetry,
    /// The board's files, with the simulated board behind them if there is one.
    pub sim: Option<crate::sim::SimBoard>,
    /// What to put back: the prior values, or the whole baseline if this session made it.
    restore: Option<Restore>,
    name: &'static str,
    pub notes: Vec<String>,
}

/// What a command that changes the board puts back when it finishes.
pub(super) enum Restore {
    /// The held state's values, from the overlay this session pushed.
    Overlay,
    /// The baseline this session saved.
    Baseline,
}

impl Restore {
    /// Records command `name` as the board's owner before its first change: a lease (on a
    /// board another holds, an overlay on its state), so if this process dies the next
    /// jpower command puts the board back.
    pub(super) fn begin(controller: &mut Controller, name: &str) -> Result<Restore> {
        let owner = Owner::new(
            OwnerKind::Lease,
            std::process::id(),
            format!("jpower {name}"),
        );
        Ok(if controller.state().is_none() {
            controller.set_owner(owner);
            Restore::Baseline
        } else {
            controller.push_overlay(owner)?;
            Restore::Overlay
        })
    }

    /// Puts back what [`Restore::begin`] recorded.
    pub(super) fn put_back(self, controller: &mut Controller) -> Result<()> {
        match self {
            Restore::Overlay => {
                controller.pop_overlay()?;
            }
            Restore::Baseline => {
                controller.restore()?;
            }
        }
        Ok(())
    }
}

impl Session {
    /// Starts sampling for command `name`, owning the board (its lock) until
    /// [`Session::finish`], and lowering the sensors' averaging if asked.
    pub fn start(target: &Target, a: &SampleArgs, name: &'static str) -> Result<Session> {
        let (mut controller, sim) = target.open()?;
        let mut restore = None;
        let mut notes = Vec::new();
        if let Some(t) = wanted_averaging(controller.board(), controller.current(), a)? {
            change(&mut controller, &mut restore, name, &t)?;
            notes.push(format!(
                "set INA3221 averaging for the rate; {}",
                ina3221::NOISE_NOTE
            ));
        }
        let path = crate::telemetry::ring_path(&target.runtime_dir(), &controller.board().key());
        let (telemetry, limits) =
            start_sampler(controller.board(), controller.current(), &path, a)?;
        notes.extend(limits);
        Ok(Session {
            controller,
            telemetry,
            sim,
            restore,
            name,
            notes,
        })
    }

    /// Moves the board to `target`; what it was is put back when the session finishes.
    pub fn change(&mut self, target: &Values) -> Result<crate::control::Switch> {
        change(&mut self.controller, &mut self.restore, self.name, target)
    }

    pub fn finish(mut self) -> Result<Vec<String>> {
        drop(self.telemetry);
        if let Some(restore) = self.restore.take() {
            restore.put_back(&mut self.controller)?;
        }
        Ok(self.notes)
    }
}

/// What `--averaging` asks.
enum Averaging {
    /// `keep`: the board's (or the agent's) own.
    Keep,
    /// `auto`: the largest that refreshes every sample period of `--rate`.
    Auto {
        /// The sample period, microseconds.
        period_us: u32,
    },
    /// A count of conversions averaged.
    Count(u32),
}

impl Averaging {
    fn of(a: &SampleArgs) -> Result<Averaging> {
        Ok(match a.averaging.as_str() {
            "keep" => Averaging::Keep,
            "auto" => Averaging::Auto {
                period_us: (1e6 / a.rate.unwrap_or(1000.0)) as u32,
            },
            n => {
                let samples: u32 = n.parse().context("--averaging: keep, auto or a count")?;
                Averaging::Count(ina3221::check_samples(samples).map_err(|e| anyhow!("--{e}"))?)
            }
        })
    }

    /// The count every chip of `board` averages: the largest that refreshes in the period
    /// with the most channels any chip converts.
    fn samples(&self, board: &crate::board::Board) -> Option<u32> {
        let channels = board.ina.iter().map(|c| c.enabled).max().unwrap_or(3);
        match *self {
            Averaging::Keep => None,
            Averaging::Auto { period_us } => Some(ina3221::averaging_for(period_us, channels)),
            Averaging::Count(n) => Some(n),
        }
    }
}

/// The sensors' settings `a` asks for on `board` at `prior`; `None` when they stay.
fn wanted_averaging(
    board: &crate::board::Board,
    prior: &Values,
    a: &SampleArgs,
) -> Result<Option<Values>> {
    let wanted = match Averaging::of(a)? {
        Averaging::Keep => return Ok(None),
        Averaging::Auto { period_us } => ina3221::averaging_target(board, prior, period_us),
        Averaging::Count(n) => ina3221::averaging_count_target(board, prior, n),
    };
    Ok((wanted != *prior).then_some(wanted))
}

/// Asks the agent at `client` to average `samples` conversions under this connection's
/// session lease (it puts the averaging back when the connection closes, also if this
/// process dies); a note says what that changed.
pub(super) fn agent_averaging(client: &mut Client, samples: u32) -> Result<String> {
    let reply = client
        .request(RequestBody::SetAveraging { samples })
        .context("asking the agent to change the INA3221 averaging")?;
    let ReplyBody::Averaging {
        samples,
        refresh_us,
        rate_hz,
    } = reply
    else {
        bail!("unexpected reply from the agent to set_averaging: {reply:?}");
    };
    Ok(format!(
        "the agent averages {samples} INA3221 conversion(s) per reading (a refresh every {:.1} ms, sampled at {rate_hz:.0} Hz) until this command ends; {}",
        f64::from(refresh_us) / 1000.0,
        ina3221::NOISE_NOTE
    ))
}

/// Starts a sampler of `board` (its knobs at `values`) into the ring at `path`, with
/// notes on what limits the rate it can reach.
fn start_sampler(
    board: &crate::board::Board,
    values: &Values,
    path: &std::path::Path,
    a: &SampleArgs,
) -> Result<(Telemetry, Vec<String>)> {
    let cfg = SamplerConfig {
        rate_hz: a.rate,
        rt_priority: a.rt_priority,
        cpu: a.sampler_cpu,
        ..SamplerConfig::default()
    };
    let telemetry = Telemetry::start(board, values, path, &cfg)?;
    let ring = RingReader::open(&telemetry.path)?;
    // The first sample before the work starts, so every window has a value to hold.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while ring.latest().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let fastest = ring
        .info
        .rails
        .iter()
        .map(|r| r.refresh_us)
        .min()
        .unwrap_or(0);
    let mut notes = Vec::new();
    let bus_limit = bus_limit_hz(board.rails.len());
    // Rails that refresh slower than four periods are read only near their conversions.
    let read_every_period = f64::from(fastest) * 1e3 < 4e9 / telemetry.sampler.rate_hz;
    if read_every_period && telemetry.sampler.rate_hz > bus_limit * 1.01 {
        notes.push(format!(
            "the {} rails need {} INA3221 register reads per sample, {:.2} ms on the {} kHz I2C bus: at most {bus_limit:.0} samples/s (the rate shown is the one achieved)",
            board.rails.len(),
            board.rails.len() as u64 * ina3221::REGISTER_READS_PER_RAIL,
            1e3 / bus_limit,
            ina3221::I2C_BUS_HZ / 1000,
        ));
    }
    let averaging_knob = board
        .knobs
        .iter()
        .any(|k| matches!(k.kind, crate::board::KnobKind::InaSamples(_)));
    if !averaging_knob && a.averaging != "keep" {
        notes.push(format!(
            "--averaging {}: this board's power monitors have no averaging knob (an L4T 32 IIO driver), so their refresh is fixed",
            a.averaging
        ));
    }
    if fastest > 0 && telemetry.sampler.rate_hz > 1e6 / f64::from(fastest) * 1.01 {
        notes.push(format!(
            "the sensors refresh every {:.1} ms: samples faster than that repeat values (marked stale){}",
            f64::from(fastest) / 1000.0,
            if averaging_knob { "; use --averaging auto" } else { ", a refresh this board's IIO driver fixes" }
        ));
    }
    Ok((telemetry, notes))
}

/// Where `watch` and `energy` read their samples. They only read, so they take the board
/// lock only to change the sensors' averaging, and never write a ring another process
/// writes.
enum Feed {
    /// An agent samples the board: its ring, read like any local process reads it.
    Agent {
        /// The agent's ring.
        path: PathBuf,
        /// What the agent's sampling means for the options given.
        notes: Vec<String>,
        /// The connection whose lease holds the averaging asked for, if one was; closing
        /// it gives the averaging back.
        _lease: Option<Client>,
    },
    /// No agent, and the averaging changes: this process owns the board while it samples.
    Owner(Box<Session>),
    /// No agent, nothing to change: a sampler of this process's own into a private ring,
    /// without the board lock.
    Private {
        /// The sampler.
        telemetry: Telemetry,
        /// What limits its rate.
        notes: Vec<String>,
        /// The simulated board behind the files, kept open while sampling.
        _sim: Option<crate::sim::SimBoard>,
    },
}

impl Feed {
    /// The samples for command `name`: the agent's ring if an agent serves the board.
    fn start(target: &Target, a: &SampleArgs, name: &'static str) -> Result<Feed> {
        let averaging = Averaging::of(a)?;
        if let Some(mut client) = target.agent()? {
            let mut notes = Vec::new();
            if a.rate.is_some() || a.rt_priority.is_some() || a.sampler_cpu.is_some() {
                notes.push("an agent samples this board: its ring's rate is the agent's (`sample_rate_hz`, or what the sensors' refresh allows); --rate only sets what --averaging auto aims for, --rt-priority and --sampler-cpu do not apply".into());
            }
            let (root, _sim) = target.root()?;
            let board = crate::board::Board::discover(root)?;
            let changed = averaging
                .samples(&board)
                .map(|n| agent_averaging(&mut client, n))
                .transpose()?;
            let ReplyBody::Status(st) = client.request(RequestBody::Status)? else {
                bail!("unexpected reply from the agent to status");
            };
            let lease = changed.is_some().then_some(client);
            notes.extend(changed);
            return Ok(Feed::Agent {
                path: PathBuf::from(&*st.ring_path),
                notes,
                _lease: lease,
            });
        }
        let (root, sim) = target.root()?;
        let peek = Peek::read(crate::board::Board::discover(root)?, &target.runtime_dir())?;
        if wanted_averaging(&peek.board, &peek.current, a)?.is_some() {
            drop(sim);
            return Ok(Feed::Owner(Box::new(Session::start(target, a, name)?)));
        }
        let path = crate::telemetry::private_ring_path(&target.runtime_dir(), &peek.board.key());
        let (telemetry, notes) = start_sampler(&peek.board, &peek.current, &path, a)?;
        Ok(Feed::Private {
            telemetry,
            notes,
            _sim: sim,
        })
    }

    /// The ring to read.
    fn path(&self) -> &std::path::Path {
        match self {
            Feed::Agent { path, .. } => path,
            Feed::Owner(s) => &s.telemetry.path,
            Feed::Private { telemetry, .. } => &telemetry.path,
        }
    }

    /// The rate asked of the sampler, samples per second.
    fn requested_hz(&self, ring: &RingReader) -> f64 {
        match self {
            Feed::Agent { .. } => 1e9 / ring.info.period_ns.max(1) as f64,
            Feed::Owner(s) => s.telemetry.sampler.rate_hz,
            Feed::Private { telemetry, .. } => telemetry.sampler.rate_hz,
        }
    }

    /// Notes for the user.
    fn notes(&self) -> &[String] {
        match self {
            Feed::Agent { notes, .. } | Feed::Private { notes, .. } => notes,
            Feed::Owner(s) => &s.notes,
        }
    }

    /// Stops this process's sampler (removing a private ring) and puts back what it changed.
    fn finish(self) -> Result<Vec<String>> {
        match self {
            Feed::Agent { notes, .. } => Ok(notes),
            Feed::Owner(s) => s.finish(),
            Feed::Private {
                telemetry, notes, ..
            } => {
                let path = telemetry.path.clone();
                drop(telemetry);
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
                Ok(notes)
            }
        }
    }
}

/// The most samples per second the I2C bus allows for `rails` rails read every sample
/// (their sensors refresh within four periods): each reads its shunt and bus voltage
/// registers, one transfer at a time.
fn bus_limit_hz(rails: usize) -> f64 {
    let per_sample = rails.max(1) as u64
        * ina3221::REGISTER_READS_PER_RAIL
        * ina3221::register_read_ns(ina3221::I2C_BUS_HZ);
    1e9 / per_sample as f64
}

/// Applies `target`, first recording what to put back ([`Restore::begin`]).
fn change(
    controller: &mut Controller,
    restore: &mut Option<Restore>,
    name: &str,
    target: &Values,
) -> Result<crate::control::Switch> {
    if restore.is_none() && target != controller.current() {
        *restore = Some(Restore::begin(controller, name)?);
    }
    Ok(controller.apply_values(target)?)
}

/// Opens the ring now at `path` in place of `ring`, which its writer replaced: how many
/// rings came between them (replaced in turn before a look found them: their samples are
/// lost, their time held from the next one's first reading).
fn reopen(ring: &mut RingReader, path: &std::path::Path) -> Result<u64> {
    let old = ring.writer().map(|l| l.generation);
    *ring = RingReader::open(path)?;
    let new = ring.writer().map(|l| l.generation);
    Ok(match (old, new) {
        (Some(old), Some(new)) => new.saturating_sub(old + 1),
        _ => 0,
    })
}

/// The note for `n` rings replaced too fast to read, if any.
fn unread_note(n: u64) -> Option<String> {
    (n > 0).then(|| {
        format!(
            "{n} ring(s) were replaced again before they could be read (averaging changed in quick succession): their samples are lost, their time held from the next ring's first reading"
        )
    })
}

/// What a watch saw of its rings. The agent replaces its ring when another client changes
/// the sensors' averaging: the old one is integrated up to its last sample and the watch
/// follows to the new one, as `energy` does. A ring its writer closed (the agent stopped)
/// ends the watch at its last sample.
struct Seen {
    /// Where the current ring's part begins, `CLOCK_MONOTONIC` ns.
    from: u64,
    /// The current ring's first sample of the watch (its write sequence then).
    first: u64,
    /// The current ring's sampler counts when the watch began reading it.
    counted: (u64, u64),
    /// Samples, overruns and read errors of the rings left behind.
    left: (u64, u64, u64),
    /// The energy of the rings left behind.
    energy: Option<crate::telemetry::energy::Energy>,
    /// Rings followed.
    replaced: u64,
    /// Rings replaced before they could be read ([`reopen`]).
    unread: u64,
    /// The last sample of a ring its writer closed.
    closed_at: Option<u64>,
}

impl Seen {
    fn new(ring: &RingReader, started: u64) -> Seen {
        Seen {
            from: started,
            first: ring.write_seq(),
            counted: ring.counters(),
            left: (0, 0, 0),
            energy: None,
            replaced: 0,
            unread: 0,
            closed_at: None,
        }
    }

    /// Follows a replaced `ring` to the new one at `path` (true then); marks a closed one.
    fn follow(&mut self, ring: &mut RingReader, path: &std::path::Path) -> Result<bool> {
        let last = || ring.latest().map_or(0, |s| s.t_ns).max(self.from);
        match ring.writer().map(|l| l.state) {
            Some(WriterState::Replaced) => {
                let to = last();
                let part = self.part(ring, to);
                self.energy = Some(self.join(part, ring));
                let (samples, overruns, errors) = self.counts(ring);
                self.left = (
                    self.left.0 + samples,
                    self.left.1 + overruns,
                    self.left.2 + errors,
                );
                let unread = reopen(ring, path)?;
                // A new ring: every sample in it is of the watch.
                (self.from, self.first, self.counted) = (to, 0, (0, 0));
                self.replaced += 1 + unread;
                self.unread += unread;
                Ok(true)
            }
            Some(WriterState::Closed) if self.closed_at.is_none() => {
                self.closed_at = Some(last());
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// The current ring's part up to `to`: from the part's start, or from the oldest
    /// sample it still holds where the watch outlasted it.
    fn part(&self, ring: &RingReader, to: u64) -> crate::telemetry::energy::Energy {
        ring.energy(self.outlasted(ring).unwrap_or(self.from), to)
    }

    /// The oldest sample `ring` still holds, where it has overwritten samples of the watch
    /// (not where a followed ring began after the part's start).
    fn outlasted(&self, ring: &RingReader) -> Option<u64> {
        let wrapped = ring.write_seq() > u64::from(ring.info.slot_count);
        ring.oldest_t_ns().filter(|&t| wrapped && t > self.from)
    }

    fn join(
        &self,
        part: crate::telemetry::energy::Energy,
        ring: &RingReader,
    ) -> crate::telemetry::energy::Energy {
        match &self.energy {
            Some(e) => e.join(&part, ring.info.slowest_refresh_s()),
            None => part,
        }
    }

    /// The current ring's samples, overruns and read errors of the watch.
    fn counts(&self, ring: &RingReader) -> (u64, u64, u64) {
        let (overruns, errors) = ring.counters();
        (
            ring.write_seq().saturating_sub(self.first),
            overruns.saturating_sub(self.counted.0),
            errors.saturating_sub(self.counted.1),
        )
    }
}

/// `jpower watch`.
pub fn watch(target: &Target, a: &WatchArgs, out: &Output) -> Result<()> {
    super::interrupt::catch()?;
    let feed = Feed::start(target, &a.sample, "watch")?;
    let mut ring = RingReader::open(feed.path())?;
    for n in feed.notes() {
        eprintln!("jpower: note: {n}");
    }
    let started = monotonic_ns();
    let mut seen = Seen::new(&ring, started);
    let end = a.duration.map(|d| started + (d * 1e9) as u64);
    let done = || super::interrupt::interrupted() || end.is_some_and(|e| monotonic_ns() >= e);
    if a.csv {
        // A closed pipe (`| head`) ends the stream like Ctrl-C: the sensor is put back.
        let mut csv = crate::support::csv_text::writer(std::io::stdout().lock());
        let header = ["t_s".to_string(), "module_w".into()]
            .into_iter()
            .chain(ring.info.rails.iter().map(|r| format!("{}_w", r.name)))
            .chain(["flags".into(), "fresh".into()]);
        let mut open = csv.write_record(header).is_ok();
        let mut next = seen.first;
        while open && !done() && seen.closed_at.is_none() {
            let w = ring.write_seq();
            while open && next < w {
                if let Ok(s) = ring.sample(next) {
                    let watts = |uw: u32| format!("{:.6}", f64::from(uw) * 1e-6);
                    let row = [format!("{:.6}", s.t_ns as f64 * 1e-9), watts(s.module_uw)]
                        .into_iter()
                        .chain(s.rails().iter().map(|r| watts(r.power_uw)))
                        .chain([s.flags.to_string(), s.fresh.to_string()]);
                    open = csv.write_record(row).is_ok();
                }
                next += 1;
            }
            open = open && csv.flush().is_ok();
            if seen.follow(&mut ring, feed.path())? {
                next = seen.first;
            } else {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    } else if out.json {
        while !done() && seen.closed_at.is_none() {
            if !seen.follow(&mut ring, feed.path())? {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    } else {
        // The board's files beside the ring: clocks, loads, memory, fan, the mode's name.
        let (root, _sim) = target.root()?;
        let board = crate::board::Board::discover(root)?;
        let presets = target.presets_or_warn(&board);
        let requested_hz = |r: &RingReader| feed.requested_hz(r);
        let view = super::dashboard::Feed {
            board: &board,
            presets: presets.as_ref(),
            requested_hz: &requested_hz,
        };
        let mut follow = |r: &mut RingReader| seen.follow(r, feed.path());
        let mut rings = super::dashboard::Rings {
            ring: &mut ring,
            follow: &mut follow,
        };
        super::dashboard::run(&view, &mut rings, &done)?;
        // A ring closed (or replaced) since the view's last look.
        seen.follow(&mut ring, feed.path())?;
    }
    let now = seen.closed_at.unwrap_or_else(monotonic_ns);
    let seconds = now.saturating_sub(started) as f64 * 1e-9;
    // A watch longer than the ring holds has its oldest samples overwritten: its energy
    // is of the part still held (holding the oldest value back to the start would make up
    // the rest), and a note says so.
    let outlasted = seen.outlasted(&ring).is_some();
    let e = seen.join(seen.part(&ring, now), &ring);
    let (samples, overruns, errors) = seen.counts(&ring);
    let (samples, overruns, errors) = (
        samples + seen.left.0,
        overruns + seen.left.1,
        errors + seen.left.2,
    );
    let requested_hz = feed.requested_hz(&ring);
    let mut notes = feed.finish()?;
    if outlasted {
        notes.push(format!(
            "the ring holds the last {:.1} s of the {seconds:.1} s watched: module_j, the rails' and duration_s are over those",
            e.duration_s
        ));
    }
    if seen.replaced > 0 {
        notes.push(format!(
            "the agent replaced its ring {} time(s) (another client changed the sensors' averaging): the watch followed to the new one",
            seen.replaced
        ));
    }
    notes.extend(unread_note(seen.unread));
    if seen.closed_at.is_some() {
        notes.push(
            "its ring ended (the agent stopped): the watch ends at its last sample".to_string(),
        );
    }
    notes.extend(failed_notes(&ring, &e));
    if !out.json {
        for n in &notes {
            eprintln!("jpower: note: {n}");
        }
    }
    if out.json {
        out.print(&json!({"samples": samples, "requested_hz": requested_hz, "rate_hz": samples as f64 / seconds,
                          "overruns": overruns, "read_errors": errors, "notes": notes,
                          "duration_s": e.duration_s, "module_j": e.module_j, "mean_module_w": e.mean_module_w,
                          "rails": rails_json(&ring, &e)}), String::new)?;
    }
    Ok(())
}

/// Each rail's energy and mean power over `e`, and how long its reads failed, as `energy`
/// and `watch` print them.
fn rails_json(ring: &RingReader, e: &crate::telemetry::energy::Energy) -> Vec<Value> {
    ring.info
        .rails
        .iter()
        .zip(&e.rails_j)
        .zip(&e.failed_s)
        .map(|((r, j), f)| json!({"rail": r.name, "energy_j": j, "mean_w": if e.duration_s > 0.0 { j / e.duration_s } else { 0.0 },
                                  "failed_s": f}))
        .collect()
}

/// A note for each rail whose reads failed over part of `e`: its last good value stands
/// in for what was not measured, in the module's total too where the rail is part of it.
fn failed_notes(ring: &RingReader, e: &crate::telemetry::energy::Energy) -> Vec<String> {
    let info = &ring.info;
    let in_module = |r: usize| match info.input_rail {
        Some(i) => i == r,
        None => info.module_mask & 1 << r != 0,
    };
    (0..info.rails.len())
        .filter(|&r| e.failed_s.get(r).is_some_and(|&f| f > 0.0))
        .map(|r| {
            format!(
                "rail {}: its reads failed for {:.3} s of the {:.3} s; its last good value stands in for them{}",
                info.rails[r].name,
                e.failed_s[r],
                e.duration_s,
                if in_module(r) { ", in module energy too" } else { "" }
            )
        })
        .collect()
}

/// What `energy` measured of its command.
struct Measured {
    ring: RingReader,
    energy: crate::telemetry::energy::Energy,
    status: std::process::ExitStatus,
    /// jpower's wait around the command for the samples that bound it, ms.
    waited_ms: f64,
    /// What the measurement lacks (a ring that ended before the command, rings unread).
    notes: Vec<String>,
    /// Whether the ring ended before the command: its last reading held to the end.
    cut: bool,
}

/// How often `energy` looks at its ring while the command runs (it hears of the command's
/// end at once).
const POLL: Duration = Duration::from_millis(50);

/// Runs `command` with `feed` sampling: its energy from the ring, integrated in parts while
/// it runs (every quarter of what the ring holds, at most 10 s), so a command longer than
/// the ring loses nothing; a ring its writer replaced (another client changed the
/// sensors' averaging through the agent) is followed to the new one. Under `--json`
/// (`quiet_stdout`), the command's standard output goes to jpower's standard error, so
/// that stdout holds the one JSON object.
fn measure(feed: &Feed, command: &[String], quiet_stdout: bool) -> Result<Measured> {
    let mut ring = RingReader::open(feed.path())?;
    // The integral needs one sample at or before the start (the sensor holds its value,
    // however old) and the first one after the end to interpolate to: nothing more.
    let waited_before = sample_after(&ring, 0)?;
    let t0 = monotonic_ns();
    let mut cmd = std::process::Command::new(&command[0]);
    cmd.args(&command[1..]);
    if quiet_stdout {
        cmd.stdout(std::io::stderr());
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", command[0]))?;
    super::interrupt::forward_sigterm_to(child.id());
    // A signal that came before the command had a pid to pass it to.
    if super::interrupt::interrupted() {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    }
    // The command's end is taken where wait(2) returns, on a thread of its own, so the
    // duration is the command's and not rounded up to the next look at the ring.
    let (exited, exit) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let status = child.wait();
        let _ = exited.send((status, monotonic_ns()));
    });
    let (mut done, mut from) = (None::<crate::telemetry::energy::Energy>, t0);
    let mut unread = 0;
    let (status, t1) = loop {
        match exit.recv_timeout(POLL) {
            Ok(ended) => break ended,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                bail!("lost the wait for {}", command[0])
            }
        }
        let refresh_s = ring.info.slowest_refresh_s();
        let held_ns = ring
            .info
            .period_ns
            .saturating_mul(u64::from(ring.info.slot_count));
        let replaced = ring
            .writer()
            .is_some_and(|l| l.state == crate::telemetry::ring::WriterState::Replaced);
        if replaced || monotonic_ns() - from > (held_ns / 4).min(10_000_000_000) {
            if let Some(to) = ring.latest().map(|s| s.t_ns).filter(|&to| to > from) {
                let part = ring.energy(from, to);
                done = Some(done.map_or(part.clone(), |d| d.join(&part, refresh_s)));
                from = to;
            }
            if replaced {
                unread += reopen(&mut ring, feed.path())?;
            }
        }
    };
    super::interrupt::forward_sigterm_to(0);
    let status = status.with_context(|| format!("waiting for {}", command[0]))?;
    // A ring that ends before the command (the agent stopped) still measured most of it,
    // and the command's status is what `energy` exits with: said, not an error.
    let (waited_after, mut notes) = match sample_after(&ring, t1) {
        Ok(waited) => (waited, Vec::new()),
        Err(e) => (
            monotonic_ns().saturating_sub(t1),
            vec![format!(
                "{e:#}: the last sample's reading, {:.1} ms before the command ended, is held over the rest (no error bound)",
                ring.latest()
                    .map_or(0.0, |s| t1.saturating_sub(s.t_ns) as f64 * 1e-6)
            )],
        ),
    };
    let cut = !notes.is_empty();
    notes.extend(unread_note(unread));
    let last = ring.energy(from, t1);
    let energy = done.map_or(last.clone(), |d| {
        d.join(&last, ring.info.slowest_refresh_s())
    });
    Ok(Measured {
        ring,
        energy,
        status,
        waited_ms: (waited_before + waited_after) as f64 * 1e-6,
        notes,
        cut,
    })
}

/// `jpower energy -- CMD ARGS...`: Ctrl-C reaches the command (the terminal sends it to
/// both), a SIGTERM to jpower is passed on to it, and whatever ends it, the board is put
/// back, a failure to start it included.
pub fn energy(target: &Target, a: &EnergyArgs, out: &Output) -> Result<i32> {
    super::interrupt::catch()?;
    let feed = Feed::start(target, &a.sample, "energy")?;
    let measured = measure(&feed, &a.command, out.json);
    let mut notes = feed.finish()?;
    let Measured {
        ring,
        energy: e,
        status,
        waited_ms,
        notes: lacks,
        cut,
    } = measured?;
    notes.extend(lacks);
    let period_ms = ring.info.period_ns as f64 * 1e-6;
    // The bound is one refresh of the power swing the samples saw: with fewer than two
    // samples, or a command shorter than a refresh, no reading measured the command and
    // the swing is unknown, so there is no bound to give.
    let refresh_s = ring.info.slowest_refresh_s();
    let bound = if cut {
        // Said in its note: the held reading's error is unknown.
        None
    } else if e.samples < 2 || e.duration_s < refresh_s {
        notes.push(format!(
            "the command ran {:.1} ms with {} sample(s) inside it, and the sensors refresh every {:.1} ms: its energy is the readings held over it, with no error bound{}",
            e.duration_s * 1e3,
            e.samples,
            refresh_s * 1e3,
            // Advice where it helps: a sample period longer than the refresh is the limit
            // (found by review: --rate 0.1 was told to lower the averaging); else, where
            // the averaging was left as it was (asked for, it changed what it could: an
            // IIO board's refresh is fixed, as its own note says).
            if period_ms * 1e-3 > refresh_s {
                format!("; samples come every {period_ms:.1} ms: a higher --rate takes more")
            } else if a.sample.averaging == "keep" {
                "; use --averaging auto to refresh about every millisecond".to_string()
            } else {
                String::new()
            }
        ));
        None
    } else {
        Some(e.error_bound_j)
    };
    let rails = rails_json(&ring, &e);
    notes.extend(failed_notes(&ring, &e));
    // A command killed by a signal exits as a shell reports it: 128 + the signal.
    let code = status.code().unwrap_or_else(|| {
        128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)
    });
    out.print(
        &json!({"command": a.command, "exit_code": code, "duration_s": e.duration_s, "samples": e.samples,
                "rate_hz": e.rate_hz, "module_j": e.module_j, "mean_module_w": e.mean_module_w,
                "error_bound_j": bound, "waited_ms": waited_ms, "period_ms": period_ms,
                "rails": rails, "notes": notes}),
        || {
            let mut t = format!(
                "\n {}\n\n {:>10.3} s    duration ({} samples at {:.0} Hz)\n {:>10.3} W    mean module power\n {:>10.3} J    module energy ({})\n",
                a.command.join(" "),
                e.duration_s,
                e.samples,
                e.rate_hz,
                e.mean_module_w,
                e.module_j,
                bound.map_or("error unknown: see the note".into(), |b| format!("+/- {b:.3} J: sensor refresh"))
            );
            for (r, j) in ring.info.rails.iter().zip(&e.rails_j) {
                let w = if e.duration_s > 0.0 { j / e.duration_s } else { 0.0 };
                let _ = writeln!(t, " {j:>10.3} J    {} (mean {w:.3} W)", r.name);
            }
            let _ = writeln!(
                t,
                " {waited_ms:>10.1} ms   jpower's wait around the command: for the first sample after it (one every {period_ms:.1} ms)"
            );
            for n in &notes {
                let _ = writeln!(t, " note: {n}");
            }
            t
        },
    )?;
    Ok(code)
}

/// Waits until `ring` holds a sample taken after `t_ns` (the one the energy integral
/// interpolates to at a window's end; with `t_ns` 0, any sample) and returns how long it
/// waited, nanoseconds. That takes at most a period from a live writer; one that publishes
/// nothing for a second more is an error.
fn sample_after(ring: &RingReader, t_ns: u64) -> Result<u64> {
    let start = monotonic_ns();
    let deadline = start.max(t_ns) + ring.info.period_ns + 1_000_000_000;
    while ring.latest().is_none_or(|s| s.t_ns <= t_ns) {
        match ring.writer().map(|l| l.state) {
            Some(WriterState::Closed) => {
                bail!("the ring's writer (pid {}) closed it", ring.writer_pid)
            }
            Some(WriterState::Replaced) => {
                bail!("the ring's writer (pid {}) replaced it", ring.writer_pid)
            }
            _ => {}
        }
        if monotonic_ns() > deadline {
            bail!(
                "the ring's writer (pid {}) published no sample for {:.1} s (one was due every {:.1} ms): it hangs or was killed",
                ring.writer_pid,
                (monotonic_ns() - start) as f64 * 1e-9,
                ring.info.period_ns as f64 * 1e-6
            );
        }
        // A tenth of a period, within 50 us and 1 ms: the wait overshoots the sample by little.
        std::thread::sleep(Duration::from_nanos(
            (ring.info.period_ns / 10).clamp(50_000, 1_000_000),
        ));
    }
    Ok(monotonic_ns() - start)
}

/// What became of a ring's writer: its JSON form and, unless it is live and publishing, a
/// warning for people.
fn writer_report(ring: &RingReader) -> (serde_json::Value, Option<String>) {
    let pid = ring.writer_pid;
    let now = monotonic_ns();
    let life = ring.writer();
    let ago = |t: u64| now.saturating_sub(t) as f64 * 1e-9;
    let (state, warning) = match life.map(|l| l.state) {
        None => (
            "unknown",
            Some("this ring has no writer section (an older jpower wrote it): whether its writer still runs is unknown".to_string()),
        ),
        Some(WriterState::Closed) => (
            "closed",
            Some(format!(
                "the writer (pid {pid}) closed this ring {:.1} s ago: no sample will follow",
                ago(life.map_or(0, |l| l.ended_ns))
            )),
        ),
        Some(WriterState::Replaced) => (
            "replaced",
            Some(format!(
                "a newer ring (generation {}) replaced this one at its path: reopen the path",
                life.map_or(0, |l| l.generation) + 1
            )),
        ),
        Some(WriterState::Other(v)) => (
            "unknown",
            Some(format!("unknown writer state {v} (a newer jpower wrote this ring)")),
        ),
        Some(WriterState::Live) => match ring.silent_ns(now) {
            None => ("live", None),
            Some(quiet) => (
                "gone",
                Some(format!(
                    "the writer (pid {pid}, {}) has published nothing for {:.1} s: it was killed without closing the ring, or hangs",
                    if ring.writer_pid_exists() { "still running" } else { "no longer running" },
                    quiet as f64 * 1e-9
                )),
            ),
        },
    };
    (
        json!({"pid": pid, "generation": life.map(|l| l.generation), "state": state, "warning": warning}),
        warning,
    )
}

use crate::telemetry::ring::WriterState;

/// `jpower ring read`: the latest sample, or `--check` a continuous read; either warns
/// when the ring's writer is gone or replaced.
pub fn ring(cmd: &RingCommand, out: &Output) -> Result<()> {
    let RingCommand::Read { path, check } = cmd;
    let ring = RingReader::open(path)?;
    let Some(seconds) = check else {
        let s = ring.latest();
        let (writer, warning) = writer_report(&ring);
        if let Some(w) = &warning {
            eprintln!("jpower: warning: {}: {w}", path.display());
        }
        return out.print(
            &json!({"board": ring.info.board, "rails": ring.info.rails.iter().map(|r| &r.name).collect::<Vec<_>>(),
                    "writer": writer,
                    "latest": s.map(|s| json!({"n": s.n, "t_ns": s.t_ns, "module_uw": s.module_uw,
                        "rails_uw": s.rails().iter().map(|r| r.power_uw).collect::<Vec<_>>()}))}),
            || match s {
                None => "no sample yet\n".into(),
                Some(s) => format!("sample {}: module {:.3} W\n", s.n, f64::from(s.module_uw) * 1e-6),
            },
        );
    };
    // Verify: every sample read whole keeps its totals and its order.
    let end = monotonic_ns() + (seconds * 1e9) as u64;
    let (mut read, mut torn, mut lost, mut last_t) = (0u64, 0u64, 0u64, 0u64);
    let mut next = ring.write_seq();
    // Between samples, now and then: has the writer stopped, gone quiet or been replaced?
    let quiet_allowed = (4 * ring.info.period_ns).max(1_000_000_000);
    let (mut look, mut progress) = (0u64, monotonic_ns());
    let mut warning = None;
    while monotonic_ns() < end {
        let w = ring.write_seq();
        if w <= next {
            let now = monotonic_ns();
            if now >= look {
                look = now + 100_000_000;
                warning = match ring.writer().map(|l| l.state) {
                    Some(WriterState::Live) | None if now - progress > quiet_allowed => Some(format!(
                        "the writer (pid {}) has published nothing for {:.1} s: it was killed without closing the ring, or hangs",
                        ring.writer_pid,
                        (now - progress) as f64 * 1e-9
                    )),
                    Some(WriterState::Live) | None => None,
                    Some(_) => writer_report(&ring).1,
                };
                if warning.is_some() {
                    break;
                }
            }
            std::hint::spin_loop();
            continue;
        }
        progress = monotonic_ns();
        if w - next > u64::from(ring.info.slot_count) {
            lost += w - next - u64::from(ring.info.slot_count);
            next = w - u64::from(ring.info.slot_count);
        }
        match ring.sample(next) {
            Ok(s) => {
                read += 1;
                let sum = (0..s.rail_count)
                    .filter(|r| ring.info.module_mask & (1 << r) != 0)
                    .map(|r| u64::from(s.rails[r].power_uw))
                    .sum::<u64>();
                let total = match ring.info.input_rail {
                    Some(i) => u64::from(s.rails[i].power_uw),
                    None => sum,
                };
                if total != u64::from(s.module_uw) || s.t_ns < last_t || s.n != next {
                    torn += 1;
                }
                last_t = s.t_ns;
            }
            Err(_) => lost += 1,
        }
        next += 1;
    }
    if let Some(w) = &warning {
        eprintln!("jpower: warning: {}: {w}", path.display());
    }
    // Torn samples are an error: --json prints the error's one object, the text the
    // counts first.
    if torn == 0 || !out.json {
        out.print(
            &json!({"read": read, "torn": torn, "lost": lost, "writer_warning": warning}),
            || format!("read {read} samples: {torn} torn, {lost} lost\n"),
        )?;
    }
    if torn > 0 {
        bail!("{torn} torn samples of {read} read ({lost} lost)");
    }
    Ok(())
}
