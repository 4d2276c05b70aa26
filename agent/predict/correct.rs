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
//!
//! The regression inverts the Gram matrix of its modes (cubic in their number) and every
//! prediction sums over them, so a profile of more than [`MAX_MODES`] modes (`jpower
//! profile --strategy all` writes thousands) regresses on a spread subset of them:
//! farthest-point in kernel widths, from the first. The others' left-out prediction is
//! the subset's prediction there, fitted without them.

use super::features::Lattice;
use super::optimize::residual::{distance, gram_inverse, log_coords, nearness, LogCoords, SHARED};
use crate::control::mode::PinnedMode;
use serde::{Deserialize, Serialize};

/// The most profiled modes the correction regresses on (module docs).
pub const MAX_MODES: usize = 256;

/// At most `k` of the points `at` spread over them: the first, then each time the one
/// farthest from those chosen, until `k` are chosen or the rest repeat them; in their
/// order.
fn spread(at: &[LogCoords], k: usize) -> Vec<usize> {
    let Some(first) = at.first() else {
        return Vec::new();
    };
    let mut chosen = vec![0];
    let mut nearest: Vec<f64> = at.iter().map(|p| distance(p, first)).collect();
    while chosen.len() < k.min(at.len()) {
        let Some(far) = (0..at.len())
            .filter(|&i| nearest[i] > 0.0)
            .max_by(|&a, &b| nearest[a].total_cmp(&nearest[b]))
        else {
            break;
        };
        chosen.push(far);
        for (n, p) in nearest.iter_mut().zip(at) {
            *n = n.min(distance(p, &at[far]));
        }
    }
    chosen.sort_unstable();
    chosen
}

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
    /// (NaN where the residual is NaN; past [`MAX_MODES`] usable residuals, the subset's
    /// prediction at the modes left out of it). `None` without a usable residual.
    pub fn fit(modes: &[PinnedMode], residual: &[f64]) -> Option<(Correction, Vec<f64>)> {
        let finite: Vec<usize> = (0..modes.len().min(residual.len()))
            .filter(|&i| residual[i].is_finite())
            .collect();
        let used: Vec<usize> = if finite.len() > MAX_MODES {
            let all: Vec<LogCoords> = finite.iter().map(|&i| log_coords(&modes[i])).collect();
            spread(&all, MAX_MODES)
                .into_iter()
                .map(|k| finite[k])
                .collect()
        } else {
            finite.clone()
        };
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
        for &i in finite.iter().filter(|_| used.len() < finite.len()) {
            let x = log_coords(&modes[i]);
            left_out[i] = at
                .iter()
                .zip(&weights)
                .map(|(a, w)| w * (nearness(&x, a) + SHARED))
                .sum();
        }
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

    /// A profile past [`MAX_MODES`] regresses on that many of its modes, spread over it,
    /// and every mode still has its left-out prediction.
    #[test]
    fn a_large_profile_regresses_on_a_spread_subset() {
        let modes: Vec<PinnedMode> = (0..400u32)
            .map(|i| {
                let i = u64::from(i);
                PinnedMode::mhz(
                    1 + (i % 12) as u32,
                    700 + (i / 12) % 25 * 60,
                    300 + i % 7 * 140,
                    2133,
                )
            })
            .collect();
        let residual: Vec<f64> = (0..400).map(|i| 0.05 * (i as f64 * 0.37).sin()).collect();
        let (c, left_out) = Correction::fit(&modes, &residual).unwrap();
        assert_eq!(c.at.len(), MAX_MODES);
        assert!(left_out.iter().all(|v| v.is_finite()));
        // The subset spans the profile: its first mode and the one farthest from it are in it.
        let at: Vec<LogCoords> = modes.iter().map(log_coords).collect();
        assert!(c.at.contains(&at[0]));
        let far = (0..at.len())
            .max_by(|&a, &b| distance(&at[a], &at[0]).total_cmp(&distance(&at[b], &at[0])))
            .unwrap();
        assert!(c.at.contains(&at[far]));
    }

    /// Repeated points are chosen once (the Gram matrix of a subset with twins would be
    /// near singular), and nothing spreads over no points.
    #[test]
    fn a_spread_stops_at_repeats_and_takes_nothing_from_nothing() {
        assert!(spread(&[], 4).is_empty());
        let a = log_coords(&PinnedMode::mhz(2, 1200, 600, 2133));
        let b = log_coords(&PinnedMode::mhz(8, 2200, 1300, 3199));
        let at = [a, a, b, a, b];
        let chosen: Vec<LogCoords> = spread(&at, 4).into_iter().map(|i| at[i]).collect();
        assert_eq!(chosen, vec![a, b]);
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
