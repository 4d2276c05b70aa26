//! Physics model of a simulated Jetson board: operating point + load -> watts per domain.
//!
//! # Equations (per board, coefficients in [`Coeffs`]; f in GHz, V in volts, u in 0..=1)
//!
//! * Voltage of a clock domain: `V(f) = max(v_min, v0 + k * f)` ([`voltage`]). Below the
//!   floor `v_min` voltage stops dropping, so at the lowest clocks power stays above zero and
//!   the energy per operation rises again.
//! * Activity factor of a clocked domain: `a(u) = s + (1 - s) * u`, where `s` =
//!   `clock_tree_share` is the share of full dynamic power the clock tree burns at u = 0.
//! * CPU (n online cores): `P_cpu = cpu_base_w + n * cpu_core_idle_w * V/v_min
//!   + n * cpu_ceff_nf * V^2 * f * a(u_cpu)`. Leakage grows linearly (mildly) with V.
//! * GPU: `P_gpu = gpu_leak_w * V/v_min + gpu_ceff_nf * V^2 * f * a(u_gpu)` (never rail-gated).
//! * CV (DLA/PVA, idle in every workload here): `P_cv = cv_w`.
//! * SoC: `P_soc = soc_base_w + soc_w_per_ghz * f_emc`.
//! * DRAM: `P_dram = dram_base_w + f_emc * (dram_bg_w_per_ghz + u_emc * dram_act_w_per_ghz)`.
//! * Carrier board: `P_carrier = carrier_w` (not part of [`DomainPower::module_total`]).
//!
//! `nF * V^2 * GHz = W`, so `*_ceff_nf` is the effective switched capacitance in nanofarads.
//! Every coefficient is >= 0 and V(f) is non-decreasing, so power never decreases when a
//! clock, the core count or a utilisation increases.
//!
//! # Calibration (the tests in this file check each figure)
//!
//! Published figures are module power: the sum of module rails (`module_total`) on AGX boards,
//! the input rail (`module_total / input_efficiency`, i.e. VDD_IN / POM_5V_IN) elsewhere.
//! * Xavier AGX: MAXN baseload 7527 mW (SIGMETRICS'22 Sec 5.6.2) fixes the static terms
//!   (`cpu_core_idle_w`, `soc_base_w`, `gpu_leak_w`, `dram_base_w`, `clock_tree_share`);
//!   ResNet-18 training 31 W (Sec 5.6) fixes `gpu_ceff_nf` with `cpu_ceff_nf`/`dram_act_w_per_ghz`;
//!   MAXN vs GPU 114.75 MHz at 3.6x the power (Sec 5.6) fixes the GPU curve floor.
//! * Orin AGX: Pagoda MAXN inference (BERT-large 63 W, ResNet-50 bs16 53.5 W, LSTM bs1 29.5 W)
//!   fixes `gpu_ceff_nf`, `dram_act_w_per_ghz`; PowerTrain Fig 10 training Pareto range
//!   ~11-51 W fixes the static floor (`soc_base_w`, `dram_base_w`) against MAXN idle 8-12 W;
//!   CPU-only stress ~15 W on VDD_CPU_CV (NVIDIA forum, Orin 32 GB) fixes `cpu_ceff_nf`;
//!   VIN_SYS_5V0 3.5-4.7 W in tegrastats samples sets `carrier_w`.
//! * Nano: LeNet training 5 W and idle (SIGMETRICS'22 Sec 5.6; 10 W mode rating).
//! * Xavier NX, Orin Nano: mode ratings (15-20 W / 15 W at max clocks) and idle ~4-5 W.
//! * V-f curves: typical DVFS ranges (~0.6 V floor to ~1 V at max clock; T210 Nano ~0.8-1.15 V),
//!   unpublished per board, so constrained only through the power ratios above.

use crate::control::mode::PinnedMode;

/// Which board's silicon the coefficients describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Silicon {
    /// Jetson AGX Orin (devkit, 32 GB).
    OrinAgx,
    /// Jetson Orin Nano 8 GB.
    OrinNano,
    /// Jetson AGX Xavier.
    XavierAgx,
    /// Jetson Xavier NX.
    XavierNx,
    /// Jetson Nano (T210).
    Nano,
}

