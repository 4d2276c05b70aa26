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
//!   jump with its batch size: of the logs of the plan's guard power, throughput and
//!   latency at the target's percentile, as the top mode's figures, plus one term per
//!   knob (piecewise linear through the modes profiled on that knob's axis, the others at
//!   the top; extended beyond the last by its last segment), plus what those terms miss
//!   at every profiled mode, interpolated by inverse squared distance in table positions.
//!   It passes through every measurement. Power is modelled in logs because what a knob
//!   sheds scales with what the others leave drawing: the CPU cores draw less beside a
//!   slower GPU that keeps them waiting, so savings in watts do not add. In watts, the
//!   walk's first pick (most knobs lowered at once) came out 2-7 % over its prediction
//!   in the quick sweep's traces; in logs, mostly 0-2 % (5 % at most).
//! - **The walk.** While modes are left ([`GMD_MODES`]), profile the mode whose plan
//!   the model predicts to be the fastest to meet the planner's tightened targets and to
//!   beat the best plan met so far, within a trust region (no knob more than [`REACH`]
//!   table steps below the lowest position profiled on it); stop when none is predicted
//!   to beat it. While nothing is met, profile the mode predicted to miss least. Every
//!   pick keeps the room of the model's worst miss so far: the targets are tightened by
//!   the largest ratio of measured to predicted power and latency among the walk's picks
//!   (a model that put one pick just over the budget by noise puts the next just under).
//! - **Per-phase pairs** ([`pair_step`]): the same model over the modes' phase tables
//!   predicts the table of every GPU x EMC setting at the best fixed mode's cores and
//!   CPU clock; the best pair planned on them has its modes profiled while at most
//!   [`MAX_MODES`] are, so that the choice plans the pair on measured tables.

use super::plan::{tightened, Planned};
use super::profiler::{Profiler, GMD_MODES, MAX_MODES};
use super::{coords, dims, index, Board, PhaseTable, BATCHES};

/// How far below the lowest profiled position of a knob the walk may go, table steps.
pub const REACH: usize = 1;

/// The figures of a plan: log guard power (W), log throughput, log latency, per batch size
/// (`3 * batch + figure`).
const PLAN: usize = 3 * BATCHES.len();
type PlanFigures = [f64; PLAN];

/// The figures of a phase table: log training time, training power, then log inference
/// time and inference power per batch size.
const TABLE: usize = 2 + 2 * BATCHES.len();

fn table_figures(t: &PhaseTable) -> [f64; TABLE] {
    let n = BATCHES.len();
    std::array::from_fn(|i| match i {
        0 => t.train_ms.ln(),
        1 => t.train_w,
        _ if i < 2 + n => t.infer_ms[i - 2].ln(),
        _ => t.infer_w[i - 2 - n],
    })
}

/// The phase table of figures `f` ([`table_figures`]) and training spread `spread`.
fn table_of(f: &[f64; TABLE], spread: f64) -> PhaseTable {
    let n = BATCHES.len();
    PhaseTable {
        train_ms: f[0].exp(),
        train_spread: spread,
        train_w: f[1],
        infer_ms: std::array::from_fn(|b| f[2 + b].exp()),
        infer_w: std::array::from_fn(|b| f[2 + n + b]),
    }
}

fn plan_figures(plans: &[Planned; BATCHES.len()]) -> PlanFigures {
    std::array::from_fn(|i| {
        let o = &plans[i / 3].outcome;
        match i % 3 {
            0 => o.guard_w.max(1e-3).ln(),
            1 => o.throughput_per_s.max(1e-3).ln(),
            _ => o.slo_pct_ms.max(1e-3).ln(),
        }
    })
}

/// The model of the module docs over a lattice of `dims` table positions, of `N` figures
/// a mode.
pub struct Model<const N: usize> {
    dims: [usize; 4],
    top: [usize; 4],
    at_top: [f64; N],
    /// Per knob, the positions profiled on its axis (the top's included) and the figures
    /// there less the top's, by position.
    axes: [Vec<(usize, [f64; N])>; 4],
    /// Every profiled mode's positions and what the knob terms miss there.
    residuals: Vec<([usize; 4], [f64; N])>,
}

