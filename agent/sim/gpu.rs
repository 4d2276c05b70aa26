//! A simulated board's GPU running the roofline kernels: their time from the board's
//! clocks and a roofline with a rounded ridge, their power through the board's rails.
//!
//! # Model (f in Hz; `C` CUDA cores and `bpc` DRAM bytes per EMC cycle from [`workload`])
//!
//! * Compute time `tf = W / (eff_f * C * 2 * f_gpu)` (x2 FLOPs per cycle for `half2`),
//!   with `eff_f` 0.96 for FP32 and 0.94 for FP16 FMA chains (mixbench reaches 90-97 % of
//!   the FMA peak on Ampere and Volta: roofline-cuda.md section 2).
//! * Memory time `tm = Q / (eff_m * bpc * f_emc)`, `eff_m` 0.88 for copy, 0.86 for triad,
//!   0.82 for the sweep kernel (Orin AGX: 183 GB/s copy of 204.8, 153 read).
//! * One launch: `t = (tf^4 + tm^4)^(1/4) + 6 us` (the ridge is rounded, as measured
//!   rooflines are), and the best of several launches is `t` itself.
//! * Utilisations fed to the rails while it runs: GPU `(tf + k (t - tf)) / t` with the
//!   stalled-SM activity `k` of [`workload`], EMC `Q / (bpc f_emc t)`, CPU one core (the
//!   launching thread).
//!
//! [`SimGpu::run`] sets that load on the board and runs in simulated time: it advances the
//! device's own clock by the launches' modelled time instead of sleeping, and charges the
//! run the board's true module power under that load over that time, which its
//! [`SimMeter`] reports (noise-free: the rails' model, not the sensor's readings). A sweep of
//! many modes takes milliseconds, not minutes; the mode switches between points are the real
//! ones, through the controller and the simulated board's sysfs.

use super::kernel::LoadState;
use super::power::{Operating, Silicon};
use super::workload::{self, STALL_ACTIVITY};
use super::SimBoard;
use crate::gpu::roofline::{Device, Kernel, Meter, Point, Run};
use crate::gpu::GpuError;
use crate::support::clock::monotonic_ns;
use std::cell::Cell;
use std::rc::Rc;

/// Per-launch overhead, seconds.
const LAUNCH_S: f64 = 6e-6;

/// A simulated board's GPU, timed in simulated time.
pub struct SimGpu {
    board: SimBoard,
    /// The rails summed into module power (`Board::totals.module`): what a meter reads.
    module: Vec<usize>,
    /// Simulated `CLOCK_MONOTONIC`, nanoseconds: starts at the real clock, advanced by runs.
    clock_ns: u64,
    /// Joules the last run spent, for its [`SimMeter`].
    spent_j: Rc<Cell<f64>>,
}

/// The meter of a [`SimGpu`]: the joules of each run, in simulated time.
pub struct SimMeter {
    spent_j: Rc<Cell<f64>>,
}

/// Modelled timing of one launch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Launch {
    /// Seconds.
    pub time_s: f64,
    /// The utilisation of each domain during the launch.
    pub load: LoadState,
    /// The GPU clock it ran at, Hz.
    pub clock_hz: f64,
}

impl SimGpu {
    /// The GPU of `board`, timed by its model at the board's running clocks; its runs
    /// metered over the rails `module` (indices of the board's connected rails).
    pub fn new(board: SimBoard, module: Vec<usize>) -> SimGpu {
        SimGpu {
            board,
            module,
            clock_ns: monotonic_ns(),
            spent_j: Rc::default(),
        }
    }

    /// The meter of this GPU's runs.
    pub fn meter(&self) -> SimMeter {
        SimMeter {
            spent_j: Rc::clone(&self.spent_j),
        }
    }

    /// One launch of `point` at the board's running clocks.
    pub fn launch(&self, point: &Point) -> Result<Launch, GpuError> {
        let op = self.board.operating().map_err(sim_error)?;
        Ok(launch_at(self.board.spec().silicon, &op, point))
    }
}

/// One launch of `point` on `silicon` at the operating point `op`.
pub fn launch_at(silicon: Silicon, op: &Operating, point: &Point) -> Launch {
    let (cores, bpc, ..) = workload::board(silicon);
    let (eff_f, lanes, eff_m) = match point.kernel {
        Kernel::SweepF32 => (0.96, 1.0, 0.82),
        Kernel::SweepF16x2 => (0.94, 2.0, 0.82),
        Kernel::Copy => (0.96, 1.0, 0.88),
        Kernel::Triad => (0.96, 1.0, 0.86),
    };
    let pin_bw = bpc * op.emc_hz.max(1e6);
    let tf = point.flops() / (eff_f * lanes * cores * 2.0 * op.gpu_hz.max(1e6));
    let tm = point.bytes() / (eff_m * pin_bw);
    let busy = (tf.powi(4) + tm.powi(4)).powf(0.25);
    let time_s = busy + LAUNCH_S;
    Launch {
        time_s,
        load: LoadState {
            cpu: 1.0 / f64::from(op.online_cores.max(1)),
            gpu: ((tf + STALL_ACTIVITY * (busy - tf)) / time_s).min(1.0),
            emc: (point.bytes() / (pin_bw * time_s)).min(1.0),
        },
        clock_hz: op.gpu_hz,
    }
}

