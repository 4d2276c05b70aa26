//! GPU discovery: whichever devfreq device is the GPU on this release, found through its
//! `of_node`, with its frequency table, min/max knobs and runtime power knobs.

use super::sysfs::Attr;
use super::{parse_table, paths, Board, KnobKind, POWER_CONTROL};
use crate::support::units::FreqUnit;
use std::path::PathBuf;

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

impl Board {
    pub(super) fn discover_gpu(&mut self) -> Option<Gpu> {
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
        let table = format!("{d}/available_frequencies");
        let table_hz = match self.root.read_string(&table) {
            Ok(s) => parse_table(&s, FreqUnit::Hz, &table, &mut self.warnings),
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
        // Before any knob is added: a GPU given up on leaves no knobs that no plan writes.
        let cur = match self.root.open(format!("{d}/cur_freq"), false) {
            Ok(cur) => {
                // A table in another unit than min/max (kHz against Hz) would be written
                // as it reads: a clock far outside the table says so.
                let (lo, hi) = (table_hz.first().copied(), table_hz.last().copied());
                let now = cur.try_read_u64();
                if let (Some(lo), Some(hi), Some(now)) = (lo, hi, now) {
                    if now > 0 && (now < lo / 2 || now > hi.saturating_mul(2)) {
                        self.warnings.push(format!(
                            "GPU {d}: cur_freq {now} is far outside available_frequencies ({lo}..{hi}): is the table in another unit?"
                        ));
                    }
                }
                cur
            }
            Err(e) => {
                self.warnings
                    .push(format!("GPU: {e}: its clocks are not controlled"));
                return None;
            }
        };
        let min = self.add_knob(
            KnobKind::GpuMin,
            &format!("{d}/min_freq"),
            Some(FreqUnit::Hz),
        )?;
        let Some(max) = self.add_knob(
            KnobKind::GpuMax,
            &format!("{d}/max_freq"),
            Some(FreqUnit::Hz),
        ) else {
            self.knobs.truncate(min);
            return None;
        };
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
}
