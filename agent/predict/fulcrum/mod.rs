//! Fulcrum (arXiv 2509.20205): training and inference interleaved on one GPU at minibatch
//! granularity, under a power budget and a latency target at a percentile, choosing the
//! power mode (or a pair of modes, one per phase, differing only in the fast knobs GPU and
//! EMC), the inference batch size, and so the interleaving, to maximise training throughput.
//!
//! - [`interleave`]: the interleaving policy run in simulated time on phase times and
//!   powers (queueing, batching, switches, the sensor's and the guard's view of power);
//! - [`plan`]: the best batch size of a mode or a mode pair, from measured phase tables,
//!   with room for the measured spread of minibatch times;
//! - [`profiler`]: what a strategy sees the board through (profiles, their plans, the
//!   choice of a fixed mode or a per-phase pair);
//! - [`descent`]: GMD's model of the plans over the mode lattice and its walk;
//! - [`als`]: ALS's surrogate of the phase tables (transferred training predictors,
//!   Pagoda's inference model) and its acquisition;
//! - [`search`]: the strategies that choose what to profile (GMD-style descent, ALS-style
//!   active learning, MAXN, the nvpmodel presets, random-N);
//! - [`oracle`]: the exhaustive optimum of a board's truth, fixed modes and per-phase pairs;
//! - [`eval`]: the sweep that scores the strategies against the oracle.
//!
//! A strategy sees a board only through [`Board::profile`] (measurements with noise); the
//! oracle and the scoring use [`Board::truth`] and [`Board::run`].

pub mod als;
pub mod descent;
pub mod eval;
pub mod interleave;
pub mod oracle;
pub mod plan;
pub mod profiler;
pub mod search;

use crate::control::mode::{ModeSpace, PinnedMode};
use interleave::Outcome;
use serde::Serialize;

/// Inference batch sizes the scheduler chooses from.
pub const BATCHES: [u32; 6] = [1, 2, 4, 8, 16, 32];

/// What the scheduler must meet.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Problem {
    /// Power budget on the guard's window mean, W.
    pub budget_w: f64,
    /// Latency target, ms.
    pub slo_ms: f64,
    /// The percentile the target applies to (99 = p99).
    pub percentile: f64,
    /// Request arrival rate, per second.
    pub rate_per_s: f64,
    /// Time of one switch of the fast knobs (GPU and EMC) between phases, ms.
    pub switch_ms: f64,
}

/// A mode's phases: one training minibatch and an inference batch of each size.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PhaseTable {
    /// Training minibatch time, ms.
    pub train_ms: f64,
    /// Relative spread (one sigma) of the training minibatch times.
    pub train_spread: f64,
    /// Training power, W.
    pub train_w: f64,
    /// Inference batch time per size of [`BATCHES`], ms.
    pub infer_ms: [f64; 6],
    /// Inference power per size of [`BATCHES`], W.
    pub infer_w: [f64; 6],
}

/// A schedule: the mode of each phase (equal for a fixed mode) and the batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Setting {
    /// Index of the training phase's mode in the board's [`ModeSpace`].
    pub train: usize,
    /// Index of the inference phase's mode.
    pub infer: usize,
    /// Index into [`BATCHES`].
    pub batch: usize,
}

impl Setting {
    /// Whether the phases run at different modes.
    pub fn per_phase(&self) -> bool {
        self.train != self.infer
    }
}

/// A board that runs a training and an inference workload together.
pub trait Board {
    /// Its modes.
    fn space(&self) -> &ModeSpace;
    /// The nvpmodel presets as pinned modes of the space.
    fn presets(&self) -> Vec<PinnedMode>;
    /// Profiles the mode of index `mode`: training minibatches and inference batches of
    /// each size, measured with noise.
    fn profile(&mut self, mode: usize) -> PhaseTable;
    /// The noise-free phase table of `mode` (oracle and scoring only).
    fn truth(&self, mode: usize) -> PhaseTable;
    /// What ALS's surrogate starts from ([`als::Prior`]), where the board has it.
    fn prior(&self) -> Option<std::sync::Arc<als::Prior>>;
    /// Runs `s` under `p` on the board: the measured outcome of deploying it, at the
    /// board's own switch times (oracle and scoring only). With `stop_early`, may stop at
    /// the first sure miss (`completed` false).
    fn run(&mut self, s: &Setting, p: &Problem, stop_early: bool) -> Outcome;
}

/// The table positions of mode `i` of `space`: cores, CPU, GPU, EMC.
pub fn coords(space: &ModeSpace, i: usize) -> [usize; 4] {
    let (ne, ng, nc) = (space.emc_hz.len(), space.gpu_hz.len(), space.cpu_hz.len());
    [i / (ne * ng * nc), i / (ne * ng) % nc, i / ne % ng, i % ne]
}

/// The index in `space` of the mode at table positions `x` ([`coords`]).
pub fn index(space: &ModeSpace, x: [usize; 4]) -> usize {
    let (ne, ng, nc) = (space.emc_hz.len(), space.gpu_hz.len(), space.cpu_hz.len());
    ((x[0] * nc + x[1]) * ng + x[2]) * ne + x[3]
}

/// The table lengths of `space`: cores, CPU, GPU, EMC.
pub fn dims(space: &ModeSpace) -> [usize; 4] {
    [
        space.cores.len(),
        space.cpu_hz.len(),
        space.gpu_hz.len(),
        space.emc_hz.len(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coords_and_index_are_inverse_and_follow_the_space_order() {
        let space = ModeSpace {
            cores: vec![1, 2, 3],
            cpu_hz: vec![1, 2],
            gpu_hz: vec![10, 20, 30, 40],
            emc_hz: vec![5, 6],
        };
        for i in 0..space.len() {
            let x = coords(&space, i);
            assert_eq!(index(&space, x), i);
            let m = space.get(i).unwrap();
            assert_eq!(
                (m.cores, m.cpu_hz, m.gpu_hz, m.emc_hz),
                (
                    space.cores[x[0]],
                    space.cpu_hz[x[1]],
                    space.gpu_hz[x[2]],
                    space.emc_hz[x[3]]
                )
            );
        }
        assert_eq!(dims(&space), [3, 2, 4, 2]);
    }
}
