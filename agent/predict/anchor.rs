//! Physics anchors: models of one workload's minibatch time and power with a few
//! nonnegative coefficients, fitted to its profiled modes alone. The physics method's
//! transferred read-out blends them in ([`super::regress::Mlp::refit_output`]'s anchor),
//! leave-one-out deciding how far to follow them: where the profiled modes say little
//! (one or two cores, slow CPU clocks) a network pre-trained on another workload carries
//! that workload's bottlenecks, while these few coefficients extrapolate as physics does.
//!
//! - Time, a pipeline ([`Pipeline`]): the data loaders, sharing the online cores, overlap
//!   the GPU's compute and memory time plus the main process's serial CPU work, and a fetch
//!   step that overlaps nothing follows (the SIGMETRICS'23 characterisation's account of
//!   where time goes):
//!   `t = max(a_l / (p f_cpu), a_g / f_gpu + a_e / f_emc + a_s / f_cpu) + b_c / f_cpu + b_e / f_emc + b_0`,
//!   with `p` the loaders' parallelism on the online cores (`loaders`)
//!   and clocks in GHz. Each mode is assigned to the stage that binds it (loading or GPU); the fit
//!   alternates between assigning and fitting, from a range of loader costs, and the best
//!   wins.
//! - Power, a sum of static and dynamic terms ([`PowerSum`]): leakage and clock trees grow
//!   with the clocks and the online cores, and each domain's dynamic energy per minibatch
//!   over the minibatch time (the `energy_terms`).
//!
//! Both are least squares on the relative error with nonnegative coefficients (coordinate
//! descent). The simulated boards time a minibatch with this same pipeline (and a
//! roofline per layer group) and draw power as such a sum, so on them the anchors fit
//! better than they would a real board's profile; leave-one-out on a replayed profile
//! (`--truth`) is what tells how far to follow them there.

use super::features::{energy_terms, ghz, loaders, ENERGY_TERMS};
use super::Quantity;
use crate::control::mode::PinnedMode;
use crate::predict::profile::Row;
use serde::{Deserialize, Serialize};

/// A physics model of the time or the power.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Anchor {
    /// Minibatch time as a pipeline of loading, GPU and fetch stages.
    Pipeline(Pipeline),
    /// Power as a sum of static and dynamic terms.
    Power(PowerSum),
}

impl Anchor {
    /// Fits the anchor of target `t` to profiled rows (those whose time and target are
    /// finite and positive); `None` with fewer than three.
    pub fn fit(t: Quantity, rows: &[Row]) -> Option<Anchor> {
        let usable = |v: f64| v.is_finite() && v > 0.0;
        let rows: Vec<&Row> = rows
            .iter()
            .filter(|r| usable(r.time_ms) && (t == Quantity::TimeMs || usable(r.power_w)))
            .collect();
        if rows.len() < 3 {
            return None;
        }
        let modes: Vec<PinnedMode> = rows.iter().map(|r| r.mode).collect();
        let times: Vec<f64> = rows.iter().map(|r| r.time_ms).collect();
        match t {
            Quantity::TimeMs => Pipeline::fit(&modes, &times).map(Anchor::Pipeline),
            Quantity::PowerW => {
                let power: Vec<f64> = rows.iter().map(|r| r.power_w).collect();
                Some(Anchor::Power(PowerSum::fit(&modes, &times, &power)))
            }
        }
    }

    /// The prediction at `m`, whose minibatch takes `time_ms` (read by the power anchor).
    pub fn predict(&self, m: &PinnedMode, time_ms: f64) -> f64 {
        match self {
            Anchor::Pipeline(p) => p.predict(m),
            Anchor::Power(p) => p.predict(m, time_ms),
        }
    }

    /// Each row's prediction by the anchor fitted to the other rows (leave-one-out, or
    /// [`MAX_FOLDS`]-fold beyond that many rows), or by this one where the others are too
    /// few.
    pub fn cross_fitted(&self, t: Quantity, rows: &[Row]) -> Vec<f64> {
        // Leave one out up to [`MAX_FOLDS`] rows; beyond, that many folds (row i in fold
        // i mod folds), so that a profile of thousands of modes costs MAX_FOLDS fits, not
        // a fit per row (a review measured a 1,000-row profile past 5 minutes).
        let folds = rows.len().min(MAX_FOLDS);
        let mut out = vec![f64::NAN; rows.len()];
        let mut others = Vec::with_capacity(rows.len());
        for fold in 0..folds {
            others.clear();
            let rest = rows.iter().enumerate().filter(|(j, _)| j % folds != fold);
            others.extend(rest.map(|(_, r)| *r));
            let fitted = Anchor::fit(t, &others);
            for (i, r) in rows.iter().enumerate().skip(fold).step_by(folds) {
                out[i] = match &fitted {
                    Some(a) => a.predict(&r.mode, r.time_ms),
                    None => self.predict(&r.mode, r.time_ms),
                };
            }
        }
        out
    }
}

