//! Active selection of the modes to profile: after a stratified start, profile next the
//! modes where the physics ensemble, transferred to what has been profiled so far, is
//! least certain, near its predicted Pareto front, and far from every mode already
//! profiled.
//!
//! Each round re-fits the transfer (a closed-form read-out refit, milliseconds), predicts
//! every candidate with its spread, and picks a batch greedily by
//! `uncertainty x distance x relevance`: the uncertainty is the ensemble's relative spread
//! of time and of power (squared and summed); the distance is to the nearest profiled or
//! already picked mode, in knob-table positions scaled to [0, 1] per knob, and keeps a
//! batch from piling onto one uncertain corner; the relevance falls off exponentially with
//! how far the mode is behind the predicted front (`FRONT_SLACK`), since a budget's
//! choice is read off the front. Without it, the picks went to uncertain corners no budget
//! chooses (one core, slow clocks) while the two-core modes that MobileNetV3's budgets
//! choose went unprofiled, and their power was under-predicted by 15%.

use super::regress::RegressError;
use super::{fit_time_and_power, FitConfig, Method, Model};
use crate::control::mode::PinnedMode;
use crate::predict::profile::{self, Row, Strategy};

/// The physics models pre-trained on a reference workload that guide the choice.
pub struct Guide<'a> {
    /// The time model pre-trained on the reference.
    pub time: &'a Model,
    /// The power model pre-trained on the reference.
    pub power: &'a Model,
    /// How the target's models are fitted as modes are profiled.
    pub fit: &'a FitConfig,
}

/// Profiles `n` of `candidates` chosen actively, through `profile` (which returns the rows
/// of the modes it could measure), and returns every row profiled.
pub fn profile_active(
    candidates: &[PinnedMode],
    n: usize,
    guide: &Guide<'_>,
    seed: u64,
    mut profile: impl FnMut(&[PinnedMode]) -> Vec<Row>,
) -> Result<Vec<Row>, RegressError> {
    let n = n.min(candidates.len());
    let start = (n / 2).max(n.min(8));
    let mut rows = profile(&profile::select(
        candidates,
        Strategy::Stratified(start),
        seed,
    ));
    let axes = Axes::of(candidates);
    // Rounds of a tenth of the budget: few enough re-fits, small enough batches.
    let batch = (n / 10).max(1);
    let mut tried: Vec<PinnedMode> = rows.iter().map(|r| r.mode).collect();
    while rows.len() < n && tried.len() < candidates.len() {
        let reference = Some((guide.time, guide.power));
        let (time, power) = fit_time_and_power(Method::Physics, &rows, reference, guide.fit)?;
        let open: Vec<PinnedMode> = candidates
            .iter()
            .filter(|m| !tried.contains(m))
            .copied()
            .collect();
        let (pt, pp) = super::time_and_power(&time, &power, &open);
        let uncertainty: Vec<f64> = pt
            .iter()
            .zip(&pp)
            .map(|(t, p)| (t.1 / t.0).powi(2) + (p.1 / p.0).powi(2))
            .collect();
        // How far each mode is behind the predicted Pareto front: its time over the fastest
        // predicted at no more power.
        let mut by_power: Vec<usize> = (0..open.len()).collect();
        by_power.sort_by(|&a, &b| pp[a].0.total_cmp(&pp[b].0));
        let mut behind = vec![0.0; open.len()];
        let mut fastest = f64::MAX;
        for &i in &by_power {
            fastest = fastest.min(pt[i].0);
            behind[i] = pt[i].0 / fastest - 1.0;
        }
        let relevance: Vec<f64> = behind.iter().map(|r| (-r / FRONT_SLACK).exp()).collect();
        let mut near: Vec<f64> = open
            .iter()
            .map(|m| {
                tried
                    .iter()
                    .map(|t| axes.distance(m, t))
                    .fold(f64::MAX, f64::min)
            })
            .collect();
        let mut picked = Vec::new();
        for _ in 0..batch.min(n - rows.len()).min(open.len()) {
            let score = |i: usize| uncertainty[i] * near[i].min(NEAR) * relevance[i];
            let best = (0..open.len())
                .filter(|&i| near[i] > 0.0)
                .max_by(|&a, &b| score(a).total_cmp(&score(b)));
            let Some(best) = best else { break };
            for (d, m) in near.iter_mut().zip(&open) {
                *d = d.min(axes.distance(m, &open[best]));
            }
            picked.push(open[best]);
        }
        if picked.is_empty() {
            break;
        }
        tried.extend(&picked);
        rows.extend(profile(&picked));
    }
    Ok(rows)
}

/// How far behind the predicted front a mode may be (as a share of the front's time) before
/// it is worth e times less: choosing under a budget reads the front, so an error there
/// costs, while one in a mode twice as slow as the front at its power never does.
const FRONT_SLACK: f64 = 0.2;

/// Beyond this distance a mode counts as new: further does not make it more worth
/// profiling (the corners of the mode space are far from everything, and rarely matter).
const NEAR: f64 = 0.2;

/// Each knob's sorted values, for distances in table positions.
struct Axes([Vec<u64>; 4]);

