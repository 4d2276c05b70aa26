//! How far a fitted model misses a mode it has not seen, measured on the target: the
//! read-out's leave-one-out residuals on the profiled modes, as a function of how far
//! each lies from the other profiled modes. A mode far from everything profiled (the
//! edges of the mode space, where a budget's fastest choice often lies) is predicted with
//! less certainty than one among them, and its power-budget margin says so.
//!
//! The miss at a mode is `base + per_distance * d`, with `d` the distance in log knob
//! space (the verification's kernel widths, [`super::optimize::residual`]) to the nearest
//! profiled mode: fitted to the residuals' magnitudes by nonnegative least squares, then
//! scaled so that the residuals divided by it have a root mean square of one.

use super::features::Lattice;
use super::optimize::residual::{distance, log_coords, LogCoords};
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
}

impl Miss {
    /// Fits the miss to each profiled mode's leave-one-out `residual` (NaN: not used).
    /// `None` with fewer than three finite residuals.
    pub fn fit(modes: &[PinnedMode], residual: &[f64]) -> Option<Miss> {
        let at: Vec<LogCoords> = modes.iter().map(log_coords).collect();
        let used: Vec<(f64, f64)> = at
            .iter()
            .enumerate()
            .zip(residual)
            .filter(|(_, r)| r.is_finite())
            .map(|((i, a), r)| (nearest(&at, a, Some(i)), r.abs()))
            .collect();
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
        let z2 = mean(&|u| (u.1 / (base + per_distance * u.0).max(1e-9)).powi(2));
        let scale = z2.sqrt();
        Some(Miss {
            at,
            base: base * scale,
            per_distance: per_distance * scale,
        })
    }

    /// The expected miss at `m`.
    pub fn at(&self, m: &PinnedMode) -> f64 {
        self.base + self.per_distance * nearest(&self.at, &log_coords(m), None)
    }

    /// The expected miss at a mode `distance` from the nearest profiled mode.
    pub fn at_distance(&self, distance: f64) -> f64 {
        self.base + self.per_distance * distance
    }

    /// Whether `other` was fitted on the same profiled modes (so their distances agree).
    pub fn same_modes(&self, other: &Miss) -> bool {
        self.at == other.at
    }

    /// Each mode's distance to the nearest profiled mode, for the modes of `lattice`: the
    /// squared distances along the host knobs (cores, CPU clock) from each point of the
    /// host grid to every profiled mode, and along the device knobs (GPU, EMC clock) from
    /// each point of the device grid, are tabled once, so that a mode costs a few dozen
    /// additions.
    pub(super) fn distances(&self, lattice: &Lattice) -> Vec<f64> {
        let tables = [0, 1].map(|part| {
            let keep = |c: LogCoords| -> LogCoords {
                std::array::from_fn(|k| if k / 2 == part { c[k] } else { 0.0 })
            };
            let grid = &lattice.grid[part];
            grid.iter()
                .flat_map(|m| {
                    let a = keep(log_coords(m));
                    self.at.iter().map(move |b| distance(&a, &keep(*b)).powi(2))
                })
                .collect::<Vec<f64>>()
        });
        let n = self.at.len();
        lattice
            .at
            .iter()
            .map(|&[host, device]| {
                let h = &tables[0][host * n..(host + 1) * n];
                let d = &tables[1][device * n..(device + 1) * n];
                // Four running minima, so that the loop vectorises (f64::min's NaN rule
                // does not).
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
            })
            .collect()
    }
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
        // At a profiled mode the miss is the base.
        assert_eq!(miss.at(&modes[3]), miss.base);
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
        for (m, d) in modes_b.iter().zip(miss.distances(&lattice)) {
            assert!((miss.at_distance(d) - miss.at(m)).abs() < 1e-12);
        }
        assert!(miss.same_modes(&miss.clone()));
        // Unusable residuals are skipped; fewer than three usable give no model.
        let nan = [f64::NAN, 0.1, f64::NAN, 0.2];
        assert_eq!(Miss::fit(&modes[..4], &nan), None);
        // The same miss everywhere: no growth with distance.
        let flat = Miss::fit(&modes, &[0.05; 12]).unwrap();
        assert!(flat.per_distance.abs() < 1e-12 && (flat.base - 0.05).abs() < 1e-9);
    }
}