/// Coefficients, in the order of `Terms`: `a_g, a_e, a_s` (GPU stage), `a_l` (loader
/// stage), `b_c, b_e, b_0` (fetch, after both).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pipeline {
    coef: [f64; COEFS],
}

const COEFS: usize = 7;
/// The most fits [`Anchor::cross_fitted`] makes: leave-one-out on up to this many rows
/// (every profile the evaluations use, 50 modes at most), as many folds beyond.
pub const MAX_FOLDS: usize = 50;
const LOADER: usize = 3;

/// A mode's terms, each multiplied by its coefficient: the GPU stage's, the loader's, and
/// the fetch's.
struct Terms {
    gpu: [f64; 3],
    loader: f64,
    fetch: [f64; 3],
}

fn terms(m: &PinnedMode) -> Terms {
    let (c, g, e) = (ghz(m.cpu_hz), ghz(m.gpu_hz), ghz(m.emc_hz));
    Terms {
        gpu: [1.0 / g, 1.0 / e, 1.0 / c],
        loader: 1.0 / (loaders(f64::from(m.cores)) * c),
        fetch: [1.0 / c, 1.0 / e, 1.0],
    }
}

impl Pipeline {
    /// The GPU stage's time at `m`, the loader's, and the fetch's, ms.
    fn stages(&self, m: &PinnedMode) -> (f64, f64, f64) {
        let (t, k) = (terms(m), &self.coef);
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let fetch = dot(&t.fetch, &k[LOADER + 1..]);
        (dot(&t.gpu, &k[..LOADER]), k[LOADER] * t.loader, fetch)
    }

    /// The minibatch time at `m`, ms.
    pub fn predict(&self, m: &PinnedMode) -> f64 {
        let (gpu, loader, fetch) = self.stages(m);
        gpu.max(loader) + fetch
    }

    /// Whether the loader binds at each of `modes`.
    fn loader_bound(&self, modes: &[PinnedMode]) -> Vec<bool> {
        modes
            .iter()
            .map(|m| {
                let (gpu, loader, _) = self.stages(m);
                loader > gpu
            })
            .collect()
    }

    /// Sum of squared log errors.
    fn loss(&self, modes: &[PinnedMode], time_ms: &[f64]) -> f64 {
        let err = |m: &PinnedMode, t: f64| match self.predict(m) {
            p if p > 0.0 => (p / t).ln().powi(2),
            _ => f64::INFINITY,
        };
        modes.iter().zip(time_ms).map(|(m, &t)| err(m, t)).sum()
    }

    /// The fit with each mode's binding stage given (`true`: the loader).
    fn fit_assigned(modes: &[PinnedMode], time_ms: &[f64], bound: &[bool]) -> Pipeline {
        let mut a = Vec::with_capacity(modes.len());
        let mut b = Vec::with_capacity(modes.len());
        for ((m, &t), &by_loader) in modes.iter().zip(time_ms).zip(bound) {
            let terms = terms(m);
            let mut row = [0.0; COEFS];
            if by_loader {
                row[LOADER] = terms.loader;
            } else {
                row[..LOADER].copy_from_slice(&terms.gpu);
            }
            row[LOADER + 1..].copy_from_slice(&terms.fetch);
            // Relative error: each row scaled by its time.
            a.push(row.map(|v| v / t));
            b.push(1.0);
        }
        Pipeline {
            coef: nonnegative_least_squares(&a, &b),
        }
    }

