//! Scoring the calibrated plan against a board's truth: the model measured on the five
//! calibration modes, its latency and energy predicted on every mode, the planned mode
//! (least predicted energy within a slowdown of the predicted top mode) against the
//! exhaustive optimum of the truth (least true energy within the same slowdown of the true
//! top mode). The truth comes from the [`Source`] (a simulated board's own inference model),
//! never from the planner's model.

use super::calibrate::{calibrate, top, KnobRooflines};
use super::Report;
use crate::control::mode::{ModeSpace, PinnedMode};
use crate::predict::profile::Source;
use serde::Serialize;

/// One model at one batch size.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The model.
    pub model: String,
    /// Samples per forward pass.
    pub batch: u64,
    /// The planned mode.
    pub planned: PinnedMode,
    /// The exhaustive optimum.
    pub optimum: PinnedMode,
    /// True energy the plan saves against the top mode (fraction).
    pub saving: f64,
    /// True energy the optimum saves against the top mode (fraction).
    pub optimum_saving: f64,
    /// The plan's true latency against the top mode's, minus one.
    pub latency_change: f64,
    /// The plan's true energy against the optimum's, minus one.
    pub gap: f64,
    /// Mean absolute relative error of the predicted latency over every mode.
    pub latency_mape: f64,
    /// Likewise of the energy per forward pass.
    pub energy_mape: f64,
    /// Modes the model itself ran on to calibrate (the runs the evaluation counts).
    pub calibration_modes: usize,
    /// Modes scored.
    pub modes: usize,
}

/// One mode: the truth and the prediction, seconds and joules per forward pass.
#[derive(Debug, Clone, Copy)]
struct Scored {
    true_s: f64,
    true_j: f64,
    predicted_s: f64,
    predicted_j: f64,
}

/// Evaluates `report` measured through `source` on `space` (its top mode the reference),
/// with `rooflines`, averaging `runs` forward passes per calibration mode, within
/// `slowdown` of the top mode's latency (the plan's bound on its prediction of the top
/// mode, the optimum's on the truth).
pub fn evaluate(
    report: &Report,
    source: &mut dyn Source,
    space: &ModeSpace,
    rooflines: KnobRooflines,
    runs: u32,
    slowdown: f64,
) -> Outcome {
    let (model, measured) = calibrate(report, source, space, rooflines, runs);
    let reference = top(space);
    let modes: Vec<PinnedMode> = space.iter().collect();
    let scored: Vec<Scored> = modes
        .iter()
        .map(|m| {
            let (ms, w) = source.truth(m).unwrap_or((f64::NAN, f64::NAN));
            let p = model.predict(m);
            Scored {
                true_s: ms / 1e3,
                true_j: ms / 1e3 * w,
                predicted_s: p.latency_s,
                predicted_j: p.energy_j(),
            }
        })
        .collect();
    let truth_ref = scored[modes.iter().position(|x| *x == reference).unwrap_or(0)];
    let least = |bound: f64, latency: fn(&Scored) -> f64, energy: fn(&Scored) -> f64, all: bool| {
        (0..modes.len())
            .filter(|&i| latency(&scored[i]) <= bound && (all || model.covers(&modes[i])))
            .min_by(|&a, &b| energy(&scored[a]).total_cmp(&energy(&scored[b])))
            .unwrap_or(0)
    };
    let planned = least(
        (1.0 + slowdown) * truth_ref.predicted_s,
        |s| s.predicted_s,
        |s| s.predicted_j,
        false,
    );
    let optimum = least(
        (1.0 + slowdown) * truth_ref.true_s,
        |s| s.true_s,
        |s| s.true_j,
        true,
    );
    let mape = |truth: fn(&Scored) -> f64, predicted: fn(&Scored) -> f64| {
        scored
            .iter()
            .map(|s| (predicted(s) / truth(s) - 1.0).abs())
            .sum::<f64>()
            / scored.len() as f64
    };
    let (p, o) = (scored[planned], scored[optimum]);
    Outcome {
        model: report.model.clone(),
        batch: report.batch,
        planned: modes[planned],
        optimum: modes[optimum],
        saving: 1.0 - p.true_j / truth_ref.true_j,
        optimum_saving: 1.0 - o.true_j / truth_ref.true_j,
        latency_change: p.true_s / truth_ref.true_s - 1.0,
        gap: p.true_j / o.true_j - 1.0,
        latency_mape: mape(|s| s.true_s, |s| s.predicted_s),
        energy_mape: mape(|s| s.true_j, |s| s.predicted_j),
        calibration_modes: measured.len(),
        modes: modes.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::roofline::Precision;
    use crate::predict::pagoda::calibrate::tests::{four_rooflines, own_form, space};
    use crate::predict::pagoda::calibrate::Calibrated;
    use crate::predict::pagoda::zoo;

    /// A board whose truth has the planner's own form (no noise).
    struct OwnForm(Calibrated);

    impl Source for OwnForm {
        fn minibatch(&mut self, mode: &PinnedMode, _: u32) -> Option<(f64, f64)> {
            self.truth(mode)
        }
        fn truth(&self, mode: &PinnedMode) -> Option<(f64, f64)> {
            let p = self.0.predict(mode);
            Some((p.latency_s * 1e3, p.power_w))
        }
        fn modes(&self) -> Vec<PinnedMode> {
            Vec::new()
        }
    }

    #[test]
    fn a_truth_of_the_planners_form_is_planned_at_its_optimum() {
        let fit = four_rooflines();
        let report = zoo::get("mobilenetv3-large")
            .unwrap()
            .count(1, Precision::F32, false);
        let space = space(vec![2, 4, 8, 12]);
        let truth = own_form(&report, fit);
        let o = evaluate(&report, &mut OwnForm(truth), &space, fit, 1, 0.05);
        assert_eq!(o.modes, 256);
        assert_eq!(o.calibration_modes, 5);
        assert!(o.latency_mape < 0.02 && o.energy_mape < 0.02, "{o:?}");
        assert!(o.gap.abs() < 0.01, "{o:?}");
        assert!(o.latency_change <= 0.05 + 1e-9, "{o:?}");
        assert!(
            (o.saving - o.optimum_saving).abs() < 0.01 && o.saving > 0.0,
            "{o:?}"
        );
    }
}
