//! INA3221 power rails: found under both drivers, named by their labels, and classified
//! by a table of labels into what makes up a board's totals.
//!
//! - L4T 32 IIO driver `ina3221x`: `iio:deviceN/rail_name_K`, `in_power{K}_input` (mW).
//! - Mainline hwmon `ina3221` (L4T 35/36): `hwmon/hwmonN/in{K}_label`, `in{K}_input` (mV),
//!   `curr{K}_input` (mA); power is mV x mA computed here. `hwmonN` is not stable across
//!   boots, so it is globbed, never assumed.
//!
//! Channels labelled `NC`, the `sum of shunt voltages` channel, channels without a label
//! and channels whose reads fail with `ENODATA` (disabled) are not rails.

use super::paths;
use crate::sysfs::{Attr, Root, SysfsError};
use serde::Serialize;

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
/// rail and a sub-rail otherwise.
const ROLES: &[(&str, RailRole)] = &[
    ("VDD_IN", RailRole::Input),
    ("POM_5V_IN", RailRole::Input),
    ("VIN_SYS_5V0", RailRole::Carrier),
    ("SYS5V", RailRole::Carrier),
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
    Power { mw: Attr },
    /// Voltage (mV) and current (mA); power is their product.
    VoltCurr { mv: Attr, ma: Attr },
}

/// One rail.
#[derive(Debug)]
pub struct Rail {
    /// Its label (`VDD_GPU_SOC`).
    pub label: String,
    pub role: RailRole,
    /// The i2c client (`1-0040`) and the channel (0-based).
    pub chip: String,
    pub channel: usize,
    /// `ina3221x` (IIO) or `ina3221` (hwmon).
    pub driver: &'static str,
    pub source: RailSource,
}

impl Rail {
    /// Power now, milliwatts.
    pub fn read_mw(&self) -> Result<u64, SysfsError> {
        match &self.source {
            RailSource::Power { mw } => mw.read_u64(),
            RailSource::VoltCurr { mv, ma } => Ok(mv.read_u64()? * ma.read_u64()? / 1000),
        }
    }
}

/// Finds every rail under `root`; problems become warnings.
pub fn discover(root: &Root, warnings: &mut Vec<String>) -> Vec<Rail> {
    let mut rails = Vec::new();
    for client in root.list(paths::I2C_DEVICES) {
        let dev = format!("{}/{client}", paths::I2C_DEVICES);
        let name = root.read_string(format!("{dev}/name")).unwrap_or_default();
        match name.as_str() {
            "ina3221x" => {
                for iio in root
                    .list(&dev)
                    .into_iter()
                    .filter(|n| n.starts_with("iio:device"))
                {
                    iio_rails(root, &client, &format!("{dev}/{iio}"), &mut rails, warnings);
                }
            }
            "ina3221" => {
                for hw in root.list(format!("{dev}/hwmon")) {
                    hwmon_rails(
                        root,
                        &client,
                        &format!("{dev}/hwmon/{hw}"),
                        &mut rails,
                        warnings,
                    );
                }
            }
            _ => {}
        }
    }
    let has_input = rails.iter().any(|r| r.role == RailRole::Input);
    for r in &mut rails {
        if r.role == RailRole::Module && has_input {
            r.role = RailRole::Sub;
        }
    }
    rails
}

fn role_of(label: &str) -> RailRole {
    ROLES
        .iter()
        .find(|(l, _)| *l == label)
        .map(|(_, r)| *r)
        .unwrap_or(RailRole::Module)
}

fn is_rail_label(label: &str) -> bool {
    !label.is_empty() && label != "NC" && !label.starts_with("sum of shunt")
}

/// Opens a channel's input and checks it answers (a disabled channel gives `ENODATA`).
fn open_input(root: &Root, path: &str, warnings: &mut Vec<String>) -> Option<Attr> {
    let attr = root.open(path, false).ok()?;
    match attr.read_u64() {
        Ok(_) => Some(attr),
        Err(e) if e.errno() == Some(libc::ENODATA) => None,
        Err(e) => {
            warnings.push(format!("rail input unreadable: {e}"));
            None
        }
    }
}

fn iio_rails(root: &Root, client: &str, dir: &str, rails: &mut Vec<Rail>, w: &mut Vec<String>) {
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
                chip: client.to_string(),
                channel: ch,
                driver: "ina3221x",
                source: RailSource::Power { mw },
            });
        }
    }
}

fn hwmon_rails(root: &Root, client: &str, dir: &str, rails: &mut Vec<Rail>, w: &mut Vec<String>) {
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
                chip: client.to_string(),
                channel: k - 1,
                driver: "ina3221",
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