    /// Fits the pipeline to measured times (finite and positive).
    fn fit(modes: &[PinnedMode], time_ms: &[f64]) -> Option<Pipeline> {
        // Starting assignments from loader costs: none, and a log-spaced range over those
        // that would make each profiled mode loader-bound.
        let implied: Vec<f64> = modes
            .iter()
            .zip(time_ms)
            .map(|(m, t)| t / terms(m).loader)
            .collect();
        let lo = implied.iter().copied().fold(f64::MAX, f64::min);
        let hi = implied.iter().copied().fold(0.0, f64::max);
        let starts = std::iter::once(0.0)
            .chain((0..STARTS).map(|i| lo * (hi / lo).powf(i as f64 / (STARTS - 1) as f64)));
        let mut best: Option<(f64, Pipeline)> = None;
        for cost in starts {
            let mut bound: Vec<bool> = implied.iter().map(|c| cost > 0.8 * c).collect();
            let mut fit = Pipeline::fit_assigned(modes, time_ms, &bound);
            for _ in 1..ROUNDS {
                let next = fit.loader_bound(modes);
                if next == bound {
                    break;
                }
                bound = next;
                fit = Pipeline::fit_assigned(modes, time_ms, &bound);
            }
            let loss = fit.loss(modes, time_ms);
            if loss.is_finite() && best.as_ref().is_none_or(|b| loss < b.0) {
                best = Some((loss, fit));
            }
        }
        best.map(|b| b.1)
    }
}

/// Power as static terms (constant, per online core, growing with each clock) plus each
/// domain's dynamic energy per minibatch over its time (`energy_terms`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerSum {
    coef: Vec<f64>,
}

const STATIC_TERMS: usize = 7;
const POWER_TERMS: usize = STATIC_TERMS + ENERGY_TERMS;

fn power_terms(m: &PinnedMode, time_ms: f64) -> [f64; POWER_TERMS] {
    let (n, c, g, e) = (
        f64::from(m.cores),
        ghz(m.cpu_hz),
        ghz(m.gpu_hz),
        ghz(m.emc_hz),
    );
    let mut t = [0.0; POWER_TERMS];
    // Leakage grows with the voltage, about linearly in the clock above its floor; a
    // clock tree switches V^2 f whatever the load, about f^3.
    t[..STATIC_TERMS].copy_from_slice(&[1.0, n, n * c, n * c * c * c, g, g * g * g, e]);
    t[STATIC_TERMS..].copy_from_slice(&energy_terms(m, time_ms));
    t
}

impl PowerSum {
    fn fit(modes: &[PinnedMode], time_ms: &[f64], power_w: &[f64]) -> PowerSum {
        let a: Vec<[f64; POWER_TERMS]> = modes
            .iter()
            .zip(time_ms)
            .zip(power_w)
            .map(|((m, &t), &p)| power_terms(m, t).map(|v| v / p))
            .collect();
        let coef = nonnegative_least_squares(&a, &vec![1.0; a.len()]);
        PowerSum {
            coef: coef.to_vec(),
        }
    }

    /// Power at `m`, whose minibatch takes `time_ms`, W.
    pub fn predict(&self, m: &PinnedMode, time_ms: f64) -> f64 {
        let t = power_terms(m, time_ms);
        t.iter().zip(&self.coef).map(|(x, c)| x * c).sum()
    }
}

/// Starting loader costs tried by [`Pipeline::fit`] besides none.
const STARTS: usize = 16;
/// Fits per start, each from the assignment the previous one implies.
const ROUNDS: usize = 8;

