//! The one file where the simulator's workloads become what the layers above use:
//! profiling [`Source`]s of a simulated training workload or of a model's inference
//! ([`InferenceSource`], from Pagoda's layer counts) on a simulated board, in simulated
//! time, and the board's mode space from its tables. A new simulated workload (inference,
//! characterisation, concurrent training and inference) registers here, so nothing above
//! the file layer names the simulator; only the CLI, which chooses the board, does.

use super::inference::{self, Class, Framework, Kernel};
use super::power::{Operating, Silicon};
use super::spec::BoardSpec;
use super::workload::{self, Workload};
use crate::control::mode::{ModeSpace, PinnedMode};
use crate::predict::pagoda::{bytes_per_element, Report};
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

/// A model's forward pass at a batch size on a simulated board: its layers as the board's
/// GPU runs them ([`inference`]); times in ms, as every [`Source`].
#[derive(Debug, Clone)]
pub struct InferenceSource {
    silicon: Silicon,
    kernels: Vec<Kernel>,
    batch: u64,
    framework: Framework,
    space: ModeSpace,
    seed: u64,
    count: u64,
}

impl InferenceSource {
    /// The forward pass counted in `report` on `spec`, its noise seeded by `seed`. Views
    /// (reshapes) launch nothing and are left out.
    pub fn new(spec: &BoardSpec, report: &Report, seed: u64) -> InferenceSource {
        let element = bytes_per_element(report.precision) as f64;
        let batch = report.batch as f64;
        let elements = |shape: &[u64]| shape.iter().product::<u64>() as f64 * batch;
        let kernels = report
            .layers
            .iter()
            .filter(|l| l.op != "reshape")
            .map(|l| {
                let class = match l.op {
                    "conv2d" => Class::Conv,
                    "depthwise_conv2d" => Class::Depthwise,
                    "linear" | "matmul" => Class::Gemm,
                    "lstm" => Class::Recurrent,
                    _ => Class::Memory,
                };
                Kernel {
                    class,
                    flops: l.counts.flops as f64,
                    weight_bytes: l.counts.weight_bytes as f64,
                    input_bytes: elements(&l.input) * element,
                    output_bytes: elements(&l.output) * element,
                    outputs: elements(&l.output),
                    // One launch per time step: the first dimension of a sequence.
                    launches: match class {
                        Class::Recurrent => l.input.first().map_or(1, |&s| s.clamp(1, 4096) as u32),
                        _ => 1,
                    },
                }
            })
            .collect();
        InferenceSource {
            silicon: spec.silicon,
            kernels,
            batch: report.batch,
            framework: Framework::of(&report.model),
            space: spec.mode_space(),
            seed,
            count: 0,
        }
    }

    /// The noise-free truth at `mode`: latency, s, and power, W.
    pub fn truth_s(&self, mode: &PinnedMode) -> inference::Truth {
        inference::truth(
            self.silicon,
            &self.kernels,
            self.batch,
            &self.framework,
            &Operating::from(mode),
        )
    }
}

impl Source for InferenceSource {
    fn minibatch(&mut self, mode: &PinnedMode, _since_switch: u32) -> Option<(f64, f64)> {
        self.count += 1;
        let (s, w) = inference::measure(
            self.silicon,
            &self.kernels,
            self.batch,
            &self.framework,
            &Operating::from(mode),
            self.seed ^ rng::spread(self.count),
        );
        Some((s * 1e3, w))
    }

    fn truth(&self, mode: &PinnedMode) -> Option<(f64, f64)> {
        let t = self.truth_s(mode);
        Some((t.latency_s * 1e3, t.power_w))
    }

    fn modes(&self) -> Vec<PinnedMode> {
        self.space.iter().collect()
    }
}
