//! Board discovery: what this Jetson is and which knobs and rails it has, read from its
//! files under a [`Root`], never from a table of JetPack versions.
//!
//! - identity: device-tree `model` and `compatible`, `/etc/nv_tegra_release`, SoC;
//! - CPU: cores with their `online` files, clusters from `cpufreq/policyN`
//!   (`related_cpus`), each cluster's table and min/max;
//! - GPU: whichever devfreq device is the GPU on this release (`17000000.ga10b`,
//!   `17000000.gpu`, `17000000.gv11b`, `57000000.gpu`, ...), found through
//!   `/sys/class/devfreq/*/device/of_node`, as NVIDIA's scripts do;
//! - EMC: the nvpmodel cap file, and the rates from the SoC's table (debugfs limits it
//!   where readable), saying which;
//! - rails: see [`rails`].
//!
//! Only links that name a device are followed (`cpuN/cpufreq`, `device`, `of_node`), one
//! hop each, so the cycles real sysfs has (`device` links) cannot loop discovery. What is
//! missing is a warning; only a tree with no Tegra SoC at all is an error.

pub mod in_root;
pub mod ina3221;
pub mod nvpmodel;
pub mod paths;
pub mod rails;
pub mod sysfs;

use crate::board::sysfs::{parse_cpu_list, Attr, Root, SysfsError};
use crate::support::units::FreqUnit;
use paths::Uncapped;
use rails::{InaChip, Rail, Totals};
use serde::Serialize;
use std::path::PathBuf;

/// Most knobs one board may have (the controller's fixed-size buffers).
pub const MAX_KNOBS: usize = 64;

/// Values of every knob of a board, by knob index, in the files' units.
pub type Values = heapless::Vec<u64, MAX_KNOBS>;

/// Discovery errors.
#[derive(Debug, thiserror::Error)]
pub enum BoardError {
    /// Nothing under the root says Tegra.
    #[error("{} is not a Jetson: no nvidia,tegra* SoC in its device tree or tegra_fuse; use --sim BOARD for a simulated board or --root DIR for a board's tree", root.display())]
    NotJetson {
        /// The root that was searched.
        root: PathBuf,
    },
    /// More knobs than the controller holds.
    #[error("board has {0} knobs, more than the {MAX_KNOBS} jpower supports")]
    TooManyKnobs(usize),
}

/// The Tegra SoC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Soc {
    /// Tegra X1 (Jetson Nano, TX1).
    T210,
    /// Tegra X2, Parker (Jetson TX2).
    T186,
    /// Xavier (Jetson AGX Xavier, Xavier NX).
    T194,
    /// Orin (Jetson AGX Orin, Orin NX, Orin Nano).
    T234,
}

/// Substrings of `compatible`, chip ids of `tegra_fuse`, and each SoC's EMC rates (Hz).
const SOCS: &[(Soc, &str, u32, &[u64])] = &[
    (
        Soc::T234,
        "tegra234",
        35,
        &[204000000, 665600000, 2133000000, 3199000000],
    ),
    (
        Soc::T194,
        "tegra194",
        25,
        &[
            204000000, 408000000, 665600000, 800000000, 1065600000, 1331200000, 1600000000,
            1866000000, 2133000000,
        ],
    ),
    (
        Soc::T186,
        "tegra186",
        24,
        &[
            204000000, 408000000, 665600000, 800000000, 1062400000, 1331200000, 1600000000,
            1866000000,
        ],
    ),
    (
        Soc::T210,
        "tegra210",
        33,
        &[
            204000000, 408000000, 665600000, 800000000, 1065600000, 1331200000, 1600000000,
        ],
    ),
];

/// Modules whose EMC tops out below their SoC's table (when debugfs cannot say).
const EMC_MODULE_MAX: &[(&str, u64)] = &[
    ("p3767-0003", 2133000000),
    ("p3767-0004", 2133000000),
    ("p3767-0005", 2133000000),
    ("p3668", 1600000000),
    ("p3448", 1600000000),
];