/// `argmin |A x - b|` over `x >= 0`, by cyclic coordinate descent on the normal equations
/// (few columns, so exact coordinate steps converge fast).
fn nonnegative_least_squares<const K: usize>(a: &[[f64; K]], b: &[f64]) -> [f64; K] {
    let mut g = [[0.0; K]; K];
    let mut h = [0.0; K];
    for (row, &y) in a.iter().zip(b) {
        for i in 0..K {
            h[i] += row[i] * y;
            for j in 0..K {
                g[i][j] += row[i] * row[j];
            }
        }
    }
    let mut x = [0.0; K];
    for _ in 0..2000 {
        let mut moved = 0.0f64;
        for j in 0..K {
            if g[j][j] <= 0.0 {
                continue;
            }
            let grad: f64 = g[j].iter().zip(&x).map(|(gj, xj)| gj * xj).sum::<f64>() - h[j];
            let next = (x[j] - grad / g[j][j]).max(0.0);
            moved = moved.max((next - x[j]).abs() * g[j][j].sqrt());
            x[j] = next;
        }
        if moved < 1e-12 {
            break;
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> Vec<PinnedMode> {
        let mut out = Vec::new();
        for c in [1, 2, 4, 8, 12] {
            for f in [300, 800, 1500, 2200] {
                for g in [200, 600, 1300] {
                    for e in [665, 3199] {
                        out.push(PinnedMode::mhz(c, f, g, e));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn recovers_a_pipeline_with_both_stages_binding() {
        let truth = Pipeline {
            coef: [40.0, 10.0, 5.0, 60.0, 3.0, 2.0, 1.0],
        };
        let modes = grid();
        let t: Vec<f64> = modes.iter().map(|m| truth.predict(m)).collect();
        let bound = truth.loader_bound(&modes);
        assert!(bound.iter().any(|&b| b) && bound.iter().any(|&b| !b));
        let fit = Pipeline::fit(&modes, &t).unwrap();
        for (m, t) in modes.iter().zip(&t) {
            assert!((fit.predict(m) / t - 1.0).abs() < 1e-3, "{m:?}: {t}");
        }
    }

    #[test]
    fn a_workload_never_loader_bound_gets_no_core_effect() {
        // The loader never binds in what was profiled: one core must not slow it down.
        let truth = Pipeline {
            coef: [40.0, 10.0, 5.0, 0.0, 3.0, 2.0, 1.0],
        };
        let profiled: Vec<PinnedMode> = grid().into_iter().filter(|m| m.cores >= 4).collect();
        let t: Vec<f64> = profiled.iter().map(|m| truth.predict(m)).collect();
        let fit = Pipeline::fit(&profiled, &t).unwrap();
        let one = PinnedMode::mhz(1, 300, 1300, 3199);
        assert!((fit.predict(&one) / truth.predict(&one) - 1.0).abs() < 1e-3);
    }

    fn rows(
        modes: &[PinnedMode],
        time: impl Fn(&PinnedMode) -> f64,
        power: impl Fn(&PinnedMode, f64) -> f64,
    ) -> Vec<Row> {
        modes
            .iter()
            .map(|m| Row {
                mode: *m,
                time_ms: time(m),
                power_w: power(m, time(m)),
                time_std_ms: 0.0,
                power_std_w: 0.0,
            })
            .collect()
    }

    #[test]
    fn recovers_a_power_sum_through_the_minibatch_time() {
        let mut coef = vec![0.0; POWER_TERMS];
        for (i, c) in [(0, 5.0), (1, 0.3), (4, 1.5), (5, 2.0), (6, 1.0)] {
            coef[i] = c;
        }
        // Dynamic GPU and DRAM energy per minibatch.
        coef[STATIC_TERMS + 3] = 400.0;
        coef[STATIC_TERMS + 6] = 150.0;
        let truth = PowerSum { coef };
        let time = Pipeline {
            coef: [40.0, 10.0, 5.0, 60.0, 3.0, 2.0, 1.0],
        };
        let modes = grid();
        let profiled = rows(&modes, |m| time.predict(m), |m, t| truth.predict(m, t));
        let Some(Anchor::Power(fit)) = Anchor::fit(Quantity::PowerW, &profiled) else {
            panic!("no power anchor");
        };
        for r in &profiled {
            let p = fit.predict(&r.mode, r.time_ms);
            assert!(
                (p / r.power_w - 1.0).abs() < 0.01,
                "{:?}: {p} vs {}",
                r.mode,
                r.power_w
            );
        }
        // The minibatch time is read where it is given: a slower minibatch draws less.
        let m = modes[40];
        assert!(fit.predict(&m, 2.0 * time.predict(&m)) < fit.predict(&m, time.predict(&m)));
    }

    #[test]
    fn too_few_or_bad_rows_give_no_anchor_and_cross_fitting_falls_back() {
        let m = grid();
        let two = rows(&m[..2], |_| 10.0, |_, _| 20.0);
        assert_eq!(Anchor::fit(Quantity::TimeMs, &two), None);
        let mut bad = rows(&m[..4], |_| 10.0, |_, _| 20.0);
        bad[0].time_ms = f64::NAN;
        bad[1].power_w = 0.0;
        assert_eq!(Anchor::fit(Quantity::PowerW, &bad), None);
        // A bad power leaves the time's rows alone.
        assert!(Anchor::fit(Quantity::TimeMs, &bad).is_some());
        let three = rows(&m[..3], |m| 10.0 + f64::from(m.cores), |_, t| 100.0 / t);
        for target in [Quantity::TimeMs, Quantity::PowerW] {
            let whole = Anchor::fit(target, &three).unwrap();
            // Leaving one of three out leaves two: each row falls back to the whole fit.
            let loo = whole.cross_fitted(target, &three);
            for (r, v) in three.iter().zip(&loo) {
                assert_eq!(*v, whole.predict(&r.mode, r.time_ms));
            }
        }
    }
}
