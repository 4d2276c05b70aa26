//! `jpower plan-inference --calibrate`: the model itself measured on five modes of a
//! simulated board by its inference model, or of any board through the agent from the
//! minibatch markers of the user's inference program (`--markers`;
//! [`crate::predict::live::MarkerSource`]) ([`crate::predict::pagoda::calibrate`]), its
//! latency and energy
//! predicted on every mode of the board from rooflines interpolated over the clocks, the
//! mode of least predicted energy within the bound; `--verify` runs the planned mode and
//! the top mode and reports predicted against measured; `--truth FILE.csv` scores the
//! predictions against a recorded profile.

use super::{Output, Target};
use crate::board::Board;
use crate::control::mode::{ModeSpace, PinnedMode};
use crate::ipc::protocol::Kind;
use crate::predict::live::MarkerSource;
use crate::predict::pagoda::calibrate::{calibrate, mean_run, top, Calibrated, KnobRooflines};
use crate::predict::pagoda::plan::Rooflines;
use crate::predict::pagoda::Report;
use crate::predict::profile;
use crate::sim::sources::InferenceSource;
use crate::sim::spec;
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;

/// The columns of a recorded inference profile (`--truth`).
pub const TRUTH_HEADER: &str = "cores,cpu_khz,gpu_hz,emc_hz,latency_ms,power_w";

/// Forward passes averaged on each calibration and verification mode.
const RUNS: u32 = 10;

/// What the calibrated plan takes of `plan-inference`'s flags.
pub struct CalibrateFlags<'a> {
    /// The model's nodes that were not counted (an ONNX graph's unknown operators).
    pub not_counted: &'a [String],
    /// `--latency-ms`: the latency bound, milliseconds.
    pub latency_ms: Option<f64>,
    /// `--slowdown`: the bound as a fraction over the reference's latency.
    pub slowdown: f64,
    /// `--verify`: run the planned mode and the reference.
    pub verify: bool,
    /// `--truth`: a recorded profile to score the predictions against.
    pub truth: Option<&'a std::path::Path>,
    /// `--markers`: measure through the agent from the markers of the user's program,
    /// waiting at most this long for each minibatch.
    pub markers: Option<std::time::Duration>,
}

/// The simulated board `--calibrate` runs the model on, or `None` where `--markers`
/// measures the user's program; an error where it has neither (checked before any
/// roofline is measured).
pub fn simulated(target: &Target, markers: bool) -> Result<Option<&'static spec::BoardSpec>> {
    match &target.sim {
        Some(board) => Ok(Some(
            spec::find(board).with_context(|| format!("unknown simulated board {board:?}"))?,
        )),
        None if markers => Ok(None),
        None => bail!("--calibrate runs the model on the board: on a simulated board (--sim BOARD) by its inference model, or on a Jetson with --markers, from the minibatch markers of your inference program through the agent"),
    }
}

