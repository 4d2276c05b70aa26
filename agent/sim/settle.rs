//! How long each knob of a simulated board takes to settle after a write: the time from
//! the write to the running clock reading its new rate (the simulated kernel's running
//! clocks lag so, [`super::kernel`]), and the time a switch between two modes costs in the
//! concurrent simulation ([`super::concurrent`]). No switch time is published for Jetson
//! boards, so these are assumptions, one per knob; `jpower switch-cost` measures a board's.
//!
//! - GPU clock 0.1 ms: devfreq writes the rate through the BPMP, which relocks the GPC
//!   PLL in tens of microseconds (the NAFLL of Orin's GPU, assumed);
//! - EMC 1 ms: the cap is followed by the memory controller's own DVFS, which retrains the
//!   DRAM interface at its next evaluation (assumed);
//! - CPU clock 0.5 ms: cpufreq's `cpuinfo_transition_latency` on Tegra is in the hundreds
//!   of microseconds (assumed from the driver's order of magnitude);
//! - core hotplug 30 ms: bringing a core online or offline in Linux takes milliseconds to
//!   tens of milliseconds (assumed); the write to `online` returns when it is done.

use crate::control::mode::PinnedMode;

/// Settle time of each knob after a write, ms (module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwitchTimes {
    /// Online cores.
    pub cores_ms: f64,
    /// CPU clock.
    pub cpu_ms: f64,
    /// GPU clock.
    pub gpu_ms: f64,
    /// EMC cap.
    pub emc_ms: f64,
}

impl SwitchTimes {
    /// The assumed defaults of the module docs.
    pub const DEFAULT: SwitchTimes = SwitchTimes {
        cores_ms: 30.0,
        cpu_ms: 0.5,
        gpu_ms: 0.1,
        emc_ms: 1.0,
    };

    /// The defaults with both fast knobs (GPU and EMC) settling in `ms`.
    pub fn fast(ms: f64) -> SwitchTimes {
        SwitchTimes {
            gpu_ms: ms,
            emc_ms: ms,
            ..SwitchTimes::DEFAULT
        }
    }

    /// The longest a running clock (CPU, GPU or EMC) takes to reach a new rate, ms.
    pub fn clocks_ms(&self) -> f64 {
        self.cpu_ms.max(self.gpu_ms).max(self.emc_ms)
    }

    /// The time of a switch from `a` to `b`.
    pub fn between(&self, a: &PinnedMode, b: &PinnedMode) -> f64 {
        [
            (a.cores != b.cores, self.cores_ms),
            (a.cpu_hz != b.cpu_hz, self.cpu_ms),
            (a.gpu_hz != b.gpu_hz, self.gpu_ms),
            (a.emc_hz != b.emc_hz, self.emc_ms),
        ]
        .into_iter()
        .filter(|c| c.0)
        .fold(0.0, |m, c| m.max(c.1))
    }
}