impl<const N: usize> Model<N> {
    /// The model through `profiled` (positions and figures), which holds `top`.
    pub fn new(dims: [usize; 4], top: [usize; 4], profiled: &[([usize; 4], [f64; N])]) -> Self {
        let at_top = profiled
            .iter()
            .find(|(x, _)| *x == top)
            .map(|(_, f)| *f)
            .expect("the top mode is profiled");
        let axes = std::array::from_fn(|k| {
            let mut axis: Vec<(usize, [f64; N])> = profiled
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
    fn additive(&self, x: [usize; 4]) -> [f64; N] {
        let mut out = self.at_top;
        for (k, axis) in self.axes.iter().enumerate() {
            let term = axis_term(axis, x[k]);
            out.iter_mut().zip(&term).for_each(|(o, t)| *o += t);
        }
        out
    }

    /// The predicted figures at positions `x`.
    pub fn predict(&self, x: [usize; 4]) -> [f64; N] {
        let mut out = self.additive(x);
        let scale = self.dims.map(|n| 1.0 / (n.max(2) - 1) as f64);
        let (mut sum, mut weights) = ([0.0; N], 0.0);
        for (y, r) in &self.residuals {
            let d2: f64 = (0..4)
                .map(|k| ((x[k] as f64 - y[k] as f64) * scale[k]).powi(2))
                .sum();
            if d2 == 0.0 {
                return plus(&out, r);
            }
            let w = 1.0 / d2;
            weights += w;
            sum.iter_mut().zip(r).for_each(|(s, r)| *s += w * r);
        }
        if weights > 0.0 {
            out.iter_mut()
                .zip(&sum)
                .for_each(|(o, s)| *o += s / weights);
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

fn minus<const N: usize>(a: &[f64; N], b: &[f64; N]) -> [f64; N] {
    std::array::from_fn(|i| a[i] - b[i])
}

fn plus<const N: usize>(a: &[f64; N], b: &[f64; N]) -> [f64; N] {
    std::array::from_fn(|i| a[i] + b[i])
}

/// A knob's term at position `pos`: linear between the profiled positions around it,
/// the nearest segment's line beyond them, 0 with only one.
fn axis_term<const N: usize>(axis: &[(usize, [f64; N])], pos: usize) -> [f64; N] {
    if axis.len() < 2 {
        return [0.0; N];
    }
    let seg = axis
        .windows(2)
        .position(|w| pos <= w[1].0)
        .unwrap_or(axis.len() - 2);
    let ((x0, f0), (x1, f1)) = (&axis[seg], &axis[seg + 1]);
    let a = (pos as f64 - *x0 as f64) / (*x1 as f64 - *x0 as f64);
    std::array::from_fn(|i| f0[i] + a * (f1[i] - f0[i]))
}

/// The GMD walk of the module docs.
pub(super) fn gmd<B: Board>(prof: &mut Profiler<'_, B>, top: usize) {
    let space = prof.board.space().clone();
    let d = dims(&space);
    let x0 = coords(&space, top);
    prof.plan(top);
    // The probes: each knob half-way down, then the bend of the knob that sheds most.
    // A probe is planned; its measured training power says what the knob sheds.
    let probe = |prof: &mut Profiler<'_, B>, x: [usize; 4]| {
        let m = index(&space, x);
        prof.plan(m);
        prof.table(m).train_w
    };
    let top_w = probe(prof, x0);
    let mut shed = None;
    for k in (0..4).filter(|&k| x0[k] > 0) {
        let mut y = x0;
        y[k] = x0[k] / 2;
        let saved = top_w - probe(prof, y);
        if shed.is_none_or(|(_, s)| saved > s) {
            shed = Some((k, saved));
        }
    }
    if let Some((k, _)) = shed {
        let mut y = x0;
        y[k] = (x0[k] + x0[k] / 2).div_ceil(2);
        if y[k] != x0[k] && y[k] != x0[k] / 2 {
            probe(prof, y);
        }
    }
    let q = tightened(&prof.p);
    let (budget, slo) = (q.budget_w.ln(), q.slo_ms.ln());
    // The largest measured-over-predicted power and latency (logs) of the walk's picks.
    let (mut miss_w, mut miss_lat) = (0.0f64, 0.0f64);
    while prof.tables.len() < GMD_MODES {
        let profiled: Vec<([usize; 4], PlanFigures)> = prof
            .fixed_modes()
            .into_iter()
            .map(|m| (coords(&space, m), plan_figures(&prof.batches(m))))
            .collect();
        let best_met = prof.best_met();
        let model = Model::new(d, x0, &profiled);
        // Every pick keeps the room of the model's worst miss so far.
        let (w_max, lat_max) = (budget - miss_w, slo - miss_lat);
        let low = model.lowest();
        // (mode, batch, its predicted figures) of the fastest predicted to meet and of
        // the least predicted miss.
        let mut fastest: Option<(usize, usize, &[f64])> = None;
        let mut least: Option<(usize, usize, &[f64], f64)> = None;
        let candidates: Vec<(usize, PlanFigures)> = (0..space.len())
            .map(|m| (m, coords(&space, m)))
            .filter(|(m, x)| (0..4).all(|k| x[k] + REACH >= low[k]) && !prof.tables.contains_key(m))
            .map(|(m, x)| (m, model.predict(x)))
            .collect();
        for (m, figures) in &candidates {
            for (batch, f) in figures.chunks_exact(3).enumerate() {
                let violation = (f[0] - w_max).max(f[2] - lat_max).exp();
                if violation <= 1.0 {
                    let beats = best_met.is_none_or(|b| f[1] > b.ln());
                    if beats && fastest.is_none_or(|(.., t)| f[1] > t[1]) {
                        fastest = Some((*m, batch, f));
                    }
                } else if least.is_none_or(|(.., v)| violation < v) {
                    least = Some((*m, batch, f, violation));
                }
            }
        }
        let (m, batch, predicted) = match (fastest, least, best_met) {
            (Some(pick), ..) => pick,
            (None, Some((m, batch, f, _)), None) => (m, batch, f),
            _ => break,
        };
        let got = &plan_figures(&prof.batches(m))[3 * batch..];
        miss_w = miss_w.max(got[0] - predicted[0]);
        miss_lat = miss_lat.max(got[2] - predicted[2]);
    }
    pair_step(prof, x0);
}

/// GMD's per-phase step: the phase tables of every GPU x EMC setting at the best fixed
/// mode's cores and CPU clock, modelled ([`Model`] over [`table_figures`]) from every
/// mode profiled, the best pair of them planned on those tables ([`Profiler::best_pair`],
/// among the settings on the Pareto front of training time and power or of some batch
/// size's inference time and power), and its modes profiled where [`MAX_MODES`] allows,
/// for the choice to plan on what they measure.
fn pair_step<B: Board>(prof: &mut Profiler<'_, B>, x0: [usize; 4]) {
    let space = prof.board.space().clone();
    let d = dims(&space);
    let (mode, fixed) = prof.best_fixed();
    let at = coords(&space, mode);
    let profiled: Vec<([usize; 4], [f64; TABLE])> = prof
        .tables
        .iter()
        .map(|(&m, t)| (coords(&space, m), table_figures(t)))
        .collect();
    let model = Model::new(d, x0, &profiled);
    let spread = prof.tables[&mode].train_spread;
    let same: Vec<(usize, PhaseTable)> = (0..d[2] * d[3])
        .map(|k| index(&space, [at[0], at[1], k / d[3], k % d[3]]))
        .map(|m| {
            let predicted = || table_of(&model.predict(coords(&space, m)), spread);
            (m, prof.tables.get(&m).copied().unwrap_or_else(predicted))
        })
        .collect();
    let dominated = |key: &dyn Fn(&PhaseTable) -> (f64, f64), t: &PhaseTable| {
        let (a, b) = key(t);
        same.iter().any(|(_, u)| {
            let (x, y) = key(u);
            x <= a && y <= b && (x < a || y < b)
        })
    };
    let front: Vec<(usize, PhaseTable)> = same
        .iter()
        .filter(|(_, t)| {
            !dominated(&|u| (u.train_ms, u.train_w), t)
                || (0..BATCHES.len()).any(|b| !dominated(&|u| (u.infer_ms[b], u.infer_w[b]), t))
        })
        .copied()
        .collect();
    let floor = if fixed.feasible() {
        fixed.outcome.throughput_per_s
    } else {
        0.0
    };
    if let Some((train, infer, _)) = prof.best_pair(&front, floor) {
        let new = [train, infer]
            .iter()
            .filter(|m| !prof.tables.contains_key(m))
            .count();
        if prof.tables.len() + new <= MAX_MODES {
            prof.table(train);
            prof.table(infer);
        }
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
        // Three figures: one with a square on the CPU axis and a cross term, two additive.
        let truth = |x: [usize; 4]| -> [f64; 3] {
            let x = x.map(|p| p as f64);
            [
                x[0] + 0.3 * x[1] * x[1] + 2.0 * x[2] + x[3] + 0.1 * x[2] * x[3],
                0.2 * x[2] - x[0],
                1.0 - 0.1 * x[1],
            ]
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
            for (p, f) in model.predict(*x).iter().zip(f) {
                assert!((p - f).abs() < 1e-9, "{x:?}: {p} against {f}");
            }
        }
        // On the CPU axis between its probe (2) and the top (4), the secant overstates
        // the square by 0.3 * ((4 + 16) / 2 - 9) = 0.3 at 3; the far corner's residual
        // (the only one) pulls by a few hundredths.
        let x = [3, 3, 5, 2];
        let (p, f) = (model.predict(x), truth(x));
        let corner = model.residuals.iter().find(|(y, _)| *y == [1, 1, 1, 1]);
        assert!(
            corner.unwrap().1[0].abs() > 0.1,
            "the corner has a residual"
        );
        assert!(
            (p[0] - f[0] - 0.3).abs() < 0.05,
            "{} against {}",
            p[0],
            f[0]
        );
        // Figures additive in the truth are exact everywhere.
        for x in [[0, 0, 0, 0], [2, 1, 3, 0], x] {
            let (p, f) = (model.predict(x), truth(x));
            assert!(
                (p[1] - f[1]).abs() < 1e-9 && (p[2] - f[2]).abs() < 1e-9,
                "{x:?}"
            );
        }
    }
}
