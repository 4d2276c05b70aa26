//! Roofline measurements: the sweep of kernels (what each point computes and moves), the
//! devices that run it (a CUDA GPU, or a simulated board's GPU model), the power meters
//! that measure it (the INA3221 ring, NVML's energy counter), and the per-mode fits: the
//! time roofline (peak FLOP/s per precision, peak DRAM bandwidth, ridge point) and the
//! energy roofline of Choi et al. (IPDPS 2013), `E = eps_flop * W + eps_byte * Q + pi0 * T`.
//!
//! The sweep follows the Empirical Roofline Toolkit and mixbench: one element is loaded,
//! `16 * iters` FP32 FLOPs (8 independent FMA chains) or `32 * iters` FP16 FLOPs (`half2`)
//! are done on it, one element is stored, so the arithmetic intensity is `2 * iters` or
//! `4 * iters` FLOP/byte; `copy` and `triad` over buffers far larger than L2 give the
//! bandwidth roof. Each point runs repeatedly for at least a given time: the best launch
//! gives the time roofline, the mean launch over the metered window the energy.

use super::GpuError;
use crate::telemetry::ring::RingReader;
use serde::Serialize;
use std::time::Duration;

/// A kernel of `cuda-kernels/roofline.cu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kernel {
    /// FP32 FMA chains, `16 * iters` FLOPs and 8 bytes per element.
    SweepF32,
    /// FP16 `half2` FMA chains, `32 * iters` FLOPs and 8 bytes per element.
    SweepF16x2,
    /// `b = a` over float4s: 8 bytes per float.
    Copy,
    /// `a = b + s * c` over float4s: 12 bytes and 2 FLOPs per float.
    Triad,
}

impl Kernel {
    /// The kernel's symbol in the CUDA source.
    pub fn symbol(self) -> &'static str {
        match self {
            Kernel::SweepF32 => "sweep_f32",
            Kernel::SweepF16x2 => "sweep_f16x2",
            Kernel::Copy => "copy_f32",
            Kernel::Triad => "triad_f32",
        }
    }

    /// The precision its FLOPs count in.
    pub fn precision(self) -> Precision {
        match self {
            Kernel::SweepF16x2 => Precision::F16,
            _ => Precision::F32,
        }
    }
}

/// FP32 or FP16 arithmetic, named in outputs as `--precision` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Precision {
    /// FP32.
    #[serde(rename = "fp32")]
    F32,
    /// FP16 (`half2`).
    #[serde(rename = "fp16")]
    F16,
}

/// One point of the sweep: a kernel and its inner loop count over `elements` elements
/// (4-byte floats; `half2` pairs for FP16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Point {
    /// The kernel.
    pub kernel: Kernel,
    /// Its inner loop count (0 for `copy` and `triad`).
    pub iters: u32,
    /// Elements each launch loads and stores.
    pub elements: u64,
}

impl Point {
    /// FLOPs of one launch.
    pub fn flops(&self) -> f64 {
        let per = match self.kernel {
            Kernel::SweepF32 => 16.0 * f64::from(self.iters),
            Kernel::SweepF16x2 => 32.0 * f64::from(self.iters),
            Kernel::Copy => 0.0,
            Kernel::Triad => 2.0,
        };
        per * self.elements as f64
    }

    /// DRAM bytes of one launch (what the kernel logically moves).
    pub fn bytes(&self) -> f64 {
        let per = match self.kernel {
            Kernel::Triad => 12.0,
            _ => 8.0,
        };
        per * self.elements as f64
    }

    /// FLOPs per byte.
    pub fn intensity(&self) -> f64 {
        self.flops() / self.bytes()
    }

    /// A short label: `copy`, `f32 x16`.
    pub fn label(&self) -> String {
        match self.kernel {
            Kernel::SweepF32 => format!("f32 x{}", self.iters),
            Kernel::SweepF16x2 => format!("f16 x{}", self.iters),
            Kernel::Copy => "copy".into(),
            Kernel::Triad => "triad".into(),
        }
    }
}

