//! What each simulated board is: its layout on one L4T release, its frequency tables,
//! its INA3221 rails and its nvpmodel presets, as data.
//!
//! Layouts follow `../shared/research/jetson-sysfs.md` and the reference trees in
//! `../shared/boards/` (Orin AGX r36, Xavier AGX r32 and Nano r32 copy those trees'
//! topology); the Orin AGX r35 tables are the JetPack 5.0.1 lists of
//! `../shared/calibration/jetson_freq_tables.json` (12 x 29 x 13 x 4 = 18,096 modes, as in
//! PowerTrain). Values marked *illustrative* below are plausible, not confirmed.

use super::power::Silicon;

/// The L4T major release, which decides the kernel's write semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Release {
    /// Kernel 4.9: a min above the current max (or a max below the min) is `EINVAL`.
    R32,
    /// Kernel 5.10: min/max are PM-QoS requests; the effective min is clamped to the max.
    R35,
    /// Kernel 5.15 (out-of-tree NVIDIA modules): same semantics as R35, new paths.
    R36,
}

impl Release {
    /// `r32`, `r35`, `r36`.
    pub fn tag(self) -> &'static str {
        match self {
            Release::R32 => "r32",
            Release::R35 => "r35",
            Release::R36 => "r36",
        }
    }

    /// Whether min/max writes are QoS requests that clamp instead of failing.
    pub fn clamps(self) -> bool {
        self >= Release::R35
    }
}

/// Which driver exposes the INA3221 monitors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InaDriver {
    /// NVIDIA's L4T 32 IIO driver `ina3221x` (`in_power*_input`, `rail_name_*`).
    Iio,
    /// Mainline hwmon `ina3221` (`inN_label`, `inN_input` mV, `currN_input` mA).
    Hwmon,
}

/// A power domain of the physics model (see [`super::power::DomainPower`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dom {
    /// CPU cluster(s).
    Cpu,
    /// GPU.
    Gpu,
    /// Computer-vision accelerators (DLA, PVA).
    Cv,
    /// SoC fabric, memory controller and always-on logic.
    Soc,
    /// DRAM (VDDQ / VDD2).
    Dram,
    /// Carrier board / system 5 V rail (outside the module total).
    Carrier,
}

/// One INA3221 channel of a simulated board.
#[derive(Debug, Clone, Copy)]
pub struct RailSpec {
    /// The label the driver shows (`VDD_GPU_SOC`, `POM_5V_IN`, `NC`).
    pub label: &'static str,
    /// Domains whose power flows through this rail; empty for `NC` channels.
    pub domains: &'static [Dom],
    /// Bus voltage in mV.
    pub mv: u32,
    /// An input rail: it carries the module's whole power through a regulator.
    pub input: bool,
}

/// One INA3221 chip.
#[derive(Debug, Clone, Copy)]
pub struct InaSpec {
    /// The i2c client's directory (`/sys/devices/.../i2c-1/1-0040`).
    pub dir: &'static str,
    /// `hwmonN` or `iio:deviceN` index under it.
    pub index: u32,
    /// Shunt resistance, micro-ohms.
    pub shunt_uohm: u32,
    /// The three channels.
    pub channels: [RailSpec; 3],
}

/// The GPU's nvgpu and devfreq layout.
#[derive(Debug, Clone, Copy)]
pub struct GpuSpec {
    /// The real device directory.
    pub dir: &'static str,
    /// The devfreq device name (`17000000.ga10b`).
    pub devfreq: &'static str,
    /// Alias links (`link`, relative `target`), as nvgpu creates them.
    pub aliases: &'static [(&'static str, &'static str)],
    /// Whether nvgpu adds the `devfreq_dev` link (L4T 35 and later).
    pub devfreq_dev: bool,
    /// Device-tree node (`/sys/firmware/devicetree/base/...`), its `name` and `compatible`.
    pub of_node: &'static str,
    /// The device-tree node's `name` (`gpu`, `gv11b`).
    pub of_name: &'static str,
    /// The device-tree node's `compatible` (`nvidia,ga10b`).
    pub of_compatible: &'static str,
    /// Available frequencies, Hz.
    pub table_hz: &'static [u64],
}

