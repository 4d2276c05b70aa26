//! `jpower pagoda eval`: the calibrated inference planner scored on a simulated board, for
//! each zoo model and batch size, against the exhaustive optimum of the board's own truth
//! ([`crate::predict::pagoda::eval`]); and the error of the rooflines interpolated over the
//! clocks against the rooflines measured at every (GPU, EMC) pair.

use super::{Output, Target};
use crate::control::mode::{ModeSpace, PinnedMode};
use crate::gpu::roofline::Precision;
use crate::predict::pagoda::calibrate::{roofline_modes, top, KnobRooflines};
use crate::predict::pagoda::eval::{evaluate, Outcome};
use crate::predict::pagoda::zoo;
use crate::sim::sources::{modelled_rooflines, InferenceSource};
use crate::sim::spec::{self, BoardSpec};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;

/// Arguments of `jpower pagoda eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// A CI-sized run: ResNet-50, MobileNetV3-Large and the LSTM at batches 1 and 16, on
    /// every fourth core count and CPU clock and every third GPU clock.
    #[arg(long)]
    pub quick: bool,
    /// The latency bound as a slowdown against the top mode.
    #[arg(allow_negative_numbers = true, long, value_name = "FRACTION", default_value_t = 0.05, value_parser = super::bounds::slowdown)]
    pub slowdown: f64,
    /// Forward passes averaged on each calibration mode.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// The simulated measurements' noise: each case draws from its own stream of this seed.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
}

/// `jpower pagoda eval`.
pub fn eval(target: &Target, a: &EvalArgs, out: &Output) -> Result<()> {
    let Some(board) = &target.sim else {
        bail!("pagoda eval scores against a simulated board's truth: name one with --sim BOARD");
    };
    let spec = spec::find(board).with_context(|| format!("unknown simulated board {board:?}"))?;
    let full = spec.mode_space();
    let space = if a.quick { thin(&full) } else { full.clone() };
    let sampled = roofline_modes(&full);
    let rooflines = KnobRooflines::fit(&modelled_rooflines(spec, &sampled))?;
    let interpolation = interpolation_error(spec, &full, &rooflines, sampled.len());
    let (models, batches): (&[&str], &[u64]) = if a.quick {
        (&["resnet50", "mobilenetv3-large", "lstm"], &[1, 16])
    } else {
        (&zoo::NAMES, &[1, 4, 16, 64])
    };
    let total = models.len() * batches.len();
    let mut cases: Vec<Outcome> = Vec::new();
    for model in models {
        for &batch in batches {
            if !out.json {
                eprint!(
                    "\r[{}/{total}] {model} batch {batch}        ",
                    cases.len() + 1
                );
            }
            let report =
                zoo::get(model)
                    .expect("zoo names are models")
                    .count(batch, Precision::F32, false);
            let mut source =
                InferenceSource::new(spec, &report, a.seed * 1000 + cases.len() as u64);
            cases.push(evaluate(
                &report,
                &mut source,
                &space,
                rooflines,
                a.runs,
                a.slowdown,
            ));
        }
    }
    if !out.json {
        eprintln!();
    }
    let worst = |f: fn(&Outcome) -> f64| cases.iter().map(f).fold(0.0, f64::max);
    let count = |f: &dyn Fn(&Outcome) -> bool| cases.iter().filter(|c| f(c)).count();
    let kept = |c: &Outcome| c.latency_change <= a.slowdown;
    let summary = serde_json::json!({
        "cases": cases.len(),
        "on_target": count(&|c| kept(c) && c.gap <= GAP_TARGET),
        "bound_kept": count(&kept),
        "latency_mape_on_target": count(&|c| c.latency_mape <= LATENCY_MAPE_TARGET),
        "max_gap": worst(|c| c.gap),
        "max_latency_mape": worst(|c| c.latency_mape),
        "max_energy_mape": worst(|c| c.energy_mape),
        "max_latency_change": worst(|c| c.latency_change),
        "max_saving": worst(|c| c.saving),
    });
    let value = serde_json::json!({
        "board": spec.id(),
        "simulated": true,
        "quick": a.quick,
        "slowdown": a.slowdown,
        "modes": space.len(),
        "reference": top(&space),
        "calibration_runs_per_mode": a.runs,
        "roofline_modes": sampled,
        "interpolation": interpolation,
        "cases": cases,
        "summary": summary,
    });
    out.print(&value, || text(spec, &space, &value, &cases))
}

/// The targets: the plan's energy within 2% of the exhaustive optimum's, the
/// latency MAPE over every mode at most 10%.
const GAP_TARGET: f64 = 0.02;
const LATENCY_MAPE_TARGET: f64 = 0.10;

/// Every `step`-th value of `values` counted down from the largest (which is kept).
fn every(values: &[u64], step: usize) -> Vec<u64> {
    let mut v: Vec<u64> = values.iter().rev().step_by(step).copied().collect();
    v.reverse();
    v
}

/// The `--quick` grid: every fourth core count and CPU clock, every third GPU clock, all
/// EMC clocks, each from the top.
fn thin(s: &ModeSpace) -> ModeSpace {
    let sorted = |v: Vec<u64>| {
        let mut v = v;
        v.sort_unstable();
        v
    };
    let cores = sorted(s.cores.iter().map(|&c| u64::from(c)).collect());
    ModeSpace {
        cores: every(&cores, 4).into_iter().map(|c| c as u32).collect(),
        cpu_hz: every(&sorted(s.cpu_hz.clone()), 4),
        gpu_hz: every(&sorted(s.gpu_hz.clone()), 3),
        emc_hz: s.emc_hz.clone(),
    }
}

