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

pub mod activity;
pub mod counters;
mod cpu;
mod emc;
mod gpu;
mod identity;
pub mod in_root;
pub mod ina3221;
mod knobs;
pub mod nvpmodel;
pub mod paths;
pub mod rails;
pub mod sysfs;

pub use cpu::Cluster;
pub use emc::{Emc, EmcTableSource};
pub use gpu::Gpu;
pub use identity::{Identity, Soc};
pub use knobs::{Knob, KnobKind, Values, MAX_KNOBS, POWER_CONTROL};

use crate::board::sysfs::{Root, SysfsError};
use crate::support::units::FreqUnit;
use identity::identify;
use rails::{InaChip, Rail, Totals};
use std::path::PathBuf;

/// Discovery errors.
#[derive(Debug, thiserror::Error)]
pub enum BoardError {
    /// Nothing under the root says Tegra.
    #[error("{} is not a Jetson: no nvidia,tegra* SoC in its device tree or tegra_fuse; use --sim BOARD for a simulated board or --root DIR for a board's tree", root.display())]
    NotJetson {
        /// The root that was searched.
        root: PathBuf,
    },
    /// A Tegra SoC jpower has no tables for.
    #[error("{}: the SoC {soc} is not one jpower knows (tegra210, tegra186, tegra194, tegra234)", root.display())]
    UnknownSoc {
        /// The root that was searched.
        root: PathBuf,
        /// Its `nvidia,tegra*` compatible string.
        soc: String,
    },
    /// More knobs than the controller holds.
    #[error("board has {0} knobs, more than the {MAX_KNOBS} jpower supports")]
    TooManyKnobs(usize),
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
    /// Knobs whose file is there but cannot be opened or read (a link out of the root or
    /// to nothing, no permission): a preset that sets one is refused, where absent
    /// hardware is only skipped.
    pub unusable: Vec<KnobKind>,
}

impl Board {
    /// Discovers the board under `root`.
    pub fn discover(root: Root) -> Result<Board, BoardError> {
        let mut warnings = Vec::new();
        let identity = identify(&root, &mut warnings)?;
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
            warnings,
            unusable: Vec::new(),
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
        if let Some(fan) = fan_pwm_path(&b.root) {
            b.add_knob(KnobKind::Fan, &fan, None);
        }
        if b.rails.is_empty() {
            b.warnings.push("no INA3221 power rails found".into());
        }
        b.totals = Totals::of(&b.rails);
        if !b.rails.is_empty() && b.totals.module.is_empty() {
            b.warnings
                .push("no rail found makes up module power (its input rail or its module rails): module power is not measured".into());
        }
        // One line for every read-only knob (a review found 27 before a one-line error).
        let read_only: Vec<&Knob> = b.knobs.iter().filter(|k| k.unwritable.is_some()).collect();
        if let Some(errno) = read_only.first().and_then(|k| k.unwritable) {
            b.warnings.push(format!(
                "read-only: {} of {} knobs cannot be opened for writing ({} ({errno:?}), {} first): control needs root, or jpower's udev rules and group jpower",
                read_only.len(),
                b.knobs.len(),
                errno.desc(),
                read_only[0].path.display()
            ));
        }
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
        format!(
            "{slug}-{:016x}",
            crate::support::hash::fnv1a(std::os::unix::ffi::OsStrExt::as_bytes(root.as_os_str()))
        )
    }

    /// Reads every knob's current value (in its file's unit).
    pub fn read_knobs(&self) -> Result<Values, SysfsError> {
        // Discovery keeps the knobs within MAX_KNOBS, so they fit; no allocation.
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
}

/// A space-separated frequency table, in Hz, sorted; an entry that is no number, or no
/// frequency in Hz that fits 64 bits, is left out with a warning naming `file`.
/// The fan's PWM duty attribute where the board has one: the pwm-fan's `hwmon*/pwm1`
/// (L4T 35/36; hwmon numbers follow probe order, so any), then L4T 32's `target_pwm`.
pub fn fan_pwm_path(root: &Root) -> Option<String> {
    root.list(paths::FAN_HWMON_DIR)
        .into_iter()
        .filter(|h| h.starts_with("hwmon"))
        .map(|h| format!("{}/{h}/pwm1", paths::FAN_HWMON_DIR))
        .chain(std::iter::once(paths::FAN_PWM_L4T32.to_string()))
        .find(|p| root.exists(p))
}

fn parse_table(text: &str, unit: FreqUnit, file: &str, warnings: &mut Vec<String>) -> Vec<u64> {
    let mut t = Vec::new();
    let mut dropped = Vec::new();
    for v in text.split_whitespace() {
        match v.parse::<u64>().ok().and_then(|f| f.checked_mul(unit.hz())) {
            Some(hz) => t.push(hz),
            None => dropped.push(v),
        }
    }
    if !dropped.is_empty() {
        warnings.push(format!(
            "{file}: left out what is no frequency: {}",
            dropped.join(" ")
        ));
    }
    t.sort_unstable();
    t.dedup();
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pwm-fan's hwmon number follows probe order (hwmon2 on an Orin NX): any is
    /// found, where only hwmon0 was looked at.
    #[test]
    fn the_fan_is_found_at_any_hwmon_number() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::host(dir.path());
        assert_eq!(fan_pwm_path(&root), None);
        let hwmon = dir.path().join("sys/devices/platform/pwm-fan/hwmon/hwmon2");
        std::fs::create_dir_all(&hwmon).unwrap();
        std::fs::write(hwmon.join("pwm1"), "128\n").unwrap();
        assert_eq!(
            fan_pwm_path(&root).as_deref(),
            Some("/sys/devices/platform/pwm-fan/hwmon/hwmon2/pwm1")
        );
    }

    #[test]
    fn tables_parse_with_trailing_space() {
        let mut warnings = Vec::new();
        assert_eq!(
            parse_table("115200 192000 ", FreqUnit::KHz, "t", &mut warnings),
            vec![115_200_000, 192_000_000]
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            parse_table(
                "115200 18446744073709552 x",
                FreqUnit::KHz,
                "t",
                &mut warnings
            ),
            vec![115_200_000],
            "an entry beyond 64 bits in Hz is no entry"
        );
        assert_eq!(
            warnings,
            ["t: left out what is no frequency: 18446744073709552 x"]
        );
    }
}