/// The sweep: copy, triad, then FP32 and FP16 chains with 1, 2, 4, ... `max_iters`
/// iterations (intensity 2 to `2 * max_iters` FLOP/byte in FP32).
pub fn sweep(elements: u64, max_iters: u32) -> Vec<Point> {
    let mut points = vec![
        Point {
            kernel: Kernel::Copy,
            iters: 0,
            elements,
        },
        Point {
            kernel: Kernel::Triad,
            iters: 0,
            elements,
        },
    ];
    for kernel in [Kernel::SweepF32, Kernel::SweepF16x2] {
        let mut iters = 1;
        while iters <= max_iters.max(1) {
            points.push(Point {
                kernel,
                iters,
                elements,
            });
            iters *= 2;
        }
    }
    points
}

/// One point run: launches repeated for at least the requested time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Run {
    /// Launches made.
    pub launches: u32,
    /// The fastest launch within batches of back-to-back launches (no launch latency),
    /// seconds: what the roofline uses.
    pub best_s: f64,
    /// The fastest launch timed alone on an idle GPU (with its launch latency), seconds.
    pub single_s: f64,
    /// `CLOCK_MONOTONIC` (the telemetry ring's clock) before the first timed launch and
    /// after the last one completed, nanoseconds.
    pub start_ns: u64,
    /// `CLOCK_MONOTONIC` after the last timed launch completed, nanoseconds.
    pub end_ns: u64,
    /// The GPU clock while they ran, Hz, where known.
    pub clock_hz: Option<f64>,
}

impl Run {
    /// From the first timed launch's start to the last one's end, seconds.
    pub fn total_s(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 * 1e-9
    }
}

/// Something that runs sweep points: a CUDA GPU or a simulated board's GPU.
pub trait Device {
    /// What it is (`NVIDIA H200`, `simulated orin-agx GPU`).
    fn name(&self) -> String;
    /// Whether its timings come from a model rather than a GPU.
    fn simulated(&self) -> bool;
    /// Makes `point` ready to time: its buffers allocated and filled, one untimed warm-up
    /// launch done (outside the meter's window).
    fn prepare(&mut self, point: &Point) -> Result<(), GpuError>;
    /// Runs the prepared `point` back to back for at least `min_s` seconds and returns
    /// the timings; the launches lie inside the caller's meter window.
    fn run(&mut self, point: &Point, min_s: f64) -> Result<Run, GpuError>;
}

/// Something that measures energy over a window of time.
pub trait Meter {
    /// What it reads (`INA3221 ring (VDD_IN)`, `NVML total energy`).
    fn name(&self) -> String;
    /// Marks the start of a window, before `run` starts.
    fn begin(&mut self) -> Result<(), GpuError>;
    /// Ends the window begun last, after `run` returned: the joules of `run`'s timed
    /// launches (from `run.start_ns` to `run.end_ns`).
    fn end(&mut self, run: &Run) -> Result<f64, GpuError>;
}

/// The telemetry ring as a meter: module power integrated over exactly the launches.
pub struct RingMeter {
    ring: RingReader,
}

impl RingMeter {
    /// A meter reading `ring`.
    pub fn new(ring: RingReader) -> RingMeter {
        RingMeter { ring }
    }
}

impl Meter for RingMeter {
    fn name(&self) -> String {
        format!(
            "INA3221 ring, module power ({} rails, {:.0} Hz)",
            self.ring.info.rails.len(),
            1e9 / self.ring.info.period_ns.max(1) as f64
        )
    }

    fn begin(&mut self) -> Result<(), GpuError> {
        Ok(())
    }

    fn end(&mut self, run: &Run) -> Result<f64, GpuError> {
        // Two periods, so the sample after the launches' end is in the ring.
        std::thread::sleep(Duration::from_nanos(
            2 * self.ring.info.period_ns.max(500_000),
        ));
        let e = self.ring.energy(run.start_ns, run.end_ns);
        if e.samples == 0 {
            return Err(GpuError::Power(format!(
                "no telemetry sample in a {:.3} s window: is the sampler running?",
                e.duration_s
            )));
        }
        Ok(e.module_j)
    }
}

