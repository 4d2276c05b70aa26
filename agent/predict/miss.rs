//! How far a fitted model misses a mode it has not seen, measured on the target: the
//! read-out's leave-one-out residuals on the profiled modes, as a function of how far
//! each lies from the other profiled modes. A mode far from everything profiled (the
//! edges of the mode space, where a budget's fastest choice often lies) is predicted with
//! less certainty than one among them, and its power-budget margin says so.
//!
//! The miss at a mode is `base + per_distance * d`, with `d` the distance in log knob
//! space (the verification's kernel widths, [`super::optimize::residual`]) to the nearest
//! profiled mode: fitted to the residuals' magnitudes by nonnegative least squares, then
//! scaled so that the residuals divided by it have a root mean square of one. A model
//! misses more in some regions of the mode space than in others (where the board's form
//! departs from the anchors': a power limit, one core), so the miss is then scaled by the
//! profiled modes near the mode: by the root of the kernel-weighted mean of their squared
//! residuals over the miss there, with the weight of one mode that misses as on average.

use super::features::Lattice;
use super::optimize::residual::{distance, log_coords, nearness, LogCoords};
use crate::control::mode::PinnedMode;
use serde::{Deserialize, Serialize};

/// A model's expected miss (root mean square, in the model's space) at any mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Miss {
    /// The profiled modes, in log knob space.
    at: Vec<LogCoords>,
    /// The miss at a profiled mode.
    base: f64,
    /// How much it grows per unit of distance from the nearest profiled mode.
    per_distance: f64,
    /// Each profiled mode's squared left-out residual over the miss there (1 where none
    /// was measured; none at all in files written before it was kept).
    #[serde(default)]
    local: Vec<f64>,
}

/// The weight of the average miss against the profiled modes' own near a mode: that of one
/// profiled mode at the mode itself.
const PRIOR: f64 = 1.0;

impl Miss {
    /// Where its parts disagree (an edited file), what disagrees.
    pub fn mismatch(&self) -> Option<String> {
        if !self.local.is_empty() && self.local.len() != self.at.len() {
            return Some(format!(
                "an expected miss of {} local terms at {} modes",
                self.local.len(),
                self.at.len()
            ));
        }
        let finite = self.base.is_finite() && self.per_distance.is_finite();
        (!finite || self.local.iter().any(|z| !z.is_finite()))
            .then(|| "an expected miss that is not finite".to_string())
    }

    /// Fits the miss to each profiled mode's leave-one-out `residual` (NaN: not used).
    /// `None` with fewer than three finite residuals.
    pub fn fit(modes: &[PinnedMode], residual: &[f64]) -> Option<Miss> {
        let at: Vec<LogCoords> = modes.iter().map(log_coords).collect();
        let all: Vec<(f64, f64)> = at
            .iter()
            .enumerate()
            .zip(residual)
            .map(|((i, a), r)| (nearest(&at, a, Some(i)), r.abs()))
            .collect();
        let used: Vec<(f64, f64)> = all.iter().filter(|u| u.1.is_finite()).copied().collect();
        if used.len() < 3 {
            return None;
        }
        let n = used.len() as f64;
        let mean = |f: &dyn Fn(&(f64, f64)) -> f64| used.iter().map(f).sum::<f64>() / n;
        let (md, mr) = (mean(&|u| u.0), mean(&|u| u.1));
        let var_d = mean(&|u| (u.0 - md).powi(2));
        let cov = mean(&|u| (u.0 - md) * (u.1 - mr));
        // Least squares of |r| on d, the slope kept nonnegative (a miss does not shrink
        // away from the data) and the intercept too.
        let slope = if var_d > 1e-12 {
            (cov / var_d).max(0.0)
        } else {
            0.0
        };
        let (base, per_distance) = match mr - slope * md {
            b if b >= 0.0 => (b, slope),
            _ => (0.0, mean(&|u| u.0 * u.1) / mean(&|u| u.0 * u.0).max(1e-12)),
        };
        // Calibrated: the residuals over the expected miss have unit root mean square.
        let z2 = |u: &(f64, f64)| (u.1 / (base + per_distance * u.0).max(1e-9)).powi(2);
        let scale = mean(&z2).sqrt();
        let local = all
            .iter()
            .map(|u| {
                if u.1.is_finite() {
                    z2(u) / scale.powi(2)
                } else {
                    1.0
                }
            })
            .collect();
        Some(Miss {
            at,
            base: base * scale,
            per_distance: per_distance * scale,
            local,
        })
    }