/// The interpolated rooflines against those measured at every (GPU, EMC) pair: mean and
/// largest relative error of each term.
fn interpolation_error(
    spec: &BoardSpec,
    s: &ModeSpace,
    fit: &KnobRooflines,
    fitted_from: usize,
) -> serde_json::Value {
    let t = top(s);
    let pairs: Vec<PinnedMode> = s
        .gpu_hz
        .iter()
        .flat_map(|&g| {
            s.emc_hz.iter().map(move |&e| PinnedMode {
                gpu_hz: g,
                emc_hz: e,
                ..t
            })
        })
        .collect();
    let measured = modelled_rooflines(spec, &pairs);
    let mut terms = serde_json::Map::new();
    let names = [
        "peak_f32_flops",
        "peak_bytes_per_s",
        "eps_flop_j",
        "eps_byte_j",
        "pi0_w",
    ];
    for (k, name) in names.iter().enumerate() {
        let errors: Vec<f64> = measured
            .modes
            .iter()
            .map(|m| {
                let i = fit.at(m.gpu_hz.unwrap_or(0.0), m.emc_hz.unwrap_or(0.0));
                let pick = |r: &crate::predict::pagoda::plan::ModeRoofline| {
                    [
                        r.time.peak_f32_flops,
                        r.time.peak_bytes_per_s,
                        r.energy.eps_flop_j,
                        r.energy.eps_byte_j,
                        r.energy.pi0_w,
                    ][k]
                };
                (pick(&i) / pick(m) - 1.0).abs()
            })
            .collect();
        terms.insert(
            (*name).into(),
            serde_json::json!({
                "mean": errors.iter().sum::<f64>() / errors.len().max(1) as f64,
                "max": errors.iter().copied().fold(0.0, f64::max),
            }),
        );
    }
    serde_json::json!({"pairs": pairs.len(), "fitted_from": fitted_from, "relative_error": terms})
}

fn mode_label(m: &PinnedMode) -> String {
    format!(
        "{}c {:.0}/{:.0}/{:.0}",
        m.cores,
        m.cpu_hz as f64 / 1e6,
        m.gpu_hz as f64 / 1e6,
        m.emc_hz as f64 / 1e6
    )
}

fn text(spec: &BoardSpec, space: &ModeSpace, v: &serde_json::Value, cases: &[Outcome]) -> String {
    let pct = |x: f64| format!("{:+.1}%", 100.0 * x);
    let mut t = format!(
        "SIMULATED {}: {} modes, reference {} (cores CPU/GPU/EMC MHz); 5 calibration modes x {} runs each\n{:<18} {:>5} {:<24} {:>8} {:>8} {:>8} {:>7} {:>8} {:>8}\n",
        spec.id(),
        space.len(),
        mode_label(&top(space)),
        v["calibration_runs_per_mode"],
        "model",
        "batch",
        "planned mode",
        "saved",
        "latency",
        "optimum",
        "gap",
        "lat MAPE",
        "E MAPE"
    );
    for c in cases {
        let _ = writeln!(
            t,
            "{:<18} {:>5} {:<24} {:>8} {:>8} {:>8} {:>7} {:>7.1}% {:>7.1}%",
            c.model,
            c.batch,
            mode_label(&c.planned),
            pct(c.saving),
            pct(c.latency_change),
            pct(c.optimum_saving),
            pct(c.gap),
            100.0 * c.latency_mape,
            100.0 * c.energy_mape
        );
    }
    let s = &v["summary"];
    let _ = writeln!(
        t,
        "on target: {} of {} plans within 2% of the optimum with the bound kept; {} keep the bound; {} with latency MAPE <= 10%",
        s["on_target"], s["cases"], s["bound_kept"], s["latency_mape_on_target"]
    );
    let f = |k: &str| 100.0 * s[k].as_f64().unwrap_or(f64::NAN);
    let _ = writeln!(
        t,
        "worst: gap {:.1}% (target 2%), latency MAPE {:.1}% (target 10%), energy MAPE {:.1}%, latency change {:+.1}%",
        f("max_gap"),
        f("max_latency_mape"),
        f("max_energy_mape"),
        f("max_latency_change")
    );
    let i = &v["interpolation"]["relative_error"];
    let _ = writeln!(
        t,
        "rooflines interpolated from {} (GPU, EMC) modes, against all {}: mean (max) error peak {:.1}% ({:.1}%), bandwidth {:.1}% ({:.1}%), eps_flop {:.1}% ({:.1}%), eps_byte {:.1}% ({:.1}%), pi0 {:.1}% ({:.1}%)",
        v["interpolation"]["fitted_from"],
        v["interpolation"]["pairs"],
        100.0 * i["peak_f32_flops"]["mean"].as_f64().unwrap_or(0.0),
        100.0 * i["peak_f32_flops"]["max"].as_f64().unwrap_or(0.0),
        100.0 * i["peak_bytes_per_s"]["mean"].as_f64().unwrap_or(0.0),
        100.0 * i["peak_bytes_per_s"]["max"].as_f64().unwrap_or(0.0),
        100.0 * i["eps_flop_j"]["mean"].as_f64().unwrap_or(0.0),
        100.0 * i["eps_flop_j"]["max"].as_f64().unwrap_or(0.0),
        100.0 * i["eps_byte_j"]["mean"].as_f64().unwrap_or(0.0),
        100.0 * i["eps_byte_j"]["max"].as_f64().unwrap_or(0.0),
        100.0 * i["pi0_w"]["mean"].as_f64().unwrap_or(0.0),
        100.0 * i["pi0_w"]["max"].as_f64().unwrap_or(0.0),
    );
    t
}