/// The simulator's operating point: the running clocks (what cur_freq shows, Hz) and the
/// online core count, in the floating point its physics computes in. A pinned mode is
/// one ([`Operating::from`] a [`PinnedMode`]); under DVFS the running clocks are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Operating {
    /// Online CPU cores; clamped to `1..=Coeffs::max_cores`.
    pub online_cores: u32,
    /// CPU clock, Hz.
    pub cpu_hz: f64,
    /// GPU clock, Hz.
    pub gpu_hz: f64,
    /// EMC (memory controller) clock, Hz.
    pub emc_hz: f64,
}

impl From<&PinnedMode> for Operating {
    fn from(m: &PinnedMode) -> Operating {
        Operating {
            online_cores: m.cores,
            cpu_hz: m.cpu_hz as f64,
            gpu_hz: m.gpu_hz as f64,
            emc_hz: m.emc_hz as f64,
        }
    }
}

/// Utilisation of each domain in 0..=1 (cpu_util is per online core, averaged).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Load {
    /// Average busy fraction of the online CPU cores.
    pub cpu: f64,
    /// GPU busy fraction (devfreq `load` / 1000).
    pub gpu: f64,
    /// EMC busy fraction (actmon `mc_all`-like).
    pub emc: f64,
}

/// Power per domain, watts. Rails are later formed by summing domains per board (e.g. Orin AGX
/// VDD_GPU_SOC = gpu + soc, VDD_CPU_CV = cpu + cv, VDDQ_VDD2_1V8AO = dram, VIN_SYS_5V0 = carrier;
/// Orin Nano/Xavier NX: VDD_CPU_GPU_CV = cpu+gpu+cv, VDD_SOC = soc, VDD_IN = everything /
/// regulator efficiency; Xavier AGX GPU,CPU,SOC,CV,VDDRQ(=dram),SYS5V(=carrier); Nano
/// POM_5V_GPU=gpu, POM_5V_CPU=cpu, POM_5V_IN = all / efficiency).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DomainPower {
    /// CPU cluster(s).
    pub cpu: f64,
    /// GPU.
    pub gpu: f64,
    /// Computer-vision accelerators (DLA, PVA).
    pub cv: f64,
    /// SoC fabric, memory controller and always-on logic.
    pub soc: f64,
    /// DRAM (VDDQ / VDD2).
    pub dram: f64,
    /// Carrier board / system 5 V rail (outside the module total).
    pub carrier: f64,
}

impl DomainPower {
    /// Module power: cpu + gpu + cv + soc + dram (the carrier is excluded).
    pub fn module_total(&self) -> f64 {
        self.cpu + self.gpu + self.cv + self.soc + self.dram
    }
}

/// Voltage-frequency curve of one clock domain: `V = max(v_min, v0 + k_per_ghz * f_GHz)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VfCurve {
    /// Floor voltage (V) below which the rail stops dropping (Vmin of the process).
    pub v_min: f64,
    /// Intercept of the linear part (V at 0 Hz if there were no floor).
    pub v0: f64,
    /// Slope of the linear part, volts per GHz.
    pub k_per_ghz: f64,
}

/// Coefficients of one board.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coeffs {
    /// Number of CPU cores on the board (online_cores is clamped to this).
    pub max_cores: u32,
    /// CPU voltage-frequency curve.
    pub cpu_vf: VfCurve,
    /// GPU voltage-frequency curve.
    pub gpu_vf: VfCurve,
    /// Share of full dynamic power burned by the clock tree at zero utilisation (CPU and GPU).
    pub clock_tree_share: f64,
    /// CPU rail constant (cluster/uncore), W.
    pub cpu_base_w: f64,
    /// Idle (leakage + WFI) power of one online core at the floor voltage, W.
    pub cpu_core_idle_w: f64,
    /// Effective switched capacitance of one core, nF.
    pub cpu_ceff_nf: f64,
    /// GPU leakage at the floor voltage, W.
    pub gpu_leak_w: f64,
    /// Effective switched capacitance of the whole GPU, nF.
    pub gpu_ceff_nf: f64,
    /// CV (DLA/PVA) idle power, W.
    pub cv_w: f64,
    /// SoC constant part, W.
    pub soc_base_w: f64,
    /// SoC part that scales with EMC frequency, W per GHz of EMC clock.
    pub soc_w_per_ghz: f64,
    /// DRAM constant background (self-refresh, always-on), W.
    pub dram_base_w: f64,
    /// DRAM background that scales with EMC clock (I/O, refresh at speed), W per GHz.
    pub dram_bg_w_per_ghz: f64,
    /// DRAM activity power at 100 % EMC utilisation, W per GHz of EMC clock.
    pub dram_act_w_per_ghz: f64,
    /// Carrier-board / system 5 V draw, W (constant).
    pub carrier_w: f64,
    /// Efficiency of the regulators between the input rail and the module domains.
    pub input_efficiency: f64,
}