/// One measured point.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// The point's short label (`copy`, `f32 x16`).
    pub label: String,
    /// The kernel and size that ran.
    pub point: Point,
    /// Its arithmetic intensity, FLOP/byte.
    pub intensity: f64,
    /// Its launches, their timing and the GPU clock.
    pub run: Run,
    /// Best launch: FLOP/s and bytes/s.
    pub flops_per_s: f64,
    /// Best launch: DRAM bytes/s.
    pub bytes_per_s: f64,
    /// Per launch over the metered window: seconds, joules, mean watts.
    pub mean_s: f64,
    /// Per launch over the metered window: joules.
    pub energy_j: f64,
    /// Per launch over the metered window: mean watts.
    pub power_w: f64,
}

/// Runs every point of `points` on `device`, metering each.
pub fn measure(
    device: &mut dyn Device,
    meter: &mut dyn Meter,
    points: &[Point],
    min_s: f64,
) -> Result<Vec<Measured>, GpuError> {
    points
        .iter()
        .map(|p| {
            device.prepare(p)?;
            meter.begin()?;
            let run = device.run(p, min_s)?;
            let launches = f64::from(run.launches.max(1));
            let mean_s = run.total_s() / launches;
            let energy_j = meter.end(&run)? / launches;
            Ok(Measured {
                label: p.label(),
                point: *p,
                intensity: p.intensity(),
                run,
                flops_per_s: p.flops() / run.best_s,
                bytes_per_s: p.bytes() / run.best_s,
                mean_s,
                energy_j,
                power_w: energy_j / mean_s,
            })
        })
        .collect()
}

/// The time roofline of one mode.
#[derive(Debug, Clone, Serialize)]
pub struct TimeRoofline {
    /// Best FP32 and FP16 FLOP/s of the sweep.
    pub peak_f32_flops: f64,
    /// Best FP16 FLOP/s of the sweep.
    pub peak_f16_flops: f64,
    /// Best DRAM bytes/s (copy, triad, the memory-bound sweep points).
    pub peak_bytes_per_s: f64,
    /// FP32 ridge point, FLOP/byte.
    pub ridge_f32: f64,
    /// RMS relative error of `min(peak, intensity * bandwidth)` against the points.
    pub rms_rel_error: f64,
}

/// The energy roofline of one mode: `E = eps_flop W + eps_byte Q + pi0 T`.
#[derive(Debug, Clone, Serialize)]
pub struct EnergyRoofline {
    /// Joules per FP32 FLOP, per DRAM byte, and the constant power in watts.
    pub eps_flop_j: f64,
    /// Joules per DRAM byte.
    pub eps_byte_j: f64,
    /// Constant power, watts.
    pub pi0_w: f64,
    /// Joules per FP16 FLOP (`half2`), fitted with the others; absent without FP16 points.
    pub eps_flop_f16_j: Option<f64>,
    /// RMS relative error of the fitted energy against the points.
    pub rms_rel_error: f64,
}

/// Fits the time roofline to `points`.
pub fn fit_time(points: &[Measured]) -> TimeRoofline {
    let best = |prec: Precision| {
        points
            .iter()
            .filter(|m| m.point.kernel.precision() == prec && m.point.flops() > 0.0)
            .map(|m| m.flops_per_s)
            .fold(0.0, f64::max)
    };
    let (f32_peak, f16_peak) = (best(Precision::F32), best(Precision::F16));
    let bw = points.iter().map(|m| m.bytes_per_s).fold(0.0, f64::max);
    let model = |m: &Measured| {
        let peak = match m.point.kernel.precision() {
            Precision::F32 => f32_peak,
            Precision::F16 => f16_peak,
        };
        let t_flop = if peak > 0.0 {
            m.point.flops() / peak
        } else {
            0.0
        };
        t_flop.max(m.point.bytes() / bw.max(f64::MIN_POSITIVE))
    };
    TimeRoofline {
        peak_f32_flops: f32_peak,
        peak_f16_flops: f16_peak,
        peak_bytes_per_s: bw,
        ridge_f32: if bw > 0.0 { f32_peak / bw } else { 0.0 },
        rms_rel_error: rms(points.iter().map(|m| (model(m), m.run.best_s))),
    }
}