/// The nvpmodel EMC cap.
#[derive(Debug, Clone, Copy)]
pub struct EmcSpec {
    /// The cap file.
    pub cap_file: &'static str,
    /// What the cap file reads when no cap is set (`0`, or the maximum rate on L4T 36).
    pub uncapped: u64,
    /// The EMC rates this board runs at, Hz.
    pub table_hz: &'static [u64],
}

/// A preset as an nvpmodel file states it (`-1` = maximum, `0` = minimum / no cap).
#[derive(Debug, Clone, Copy)]
pub struct PresetSpec {
    /// The `POWER_MODEL` id.
    pub id: u32,
    /// The `POWER_MODEL` name (`MAXN`, `MODE_30W`).
    pub name: &'static str,
    /// Online cores, lowest-numbered first.
    pub cores: usize,
    /// CPU `MIN_FREQ` of each cluster with an online core, kHz.
    pub cpu_min_khz: i64,
    /// CPU `MAX_FREQ` of each cluster with an online core, kHz.
    pub cpu_max_khz: i64,
    /// GPU `MIN_FREQ`, Hz.
    pub gpu_min_hz: i64,
    /// GPU `MAX_FREQ`, Hz.
    pub gpu_max_hz: i64,
    /// EMC `MAX_FREQ`: the cap, Hz.
    pub emc_max_hz: i64,
    /// TPC power-gating mask, on boards whose nvpmodel sets one.
    pub tpc_pg_mask: Option<u32>,
}

/// A whole simulated board.
#[derive(Debug, Clone, Copy)]
pub struct BoardSpec {
    /// `orin-agx`, `xavier-agx`, ...
    pub name: &'static str,
    /// The L4T release it runs.
    pub release: Release,
    /// `REVISION` in `/etc/nv_tegra_release`.
    pub revision: &'static str,
    /// `BOARD` in `/etc/nv_tegra_release`.
    pub release_board: &'static str,
    /// Device-tree `model` and `compatible` entries.
    pub model: &'static str,
    /// Device-tree `compatible` entries.
    pub compatible: &'static [&'static str],
    /// Cores per cluster, in CPU order (`[4, 4, 4]` = policy0, policy4, policy8).
    pub clusters: &'static [usize],
    /// Available CPU frequencies, kHz.
    pub cpu_khz: &'static [u64],
    /// The GPU's nvgpu and devfreq layout.
    pub gpu: GpuSpec,
    /// The nvpmodel EMC cap.
    pub emc: EmcSpec,
    /// Which driver exposes the INA3221 monitors.
    pub ina_driver: InaDriver,
    /// The INA3221 chips.
    pub ina: &'static [InaSpec],
    /// Coefficients of the physics model.
    pub silicon: Silicon,
    /// The nvpmodel presets.
    pub presets: &'static [PresetSpec],
    /// `PM_CONFIG DEFAULT`.
    pub default_preset: u32,
    /// The module's DRAM, GiB (`/proc/meminfo` shows it less the carve-outs).
    pub ram_gib: u32,
}

impl BoardSpec {
    /// `orin-agx@r35`.
    pub fn id(&self) -> String {
        format!("{}@{}", self.name, self.release.tag())
    }

    /// Number of CPUs.
    pub fn cpus(&self) -> usize {
        self.clusters.iter().sum()
    }

    /// The first CPU of each cluster (the `policyN` names).
    pub fn cluster_starts(&self) -> Vec<usize> {
        self.clusters
            .iter()
            .scan(0, |start, n| {
                let s = *start;
                *start += n;
                Some(s)
            })
            .collect()
    }

    /// The cluster a CPU belongs to.
    pub fn cluster_of(&self, cpu: usize) -> usize {
        let mut end = 0;
        for (i, n) in self.clusters.iter().enumerate() {
            end += n;
            if cpu < end {
                return i;
            }
        }
        self.clusters.len() - 1
    }

    /// The bus (`1-0040`) name of an INA chip.
    pub fn ina_client(ina: &InaSpec) -> &'static str {
        ina.dir.rsplit('/').next().unwrap_or(ina.dir)
    }
}