/// Shorthand constructor of a [`VfCurve`] for the coefficient tables.
const fn vf(v_min: f64, v0: f64, k_per_ghz: f64) -> VfCurve {
    VfCurve {
        v_min,
        v0,
        k_per_ghz,
    }
}

// Per-board coefficients, one row group per domain (calibration: see the module docs).
#[rustfmt::skip]
static ORIN_AGX: Coeffs = Coeffs {
    max_cores: 12, cpu_vf: vf(0.62, 0.42, 0.26), gpu_vf: vf(0.60, 0.38, 0.45),
    cpu_base_w: 0.4, cpu_core_idle_w: 0.05, cpu_ceff_nf: 0.52, gpu_leak_w: 0.7, gpu_ceff_nf: 37.0,
    clock_tree_share: 0.02, cv_w: 0.5, soc_base_w: 5.0, soc_w_per_ghz: 0.15, dram_base_w: 0.7,
    dram_bg_w_per_ghz: 0.15, dram_act_w_per_ghz: 3.0, carrier_w: 4.0, input_efficiency: 0.90,
};

#[rustfmt::skip]
static ORIN_NANO: Coeffs = Coeffs {
    max_cores: 6, cpu_vf: vf(0.62, 0.42, 0.26), gpu_vf: vf(0.60, 0.38, 0.45),
    cpu_base_w: 0.2, cpu_core_idle_w: 0.06, cpu_ceff_nf: 0.55, gpu_leak_w: 0.4, gpu_ceff_nf: 15.0,
    clock_tree_share: 0.03, cv_w: 0.2, soc_base_w: 1.8, soc_w_per_ghz: 0.2, dram_base_w: 0.25,
    dram_bg_w_per_ghz: 0.1, dram_act_w_per_ghz: 1.0, carrier_w: 1.0, input_efficiency: 0.90,
};

#[rustfmt::skip]
static XAVIER_AGX: Coeffs = Coeffs {
    max_cores: 8, cpu_vf: vf(0.60, 0.45, 0.24), gpu_vf: vf(0.62, 0.40, 0.42),
    cpu_base_w: 0.3, cpu_core_idle_w: 0.10, cpu_ceff_nf: 0.55, gpu_leak_w: 0.5, gpu_ceff_nf: 17.0,
    clock_tree_share: 0.04, cv_w: 0.3, soc_base_w: 1.6, soc_w_per_ghz: 0.35, dram_base_w: 0.3,
    dram_bg_w_per_ghz: 0.25, dram_act_w_per_ghz: 1.6, carrier_w: 2.0, input_efficiency: 0.90,
};

#[rustfmt::skip]
static XAVIER_NX: Coeffs = Coeffs {
    max_cores: 6, cpu_vf: vf(0.62, 0.45, 0.26), gpu_vf: vf(0.60, 0.40, 0.42),
    cpu_base_w: 0.2, cpu_core_idle_w: 0.08, cpu_ceff_nf: 0.45, gpu_leak_w: 0.3, gpu_ceff_nf: 6.0,
    clock_tree_share: 0.04, cv_w: 0.2, soc_base_w: 1.3, soc_w_per_ghz: 0.3, dram_base_w: 0.2,
    dram_bg_w_per_ghz: 0.15, dram_act_w_per_ghz: 0.9, carrier_w: 1.0, input_efficiency: 0.90,
};