impl Axes {
    fn of(modes: &[PinnedMode]) -> Axes {
        let axis = |f: &dyn Fn(&PinnedMode) -> u64| {
            let mut v: Vec<u64> = modes.iter().map(f).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        Axes([
            axis(&|m| u64::from(m.cores)),
            axis(&|m| m.cpu_hz),
            axis(&|m| m.gpu_hz),
            axis(&|m| m.emc_hz),
        ])
    }

    fn distance(&self, a: &PinnedMode, b: &PinnedMode) -> f64 {
        let knobs = |m: &PinnedMode| [u64::from(m.cores), m.cpu_hz, m.gpu_hz, m.emc_hz];
        let (ka, kb) = (knobs(a), knobs(b));
        self.0
            .iter()
            .zip(ka.iter().zip(&kb))
            .map(|(axis, (x, y))| {
                let pos = |v: &u64| axis.partition_point(|a| a < v) as f64;
                let span = (axis.len().max(2) - 1) as f64;
                ((pos(x) - pos(y)) / span).powi(2)
            })
            .sum::<f64>()
            .sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::mode::ModeSpace;
    use crate::predict::evaluate::profile_modes;
    use crate::predict::profile::ProfileConfig;
    use crate::sim::sources::SimSource;
    use crate::sim::workload::Workload;

    #[test]
    fn starts_stratified_then_profiles_where_the_ensemble_is_least_certain_near_its_front() {
        let spec = crate::sim::spec::find("orin-agx").unwrap();
        let (cfg, time, power) = crate::predict::tests::quick_resnet18_reference();
        let guide = Guide {
            time: &time,
            power: &power,
            fit: &cfg,
        };
        // A random eighth of the mode space keeps the test quick in a debug build.
        let all: Vec<PinnedMode> = spec.mode_space().iter().collect();
        let candidates = profile::select(&all, Strategy::Random(all.len() / 8), 4);
        let mut target = SimSource::new(spec.silicon, Workload::BertBase, spec.mode_space(), 2);
        let mut batches: Vec<Vec<PinnedMode>> = Vec::new();
        let rows = profile_active(&candidates, 20, &guide, 9, |modes| {
            batches.push(modes.to_vec());
            profile_modes(&mut target, modes, &ProfileConfig::default()).0
        })
        .unwrap();
        assert_eq!(rows.len(), 20);
        let mut modes: Vec<PinnedMode> = rows.iter().map(|r| r.mode).collect();
        modes.sort_by_key(|m| (m.cores, m.cpu_hz, m.gpu_hz, m.emc_hz));
        modes.dedup();
        assert_eq!(modes.len(), 20, "no mode twice");
        assert_eq!(
            batches[0],
            profile::select(&candidates, Strategy::Stratified(10), 9)
        );
        assert_eq!(batches.len(), 1 + 5, "five rounds of two");
        // Each round's picks are among the modes the ensemble fitted on the rows before
        // them was least certain of (above the median relative spread) and near its
        // predicted front, where most modes are not.
        let mut so_far = rows[..10].to_vec();
        for picks in &batches[1..] {
            let reference = Some((&time, &power));
            let (t, p) = fit_time_and_power(Method::Physics, &so_far, reference, &cfg).unwrap();
            let open: Vec<PinnedMode> = candidates
                .iter()
                .filter(|m| !so_far.iter().any(|r| r.mode == **m))
                .copied()
                .collect();
            let (pt, pp) = super::super::time_and_power(&t, &p, &open);
            let spread: Vec<f64> = pt
                .iter()
                .zip(&pp)
                .map(|(t, p)| (t.1 / t.0).powi(2) + (p.1 / p.0).powi(2))
                .collect();
            let behind: Vec<f64> = (0..open.len())
                .map(|i| {
                    let fastest = (0..open.len())
                        .filter(|&j| pp[j].0 <= pp[i].0)
                        .map(|j| pt[j].0)
                        .fold(f64::MAX, f64::min);
                    pt[i].0 / fastest - 1.0
                })
                .collect();
            let median = |v: &[f64]| {
                let mut v = v.to_vec();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let (spread_median, behind_median) = (median(&spread), median(&behind));
            for m in picks {
                let i = open.iter().position(|o| o == m).unwrap();

                assert!(spread[i] > spread_median, "picked at spread {}", spread[i]);
                assert!(
                    behind[i] < behind_median / 2.0,
                    "picked {} behind the front",
                    behind[i]
                );
            }
            so_far.extend(rows.iter().filter(|r| picks.contains(&r.mode)).cloned());
        }
    }

    #[test]
    fn distances_are_in_table_positions() {
        let space = ModeSpace {
            cores: vec![1, 2, 3],
            cpu_hz: vec![1, 10, 100],
            gpu_hz: vec![5],
            emc_hz: vec![7, 8],
        };
        let modes: Vec<PinnedMode> = space.iter().collect();
        let axes = Axes::of(&modes);
        let m = |cores, cpu_hz, emc_hz| PinnedMode {
            cores,
            cpu_hz,
            gpu_hz: 5,
            emc_hz,
        };
        assert_eq!(axes.distance(&m(1, 1, 7), &m(1, 1, 7)), 0.0);
        assert!((axes.distance(&m(1, 1, 7), &m(3, 1, 7)) - 1.0).abs() < 1e-12);
        // One step of three on cpu (half the span) and the whole EMC span.
        assert!((axes.distance(&m(1, 1, 7), &m(1, 10, 8)) - 1.25f64.sqrt()).abs() < 1e-12);
    }
}
