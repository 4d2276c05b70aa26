//! The exhaustive optimum on a board's truth: every fixed mode x batch size of
//! [`BATCHES`], and per-phase pairs over the GPU x EMC settings of each phase at the core
//! count and CPU clock of the best fixed mode, each run on the board ([`Board::run`]:
//! at least 2,000 requests, fixed seeds).
//!
//! Exhaustive but not brute force: a setting's throughput has an upper bound from its
//! truth table, the training minibatch at its fastest (3 sigma) and the GPU share that
//! serving the arrival rate at the cheapest per-request batch must take (90 % of it, for
//! the scatter of a finite run's arrivals); settings are run in decreasing bound order, a
//! run stops at its first sure miss, and the search ends when the next bound is below the
//! best throughput met. Settings whose least possible power is over the budget (training
//! for all the time that serving each request alone at the costliest per-request batch
//! and switching twice for it leaves, the cheapest other phase for the rest), or whose
//! single request alone is over the latency target, are never run. The tests check the
//! pruned search against brute force.

use super::interleave::{Outcome, TRAIN_SAMPLES};
use super::{coords, dims, index, Board, PhaseTable, Problem, Setting, BATCHES};

/// The best setting found and what it achieved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Best {
    /// The setting.
    pub setting: Setting,
    /// Its run on the board.
    pub outcome: Outcome,
}

/// An optimum and the settings it ran.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Search {
    /// The best setting that met the problem, if any did.
    pub best: Option<Best>,
    /// Settings run on the board.
    pub runs: usize,
}

/// The bound of the module docs, in samples per second; `None` where the setting cannot
/// meet the budget or the latency target whatever the run. It bounds the planner's runs
/// too ([`super::plan::best_pair`]): their scatter is no wider.
pub fn bound(
    train: &PhaseTable,
    infer: &PhaseTable,
    batch: usize,
    switch_ms: f64,
    p: &Problem,
) -> Option<f64> {
    let (lo_t, hi_t, lo_w) = (1.0 - 3.0 * 0.02, 1.0 + 3.0 * 0.02, 1.0 - 3.0 * 0.015);
    if infer.infer_ms[0] * lo_t > p.slo_ms {
        return None;
    }
    // Power: training takes at least the time that serving every request alone (the
    // costliest per request, padded batches included) and switching twice for each
    // leaves it; the rest draws at least the cheapest other phase.
    let sizes = 0..=batch;
    let cheapest_w = sizes
        .clone()
        .map(|k| infer.infer_w[k])
        .fold(f64::INFINITY, f64::min);
    let other_w = if switch_ms > 0.0 {
        cheapest_w.min(0.5 * (cheapest_w + train.train_w))
    } else {
        cheapest_w
    };
    let costliest_ms = sizes
        .clone()
        .map(|k| {
            let fewest = if k == 0 { 1 } else { BATCHES[k - 1] + 1 };
            infer.infer_ms[k] * hi_t / f64::from(fewest)
        })
        .fold(0.0, f64::max);
    let other_share = (1.1 * p.rate_per_s * (costliest_ms + 2.0 * switch_ms) / 1000.0).min(1.0);
    let least_w = if train.train_w > other_w {
        (1.0 - other_share) * train.train_w + other_share * other_w
    } else {
        train.train_w
    };
    if least_w * lo_w > p.budget_w {
        return None;
    }
    let per_request_ms = sizes
        .map(|k| infer.infer_ms[k] * lo_t / f64::from(BATCHES[k]))
        .fold(f64::INFINITY, f64::min);
    let share = 0.9 * p.rate_per_s * per_request_ms / 1000.0;
    let fastest_ms = train.train_ms * (1.0 - 3.0 * train.train_spread.max(0.02));
    Some(TRAIN_SAMPLES * 1000.0 / fastest_ms * (1.0 - share).max(0.0))
}

