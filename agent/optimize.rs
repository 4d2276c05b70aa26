//! Choosing modes from predictions: the Pareto front of (time per minibatch, power), the
//! fastest mode under a power budget with a safety margin, and the scores the papers use
//! to judge a choice against the truth (time penalty, budget exceedance).

use serde::Serialize;

/// A mode's (predicted or measured) time and power.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// Index into the caller's list of modes.
    pub mode: usize,
    pub time_ms: f64,
    pub power_w: f64,
}

/// The Pareto-optimal points (no other point is both faster and lower-power), fastest
/// first. O(n log n).
pub fn pareto(points: &[Point]) -> Vec<Point> {
    let mut sorted: Vec<Point> = points
        .iter()
        .copied()
        .filter(|p| p.time_ms.is_finite() && p.power_w.is_finite())
        .collect();
    sorted.sort_by(|a, b| {
        a.time_ms
            .total_cmp(&b.time_ms)
            .then(a.power_w.total_cmp(&b.power_w))
    });
    let mut front: Vec<Point> = Vec::new();
    for p in sorted {
        if front.last().is_none_or(|last| p.power_w < last.power_w) {
            front.push(p);
        }
    }
    front
}

/// The fastest point whose power plus `margin_w(point)` stays within `budget_w`.
pub fn fastest_under(
    points: &[Point],
    budget_w: f64,
    margin_w: impl Fn(&Point) -> f64,
) -> Option<Point> {
    points
        .iter()
        .filter(|p| p.power_w + margin_w(p) <= budget_w)
        .min_by(|a, b| a.time_ms.total_cmp(&b.time_ms))
        .copied()
}

/// How choices under a range of budgets compare with the true optimum.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetScore {
    pub budgets: usize,
    pub median_time_penalty_pct: f64,
    pub p90_time_penalty_pct: f64,
    /// Share of budgets whose chosen mode truly draws more than the budget + 1 W.
    pub over_budget_1w_pct: f64,
}

/// The mode chosen for budget `b`: the fastest predicted to fit with its margin. With
/// `verify` (a short run measuring a mode's minibatch time and power), up to
/// [`VERIFY_TRIES`] modes are run, each the fastest predicted to fit that has not run yet,
/// and the fastest measured within the budget is chosen: the runs catch both a power the
/// model under-estimated and a time it was too optimistic about. The runs measure the
/// power, so their candidates keep no margin; instead a run over the budget lowers what
/// the next must be predicted to draw by the most the model has under-estimated so far.
/// With nothing predicted (or measured) to fit, the lowest predicted power.
pub fn choose(
    predicted: &[Point],
    b: f64,
    margin_w: &dyn Fn(&Point) -> f64,
    verify: Option<&dyn Fn(&Point) -> Measured>,
) -> Option<Point> {
    let fastest_fitting = |under: f64, margin_w: &dyn Fn(&Point) -> f64, ran: &[usize]| {
        predicted
            .iter()
            .filter(|p| p.power_w + margin_w(p) <= under && !ran.contains(&p.mode))
            .min_by(|x, y| x.time_ms.total_cmp(&y.time_ms))
            .copied()
    };
    let lowest = || {
        predicted
            .iter()
            .min_by(|x, y| x.power_w.total_cmp(&y.power_w))
            .copied()
    };
    let Some(measure) = verify else {
        return fastest_fitting(b, margin_w, &[]).or_else(lowest);
    };
    let mut ran = Vec::with_capacity(VERIFY_TRIES);
    let mut under_estimate = 0.0f64;
    let mut best: Option<(Point, f64)> = None;
    while ran.len() < VERIFY_TRIES {
        let Some(p) = fastest_fitting(b - under_estimate, &|_| 0.0, &ran) else {
            break;
        };
        ran.push(p.mode);
        let m = measure(&p);
        if m.power_w > b {
            under_estimate = under_estimate.max(m.power_w - p.power_w);
        } else if best.is_none_or(|(_, t)| m.time_ms < t) {
            best = Some((p, m.time_ms));
        }
    }
    best.map(|(p, _)| p).or_else(lowest)
}

/// A verification run's measurement of a mode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub time_ms: f64,
    pub power_w: f64,
}

/// How many modes [`choose`] runs to verify.
pub const VERIFY_TRIES: usize = 5;