#[rustfmt::skip]
static NANO: Coeffs = Coeffs {
    max_cores: 4, cpu_vf: vf(0.80, 0.55, 0.40), gpu_vf: vf(0.80, 0.50, 0.60),
    cpu_base_w: 0.1, cpu_core_idle_w: 0.03, cpu_ceff_nf: 0.45, gpu_leak_w: 0.15, gpu_ceff_nf: 1.9,
    clock_tree_share: 0.04, cv_w: 0.0, soc_base_w: 0.45, soc_w_per_ghz: 0.15, dram_base_w: 0.1,
    dram_bg_w_per_ghz: 0.08, dram_act_w_per_ghz: 0.55, carrier_w: 0.5, input_efficiency: 0.88,
};

impl Silicon {
    /// The coefficients of this board.
    pub fn coeffs(self) -> &'static Coeffs {
        match self {
            Silicon::OrinAgx => &ORIN_AGX,
            Silicon::OrinNano => &ORIN_NANO,
            Silicon::XavierAgx => &XAVIER_AGX,
            Silicon::XavierNx => &XAVIER_NX,
            Silicon::Nano => &NANO,
        }
    }

    /// Regulator efficiency for an input rail like VDD_IN / POM_5V_IN (input = module / eff).
    pub fn input_efficiency(self) -> f64 {
        self.coeffs().input_efficiency
    }
}

/// `x` clamped to `0..=hi`; NaN (which fails `x >= 0`) counts as 0.
fn clamp0(x: f64, hi: f64) -> f64 {
    if x >= 0.0 {
        x.min(hi)
    } else {
        0.0
    }
}

/// A frequency in Hz clamped to `0..=100 GHz`, in GHz.
fn ghz(hz: f64) -> f64 {
    clamp0(hz, 1e11) / 1e9
}

/// Voltage (V) of a clock domain at a frequency: a voltage-frequency curve with a floor
/// (V = max(v_min, v0 + k*f)), per domain. NaN or negative Hz count as 0 Hz.
pub fn voltage(curve: &VfCurve, hz: f64) -> f64 {
    curve.v_min.max(curve.v0 + curve.k_per_ghz * ghz(hz))
}

/// Power of every domain of `silicon` at operating point `op` under `load` (see module docs).
/// Out-of-range inputs (negative, NaN, infinite, too many cores) are clamped; never panics.
pub fn domain_power(silicon: Silicon, op: &Operating, load: &Load) -> DomainPower {
    let c = silicon.coeffs();
    let n = f64::from(op.online_cores.clamp(1, c.max_cores.max(1)));
    let (fc, fg, fe) = (ghz(op.cpu_hz), ghz(op.gpu_hz), ghz(op.emc_hz));
    let activity = |u: f64| c.clock_tree_share + (1.0 - c.clock_tree_share) * clamp0(u, 1.0);
    let (vc, vg) = (voltage(&c.cpu_vf, op.cpu_hz), voltage(&c.gpu_vf, op.gpu_hz));
    DomainPower {
        cpu: c.cpu_base_w
            + n * c.cpu_core_idle_w * vc / c.cpu_vf.v_min
            + n * c.cpu_ceff_nf * vc * vc * fc * activity(load.cpu),
        gpu: c.gpu_leak_w * vg / c.gpu_vf.v_min + c.gpu_ceff_nf * vg * vg * fg * activity(load.gpu),
        cv: c.cv_w,
        soc: c.soc_base_w + c.soc_w_per_ghz * fe,
        dram: c.dram_base_w
            + fe * (c.dram_bg_w_per_ghz + clamp0(load.emc, 1.0) * c.dram_act_w_per_ghz),
        carrier: c.carrier_w,
    }
}

#[cfg(test)]
mod tests {
    use super::Silicon::*;
    use super::*;
    use crate::sim::check::{near, within};

    const ALL: [Silicon; 5] = [OrinAgx, OrinNano, XavierAgx, XavierNx, Nano];

    fn op(online_cores: u32, cpu_mhz: f64, gpu_mhz: f64, emc_mhz: f64) -> Operating {
        let (cpu_hz, gpu_hz, emc_hz) = (cpu_mhz * 1e6, gpu_mhz * 1e6, emc_mhz * 1e6);
        Operating {
            online_cores,
            cpu_hz,
            gpu_hz,
            emc_hz,
        }
    }
    fn ld(cpu: f64, gpu: f64, emc: f64) -> Load {
        Load { cpu, gpu, emc }
    }
    /// Module power as the papers' tools read it: rail sum on AGX boards, input rail elsewhere.
    fn reported(s: Silicon, o: Operating, l: Load) -> f64 {
        let m = domain_power(s, &o, &l).module_total();
        match s {
            OrinAgx | XavierAgx => m,
            _ => m / s.input_efficiency(),
        }
    }
    fn xmaxn() -> Operating {
        op(8, 2265.6, 1377.0, 2133.0)
    }
    fn omaxn() -> Operating {
        op(12, 2201.6, 1300.5, 3199.0)
    }