/// Runs `candidates` (setting, bound) in decreasing bound order until the bound falls
/// below the best met, starting from the best already known.
fn search(
    board: &mut impl Board,
    p: &Problem,
    mut candidates: Vec<(Setting, f64)>,
    known: Option<Best>,
) -> Search {
    candidates.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (mut best, mut runs) = (known, 0);
    for (setting, ub) in candidates {
        if best.is_some_and(|b| ub <= b.outcome.throughput_per_s) {
            break;
        }
        runs += 1;
        let outcome = board.run(&setting, p, true);
        if outcome.met(p)
            && best.is_none_or(|b| outcome.throughput_per_s > b.outcome.throughput_per_s)
        {
            best = Some(Best { setting, outcome });
        }
    }
    Search { best, runs }
}

/// Every batch size of modes `train` and `infer` (their tables `tt` and `ti`) whose bound
/// leaves it in the running, with that bound.
fn bounded<'a>(
    (train, tt): (usize, &'a PhaseTable),
    (infer, ti): (usize, &'a PhaseTable),
    switch_ms: f64,
    p: &'a Problem,
) -> impl Iterator<Item = (Setting, f64)> + 'a {
    (0..BATCHES.len()).filter_map(move |batch| {
        let b = bound(tt, ti, batch, switch_ms, p)?;
        Some((
            Setting {
                train,
                infer,
                batch,
            },
            b,
        ))
    })
}

/// The best fixed mode and batch size.
pub fn fixed(board: &mut impl Board, p: &Problem) -> Search {
    let mut candidates = Vec::new();
    for mode in 0..board.space().len() {
        let t = board.truth(mode);
        candidates.extend(bounded((mode, &t), (mode, &t), 0.0, p));
    }
    search(board, p, candidates, None)
}

/// The best per-phase pair over the GPU x EMC settings of each phase at the cores and
/// CPU clock of `fixed` (the best fixed mode, [`fixed`]'s), or `fixed` where no pair beats
/// it, at the board's switch time (which `p.switch_ms` must state: the bound uses it).
/// The fixed modes among the pairs are not run again: `fixed` is the best of them.
pub fn per_phase(board: &mut impl Board, p: &Problem, fixed: Best) -> Search {
    let space = board.space();
    let (at, d) = (coords(space, fixed.setting.train), dims(space));
    let modes: Vec<usize> = (0..d[2] * d[3])
        .map(|k| index(space, [at[0], at[1], k / d[3], k % d[3]]))
        .collect();
    let tables: Vec<PhaseTable> = modes.iter().map(|&m| board.truth(m)).collect();
    let mut candidates = Vec::new();
    for (&train, tt) in modes.iter().zip(&tables) {
        for (&infer, ti) in modes.iter().zip(&tables) {
            if train != infer {
                candidates.extend(bounded((train, tt), (infer, ti), p.switch_ms, p));
            }
        }
    }
    search(board, p, candidates, Some(fixed))
}

/// A small board of made-up phase tables, for the tests of the searches.
#[cfg(test)]
pub(crate) mod toy {
    use super::super::interleave::{Engine, Noise, Outcome, Phases};
    use super::super::{Board, PhaseTable, Problem, Setting, BATCHES};
    use crate::control::mode::{ModeSpace, PinnedMode};
    use crate::support::rng::gaussian;

    /// Two to four cores, three CPU, five GPU and three EMC clocks: time falls and power
    /// rises with each clock; inference is GPU-bound at large batches.
    pub struct Toy {
        pub space: ModeSpace,
        pub engine: Engine,
        pub switch_ms: f64,
        pub profiles: u64,
    }

    impl Toy {
        pub fn new() -> Toy {
            Toy {
                space: ModeSpace {
                    cores: vec![2, 3, 4],
                    cpu_hz: vec![1_000, 1_500, 2_000],
                    gpu_hz: vec![300, 500, 700, 900, 1100],
                    emc_hz: vec![1_000, 2_000, 3_000],
                },
                engine: Engine::default(),
                switch_ms: 1.0,
                profiles: 0,
            }
        }
    }

