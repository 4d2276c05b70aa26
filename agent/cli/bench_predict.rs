//! `jpower bench predict`: the predictor jpower ships (the physics ensemble), asked for a
//! simulated board's whole mode space at once, next to the same models asked one mode at a
//! time (the scalar baseline) in the same run; the Pareto front of the answer; and the
//! size of the model file. Pre-training on the reference and fitting the target are timed
//! apart: prediction's cost does not depend on how long the models trained, so `--quick`
//! trains for a few epochs with the shipped architecture (ensemble size and layers).
//! Times are the CPU time of the benchmark's thread (best of several runs), so they are
//! the cost on one core even on a loaded machine.

use crate::predict::evaluate::{pretrained, profile_modes, Effort};
use crate::predict::optimize::{pareto, points};
use crate::predict::profile::{self, ProfileConfig, Strategy};
use crate::predict::{self, time_and_power, FitConfig, Method, ModelFile};
use crate::sim::sources::{reference_source, SimSource};
use crate::sim::workload::Workload;
use crate::support::clock::thread_cpu_ns;
use anyhow::{Context, Result};
use serde_json::json;
use std::time::Instant;

/// Modes of the target profiled before the fit (PowerTrain's setting).
const PROFILED: usize = 50;

/// Runs the benchmark on simulated `board`.
pub fn predict(board: &str, quick: bool) -> Result<serde_json::Value> {
    let spec =
        crate::sim::spec::find(board).with_context(|| format!("no simulated board {board}"))?;
    let space = spec.mode_space();
    let all: Vec<_> = (0..space.len()).filter_map(|i| space.get(i)).collect();
    let effort = Effort {
        fit: FitConfig {
            epochs: if quick {
                5
            } else {
                FitConfig::default().epochs
            },
            ..FitConfig::default()
        },
        reference_modes: Some(800),
    };
    let started = Instant::now();
    let mut reference = reference_source(spec, Workload::ResNet18, 1);
    let (ref_time, ref_power) = pretrained(&mut reference, &space, Method::Physics, &effort)?;
    let pretrain_s = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut target = SimSource::new(spec.silicon, Workload::MobileNetV3, space.clone(), 2);
    let modes = profile::select(&all, Strategy::Stratified(PROFILED), 1);
    let (rows, _) = profile_modes(&mut target, &modes, &ProfileConfig::default());
    let reference = Some((&ref_time, &ref_power));
    let (time, power) =
        predict::fit_time_and_power(Method::Physics, &rows, reference, &effort.fit)?;
    let fit_s = started.elapsed().as_secs_f64();

    let reps = if quick { 10 } else { 30 };
    let (batch_s, (t, p)) = best_of(reps, || time_and_power(&time, &power, &all));
    // The scalar baseline on every ninth mode (the same models, one mode per call), scaled
    // to all: an estimate, best of 3 where the batch is best of `reps` (every mode one at a
    // time would take seconds a run).
    let sampled: Vec<_> = all.iter().step_by(9).collect();
    let (scalar_s, _) = best_of(3, || {
        for m in &sampled {
            std::hint::black_box(time_and_power(&time, &power, std::slice::from_ref(m)));
        }
    });
    let scalar_per_mode_s = scalar_s / sampled.len() as f64;
    let points = points(&t, &p);
    let (pareto_s, front) = best_of(reps, || pareto(&points));
    let file = ModelFile {
        version: predict::MODEL_VERSION,
        board: spec.id(),
        workload: Workload::MobileNetV3.name().into(),
        method: Method::Physics,
        time,
        power,
        profiled: modes,
        source: Some(format!(
            "simulated {} on {}",
            Workload::MobileNetV3.name(),
            spec.id()
        )),
    };
    let model_bytes = serde_json::to_vec(&file)?.len();
    Ok(json!({
        "board": spec.id(),
        "modes": all.len(),
        "ensemble": effort.fit.ensemble,
        "epochs": effort.fit.epochs,
        "pretrain_s": pretrain_s,
        "fit_s": fit_s,
        "predict_all_ms": batch_s * 1e3,
        "scalar_all_ms": scalar_per_mode_s * all.len() as f64 * 1e3,
        "scalar_over_batch": scalar_per_mode_s * all.len() as f64 / batch_s,
        "pareto_ms": pareto_s * 1e3,
        "front": front.len(),
        "model_file_bytes": model_bytes,
    }))
}

/// The least CPU time of this thread over `reps` runs of `f`, seconds (one core, whatever
/// else the machine runs), and the last run's result.
fn best_of<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = u64::MAX;
    let mut last = None;
    for _ in 0..reps.max(1) {
        let cpu = thread_cpu_ns();
        let r = std::hint::black_box(f());
        best = best.min(thread_cpu_ns() - cpu);
        last = Some(r);
    }
    (best as f64 * 1e-9, last.expect("at least one run"))
}

/// The report's text.
pub fn text(r: &serde_json::Value) -> String {
    let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    format!(
        "bench predict on simulated {}: {} modes, physics ensemble of {} ({} epochs; \
         prediction's cost does not depend on them)\n  \
         all modes   {:>9.1} ms  time and power, batched, CPU time (target <= 50 ms)\n  \
         scalar      {:>9.1} ms  the same models one mode per call, timed on every ninth mode\n  \
         \x20                        and scaled to all ({:.1}x the batch)\n  \
         pareto      {:>9.3} ms  front of {} modes (target <= 5 ms)\n  \
         model file  {:>9} bytes (JSON)\n  \
         pre-training {:.1} s on 800 reference modes, fitting {:.1} s on {} profiled modes \
         (timed apart)\n",
        r["board"].as_str().unwrap_or(""),
        r["modes"],
        r["ensemble"],
        r["epochs"],
        f("predict_all_ms"),
        f("scalar_all_ms"),
        f("scalar_over_batch"),
        f("pareto_ms"),
        r["front"],
        r["model_file_bytes"],
        f("pretrain_s"),
        f("fit_s"),
        PROFILED,
    )
}
