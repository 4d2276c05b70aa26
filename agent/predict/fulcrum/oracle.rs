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
/// meet the budget or the latency target whatever the run.
fn bound(
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
/// below the best met.
fn search(board: &mut impl Board, p: &Problem, mut candidates: Vec<(Setting, f64)>) -> Search {
    candidates.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (mut best, mut runs): (Option<Best>, usize) = (None, 0);
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

/// The best fixed mode and batch size.
pub fn fixed(board: &mut impl Board, p: &Problem) -> Search {
    let n = board.space().len();
    let mut candidates = Vec::new();
    for mode in 0..n {
        let t = board.truth(mode);
        for batch in 0..BATCHES.len() {
            if let Some(b) = bound(&t, &t, batch, 0.0, p) {
                let (train, infer) = (mode, mode);
                candidates.push((
                    Setting {
                        train,
                        infer,
                        batch,
                    },
                    b,
                ));
            }
        }
    }
    search(board, p, candidates)
}

/// The best per-phase pair (fixed modes included) over the GPU x EMC settings of each
/// phase at the cores and CPU clock of `fixed_mode`, at the board's switch time (which
/// `p.switch_ms` must state: the bound uses it).
pub fn per_phase(board: &mut impl Board, p: &Problem, fixed_mode: usize) -> Search {
    let space = board.space();
    let (at, d) = (coords(space, fixed_mode), dims(space));
    let modes: Vec<usize> = (0..d[2] * d[3])
        .map(|k| index(space, [at[0], at[1], k / d[3], k % d[3]]))
        .collect();
    let tables: Vec<PhaseTable> = modes.iter().map(|&m| board.truth(m)).collect();
    let mut candidates = Vec::new();
    for (ti, &train) in modes.iter().enumerate() {
        for (ii, &infer) in modes.iter().enumerate() {
            for batch in 0..BATCHES.len() {
                let switch_ms = if train == infer { 0.0 } else { p.switch_ms };
                if let Some(b) = bound(&tables[ti], &tables[ii], batch, switch_ms, p) {
                    candidates.push((
                        Setting {
                            train,
                            infer,
                            batch,
                        },
                        b,
                    ));
                }
            }
        }
    }
    search(board, p, candidates)
}
