//! What a switch costs on this board, knob by knob: the time from the write to the running
//! clock reading its new rate, measured through the controller's own switch path.
//!
//! Each knob is moved between the top of its table and a lower entry (half-way down; for
//! the cores, half of them), the rest of the mode held at the top. Before timing, each end
//! is held for [`HOLD`] and its running clock read: that is the rate the clock settles at
//! there (the EMC cap is only a ceiling, and an idle memory controller may not follow it
//! up; a knob whose running clock reads the same at both ends is reported as not moving
//! it). Then each switch is timed from just before the controller's first write until a
//! read of the running clock (CPU `scaling_cur_freq` of every cluster, the GPU's devfreq
//! `cur_freq`, the EMC's debugfs rate) returns the settled rate, polled without sleeping.
//! A CPU is up or down when its `online` write returns, so the cores' time is the
//! switch's. A clock that has not settled within [`TIMEOUT`] counts as unsettled.
//!
//! The costs are kept in the board's profile ([`SwitchCosts::path`]), which `jpower
//! schedule` reads for the time a per-phase switch of the GPU and EMC clocks costs.

use super::mode::{ModeSpace, PinnedMode};
use super::{ControlError, Controller};
use crate::board::Board;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long each end is held before its running clocks are read as settled.
pub const HOLD: Duration = Duration::from_millis(200);
/// How long a switch may take to settle before it counts as unsettled.
pub const TIMEOUT: Duration = Duration::from_secs(1);
/// Version of the profile's layout.
pub const VERSION: u32 = 1;

/// A knob a switch may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Knob {
    /// Online cores (hotplug).
    Cores,
    /// The CPU clock of every cluster.
    Cpu,
    /// The GPU clock.
    Gpu,
    /// The EMC cap.
    Emc,
}

impl Knob {
    /// Every knob, in the order measured.
    pub const ALL: [Knob; 4] = [Knob::Gpu, Knob::Emc, Knob::Cpu, Knob::Cores];

    /// Its name in the profile and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Knob::Cores => "cores",
            Knob::Cpu => "cpu",
            Knob::Gpu => "gpu",
            Knob::Emc => "emc",
        }
    }

    /// The knob named `name`.
    pub fn from_name(name: &str) -> Option<Knob> {
        Knob::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The knob's value in `m` (cores, or Hz).
    fn value(self, m: &PinnedMode) -> u64 {
        match self {
            Knob::Cores => u64::from(m.cores),
            Knob::Cpu => m.cpu_hz,
            Knob::Gpu => m.gpu_hz,
            Knob::Emc => m.emc_hz,
        }
    }

    /// `m` with this knob at the `i`th entry of its table in `space`.
    fn at(self, space: &ModeSpace, m: PinnedMode, i: usize) -> PinnedMode {
        match self {
            Knob::Cores => PinnedMode {
                cores: space.cores[i],
                ..m
            },
            Knob::Cpu => PinnedMode {
                cpu_hz: space.cpu_hz[i],
                ..m
            },
            Knob::Gpu => PinnedMode {
                gpu_hz: space.gpu_hz[i],
                ..m
            },
            Knob::Emc => PinnedMode {
                emc_hz: space.emc_hz[i],
                ..m
            },
        }
    }

    /// Entries of its table in `space`.
    fn entries(self, space: &ModeSpace) -> usize {
        match self {
            Knob::Cores => space.cores.len(),
            Knob::Cpu => space.cpu_hz.len(),
            Knob::Gpu => space.gpu_hz.len(),
            Knob::Emc => space.emc_hz.len(),
        }
    }
}

/// Spread of the times of one direction's switches, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Times {
    /// Median.
    pub median_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// Longest.
    pub max_ms: f64,
}

impl Times {
    fn of(mut ms: Vec<f64>) -> Option<Times> {
        if ms.is_empty() {
            return None;
        }
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
        Some(Times {
            median_ms: at(0.5),
            p90_ms: at(0.9),
            max_ms: ms[ms.len() - 1],
        })
    }
}

