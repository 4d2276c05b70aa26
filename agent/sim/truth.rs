//! Ground truths of boards modelled unlike the simulator: ResNet-18-like training on an
//! Orin AGX or a Xavier AGX whose time and power follow other functional forms than
//! [`super::workload`] and [`super::power`], written as `--truth` profiles (`jpower sim
//! truth --kind K --board B`).
//!
//! The simulator's workloads are a hard pipeline (`max(loaders, GPU + serial) + fetch`, a
//! roofline `max` per layer group) and power a sum over its own V-f curves; jpower's physics
//! anchors share that form, so scoring a predictor only on the simulator flatters it. Each
//! kind here breaks the form in a way real boards do (PowerTrain and SIGMETRICS'22 measure
//! all of them: stalls that grow with cores, throttling at MAXN, launch-bound small kernels):
//!
//! - `contention`: the data loader's DRAM traffic takes bandwidth from the GPU (the faster
//!   the loaders, the less the GPU gets), stages overlap smoothly (`(a^k + b^k)^(1/k)`, no
//!   kink), loader parallelism saturates exponentially in the cores;
//! - `launch`: the GPU step is a stream of kernels of three sizes, each waiting for its
//!   launch by a CPU thread (`max(kernel, launch cycles / CPU clock)` per kernel: small
//!   kernels become CPU-clock bound), overlap of loading and compute is imperfect, more than
//!   six cores slow the loaders down again (migrations, shared caches), and voltage follows a
//!   table of 25 mV steps with a floor, so power is stepped in each clock;
//! - `throttle`: above a power limit the GPU clock is pulled down until power nearly meets
//!   it (a governor's duty cycle: 15% of the excess remains), and static power grows with
//!   temperature, so with the power drawn.
//!
//! Every kind also varies the unit from the seed (leakage +-8%, GPU and DRAM efficiency +-3%
//! and +-2%, one sigma): two seeds are two boards of the same model. Values are noise-free
//! (replaying adds noise: `--truth-noise`), and deterministic from kind, board and seed.
//! The tests pin a few values, so that the figures measured on them stay comparable.

use super::power::Silicon;
use super::spec::BoardSpec;
use crate::control::mode::PinnedMode;
use crate::predict::profile::Row;
use crate::support::rng::SplitMix64;