/// Zones of the simulated thermal model: name and offset from the base temperature (m°C).
pub const ZONES: [(&str, i32); 4] = [
    ("cpu-thermal", 0),
    ("gpu-thermal", 2000),
    ("soc0-thermal", -1000),
    ("tj-thermal", 3000),
];

/// Every simulated board: the first of each name is its default release.
pub const BOARDS: &[BoardSpec] = &[
    ORIN_AGX_R35,
    ORIN_AGX_R36,
    XAVIER_AGX,
    XAVIER_NX,
    NANO,
    ORIN_NANO,
];

/// Finds a board by `name` or `name@release` (`orin-agx`, `orin-agx@r36`).
pub fn find(id: &str) -> Option<&'static BoardSpec> {
    let (name, release) = match id.split_once('@') {
        Some((n, r)) => (n, Some(r)),
        None => (id, None),
    };
    BOARDS
        .iter()
        .find(|b| b.name == name && release.is_none_or(|r| b.release.tag() == r))
}

/// `orin-agx@r35, orin-agx@r36, ...`, for error messages.
pub fn names() -> String {
    BOARDS.iter().map(|b| b.id()).collect::<Vec<_>>().join(", ")
}

const fn rail(label: &'static str, domains: &'static [Dom], mv: u32) -> RailSpec {
    RailSpec {
        label,
        domains,
        mv,
        input: false,
    }
}

const fn input_rail(label: &'static str, mv: u32) -> RailSpec {
    RailSpec {
        label,
        domains: &[Dom::Cpu, Dom::Gpu, Dom::Cv, Dom::Soc, Dom::Dram],
        mv,
        input: true,
    }
}

const NC: RailSpec = rail("NC", &[], 0);

#[allow(clippy::too_many_arguments)]
const fn preset(
    id: u32,
    name: &'static str,
    cores: usize,
    cpu: (i64, i64),
    gpu: (i64, i64),
    emc_max_hz: i64,
    tpc_pg_mask: Option<u32>,
) -> PresetSpec {
    PresetSpec {
        id,
        name,
        cores,
        cpu_min_khz: cpu.0,
        cpu_max_khz: cpu.1,
        gpu_min_hz: gpu.0,
        gpu_max_hz: gpu.1,
        emc_max_hz,
        tpc_pg_mask,
    }
}

/// t234/t194 CPU table: 115.2 MHz plus 76.8 MHz steps.
const T234_CPU_KHZ: &[u64] = &[
    115200, 192000, 268800, 345600, 422400, 499200, 576000, 652800, 729600, 806400, 883200, 960000,
    1036800, 1113600, 1190400, 1267200, 1344000, 1420800, 1497600, 1574400, 1651200, 1728000,
    1804800, 1881600, 1958400, 2035200, 2112000, 2188800, 2201600,
];

const ORIN_AGX_PRESETS: &[PresetSpec] = &[
    preset(0, "MAXN", 12, (729600, -1), (0, -1), 0, Some(0)),
    preset(
        1,
        "MODE_15W",
        4,
        (729600, 1113600),
        (0, 408000000),
        2133000000,
        Some(248),
    ),
    preset(
        2,
        "MODE_30W",
        8,
        (729600, 1728000),
        (0, 612000000),
        0,
        Some(240),
    ),
    preset(
        3,
        "MODE_50W",
        12,
        (729600, 1497600),
        (0, 816000000),
        0,
        Some(0),
    ),
];

const ORIN_AGX_EMC_HZ: &[u64] = &[204000000, 665600000, 2133000000, 3199000000];

/// Orin AGX rails: 1-0040 carries the module's GPU+SoC and CPU+CV rails and the carrier
/// board's 5 V input; 1-0041 the DRAM rail between two unconnected channels.
const fn orin_agx_ina(a40: &'static str, a41: &'static str) -> [InaSpec; 2] {
    [
        InaSpec {
            dir: a40,
            index: 3,
            shunt_uohm: 2000,
            channels: [
                rail("VDD_GPU_SOC", &[Dom::Gpu, Dom::Soc], 19864),
                rail("VDD_CPU_CV", &[Dom::Cpu, Dom::Cv], 19864),
                rail("VIN_SYS_5V0", &[Dom::Carrier], 5008),
            ],
        },
        InaSpec {
            dir: a41,
            index: 2,
            shunt_uohm: 2000,
            channels: [NC, rail("VDDQ_VDD2_1V8AO", &[Dom::Dram], 5008), NC],
        },
    ]
}