    /// The expected miss at `m`.
    pub fn at(&self, m: &PinnedMode) -> f64 {
        self.at_modes(&Lattice::of(std::slice::from_ref(m)))[0]
    }

    /// The expected miss at each mode of `lattice`. The squared distances along the host
    /// knobs (cores, CPU clock) from each point of the host grid to every profiled mode,
    /// and along the device knobs (GPU, EMC clock) from each point of the device grid, are
    /// tabled once (and the kernel's factors of each part with them), so that a mode costs
    /// a few dozen additions and multiplications.
    pub(super) fn at_modes(&self, lattice: &Lattice) -> Vec<f64> {
        let squares = lattice.tables(&self.at, |a, b| distance(a, b).powi(2));
        let n = self.at.len();
        // The profiled modes' shares, with the kernel's factors along each part (none in a
        // file written before they were kept).
        let local = (self.local.len() == n)
            .then(|| (self.local.as_slice(), lattice.tables(&self.at, nearness)));
        lattice
            .at
            .iter()
            .map(|&[host, device]| {
                let (hs, ds) = (host * n..(host + 1) * n, device * n..(device + 1) * n);
                let d = nearest_of(&squares[0][hs.clone()], &squares[1][ds.clone()]);
                let scale = local
                    .as_ref()
                    .map_or(1.0, |(z2, [host_near, device_near])| {
                        let (hn, dn) = (&host_near[hs], &device_near[ds]);
                        let (mut weighted, mut weight) = (PRIOR, PRIOR);
                        for j in 0..n {
                            let k = hn[j] * dn[j];
                            weighted += k * z2[j];
                            weight += k;
                        }
                        (weighted / weight).sqrt()
                    });
                scale * (self.base + self.per_distance * d)
            })
            .collect()
    }
}

/// The distance to the nearest profiled mode from the squared distances to each along the
/// host knobs (`h`) and along the device knobs (`d`).
fn nearest_of(h: &[f64], d: &[f64]) -> f64 {
    // Four running minima, so that the loop vectorises (f64::min's NaN rule does not).
    let mut least = [f64::INFINITY; 4];
    let (hs, ds) = (h.chunks_exact(4), d.chunks_exact(4));
    let rest = hs
        .remainder()
        .iter()
        .zip(ds.remainder())
        .map(|(x, y)| x + y);
    for (a, b) in hs.zip(ds) {
        for k in 0..4 {
            let s = a[k] + b[k];
            least[k] = if s < least[k] { s } else { least[k] };
        }
    }
    rest.chain(least).fold(f64::INFINITY, f64::min).sqrt()
}