/// One knob's measured switch cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnobCost {
    /// The knob.
    pub knob: Knob,
    /// Its value at the top and at the lower end (cores, or Hz).
    pub between: [u64; 2],
    /// Whether its running clock reads differently at the two ends. False for the cores
    /// (no clock: a switch is done when its writes return) and for a clock this load does
    /// not move; then the times are the switches' writes alone.
    pub moves_clock: bool,
    /// Switches down (top to lower), from the write to the clock settled.
    pub down: Option<Times>,
    /// Switches up.
    pub up: Option<Times>,
    /// Switches whose clock had not settled within [`TIMEOUT`].
    pub unsettled: u32,
    /// Extra energy one switch spends against holding either end, joules (measured by
    /// [`crate::cli`]'s `switch-cost` with the rails sampled; `None` where not measured).
    pub energy_j: Option<f64>,
    /// The resolution of `energy_j` (the sensor's error bound over the switches), joules.
    pub energy_resolution_j: Option<f64>,
}

impl KnobCost {
    /// Its slowest typical switch, ms: the larger 90th percentile of the two directions.
    pub fn p90_ms(&self) -> f64 {
        [self.down, self.up]
            .iter()
            .flatten()
            .map(|t| t.p90_ms)
            .fold(0.0, f64::max)
    }
}

/// A board's measured switch costs: what `jpower switch-cost` keeps in its profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwitchCosts {
    /// [`VERSION`].
    pub version: u32,
    /// The board's model (`Identity::model`).
    pub board: String,
    /// When measured, seconds since the Unix epoch.
    pub measured_unix_s: u64,
    /// Switches timed per direction and knob.
    pub repeats: u32,
    /// Each knob measured.
    pub knobs: Vec<KnobCost>,
}

/// Why a profile could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a profile of this layout.
    #[error("{}:{line}: {message}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The line the parser stopped at.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

impl SwitchCosts {
    /// Where the profile of `board` is kept: `<state dir>/<board key>/switch-costs.json`
    /// ([`crate::support::runtime::state_dir`]).
    pub fn path(board: &Board) -> PathBuf {
        crate::support::runtime::state_dir()
            .join(board.key())
            .join("switch-costs.json")
    }

    /// The cost of `knob`, if measured.
    pub fn knob(&self, knob: Knob) -> Option<&KnobCost> {
        self.knobs.iter().find(|k| k.knob == knob)
    }

    /// The time a switch of the GPU and EMC clocks together costs, ms: the slower of the
    /// two knobs' 90th percentiles (they are written together and settle in parallel),
    /// the GPU's alone where the EMC was not measured (its running rate unreadable: then
    /// an EMC switch's settling is not in the figure). `None` without the GPU's, or where
    /// its running clock did not move (a tree whose clocks are plain files): then nothing
    /// settled, and the writes' time is no switch cost.
    pub fn fast_switch_ms(&self) -> Option<f64> {
        let moved = |k| self.knob(k).filter(|c| c.moves_clock);
        let gpu = moved(Knob::Gpu)?;
        Some(
            moved(Knob::Emc)
                .map_or(0.0, KnobCost::p90_ms)
                .max(gpu.p90_ms()),
        )
    }

