//! The one file where the simulator's workloads become what the layers above use:
//! profiling [`Source`]s of a simulated training workload or of a model's inference
//! ([`InferenceSource`], from Pagoda's layer counts) on a simulated board, in simulated
//! time, and the board's mode space from its tables. A new simulated workload (inference,
//! characterisation, concurrent training and inference) registers here, so nothing above
//! the file layer names the simulator; only the CLI, which chooses the board, does.

use super::gpu::launch_at;
use super::inference::{self, Class, Framework, Kernel};
use super::power::Load;
use super::power::{Operating, Silicon};
use super::spec::BoardSpec;
use super::workload::{self, Workload};
use crate::control::mode::{ModeSpace, PinnedMode};
use crate::gpu::roofline::{self, fit_energy, fit_time, Measured, Run};
use crate::predict::pagoda::plan::{EnergyFit, ModeRoofline, Rooflines, TimeFit};
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
    reference_over(spec, spec.mode_space(), model, seed)
}

/// The simulated reference workload run by `spec`'s silicon model over `space`: another
/// board's modes, a board of the same SoC that is not simulated.
pub fn reference_over(spec: &BoardSpec, space: ModeSpace, model: Workload, seed: u64) -> SimSource {
    SimSource::new(spec.silicon, model, space, seed ^ 0xA5A5)
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

impl InferenceSource {
    /// Starts its measurement noise anew from `seed`, as [`InferenceSource::new`] did.
    pub fn reseed(&mut self, seed: u64) {
        (self.seed, self.count) = (seed, 0);
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

/// The rooflines `jpower roofline` would measure on `spec` at each of `modes`, from the
/// board's GPU model ([`super::gpu`]) and power model directly: noise-free, and in no wall
/// time (the sweep of `jpower roofline`, 64 Mi elements, FP32 and FP16 chains to 256).
pub fn modelled_rooflines(spec: &BoardSpec, modes: &[PinnedMode]) -> Rooflines {
    let points = roofline::sweep(1 << 26, 256);
    let modes = modes
        .iter()
        .map(|m| {
            let op = Operating::from(m);
            let measured: Vec<Measured> = points
                .iter()
                .map(|p| {
                    let l = launch_at(spec.silicon, &op, p);
                    let load = Load {
                        cpu: l.load.cpu,
                        gpu: l.load.gpu,
                        emc: l.load.emc,
                    };
                    let power_w = workload::reported_power(spec.silicon, &op, &load);
                    Measured {
                        label: p.label(),
                        point: *p,
                        intensity: p.intensity(),
                        run: Run {
                            launches: 1,
                            best_s: l.time_s,
                            single_s: l.time_s,
                            start_ns: 0,
                            end_ns: (l.time_s * 1e9) as u64,
                            clock_hz: Some(op.gpu_hz),
                        },
                        flops_per_s: p.flops() / l.time_s,
                        bytes_per_s: p.bytes() / l.time_s,
                        mean_s: l.time_s,
                        energy_j: power_w * l.time_s,
                        power_w,
                    }
                })
                .collect();
            let (t, e) = (fit_time(&measured), fit_energy(&measured));
            ModeRoofline {
                mode: format!(
                    "GPU {}, EMC {}",
                    crate::support::units::Freq(op.gpu_hz.round() as u64),
                    crate::support::units::Freq(op.emc_hz.round() as u64)
                ),
                gpu_hz: Some(op.gpu_hz),
                emc_hz: Some(op.emc_hz),
                time: TimeFit {
                    peak_f32_flops: t.peak_f32_flops,
                    peak_f16_flops: t.peak_f16_flops,
                    peak_bytes_per_s: t.peak_bytes_per_s,
                },
                energy: EnergyFit {
                    eps_flop_j: e.eps_flop_j,
                    eps_flop_f16_j: e.eps_flop_f16_j,
                    eps_byte_j: e.eps_byte_j,
                    pi0_w: e.pi0_w,
                },
            }
        })
        .collect();
    Rooflines {
        device: format!("simulated {} GPU (modelled)", spec.id()),
        simulated: true,
        modes,
    }
}