/// What the board is.
#[derive(Debug, Clone, Serialize)]
pub struct Identity {
    /// Device-tree model (`NVIDIA Jetson AGX Orin Developer Kit`).
    pub model: String,
    /// Device-tree compatible entries.
    pub compatible: Vec<String>,
    /// The module part number (`p3701-0000`), if the compatible list names one.
    pub module: Option<String>,
    /// The SoC, from `compatible` or the `tegra_fuse` chip id.
    pub soc: Soc,
    /// L4T major release (`36`) and revision (`5.0`), from `/etc/nv_tegra_release`.
    pub l4t_major: Option<u32>,
    /// L4T revision (`5.0`), from `/etc/nv_tegra_release`.
    pub l4t_revision: Option<String>,
}

/// What a knob controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "index")]
pub enum KnobKind {
    /// `cpuN/online` of CPU N.
    CpuOnline(usize),
    /// `scaling_min_freq` / `scaling_max_freq` of cluster N.
    CpuMin(usize),
    /// `scaling_max_freq` of cluster N.
    CpuMax(usize),
    /// devfreq `min_freq` / `max_freq` of the GPU.
    GpuMin,
    /// devfreq `max_freq` of the GPU.
    GpuMax,
    /// The nvpmodel EMC cap.
    EmcCap,
    /// INA3221 hwmon `samples` (averaging) and `update_interval` of chip N.
    InaSamples(usize),
    /// INA3221 hwmon `update_interval` of chip N.
    InaUpdateInterval(usize),
    /// The GPU's `railgate_enable` (0/1) and runtime PM `power/control` (`auto`/`on`):
    /// the measurement lock keeps the GPU powered, as `jetson_clocks` does.
    GpuRailgate,
    /// The GPU's runtime PM `power/control` (`auto`/`on`).
    GpuPowerControl,
    /// The fan's PWM duty, 0-255 (the board's fan daemon may move it: not watched).
    Fan,
}

impl KnobKind {
    /// Whether a change by someone else is worth reporting: every knob but the fan, which
    /// the board's own fan control moves all the time.
    pub fn watched(self) -> bool {
        self != KnobKind::Fan
    }

    /// Whether it is a setting rather than part of a power mode (no ordering constraint
    /// with other knobs).
    pub fn is_setting(self) -> bool {
        matches!(
            self,
            KnobKind::InaSamples(_)
                | KnobKind::InaUpdateInterval(_)
                | KnobKind::GpuRailgate
                | KnobKind::GpuPowerControl
                | KnobKind::Fan
        )
    }
}

/// The words of `power/control`, in value order.
pub const POWER_CONTROL: &[&str] = &["auto", "on"];

/// A writable attribute jpower may touch, opened once.
#[derive(Debug)]
pub struct Knob {
    /// What it controls.
    pub kind: KnobKind,
    /// The path on the board (`/sys/...`), as saved in state files.
    pub path: PathBuf,
    /// The unit of its values (`None` for 0/1 knobs).
    pub unit: Option<FreqUnit>,
    /// Whether it could be opened for writing.
    pub writable: bool,
    /// For attributes holding a word, the words its values index (`None`: a number).
    pub words: Option<&'static [&'static str]>,
    /// The opened attribute.
    pub attr: Attr,
}

impl Knob {
    /// Reads the value: the number, or the index of the word the file holds.
    pub fn read(&self) -> Result<u64, SysfsError> {
        match self.words {
            Some(words) => self.attr.read_word(words),
            None => self.attr.read_u64(),
        }
    }

    /// Writes a value (the word it indexes, for word attributes) in one `write`.
    pub fn write(&self, value: u64) -> Result<(), SysfsError> {
        match self.words {
            Some(words) => self.attr.write_word(words, value),
            None => self.attr.write_u64(value),
        }
    }
}

/// A CPU cluster (one cpufreq policy).
#[derive(Debug)]
pub struct Cluster {
    /// `policyN`'s N, the cluster's first CPU.
    pub policy: usize,
    /// Its CPUs.
    pub cpus: Vec<usize>,
    /// Available frequencies, Hz, ascending.
    pub table_hz: Vec<u64>,
    /// Knob indices of its min and max.
    pub min: usize,
    /// Knob index of its max.
    pub max: usize,
    /// `scaling_cur_freq`.
    pub cur: Attr,
}