const ORIN_AGX_R35_INA: [InaSpec; 2] = orin_agx_ina(
    "/sys/devices/platform/c240000.i2c/i2c-1/1-0040",
    "/sys/devices/platform/c240000.i2c/i2c-1/1-0041",
);
const ORIN_AGX_R36_INA: [InaSpec; 2] = orin_agx_ina(
    "/sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040",
    "/sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0041",
);

/// Jetson AGX Orin on L4T 35 with the JetPack 5.0.1 tables (the PowerTrain setup).
pub const ORIN_AGX_R35: BoardSpec = BoardSpec {
    name: "orin-agx",
    release: Release::R35,
    revision: "1.0",
    release_board: "t186ref",
    model: "NVIDIA Jetson AGX Orin Developer Kit",
    compatible: &[
        "nvidia,p3737-0000+p3701-0000",
        "nvidia,p3701-0000",
        "nvidia,tegra234",
    ],
    clusters: &[4, 4, 4],
    cpu_khz: T234_CPU_KHZ,
    gpu: GpuSpec {
        dir: "/sys/devices/platform/17000000.ga10b",
        devfreq: "17000000.ga10b",
        aliases: &[
            ("/sys/devices/17000000.ga10b", "platform/17000000.ga10b"),
            ("/sys/devices/gpu.0", "platform/17000000.ga10b"),
            ("/sys/devices/platform/gpu.0", "17000000.ga10b"),
        ],
        devfreq_dev: true,
        of_node: "/sys/firmware/devicetree/base/gpu@17000000",
        of_name: "gpu",
        of_compatible: "nvidia,ga10b",
        table_hz: &[
            114750000, 216750000, 318750000, 420750000, 522750000, 624750000, 726750000, 828750000,
            930750000, 1032750000, 1134750000, 1236750000, 1300500000,
        ],
    },
    emc: EmcSpec {
        cap_file: "/sys/kernel/nvpmodel_emc_cap/emc_iso_cap",
        uncapped: 0,
        table_hz: ORIN_AGX_EMC_HZ,
    },
    ina_driver: InaDriver::Hwmon,
    ina: &ORIN_AGX_R35_INA,
    silicon: Silicon::OrinAgx,
    presets: ORIN_AGX_PRESETS,
    default_preset: 2,
    ram_gib: 32,
};

/// Jetson AGX Orin on L4T 36, laid out as `../shared/boards/orin-agx-r36`.
pub const ORIN_AGX_R36: BoardSpec = BoardSpec {
    release: Release::R36,
    revision: "5.0",
    release_board: "generic",
    gpu: GpuSpec {
        dir: "/sys/devices/platform/bus@0/17000000.gpu",
        devfreq: "17000000.gpu",
        aliases: &[
            ("/sys/devices/platform/17000000.gpu", "bus@0/17000000.gpu"),
            ("/sys/devices/platform/gpu.0", "bus@0/17000000.gpu"),
            ("/sys/devices/platform/bus@0/gpu.0", "17000000.gpu"),
        ],
        devfreq_dev: true,
        of_node: "/sys/firmware/devicetree/base/bus@0/gpu@17000000",
        of_name: "gpu",
        of_compatible: "nvidia,ga10b",
        table_hz: &[
            306000000, 408000000, 510000000, 612000000, 714000000, 816000000, 918000000,
            1020000000, 1122000000, 1224000000, 1300500000,
        ],
    },
    emc: EmcSpec {
        cap_file: "/sys/kernel/nvpmodel_clk_cap/emc",
        uncapped: 3199000000,
        table_hz: ORIN_AGX_EMC_HZ,
    },
    ina: &ORIN_AGX_R36_INA,
    ..ORIN_AGX_R35
};