    impl Board for Toy {
        fn space(&self) -> &ModeSpace {
            &self.space
        }
        fn presets(&self) -> Vec<PinnedMode> {
            vec![self.space.get(self.space.len() - 1).unwrap()]
        }
        fn prior(&self) -> Option<std::sync::Arc<super::super::als::Prior>> {
            None
        }
        fn profile(&mut self, mode: usize) -> PhaseTable {
            self.profiles += 1;
            let mut t = self.truth(mode);
            let z = |k: u64| 1.0 + 0.01 * gaussian(self.profiles * 31 + k);
            t.train_ms *= z(1);
            t.train_w *= z(2);
            t
        }
        fn truth(&self, mode: usize) -> PhaseTable {
            let m = self.space.get(mode).unwrap();
            let (c, f, g, e) = (
                f64::from(m.cores),
                m.cpu_hz as f64 / 1000.0,
                m.gpu_hz as f64 / 1000.0,
                m.emc_hz as f64 / 1000.0,
            );
            let loader = 60.0 / (f * (c - 0.5));
            let gpu = 30.0 / g + 6.0 / e;
            let static_w = 5.0 + 0.5 * c + e;
            let train_w = static_w + 2.0 * c * f * f * 0.3 + 14.0 * g * g;
            PhaseTable {
                train_ms: loader.max(gpu) + 2.0 / f,
                train_spread: 0.02,
                train_w,
                infer_ms: BATCHES.map(|b| 2.0 / f + f64::from(b) * (1.0 / g + 0.2 / e)),
                infer_w: BATCHES.map(|b| static_w + 12.0 * g * g * (f64::from(b) / 32.0).sqrt()),
            }
        }
        fn run(&mut self, s: &Setting, p: &Problem, stop_early: bool) -> Outcome {
            let (train, infer) = (self.truth(s.train), self.truth(s.infer));
            let phases = Phases {
                train: &train,
                infer: &infer,
                batch: s.batch,
                switch_ms: if s.per_phase() { self.switch_ms } else { 0.0 },
            };
            let noise = Noise {
                train: 0.02,
                infer: 0.02,
                power: 0.015,
            };
            self.engine.run(&phases, p, &noise, 11, 12, stop_early)
        }
    }

    /// Problems over the toy's range: budgets, targets and rates.
    pub fn problems() -> Vec<Problem> {
        let mut v = Vec::new();
        for budget_w in [14.0, 20.0] {
            for slo_ms in [60.0, 120.0] {
                for rate_per_s in [10.0, 40.0] {
                    v.push(Problem {
                        budget_w,
                        slo_ms,
                        percentile: 99.0,
                        rate_per_s,
                        switch_ms: 1.0,
                    });
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pruned search finds what running every setting in full finds.
    #[test]
    fn pruned_search_equals_brute_force() {
        let mut board = toy::Toy::new();
        let (mut pruned_runs, mut all_runs, mut feasible) = (0, 0, 0);
        for p in toy::problems() {
            let got = fixed(&mut board, &p);
            let mut best: Option<f64> = None;
            for mode in 0..board.space.len() {
                for batch in 0..BATCHES.len() {
                    let s = Setting {
                        train: mode,
                        infer: mode,
                        batch,
                    };
                    let o = board.run(&s, &p, false);
                    all_runs += 1;
                    if o.met(&p) && best.is_none_or(|b| o.throughput_per_s > b) {
                        best = Some(o.throughput_per_s);
                    }
                }
            }
            assert_eq!(got.best.map(|b| b.outcome.throughput_per_s), best, "{p:?}");
            pruned_runs += got.runs;
            feasible += usize::from(best.is_some());
            if let Some(b) = got.best {
                let pair = per_phase(&mut board, &p, b);
                let pair_best = pair.best.expect("the fixed mode is among the pairs");
                assert!(pair_best.outcome.throughput_per_s >= b.outcome.throughput_per_s);
            }
        }
        println!("pruned search ran {pruned_runs} of {all_runs} settings; {feasible} feasible");
        assert!(feasible >= 4 && pruned_runs < all_runs / 2);
    }
}