/// The GPU's devfreq device.
#[derive(Debug)]
pub struct Gpu {
    /// The nvgpu device directory and the devfreq directory (board paths, links resolved).
    pub dir: PathBuf,
    /// The devfreq directory (a board path, links resolved).
    pub devfreq: PathBuf,
    /// Available frequencies, Hz, ascending (`available_frequencies`).
    pub table_hz: Vec<u64>,
    /// Knob index of its `min_freq`.
    pub min: usize,
    /// Knob index of its `max_freq`.
    pub max: usize,
    /// `cur_freq`, the running frequency.
    pub cur: Attr,
    /// The devfreq governor at discovery (`nvhost_podgov`, ...; empty if unreadable).
    pub governor: String,
}

/// Where the EMC rates came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EmcTableSource {
    /// The SoC's table, limited by the debugfs `max_rate` jpower could read.
    SocTableDebugfsLimited,
    /// The SoC's table (debugfs not readable), limited by the module's known maximum.
    SocTable,
}

/// The memory controller's cap.
#[derive(Debug)]
pub struct Emc {
    /// Knob index of the cap file.
    pub cap: usize,
    /// The rates the cap may take, Hz, ascending.
    pub table_hz: Vec<u64>,
    /// Where those rates came from.
    pub table_source: EmcTableSource,
    /// What the cap file holds for "no cap".
    pub uncapped: Uncapped,
    /// The debugfs running rate, where readable (root).
    pub rate: Option<Attr>,
}

impl Emc {
    /// The cap file value meaning "no cap".
    pub fn uncapped_raw(&self) -> u64 {
        match self.uncapped {
            Uncapped::Zero => 0,
            Uncapped::TableMax => self.table_hz.last().copied().unwrap_or(0),
        }
    }
}

/// A discovered board.
#[derive(Debug)]
pub struct Board {
    /// Where the board's files are.
    pub root: Root,
    /// What the board is.
    pub identity: Identity,
    /// CPU ids and the knob index of each one's `online` file (cpu0 may have none).
    pub cpus: Vec<(usize, Option<usize>)>,
    /// Its CPU clusters, one per cpufreq policy.
    pub clusters: Vec<Cluster>,
    /// The GPU's devfreq device, if found.
    pub gpu: Option<Gpu>,
    /// The memory controller's cap, if there is a cap file.
    pub emc: Option<Emc>,
    /// Its INA3221 power monitors.
    pub ina: Vec<InaChip>,
    /// Its power rails.
    pub rails: Vec<Rail>,
    /// Which rails make up the totals.
    pub totals: Totals,
    /// Every knob jpower may touch; `KnobKind`s and fields above refer to them by index.
    pub knobs: Vec<Knob>,
    /// What was missing or unusable.
    pub warnings: Vec<String>,
}

impl Board {
    /// Discovers the board under `root`.
    pub fn discover(root: Root) -> Result<Board, BoardError> {
        let identity = identify(&root)?;
        let mut b = Board {
            root,
            identity,
            cpus: Vec::new(),
            clusters: Vec::new(),
            gpu: None,
            emc: None,
            ina: Vec::new(),
            rails: Vec::new(),
            totals: Totals::default(),
            knobs: Vec::new(),
            warnings: Vec::new(),
        };
        b.discover_cpus();
        b.gpu = b.discover_gpu();
        b.emc = b.discover_emc();
        (b.ina, b.rails) = rails::discover(&b.root, &mut b.warnings);
        for (i, chip) in b.ina.clone().iter().enumerate() {
            if chip.driver == "ina3221" {
                b.add_knob(
                    KnobKind::InaSamples(i),
                    &format!("{}/samples", chip.dir),
                    None,
                );
                b.add_knob(
                    KnobKind::InaUpdateInterval(i),
                    &format!("{}/update_interval", chip.dir),
                    None,
                );
            }
        }
        if let Some(fan) = paths::FAN_PWM.iter().find(|f| b.root.exists(f)) {
            b.add_knob(KnobKind::Fan, fan, None);
        }
        if b.rails.is_empty() {
            b.warnings.push("no INA3221 power rails found".into());
        }
        b.totals = Totals::of(&b.rails);
        if b.knobs.len() > MAX_KNOBS {
            return Err(BoardError::TooManyKnobs(b.knobs.len()));
        }
        Ok(b)
    }

