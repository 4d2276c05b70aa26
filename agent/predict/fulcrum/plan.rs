//! The plan of one mode (or mode pair) from measured phase tables: each batch size run
//! through the interleaving ([`super::interleave`]) on the measured times and powers, with
//! the measured spread of the training minibatch times as their scatter (a minibatch that
//! overruns delays the requests behind it), against targets tightened by a margin; the
//! batch size of the highest planned throughput that meets them wins.
//!
//! The planner draws its own arrivals (the declared rate, not the board's sequence) and
//! its own scatter, so a plan that only just meets its target on one draw would miss on
//! the board's: the margins ([`SLO_MARGIN`], [`POWER_MARGIN`]) are the room left for that
//! and for the measurement error of the phase tables (2 % time, 1.5 % power per run).

use super::interleave::{Engine, Noise, Outcome, Phases};
use super::{oracle, PhaseTable, Problem, BATCHES};

/// Share of the latency target left unused by a plan.
pub const SLO_MARGIN: f64 = 0.04;
/// Share of the power budget left unused by a plan.
pub const POWER_MARGIN: f64 = 0.015;
/// The planner's arrival and scatter seeds (apart from any board's).
const PLAN_SEED: u64 = 0x0F01_C0DE;

/// A planned batch size and what the plan expects of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Planned {
    /// Index into [`BATCHES`].
    pub batch: usize,
    /// The planned run.
    pub outcome: Outcome,
    /// How far the plan misses its tightened targets: the larger of latency over its
    /// target and power over its budget (at most 1 when it meets both).
    pub violation: f64,
}

impl Planned {
    /// Whether the plan meets its tightened targets.
    pub fn feasible(&self) -> bool {
        self.violation <= 1.0 && self.outcome.completed
    }

    /// Whether `self` is a better plan than `other`: feasible before infeasible, then the
    /// higher throughput, or among infeasible ones the smaller violation.
    pub fn better(&self, other: &Planned) -> bool {
        match (self.feasible(), other.feasible()) {
            (true, false) => true,
            (false, true) => false,
            (true, true) => self.outcome.throughput_per_s > other.outcome.throughput_per_s,
            (false, false) => self.violation < other.violation,
        }
    }
}

/// The targets a plan must meet: `p`'s, tightened by the margins.
pub fn tightened(p: &Problem) -> Problem {
    Problem {
        budget_w: p.budget_w * (1.0 - POWER_MARGIN),
        slo_ms: p.slo_ms * (1.0 - SLO_MARGIN),
        ..*p
    }
}

/// The plan of batch size `batch` (an index into [`BATCHES`]) for training at `train`'s
/// table and inference at `infer`'s, with `switch_ms` per phase change (0 for a fixed
/// mode). With `stop_early`, a plan stops at its first sure miss (then infeasible).
pub fn one_batch(
    engine: &mut Engine,
    (train, infer): (&PhaseTable, &PhaseTable),
    batch: usize,
    switch_ms: f64,
    p: &Problem,
    stop_early: bool,
) -> Planned {
    let noise = Noise {
        train: train.train_spread.max(0.01),
        infer: 0.02,
        power: 0.015,
    };
    let phases = Phases {
        train,
        infer,
        batch,
        switch_ms,
    };
    let q = tightened(p);
    let outcome = engine.run(&phases, &q, &noise, PLAN_SEED, PLAN_SEED ^ 1, stop_early);
    let violation = (outcome.slo_pct_ms / q.slo_ms).max(outcome.guard_w / q.budget_w);
    Planned {
        batch,
        outcome,
        violation,
    }
}

/// The plan of every batch size of [`BATCHES`] ([`one_batch`], run to the end).
pub fn each_batch(
    engine: &mut Engine,
    train: &PhaseTable,
    infer: &PhaseTable,
    switch_ms: f64,
    p: &Problem,
) -> [Planned; BATCHES.len()] {
    std::array::from_fn(|batch| one_batch(engine, (train, infer), batch, switch_ms, p, false))
}

/// The best per-phase pair of `tables` (modes and their phase tables): the feasible plan
/// of the highest throughput over every ordered pair of two of them and every batch
/// size, at `p.switch_ms` per phase change, where one beats `floor` samples/s. Pruned as
/// the oracle is: candidates in decreasing order of [`oracle::bound`] (of the tightened
/// targets), each plan stopped at its first sure miss, the search ended when the next
/// bound is no higher than the best found.
pub fn best_pair(
    engine: &mut Engine,
    tables: &[(usize, PhaseTable)],
    p: &Problem,
    floor: f64,
) -> Option<(usize, usize, Planned)> {
    let q = tightened(p);
    let mut candidates = Vec::new();
    for (a, (_, train)) in tables.iter().enumerate() {
        for (b, (_, infer)) in tables.iter().enumerate().filter(|&(b, _)| b != a) {
            for batch in 0..BATCHES.len() {
                match oracle::bound(train, infer, batch, p.switch_ms, &q) {
                    Some(bound) if bound > floor => candidates.push((bound, a, b, batch)),
                    _ => {}
                }
            }
        }
    }
    candidates.sort_by(|x, y| y.0.total_cmp(&x.0));
    let mut best: Option<(usize, usize, Planned)> = None;
    for (bound, a, b, batch) in candidates {
        let beat = best.map_or(floor, |(.., p)| p.outcome.throughput_per_s);
        if bound <= beat {
            break;
        }
        let pair = (&tables[a].1, &tables[b].1);
        let planned = one_batch(engine, pair, batch, p.switch_ms, p, true);
        if planned.feasible() && planned.outcome.throughput_per_s > beat {
            best = Some((tables[a].0, tables[b].0, planned));
        }
    }
    best
}

/// The best of the plans of [`each_batch`] ([`Planned::better`]; the smaller batch on a tie).
pub fn best_of(plans: &[Planned; BATCHES.len()]) -> Planned {
    let mut best = plans[0];
    for p in &plans[1..] {
        if p.better(&best) {
            best = *p;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tight_target_takes_the_batch_that_keeps_up() {
        // Batches grow sublinearly: at 150 requests/s, batch 1 (6 ms) cannot keep up
        // (90 % of the GPU), larger batches can.
        let t = PhaseTable {
            train_ms: 30.0,
            train_spread: 0.02,
            train_w: 25.0,
            infer_ms: BATCHES.map(|b| 5.0 + f64::from(b)),
            infer_w: [20.0; 6],
        };
        let p = Problem {
            budget_w: 30.0,
            slo_ms: 120.0,
            percentile: 99.0,
            rate_per_s: 150.0,
            switch_ms: 0.0,
        };
        let mut e = Engine::default();
        let plan = best_of(&each_batch(&mut e, &t, &t, 0.0, &p));
        assert!(plan.feasible() && plan.batch >= 2, "{plan:?}");
        // A budget under both phases' power cannot be met at any batch size.
        let low = Problem {
            budget_w: 15.0,
            ..p
        };
        let plan = best_of(&each_batch(&mut e, &t, &t, 0.0, &low));
        assert!(!plan.feasible() && plan.violation > 1.3, "{plan:?}");
    }
}
