//! EMC discovery: the nvpmodel cap file, and the rates it may take, from the SoC's table
//! limited by debugfs where readable (or by the module's known maximum).

use super::identity::SOCS;
use super::paths::{self, Uncapped};
use super::sysfs::Attr;
use super::{Board, KnobKind};
use crate::support::units::FreqUnit;
use serde::Serialize;

/// Modules whose EMC tops out below their SoC's table (when debugfs cannot say).
const EMC_MODULE_MAX: &[(&str, u64)] = &[
    ("p3767-0003", 2133000000),
    ("p3767-0004", 2133000000),
    ("p3767-0005", 2133000000),
    ("p3668", 1600000000),
    ("p3448", 1600000000),
];

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
    /// The running rate ([`paths::EMC_RATE`]), where readable (root).
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

impl Board {
    pub(super) fn discover_emc(&mut self) -> Option<Emc> {
        // A cap file that is a link to nothing is found too: it is unusable, not absent.
        let Some(cap_file) =
            (paths::EMC_CAPS.iter().find(|c| self.root.exists(c.path))).or_else(|| {
                paths::EMC_CAPS
                    .iter()
                    .find(|c| self.root.is_present(c.path))
            })
        else {
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
        // A cap file that shows the highest rate when uncapped shows at least what the
        // module reaches: a module maximum assumed lower (a newer L4T raised Orin Nano's
        // EMC to 3199 MHz) must not make "no cap" a cap.
        let shown = (cap_file.uncapped == Uncapped::TableMax)
            .then(|| {
                self.root
                    .open(cap_file.path, false)
                    .and_then(|a| a.read_u64())
                    .ok()
            })
            .flatten()
            .filter(|v| soc_table.contains(v));
        let (limit, table_source) = match debugfs_max {
            Some(max) => (max, EmcTableSource::SocTableDebugfsLimited),
            None => (
                module_max.map_or(u64::MAX, |m| m.max(shown.unwrap_or(0))),
                EmcTableSource::SocTable,
            ),
        };
        let table_hz: Vec<u64> = soc_table.iter().copied().filter(|&f| f <= limit).collect();
        let cap = self.add_knob(KnobKind::EmcCap, cap_file.path, Some(FreqUnit::Hz))?;
        let rate = paths::EMC_RATE
            .iter()
            .find_map(|p| self.root.open(p, false).ok());
        Some(Emc {
            cap,
            table_hz,
            table_source,
            uncapped: cap_file.uncapped,
            rate,
        })
    }
}
