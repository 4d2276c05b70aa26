//! The PowerTrain evaluation: profile a reference workload on its reference grid and a
//! target workload on a few modes, fit every method, predict every mode, and score the
//! predictions against the truth (time and power MAPE over the modes not profiled) and the
//! choices they lead to under power budgets (time penalty, budget exceedance).
//!
//! On a simulated board the truth is the workload model's noise-free value and profiling
//! runs in simulated time; with `--truth FILE` the target is replayed from the file (its
//! rows are the modes and the truth) while the reference stays simulated.

use crate::control::mode::{ModeSpace, PinnedMode};
use crate::predict::optimize::{self, BudgetScore, Measured, TimePower, Verify};
use crate::predict::pretrain_cache::{Outcome, PretrainCache};
use crate::predict::profile::{self, ProfileConfig, Row, Source, Strategy};
use crate::predict::{self, active, FitConfig, Method, Model, Quantity};
use serde::Serialize;

/// PowerTrain's reference grid: even core counts, every other CPU frequency from the
/// third plus the maximum, every GPU and EMC frequency (4,368 modes on Orin AGX).
pub fn reference_grid(space: &ModeSpace) -> Vec<PinnedMode> {
    let cores: Vec<u32> = space.cores.iter().copied().filter(|c| c % 2 == 0).collect();
    let mut cpus: Vec<u64> = space.cpu_hz.iter().copied().skip(2).step_by(2).collect();
    if let Some(&top) = space.cpu_hz.last() {
        if cpus.last() != Some(&top) {
            cpus.push(top);
        }
    }
    let mut out = Vec::new();
    for &c in &cores {
        for &f in &cpus {
            for &g in &space.gpu_hz {
                for &e in &space.emc_hz {
                    out.push(PinnedMode {
                        cores: c,
                        cpu_hz: f,
                        gpu_hz: g,
                        emc_hz: e,
                    });
                }
            }
        }
    }
    out
}

/// How hard the reference is profiled and the models trained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Effort {
    /// Epochs, seed and ensemble size of the fits.
    pub fit: FitConfig,
    /// Profile this many modes of the reference grid, at random, instead of all of it.
    pub reference_modes: Option<usize>,
}

impl Effort {
    /// The full setting, or the quick one CI runs: 800 reference modes, 30 epochs, three
    /// ensemble members.
    pub fn new(quick: bool, seed: u64) -> Effort {
        Effort {
            fit: FitConfig {
                seed,
                ..if quick {
                    FitConfig {
                        epochs: 30,
                        ensemble: 3,
                        seed,
                    }
                } else {
                    FitConfig::default()
                }
            },
            reference_modes: quick.then_some(800),
        }
    }

    /// The reference modes profiled on a board of mode space `space`.
    pub fn reference_modes(&self, space: &ModeSpace) -> Vec<PinnedMode> {
        let grid = reference_grid(space);
        match self.reference_modes {
            Some(n) if n < grid.len() => {
                profile::select(&grid, Strategy::Random(n), self.fit.seed ^ 0x5EED)
            }
            _ => grid,
        }
    }
}

/// `method`'s time and power models pre-trained on the `reference` workload, profiled on
/// PowerTrain's reference grid of its board's mode space `space`.
pub fn pretrained(
    reference: &mut dyn Source,
    space: &ModeSpace,
    method: Method,
    effort: &Effort,
) -> Result<(Model, Model), predict::regress::RegressError> {
    let fit = &effort.fit;
    let grid = effort.reference_modes(space);
    let (rows, _) = profile_modes(reference, &grid, &ProfileConfig::default());
    Ok((
        predict::pretrain(method, &rows, Quantity::TimeMs, fit)?,
        predict::pretrain(method, &rows, Quantity::PowerW, fit)?,
    ))
}

/// Profiles `modes`, returning the rows and the seconds it took.
pub fn profile_modes(
    src: &mut dyn Source,
    modes: &[PinnedMode],
    cfg: &ProfileConfig,
) -> (Vec<Row>, f64) {
    let mut secs = 0.0;
    let rows = modes
        .iter()
        .filter_map(|m| profile::profile_mode(src, m, cfg))
        .map(|p| {
            secs += p.seconds;
            p.row
        })
        .collect();
    (rows, secs)
}

