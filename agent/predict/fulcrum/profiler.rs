//! What every search strategy sees the board through: a [`Profiler`] profiles modes
//! once each ([`Board::profile`]), plans each profiled mode at every batch size
//! ([`plan::each_batch`], the best by [`plan::best_of`]), and makes the choice: the best
//! fixed mode, or a per-phase pair where one beats it. For the pairs, the top GPU and EMC
//! at the best fixed mode's cores and CPU clock is profiled (one more mode, within
//! [`MAX_MODES`]), and every ordered pair of the profiled modes at those cores and CPU
//! clock is planned, each phase on its mode's measured table ([`plan::best_pair`]),
//! keeping a pair only where its plan, which pays [`Problem::switch_ms`] per phase
//! change, beats the fixed mode's.

use super::interleave::Engine;
use super::plan::{self, best_of, each_batch, Planned};
use super::{coords, dims, index, Board, PhaseTable, Problem, Setting, BATCHES};
use std::collections::HashMap;

/// Modes GMD and ALS profile at most before their per-phase pairs.
pub const GMD_MODES: usize = 8;
/// Modes a strategy profiles at most, its per-phase pairs' included.
pub const MAX_MODES: usize = 10;
/// A strategy's choice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    /// The schedule chosen.
    pub setting: Setting,
    /// What its plan expects.
    pub planned: Planned,
    /// Distinct modes profiled.
    pub modes_profiled: usize,
}

/// Profiles modes once each and plans them.
pub struct Profiler<'a, B: Board> {
    pub(super) board: &'a mut B,
    pub(super) p: Problem,
    engine: Engine,
    pub(super) tables: HashMap<usize, PhaseTable>,
    /// The plans of every batch size of the modes planned as fixed modes.
    plans: HashMap<usize, [Planned; BATCHES.len()]>,
}

impl<'a, B: Board> Profiler<'a, B> {
    /// A profiler of `board` for problem `p`, nothing profiled yet.
    pub fn new(board: &'a mut B, p: &Problem) -> Profiler<'a, B> {
        Profiler {
            board,
            p: *p,
            engine: Engine::default(),
            tables: HashMap::new(),
            plans: HashMap::new(),
        }
    }

    pub(super) fn table(&mut self, mode: usize) -> PhaseTable {
        let board = &mut *self.board;
        *self
            .tables
            .entry(mode)
            .or_insert_with(|| board.profile(mode))
    }

    /// The best plan of `mode` as a fixed mode.
    pub(super) fn plan(&mut self, mode: usize) -> Planned {
        best_of(&self.batches(mode))
    }

    /// The plans of every batch size of `mode` as a fixed mode.
    pub(super) fn batches(&mut self, mode: usize) -> [Planned; BATCHES.len()] {
        if let Some(p) = self.plans.get(&mode) {
            return *p;
        }
        let t = self.table(mode);
        let planned = each_batch(&mut self.engine, &t, &t, 0.0, &self.p);
        self.plans.insert(mode, planned);
        planned
    }

    /// The modes planned as fixed modes so far, in index order.
    pub(super) fn fixed_modes(&self) -> Vec<usize> {
        let mut modes: Vec<usize> = self.plans.keys().copied().collect();
        modes.sort_unstable();
        modes
    }

    /// The highest planned throughput among the fixed modes planned so far that meet the
    /// tightened targets, if any does.
    pub(super) fn best_met(&mut self) -> Option<f64> {
        self.fixed_modes()
            .into_iter()
            .map(|m| self.plan(m))
            .filter(Planned::feasible)
            .map(|p| p.outcome.throughput_per_s)
            .reduce(f64::max)
    }

    /// The best fixed mode planned so far.
    pub(super) fn best_fixed(&self) -> (usize, Planned) {
        let mut best: Option<(usize, Planned)> = None;
        for m in self.fixed_modes() {
            let p = best_of(&self.plans[&m]);
            if best.is_none_or(|(_, b)| p.better(&b)) {
                best = Some((m, p));
            }
        }
        best.expect("a mode was planned")
    }

    /// The best per-phase pair of `tables` that beats `floor` ([`plan::best_pair`]).
    pub(super) fn best_pair(
        &mut self,
        tables: &[(usize, PhaseTable)],
        floor: f64,
    ) -> Option<(usize, usize, Planned)> {
        plan::best_pair(&mut self.engine, tables, &self.p, floor)
    }

    /// The best fixed mode, or the best per-phase pair where one beats it (module docs).
    pub(super) fn choose(mut self) -> Choice {
        let (mode, fixed) = self.best_fixed();
        let space = self.board.space();
        let (at, d) = (coords(space, mode), dims(space));
        let top = index(space, [at[0], at[1], d[2] - 1, d[3] - 1]);
        if self.tables.len() < MAX_MODES {
            self.table(top);
        }
        let mut same: Vec<(usize, PhaseTable)> = self
            .tables
            .iter()
            .filter(|(&m, _)| coords(self.board.space(), m)[..2] == at[..2])
            .map(|(&m, t)| (m, *t))
            .collect();
        same.sort_unstable_by_key(|(m, _)| *m);
        let floor = if fixed.feasible() {
            fixed.outcome.throughput_per_s
        } else {
            0.0
        };
        let (setting, planned) = match self.best_pair(&same, floor) {
            Some((train, infer, pair)) => (
                Setting {
                    train,
                    infer,
                    batch: pair.batch,
                },
                pair,
            ),
            None => (
                Setting {
                    train: mode,
                    infer: mode,
                    batch: fixed.batch,
                },
                fixed,
            ),
        };
        Choice {
            setting,
            planned,
            modes_profiled: self.tables.len(),
        }
    }
}