    #[test]
    fn xavier_agx_maxn_baseload() {
        // Baseload: idle with a logger (3 % CPU, 3 % EMC), GPU idle but clocked (DVFS off).
        let p = reported(XavierAgx, xmaxn(), ld(0.03, 0.0, 0.03));
        near("xavier idle W", p, 7.527, 0.10);
    }

    #[test]
    fn xavier_agx_resnet_training_and_gpu_floor_ratio() {
        // ResNet-18 training: GPU busy 90 %, CPU 35 % (4 loader workers on 8 cores), EMC 45 %.
        let train = ld(0.35, 0.9, 0.45);
        let p_max = reported(XavierAgx, xmaxn(), train);
        near("xavier resnet18 train W", p_max, 31.0, 0.10);
        // GPU at 114.75 MHz: GPU saturated; the epoch is 10.3x longer, so loader and EMC
        // utilisation shrink 10.3x, except the main thread spinning on CUDA sync (1 of 8 cores).
        let slow = ld(0.125 + (train.cpu - 0.125) / 10.3, 1.0, train.emc / 10.3);
        let low = op(8, 2265.6, 114.75, 2133.0);
        let p_low = reported(XavierAgx, low, slow);
        println!("xavier resnet18 train at GPU 114.75 MHz: {p_low:.2} W");
        near(
            "xavier MAXN / GPU-114.75 power ratio",
            p_max / p_low,
            3.6,
            0.15,
        );
        let same = reported(XavierAgx, low, train);
        println!(
            "  (same utilisations at 114.75 MHz: {same:.2} W, ratio {:.2})",
            p_max / same
        );
    }

    #[test]
    fn orin_agx_maxn_inference_pagoda() {
        // BERT-large: GPU saturated, heavy memory traffic, one feeder thread (~10 % CPU).
        let p = reported(OrinAgx, omaxn(), ld(0.10, 1.0, 0.75));
        near("orin bert-large W", p, 63.0, 0.12);
        // ResNet-50 bs16: GPU 85 %, EMC 55 %, CPU 12 %.
        let p = reported(OrinAgx, omaxn(), ld(0.12, 0.85, 0.55));
        near("orin resnet50 bs16 W", p, 53.5, 0.12);
        // LSTM bs1: launch-bound tiny kernels, GPU 38 % busy, EMC 20 %, CPU 10 %.
        let p = reported(OrinAgx, omaxn(), ld(0.10, 0.38, 0.20));
        near("orin lstm bs1 W", p, 29.5, 0.12);
        let p = reported(OrinAgx, omaxn(), ld(0.03, 0.0, 0.03));
        within("orin maxn idle", p, 8.0, 12.0);
    }

    #[test]
    fn orin_agx_training_pareto_range() {
        // ResNet training at MAXN: GPU 75 %, CPU 30 % (loader workers), EMC 50 %.
        let p = reported(OrinAgx, omaxn(), ld(0.30, 0.75, 0.50));
        near("orin resnet train maxn W", p, 51.0, 0.15);
        // Lowest mode (2 cores, lowest clocks): CPU data loading is the bottleneck (100 %),
        // GPU 90 %, EMC 70 % at 204 MHz. Also the lowest mode of the PowerTrain grid.
        let slow = ld(1.0, 0.9, 0.7);
        let p = reported(OrinAgx, op(2, 115.2, 114.75, 204.0), slow);
        within("orin lowest mode train", p, 9.0, 14.0);
        let p = reported(OrinAgx, op(2, 268.8, 114.75, 204.0), slow);
        within("orin grid-lowest train", p, 9.0, 14.0);
        // NVIDIA forum CPU-only stress at MAXN (Orin 32 GB): VDD_CPU_CV ~15.2 W.
        let d = domain_power(OrinAgx, &omaxn(), &ld(1.0, 0.0, 0.2));
        near("orin cpu stress VDD_CPU_CV W", d.cpu + d.cv, 15.2, 0.15);
    }

