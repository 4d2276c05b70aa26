//! `jpower switch-cost`: measures what a switch of each knob costs on the board, in time
//! ([`crate::control::settle`]) and in energy, and keeps it in the board's profile, where
//! `jpower schedule` finds the cost of a per-phase switch.
//!
//! Energy: the rails are sampled at 1 kHz (the INA3221 averaging lowered, as `jpower demo`
//! does) while the board holds the knob's top end for [`ENERGY_WINDOW`], then its lower
//! end as long, then switches between the two every [`ENERGY_PERIOD`] as long. What the
//! switching window draws beyond what each end draws held, over its switches, is one
//! switch's energy; the sensor's error bound over the windows, over the switches, is its
//! resolution; the switching window runs on until the sensor has caught up, so that what
//! its lag shifts stays inside. Where the sensors refresh slower than the switching (an
//! IIO board's fixed averaging), their readings sample the switching instead of averaging
//! it, and the energy is not measured (the output says why).

use super::{Output, Target};
use crate::board::ina3221;
use crate::control::settle::{self, Knob, SwitchCosts};
use crate::control::Controller;
use crate::sim::kernel::LoadState;
use crate::support::clock::monotonic_ns;
use crate::telemetry::ring::RingReader;
use crate::telemetry::sampler::SamplerConfig;
use crate::telemetry::Telemetry;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long each of the three energy windows lasts.
pub const ENERGY_WINDOW: Duration = Duration::from_millis(600);
/// How long each end is held while switching for the energy window.
pub const ENERGY_PERIOD: Duration = Duration::from_millis(20);

/// Arguments of `jpower switch-cost`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Switches timed each way per knob.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeats: u32,
    /// Measure only these knobs (gpu, emc, cpu, cores) [default: every one the board lets
    /// jpower set].
    #[arg(long = "knob", value_name = "KNOB", value_parser = knob)]
    pub knobs: Vec<Knob>,
    /// Print the costs without keeping them in the board's profile.
    #[arg(long)]
    pub no_save: bool,
}

/// `jpower switch-cost`.
pub fn run(target: &Target, a: &Args, out: &Output) -> Result<()> {
    let knobs = if a.knobs.is_empty() {
        Knob::ALL.to_vec()
    } else {
        a.knobs.clone()
    };
    if target.agent()?.is_some() {
        bail!("an agent serves this board: stop it first (systemctl stop jpower), since a switch timed through its socket would time the socket too");
    }
    super::interrupt::catch()?;
    let (mut c, sim) = target.open()?;
    // The load a schedule switches under (on a board, whatever runs now).
    if let Some(sim) = &sim {
        sim.set_load(LoadState::TRAINING)?;
    }
    // A mode held (`jpower set`) is put back as it was, not the baseline under it.
    let result = super::telemetry::Restore::begin(&mut c, "switch-cost").and_then(|restore| {
        let measured = measure_all(target, &mut c, &knobs, a.repeats);
        restore.put_back(&mut c)?;
        measured
    });
    if let Some(sim) = &sim {
        sim.set_load(LoadState::default())?;
    }
    let Measurement {
        costs,
        skipped,
        energy_note,
    } = result?;
    let path = SwitchCosts::path(c.board());
    if !a.no_save {
        costs
            .save(&path)
            .with_context(|| format!("keeping the profile in {}", path.display()))?;
    }
    let saved = (!a.no_save).then(|| path.display().to_string());
    out.print(
        &json!({"costs": costs_json(&costs)?, "skipped": skipped, "energy_note": energy_note, "profile": saved}),
        || text(&costs, &skipped, energy_note.as_deref(), saved.as_deref()),
    )
}