/// `jpower plan-inference --calibrate`, on `rooflines` (measured at pinned clocks).
pub fn plan(
    target: &Target,
    a: &CalibrateFlags,
    report: &Report,
    rooflines: &Rooflines,
    out: &Output,
) -> Result<()> {
    let spec = simulated(target, a.markers.is_some())?;
    let (root, _) = target.root()?;
    let board = Board::discover(root)?;
    let space = ModeSpace::of(&board);
    // A recorded profile is checked before the model runs (found by a review: a bad row
    // was refused after every calibration and verification run of the user's program).
    let truth = match a.truth {
        Some(path) => {
            let text = crate::support::file_error::read_text(path)?;
            let at = (&space, board.identity.model.as_str());
            Some(profile::parse_csv_on(&text, path, TRUTH_HEADER, at)?)
        }
        None => None,
    };
    let mut source = match (spec, a.markers) {
        (Some(spec), None) => Measure::Simulated(InferenceSource::new(spec, report, 1)),
        (_, timeout) => {
            let client = target.agent()?.context(
                "--markers measures through the agent: start it (jpower agent) on this board",
            )?;
            Measure::Markers(MarkerSource::new(
                client,
                Kind::Infer,
                space.clone(),
                timeout.unwrap_or_default(),
            ))
        }
    };
    let fit = KnobRooflines::fit(rooflines)?;
    let (model, runs) = calibrate(report, source.get(), &space, fit, RUNS);
    source.check()?;
    let reference = top(&space);
    let predicted = model.predict(&reference);
    // Both flags were checked by their parsers (`cli::bounds`) before anything ran.
    let bound_s = match a.latency_ms {
        Some(ms) => ms / 1e3,
        None => predicted.latency_s * (1.0 + a.slowdown),
    };
    let mut feasible: Vec<(PinnedMode, f64, f64)> = space
        .iter()
        .filter(|m| model.covers(m))
        .map(|m| {
            let p = model.predict(&m);
            (m, p.latency_s, p.energy_j())
        })
        .filter(|&(_, s, _)| s <= bound_s)
        .collect();
    feasible.sort_by(|a, b| a.2.total_cmp(&b.2));
    let Some(&(chosen, chosen_s, chosen_j)) = feasible.first() else {
        bail!(
            "no mode is predicted within {:.3} ms; the top mode takes {:.3} ms",
            bound_s * 1e3,
            predicted.latency_s * 1e3
        );
    };
    let mode_json = |m: &PinnedMode, s: f64, j: f64| {
        serde_json::json!({
            "mode": m, "latency_ms": s * 1e3, "energy_j": j, "power_w": j / s,
            "energy_saving": 1.0 - j / predicted.energy_j(),
            "latency_change": s / predicted.latency_s - 1.0,
        })
    };
    let mut value = serde_json::json!({
        "model": report.model,
        "training": report.training,
        "precision": report.precision,
        "not_counted": a.not_counted,
        "batch": report.batch,
        "board": spec.map_or(board.identity.model.clone(), |s| s.id()),
        "simulated": spec.is_some(),
        "measured_by": match source { Measure::Simulated(_) => "simulated inference model", Measure::Markers(_) => "minibatch markers through the agent" },
        "modes": space.len(),
        "bound_ms": bound_s * 1e3,
        "calibration": runs.iter().map(|(m, s, w)| serde_json::json!({"mode": m, "latency_ms": s * 1e3, "power_w": w})).collect::<Vec<_>>(),
        "calibration_runs_per_mode": RUNS,
        "reference": mode_json(&reference, predicted.latency_s, predicted.energy_j()),
        "chosen": mode_json(&chosen, chosen_s, chosen_j),
        "alternatives": alternatives(&feasible).map(|(m, s, j)| mode_json(&m, s, j)).collect::<Vec<_>>(),
    });
    if a.verify {
        let verify = |m: &PinnedMode, source: &mut Measure| {
            let (s, w) = mean_run(source.get(), m, RUNS);
            let p = model.predict(m);
            serde_json::json!({
                "mode": m, "measured_ms": s * 1e3, "predicted_ms": p.latency_s * 1e3,
                "measured_j": s * w, "predicted_j": p.energy_j(),
            })
        };
        let (c, r) = (
            verify(&chosen, &mut source),
            verify(&reference, &mut source),
        );
        source.check()?;
        let j = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        // The bound as measured: `--slowdown` against the top mode's measured latency.
        let measured_bound_ms = match a.latency_ms {
            Some(ms) => ms,
            None => j(&r, "measured_ms") * (1.0 + a.slowdown),
        };
        value["verify"] = serde_json::json!({
            "chosen": c, "reference": r,
            "measured_saving": 1.0 - j(&c, "measured_j") / j(&r, "measured_j"),
            "measured_latency_change": j(&c, "measured_ms") / j(&r, "measured_ms") - 1.0,
            "bound_ms": measured_bound_ms,
            // Unknown (null) where either was not measured.
            "bound_kept": (measured_bound_ms.is_finite() && j(&c, "measured_ms").is_finite())
                .then(|| j(&c, "measured_ms") <= measured_bound_ms),
        });
    }
    if let Measure::Markers(m) = source {
        m.release().map_err(anyhow::Error::msg)?;
    }
    if let Some(rows) = &truth {
        value["truth"] = score(&model, rows, bound_s);
    }
    out.print(&value, || text(&value))
}