    #[test]
    fn nano_lenet_and_idle() {
        let mx = op(4, 1479.0, 921.6, 1600.0);
        // LeNet: stall-bound, CPU loaders 50 %, tiny GPU kernels 40 %, EMC 30 %.
        let p = reported(Nano, mx, ld(0.5, 0.4, 0.3));
        near("nano lenet train W", p, 5.0, 0.15);
        let p = reported(Nano, mx, ld(0.02, 0.0, 0.03));
        within("nano idle", p, 1.0, 2.5);
    }

    #[test]
    fn orin_nano_and_xavier_nx_plausible() {
        // Full load = every domain saturated at the highest clocks; idle = logger only.
        let (full, idle) = (ld(1.0, 1.0, 1.0), ld(0.02, 0.0, 0.03));
        let on = op(6, 1510.4, 624.75, 2133.0);
        near("orin nano full W", reported(OrinNano, on, full), 15.0, 0.15);
        within("orin nano idle", reported(OrinNano, on, idle), 4.0, 5.0);
        let nx = op(6, 1907.2, 1109.25, 1600.0);
        within("xavier nx full", reported(XavierNx, nx, full), 15.0, 20.0);
        within("xavier nx idle", reported(XavierNx, nx, idle), 4.0, 5.0);
    }

    #[test]
    fn voltage_floor_and_energy_per_cycle() {
        let c = XavierAgx.coeffs();
        assert_eq!(voltage(&c.gpu_vf, 114.75e6), c.gpu_vf.v_min);
        assert_eq!(voltage(&c.gpu_vf, f64::NAN), c.gpu_vf.v_min);
        assert!(voltage(&c.gpu_vf, 1377e6) > 0.95);
        for s in ALL {
            // Module energy per GPU cycle at full GPU load is higher at the lowest clock.
            let e = |mhz: f64| reported(s, op(2, 729.6, mhz, 1600.0), ld(0.2, 1.0, 0.3)) / mhz;
            assert!(e(114.75) > e(510.0), "{s:?}");
        }
    }

    #[test]
    fn out_of_range_inputs_are_clamped() {
        for s in ALL {
            for x in [f64::NAN, -1.0, f64::INFINITY, f64::NEG_INFINITY, 0.0, 1e30] {
                for online_cores in [0, 1, 99] {
                    let d = domain_power(s, &op(online_cores, x, x, x), &ld(x, x, x));
                    let t = d.module_total() + d.carrier;
                    assert!(t.is_finite() && t > 0.0, "{s:?} {x} {online_cores}: {d:?}");
                }
            }
        }
    }

    #[test]
    fn monotone_finite_positive_on_grid() {
        const FR: [f64; 6] = [0.0, 0.1, 0.3, 0.6, 1.0, 1.3];
        const US: [f64; 3] = [0.0, 0.5, 1.0];
        for s in ALL {
            let p = |n: u32, f: [f64; 3], u: [f64; 3]| {
                let o = op(n, f[0] * 2300.0, f[1] * 1400.0, f[2] * 3200.0);
                reported(s, o, ld(u[0], u[1], u[2]))
            };
            for n in 1..=s.coeffs().max_cores + 1 {
                for k in 0..6 * 6 * 6 * 27 {
                    let f = [FR[k % 6], FR[k / 6 % 6], FR[k / 36 % 6]];
                    let u = [US[k / 216 % 3], US[k / 648 % 3], US[k / 1944 % 3]];
                    let base = p(n, f, u);
                    assert!(base.is_finite() && base > 0.0);
                    assert!(p(n + 1, f, u) >= base, "{s:?} cores {n} {f:?} {u:?}");
                    for i in 0..3 {
                        let (mut f2, mut u2) = (f, u);
                        f2[i] += 0.05;
                        u2[i] = (u2[i] + 0.25).min(1.0);
                        assert!(p(n, f2, u) >= base, "{s:?} clock {i} {n} {f:?} {u:?}");
                        assert!(p(n, f, u2) >= base, "{s:?} util {i} {n} {f:?} {u:?}");
                    }
                }
            }
        }
    }
}