/// Scores choosing by `predicted` against `truth` (same modes, same order) for each
/// budget; budgets that no mode truly meets are skipped.
pub fn score_budgets(
    predicted: &[Point],
    truth: &[Point],
    budgets: impl Iterator<Item = f64>,
    margin_w: impl Fn(&Point) -> f64,
    verify: Option<&dyn Fn(&Point) -> Measured>,
) -> BudgetScore {
    let mut penalties = Vec::new();
    let mut over = 0usize;
    for b in budgets {
        let Some(best) = fastest_under(truth, b, |_| 0.0) else {
            continue;
        };
        let Some(chosen) = choose(predicted, b, &margin_w, verify) else {
            continue;
        };
        let actual = truth[chosen.mode];
        penalties.push((actual.time_ms - best.time_ms) / best.time_ms * 100.0);
        if actual.power_w > b + 1.0 {
            over += 1;
        }
    }
    let n = penalties.len();
    penalties.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if n == 0 {
            0.0
        } else {
            penalties[((n - 1) as f64 * q).round() as usize]
        }
    };
    BudgetScore {
        budgets: n,
        median_time_penalty_pct: at(0.5),
        p90_time_penalty_pct: at(0.9),
        over_budget_1w_pct: if n == 0 {
            0.0
        } else {
            over as f64 / n as f64 * 100.0
        },
    }
}

/// Mean absolute percentage error, percent.
pub fn mape(predicted: &[f64], truth: &[f64]) -> f64 {
    let n = predicted.len().min(truth.len());
    if n == 0 {
        return 0.0;
    }
    predicted
        .iter()
        .zip(truth)
        .map(|(p, t)| ((p - t) / t).abs())
        .sum::<f64>()
        / n as f64
        * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(mode: usize, t: f64, w: f64) -> Point {
        Point {
            mode,
            time_ms: t,
            power_w: w,
        }
    }

    #[test]
    fn the_front_keeps_only_undominated_points() {
        let pts = [
            p(0, 10.0, 50.0),
            p(1, 12.0, 40.0),
            p(2, 11.0, 60.0),
            p(3, 20.0, 41.0),
            p(4, 30.0, 10.0),
        ];
        let front: Vec<usize> = pareto(&pts).iter().map(|x| x.mode).collect();
        assert_eq!(front, [0, 1, 4]);
    }

    #[test]
    fn the_budget_pick_respects_the_margin() {
        let pts = [p(0, 10.0, 50.0), p(1, 12.0, 40.0), p(2, 30.0, 10.0)];
        assert_eq!(fastest_under(&pts, 45.0, |_| 0.0).unwrap().mode, 1);
        assert_eq!(fastest_under(&pts, 45.0, |_| 6.0).unwrap().mode, 2);
        assert!(fastest_under(&pts, 5.0, |_| 0.0).is_none());
    }

    #[test]
    fn perfect_predictions_score_zero() {
        let pts: Vec<Point> = (0..50)
            .map(|i| p(i, 100.0 - i as f64, 10.0 + i as f64))
            .collect();
        let s = score_budgets(&pts, &pts, (17..=50).map(f64::from), |_| 0.0, None);
        assert_eq!(s.median_time_penalty_pct, 0.0);
        assert_eq!(s.over_budget_1w_pct, 0.0);
        assert_eq!(s.budgets, 34);
        assert!((mape(&[110.0], &[100.0]) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn verification_runs_the_fastest_predicted_and_keeps_the_fastest_measured_within_budget() {
        // Predicted fastest first. Measured: 0 draws 3 W more than predicted, so 3 (predicted
        // 28 W) is no longer a candidate; 1 is slower than predicted; 2 is the fastest that
        // fits; 6 is past the runs verification makes.
        let predicted: Vec<Point> = [28.0, 27.0, 20.0, 28.0, 20.0, 20.0, 20.0]
            .iter()
            .enumerate()
            .map(|(i, w)| p(i, 10.0 + i as f64, *w))
            .collect();
        let measured = [
            (9.0, 31.0),
            (25.0, 29.0),
            (13.0, 20.0),
            (8.0, 29.0),
            (15.0, 20.0),
            (16.0, 20.0),
            (1.0, 20.0),
        ];
        let ran = std::cell::RefCell::new(Vec::new());
        let measure = |q: &Point| {
            ran.borrow_mut().push(q.mode);
            let (time_ms, power_w) = measured[q.mode];
            Measured { time_ms, power_w }
        };
        let chosen = choose(&predicted, 30.0, &|_| 0.0, Some(&measure)).unwrap();
        assert_eq!(chosen.mode, 2);
        assert_eq!(*ran.borrow(), [0, 1, 2, 4, 5]);
        assert_eq!(ran.borrow().len(), VERIFY_TRIES);
        // Nothing measured within budget: the lowest predicted power.
        let over = |_: &Point| Measured {
            time_ms: 1.0,
            power_w: 99.0,
        };
        let mut pts = predicted.clone();
        pts[5].power_w = 19.0;
        assert_eq!(choose(&pts, 30.0, &|_| 0.0, Some(&over)).unwrap().mode, 5);
    }
}