/// One method's scores.
#[derive(Debug, Clone, Serialize)]
pub struct MethodScore {
    /// Minibatch-time MAPE over the modes not profiled, percent.
    pub time_mape: f64,
    /// Power MAPE over the modes not profiled, percent.
    pub power_mape: f64,
    /// Minibatch-time MAPE over the modes not profiled that lie on PowerTrain's reference
    /// grid ([`reference_grid`]: the modes the paper validated on), percent.
    pub grid_time_mape: f64,
    /// Power MAPE over those modes, percent.
    pub grid_power_mape: f64,
    /// Median time penalty of the mode chosen under each budget, percent (see [`BudgetScore`]).
    pub median_time_penalty_pct: f64,
    /// 90th-percentile time penalty, percent.
    pub p90_time_penalty_pct: f64,
    /// Share of budgets whose chosen mode truly draws more than the budget + 1 W, percent.
    pub over_budget_1w_pct: f64,
    /// Modes of the target profiled.
    pub profiled_modes: usize,
    /// Time spent profiling the target, minutes (simulated time on a simulated board).
    pub profiling_minutes: f64,
    /// Budgets scored.
    pub budgets: usize,
    /// Wall time to predict time and power of every scored mode, and to build their
    /// Pareto front (one core).
    pub predict_ms: f64,
    /// Wall time to build the Pareto front of the predictions, milliseconds.
    pub pareto_ms: f64,
    /// With the choices verified by short runs (`jpower optimize --verify`), jpower's method.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified: Option<BudgetScore>,
}

/// The power margin a method's choice keeps below a budget, from a mode's predicted
/// (time, spread) and (power, spread). A prediction clamped to its model's bounds
/// (infinite spread, [`predict::time_and_power`]) is no evidence that the mode is fast or
/// fits: such a mode is never chosen as fitting.
pub fn margin_w(method: Method, time: (f64, f64), power: (f64, f64)) -> f64 {
    if !(time.1.is_finite() && power.1.is_finite()) {
        return f64::INFINITY;
    }
    match method {
        // [`MARGIN_SPREADS`] spreads (the members' disagreement with the expected miss at
        // the mode, both measured on the target) plus the measurement noise of the
        // profile: choosing the fastest mode predicted to fit favours the modes whose power
        // is under-predicted, so one spread lets too many choices over the budget.
        Method::Physics => MARGIN_SPREADS * power.1 + 0.005 * power.0,
        // The papers' methods choose on the prediction alone.
        _ => 0.0,
    }
}

/// How many spreads of the predicted power the physics method's margin keeps.
pub const MARGIN_SPREADS: f64 = 2.25;

/// The most budgets [`budgets`] gives: a range wider than this many watts is stepped by
/// more than one (a profile in mW, a review found, would have scored some 50,000).
pub const MAX_BUDGETS: usize = 100;

/// The range of true power, watts: lowest and highest.
fn power_range(truth: &[TimePower]) -> (f64, f64) {
    let lo = truth.iter().map(|p| p.power_w).fold(f64::MAX, f64::min);
    let hi = truth.iter().map(|p| p.power_w).fold(0.0, f64::max);
    (lo, hi)
}

/// The budgets scored where the caller names none: the whole watts within the range of
/// true power, from 1 W over its lowest, every watt or, over a range wider than
/// [`MAX_BUDGETS`] watts, every so many whole watts.
pub fn budgets(truth: &[TimePower]) -> Vec<f64> {
    let (lo, hi) = power_range(truth);
    let (lo, hi) = (lo.ceil() + 1.0, hi.floor());
    if lo > hi {
        return Vec::new();
    }
    let step = ((hi - lo) / (MAX_BUDGETS - 1) as f64).ceil().max(1.0);
    (0..MAX_BUDGETS)
        .map(|i| lo + i as f64 * step)
        .take_while(|&w| w <= hi)
        .collect()
}

/// The whole evaluation's inputs.
pub struct Eval<'a> {
    /// The board's name in the report.
    pub board: String,
    /// The reference workload's source, on a board of mode space `reference_space`, and
    /// the target's.
    pub reference: &'a mut dyn Source,
    /// The reference board's mode space.
    pub reference_space: ModeSpace,
    /// The target workload's source.
    pub target: &'a mut dyn Source,
    /// Modes of the target to profile.
    pub modes: usize,
    /// Choose the target's modes actively (where the physics ensemble is least certain)
    /// instead of stratified over the knobs.
    pub active: bool,
    /// How hard the reference is profiled and the models trained.
    pub effort: Effort,
    /// How each mode is profiled.
    pub profile: ProfileConfig,
    /// The budgets to score choices at (the papers' 17-50 W on Orin AGX); `None`: each
    /// whole watt within the range of true power.
    pub budgets: Option<Vec<f64>>,
    /// Where the baselines' pre-training on the reference is kept between runs (`None`:
    /// trained every time). jpower's own method always pre-trains.
    pub cache: Option<&'a PretrainCache>,
    /// Told what each stage did as it finishes (the CLI prints it on stderr).
    pub progress: &'a mut dyn FnMut(&str),
}

