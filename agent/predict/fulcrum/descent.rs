//! GMD, jpower's form of Fulcrum's gradient-based multi-dimensional search: profile few
//! modes, model the plans of the rest from them, and profile next where the model says
//! the fastest plan that meets the targets lies.
//!
//! - **Probes.** The top mode, each knob half-way down its table (one mode each, the
//!   others at the top: even where the top meets the targets, a lower clock may train
//!   faster beside the inference it must serve), and a second probe on the knob that sheds
//!   the most training power, half-way between the top and its first probe: power is
//!   convex in a clock (about `f V²`), so a secant from the top to the half-way probe
//!   overstates what the first steps down shed, and the second probe finds the bend.
//! - **The model** ([`Model`]), one per batch size of [`BATCHES`], since a plan's figures
//!   jump with its batch size: of the plan's guard power, log throughput and log latency
//!   at the target's percentile, as the top mode's figures, plus one term per knob
//!   (piecewise linear through the modes profiled on that knob's axis, the others at the
//!   top; extended beyond the last by its last segment), plus what those terms miss at
//!   every profiled mode, interpolated by inverse squared distance in table positions.
//!   It passes through every measurement.
//! - **The walk.** While modes are left ([`GMD_MODES`]), profile the mode whose plan
//!   the model predicts to be the fastest to meet the planner's tightened targets and to
//!   beat the best plan met so far, within a trust region (no knob more than [`REACH`]
//!   table steps below the lowest position profiled on it); stop when none is predicted
//!   to beat it. While nothing is met, profile the mode predicted to miss least. Every
//!   pick keeps the room of the model's worst miss so far: the targets are tightened by
//!   the largest ratio of measured to predicted power and latency among the walk's picks
//!   (a model that put one pick just over the budget by noise puts the next just under).

use super::plan::{Planned, POWER_MARGIN, SLO_MARGIN};
use super::search::{Profiler, GMD_MODES};
use super::{coords, dims, index, Board, BATCHES};

/// How far below the lowest profiled position of a knob the walk may go, table steps.
pub const REACH: usize = 1;

/// The figures a plan is modelled by: guard power (W), log throughput, log latency.
type Figures = [f64; 3];
/// A mode's figures at every batch size.
type PerBatch = [Figures; BATCHES.len()];

fn figures(p: &Planned) -> Figures {
    [
        p.outcome.guard_w,
        p.outcome.throughput_per_s.max(1e-3).ln(),
        p.outcome.slo_pct_ms.max(1e-3).ln(),
    ]
}

/// The model of the module docs over a lattice of `dims` table positions.
pub struct Model {
    dims: [usize; 4],
    top: [usize; 4],
    at_top: PerBatch,
    /// Per knob, the positions profiled on its axis (the top's included) and the figures
    /// there less the top's, by position.
    axes: [Vec<(usize, PerBatch)>; 4],
    /// Every profiled mode's positions and what the knob terms miss there.
    residuals: Vec<([usize; 4], PerBatch)>,
}

impl Model {
    /// The model through `profiled` (positions and the figures of each batch size's
    /// plan), which holds `top`.
    pub fn new(dims: [usize; 4], top: [usize; 4], profiled: &[([usize; 4], PerBatch)]) -> Model {
        let at_top = profiled
            .iter()
            .find(|(x, _)| *x == top)
            .map(|(_, f)| *f)
            .expect("the top mode is profiled");
        let axes = std::array::from_fn(|k| {
            let mut axis: Vec<(usize, PerBatch)> = profiled
                .iter()
                .filter(|(x, _)| (0..4).all(|j| j == k || x[j] == top[j]))
                .map(|(x, f)| (x[k], minus(f, &at_top)))
                .collect();
            axis.sort_by_key(|(pos, _)| *pos);
            axis.dedup_by_key(|(pos, _)| *pos);
            axis
        });
        let mut model = Model {
            dims,
            top,
            at_top,
            axes,
            residuals: Vec::new(),
        };
        model.residuals = profiled
            .iter()
            .map(|(x, f)| (*x, minus(f, &model.additive(*x))))
            .collect();
        model
    }