    /// A stable key for state files: the model and the root it was found under.
    pub fn key(&self) -> String {
        let slug: String = self
            .identity
            .model
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        let slug = slug
            .split('-')
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("-");
        let root =
            std::fs::canonicalize(self.root.dir()).unwrap_or_else(|_| self.root.dir().into());
        format!("{slug}-{:016x}", fnv1a(root.to_string_lossy().as_bytes()))
    }

    /// Reads every knob's current value (in its file's unit).
    pub fn read_knobs(&self) -> Result<Vec<u64>, SysfsError> {
        self.knobs.iter().map(Knob::read).collect()
    }

    /// The index of the knob of `kind`.
    pub fn knob(&self, kind: KnobKind) -> Option<usize> {
        self.knobs.iter().position(|k| k.kind == kind)
    }

    /// Number of CPUs.
    pub fn cpu_count(&self) -> usize {
        self.cpus.len()
    }

    fn add_knob(&mut self, kind: KnobKind, path: &str, unit: Option<FreqUnit>) -> Option<usize> {
        self.add_knob_with(kind, path, unit, None)
    }

    fn add_knob_with(
        &mut self,
        kind: KnobKind,
        path: &str,
        unit: Option<FreqUnit>,
        words: Option<&'static [&'static str]>,
    ) -> Option<usize> {
        let (attr, writable) = match self.root.open(path, true) {
            Ok(a) => (a, true),
            Err(e) => match self.root.open(path, false) {
                Ok(a) => {
                    self.warnings.push(format!("read-only: {e}"));
                    (a, false)
                }
                Err(e) => {
                    self.warnings.push(format!("missing knob: {e}"));
                    return None;
                }
            },
        };
        let knob = Knob {
            kind,
            path: path.into(),
            unit,
            writable,
            words,
            attr,
        };
        if let Err(e) = knob.read() {
            self.warnings.push(format!("unreadable knob: {e}"));
            return None;
        }
        self.knobs.push(knob);
        Some(self.knobs.len() - 1)
    }

    fn discover_cpus(&mut self) {
        let cpus = self
            .root
            .read_string(paths::CPU_POSSIBLE)
            .ok()
            .and_then(|s| parse_cpu_list(&s))
            .unwrap_or_default();
        if cpus.is_empty() {
            self.warnings
                .push(format!("no CPUs listed in {}", paths::CPU_POSSIBLE));
        }
        for cpu in cpus {
            let online = format!("{}/cpu{cpu}/online", paths::CPU_DIR);
            let knob = if self.root.exists(&online) {
                self.add_knob(KnobKind::CpuOnline(cpu), &online, None)
            } else {
                None
            };
            self.cpus.push((cpu, knob));
        }
        let policies: Vec<String> = self
            .root
            .list(paths::CPUFREQ_DIR)
            .into_iter()
            .filter(|n| n.starts_with("policy"))
            .collect();
        if policies.is_empty() {
            self.warnings
                .push(format!("no cpufreq policies in {}", paths::CPUFREQ_DIR));
        }
        for name in policies {
            let Ok(policy) = name.trim_start_matches("policy").parse::<usize>() else {
                continue;
            };
            let dir = format!("{}/{name}", paths::CPUFREQ_DIR);
            let cpus = self
                .root
                .read_string(format!("{dir}/related_cpus"))
                .ok()
                .and_then(|s| parse_cpu_list(&s))
                .unwrap_or_else(|| vec![policy]);
            let table_hz = match self
                .root
                .read_string(format!("{dir}/scaling_available_frequencies"))
            {
                Ok(s) => parse_table(&s, FreqUnit::KHz),
                Err(e) => {
                    self.warnings.push(format!("cluster {name}: {e}"));
                    Vec::new()
                }
            };
            // Clusters are numbered in policy order; an incomplete one leaves no knobs.
            let cluster = self.clusters.len();
            let knobs_before = self.knobs.len();
            let min = self.add_knob(
                KnobKind::CpuMin(cluster),
                &format!("{dir}/scaling_min_freq"),
                Some(FreqUnit::KHz),
            );
            let max = self.add_knob(
                KnobKind::CpuMax(cluster),
                &format!("{dir}/scaling_max_freq"),
                Some(FreqUnit::KHz),
            );
            let cur = self.root.open(format!("{dir}/scaling_cur_freq"), false);
            match (min, max, cur) {
                (Some(min), Some(max), Ok(cur)) => self.clusters.push(Cluster {
                    policy,
                    cpus,
                    table_hz,
                    min,
                    max,
                    cur,
                }),
                _ => {
                    self.knobs.truncate(knobs_before);
                    self.warnings.push(format!(
                        "cluster {name} is incomplete and is not controlled"
                    ));
                }
            }
        }
    }

    fn discover_gpu(&mut self) -> Option<Gpu> {
        let mut candidates: Vec<String> = self
            .root
            .list(paths::DEVFREQ_CLASS)
            .into_iter()
            .map(|n| format!("{}/{n}", paths::DEVFREQ_CLASS))
            .collect();
        for alias in paths::GPU_ALIASES {
            candidates.extend(
                self.root
                    .list(format!("{alias}/devfreq"))
                    .into_iter()
                    .map(|n| format!("{alias}/devfreq/{n}")),
            );
        }
        let entry = candidates.into_iter().find(|e| self.is_gpu(e));
        let Some(entry) = entry else {
            self.warnings.push("no GPU devfreq device (on a real board the GPU registers with devfreq only once powered)".into());
            return None;
        };
        let devfreq = self.root.resolve(&entry)?;
        let dir = self.root.resolve(format!("{entry}/device"))?;
        let d = devfreq.to_string_lossy().to_string();
        let table_hz = match self.root.read_string(format!("{d}/available_frequencies")) {
            Ok(s) => parse_table(&s, FreqUnit::Hz),
            Err(e) => {
                self.warnings.push(format!("GPU: {e}"));
                Vec::new()
            }
        };
        if table_hz.is_empty() {
            self.warnings
                .push(format!("GPU {d} lists no available frequencies"));
        }
        let governor = self
            .root
            .read_string(format!("{d}/governor"))
            .unwrap_or_default();
        let min = self.add_knob(
            KnobKind::GpuMin,
            &format!("{d}/min_freq"),
            Some(FreqUnit::Hz),
        )?;
        let max = self.add_knob(
            KnobKind::GpuMax,
            &format!("{d}/max_freq"),
            Some(FreqUnit::Hz),
        )?;
        let cur = self.root.open(format!("{d}/cur_freq"), false).ok()?;
        let device = dir.to_string_lossy();
        self.add_knob(
            KnobKind::GpuRailgate,
            &format!("{device}/{}", paths::GPU_RAILGATE),
            None,
        );
        self.add_knob_with(
            KnobKind::GpuPowerControl,
            &format!("{device}/{}", paths::GPU_POWER_CONTROL),
            None,
            Some(POWER_CONTROL),
        );
        Some(Gpu {
            dir,
            devfreq,
            table_hz,
            min,
            max,
            cur,
            governor,
        })
    }

    fn is_gpu(&self, devfreq_entry: &str) -> bool {
        let node = format!("{devfreq_entry}/device/of_node");
        let name = self
            .root
            .read_string(format!("{node}/name"))
            .unwrap_or_default();
        let compatible = self
            .root
            .read_string(format!("{node}/compatible"))
            .unwrap_or_default();
        paths::GPU_OF_NAMES.contains(&name.as_str())
            || compatible.lines().any(|c| {
                paths::GPU_OF_NAMES
                    .iter()
                    .any(|g| c == format!("nvidia,{g}"))
            })
    }

    fn discover_emc(&mut self) -> Option<Emc> {
        let Some(cap_file) = paths::EMC_CAPS.iter().find(|c| self.root.exists(c.path)) else {
            self.warnings
                .push("no nvpmodel EMC cap file: memory frequency is not controlled".into());
            return None;
        };
        let soc_table = SOCS
            .iter()
            .find(|s| s.0 == self.identity.soc)
            .map(|s| s.3)
            .unwrap_or(&[]);
        let debugfs_max = self
            .root
            .open(format!("{}/max_rate", paths::EMC_DEBUGFS), false)
            .and_then(|a| a.read_u64())
            .ok();
        let module_max = self.identity.module.as_deref().and_then(|m| {
            EMC_MODULE_MAX
                .iter()
                .find(|(p, _)| m.starts_with(p))
                .map(|(_, max)| *max)
        });
        let (limit, table_source) = match debugfs_max {
            Some(max) => (max, EmcTableSource::SocTableDebugfsLimited),
            None => (module_max.unwrap_or(u64::MAX), EmcTableSource::SocTable),
        };
        let table_hz: Vec<u64> = soc_table.iter().copied().filter(|&f| f <= limit).collect();
        let cap = self.add_knob(KnobKind::EmcCap, cap_file.path, Some(FreqUnit::Hz))?;
        let rate = self
            .root
            .open(format!("{}/rate", paths::EMC_DEBUGFS), false)
            .ok();
        Some(Emc {
            cap,
            table_hz,
            table_source,
            uncapped: cap_file.uncapped,
            rate,
        })
    }
}