/// A method's pre-training on the reference.
#[derive(Debug, Clone, Serialize)]
pub struct Pretraining {
    /// Wall time, seconds (reading the cache, where it was read from there).
    pub seconds: f64,
    /// Whether it was read from the cache.
    pub cached: bool,
}

/// The evaluation's results, per method.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The board's name in the report.
    pub board: String,
    /// Modes scored: the target's modes not profiled.
    pub evaluated_modes: usize,
    /// Modes of the reference profiled.
    pub reference_modes: usize,
    /// Time spent profiling the reference, minutes.
    pub reference_profiling_minutes: f64,
    /// Each method's scores, by method name.
    pub methods: std::collections::BTreeMap<String, MethodScore>,
    /// Each transfer method's pre-training on the reference, by method name.
    pub pretraining: std::collections::BTreeMap<String, Pretraining>,
    /// The budgets the choices were scored at, W.
    pub budgets_w: Vec<f64>,
    /// The lowest and highest true power of the modes scored, W.
    pub truth_power_w: [f64; 2],
}

/// Runs the evaluation.
pub fn evaluate(e: Eval<'_>) -> Result<Report, predict::regress::RegressError> {
    let space = e.target.modes();
    let grid = e.effort.reference_modes(&e.reference_space);
    let (fit, seed) = (&e.effort.fit, e.effort.fit.seed);
    let progress = e.progress;
    let clock = std::time::Instant::now();
    let (ref_rows, ref_secs) = profile_modes(e.reference, &grid, &e.profile);
    progress(&format!(
        "profiled the reference on {} modes in {:.1} s",
        ref_rows.len(),
        clock.elapsed().as_secs_f64()
    ));
    let mut pretrained = std::collections::BTreeMap::new();
    let mut pretraining = std::collections::BTreeMap::new();
    for method in Method::ALL.into_iter().filter(|m| m.uses_reference()) {
        let clock = std::time::Instant::now();
        let train = || {
            Ok((
                predict::pretrain(method, &ref_rows, Quantity::TimeMs, fit)?,
                predict::pretrain(method, &ref_rows, Quantity::PowerW, fit)?,
            ))
        };
        let (models, outcome) = match e.cache.filter(|_| method != Method::Physics) {
            Some(cache) => {
                let (models, outcome) =
                    cache.get_or_train(&e.board, method, &ref_rows, fit, train)?;
                (models, Some((cache, outcome)))
            }
            None => (train()?, None),
        };
        let seconds = clock.elapsed().as_secs_f64();
        let how = match &outcome {
            None => String::new(),
            Some((c, Outcome::Hit)) => format!(", read from {}", c.dir().display()),
            Some((c, Outcome::Stored)) => format!(", stored in {}", c.dir().display()),
            Some((_, Outcome::NotStored(why))) => format!(", not stored: {why}"),
            Some((_, Outcome::Replaced(why))) => format!(", replacing an unreadable entry: {why}"),
        };
        progress(&format!(
            "pre-trained {} on the reference in {seconds:.1} s{how}",
            method.name()
        ));
        let cached = matches!(outcome, Some((_, Outcome::Hit)));
        pretraining.insert(method.name().to_string(), Pretraining { seconds, cached });
        pretrained.insert(method.name(), models);
    }
    let mut secs = 0.0;
    let mut measure = |modes: &[PinnedMode]| {
        let (rows, s) = profile_modes(e.target, modes, &e.profile);
        secs += s;
        rows
    };
    let rows = if e.active {
        let (time, power) = &pretrained[Method::Physics.name()];
        let guide = active::Guide { time, power, fit };
        active::profile_active(&space, e.modes, &guide, seed, &mut measure)?
    } else {
        measure(&profile::select(
            &space,
            Strategy::Stratified(e.modes),
            seed,
        ))
    };
    let chosen: Vec<PinnedMode> = rows.iter().map(|r| r.mode).collect();
    let held: Vec<PinnedMode> = space
        .iter()
        .filter(|m| !chosen.contains(m))
        .copied()
        .collect();
    let truth: Vec<(f64, f64)> = held.iter().filter_map(|m| e.target.truth(m)).collect();
    let truth_points: Vec<TimePower> = truth
        .iter()
        .enumerate()
        .map(|(i, &(t, p))| TimePower {
            mode: i,
            time_ms: t,
            power_w: p,
        })
        .collect();
    // The budgets the caller names (the papers'), kept whole for comparison with them,
    // where the truth's power reaches one; else (a recorded profile that draws less than
    // all of them: each budget scored the one unconstrained choice, median and p90 alike,
    // a review found) the whole watts of the truth's range.
    let (lo, hi) = power_range(&truth_points);
    let budgets = match &e.budgets {
        Some(named) if named.iter().any(|b| (lo..=hi).contains(b)) => named.clone(),
        _ => budgets(&truth_points),
    };
    let knobs: Vec<optimize::LogCoords> = held.iter().map(optimize::log_coords).collect();
    // PowerTrain validated on its reference grid's modes: the scores there too.
    let on_grid: Vec<bool> = {
        let grid: std::collections::HashSet<PinnedMode> =
            reference_grid(&e.reference_space).into_iter().collect();
        held.iter().map(|m| grid.contains(m)).collect()
    };
    let mut methods = std::collections::BTreeMap::new();
    for method in Method::ALL {
        let started = std::time::Instant::now();
        let reference = pretrained.get(method.name());
        let reference = reference.map(|(t, p)| (t, p));
        let (time, power) = predict::fit_time_and_power(method, &rows, reference, fit)?;
        let clock = std::time::Instant::now();
        let (pt, pp) = predict::time_and_power(&time, &power, &held);
        let predict_ms = clock.elapsed().as_secs_f64() * 1000.0;
        let predicted = optimize::points(&pt, &pp);
        let clock = std::time::Instant::now();
        let front = optimize::pareto(&predicted);
        let pareto_ms = clock.elapsed().as_secs_f64() * 1000.0;
        std::hint::black_box(front);
        let margin = |p: &TimePower| margin_w(method, pt[p.mode], pp[p.mode]);
        let score: BudgetScore = optimize::score_budgets(
            &predicted,
            &truth_points,
            budgets.iter().copied(),
            margin,
            None,
        );
        // A check run of 40 minibatches measures a mode's mean time to ~0.3% and its
        // power to ~0.25% (2% and 1.5% noise per minibatch).
        let measure = |p: &TimePower| {
            let noise = |k: u64, sigma: f64| {
                let z = crate::support::rng::gaussian(
                    seed ^ k ^ crate::support::rng::spread(p.mode as u64),
                );
                1.0 + sigma / 40f64.sqrt() * z
            };
            let truth = truth_points[p.mode];
            Measured {
                time_ms: truth.time_ms * noise(0x7111, 0.02),
                power_w: truth.power_w * noise(0, 0.015),
            }
        };
        let verify = Verify {
            run: &measure,
            knobs: &knobs,
        };
        let verified = (method == Method::Physics).then(|| {
            optimize::score_budgets(
                &predicted,
                &truth_points,
                budgets.iter().copied(),
                margin,
                Some(&verify),
            )
        });
        let mape = |pred: &predict::Predicted, pick: fn(&(f64, f64)) -> f64, grid: bool| {
            let on = |i: &usize| !grid || on_grid[*i];
            let idx: Vec<usize> = (0..truth.len()).filter(on).collect();
            optimize::mape(
                &idx.iter().map(|&i| pred[i].0).collect::<Vec<_>>(),
                &idx.iter().map(|&i| pick(&truth[i])).collect::<Vec<_>>(),
            )
        };
        let (tm, pm) = (mape(&pt, |t| t.0, false), mape(&pp, |t| t.1, false));
        let grid_mape = (mape(&pt, |t| t.0, true), mape(&pp, |t| t.1, true));
        methods.insert(
            method.name().to_string(),
            MethodScore {
                time_mape: tm,
                power_mape: pm,
                grid_time_mape: grid_mape.0,
                grid_power_mape: grid_mape.1,
                median_time_penalty_pct: score.median_time_penalty_pct,
                p90_time_penalty_pct: score.p90_time_penalty_pct,
                over_budget_1w_pct: score.over_budget_1w_pct,
                profiled_modes: rows.len(),
                profiling_minutes: secs / 60.0,
                budgets: score.budgets,
                predict_ms,
                pareto_ms,
                verified,
            },
        );
        progress(&format!(
            "fitted {} to the target and scored it in {:.1} s",
            method.name(),
            started.elapsed().as_secs_f64()
        ));
    }
    Ok(Report {
        board: e.board.clone(),
        evaluated_modes: held.len(),
        reference_modes: ref_rows.len(),
        reference_profiling_minutes: ref_secs / 60.0,
        methods,
        pretraining,
        truth_power_w: [
            truth_points
                .iter()
                .map(|p| p.power_w)
                .fold(f64::MAX, f64::min),
            truth_points.iter().map(|p| p.power_w).fold(0.0, f64::max),
        ],
        budgets_w: budgets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default budgets: each whole watt from 1 W over the lowest power, stepped so that
    /// a range in mW (a review found some 50,000 budgets) gives at most [`MAX_BUDGETS`].
    #[test]
    fn the_default_budgets_are_whole_watts_and_at_most_a_hundred() {
        let of = |powers: &[f64]| {
            let truth: Vec<TimePower> = (powers.iter().enumerate())
                .map(|(mode, &power_w)| TimePower {
                    mode,
                    time_ms: 1.0,
                    power_w,
                })
                .collect();
            budgets(&truth)
        };
        assert_eq!(of(&[10.2, 14.9]), [12.0, 13.0, 14.0]);
        assert!(of(&[10.2, 11.5]).is_empty());
        let mw = of(&[9_800.0, 60_300.0]);
        assert!(mw.len() <= MAX_BUDGETS && mw.len() > 90, "{}", mw.len());
        assert_eq!(mw[0], 9_801.0);
        assert!(mw.iter().all(|b| b.fract() == 0.0 && *b <= 60_300.0));
    }

    /// Regression test for the papers' methods' degenerate budget choices (median penalty
    /// 744% on ResNet-18 -> MobileNetV3, median equal to p90 elsewhere): a time model on
    /// the raw scale goes below every time it was fitted on at fast clocks, the clamp held
    /// thousands of modes at its floor, and the tie among them went to the lowest power,
    /// a slow mode.
    #[test]
    fn a_prediction_clamped_to_its_bounds_is_never_chosen() {
        use crate::sim::{sources::SimSource, workload::Workload};
        let spec = crate::sim::spec::find("orin-agx").unwrap();
        let all: Vec<PinnedMode> = spec.mode_space().iter().collect();
        let mut target = SimSource::new(spec.silicon, Workload::YoloV8n, spec.mode_space(), 1);
        let chosen = profile::select(&all, Strategy::Stratified(50), 1);
        let (rows, _) = profile_modes(&mut target, &chosen, &ProfileConfig::default());
        let cfg = FitConfig::default();
        let (time, power) = predict::fit_time_and_power(Method::Linear, &rows, None, &cfg).unwrap();
        let (pt, pp) = predict::time_and_power(&time, &power, &all);
        let floor = time.bounds.0;
        let clamped: Vec<usize> = (0..all.len()).filter(|&i| pt[i].0 == floor).collect();
        assert!(clamped.len() > 100, "{} modes at the floor", clamped.len());
        for &i in &clamped {
            assert_eq!(pt[i].1, f64::INFINITY);
            assert_eq!(margin_w(Method::Linear, pt[i], pp[i]), f64::INFINITY);
        }
        let points = optimize::points(&pt, &pp);
        let margin = |p: &TimePower| margin_w(Method::Linear, pt[p.mode], pp[p.mode]);
        let picks: std::collections::BTreeSet<usize> = (17..=50)
            .filter_map(|b| optimize::choose(&points, f64::from(b), &margin, None))
            .filter(|c| c.fits)
            .map(|c| c.mode.mode)
            .collect();
        assert!(!picks.is_empty());
        assert!(picks.iter().all(|i| pt[*i].0 > floor), "{picks:?}");
    }

    #[test]
    fn the_reference_grid_is_powertrains() {
        let spec = crate::sim::spec::find("orin-agx").unwrap();
        let g = reference_grid(&spec.mode_space());
        assert_eq!(g.len(), 4368);
        let cpus: std::collections::BTreeSet<u64> = g.iter().map(|m| m.cpu_hz / 1000).collect();
        let want = [
            268800, 422400, 576000, 729600, 883200, 1036800, 1190400, 1344000, 1497600, 1651200,
            1804800, 1958400, 2112000, 2201600,
        ];
        assert_eq!(cpus.into_iter().collect::<Vec<_>>(), want);
    }
}