    /// The top's figures plus every knob's term at `x`.
    fn additive(&self, x: [usize; 4]) -> PerBatch {
        let mut out = self.at_top;
        for (k, axis) in self.axes.iter().enumerate() {
            let term = axis_term(axis, x[k]);
            for (o, t) in out.iter_mut().zip(&term) {
                for (o, t) in o.iter_mut().zip(t) {
                    *o += t;
                }
            }
        }
        out
    }

    /// The predicted figures of every batch size's plan at positions `x`.
    pub fn predict(&self, x: [usize; 4]) -> PerBatch {
        let mut out = self.additive(x);
        let scale = self.dims.map(|n| 1.0 / (n.max(2) - 1) as f64);
        let (mut sum, mut weights) = ([[0.0; 3]; BATCHES.len()], 0.0);
        for (y, r) in &self.residuals {
            let d2: f64 = (0..4)
                .map(|k| ((x[k] as f64 - y[k] as f64) * scale[k]).powi(2))
                .sum();
            if d2 == 0.0 {
                return plus(&out, r);
            }
            let w = 1.0 / d2;
            weights += w;
            for (s, r) in sum.iter_mut().zip(r) {
                for (s, r) in s.iter_mut().zip(r) {
                    *s += w * r;
                }
            }
        }
        if weights > 0.0 {
            for (o, s) in out.iter_mut().zip(&sum) {
                for (o, s) in o.iter_mut().zip(s) {
                    *o += s / weights;
                }
            }
        }
        out
    }

    /// The lowest position profiled on each knob.
    fn lowest(&self) -> [usize; 4] {
        let mut low = self.top;
        for (x, _) in &self.residuals {
            for k in 0..4 {
                low[k] = low[k].min(x[k]);
            }
        }
        low
    }
}

fn minus(a: &PerBatch, b: &PerBatch) -> PerBatch {
    std::array::from_fn(|i| std::array::from_fn(|q| a[i][q] - b[i][q]))
}

fn plus(a: &PerBatch, b: &PerBatch) -> PerBatch {
    std::array::from_fn(|i| std::array::from_fn(|q| a[i][q] + b[i][q]))
}

/// A knob's term at position `pos`: linear between the profiled positions around it,
/// the nearest segment's line beyond them, 0 with only one.
fn axis_term(axis: &[(usize, PerBatch)], pos: usize) -> PerBatch {
    let zero = [[0.0; 3]; BATCHES.len()];
    if axis.len() < 2 {
        return zero;
    }
    let seg = axis
        .windows(2)
        .position(|w| pos <= w[1].0)
        .unwrap_or(axis.len() - 2);
    let ((x0, f0), (x1, f1)) = (&axis[seg], &axis[seg + 1]);
    let a = (pos as f64 - *x0 as f64) / (*x1 as f64 - *x0 as f64);
    std::array::from_fn(|i| std::array::from_fn(|q| f0[i][q] + a * (f1[i][q] - f0[i][q])))
}