const T194_GPU: GpuSpec = GpuSpec {
    dir: "/sys/devices/17000000.gv11b",
    devfreq: "17000000.gv11b",
    aliases: &[("/sys/devices/gpu.0", "17000000.gv11b")],
    devfreq_dev: false,
    of_node: "/sys/firmware/devicetree/base/gv11b@17000000",
    of_name: "gv11b",
    of_compatible: "nvidia,gv11b",
    table_hz: &[
        114750000, 216750000, 318750000, 420750000, 522750000, 624750000, 675750000, 828750000,
        905250000, 1032750000, 1198500000, 1236750000, 1338750000, 1377000000,
    ],
};

/// Jetson AGX Xavier on L4T 32, laid out as `../shared/boards/xavier-agx-r32`.
pub const XAVIER_AGX: BoardSpec = BoardSpec {
    name: "xavier-agx",
    release: Release::R32,
    revision: "7.1",
    release_board: "t186ref",
    model: "Jetson-AGX",
    compatible: &[
        "nvidia,p2972-0000",
        "nvidia,jetson-xavier",
        "nvidia,tegra194",
    ],
    clusters: &[2, 2, 2, 2],
    cpu_khz: &[
        115200, 192000, 268800, 345600, 422400, 499200, 576000, 652800, 729600, 806400, 883200,
        960000, 1036800, 1113600, 1190400, 1267200, 1344000, 1420800, 1497600, 1574400, 1651200,
        1728000, 1804800, 1881600, 1958400, 2035200, 2112000, 2188800, 2265600,
    ],
    gpu: T194_GPU,
    emc: EmcSpec {
        cap_file: "/sys/kernel/nvpmodel_emc_cap/emc_iso_cap",
        uncapped: 0,
        table_hz: &[
            204000000, 408000000, 665600000, 800000000, 1065600000, 1331200000, 1600000000,
            1866000000, 2133000000,
        ],
    },
    ina_driver: InaDriver::Iio,
    ina: &[
        InaSpec {
            dir: "/sys/devices/c240000.i2c/i2c-1/1-0040",
            index: 0,
            shunt_uohm: 5000,
            channels: [
                rail("GPU", &[Dom::Gpu], 19072),
                rail("CPU", &[Dom::Cpu], 19072),
                rail("SOC", &[Dom::Soc], 19072),
            ],
        },
        InaSpec {
            dir: "/sys/devices/c240000.i2c/i2c-1/1-0041",
            index: 1,
            shunt_uohm: 5000,
            channels: [
                rail("CV", &[Dom::Cv], 19072),
                rail("VDDRQ", &[Dom::Dram], 19072),
                rail("SYS5V", &[Dom::Carrier], 5024),
            ],
        },
    ],
    silicon: Silicon::XavierAgx,
    presets: &[
        preset(0, "MAXN", 8, (1200000, -1), (0, -1), 0, Some(0)),
        preset(
            1,
            "MODE_10W",
            2,
            (1200000, 1200000),
            (0, 520000000),
            1065600000,
            Some(5),
        ),
        preset(
            2,
            "MODE_15W",
            4,
            (1200000, 1200000),
            (0, 670000000),
            1331200000,
            Some(0),
        ),
        preset(
            3,
            "MODE_30W_ALL",
            8,
            (1200000, 1200000),
            (0, 900000000),
            1600000000,
            Some(0),
        ),
    ],
    default_preset: 2,
    ram_gib: 32,
};