fn rms(pairs: impl Iterator<Item = (f64, f64)>) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for (model, got) in pairs {
        if got > 0.0 {
            sum += ((model - got) / got).powi(2);
            n += 1;
        }
    }
    if n == 0 {
        0.0
    } else {
        (sum / n as f64).sqrt()
    }
}

/// Fits the energy roofline by non-negative least squares over every point at once, with
/// one FLOP energy per precision sharing the byte energy and the constant power (Choi et
/// al.'s model with FP16 FLOPs as a fourth term), each row scaled by its energy so every
/// point weighs the same relatively.
pub fn fit_energy(points: &[Measured]) -> EnergyRoofline {
    let measured = || points.iter().filter(|m| m.energy_j > 0.0);
    let terms = |m: &Measured| {
        let (f32_flops, f16_flops) = match m.point.kernel.precision() {
            Precision::F32 => (m.point.flops(), 0.0),
            Precision::F16 => (0.0, m.point.flops()),
        };
        [f32_flops, f16_flops, m.point.bytes(), m.mean_s]
    };
    let rows: Vec<([f64; 4], f64)> = measured()
        .map(|m| (terms(m).map(|t| t / m.energy_j), 1.0))
        .collect();
    let eps = nnls(&rows);
    let rms_rel_error = rms(measured().map(|m| {
        let model: f64 = terms(m).iter().zip(&eps).map(|(t, e)| t * e).sum();
        (model, m.energy_j)
    }));
    let has_f16 = measured().any(|m| m.point.kernel.precision() == Precision::F16);
    EnergyRoofline {
        eps_flop_j: eps[0],
        eps_flop_f16_j: has_f16.then_some(eps[1]),
        eps_byte_j: eps[2],
        pi0_w: eps[3],
        rms_rel_error,
    }
}

/// Non-negative least squares: the best of the unconstrained solutions over every subset
/// of free variables whose solution is non-negative (exact, and cheap for a few unknowns).
pub fn nnls<const N: usize>(rows: &[([f64; N], f64)]) -> [f64; N] {
    let mut best = ([0.0; N], f64::INFINITY);
    for mask in 1u32..(1 << N) {
        let free: Vec<usize> = (0..N).filter(|i| mask & (1 << i) != 0).collect();
        let Some(sol) = least_squares(rows, &free) else {
            continue;
        };
        if sol.iter().any(|&x| x < 0.0) {
            continue;
        }
        let mut x = [0.0; N];
        for (&i, &v) in free.iter().zip(&sol) {
            x[i] = v;
        }
        let resid: f64 = rows
            .iter()
            .map(|(a, b)| (a.iter().zip(&x).map(|(a, x)| a * x).sum::<f64>() - b).powi(2))
            .sum();
        if resid < best.1 {
            best = (x, resid);
        }
    }
    best.0
}

