//! The knob table: what each writable attribute jpower may touch controls, the attribute
//! opened once, and how discovery adds one to a [`Board`].

use super::sysfs::{Attr, SysfsError};
use super::Board;
use crate::support::units::FreqUnit;
use serde::Serialize;
use std::path::PathBuf;

/// Most knobs one board may have (the controller's fixed-size buffers).
pub const MAX_KNOBS: usize = 64;

/// Values of every knob of a board, by knob index, in the files' units.
pub type Values = heapless::Vec<u64, MAX_KNOBS>;

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
    /// Why it could not be opened for writing (`None`: it could).
    pub unwritable: Option<nix::errno::Errno>,
    /// For attributes holding a word, the words its values index (`None`: a number).
    pub words: Option<&'static [&'static str]>,
    /// The opened attribute.
    pub attr: Attr,
}

impl Knob {
    /// Whether it could be opened for writing.
    pub fn writable(&self) -> bool {
        self.unwritable.is_none()
    }

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

impl Board {
    /// Opens knob `i` for writing again where it could not be before (access granted
    /// since, by udev's rules or an administrator); why it still cannot be, if so. A
    /// writable knob costs nothing.
    pub fn reopen_writable(&mut self, i: usize) -> Option<nix::errno::Errno> {
        let k = &mut self.knobs[i];
        k.unwritable?;
        match self.root.open(&k.path, true) {
            Ok(attr) => {
                k.attr = attr;
                k.unwritable = None;
            }
            Err(e) => {
                let errno = e
                    .errno()
                    .map_or(nix::errno::Errno::UnknownErrno, nix::errno::Errno::from_raw);
                k.unwritable = Some(errno);
            }
        }
        k.unwritable
    }

    pub(super) fn add_knob(
        &mut self,
        kind: KnobKind,
        path: &str,
        unit: Option<FreqUnit>,
    ) -> Option<usize> {
        self.add_knob_with(kind, path, unit, None)
    }

    pub(super) fn add_knob_with(
        &mut self,
        kind: KnobKind,
        path: &str,
        unit: Option<FreqUnit>,
        words: Option<&'static [&'static str]>,
    ) -> Option<usize> {
        let (attr, unwritable) = match self.root.open(path, true) {
            Ok(a) => (a, None),
            Err(e) => match self.root.open(path, false) {
                Ok(a) => {
                    // Said once for all read-only knobs, after discovery.
                    let errno = e
                        .errno()
                        .map_or(nix::errno::Errno::UnknownErrno, nix::errno::Errno::from_raw);
                    (a, Some(errno))
                }
                Err(e) => {
                    // A file that is there but cannot be opened (a link out of the root or
                    // to nothing, no permission) is not absent hardware.
                    if self.root.is_present(path) {
                        self.unusable.push(kind);
                        let link = if e.errno() == Some(libc::ENOENT) {
                            " (a link to nothing in the root)"
                        } else {
                            ""
                        };
                        self.warnings.push(format!("unusable knob{link}: {e}"));
                    } else {
                        self.warnings.push(format!("missing knob: {e}"));
                    }
                    return None;
                }
            },
        };
        let knob = Knob {
            kind,
            path: path.into(),
            unit,
            unwritable,
            words,
            attr,
        };
        if let Err(e) = knob.read() {
            self.unusable.push(kind);
            self.warnings.push(format!("unreadable knob: {e}"));
            return None;
        }
        self.knobs.push(knob);
        Some(self.knobs.len() - 1)
    }
}