fn sim_error(e: std::io::Error) -> GpuError {
    GpuError::Power(format!("simulated board: {e}"))
}

impl Device for SimGpu {
    fn name(&self) -> String {
        format!("simulated {} GPU", self.board.spec().id())
    }

    fn simulated(&self) -> bool {
        true
    }

    fn prepare(&mut self, _: &Point) -> Result<(), GpuError> {
        // The model allocates nothing and needs no warm-up.
        Ok(())
    }

    fn run(&mut self, point: &Point, min_s: f64) -> Result<Run, GpuError> {
        // Busy first, so the devfreq governor has picked its clock under load and the
        // clock has reached it.
        let busy = LoadState {
            gpu: 1.0,
            ..LoadState::default()
        };
        self.board.set_load(busy).map_err(sim_error)?;
        std::thread::sleep(std::time::Duration::from_secs_f64(
            super::settle::SwitchTimes::DEFAULT.gpu_ms / 1e3,
        ));
        let l = self.launch(point)?;
        self.board.set_load(l.load).map_err(sim_error)?;
        let rails = self.board.true_rail_watts().map_err(sim_error)?;
        let module_w: f64 = self.module.iter().filter_map(|&r| rails.get(r)).sum();
        self.board
            .set_load(LoadState::default())
            .map_err(sim_error)?;
        let launches = (min_s / l.time_s).ceil().max(2.0) as u32;
        let seconds = l.time_s * f64::from(launches);
        self.spent_j.set(module_w * seconds);
        let start_ns = self.clock_ns;
        self.clock_ns += (seconds * 1e9).round() as u64;
        Ok(Run {
            launches,
            best_s: l.time_s,
            single_s: l.time_s,
            start_ns,
            end_ns: self.clock_ns,
            clock_hz: Some(l.clock_hz),
        })
    }
}

impl Meter for SimMeter {
    fn name(&self) -> String {
        "simulated module power (the rails' model, simulated time)".into()
    }

    fn begin(&mut self) -> Result<(), GpuError> {
        self.spent_j.set(0.0);
        Ok(())
    }

    fn end(&mut self, _: &Run) -> Result<f64, GpuError> {
        Ok(self.spent_j.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::roofline::sweep;

    fn orin() -> (tempfile::TempDir, SimGpu) {
        let dir = tempfile::tempdir().unwrap();
        let board = SimBoard::open("orin-agx", dir.path()).unwrap();
        (dir, SimGpu::new(board, vec![0, 1, 2]))
    }

    #[test]
    fn orin_maxn_roofs_match_the_data_sheet_fractions() {
        let (_dir, gpu) = orin();
        // Busy, so the governor runs the GPU at the top of its range (1300.5 MHz at boot).
        gpu.board
            .set_load(LoadState {
                cpu: 0.1,
                gpu: 1.0,
                emc: 0.5,
            })
            .unwrap();
        let op = gpu.board.operating().unwrap();
        let points = sweep(1 << 26, 256);
        let best = |k: Kernel| {
            points
                .iter()
                .filter(|p| p.kernel == k)
                .map(|p| {
                    let t = gpu.launch(p).unwrap().time_s;
                    (p.flops() / t, p.bytes() / t)
                })
                .fold((0.0f64, 0.0f64), |a, b| (a.0.max(b.0), a.1.max(b.1)))
        };
        let peak = 2048.0 * 2.0 * op.gpu_hz;
        let (f32_flops, _) = best(Kernel::SweepF32);
        let (f16_flops, _) = best(Kernel::SweepF16x2);
        let (_, copy_bw) = best(Kernel::Copy);
        println!(
            "GPU {:.1} MHz, EMC {:.0} MHz: FP32 {:.2} TF ({:.0}%), FP16 {:.2} TF, copy {:.0} GB/s",
            op.gpu_hz / 1e6,
            op.emc_hz / 1e6,
            f32_flops / 1e12,
            100.0 * f32_flops / peak,
            f16_flops / 1e12,
            copy_bw / 1e9
        );
        assert!(f32_flops >= 0.90 * peak && f32_flops <= peak);
        assert!(f16_flops > 1.8 * f32_flops);
        // Published copy on Orin AGX: ~183 GB/s of 204.8 at EMC 3199 MHz.
        let vendor = 64.0 * op.emc_hz;
        assert!(
            copy_bw >= 0.80 * vendor && copy_bw <= 0.95 * vendor,
            "{copy_bw}"
        );
    }

    #[test]
    fn memory_bound_points_follow_the_emc_and_compute_bound_ones_the_gpu() {
        let (_dir, gpu) = orin();
        let low = Point {
            kernel: Kernel::SweepF32,
            iters: 1,
            elements: 1 << 24,
        };
        let high = Point { iters: 256, ..low };
        let l = gpu.launch(&low).unwrap();
        let h = gpu.launch(&high).unwrap();
        assert!(h.time_s > 50.0 * l.time_s);
        assert!(l.load.emc > 0.7 && h.load.emc < 0.05, "{l:?} {h:?}");
        assert!(h.load.gpu > 0.95, "{h:?}");
    }
}
