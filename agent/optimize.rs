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
/// `verify` (a short run measuring a mode's minibatch time and power), the
/// [`VERIFY_TRIES`] fastest predicted to fit are run and the fastest measured within the
/// budget is chosen: the run catches both a power the model under-estimated and a time it
/// was too optimistic about. With nothing predicted (or measured) to fit, the lowest
/// predicted power.
pub fn choose(
    predicted: &[Point],
    b: f64,
    margin_w: &dyn Fn(&Point) -> f64,
    verify: Option<&dyn Fn(&Point) -> Measured>,
) -> Option<Point> {
    let mut fits: Vec<Point> = predicted
        .iter()
        .copied()
        .filter(|p| p.power_w + margin_w(p) <= b)
        .collect();
    fits.sort_by(|x, y| x.time_ms.total_cmp(&y.time_ms));
    let lowest = || {
        predicted
            .iter()
            .min_by(|x, y| x.power_w.total_cmp(&y.power_w))
            .copied()
    };
    match verify {
        None => fits.first().copied().or_else(lowest),
        Some(measure) => fits
            .iter()
            .take(VERIFY_TRIES)
            .map(|p| (p, measure(p)))
            .filter(|(_, m)| m.power_w <= b)
            .min_by(|x, y| x.1.time_ms.total_cmp(&y.1.time_ms))
            .map(|(p, _)| *p)
            .or_else(lowest),
    }
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
        // Predicted fastest first; measured: 0 draws too much, 1 is slower than predicted,
        // 2 is the fastest that fits; 6 is past the runs verification makes.
        let predicted: Vec<Point> = (0..7).map(|i| p(i, 10.0 + i as f64, 20.0)).collect();
        let measured = [
            (9.0, 31.0),
            (25.0, 20.0),
            (13.0, 20.0),
            (14.0, 29.0),
            (15.0, 20.0),
            (16.0, 20.0),
            (1.0, 20.0),
        ];
        let runs = std::cell::Cell::new(0);
        let measure = |q: &Point| {
            runs.set(runs.get() + 1);
            let (time_ms, power_w) = measured[q.mode];
            Measured { time_ms, power_w }
        };
        let chosen = choose(&predicted, 30.0, &|_| 0.0, Some(&measure)).unwrap();
        assert_eq!((chosen.mode, runs.get()), (2, VERIFY_TRIES));
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