    /// Reads a profile; `Ok(None)` where there is none.
    pub fn load(path: &Path) -> Result<Option<SwitchCosts>, ProfileError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(ProfileError::Io {
                    path: path.into(),
                    source,
                })
            }
        };
        let malformed = |line: usize, message: String| ProfileError::Malformed {
            path: path.into(),
            line,
            message,
        };
        let costs: SwitchCosts =
            serde_json::from_str(&text).map_err(|e| malformed(e.line(), e.to_string()))?;
        if costs.version != VERSION {
            return Err(malformed(
                1,
                format!(
                    "profile version {} (this jpower reads {VERSION})",
                    costs.version
                ),
            ));
        }
        Ok(Some(costs))
    }

    /// Writes the profile (a temporary file renamed over it), readable by all.
    ///
    /// Where the state directory is group-writable (`/var/lib/jpower`, 2775 group `jpower`),
    /// the board's folder and the file are made so too, whatever the umask: the profile is
    /// the group's, and any member may measure it again (a review found it 0755 and 0644).
    /// Since any member may also plant links there, none is followed: a board folder that
    /// is a link is refused, the folder's mode is changed through a descriptor opened
    /// without following links (and only if this user owns it), and the file is written
    /// under a new name created without following one, then renamed.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let folder = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(dir)
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("{} (not followed if a link): {e}", dir.display()),
                )
            })?;
        let top = dir.parent().map(std::fs::metadata).transpose()?;
        let shared = top.is_some_and(|m| m.permissions().mode() & 0o020 != 0);
        if shared {
            let m = folder.metadata()?;
            let mode = m.permissions().mode() & 0o7777;
            if mode & 0o2070 != 0o2070 && m.uid() == nix::unistd::geteuid().as_raw() {
                folder.set_permissions(std::fs::Permissions::from_mode(mode | 0o2070))?;
            }
        }
        let tmp = dir.join(format!(".switch-costs.{}.tmp", std::process::id()));
        // A leftover (or a planted link) at the name goes first: removing a link removes
        // the link, never its target.
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if shared { 0o664 } else { 0o644 })
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        if shared {
            file.set_permissions(std::fs::Permissions::from_mode(0o664))?;
        }
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::io::Write::write_all(&mut file, (text + "\n").as_bytes())?;
        std::fs::rename(tmp, path)
    }
}

/// The board's running clocks a knob moves, read raw (each file's unit) into `out`;
/// none for the cores, which have no running clock.
fn running(board: &Board, knob: Knob, out: &mut Vec<u64>) -> Result<(), ControlError> {
    out.clear();
    match knob {
        Knob::Cores => {}
        Knob::Cpu => {
            for c in &board.clusters {
                out.push(c.cur.read_u64()?);
            }
        }
        Knob::Gpu => {
            if let Some(g) = &board.gpu {
                out.push(g.cur.read_u64()?);
            }
        }
        Knob::Emc => {
            if let Some(rate) = board.emc.as_ref().and_then(|e| e.rate.as_ref()) {
                out.push(rate.read_u64()?);
            }
        }
    }
    Ok(())
}

/// Why a knob cannot be measured on this board, if it cannot.
pub fn unmeasurable(board: &Board, knob: Knob) -> Option<&'static str> {
    let space = ModeSpace::of(board);
    if knob.entries(&space) < 2 || knob.value(&top(&space)) == 0 {
        return Some("the board does not let jpower set it");
    }
    match knob {
        Knob::Emc if board.emc.as_ref().is_none_or(|e| e.rate.is_none()) => Some(
            "its running rate (BPMP debugfs) is not readable: run as root with debugfs mounted",
        ),
        _ => None,
    }
}

/// The top pinned mode of `space`.
fn top(space: &ModeSpace) -> PinnedMode {
    PinnedMode {
        cores: space.cores.last().copied().unwrap_or(1),
        cpu_hz: space.cpu_hz.last().copied().unwrap_or(0),
        gpu_hz: space.gpu_hz.last().copied().unwrap_or(0),
        emc_hz: space.emc_hz.last().copied().unwrap_or(0),
    }
}

/// The two ends a knob is switched between: the top mode, and the top with the knob
/// half-way down its table.
pub fn ends(board: &Board, knob: Knob) -> [PinnedMode; 2] {
    let space = ModeSpace::of(board);
    let top = top(&space);
    let n = knob.entries(&space);
    [top, knob.at(&space, top, (n - 1) / 2)]
}