/// Jetson Xavier NX on L4T 32 (rail labels and i2c placement inferred; see the research notes).
pub const XAVIER_NX: BoardSpec = BoardSpec {
    name: "xavier-nx",
    release: Release::R32,
    revision: "7.1",
    release_board: "t186ref",
    model: "NVIDIA Jetson Xavier NX Developer Kit",
    compatible: &[
        "nvidia,p3509-0000+p3668-0000",
        "nvidia,p3668-0000",
        "nvidia,tegra194",
    ],
    clusters: &[2, 2, 2],
    cpu_khz: &[
        115200, 192000, 268800, 345600, 422400, 499200, 576000, 652800, 729600, 806400, 883200,
        960000, 1036800, 1113600, 1190400, 1267200, 1344000, 1420800, 1497600, 1574400, 1651200,
        1728000, 1804800, 1881600, 1907200,
    ],
    gpu: GpuSpec {
        table_hz: &[
            114750000, 204000000, 306000000, 408000000, 510000000, 599250000, 701250000, 752250000,
            803250000, 854250000, 905250000, 956250000, 1007250000, 1058250000, 1109250000,
        ],
        ..T194_GPU
    },
    emc: EmcSpec {
        cap_file: "/sys/kernel/nvpmodel_emc_cap/emc_iso_cap",
        uncapped: 0,
        // illustrative: the t194 rates up to the NX's 1600 MHz maximum
        table_hz: &[
            204000000, 408000000, 665600000, 800000000, 1065600000, 1331200000, 1600000000,
        ],
    },
    ina_driver: InaDriver::Iio,
    ina: &[InaSpec {
        dir: "/sys/devices/c250000.i2c/i2c-7/7-0040",
        index: 0,
        shunt_uohm: 5000,
        channels: [
            input_rail("VDD_IN", 5000),
            rail("VDD_CPU_GPU_CV", &[Dom::Cpu, Dom::Gpu, Dom::Cv], 5000),
            rail("VDD_SOC", &[Dom::Soc], 5000),
        ],
    }],
    silicon: Silicon::XavierNx,
    presets: &[
        preset(
            0,
            "MODE_15W_2CORE",
            2,
            (1190400, 1907200),
            (0, 1109250000),
            1600000000,
            Some(0),
        ),
        preset(
            1,
            "MODE_15W_4CORE",
            4,
            (1190400, 1497600),
            (0, 1109250000),
            1600000000,
            Some(0),
        ),
        preset(
            2,
            "MODE_15W_6CORE",
            6,
            (1190400, 1420800),
            (0, 1109250000),
            1600000000,
            Some(0),
        ),
        preset(
            3,
            "MODE_10W_2CORE",
            2,
            (1190400, 1497600),
            (0, 803250000),
            1600000000,
            Some(0),
        ),
    ],
    default_preset: 2,
    ram_gib: 8,
};

/// Jetson Nano on L4T 32, laid out as `../shared/boards/nano-r32`.
pub const NANO: BoardSpec = BoardSpec {
    name: "nano",
    release: Release::R32,
    revision: "7.1",
    release_board: "t210ref",
    model: "NVIDIA Jetson Nano Developer Kit",
    compatible: &[
        "nvidia,p3449-0000-b00+p3448-0000-b00",
        "nvidia,jetson-nano",
        "nvidia,tegra210",
    ],
    clusters: &[4],
    cpu_khz: &[
        102000, 204000, 307200, 403200, 518400, 614400, 710400, 825600, 921600, 1036800, 1132800,
        1224000, 1326000, 1428000, 1479000,
    ],
    gpu: GpuSpec {
        dir: "/sys/devices/57000000.gpu",
        devfreq: "57000000.gpu",
        aliases: &[("/sys/devices/gpu.0", "57000000.gpu")],
        devfreq_dev: false,
        of_node: "/sys/firmware/devicetree/base/gpu@57000000",
        of_name: "gpu",
        of_compatible: "nvidia,tegra210-gm20b",
        table_hz: &[
            76800000, 153600000, 230400000, 307200000, 384000000, 460800000, 537600000, 614400000,
            691200000, 768000000, 844800000, 921600000,
        ],
    },
    emc: EmcSpec {
        cap_file: "/sys/kernel/nvpmodel_emc_cap/emc_iso_cap",
        uncapped: 0,
        // illustrative: t210 LPDDR4 rates up to 1600 MHz
        table_hz: &[
            204000000, 408000000, 665600000, 800000000, 1065600000, 1331200000, 1600000000,
        ],
    },
    ina_driver: InaDriver::Iio,
    ina: &[InaSpec {
        dir: "/sys/devices/50000000.host1x/546c0000.i2c/i2c-6/6-0040",
        index: 0,
        shunt_uohm: 5000,
        channels: [
            input_rail("POM_5V_IN", 5000),
            rail("POM_5V_GPU", &[Dom::Gpu], 5000),
            rail("POM_5V_CPU", &[Dom::Cpu], 5000),
        ],
    }],
    silicon: Silicon::Nano,
    presets: &[
        preset(0, "MAXN", 4, (0, -1), (0, -1), 0, None),
        preset(1, "5W", 2, (0, 918000), (0, 640000000), 1600000000, None),
    ],
    default_preset: 0,
    ram_gib: 4,
};