/// A kind of ground truth (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// DRAM contention between loaders and GPU, smooth stage overlap.
    Contention,
    /// CPU-clock-bound kernel launches, non-monotonic core scaling, stepped voltages.
    Launch,
    /// A power limit enforced by pulling the GPU clock down, temperature-dependent leakage.
    Throttle,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 3] = [Kind::Contention, Kind::Launch, Kind::Throttle];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Contention => "contention",
            Kind::Launch => "launch",
            Kind::Throttle => "throttle",
        }
    }

    /// The kind of a [`Kind::name`].
    pub fn from_name(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// A board's hardware as these truths model it (their own figures, not the simulator's).
#[derive(Debug, Clone, Copy)]
struct Hw {
    /// Achieved dense GFLOP/s per GHz of GPU clock.
    gflops_per_ghz: f64,
    /// Achievable DRAM GB/s per GHz of EMC clock.
    gbs_per_ghz: f64,
    /// CPU work per cycle relative to an A78AE.
    ipc: f64,
    /// GPU voltage: (GHz, V) at the floor's end and at the top clock.
    gpu_v: (f64, f64, f64, f64),
    /// CPU voltage, likewise.
    cpu_v: (f64, f64, f64, f64),
    /// GPU dynamic power, W per GHz V^2 at full load.
    c_gpu: f64,
    /// CPU dynamic power per core, W per GHz V^2 at full load.
    c_cpu: f64,
    /// Memory power, W per GHz of EMC clock at full load.
    c_emc: f64,
    /// Static power, W, and per online core.
    static_w: f64,
    /// Static power per online core, W.
    core_w: f64,
    /// The power limit of `throttle`, W.
    cap_w: f64,
}

/// The hardware of `s`, if these truths model it.
fn hw(s: Silicon) -> Option<Hw> {
    match s {
        Silicon::OrinAgx => Some(Hw {
            gflops_per_ghz: 2048.0 * 2.0 * 0.42,
            gbs_per_ghz: 64.0 * 0.75,
            ipc: 1.0,
            gpu_v: (0.5, 0.62, 1.3, 1.0),
            cpu_v: (0.8, 0.65, 2.2, 1.02),
            c_gpu: 22.0,
            c_cpu: 0.62,
            c_emc: 1.7,
            static_w: 6.8,
            core_w: 0.14,
            cap_w: 32.0,
        }),
        Silicon::XavierAgx => Some(Hw {
            gflops_per_ghz: 512.0 * 2.0 * 0.42 * 1.65,
            gbs_per_ghz: 64.0 * 0.72,
            ipc: 0.55,
            gpu_v: (0.6, 0.6, 1.377, 1.02),
            cpu_v: (1.0, 0.7, 2.265, 1.05),
            c_gpu: 15.0,
            c_cpu: 0.7,
            c_emc: 2.0,
            static_w: 5.2,
            core_w: 0.18,
            cap_w: 24.0,
        }),
        _ => None,
    }
}

/// The training step (ResNet-18-like, minibatch 16): GPU GFLOP, GPU DRAM GB, loader Gcycles
/// and DRAM GB, serial Gcycles, fetch Gcycles and GB, kernels per step.
const FLOP: f64 = 88.0;
const GPU_GB: f64 = 1.9;
const LOADER_GCYC: f64 = 0.24;
const LOADER_GB: f64 = 0.35;
const SERIAL_GCYC: f64 = 0.018;
const FETCH_GCYC: f64 = 0.002;
const FETCH_GB: f64 = 0.03;
const KERNELS: f64 = 420.0;

/// The unit's variation from its seed: leakage, GPU and DRAM efficiency factors.
#[derive(Debug, Clone, Copy)]
struct Unit {
    leak: f64,
    gpu: f64,
    dram: f64,
}

impl Unit {
    fn new(seed: u64) -> Unit {
        let mut r = SplitMix64::new(seed ^ 0x7E57_0B0A_4D00_0001);
        let mut f = |sigma: f64| 1.0 + sigma * r.normal().clamp(-3.0, 3.0);
        Unit {
            leak: f(0.08),
            gpu: f(0.03),
            dram: f(0.02),
        }
    }
}

/// Smooth maximum of `a` and `b` with sharpness `k`.
fn smax(a: f64, b: f64, k: f64) -> f64 {
    (a.powf(k) + b.powf(k)).powf(1.0 / k)
}

/// Voltage on a curve `(f0, v0, f1, v1)`: flat below `f0`, convex above it; `stepped`
/// rounds it up to the next 25 mV of the regulator's table.
fn volts(curve: (f64, f64, f64, f64), ghz: f64, stepped: bool) -> f64 {
    let (f0, v0, f1, v1) = curve;
    let x = ((ghz - f0) / (f1 - f0)).clamp(0.0, 1.2);
    let v = v0 + (v1 - v0) * x.powf(1.4);
    if stepped {
        (v / 0.025).ceil() * 0.025
    } else {
        v
    }
}

/// One mode's time (ms) and the utilisations that set its power.
struct Step {
    time: f64,
    gpu_util: f64,
    cpu_busy_cores: f64,
    emc_util: f64,
}

/// Time of one step at clocks `fc`, `fg`, `fe` (GHz) on `n` cores.
fn step(kind: Kind, hw: &Hw, u: &Unit, n: f64, fc: f64, fg: f64, fe: f64) -> Step {
    let cpu = hw.ipc * fc; // Gcycles of A78AE work per second
    let bw = hw.gbs_per_ghz * u.dram * fe; // GB/s
    let tc = 1000.0 * FLOP / (hw.gflops_per_ghz * u.gpu * fg);
    let serial = 1000.0 * SERIAL_GCYC / cpu;
    let fetch = 1000.0 * FETCH_GCYC / cpu + 1000.0 * FETCH_GB / bw;
    match kind {
        Kind::Contention => {
            let par = 4.0 * (1.0 - (-(n - 0.6) / 2.2).exp());
            let loader = 1000.0 * LOADER_GCYC / (par * cpu);
            let loader_gbs = 1000.0 * LOADER_GB / loader;
            let gpu_bw = (bw - 0.9 * loader_gbs).max(0.25 * bw);
            let tm = 1000.0 * GPU_GB / gpu_bw;
            let gpu = smax(tc, tm, 3.0);
            let time = smax(loader, gpu + serial, 4.0) + fetch;
            Step {
                time,
                gpu_util: (tc + 0.6 * (gpu - tc)) / time,
                cpu_busy_cores: loader * par / time + (gpu + serial + fetch) / time,
                emc_util: 1000.0 * (GPU_GB + LOADER_GB + FETCH_GB) / (bw * time),
            }
        }
        Kind::Launch => {
            // (share of kernels, share of work) of large, medium and tiny kernels.
            let classes = [(0.2, 0.85), (0.3, 0.12), (0.5, 0.03)];
            let tm = 1000.0 * GPU_GB / bw;
            let launch_ms = 0.012 / cpu; // 12 us per launch at 1 Gcycle/s
            let mut gpu = 0.0;
            let mut busy = 0.0;
            for (kshare, wshare) in classes {
                let k = KERNELS * kshare;
                let work = smax(tc * wshare, tm * wshare, 2.5) / k;
                gpu += k * work.max(launch_ms);
                busy += k * work;
            }
            let par = if n < 1.5 { 0.55 } else { (n - 1.0).min(4.0) };
            let thrash = 1.0 + 0.07 * (n - 6.0).max(0.0);
            let loader = 1000.0 * LOADER_GCYC * thrash / (par * cpu);
            let compute = gpu + serial;
            let time = loader.max(compute) + 0.15 * loader.min(compute) + fetch;
            Step {
                time,
                gpu_util: busy / time,
                cpu_busy_cores: loader * par / time + (gpu + serial + fetch) / time,
                emc_util: 1000.0 * (GPU_GB + LOADER_GB + FETCH_GB) / (bw * time),
            }
        }
        Kind::Throttle => {
            let par = (n - 0.5).clamp(0.5, 4.0);
            let loader = 1000.0 * LOADER_GCYC / (par * cpu);
            let tm = 1000.0 * GPU_GB / bw;
            let gpu = tc.max(tm) + 0.3 * tc.min(tm);
            let time = loader.max(gpu + serial) + fetch;
            Step {
                time,
                gpu_util: (tc + 0.6 * (gpu - tc)) / time,
                cpu_busy_cores: loader * par / time + (gpu + serial + fetch) / time,
                emc_util: 1000.0 * (GPU_GB + LOADER_GB + FETCH_GB) / (bw * time),
            }
        }
    }
}

/// Module power of a step, W.
#[allow(clippy::too_many_arguments)]
fn power(kind: Kind, hw: &Hw, u: &Unit, s: &Step, n: f64, fc: f64, fg: f64, fe: f64) -> f64 {
    let stepped = kind == Kind::Launch;
    let (vg, vc) = (volts(hw.gpu_v, fg, stepped), volts(hw.cpu_v, fc, stepped));
    let busy = s.cpu_busy_cores.min(n);
    let gpu = hw.c_gpu * vg * vg * fg * (0.08 + 0.92 * s.gpu_util.min(1.0));
    let cpu = hw.c_cpu * vc * vc * fc * (busy + 0.1 * (n - busy));
    let emc = hw.c_emc * fe * (0.35 + 0.65 * s.emc_util.min(1.0));
    let leak = (hw.static_w + hw.core_w * n) * u.leak * (0.8 + 0.2 * vg.max(vc));
    leak + gpu + cpu + emc
}

/// Time (ms) and power (W) of `kind` on `hw` at a mode.
fn at(kind: Kind, hw: &Hw, u: &Unit, m: &PinnedMode) -> (f64, f64) {
    let n = f64::from(m.cores.max(1));
    let (fc, fg, fe) = (
        m.cpu_hz as f64 / 1e9,
        m.gpu_hz as f64 / 1e9,
        m.emc_hz as f64 / 1e9,
    );
    let s = step(kind, hw, u, n, fc, fg, fe);
    let p = power(kind, hw, u, &s, n, fc, fg, fe);
    if kind != Kind::Throttle {
        return (s.time, p);
    }
    // Temperature-dependent leakage: the die warms ~1.5 C per W drawn, and static power
    // grows ~0.4% per W above 15 W.
    let warm = |p: f64| p + 0.004 * (p - 15.0).max(0.0) * hw.static_w * u.leak;
    let p = warm(p);
    if p <= hw.cap_w {
        return (s.time, p);
    }
    // The governor pulls the GPU clock down until power meets the cap (bisection), and
    // its duty cycle leaves 15% of the excess.
    let draw = |g: f64| {
        let s = step(kind, hw, u, n, fc, g, fe);
        let p = power(kind, hw, u, &s, n, fc, g, fe);
        (s, warm(p))
    };
    let (mut lo, mut hi) = (0.05 * fg, fg);
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        if draw(mid).1 > hw.cap_w {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let floor = draw(lo);
    if floor.1 > hw.cap_w {
        // Even the lowest clock the governor goes to draws more than the cap (a limit
        // below what the mode's cores and memory draw): it runs there, over the cap.
        return (floor.0.time, floor.1);
    }
    let g = lo + 0.15 * (fg - lo);
    let (s, _) = draw(g);
    (s.time, hw.cap_w + 0.15 * (p - hw.cap_w))
}

/// The power limit (W) `--kind throttle` caps `spec` at when none is given.
pub fn default_limit_w(spec: &BoardSpec) -> Option<f64> {
    hw(spec.silicon).map(|h| h.cap_w)
}

/// The truth of `kind` on `spec` for the unit of `seed`: every mode of the board, in the
/// order of its mode space; `limit_w` replaces the board's power limit (32 W on Orin AGX,
/// 24 W on Xavier AGX), which only `throttle` enforces. `None` for a board these truths do
/// not model (only the AGX boards: Orin AGX and Xavier AGX).
pub fn rows(kind: Kind, spec: &BoardSpec, seed: u64, limit_w: Option<f64>) -> Option<Vec<Row>> {
    let mut hw = hw(spec.silicon)?;
    if let Some(w) = limit_w {
        hw.cap_w = w;
    }
    let u = Unit::new(seed);
    Some(
        spec.mode_space()
            .iter()
            .map(|mode| {
                let (time_ms, power_w) = at(kind, &hw, &u, &mode);
                Row {
                    mode,
                    time_ms,
                    power_w,
                    time_std_ms: 0.0,
                    power_std_w: 0.0,
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::spec::find;

    fn truth(kind: Kind, board: &str, seed: u64) -> Vec<Row> {
        rows(kind, find(board).unwrap(), seed, None).unwrap()
    }

    /// The figures measured on these truths (README) stay comparable only while the truths
    /// do not move: a few values are pinned.
    #[test]
    fn the_truths_are_frozen() {
        let pins = [
            (Kind::Contention, "orin-agx", 18095, 49.4852, 39.5703),
            (Kind::Launch, "orin-agx", 0, 3901.5836, 6.3646),
            (Kind::Throttle, "orin-agx", 18095, 57.0643, 33.2465),
            (Kind::Contention, "xavier-agx", 9744, 256.8305, 10.6850),
            (Kind::Launch, "xavier-agx", 29231, 113.2318, 31.9119),
            (Kind::Throttle, "xavier-agx", 29231, 126.5721, 25.2800),
        ];
        for (kind, board, i, t, p) in pins {
            let r = &truth(kind, board, 1)[i];
            assert!(
                (r.time_ms / t - 1.0).abs() < 1e-5,
                "{kind:?} {board} {i}: {r:?}"
            );
            assert!(
                (r.power_w / p - 1.0).abs() < 1e-5,
                "{kind:?} {board} {i}: {r:?}"
            );
        }
    }

    #[test]
    fn a_seed_is_a_unit_and_the_same_seed_the_same_unit() {
        let (a, b) = (
            truth(Kind::Contention, "orin-agx", 1),
            truth(Kind::Contention, "orin-agx", 2),
        );
        assert_eq!(a, truth(Kind::Contention, "orin-agx", 1));
        assert_ne!(a[100].power_w, b[100].power_w);
    }

    #[test]
    fn only_the_agx_boards_are_modelled() {
        assert!(rows(Kind::Launch, find("nano").unwrap(), 1, None).is_none());
    }

    /// Where loaders bound the step, eight cores are slower than six on `launch`, and slow
    /// CPU clocks slow the GPU-bound step through its launches.
    #[test]
    fn launch_truth_scales_cores_non_monotonically_and_launches_on_the_cpu_clock() {
        let rows = truth(Kind::Launch, "orin-agx", 1);
        let at = |cores: u32, cpu_hz: u64, gpu_hz: u64| {
            rows.iter()
                .find(|r| {
                    r.mode.cores == cores
                        && r.mode.cpu_hz == cpu_hz
                        && r.mode.gpu_hz == gpu_hz
                        && r.mode.emc_hz == 3_199_000_000
                })
                .unwrap()
                .time_ms
        };
        assert!(at(8, 1_113_600_000, 1_300_500_000) > at(6, 1_113_600_000, 1_300_500_000));
        let slow = at(12, 422_400_000, 1_300_500_000) / at(12, 2_201_600_000, 1_300_500_000);
        assert!(slow > 1.3, "{slow}");
    }

    /// Above the limit, power stays near it and the step slows instead.
    #[test]
    fn throttle_truth_holds_power_near_its_limit() {
        for board in ["orin-agx", "xavier-agx"] {
            let cap = hw(find(board).unwrap().silicon).unwrap().cap_w;
            let rows = truth(Kind::Throttle, board, 1);
            let max = rows.iter().map(|r| r.power_w).fold(0.0, f64::max);
            assert!(
                max > cap && max < cap + 2.0,
                "{board}: {max} W, limit {cap} W"
            );
        }
    }
}