/// Where the model's runs are measured.
enum Measure {
    /// The simulated board's inference model, in simulated time.
    Simulated(InferenceSource),
    /// The user's program, through the agent, from its minibatch markers.
    Markers(MarkerSource),
}

impl Measure {
    fn get(&mut self) -> &mut dyn profile::Source {
        match self {
            Measure::Simulated(s) => s,
            Measure::Markers(m) => m,
        }
    }

    /// The first failure of a measurement, as the error it is.
    fn check(&self) -> Result<()> {
        match self {
            Measure::Markers(MarkerSource { error: Some(e), .. }) => bail!("{e}"),
            _ => Ok(()),
        }
    }
}

/// The predictions against a recorded profile: MAPE of latency and energy over its modes,
/// and the plan restricted to them (the modes the model covers, predicted within the
/// bound, least predicted energy) against the recorded best within the bound: the gap in
/// recorded energy, and whether the plan's recorded latency kept the bound (a plan that
/// broke it may use less energy than the best that kept it: a negative gap).
fn score(model: &Calibrated, rows: &[profile::Row], bound_s: f64) -> serde_json::Value {
    let n = rows.len() as f64;
    let mut scored: Vec<(PinnedMode, f64, f64, f64, f64)> = rows
        .iter()
        .map(|r| {
            let p = model.predict(&r.mode);
            let s = r.time_ms / 1e3;
            (r.mode, s, s * r.power_w, p.latency_s, p.energy_j())
        })
        .collect();
    let latency_mape = scored.iter().map(|x| (x.3 / x.1 - 1.0).abs()).sum::<f64>() / n;
    let energy_mape = scored.iter().map(|x| (x.4 / x.2 - 1.0).abs()).sum::<f64>() / n;
    scored.sort_by(|a, b| a.4.total_cmp(&b.4));
    let planned = scored.iter().find(|x| x.3 <= bound_s && model.covers(&x.0));
    let best = scored
        .iter()
        .filter(|x| x.1 <= bound_s)
        .min_by(|a, b| a.2.total_cmp(&b.2));
    serde_json::json!({
        "modes": rows.len(),
        "latency_mape": latency_mape,
        "energy_mape": energy_mape,
        "planned": planned.map(|x| serde_json::json!({"mode": x.0, "recorded_ms": x.1 * 1e3, "recorded_j": x.2})),
        "recorded_best": best.map(|x| serde_json::json!({"mode": x.0, "recorded_ms": x.1 * 1e3, "recorded_j": x.2})),
        "gap": planned.zip(best).map(|(p, b)| p.2 / b.2 - 1.0),
        "bound_kept": planned.map(|p| p.1 <= bound_s),
    })
}

/// The next three modes of `feasible` (least energy first, the plan first of all) whose
/// predictions differ from the plan's and from each other's: modes that differ only in a
/// knob the model does not see (the cores, for a GPU-bound model) are one alternative, the
/// first (a review found three ties listed).
fn alternatives(
    feasible: &[(PinnedMode, f64, f64)],
) -> impl Iterator<Item = (PinnedMode, f64, f64)> + '_ {
    let mut seen: Vec<(f64, f64)> = Vec::new();
    feasible
        .iter()
        .filter(move |&&(_, s, j)| {
            let new = !seen.contains(&(s, j));
            seen.push((s, j));
            new
        })
        .skip(1)
        .take(3)
        .copied()
}

fn mode_label(m: &serde_json::Value) -> String {
    // The board's own clocks: whole MHz cut 114.75 MHz to 115 (a review).
    let hz = |k: &str, per: u64| crate::support::units::Freq(m[k].as_u64().unwrap_or(0) * per);
    format!(
        "{} cores, CPU {}, GPU {}, EMC {}",
        m["cores"],
        hz("cpu_khz", 1000),
        hz("gpu_hz", 1),
        hz("emc_hz", 1)
    )
}

