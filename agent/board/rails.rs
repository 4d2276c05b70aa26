//! INA3221 power rails: found under both drivers, named by their labels, and classified
//! by a table of labels into what makes up a board's totals.
//!
//! - L4T 32 IIO driver `ina3221x`: `iio:deviceN/rail_name_K`, `in_power{K}_input` (mW), read
//!   alone: the driver's `in_voltage{K}_input` and `in_current{K}_input` are there too, but
//!   each is another read per sample.
//! - Mainline hwmon `ina3221` (L4T 35/36): `hwmon/hwmonN/in{K}_label`, `in{K}_input` (mV),
//!   `curr{K}_input` (mA); power is mV x mA computed here. `hwmonN` is not stable across
//!   boots, so it is globbed, never assumed.
//!
//! Channels labelled `NC`, the `sum of shunt voltages` channel, channels without a label
//! and channels whose reads fail with `ENODATA` (disabled) are not rails.

use super::paths;
use crate::board::sysfs::{Attr, Root, SysfsError};
use serde::Serialize;

/// One rail's reading in a sample, in the ring's integer units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RailValue {
    /// Microwatts.
    pub power_uw: u32,
    /// Millivolts (0 on L4T 32's IIO driver, read for its `in_power` alone: one read per
    /// rail and sample, where its `in_voltage`/`in_current` would add one each).
    pub voltage_mv: u32,
    /// Milliamperes (0 where the voltage is).
    pub current_ma: u32,
}

/// What a rail contributes to the totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RailRole {
    /// The module's input rail (`VDD_IN`, `POM_5V_IN`): all of the module's power.
    Input,
    /// Part of the module's power where the board has no input rail (AGX boards).
    Module,
    /// A sub-rail of the input rail (`VDD_CPU_GPU_CV` on Orin NX/Nano, a shared rail, not
    /// a GPU rail), or one the totals do not count.
    Sub,
    /// Feeds the carrier board, not the module (`VIN_SYS_5V0` on Orin AGX).
    Carrier,
}

/// Labels and their roles; an unknown label is a module rail on boards without an input
/// rail and a sub-rail otherwise, with a warning. The sub-rails of the boards with an input
/// rail are listed too, so that an input rail of a label not listed here is the module's
/// only rail beside them, not summed with them.
const ROLES: &[(&str, RailRole)] = &[
    ("VDD_IN", RailRole::Input),
    ("POM_5V_IN", RailRole::Input),
    ("VIN_SYS_5V0", RailRole::Carrier),
    ("SYS5V", RailRole::Carrier),
    // Orin NX / Orin Nano / Xavier NX.
    ("VDD_CPU_GPU_CV", RailRole::Sub),
    ("VDD_SOC", RailRole::Sub),
    // Nano.
    ("POM_5V_GPU", RailRole::Sub),
    ("POM_5V_CPU", RailRole::Sub),
    // TX2.
    ("VDD_SYS_GPU", RailRole::Sub),
    ("VDD_SYS_SOC", RailRole::Sub),
    ("VDD_SYS_CPU", RailRole::Sub),
    ("VDD_SYS_DDR", RailRole::Sub),
    ("VDD_4V0_WIFI", RailRole::Sub),
    ("VDD_GPU_SOC", RailRole::Module),
    ("VDD_CPU_CV", RailRole::Module),
    ("VDDQ_VDD2_1V8AO", RailRole::Module),
    ("GPU", RailRole::Module),
    ("CPU", RailRole::Module),
    ("SOC", RailRole::Module),
    ("CV", RailRole::Module),
    ("VDDRQ", RailRole::Module),
];

/// How a rail's power is read.
#[derive(Debug)]
pub enum RailSource {
    /// The driver reports power (mW).
    Power {
        /// `in_power{K}_input`, milliwatts.
        mw: Attr,
    },
    /// Voltage (mV) and current (mA); power is their product.
    VoltCurr {
        /// `in{K}_input`, millivolts.
        mv: Attr,
        /// `curr{K}_input`, milliamperes.
        ma: Attr,
    },
}

/// One INA3221 chip with at least one rail.
#[derive(Debug, Clone)]
pub struct InaChip {
    /// The i2c client (`1-0040`).
    pub client: String,
    /// `ina3221x` (L4T 32 IIO) or `ina3221` (hwmon).
    pub driver: &'static str,
    /// The channel directory (`.../hwmon/hwmon3`, `.../iio:device0`), a board path.
    pub dir: String,
    /// Channels converting (hwmon `inN_enable`; all three on IIO).
    pub enabled: u32,
}