/// What one `switch-cost` measured.
struct Measurement {
    costs: SwitchCosts,
    /// The knobs not measured, with why.
    skipped: Vec<(Knob, &'static str)>,
    /// Why no energy was measured, where it was not.
    energy_note: Option<String>,
}

/// Every knob's cost.
fn measure_all(
    target: &Target,
    c: &mut Controller,
    knobs: &[Knob],
    repeats: u32,
) -> Result<Measurement> {
    let fast = ina3221::averaging_target(c.board(), c.current(), 1000);
    c.apply_values(&fast)?;
    // A reading shows a change within the conversion under way and the next one.
    let refresh = Duration::from_micros(
        (0..c.board().ina.len())
            .map(|chip| u64::from(ina3221::refresh_us(c.board(), chip, c.current())))
            .max()
            .unwrap_or(0),
    );
    let energy_note = (refresh > ENERGY_PERIOD).then(|| {
        format!(
            "energy not measured: the sensors refresh every {:.0} ms, slower than the {} ms between switches, so their readings sample the switching rather than average it",
            refresh.as_secs_f64() * 1e3,
            ENERGY_PERIOD.as_millis()
        )
    });
    let telemetry = Telemetry::start(
        c.board(),
        c.current(),
        &crate::telemetry::ring_path(&target.runtime_dir(), &c.board().key()),
        &SamplerConfig {
            rate_hz: Some(1000.0),
            ..SamplerConfig::default()
        },
    )?;
    let ring = RingReader::open(&telemetry.path)?;
    let mut measured = Vec::new();
    let mut skipped = Vec::new();
    for &knob in knobs {
        if let Some(why) = settle::unmeasurable(c.board(), knob) {
            skipped.push((knob, why));
            continue;
        }
        super::interrupt::check()?;
        eprintln!("switch-cost: {} ...", knob.name());
        let mut cost = settle::measure(c, knob, repeats)?;
        if energy_note.is_none() {
            let (energy, resolution) = switch_energy(c, &ring, knob, 2 * refresh)?;
            (cost.energy_j, cost.energy_resolution_j) = (Some(energy), Some(resolution));
        }
        measured.push(cost);
    }
    drop(telemetry);
    let costs = SwitchCosts {
        version: settle::VERSION,
        board: c.board().identity.model.clone(),
        measured_unix_s: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        repeats,
        knobs: measured,
    };
    Ok(Measurement {
        costs,
        skipped,
        energy_note,
    })
}

/// One switch's energy and the resolution of that figure, joules (module docs); `lag`
/// is how long the sensors take to show a change.
fn switch_energy(
    c: &mut Controller,
    ring: &RingReader,
    knob: Knob,
    lag: Duration,
) -> Result<(f64, f64)> {
    let modes = settle::ends(c.board(), knob).map(|m| m.to_mode(c.board()));
    let mut hold = |i: usize| -> Result<crate::telemetry::energy::Energy> {
        c.apply(&modes[i])?;
        std::thread::sleep(settle::HOLD.max(lag));
        let t0 = monotonic_ns();
        std::thread::sleep(ENERGY_WINDOW);
        Ok(ring.energy(t0, monotonic_ns()))
    };
    let held = [hold(0)?, hold(1)?];
    let held_w = held.each_ref().map(|e| e.mean_module_w);
    // From the lower end held: each period holds the other end, top first, and is charged
    // at what that end draws held; the last returns to the lower end, and the window runs
    // on while the sensor catches up, so what its lag shifts stays inside.
    let t0 = monotonic_ns();
    let (mut switches, mut expected_j, mut at) = (0u32, 0.0, t0);
    while at - t0 < ENERGY_WINDOW.as_nanos() as u64 || switches % 2 == 1 {
        let end = (switches % 2) as usize;
        c.apply(&modes[end])?;
        std::thread::sleep(ENERGY_PERIOD);
        let next = monotonic_ns();
        expected_j += held_w[end] * (next - at) as f64 * 1e-9;
        (switches, at) = (switches + 1, next);
    }
    std::thread::sleep(lag);
    let end = monotonic_ns();
    expected_j += held_w[1] * (end - at) as f64 * 1e-9;
    let drawn = ring.energy(t0, end);
    let held_bound = held
        .iter()
        .map(|e| e.error_bound_j / e.duration_s.max(1e-9))
        .sum::<f64>()
        / 2.0
        * drawn.duration_s;
    let n = f64::from(switches);
    Ok((
        (drawn.module_j - expected_j) / n,
        (drawn.error_bound_j + held_bound) / n,
    ))
}

fn ms(t: Option<settle::Times>) -> String {
    t.map_or("-".into(), |t| {
        format!("{:.3}/{:.3}/{:.3}", t.median_ms, t.p90_ms, t.max_ms)
    })
}

/// A `--knob` name.
fn knob(name: &str) -> Result<Knob, String> {
    Knob::from_name(name).ok_or_else(|| "one of gpu, emc, cpu, cores".to_string())
}

/// The profile as `--json` gives it: each knob's two ends under a key with their unit, as
/// every JSON output's keys carry theirs (`between_cores`; `between_khz` for the CPU,
/// cpufreq's unit; `between_hz` for the GPU and EMC). The file keeps its own form.
fn costs_json(costs: &SwitchCosts) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(costs)?;
    for (k, j) in costs
        .knobs
        .iter()
        .zip(v["knobs"].as_array_mut().into_iter().flatten())
    {
        let (key, per) = match k.knob {
            Knob::Cores => ("between_cores", 1),
            Knob::Cpu => ("between_khz", 1000),
            Knob::Gpu | Knob::Emc => ("between_hz", 1),
        };
        if let Some(o) = j.as_object_mut() {
            o.remove("between");
            o.insert(key.into(), json!(k.between.map(|b| b / per)));
        }
    }
    Ok(v)
}