fn text(v: &serde_json::Value) -> String {
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(f64::NAN);
    let (c, r) = (&v["chosen"], &v["reference"]);
    let mut t = format!(
        "{} at batch {}, {}{} on {}{} ({} modes), calibrated on {} modes x {} runs ({})\nbound: {:.3} ms\n",
        v["model"].as_str().unwrap_or(""),
        v["batch"],
        v["precision"].as_str().unwrap_or(""),
        if v["training"] == true { ", training (3 x a forward pass)" } else { "" },
        if v["simulated"] == true { "SIMULATED " } else { "" },
        v["board"].as_str().unwrap_or(""),
        v["modes"],
        v["calibration"].as_array().map_or(0, Vec::len),
        v["calibration_runs_per_mode"],
        v["measured_by"].as_str().unwrap_or(""),
        f(&v["bound_ms"])
    );
    for (name, m) in [("reference", r), ("plan", c)] {
        let _ = writeln!(
            t,
            "{name}: {}: {:.3} ms, {:.4} J, {:.1} W",
            mode_label(&m["mode"]),
            f(&m["latency_ms"]),
            f(&m["energy_j"]),
            f(&m["power_w"])
        );
    }
    let _ = writeln!(
        t,
        "predicted: saves {:.1}% energy at {:+.1}% latency",
        100.0 * f(&c["energy_saving"]),
        100.0 * f(&c["latency_change"])
    );
    for m in v["alternatives"].as_array().into_iter().flatten() {
        let _ = writeln!(
            t,
            "  or: {}: {:.3} ms, {:.4} J, saves {:.1}%",
            mode_label(&m["mode"]),
            f(&m["latency_ms"]),
            f(&m["energy_j"]),
            100.0 * f(&m["energy_saving"])
        );
    }
    let vf = &v["verify"];
    if !vf.is_null() {
        let _ = writeln!(
            t,
            "verified: plan {:.3} ms measured ({:.3} predicted), {:.4} J ({:.4}); top {:.3} ms ({:.3}), {:.4} J ({:.4}); measured saving {:.1}% at {:+.1}% latency",
            f(&vf["chosen"]["measured_ms"]),
            f(&vf["chosen"]["predicted_ms"]),
            f(&vf["chosen"]["measured_j"]),
            f(&vf["chosen"]["predicted_j"]),
            f(&vf["reference"]["measured_ms"]),
            f(&vf["reference"]["predicted_ms"]),
            f(&vf["reference"]["measured_j"]),
            f(&vf["reference"]["predicted_j"]),
            100.0 * f(&vf["measured_saving"]),
            100.0 * f(&vf["measured_latency_change"])
        );
        if vf["bound_kept"] == false {
            let _ = writeln!(
                t,
                "  the plan's measured latency, {:.3} ms, breaks the bound as measured, {:.3} ms",
                f(&vf["chosen"]["measured_ms"]),
                f(&vf["bound_ms"])
            );
        }
    }
    let not_counted = v["not_counted"].as_array().map_or(0, Vec::len);
    t.push_str(&super::pagoda::partial_note(not_counted));
    let tr = &v["truth"];
    if !tr.is_null() {
        let _ = writeln!(
            t,
            "against the recorded profile ({} modes): latency MAPE {:.1}%, energy MAPE {:.1}%, gap to its best within the bound {}",
            tr["modes"],
            100.0 * f(&tr["latency_mape"]),
            100.0 * f(&tr["energy_mape"]),
            tr["gap"].as_f64().map_or("(none within the bound)".into(), |g| format!("{:+.1}%", 100.0 * g))
        );
        if tr["bound_kept"] == false {
            let _ = writeln!(
                t,
                "  the plan's recorded latency, {:.2} ms, breaks the {:.2} ms bound",
                f(&tr["planned"]["recorded_ms"]),
                f(&v["bound_ms"])
            );
        }
    }
    t
}