/// One rail.
#[derive(Debug)]
pub struct Rail {
    /// Its label (`VDD_GPU_SOC`).
    pub label: String,
    /// What it contributes to the totals.
    pub role: RailRole,
    /// Index of its chip in the board's list, and the channel (0-based).
    pub chip: usize,
    /// Its channel on that chip, 0-based.
    pub channel: usize,
    /// How its power is read.
    pub source: RailSource,
}

impl Rail {
    /// Power now, milliwatts.
    pub fn read_mw(&self) -> Result<u64, SysfsError> {
        Ok(u64::from(self.read()?.power_uw) / 1000)
    }

    /// One reading: one `pread` per file, no allocation unless it fails.
    pub fn read(&self) -> Result<RailValue, SysfsError> {
        self.value(Attr::read_reading)
    }

    /// One reading for the sampler: `None` on failure, and no allocation either way.
    pub fn sample(&self) -> Option<RailValue> {
        self.value(|a| a.try_read_reading().ok_or(())).ok()
    }

    fn value<E>(&self, get: impl Fn(&Attr) -> Result<u64, E>) -> Result<RailValue, E> {
        let clamp = |v: u64| v.min(u64::from(u32::MAX)) as u32;
        Ok(match &self.source {
            RailSource::Power { mw } => RailValue {
                power_uw: clamp(get(mw)? * 1000),
                voltage_mv: 0,
                current_ma: 0,
            },
            RailSource::VoltCurr { mv, ma } => {
                let (mv, ma) = (get(mv)?, get(ma)?);
                RailValue {
                    power_uw: clamp(mv * ma),
                    voltage_mv: clamp(mv),
                    current_ma: clamp(ma),
                }
            }
        })
    }

    /// The same rail on duplicated descriptors (for the sampler thread).
    pub fn try_clone(&self) -> std::io::Result<Rail> {
        Ok(Rail {
            label: self.label.clone(),
            role: self.role,
            chip: self.chip,
            channel: self.channel,
            source: match &self.source {
                RailSource::Power { mw } => RailSource::Power {
                    mw: mw.try_clone()?,
                },
                RailSource::VoltCurr { mv, ma } => RailSource::VoltCurr {
                    mv: mv.try_clone()?,
                    ma: ma.try_clone()?,
                },
            },
        })
    }
}

/// Finds every INA3221 chip and rail under `root`; problems become warnings.
pub fn discover(root: &Root, warnings: &mut Vec<String>) -> (Vec<InaChip>, Vec<Rail>) {
    let mut rails = Vec::new();
    let mut chips = Vec::new();
    for client in root.list(paths::I2C_DEVICES) {
        let dev = format!("{}/{client}", paths::I2C_DEVICES);
        let name = root.read_string(format!("{dev}/name")).unwrap_or_default();
        let dirs: Vec<(String, &'static str)> = match name.as_str() {
            "ina3221x" => root
                .list(&dev)
                .into_iter()
                .filter(|n| n.starts_with("iio:device"))
                .map(|n| (format!("{dev}/{n}"), "ina3221x"))
                .collect(),
            "ina3221" => root
                .list(format!("{dev}/hwmon"))
                .into_iter()
                .map(|n| (format!("{dev}/hwmon/{n}"), "ina3221"))
                .collect(),
            _ => Vec::new(),
        };
        for (dir, driver) in dirs {
            let before = rails.len();
            let chip = chips.len();
            let enabled = if driver == "ina3221x" {
                iio_rails(root, chip, &dir, &mut rails, warnings);
                3
            } else {
                hwmon_rails(root, chip, &dir, &mut rails, warnings);
                let on = |k: &u32| {
                    root.read_string(format!("{dir}/in{k}_enable"))
                        .map_or(true, |v| v == "1")
                };
                (1..=3).filter(on).count() as u32
            };
            if rails.len() > before {
                // A board path, so state files and logs show what a user would `cat`.
                let dir = root
                    .resolve(&dir)
                    .map_or(dir, |p| p.to_string_lossy().into_owned());
                chips.push(InaChip {
                    client: client.clone(),
                    driver,
                    dir,
                    enabled,
                });
            }
        }
    }
    let has_input = rails.iter().any(|r| r.role == RailRole::Input);
    for r in &mut rails {
        if r.role == RailRole::Module && has_input {
            r.role = RailRole::Sub;
        }
        if known_role(&r.label).is_none() {
            warnings.push(format!(
                "rail {}: a label jpower does not know, counted as {}",
                r.label,
                if r.role == RailRole::Sub {
                    "a sub-rail (not in the module's total)"
                } else {
                    "part of the module's power"
                }
            ));
        }
    }
    (chips, rails)
}

