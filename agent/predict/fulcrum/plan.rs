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
use super::{PhaseTable, Problem, BATCHES};

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

/// The plan of every batch size of [`BATCHES`] for training at `train`'s table and
/// inference at `infer`'s, with `switch_ms` per phase change (0 for a fixed mode).
pub fn each_batch(
    engine: &mut Engine,
    train: &PhaseTable,
    infer: &PhaseTable,
    switch_ms: f64,
    p: &Problem,
) -> [Planned; BATCHES.len()] {
    let noise = Noise {
        train: train.train_spread.max(0.01),
        infer: 0.02,
        power: 0.015,
    };
    std::array::from_fn(|batch| {
        let phases = Phases {
            train,
            infer,
            batch,
            switch_ms,
        };
        let outcome = engine.run(&phases, p, &noise, PLAN_SEED, PLAN_SEED ^ 1, false);
        let violation = (outcome.slo_pct_ms / (p.slo_ms * (1.0 - SLO_MARGIN)))
            .max(outcome.guard_w / (p.budget_w * (1.0 - POWER_MARGIN)));
        Planned {
            batch,
            outcome,
            violation,
        }
    })
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