/// The distance from `a` to the nearest of `at` (skipping index `skip`).
fn nearest(at: &[LogCoords], a: &LogCoords, skip: Option<usize>) -> f64 {
    at.iter()
        .enumerate()
        .filter(|(j, _)| Some(*j) != skip)
        .map(|(_, b)| distance(a, b))
        .fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(cores: u32, cpu_mhz: u64) -> PinnedMode {
        PinnedMode {
            cores,
            cpu_hz: cpu_mhz * 1_000_000,
            gpu_hz: 900_000_000,
            emc_hz: 3_199_000_000,
        }
    }

    #[test]
    fn a_miss_grows_away_from_the_profiled_modes_and_is_calibrated() {
        // Clustered modes miss little; the two isolated ones miss a lot.
        let mut modes: Vec<PinnedMode> = (0..10).map(|i| mode(4, 1000 + 20 * i)).collect();
        modes.extend([mode(1, 300), mode(12, 2200)]);
        let mut residual = vec![0.01; 10];
        residual.extend([-0.2, 0.25]);
        let miss = Miss::fit(&modes, &residual).unwrap();
        assert!(miss.per_distance > 0.0, "{miss:?}");
        assert!(miss.at(&mode(4, 1100)) < miss.at(&mode(8, 1800)));
        // At a profiled mode the miss is the base, scaled by how the modes near it missed.
        let unscaled = Miss {
            local: vec![],
            ..miss.clone()
        };
        assert_eq!(unscaled.at(&modes[3]), miss.base);
        assert_eq!((unscaled.mismatch(), miss.mismatch()), (None, None));
        // An edited file's miss cut short, or not finite, is refused (found by a review:
        // a cut `local` was silently ignored).
        let cut = Miss {
            local: miss.local[..3].to_vec(),
            ..miss.clone()
        };
        assert!(cut
            .mismatch()
            .unwrap()
            .contains("3 local terms at 12 modes"));
        let inf = Miss {
            base: f64::INFINITY,
            ..miss.clone()
        };
        assert!(inf.mismatch().unwrap().contains("not finite"));
        // Residuals over the expected miss (each away from the others) have unit RMS.
        let z2: f64 = (0..modes.len())
            .map(|i| {
                let d = nearest(&miss.at, &log_coords(&modes[i]), Some(i));
                (residual[i] / (miss.base + miss.per_distance * d)).powi(2)
            })
            .sum::<f64>()
            / modes.len() as f64;
        assert!((z2 - 1.0).abs() < 1e-9, "{z2}");
        // Many modes at once, from the lattice's two grids, give the same.
        let modes_b: Vec<PinnedMode> = [(2, 700, 300), (6, 1500, 1300)]
            .map(|(c, f, g)| PinnedMode {
                gpu_hz: g * 1_000_000,
                ..mode(c, f)
            })
            .to_vec();
        let lattice = Lattice::of(&modes_b);
        for (m, e) in modes_b.iter().zip(miss.at_modes(&lattice)) {
            assert!((e - miss.at(m)).abs() < 1e-12);
        }
        // Unusable residuals are skipped; fewer than three usable give no model.
        let nan = [f64::NAN, 0.1, f64::NAN, 0.2];
        assert_eq!(Miss::fit(&modes[..4], &nan), None);
        // The same miss everywhere: no growth with distance.
        let flat = Miss::fit(&modes, &[0.05; 12]).unwrap();
        assert!(flat.per_distance.abs() < 1e-12 && (flat.base - 0.05).abs() < 1e-9);
        assert!((flat.at(&mode(7, 1700)) - 0.05).abs() < 1e-9);
    }

    #[test]
    fn a_mode_among_profiled_modes_that_missed_more_than_average_is_expected_to_miss_more() {
        // Two clusters as far from their neighbours: one missed by 1%, the other by 10%.
        let quiet: Vec<PinnedMode> = (0..6).map(|i| mode(2, 800 + 40 * i)).collect();
        let loud: Vec<PinnedMode> = (0..6).map(|i| mode(10, 1800 + 40 * i)).collect();
        let modes = [quiet.clone(), loud.clone()].concat();
        let residual: Vec<f64> = (0..12)
            .map(|i| if i < 6 { 0.01 } else { 0.1 } * if i % 2 == 0 { 1.0 } else { -1.0 })
            .collect();
        let miss = Miss::fit(&modes, &residual).unwrap();
        let (near_quiet, near_loud) = (miss.at(&mode(2, 900)), miss.at(&mode(10, 1900)));
        assert!(
            near_quiet < 0.04 && near_loud > 0.08,
            "{near_quiet} {near_loud}"
        );
        // Away from both, the prior (one mode of average miss) and both clusters share it.
        let between = miss.at(&mode(5, 1300));
        assert!(between > near_quiet && between < near_loud, "{between}");
        // Where no residual was measured, a mode counts as missing as on average.
        let mut unmeasured = residual.clone();
        unmeasured[6..].fill(f64::NAN);
        unmeasured[..3].fill(0.05);
        let some = Miss::fit(&modes, &unmeasured).unwrap();
        assert!(some.local[6..].iter().all(|&z| z == 1.0));
    }
}
