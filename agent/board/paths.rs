//! The table of where things live on a board, relative to its root. The only place in
//! jpower that names absolute board paths; discovery searches these, it does not guess
//! per JetPack version.

/// Device-tree model string (NUL-terminated).
pub const DT_MODEL: &[&str] = &[
    "/proc/device-tree/model",
    "/sys/firmware/devicetree/base/model",
];
/// Device-tree compatible list (NUL-separated).
pub const DT_COMPATIBLE: &[&str] = &[
    "/proc/device-tree/compatible",
    "/sys/firmware/devicetree/base/compatible",
];
/// `# R36 (release), REVISION: 5.0, ...`.
pub const TEGRA_RELEASE: &str = "/etc/nv_tegra_release";
/// 24 = t186, 25 = t194, 33 = t210, 35 = t234.
pub const TEGRA_CHIP_ID: &str = "/sys/module/tegra_fuse/parameters/tegra_chip_id";
/// The nvpmodel configuration in use (a symlink to `/etc/nvpmodel/<board>.conf`).
pub const NVPMODEL_CONF: &str = "/etc/nvpmodel.conf";
/// What nvpmodel last applied (`pmode:0002`): what `nvpmodel -q` and jtop report, and
/// the mode nvpmodel applies at the next boot.
pub const NVPMODEL_STATUS: &str = "/var/lib/nvpmodel/status";

/// CPU topology.
pub const CPU_DIR: &str = "/sys/devices/system/cpu";
/// The CPUs that may exist, as a cpu list (`0-11`).
pub const CPU_POSSIBLE: &str = "/sys/devices/system/cpu/possible";
/// The cpufreq policies (`policyN`, one per CPU cluster).
pub const CPUFREQ_DIR: &str = "/sys/devices/system/cpu/cpufreq";

/// devfreq devices (the GPU is one of them).
pub const DEVFREQ_CLASS: &str = "/sys/class/devfreq";
/// nvgpu's alias directories, searched when the devfreq class is empty.
pub const GPU_ALIASES: &[&str] = &["/sys/devices/gpu.0", "/sys/devices/platform/gpu.0"];
/// Device-tree names of Jetson GPUs (`of_node/name`), as NVIDIA's scripts and jtop accept.
pub const GPU_OF_NAMES: &[&str] = &["gv11b", "gp10b", "ga10b", "gb10b", "gpu"];

/// In the GPU's device directory: rail gating (0/1) and runtime PM (`auto`/`on`).
pub const GPU_RAILGATE: &str = "railgate_enable";
/// In the GPU's device directory: runtime PM control (`auto`/`on`).
pub const GPU_POWER_CONTROL: &str = "power/control";

/// The pwm-fan's hwmon directories (L4T 35/36): `hwmonN/pwm1` is its PWM duty (0-255),
/// whatever `N` the kernel gave it ([`super::fan_pwm_path`]).
pub const FAN_HWMON_DIR: &str = "/sys/devices/platform/pwm-fan/hwmon";
/// L4T 32's pwm-fan PWM duty (0-255).
pub const FAN_PWM_L4T32: &str = "/sys/devices/pwm-fan/target_pwm";
/// PM QoS CPU latency: a process holding 0 written here keeps every CPU out of idle states
/// deeper than polling; the kernel drops the request when the file is closed.
pub const CPU_DMA_LATENCY: &str = "/dev/cpu_dma_latency";
/// Per-CPU time counters (`jpower watch`'s CPU load).
pub const PROC_STAT: &str = "/proc/stat";
/// RAM and swap (`jpower watch`).
pub const PROC_MEMINFO: &str = "/proc/meminfo";
/// Per-disk I/O counters (sectors read: the dataset's read throughput).
pub const PROC_DISKSTATS: &str = "/proc/diskstats";
/// Writing `1` drops the whole page cache (root only): `jpower characterize`'s fallback
/// where a filesystem ignores `posix_fadvise(DONTNEED)`.
pub const PROC_DROP_CACHES: &str = "/proc/sys/vm/drop_caches";
/// The fan's measured speed (rpm): L4T 32's pwm-fan; L4T 35/36 show it as an `rpm`
/// attribute of a hwmon device (the tachometer's), found under [`HWMON_CLASS`].
pub const FAN_RPM: &[&str] = &["/sys/devices/pwm-fan/rpm_measured"];
/// hwmon devices.
pub const HWMON_CLASS: &str = "/sys/class/hwmon";
/// The EMC's running rate (Hz): BPMP's debugfs clock ([`EMC_DEBUGFS`]) on t186/t194/t234,
/// else Tegra210's common-clock debugfs (root only): the clock itself where the kernel
/// shows it, then `override.emc`, which L4T 32's jetson_clocks reads as the current rate.
pub const EMC_RATE: &[&str] = &[
    "/sys/kernel/debug/bpmp/debug/clk/emc/rate",
    "/sys/kernel/debug/clk/emc/clk_rate",
    "/sys/kernel/debug/clk/override.emc/clk_rate",
];
/// actmon's average EMC activity (`mc_all`, the busy memory-clock rate in kHz): L4T 36's
/// debugfs `cactmon` first (root only), then L4T 32/35's sysfs.
pub const EMC_ACTIVITY: &[&str] = &[
    "/sys/kernel/debug/cactmon/mc_all",
    "/sys/kernel/actmon_avg_activity/mc_all",
];

/// The nvpmodel EMC cap: L4T 36 first, then L4T 32/35.
pub const EMC_CAPS: &[EmcCapFile] = &[
    EmcCapFile {
        path: "/sys/kernel/nvpmodel_clk_cap/emc",
        uncapped: Uncapped::TableMax,
    },
    EmcCapFile {
        path: "/sys/kernel/nvpmodel_emc_cap/emc_iso_cap",
        uncapped: Uncapped::Zero,
    },
];
/// Root-only debugfs EMC clock (t186/t194/t234): the running rate and its limits.
pub const EMC_DEBUGFS: &str = "/sys/kernel/debug/bpmp/debug/clk/emc";

/// What an EMC cap file holds when there is no cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uncapped {
    /// `0` means no cap (`emc_iso_cap`).
    Zero,
    /// The file shows the highest rate (`nvpmodel_clk_cap/emc`).
    TableMax,
}

/// One candidate EMC cap file.
#[derive(Debug, Clone, Copy)]
pub struct EmcCapFile {
    /// The cap file's path.
    pub path: &'static str,
    /// What the file holds for "no cap".
    pub uncapped: Uncapped,
}

/// i2c clients, scanned for INA3221 monitors (`name` = `ina3221` or `ina3221x`).
pub const I2C_DEVICES: &str = "/sys/bus/i2c/devices";
