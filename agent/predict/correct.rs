//! What a fitted model still misses at the modes it was fitted on, carried to every other
//! mode: a Gaussian-process regression of its log residuals at the profiled modes over
//! knob space (the verification's kernel, [`super::optimize::residual`]), applied to every
//! prediction. Where the physics anchors' form is not the board's, the profiled modes
//! show a bias the read-out's ridge keeps; the correction removes it near them most and
//! everywhere a little, so the data wins where the anchors disagree with it.
//!
//! Fitting also yields each profiled mode's leave-one-out prediction (what the correction
//! fitted without that mode predicts there), from which the corrected model's expected
//! miss is measured ([`super::miss`]).

use super::features::Lattice;
use super::optimize::residual::{gram_inverse, log_coords, nearness, LogCoords, SHARED};
use crate::control::mode::PinnedMode;
use serde::{Deserialize, Serialize};

/// A correction of a model's log predictions, fitted to its residuals at the profiled
/// modes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Correction {
    /// The profiled modes whose residuals were used, in log knob space.
    at: Vec<LogCoords>,
    /// (K + noise·I)⁻¹ · residuals: the correction at a mode is the kernel's row there
    /// times these.
    weights: Vec<f64>,
}

impl Correction {
    /// Where its weights and modes disagree (an edited file), what disagrees.
    pub fn mismatch(&self) -> Option<String> {
        if self.at.len() != self.weights.len() {
            return Some(format!(
                "a correction of {} weights at {} modes",
                self.weights.len(),
                self.at.len()
            ));
        }
        self.weights
            .iter()
            .any(|w| !w.is_finite())
            .then(|| "a correction weight that is not finite".to_string())
    }

    /// Fits the correction to `residual` (the log of measured over predicted) at each of
    /// `modes` (NaN: not used), and returns it with each mode's leave-one-out prediction
    /// (NaN where the residual was not used). `None` without a usable residual.
    pub fn fit(modes: &[PinnedMode], residual: &[f64]) -> Option<(Correction, Vec<f64>)> {
        let used: Vec<usize> = (0..modes.len().min(residual.len()))
            .filter(|&i| residual[i].is_finite())
            .collect();
        let at: Vec<LogCoords> = used.iter().map(|&i| log_coords(&modes[i])).collect();
        let r: Vec<f64> = used.iter().map(|&i| residual[i]).collect();
        let n = used.len();
        if n == 0 {
            return None;
        }
        let inv = gram_inverse(&at)?;
        let weights: Vec<f64> = inv
            .chunks(n)
            .map(|row| row.iter().zip(&r).map(|(a, y)| a * y).sum())
            .collect();
        // A Gaussian process's leave-one-out prediction in closed form: y_i - w_i / A_ii.
        let mut left_out = vec![f64::NAN; modes.len()];
        for (k, &i) in used.iter().enumerate() {
            left_out[i] = r[k] - weights[k] / inv[k * n + k];
        }
        Some((Correction { at, weights }, left_out))
    }

    /// The log factor by which to correct the prediction of each mode of `lattice`. The
    /// kernel's fading part is a product of a host and a device factor, tabled once per
    /// grid point ([`Lattice::tables`]), so a mode costs a multiply-add per profiled mode.
    pub(super) fn log_factors(&self, lattice: &Lattice) -> Vec<f64> {
        let [host, device] = lattice.tables(&self.at, nearness);
        let n = self.at.len();
        let shared = SHARED * self.weights.iter().sum::<f64>();
        lattice
            .at
            .iter()
            .map(|&[h, d]| {
                let (h, d) = (&host[h * n..(h + 1) * n], &device[d * n..(d + 1) * n]);
                let near: f64 = (0..n).map(|j| self.weights[j] * h[j] * d[j]).sum();
                shared + near
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::optimize::residual::Residuals;

    fn modes() -> Vec<PinnedMode> {
        vec![
            PinnedMode::mhz(2, 1200, 600, 2133),
            PinnedMode::mhz(4, 1500, 900, 3199),
            PinnedMode::mhz(8, 2200, 1300, 3199),
            PinnedMode::mhz(12, 700, 300, 665),
            PinnedMode::mhz(6, 1800, 1100, 2133),
        ]
    }

    #[test]
    fn the_correction_is_the_verifications_regression_of_the_same_residuals() {
        let modes = modes();
        let residual = [0.1, -0.05, 0.2, -0.1, 0.02];
        let (c, _) = Correction::fit(&modes, &residual).unwrap();
        let mut runs = Residuals::default();
        for (m, r) in modes.iter().zip(residual) {
            runs.add(log_coords(m), [1.0, 1.0], [r.exp(), 1.0]);
        }
        let elsewhere = [
            PinnedMode::mhz(3, 1000, 500, 2133),
            PinnedMode::mhz(10, 2000, 1200, 665),
        ];
        let mut all = modes.clone();
        all.extend(elsewhere);
        let lattice = Lattice::of(&all);
        for (m, f) in all.iter().zip(c.log_factors(&lattice)) {
            let want = runs.factor(&log_coords(m))[0].ln();
            assert!((f - want).abs() < 1e-9, "{m:?}: {f} against {want}");
        }
        // Nearly exact at the profiled modes (the noise term is small).
        for (r, f) in residual.iter().zip(c.log_factors(&Lattice::of(&modes))) {
            assert!((r - f).abs() < 0.02, "{r} {f}");
        }
    }

    #[test]
    fn the_left_out_predictions_are_those_of_corrections_fitted_without_each_mode() {
        let modes = modes();
        let residual = [0.1, -0.05, f64::NAN, -0.1, 0.02];
        let (_, left_out) = Correction::fit(&modes, &residual).unwrap();
        assert!(left_out[2].is_nan());
        for i in [0, 1, 3, 4] {
            let mut without = residual;
            without[i] = f64::NAN;
            let (c, _) = Correction::fit(&modes, &without).unwrap();
            let there = c.log_factors(&Lattice::of(&modes[i..=i]))[0];
            assert!(
                (left_out[i] - there).abs() < 1e-9,
                "{i}: {left_out:?} {there}"
            );
        }
        assert_eq!(Correction::fit(&modes, &[f64::NAN; 5]), None);
    }
}