/// The GMD walk of the module docs.
pub(super) fn gmd<B: Board>(prof: &mut Profiler<'_, B>, top: usize) {
    let space = prof.board.space().clone();
    let d = dims(&space);
    let x0 = coords(&space, top);
    prof.plan(top, top);
    // The probes: each knob half-way down, then the bend of the knob that sheds most.
    let train_w = |prof: &mut Profiler<'_, B>, x: [usize; 4]| {
        let m = index(&space, x);
        prof.plan(m, m);
        prof.table(m).train_w
    };
    let top_w = train_w(prof, x0);
    let mut shed = None;
    for k in (0..4).filter(|&k| x0[k] > 0) {
        let mut y = x0;
        y[k] = x0[k] / 2;
        let saved = top_w - train_w(prof, y);
        if shed.is_none_or(|(_, s)| saved > s) {
            shed = Some((k, saved));
        }
    }
    if let Some((k, _)) = shed {
        let mut y = x0;
        y[k] = (x0[k] + x0[k] / 2).div_ceil(2);
        if y[k] != x0[k] && y[k] != x0[k] / 2 {
            train_w(prof, y);
        }
    }
    let (budget, slo) = (
        prof.p.budget_w * (1.0 - POWER_MARGIN),
        (prof.p.slo_ms * (1.0 - SLO_MARGIN)).ln(),
    );
    // The largest measured-over-predicted power and latency (log) of the walk's picks.
    let (mut miss_w, mut miss_lat) = (1.0f64, 0.0f64);
    while prof.tables.len() < GMD_MODES {
        let profiled: Vec<([usize; 4], PerBatch)> = prof
            .fixed_modes()
            .into_iter()
            .map(|m| (coords(&space, m), prof.batches(m, m).map(|p| figures(&p))))
            .collect();
        let best_met = prof
            .fixed_modes()
            .into_iter()
            .map(|m| prof.plan(m, m))
            .filter(Planned::feasible)
            .map(|p| p.outcome.throughput_per_s)
            .fold(None, |b: Option<f64>, t| Some(b.map_or(t, |b| b.max(t))));
        let model = Model::new(d, x0, &profiled);
        // Every pick keeps the room of the model's worst miss so far.
        let (w_max, lat_max) = (budget / miss_w, slo - miss_lat);
        let low = model.lowest();
        let mut fastest: Option<(usize, f64, Figures)> = None;
        let mut least: Option<(usize, f64, Figures)> = None;
        for m in 0..space.len() {
            let x = coords(&space, m);
            if (0..4).any(|k| x[k] + REACH < low[k]) || prof.tables.contains_key(&m) {
                continue;
            }
            for f in model.predict(x) {
                let violation = (f[0] / w_max).max((f[2] - lat_max).exp());
                if violation <= 1.0 {
                    let beats = best_met.is_none_or(|b| f[1] > b.ln());
                    if beats && fastest.is_none_or(|(_, t, _)| f[1] > t) {
                        fastest = Some((m, f[1], f));
                    }
                } else if least.is_none_or(|(_, v, _)| violation < v) {
                    least = Some((m, violation, f));
                }
            }
        }
        let pick = match (fastest, best_met) {
            (Some((m, _, f)), _) => (m, f),
            (None, None) => match least {
                Some((m, _, f)) => (m, f),
                None => break,
            },
            (None, Some(_)) => break,
        };
        let (m, predicted) = pick;
        let got = figures(&prof.plan(m, m));
        miss_w = miss_w.max(got[0] / predicted[0]);
        miss_lat = miss_lat.max(got[2] - predicted[2]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A known additive truth plus one cross term: the model passes through every
    /// measurement, and on an axis between profiled points errs as the secant does.
    #[test]
    fn the_model_passes_through_its_measurements_and_follows_the_axes() {
        let dims = [4, 5, 6, 3];
        let truth = |x: [usize; 4]| -> PerBatch {
            let v = |b: usize| {
                let s = (b + 1) as f64;
                let x = x.map(|p| p as f64);
                [
                    s + x[0] + 0.3 * x[1] * x[1] + 2.0 * x[2] + x[3] + 0.1 * x[2] * x[3],
                    s * 0.1 + 0.2 * x[2],
                    1.0 - 0.1 * x[1],
                ]
            };
            std::array::from_fn(v)
        };
        let top = [3, 4, 5, 2];
        let mut points = vec![top];
        for k in 0..4 {
            let mut y = top;
            y[k] /= 2;
            points.push(y);
        }
        points.push([1, 1, 1, 1]);
        let profiled: Vec<_> = points.iter().map(|&x| (x, truth(x))).collect();
        let model = Model::new(dims, top, &profiled);
        for (x, f) in &profiled {
            let p = model.predict(*x);
            for (p, f) in p.iter().flatten().zip(f.iter().flatten()) {
                assert!((p - f).abs() < 1e-9, "{x:?}: {p} against {f}");
            }
        }
        // On the CPU axis between its probe (2) and the top (4): the truth's square
        // against the secant's line, 0.3 * (3 * 3 - (4 + 2) * 3 + 8) = -0.3 at 3, plus
        // the residuals' pull, which is 0 on an axis whose points all have none but the
        // far corner's.
        let x = [3, 3, 5, 2];
        let (p, f) = (model.predict(x), truth(x));
        let corner = model
            .residuals
            .iter()
            .find(|(y, _)| *y == [1, 1, 1, 1])
            .unwrap();
        assert!(corner.1[0][0].abs() > 0.1, "the corner has a residual");
        let secant_error = 0.3;
        assert!(
            (p[0][0] - f[0][0] - secant_error).abs() < 0.15,
            "{} against {}",
            p[0][0],
            f[0][0]
        );
        // Log figures that are additive in the truth are exact everywhere.
        assert!((p[2][1] - f[2][1]).abs() < 1e-9);
    }
}