/// Least squares over the columns `free`, by the normal equations (Gaussian elimination
/// with partial pivoting on a matrix of at most N x N, columns scaled to unit norm).
fn least_squares<const N: usize>(rows: &[([f64; N], f64)], free: &[usize]) -> Option<Vec<f64>> {
    let n = free.len();
    let scale: Vec<f64> = free
        .iter()
        .map(|&j| rows.iter().map(|(a, _)| a[j] * a[j]).sum::<f64>().sqrt())
        .collect();
    if scale.contains(&0.0) {
        return None;
    }
    let mut m = vec![vec![0.0; n + 1]; n];
    for (a, b) in rows {
        for r in 0..n {
            let ar = a[free[r]] / scale[r];
            for c in 0..n {
                m[r][c] += ar * a[free[c]] / scale[c];
            }
            m[r][n] += ar * b;
        }
    }
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
        if m[pivot][col].abs() < 1e-12 {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col].clone();
        for (r, row) in m.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..n).map(|i| m[i][n] / m[i][i] / scale[i]).collect())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn measured(p: Point, best_s: f64, energy_j: f64) -> Measured {
        Measured {
            label: p.label(),
            point: p,
            intensity: p.intensity(),
            run: Run {
                launches: 1,
                best_s,
                single_s: best_s,
                start_ns: 0,
                end_ns: (best_s * 1e9) as u64,
                clock_hz: None,
            },
            flops_per_s: p.flops() / best_s,
            bytes_per_s: p.bytes() / best_s,
            mean_s: best_s,
            energy_j,
            power_w: energy_j / best_s,
        }
    }

    /// A synthetic GPU with known roofs and energy terms, measured exactly.
    pub(crate) fn synthetic(peak: f64, bw: f64, eps: [f64; 3]) -> Vec<Measured> {
        sweep(1 << 20, 256)
            .into_iter()
            .map(|p| {
                let peak = match p.kernel.precision() {
                    Precision::F32 => peak,
                    Precision::F16 => 2.0 * peak,
                };
                let t = (p.flops() / peak).max(p.bytes() / bw);
                let e = eps[0] * p.flops() + eps[1] * p.bytes() + eps[2] * t;
                measured(p, t, e)
            })
            .collect()
    }

    #[test]
    fn sweep_spans_memory_to_compute_bound() {
        let s = sweep(1024, 256);
        assert_eq!(s.len(), 2 + 2 * 9);
        let f32s: Vec<f64> = s
            .iter()
            .filter(|p| p.kernel == Kernel::SweepF32)
            .map(Point::intensity)
            .collect();
        assert_eq!(f32s.first(), Some(&2.0));
        assert_eq!(f32s.last(), Some(&512.0));
        assert_eq!(s[0].intensity(), 0.0);
        assert!((s[1].intensity() - 2.0 / 12.0).abs() < 1e-12);
    }

    #[test]
    fn time_fit_recovers_the_roofs() {
        let pts = synthetic(5.3e12, 1.8e11, [1e-11, 1e-10, 10.0]);
        let t = fit_time(&pts);
        assert!((t.peak_f32_flops / 5.3e12 - 1.0).abs() < 1e-9);
        assert!((t.peak_f16_flops / 10.6e12 - 1.0).abs() < 1e-9);
        assert!((t.peak_bytes_per_s / 1.8e11 - 1.0).abs() < 1e-9);
        assert!((t.ridge_f32 - 5.3e12 / 1.8e11).abs() < 1e-6);
        assert!(t.rms_rel_error < 1e-9, "{}", t.rms_rel_error);
    }

    #[test]
    fn energy_fit_recovers_the_terms() {
        let (ef, eb, p0) = (8e-12, 1.2e-10, 9.5);
        let pts = synthetic(5.3e12, 1.8e11, [ef, eb, p0]);
        let e = fit_energy(&pts);
        assert!((e.eps_flop_j / ef - 1.0).abs() < 1e-6, "{e:?}");
        assert!((e.eps_byte_j / eb - 1.0).abs() < 1e-6, "{e:?}");
        assert!((e.pi0_w / p0 - 1.0).abs() < 1e-6, "{e:?}");
        // The FP16 points were made with the FP32 FLOP energy.
        assert!((e.eps_flop_f16_j.unwrap() / ef - 1.0).abs() < 1e-6);
        assert!(e.rms_rel_error < 1e-9);
    }

    #[test]
    fn nnls_clamps_a_negative_term() {
        // b = 2 x0 - 1 x1 exactly: the unconstrained solution is infeasible.
        let rows: Vec<([f64; 3], f64)> = (1..10)
            .map(|i| {
                let a = [f64::from(i), f64::from(i * i % 7), 1.0];
                (a, 2.0 * a[0] - a[1])
            })
            .collect();
        let x = nnls(&rows);
        assert!(x.iter().all(|&v| v >= 0.0), "{x:?}");
        assert_eq!(x[1], 0.0);
    }
}