/// The role of a rail by its label, in any case (board vendors' device trees are not
/// consistent: `VDD_IN`, `vdd_in`).
fn known_role(label: &str) -> Option<RailRole> {
    ROLES
        .iter()
        .find(|(l, _)| l.eq_ignore_ascii_case(label.trim()))
        .map(|(_, r)| *r)
}

/// [`known_role`], an unknown label a module rail (until an input rail makes it a sub-rail).
fn role_of(label: &str) -> RailRole {
    known_role(label).unwrap_or(RailRole::Module)
}

fn is_rail_label(label: &str) -> bool {
    !label.is_empty() && label != "NC" && !label.starts_with("sum of shunt")
}

/// Opens a labelled channel's input and checks it answers (a disabled channel gives
/// `ENODATA`); one missing or unreadable is a warning, its rail left out (a review found
/// such a rail, the input rail among them, gone from module power without a word).
fn open_input(root: &Root, path: &str, warnings: &mut Vec<String>) -> Option<Attr> {
    let attr = match root.open(path, false) {
        Ok(attr) => attr,
        Err(e) => {
            warnings.push(format!(
                "rail input {path} cannot be opened ({e}): its rail is left out"
            ));
            return None;
        }
    };
    match attr.read_reading() {
        Ok(_) => Some(attr),
        Err(e) if e.errno() == Some(libc::ENODATA) => None,
        Err(e) => {
            warnings.push(format!("rail input unreadable: {e}"));
            None
        }
    }
}

fn iio_rails(root: &Root, chip: usize, dir: &str, rails: &mut Vec<Rail>, w: &mut Vec<String>) {
    for ch in 0..3 {
        let Ok(label) = root.read_string(format!("{dir}/rail_name_{ch}")) else {
            continue;
        };
        if !is_rail_label(&label) {
            continue;
        }
        if let Some(mw) = open_input(root, &format!("{dir}/in_power{ch}_input"), w) {
            rails.push(Rail {
                role: role_of(&label),
                label,
                chip,
                channel: ch,
                source: RailSource::Power { mw },
            });
        }
    }
}

fn hwmon_rails(root: &Root, chip: usize, dir: &str, rails: &mut Vec<Rail>, w: &mut Vec<String>) {
    for k in 1..=3 {
        let Ok(label) = root.read_string(format!("{dir}/in{k}_label")) else {
            continue;
        };
        if !is_rail_label(&label) {
            continue;
        }
        let mv = open_input(root, &format!("{dir}/in{k}_input"), w);
        let ma = open_input(root, &format!("{dir}/curr{k}_input"), w);
        if let (Some(mv), Some(ma)) = (mv, ma) {
            rails.push(Rail {
                role: role_of(&label),
                label,
                chip,
                channel: k - 1,
                source: RailSource::VoltCurr { mv, ma },
            });
        }
    }
}

/// Which rails make up the board's totals.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Rails summed into module power (the input rail alone where there is one).
    pub module: Vec<usize>,
    /// The input rail, where the board has one.
    pub input: Option<usize>,
}

impl Totals {
    /// The totals of a set of rails.
    pub fn of(rails: &[Rail]) -> Totals {
        let input = rails.iter().position(|r| r.role == RailRole::Input);
        let module = match input {
            Some(i) => vec![i],
            None => rails
                .iter()
                .enumerate()
                .filter(|(_, r)| r.role == RailRole::Module)
                .map(|(i, _)| i)
                .collect(),
        };
        Totals { module, input }
    }

    /// Names of the rails in module power, for every output that shows a total.
    pub fn module_names(&self, rails: &[Rail]) -> Vec<String> {
        self.module
            .iter()
            .map(|&i| rails[i].label.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_names_its_role_in_any_case() {
        assert_eq!(role_of("VDD_IN"), RailRole::Input);
        assert_eq!(role_of("vdd_in"), RailRole::Input);
        assert_eq!(role_of("Vin_Sys_5v0 "), RailRole::Carrier);
        assert_eq!(role_of("VDD_SOMETHING_NEW"), RailRole::Module);
        assert_eq!(known_role("VDD_SOMETHING_NEW"), None);
        assert_eq!(role_of("vdd_cpu_gpu_cv"), RailRole::Sub);
    }
}