fn text(
    costs: &SwitchCosts,
    skipped: &[(Knob, &str)],
    energy_note: Option<&str>,
    saved: Option<&str>,
) -> String {
    let mut t = format!(
        "switch costs of {} ({} switches each way per knob; ms from the write to the clock settled, median/p90/longest)\n",
        costs.board, costs.repeats
    );
    let _ = writeln!(
        t,
        "  {:<6} {:>24} {:>26} {:>26} {:>10} {:>16}",
        "knob", "between", "down ms", "up ms", "unsettled", "energy mJ"
    );
    for k in &costs.knobs {
        let between = match k.knob {
            Knob::Cores => format!("{} - {} cores", k.between[1], k.between[0]),
            _ => format!(
                "{:.0} - {:.0} MHz",
                k.between[1] as f64 / 1e6,
                k.between[0] as f64 / 1e6
            ),
        };
        let _ = writeln!(
            t,
            "  {:<6} {:>24} {:>26} {:>26} {:>10} {:>16}{}",
            k.knob.name(),
            between,
            ms(k.down),
            ms(k.up),
            k.unsettled,
            match (k.energy_j, k.energy_resolution_j) {
                (Some(e), Some(r)) => format!("{:.1} +- {:.1}", e * 1e3, r * 1e3),
                _ => "-".into(),
            },
            if k.moves_clock || k.knob == Knob::Cores {
                ""
            } else {
                "  (its running clock did not move: the writes' time only)"
            }
        );
    }
    for (k, why) in skipped {
        let _ = writeln!(t, "  {:<6} not measured: {why}", k.name());
    }
    if let Some(note) = energy_note {
        let _ = writeln!(t, "{note}");
    }
    match costs.fast_switch_ms() {
        Some(ms) => {
            let _ = writeln!(
                t,
                "a per-phase switch of the GPU and EMC clocks costs {ms:.3} ms (p90; `jpower schedule` uses it)"
            );
        }
        None => t.push_str(
            "no per-phase switch cost: the GPU's running clock was not seen to move (`jpower schedule` keeps its assumption)\n",
        ),
    }
    match saved {
        Some(p) => {
            let _ = writeln!(t, "kept in the board's profile: {p}");
        }
        None => t.push_str("not kept (--no-save)\n"),
    }
    t
}

/// The board's profile for `jpower schedule`: the fast switch time measured on the board
/// `target` names, with where it was read, if `jpower switch-cost` kept one.
pub fn measured_fast_switch(target: &Target) -> Result<Option<(f64, String)>> {
    let (root, _sim) = target.root()?;
    let board = crate::board::Board::discover(root)?;
    let path = SwitchCosts::path(&board);
    Ok(SwitchCosts::load(&path)?
        .and_then(|c| c.fast_switch_ms())
        .map(|ms| (ms, path.display().to_string())))
}
