//! `jpower sim nvpmodel -m N` and `jpower sim jetson-clocks`: changes behind jpower's back
//! on a simulated board, made the way NVIDIA's tools make them on a Jetson (`nvpmodel`
//! also records the mode in its status file, `/var/lib/nvpmodel/status`).
//!
//! Like the real tools they write the board's attributes directly, through the simulated
//! kernel (so its rules apply: tables, clamping or `EINVAL`, min/max order), without
//! jpower's baseline, journal or lease: to a running agent, and to any later jpower
//! command, they are outside changes (`external_change` events, kept by restores).
//!
//! `jpower sim load` sets what the simulated board is busy with, as training a workload at
//! its running clocks loads it, and prints one minibatch's simulated time: a program that
//! trains on a simulated board (the Flower fleet simulation) paces itself by it.
//!
//! `jpower sim truth` prints a ground-truth profile of a board modelled unlike the
//! simulator ([`crate::sim::truth`]), to replay with `--truth`.

use super::{Output, Target};
use crate::board::{Board, Values};
use crate::control::plan;
use anyhow::{Context, Result};

/// Opens the `--sim` board without taking control of it (no recovery, no state file).
fn board(target: &Target, tool: &str) -> Result<Board> {
    anyhow::ensure!(
        target.sim.is_some(),
        "`jpower sim {tool}` changes a simulated board: pass --sim BOARD (on a Jetson, run NVIDIA's own tool)"
    );
    let (root, _sim) = target.root()?;
    Ok(Board::discover(root)?)
}

/// Writes `t` over what the board holds now, in an order that keeps every min <= max, as
/// the tools do; returns the writes made.
fn write(board: &Board, t: &Values) -> Result<usize> {
    let cur = board.read_knobs()?;
    let steps = plan::plan(board, &cur, t);
    for s in &steps {
        board.knobs[s.knob].write(s.value)?;
    }
    Ok(steps.len())
}

/// `jpower sim nvpmodel -m N`: preset N of the board's `/etc/nvpmodel.conf`.
pub fn nvpmodel(target: &Target, id: u32, out: &Output) -> Result<()> {
    let board = board(target, "nvpmodel")?;
    let presets = target
        .presets(&board)?
        .context("the simulated board has no nvpmodel file")?;
    let preset = presets.find(&id.to_string())?;
    let cur = board.read_knobs()?;
    let t = plan::target(&board, &preset.mode, &cur)?;
    let writes = write(&board, &t)?;
    // As NVIDIA's tool does: what `nvpmodel -q` reports, and what the next boot applies.
    let status = board.root.path(crate::board::paths::NVPMODEL_STATUS);
    std::fs::write(&status, format!("pmode:{:04}\n", preset.id))
        .with_context(|| format!("writing {}", status.display()))?;
    out.print(
        &serde_json::json!({"id": preset.id, "preset": preset.name, "writes": writes}),
        || {
            format!(
                "nvpmodel -m {} ({}): {writes} write(s) through the simulated kernel\n",
                preset.id, preset.name
            )
        },
    )
}

/// `jpower sim jetson-clocks`: every online cluster's and the GPU's min raised to its max
/// (the mode's ceiling, as `jetson_clocks` does; the EMC cap stays).
pub fn jetson_clocks(target: &Target, out: &Output) -> Result<()> {
    let board = board(target, "jetson-clocks")?;
    let cur = board.read_knobs()?;
    let mut t = cur.clone();
    for c in &board.clusters {
        t[c.min] = t[c.max];
    }
    if let Some(g) = &board.gpu {
        t[g.min] = t[g.max];
    }
    plan::keep_offline_clusters(&board, &cur, &mut t);
    let writes = write(&board, &t)?;
    out.print(&serde_json::json!({"writes": writes}), || {
        format!("jetson_clocks: {writes} write(s) through the simulated kernel\n")
    })
}

/// `jpower sim load [--workload W]`: the board loaded as one minibatch of `W` loads it at
/// the running clocks (idle without `W`); prints the minibatch's noise-free time and the
/// board's true module power under that load.
pub fn load(target: &Target, workload: Option<&str>, out: &Output) -> Result<()> {
    use crate::sim::kernel::LoadState;
    anyhow::ensure!(
        target.sim.is_some(),
        "`jpower sim load` loads a simulated board: pass --sim BOARD"
    );
    let (root, sim) = target.root()?;
    let sim = sim.context("the --sim board did not open")?;
    let board = Board::discover(root)?;
    let minibatch = match workload {
        None => {
            sim.set_load(LoadState::default())?;
            None
        }
        Some(name) => {
            let w = super::train_modes::workload(name)?;
            // Busy first, so the GPU's devfreq governor has picked its clock under load.
            sim.set_load(LoadState::TRAINING)?;
            let t = crate::sim::workload::truth(sim.spec().silicon, w, &sim.operating()?);
            sim.set_load(LoadState {
                cpu: t.load.cpu,
                gpu: t.load.gpu,
                emc: t.load.emc,
            })?;
            Some(t.time_ms / 1e3)
        }
    };
    let rails = sim.true_rail_watts()?;
    let module_w: f64 = board
        .totals
        .module
        .iter()
        .filter_map(|&i| rails.get(i))
        .sum();
    out.print(
        &serde_json::json!({"workload": workload, "minibatch_s": minibatch, "module_w": module_w}),
        || match minibatch {
            Some(s) => format!(
                "{}: {:.1} ms per minibatch at the running clocks, module {module_w:.2} W\n",
                workload.unwrap_or_default(),
                s * 1e3
            ),
            None => format!("idle: module {module_w:.2} W\n"),
        },
    )
}

/// `jpower sim truth --kind K --board B --seed S [--limit W]`: the profile as CSV on stdout;
/// with `--json`, what was asked and the rows as objects keyed by the CSV's columns.
pub fn truth(
    kind: &str,
    board: &str,
    seed: u64,
    limit: Option<f64>,
    out: &super::Output,
) -> Result<()> {
    use crate::sim::truth::{self, Kind};
    let kind = Kind::from_name(kind).with_context(|| format!("unknown truth kind {kind:?}"))?;
    let spec = crate::sim::spec::find(board)
        .with_context(|| format!("unknown board {board:?}: {}", crate::sim::spec::names()))?;
    if limit.is_some() && kind != Kind::Throttle {
        return Err(super::usage(
            "--limit is the power limit of --kind throttle",
        ));
    }
    if !limit.is_none_or(|w| w.is_finite() && w > 0.0) {
        return Err(super::usage("--limit must be a positive number of watts"));
    }
    let rows = truth::rows(kind, spec, seed, limit).with_context(|| {
        format!("the truths model the AGX boards (orin-agx, xavier-agx), not {board}")
    })?;
    let csv = crate::predict::profile::write_csv(&rows);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let modes: Vec<serde_json::Map<String, serde_json::Value>> = lines
        .map(|line| {
            (header.iter().zip(line.split(',')))
                .map(|(k, v)| {
                    let number = (v.parse::<u64>().map(serde_json::Value::from))
                        .or_else(|_| v.parse::<f64>().map(serde_json::Value::from));
                    (k.to_string(), number.unwrap_or_else(|_| v.into()))
                })
                .collect()
        })
        .collect();
    // The limit the rows were computed at, the default included.
    let limit_w = (kind == Kind::Throttle)
        .then(|| limit.or_else(|| truth::default_limit_w(spec)))
        .flatten();
    let value = serde_json::json!({
        "kind": kind.name(), "board": spec.id(), "seed": seed, "limit_w": limit_w, "modes": modes,
    });
    out.print(&value, || csv)
}