/// Jetson Orin Nano 8 GB developer kit on L4T 36 (tables partly illustrative: PowerTrain
/// counts 20 CPU x 5 GPU x 3 EMC frequencies).
pub const ORIN_NANO: BoardSpec = BoardSpec {
    name: "orin-nano",
    release: Release::R36,
    revision: "4.0",
    release_board: "generic",
    model: "NVIDIA Jetson Orin Nano Developer Kit",
    compatible: &[
        "nvidia,p3768-0000+p3767-0005",
        "nvidia,p3767-0005",
        "nvidia,tegra234",
    ],
    clusters: &[4, 2],
    cpu_khz: &[
        115200, 192000, 268800, 345600, 422400, 499200, 576000, 652800, 729600, 806400, 883200,
        960000, 1036800, 1113600, 1190400, 1267200, 1344000, 1420800, 1497600, 1510400,
    ],
    gpu: GpuSpec {
        table_hz: &[204000000, 306000000, 408000000, 510000000, 624750000],
        ..ORIN_AGX_R36.gpu
    },
    emc: EmcSpec {
        cap_file: "/sys/kernel/nvpmodel_clk_cap/emc",
        uncapped: 2133000000,
        table_hz: &[204000000, 665600000, 2133000000],
    },
    ina_driver: InaDriver::Hwmon,
    ina: &[InaSpec {
        dir: "/sys/devices/platform/bus@0/c240000.i2c/i2c-1/1-0040",
        index: 1,
        shunt_uohm: 5000,
        channels: [
            input_rail("VDD_IN", 5104),
            rail("VDD_CPU_GPU_CV", &[Dom::Cpu, Dom::Gpu, Dom::Cv], 5104),
            rail("VDD_SOC", &[Dom::Soc], 5104),
        ],
    }],
    silicon: Silicon::OrinNano,
    presets: &[
        preset(0, "15W", 6, (729600, -1), (0, -1), 0, None),
        // illustrative
        preset(
            1,
            "7W",
            4,
            (729600, 1190400),
            (0, 408000000),
            2133000000,
            None,
        ),
    ],
    default_preset: 0,
    ram_gib: 8,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orin_agx_r35_has_the_powertrain_mode_space() {
        let b = find("orin-agx").unwrap();
        assert_eq!(b.release, Release::R35);
        let n = b.cpus() * b.cpu_khz.len() * b.gpu.table_hz.len() * b.emc.table_hz.len();
        assert_eq!(n, 18_096);
    }

    #[test]
    fn every_board_is_consistent() {
        for b in BOARDS {
            assert!(find(&b.id()).is_some());
            for t in [b.cpu_khz, b.gpu.table_hz, b.emc.table_hz] {
                assert!(
                    t.windows(2).all(|w| w[0] < w[1]),
                    "{} table not ascending",
                    b.id()
                );
            }
            assert!(b.presets.iter().any(|p| p.id == b.default_preset));
            // The tree boots with every CPU online: its boot preset must say so.
            let boot = crate::sim::tree::boot_preset(b);
            assert_eq!(boot.cores, b.cpus(), "{} boots in {}", b.id(), boot.name);
            assert!(b
                .presets
                .iter()
                .all(|p| p.cores >= 1 && p.cores <= b.cpus()));
        }
        assert!(find("orin-agx@r99").is_none());
        assert_eq!(ORIN_AGX_R35.cluster_of(9), 2);
        assert_eq!(ORIN_AGX_R35.cluster_starts(), [0, 4, 8]);
    }
}
