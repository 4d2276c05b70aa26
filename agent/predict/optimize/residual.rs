//! What verification runs teach about the model's misses: a Gaussian-process regression
//! of the runs' log residuals (measured over predicted, time and power) over knob space,
//! so that a run corrects the modes near it most and every other mode a little.
//!
//! The kernel is a squared exponential over log knob values (a few frequency steps wide
//! in CPU and GPU clock, a factor of e in cores and EMC clock, whose steps are coarse)
//! plus a constant: a model that under-estimates power at one mode tends to under-estimate
//! it everywhere, only less so than nearby. The runs measure 40 minibatches, so the
//! residuals are nearly exact and the noise term small.

use crate::control::mode::PinnedMode;
use crate::predict::regress::spd_inverse;

/// A mode's coordinates in log knob space (log cores, CPU, GPU and EMC clock), where the
/// residual regression measures how near two modes are: a feature of a mode, not another
/// operating point.
pub type LogCoords = [f64; 4];

/// Widths of the kernel along each knob, in log units.
const WIDTH: LogCoords = [1.0, 0.3, 0.3, 1.0];
/// The kernel's constant part: the share of a miss that holds for every mode.
pub(crate) const SHARED: f64 = 0.3;
/// The noise of a run's residual, relative to the kernel's unit variance.
const NOISE: f64 = 0.02;

/// `m`'s place in knob space. A knob the board does not control (0 Hz) sits at 0.
pub fn log_coords(m: &PinnedMode) -> LogCoords {
    let ln = |v: f64| v.max(1.0).ln();
    [
        ln(m.cores as f64),
        ln(m.cpu_hz as f64),
        ln(m.gpu_hz as f64),
        ln(m.emc_hz as f64),
    ]
}

/// How far apart two modes are, in kernel widths.
pub fn distance(a: &LogCoords, b: &LogCoords) -> f64 {
    a.iter()
        .zip(b)
        .zip(WIDTH)
        .map(|((x, y), w)| ((x - y) / w).powi(2))
        .sum::<f64>()
        .sqrt()
}

/// The kernel's part that fades with distance (the rest is [`SHARED`]): a product of one
/// factor per knob, so that it splits over any partition of the knobs.
pub(crate) fn nearness(a: &LogCoords, b: &LogCoords) -> f64 {
    (-0.5 * distance(a, b).powi(2)).exp()
}

fn kernel(a: &LogCoords, b: &LogCoords) -> f64 {
    nearness(a, b) + SHARED
}

/// (K + noise·I)⁻¹ of the modes `at`, row-major; `None` where it cannot be inverted. K is
/// symmetric positive definite, and the noise keeps it well conditioned however close the
/// modes.
pub(crate) fn gram_inverse(at: &[LogCoords]) -> Option<Vec<f64>> {
    let n = at.len();
    let mut k: Vec<f64> = (0..n * n)
        .map(|ij| {
            let (i, j) = (ij / n, ij % n);
            kernel(&at[i], &at[j]) + if i == j { NOISE } else { 0.0 }
        })
        .collect();
    spd_inverse(&mut k, n).ok()
}

/// The runs so far and the regression's weights over them.
#[derive(Debug, Default)]
pub struct Residuals {
    at: Vec<LogCoords>,
    /// Log residuals of the runs, time and power.
    miss: Vec<[f64; 2]>,
    /// (K + noise·I)⁻¹ · miss, one column per target.
    weights: Vec<[f64; 2]>,
}

impl Residuals {
    /// Records a run at `at` that measured `measured` where the model predicted
    /// `predicted` (each time and power), and refits. A run that measured nothing (or a
    /// prediction that is not positive) teaches nothing.
    pub fn add(&mut self, at: LogCoords, predicted: [f64; 2], measured: [f64; 2]) {
        let miss = [0, 1].map(|k| (measured[k] / predicted[k]).ln());
        if miss.iter().all(|m| m.is_finite()) {
            self.at.push(at);
            self.miss.push(miss);
            self.weights = self.solve();
        }
    }

    /// The factor by which to correct a prediction (time, power) at `at`.
    pub fn factor(&self, at: &LogCoords) -> [f64; 2] {
        let mut log = [0.0; 2];
        for (k, w) in self.at.iter().zip(&self.weights) {
            let c = kernel(at, k);
            log[0] += c * w[0];
            log[1] += c * w[1];
        }
        log.map(f64::exp)
    }

    /// (K + noise·I)⁻¹ · miss.
    fn solve(&self) -> Vec<[f64; 2]> {
        let n = self.at.len();
        let Some(inv) = gram_inverse(&self.at) else {
            return vec![[0.0; 2]; n];
        };
        inv.chunks(n)
            .map(|row| [0, 1].map(|t| row.iter().zip(&self.miss).map(|(a, m)| a * m[t]).sum()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(cores: u32, cpu_mhz: u64, gpu_mhz: u64, emc_mhz: u64) -> LogCoords {
        log_coords(&PinnedMode::mhz(cores, cpu_mhz, gpu_mhz, emc_mhz))
    }

    #[test]
    fn a_run_corrects_its_own_mode_nearly_fully_its_neighbours_most_and_the_rest_a_little() {
        let mut r = Residuals::default();
        assert_eq!(r.factor(&mode(4, 1500, 900, 2133)), [1.0, 1.0]);
        let at = mode(4, 1500, 900, 2133);
        r.add(at, [100.0, 20.0], [90.0, 22.0]);
        let own = r.factor(&at);
        assert!(
            (own[0] - 0.9).abs() < 0.01 && (own[1] - 1.1).abs() < 0.01,
            "{own:?}"
        );
        let near = r.factor(&mode(4, 1600, 900, 2133))[1];
        let far = r.factor(&mode(12, 300, 200, 204))[1];
        assert!(near > 1.08 && near < own[1], "{near}");
        // The shared part: a quarter of the miss (0.3 / 1.32) holds far away.
        assert!(far > 1.015 && far < 1.03, "{far}");
    }

    #[test]
    fn the_regression_reproduces_each_run_and_interpolates_between_them() {
        let mut r = Residuals::default();
        let (a, b) = (mode(2, 1200, 600, 2133), mode(2, 2200, 600, 2133));
        r.add(a, [50.0, 10.0], [55.0, 10.0]);
        r.add(b, [50.0, 10.0], [45.0, 12.0]);
        let (fa, fb) = (r.factor(&a), r.factor(&b));
        assert!(
            (fa[0] - 1.1).abs() < 0.01 && (fa[1] - 1.0).abs() < 0.01,
            "{fa:?}"
        );
        assert!(
            (fb[0] - 0.9).abs() < 0.01 && (fb[1] - 1.2).abs() < 0.01,
            "{fb:?}"
        );
        let mid = r.factor(&mode(2, 1600, 600, 2133))[1];
        assert!(mid > 1.0 && mid < 1.2, "{mid}");
        // Two runs at one mode are averaged, not divided by zero.
        r.add(a, [50.0, 10.0], [56.0, 10.0]);
        assert!((r.factor(&a)[0] - 1.11).abs() < 0.01);
        // A failed run changes nothing.
        let before = r.factor(&b);
        r.add(b, [50.0, 10.0], [f64::NAN, f64::NAN]);
        r.add(b, [0.0, 10.0], [50.0, 10.0]);
        assert_eq!(r.factor(&b), before);
    }

    #[test]
    fn a_knob_the_board_lacks_sits_at_zero() {
        let k = mode(4, 1500, 0, 0);
        assert_eq!((k[2], k[3]), (0.0, 0.0));
        assert!(k.iter().all(|v| v.is_finite()));
    }
}