fn identify(root: &Root) -> Result<Identity, BoardError> {
    let first = |candidates: &[&str]| {
        candidates
            .iter()
            .find_map(|p| root.read_string(p).ok())
            .unwrap_or_default()
    };
    let model = first(paths::DT_MODEL)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let compatible: Vec<String> = first(paths::DT_COMPATIBLE)
        .lines()
        .map(str::to_string)
        .filter(|s| !s.is_empty())
        .collect();
    let chip_id: Option<u32> = root
        .read_string(paths::TEGRA_CHIP_ID)
        .ok()
        .and_then(|s| s.parse().ok());
    let soc = SOCS
        .iter()
        .find(|(_, name, id, _)| {
            compatible.iter().any(|c| c.contains(name)) || chip_id == Some(*id)
        })
        .map(|s| s.0)
        .ok_or_else(|| BoardError::NotJetson {
            root: root.dir().to_path_buf(),
        })?;
    let module = compatible.iter().find_map(|c| {
        let part = c.strip_prefix("nvidia,")?;
        (part.starts_with('p') && part.len() >= 10 && !part.contains('+')).then(|| part.to_string())
    });
    let release = root.read_string(paths::TEGRA_RELEASE).unwrap_or_default();
    let (l4t_major, l4t_revision) = parse_tegra_release(&release);
    Ok(Identity {
        model: if model.is_empty() {
            format!("Jetson ({soc:?})")
        } else {
            model
        },
        compatible,
        module,
        soc,
        l4t_major,
        l4t_revision,
    })
}

