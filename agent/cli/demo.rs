//! `jpower demo`: the README's main job. On a simulated Orin AGX by default: discover the
//! board, list its presets, start 1 kHz telemetry, switch through a few modes under a
//! training-like load and show power and energy respond, then restore the baseline.

use super::{modes::summary, status, Output, Target};
use crate::board::ina3221;
use crate::control::mode::{Mode, ModeSpace};
use crate::sim::kernel::LoadState;
use crate::support::clock::monotonic_ns;
use crate::telemetry::ring::RingReader;
use crate::telemetry::sampler::SamplerConfig;
use crate::telemetry::Telemetry;
use anyhow::Result;
use serde_json::json;
use std::fmt::Write;
use std::time::Duration;

/// Arguments of `jpower demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The simulated board to use when neither --sim nor --root is given.
    #[arg(long, default_value = "orin-agx")]
    pub board: String,
}

/// `jpower demo`.
pub fn run(target: &Target, a: &Args, out: &Output) -> Result<()> {
    let mut target = target.clone();
    if target.sim.is_none() && target.root.is_none() {
        target.sim = Some(a.board.clone());
    }
    let snap = status::collect(&target)?;
    let (mut c, sim) = target.open()?;
    let mut text = String::new();
    let _ = writeln!(text, "== discover\n{}", status::text(&snap));

    let presets = target.presets(c.board())?;
    let space = ModeSpace::of(c.board());
    let _ = writeln!(text, "== presets and mode space");
    let mut tour: Vec<(String, Mode)> = Vec::new();
    if let Some(p) = &presets {
        for pr in &p.presets {
            let _ = writeln!(text, "  {:>2} {:<16} {}", pr.id, pr.name, summary(&pr.mode));
            tour.push((pr.name.clone(), pr.mode.clone()));
        }
    }
    let _ = writeln!(text, "  mode space: {} pinned modes", space.len());
    if let (Some(lowest), Some(highest)) = (space.get(0), space.get(space.len().saturating_sub(1)))
    {
        tour.push(("lowest pinned".into(), lowest.to_mode(c.board())));
        tour.push(("highest pinned".into(), highest.to_mode(c.board())));
    }

    // Telemetry: the INA3221 averaging lowered to refresh at 1 kHz, a sampler into the ring.
    let fast = ina3221::averaging_target(c.board(), c.current(), 1000);
    c.apply_values(&fast)?;
    let cfg = SamplerConfig {
        rate_hz: Some(1000.0),
        ..SamplerConfig::default()
    };
    let telemetry = Telemetry::start(
        c.board(),
        c.current(),
        &crate::telemetry::ring_path(&target.runtime_dir(), &c.board().key()),
        &cfg,
    )?;
    let ring = RingReader::open(&telemetry.path)?;
    let _ = writeln!(
        text,
        "\n== telemetry: {} rails at 1 kHz into {}",
        ring.info.rails.len(),
        telemetry.path.display()
    );
    let _ = writeln!(text, "  ({})", ina3221::NOISE_NOTE);
    // A mode's power is in every reading two refreshes after its switch: the first
    // refresh after it may average the modes on either side. Each mode is then read for
    // 300 ms, or two refreshes where the sensors are slower (L4T 32's IIO driver
    // refreshes every few hundred ms, whatever the averaging).
    let refresh = Duration::from_secs_f64(ring.info.slowest_refresh_s());
    let settle = Duration::from_millis(50) + 2 * refresh;
    let window = Duration::from_millis(300).max(2 * refresh);
    if refresh > Duration::from_millis(10) {
        let _ = writeln!(
            text,
            "  (the slowest rail refreshes every {:.0} ms: each mode settles {:.2} s and is read for {:.2} s)",
            refresh.as_secs_f64() * 1e3,
            settle.as_secs_f64(),
            window.as_secs_f64()
        );
    }
    if let Some(sim) = &sim {
        sim.set_load(LoadState::TRAINING)?;
        let _ = writeln!(
            text,
            "\n== switching under a training-like load (CPU 50%, GPU 90%, EMC 60%)"
        );
    } else {
        let _ = writeln!(text, "\n== switching");
    }
    let _ = writeln!(
        text,
        "  {:<16} {:>6} {:>10} {:>9} {:>9} {:>7}  mode",
        "mode", "writes", "switch", "module", "energy", "samples"
    );
    let mut rows = Vec::new();
    for (name, mode) in &tour {
        let sw = c.apply(mode)?;
        std::thread::sleep(settle);
        let t0 = monotonic_ns();
        std::thread::sleep(window);
        let e = ring.energy(t0, monotonic_ns());
        let us = sw.elapsed_ns as f64 / 1000.0;
        let _ = writeln!(
            text,
            "  {name:<16} {:>6} {:>8.1}us {:>7.2} W {:>7.3} J {:>7}  {}",
            sw.steps.len(),
            us,
            e.mean_module_w,
            e.module_j,
            e.samples,
            summary(mode)
        );
        rows.push(json!({"mode": name, "writes": sw.steps.len(), "switch_us": us,
                         "module_mw": (e.mean_module_w * 1000.0) as u64, "energy_j": e.module_j, "samples": e.samples}));
    }
    drop(telemetry);
    if sim.is_some() {
        let _ = writeln!(text, "  (switch times include the simulator's kernel model; `jpower bench switch` measures jpower alone)");
    }
    c.restore()?;
    if let Some(sim) = &sim {
        sim.set_load(LoadState::default())?;
    }
    let _ = writeln!(
        text,
        "\n== restored the baseline; the board is as it was found"
    );
    out.print(
        &json!({"status": snap, "presets": presets, "space_size": space.len(), "tour": rows,
                "settle_s": settle.as_secs_f64(), "window_s": window.as_secs_f64()}),
        || text,
    )
}