/// Times `repeats` switches each way of `knob` through `ctl` (module docs); the board is
/// left at the top mode. The energy is left `None`.
pub fn measure(ctl: &mut Controller, knob: Knob, repeats: u32) -> Result<KnobCost, ControlError> {
    let ends = ends(ctl.board(), knob);
    let modes = ends.map(|m| m.to_mode(ctl.board()));
    // The rate each end settles at, the top read last: the first switch timed goes down
    // from it (a review found it timing a switch to where the board already was).
    let mut settled = [Vec::new(), Vec::new()];
    for end in [1, 0] {
        ctl.apply(&modes[end])?;
        std::thread::sleep(HOLD);
        running(ctl.board(), knob, &mut settled[end])?;
    }
    let moves_clock = settled[0] != settled[1];
    let mut times = [Vec::new(), Vec::new()];
    let mut unsettled = 0;
    let mut now = Vec::new();
    for _ in 0..repeats {
        // Down to the lower end (index 1), then back up to the top (index 0).
        for to in [1, 0] {
            let started = Instant::now();
            ctl.apply(&modes[to])?;
            loop {
                running(ctl.board(), knob, &mut now)?;
                if now == settled[to] {
                    times[to].push(started.elapsed().as_secs_f64() * 1e3);
                    break;
                }
                if started.elapsed() > TIMEOUT {
                    unsettled += 1;
                    break;
                }
            }
        }
    }
    let [up, down] = times.map(Times::of);
    Ok(KnobCost {
        knob,
        between: ends.map(|m| knob.value(&m)),
        moves_clock,
        down,
        up,
        unsettled,
        energy_j: None,
        energy_resolution_j: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(knob: Knob, p90_ms: [f64; 2]) -> KnobCost {
        let t = |p90_ms| {
            Some(Times {
                median_ms: p90_ms / 2.0,
                p90_ms,
                max_ms: p90_ms * 2.0,
            })
        };
        KnobCost {
            knob,
            between: [2, 1],
            moves_clock: true,
            down: t(p90_ms[0]),
            up: t(p90_ms[1]),
            unsettled: 0,
            energy_j: None,
            energy_resolution_j: None,
        }
    }

    #[test]
    fn a_per_phase_switch_costs_the_slower_fast_knob_and_the_profile_round_trips() {
        let mut costs = SwitchCosts {
            version: VERSION,
            board: "b".into(),
            measured_unix_s: 1,
            repeats: 3,
            knobs: vec![cost(Knob::Emc, [1.5, 1.2]), cost(Knob::Cores, [40.0, 50.0])],
        };
        // The GPU is what a per-phase switch always moves: without it, no figure.
        assert_eq!(costs.fast_switch_ms(), None);
        costs.knobs.push(KnobCost {
            moves_clock: false,
            ..cost(Knob::Gpu, [0.2, 0.3])
        });
        assert_eq!(costs.fast_switch_ms(), None);
        costs.knobs[2].moves_clock = true;
        assert_eq!(costs.fast_switch_ms(), Some(1.5));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b/switch-costs.json");
        assert_eq!(SwitchCosts::load(&path).unwrap(), None);
        costs.save(&path).unwrap();
        assert_eq!(SwitchCosts::load(&path).unwrap(), Some(costs.clone()));
        // Another layout version is refused by name, with the file and line.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"version\": 1", "\"version\": 9")).unwrap();
        let err = SwitchCosts::load(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:1:", path.display())), "{err}");
        assert!(err.contains("version 9"), "{err}");
        // In a group-writable state directory the profile stays the group's, whatever the
        // umask (022 here, as on most systems).
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o2775)).unwrap();
        let shared = state.join("board/switch-costs.json");
        costs.save(&shared).unwrap();
        assert_eq!(mode(&shared), 0o664);
        assert_eq!(mode(shared.parent().unwrap()) & 0o2070, 0o2070);
        // Links planted there are not followed (the diff review: the file's temporary name
        // and the board's folder were, and chmodded their targets).
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "secret").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let tmp = state.join(format!("board/.switch-costs.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        costs.save(&shared).unwrap();
        assert_eq!(mode(&victim), 0o600);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, state.join("linked")).unwrap();
        assert!(costs.save(&state.join("linked/switch-costs.json")).is_err());
        assert_eq!(mode(&elsewhere), 0o700);
        assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
    }
}
