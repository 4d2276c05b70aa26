//! The one file where the simulator's training workloads become what the layers above
//! use: profiling [`Source`]s of a simulated workload on a simulated board, in simulated
//! time, and the board's mode space from its tables. A new simulated workload (inference,
//! characterisation, concurrent training and inference) registers here, so nothing above
//! the file layer names the simulator; only the CLI, which chooses the board, does.

use super::power::{Operating, Silicon};
use super::spec::BoardSpec;
use super::workload::{self, Workload};
use crate::control::mode::{ModeSpace, PinnedMode};
use crate::predict::profile::Source;
use crate::support::rng;

impl BoardSpec {
    /// The mode space of this board, from its tables.
    pub fn mode_space(&self) -> ModeSpace {
        ModeSpace {
            cores: (1..=self.cpus() as u32).collect(),
            cpu_hz: self.cpu_khz.iter().map(|k| k * 1000).collect(),
            gpu_hz: self.gpu.table_hz.to_vec(),
            emc_hz: self.emc.table_hz.to_vec(),
        }
    }
}

/// The simulated reference workload on `spec` (its own noise seed, apart from the target's).
pub fn reference_source(spec: &BoardSpec, model: Workload, seed: u64) -> SimSource {
    SimSource::new(spec.silicon, model, spec.mode_space(), seed ^ 0xA5A5)
}

/// A simulated workload on a simulated board.
#[derive(Debug, Clone)]
pub struct SimSource {
    /// Which board's silicon models the time and power.
    pub silicon: Silicon,
    /// The training workload.
    pub model: Workload,
    /// The modes it can measure.
    pub space: ModeSpace,
    seed: u64,
    count: u64,
}

impl SimSource {
    /// `model` on `silicon` over the modes of `space`, its noise seeded by `seed`.
    pub fn new(silicon: Silicon, model: Workload, space: ModeSpace, seed: u64) -> SimSource {
        SimSource {
            silicon,
            model,
            space,
            seed,
            count: 0,
        }
    }
}

impl Source for SimSource {
    fn minibatch(&mut self, mode: &PinnedMode, since_switch: u32) -> Option<(f64, f64)> {
        self.count += 1;
        let seed = self.seed ^ rng::spread(self.count);
        Some(workload::measure(
            self.silicon,
            self.model,
            &Operating::from(mode),
            since_switch,
            seed,
        ))
    }

    fn truth(&self, mode: &PinnedMode) -> Option<(f64, f64)> {
        let t = workload::truth(self.silicon, self.model, &Operating::from(mode));
        Some((t.time_ms, t.power_w))
    }

    fn modes(&self) -> Vec<PinnedMode> {
        self.space.iter().collect()
    }
}