/// `# R36 (release), REVISION: 5.0, ...` -> (36, "5.0").
fn parse_tegra_release(text: &str) -> (Option<u32>, Option<String>) {
    let major = text
        .split_once('R')
        .and_then(|(_, r)| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|d| d.parse().ok());
    let revision = text
        .split_once("REVISION:")
        .and_then(|(_, r)| r.split(',').next())
        .map(|r| r.trim().to_string());
    (major, revision)
}

/// A space-separated frequency table, in Hz, sorted.
fn parse_table(text: &str, unit: FreqUnit) -> Vec<u64> {
    let mut t: Vec<u64> = text
        .split_whitespace()
        .filter_map(|v| v.parse::<u64>().ok())
        .map(|v| v * unit.hz())
        .collect();
    t.sort_unstable();
    t.dedup();
    t
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tegra_release_lines() {
        assert_eq!(
            parse_tegra_release("# R36 (release), REVISION: 5.0, GCID: 1, BOARD: generic"),
            (Some(36), Some("5.0".into()))
        );
        assert_eq!(parse_tegra_release(""), (None, None));
    }

    #[test]
    fn tables_parse_with_trailing_space() {
        assert_eq!(
            parse_table("115200 192000 ", FreqUnit::KHz),
            vec![115_200_000, 192_000_000]
        );
    }
}
