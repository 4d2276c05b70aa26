//! Power modes: what a mode sets, the mode space of a board, and turning a user's request
//! into a valid mode.
//!
//! A [`Mode`] sets, per domain, a frequency range (min, max) or leaves it alone: the online
//! CPUs, each CPU cluster, the GPU, and the EMC cap (a ceiling: locking the memory clock
//! needs root-only debugfs). A mode given as knobs pins min = max (DVFS off, as the papers
//! profile); a preset keeps its file's ranges. Adding a domain (DLA, TPC gating) is adding
//! a field: the planner only acts on what a mode names.
//!
//! The mode space of a board is every valid pinned combination, cores x CPU x GPU x EMC
//! ([`ModeSpace`]), enumerated without allocation as [`PinnedMode`]s.

use crate::board::Board;
use crate::support::units::Freq;
use serde::{Deserialize, Serialize};

/// A frequency range, Hz.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    /// Lowest frequency allowed, Hz.
    pub min_hz: u64,
    /// Highest frequency allowed, Hz.
    pub max_hz: u64,
}

impl Range {
    /// min = max = `hz`.
    pub fn pinned(hz: u64) -> Range {
        Range {
            min_hz: hz,
            max_hz: hz,
        }
    }
}

/// The EMC setting: a cap, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmcLimit {
    /// No cap: the memory clock may run at its maximum.
    Uncapped,
    /// The memory clock may not exceed this rate.
    CapHz(u64),
}

/// CPU numbers, inline up to a board's size (a switch resolves its mode without allocating;
/// a larger tree spills to the heap).
pub type CpuList = smallvec::SmallVec<[usize; 16]>;
/// A range per CPU cluster (`None`: left as it is), inline up to four clusters.
pub type ClusterRanges = smallvec::SmallVec<[Option<Range>; 4]>;

/// What a mode sets; `None` leaves a domain as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mode {
    /// The CPUs to keep online (cpu0 is always among them); the others that
    /// [`Mode::cpus_named`] names go offline.
    pub online_cpus: Option<CpuList>,
    /// The CPUs whose state `online_cpus` decides; `None`: every CPU. An nvpmodel preset
    /// decides only the CPUs its file names, as nvpmodel does (Xavier NX's files leave
    /// cpu6 and cpu7, which the boot scripts take offline, unnamed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_named: Option<CpuList>,
    /// Per cluster, in the board's cluster order (in JSON `min_khz`/`max_khz`, the
    /// protocol's CPU unit).
    #[serde(with = "cpu_khz")]
    pub cpu: ClusterRanges,
    /// The GPU's devfreq range.
    pub gpu: Option<Range>,
    /// The EMC cap.
    pub emc: Option<EmcLimit>,
}

/// The CPU ranges of a [`Mode`] in kHz, as the protocol and every JSON output give CPU
/// clocks (cpufreq's unit); GPU and EMC ranges stay in Hz.
mod cpu_khz {
    use super::Range;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct KhzRange {
        min_khz: u64,
        max_khz: u64,
    }

    pub fn serialize<S: Serializer>(cpu: &[Option<Range>], s: S) -> Result<S::Ok, S::Error> {
        let khz: Vec<Option<KhzRange>> = cpu
            .iter()
            .map(|r| {
                r.map(|r| KhzRange {
                    min_khz: r.min_hz / 1000,
                    max_khz: r.max_hz / 1000,
                })
            })
            .collect();
        khz.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<super::ClusterRanges, D::Error> {
        let khz = Vec::<Option<KhzRange>>::deserialize(d)?;
        Ok(khz
            .into_iter()
            .map(|r| {
                r.map(|r| Range {
                    min_hz: r.min_khz.saturating_mul(1000),
                    max_hz: r.max_khz.saturating_mul(1000),
                })
            })
            .collect())
    }
}

/// One point of the mode space: everything pinned. In JSON the CPU clock is `cpu_khz`, the
/// protocol's CPU unit, like every JSON output's; files written before model version 7 give
/// it as `cpu_hz`, which is still read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "pinned_json::Khz", try_from = "pinned_json::EitherUnit")]
pub struct PinnedMode {
    /// Online cores, the lowest-numbered first.
    pub cores: u32,
    /// CPU frequency of every cluster, Hz.
    pub cpu_hz: u64,
    /// `0` where the board has no GPU control.
    pub gpu_hz: u64,
    /// `0` where the board has no EMC cap.
    pub emc_hz: u64,
}

impl PinnedMode {
    /// A point from its core count and its clocks in MHz (tests' shorthand).
    #[cfg(test)]
    pub(crate) fn mhz(cores: u32, cpu_mhz: u64, gpu_mhz: u64, emc_mhz: u64) -> PinnedMode {
        PinnedMode {
            cores,
            cpu_hz: cpu_mhz * 1_000_000,
            gpu_hz: gpu_mhz * 1_000_000,
            emc_hz: emc_mhz * 1_000_000,
        }
    }

    /// The mode that pins this point on `board`.
    pub fn to_mode(&self, board: &Board) -> Mode {
        Mode {
            online_cpus: Some(
                board
                    .cpus
                    .iter()
                    .map(|c| c.0)
                    .take(self.cores as usize)
                    .collect(),
            ),
            cpus_named: None,
            cpu: board
                .clusters
                .iter()
                .map(|_| (self.cpu_hz > 0).then(|| Range::pinned(self.cpu_hz)))
                .collect(),
            gpu: (self.gpu_hz > 0).then(|| Range::pinned(self.gpu_hz)),
            emc: (self.emc_hz > 0).then_some(EmcLimit::CapHz(self.emc_hz)),
        }
    }
}

/// The JSON forms of a [`PinnedMode`].
mod pinned_json {
    use super::PinnedMode;
    use serde::{Deserialize, Serialize};

    /// What is written: the CPU clock in kHz.
    #[derive(Serialize)]
    pub struct Khz {
        cores: u32,
        cpu_khz: u64,
        gpu_hz: u64,
        emc_hz: u64,
    }

    impl From<PinnedMode> for Khz {
        fn from(m: PinnedMode) -> Khz {
            Khz {
                cores: m.cores,
                cpu_khz: m.cpu_hz / 1000,
                gpu_hz: m.gpu_hz,
                emc_hz: m.emc_hz,
            }
        }
    }

    /// What is read: `cpu_khz`, or the `cpu_hz` of older files.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct EitherUnit {
        cores: u32,
        cpu_khz: Option<u64>,
        cpu_hz: Option<u64>,
        gpu_hz: u64,
        emc_hz: u64,
    }

    impl TryFrom<EitherUnit> for PinnedMode {
        type Error = String;

        fn try_from(m: EitherUnit) -> Result<PinnedMode, String> {
            let cpu_hz = match (m.cpu_khz, m.cpu_hz) {
                (Some(khz), None) => khz
                    .checked_mul(1000)
                    .ok_or_else(|| format!("cpu_khz {khz} is out of range"))?,
                (None, Some(hz)) => hz,
                (Some(_), Some(_)) => return Err("a mode gives both cpu_khz and cpu_hz".into()),
                (None, None) => return Err("a mode lacks cpu_khz".into()),
            };
            Ok(PinnedMode {
                cores: m.cores,
                cpu_hz,
                gpu_hz: m.gpu_hz,
                emc_hz: m.emc_hz,
            })
        }
    }
}

/// The valid pinned modes of a board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeSpace {
    /// Core counts, 1 to the board's CPU count.
    pub cores: Vec<u32>,
    /// CPU frequencies every cluster offers, Hz (`[0]` where they list none in common).
    pub cpu_hz: Vec<u64>,
    /// GPU frequencies, Hz (`[0]` where the board has no GPU control).
    pub gpu_hz: Vec<u64>,
    /// EMC caps, Hz (`[0]` where the board has no EMC cap).
    pub emc_hz: Vec<u64>,
}

impl ModeSpace {
    /// The full space of `board`: 1..=N cores and the CPU frequencies every cluster offers.
    pub fn of(board: &Board) -> ModeSpace {
        let mut cpu_hz: Vec<u64> = board
            .clusters
            .first()
            .map(|c| c.table_hz.clone())
            .unwrap_or_default();
        cpu_hz.retain(|f| board.clusters.iter().all(|c| c.table_hz.contains(f)));
        let or_none = |t: Option<&Vec<u64>>| match t {
            Some(t) if !t.is_empty() => t.clone(),
            _ => vec![0],
        };
        ModeSpace {
            cores: (1..=board.cpu_count() as u32).collect(),
            cpu_hz: or_none(Some(&cpu_hz)),
            gpu_hz: or_none(board.gpu.as_ref().map(|g| &g.table_hz)),
            emc_hz: or_none(board.emc.as_ref().map(|e| &e.table_hz)),
        }
    }

    /// Whether `m` is a mode of this space.
    pub fn contains(&self, m: &PinnedMode) -> bool {
        self.cores.contains(&m.cores)
            && self.cpu_hz.contains(&m.cpu_hz)
            && self.gpu_hz.contains(&m.gpu_hz)
            && self.emc_hz.contains(&m.emc_hz)
    }

    /// Number of modes.
    pub fn len(&self) -> usize {
        self.cores.len() * self.cpu_hz.len() * self.gpu_hz.len() * self.emc_hz.len()
    }

    /// Whether the space is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th mode (cores slowest-varying, EMC fastest).
    pub fn get(&self, i: usize) -> Option<PinnedMode> {
        if i >= self.len() {
            return None;
        }
        let (e, rest) = (i % self.emc_hz.len(), i / self.emc_hz.len());
        let (g, rest) = (rest % self.gpu_hz.len(), rest / self.gpu_hz.len());
        let (c, k) = (rest % self.cpu_hz.len(), rest / self.cpu_hz.len());
        Some(PinnedMode {
            cores: self.cores[k],
            cpu_hz: self.cpu_hz[c],
            gpu_hz: self.gpu_hz[g],
            emc_hz: self.emc_hz[e],
        })
    }

    /// The index of `m` ([`ModeSpace::get`]'s inverse), where it is a mode of this space.
    pub fn index_of(&self, m: &PinnedMode) -> Option<usize> {
        let at = |t: &[u64], v: u64| t.iter().position(|&f| f == v);
        let k = self.cores.iter().position(|&c| c == m.cores)?;
        let (c, g, e) = (
            at(&self.cpu_hz, m.cpu_hz)?,
            at(&self.gpu_hz, m.gpu_hz)?,
            at(&self.emc_hz, m.emc_hz)?,
        );
        Some(((k * self.cpu_hz.len() + c) * self.gpu_hz.len() + g) * self.emc_hz.len() + e)
    }

    /// Every mode, in index order.
    pub fn iter(&self) -> impl Iterator<Item = PinnedMode> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

/// Why a request cannot become a mode.
#[derive(Debug, thiserror::Error)]
pub enum ModeError {
    /// The value is not in the board's table.
    #[error("{domain} frequency {} is not available on this board; nearest: {}; pass --snap to use the nearest", Freq(*requested_hz), nearest_list(domain, .nearest))]
    NotInTable {
        /// `CPU`, `GPU` or `EMC`.
        domain: &'static str,
        /// The frequency asked for, Hz.
        requested_hz: u64,
        /// The table's nearest entries below and above it, Hz.
        nearest: Vec<u64>,
    },
    /// The board does not have this knob.
    #[error("this board has no {0} control")]
    Absent(&'static str),
    /// The knob is there, but its driver lists no frequencies to validate against.
    #[error("this board's {0} lists no available frequencies, so none can be set")]
    NoTable(&'static str),
    /// Cores out of range.
    #[error("--cores {requested}: this board has {available} CPUs (cpu0 always stays online, so 1..={available})")]
    Cores {
        /// The number of cores asked for.
        requested: usize,
        /// The board's CPU count.
        available: usize,
    },
}

/// The nearest entries, each also in the unit a bare number means for its domain (kHz for
/// the CPU, cpufreq's unit; Hz for the GPU and EMC), so it can be pasted back.
fn nearest_list(domain: &str, v: &[u64]) -> String {
    let (per_unit, unit) = if domain == "CPU" {
        (1000, "kHz")
    } else {
        (1, "Hz")
    };
    v.iter()
        .map(|&f| format!("{} ({} {unit})", Freq(f), f / per_unit))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks `hz` against `table`: exact, or nearest with `snap`, else an error naming the
/// nearest entries below and above.
pub fn validate(
    domain: &'static str,
    table: &[u64],
    hz: u64,
    snap: bool,
) -> Result<u64, ModeError> {
    if table.contains(&hz) {
        return Ok(hz);
    }
    if table.is_empty() {
        return Err(ModeError::NoTable(domain));
    }
    let below = table.iter().copied().filter(|&f| f < hz).max();
    let above = table.iter().copied().filter(|&f| f > hz).min();
    if snap {
        let nearest = match (below, above) {
            (Some(b), Some(a)) => Some(if hz - b <= a - hz { b } else { a }),
            (b, a) => b.or(a),
        };
        if let Some(f) = nearest {
            return Ok(f);
        }
    }
    Err(ModeError::NotInTable {
        domain,
        requested_hz: hz,
        nearest: below.into_iter().chain(above).collect(),
    })
}

/// A mode given as knobs (any subset), as the CLI and the socket take it, in Hz.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnobRequest {
    /// CPUs to keep online, the lowest-numbered first.
    pub cores: Option<usize>,
    /// CPU frequency of every cluster, Hz, pinned (min = max).
    pub cpu_hz: Option<u64>,
    /// GPU frequency, Hz, pinned (min = max).
    pub gpu_hz: Option<u64>,
    /// EMC cap, Hz.
    pub emc_hz: Option<u64>,
    /// Use the nearest available value instead of refusing.
    #[serde(default)]
    pub snap: bool,
}

impl KnobRequest {
    /// The pinned mode this request names on `board`.
    pub fn resolve(&self, board: &Board) -> Result<Mode, ModeError> {
        let mut mode = Mode {
            cpu: smallvec::smallvec![None; board.clusters.len()],
            ..Mode::default()
        };
        if let Some(n) = self.cores {
            if n == 0 || n > board.cpu_count() {
                return Err(ModeError::Cores {
                    requested: n,
                    available: board.cpu_count(),
                });
            }
            mode.online_cpus = Some(board.cpus.iter().map(|c| c.0).take(n).collect());
        }
        if let Some(hz) = self.cpu_hz {
            if board.clusters.is_empty() {
                return Err(ModeError::Absent("CPU frequency"));
            }
            for (i, c) in board.clusters.iter().enumerate() {
                mode.cpu[i] = Some(Range::pinned(validate("CPU", &c.table_hz, hz, self.snap)?));
            }
        }
        if let Some(requested) = self.gpu_hz {
            let gpu = board
                .gpu
                .as_ref()
                .ok_or(ModeError::Absent("GPU frequency"))?;
            let hz = validate("GPU", &gpu.table_hz, requested, self.snap)?;
            mode.gpu = Some(Range::pinned(hz));
        }
        if let Some(requested) = self.emc_hz {
            let emc = board
                .emc
                .as_ref()
                .ok_or(ModeError::Absent("EMC (memory) frequency"))?;
            let hz = validate("EMC", &emc.table_hz, requested, self.snap)?;
            mode.emc = Some(EmcLimit::CapHz(hz));
        }
        Ok(mode)
    }

    /// Whether the request names nothing.
    pub fn is_empty(&self) -> bool {
        self.cores.is_none()
            && self.cpu_hz.is_none()
            && self.gpu_hz.is_none()
            && self.emc_hz.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_mode_writes_kilohertz_and_reads_either_unit() {
        let m = PinnedMode::mhz(4, 1190, 306, 2133);
        let j = serde_json::to_value(m).unwrap();
        assert_eq!(
            j,
            serde_json::json!({"cores": 4, "cpu_khz": 1_190_000, "gpu_hz": 306_000_000u64, "emc_hz": 2_133_000_000u64})
        );
        assert_eq!(serde_json::from_value::<PinnedMode>(j).unwrap(), m);
        let old = r#"{"cores":4,"cpu_hz":1190000000,"gpu_hz":306000000,"emc_hz":2133000000}"#;
        assert_eq!(serde_json::from_str::<PinnedMode>(old).unwrap(), m);
        for (bad, says) in [
            (
                r#"{"cores":4,"cpu_khz":1,"cpu_hz":1000,"gpu_hz":0,"emc_hz":0}"#,
                "both",
            ),
            (r#"{"cores":4,"gpu_hz":0,"emc_hz":0}"#, "lacks cpu_khz"),
            (
                r#"{"cores":4,"cpu_khz":18446744073709551615,"gpu_hz":0,"emc_hz":0}"#,
                "out of range",
            ),
        ] {
            let e = serde_json::from_str::<PinnedMode>(bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_mode_gives_cpu_clocks_in_khz_and_gpu_clocks_in_hz() {
        let m = Mode {
            online_cpus: None,
            cpus_named: None,
            cpu: smallvec::smallvec![Some(Range::pinned(729_600_000)), None],
            gpu: Some(Range::pinned(306_000_000)),
            emc: Some(EmcLimit::CapHz(2_133_000_000)),
        };
        let j = serde_json::to_value(&m).unwrap();
        assert_eq!(
            j["cpu"],
            serde_json::json!([{"min_khz": 729_600, "max_khz": 729_600}, null])
        );
        assert_eq!(j["gpu"]["max_hz"], 306_000_000);
        assert_eq!(serde_json::from_value::<Mode>(j).unwrap(), m);
    }

    #[test]
    fn validation_names_the_nearest_values() {
        let t = [114_750_000, 216_750_000, 318_750_000];
        assert_eq!(
            validate("GPU", &t, 216_750_000, false).unwrap(),
            216_750_000
        );
        let e = validate("GPU", &t, 200_000_000, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("114.75 MHz (114750000 Hz), 216.75 MHz (216750000 Hz)"),
            "{e}"
        );
        assert!(e.contains("--snap"), "{e}");
        assert_eq!(validate("GPU", &t, 200_000_000, true).unwrap(), 216_750_000);
        assert_eq!(validate("GPU", &t, 1, true).unwrap(), 114_750_000);
        assert_eq!(validate("GPU", &t, 999_000_000, true).unwrap(), 318_750_000);
        let e = validate("CPU", &[1_190_400_000, 1_267_200_000], 1_300_000_000, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1267.2 MHz (1267200 kHz)"), "{e}");
        // A driver that lists no table: no nearest to offer, and --snap cannot help.
        let e = validate("CPU", &[], 1_190_400_000, true).unwrap_err();
        assert_eq!(
            e.to_string(),
            "this board's CPU lists no available frequencies, so none can be set"
        );
    }

    #[test]
    fn space_indexing_covers_every_mode_once() {
        let s = ModeSpace {
            cores: vec![1, 2, 3],
            cpu_hz: vec![10, 20],
            gpu_hz: vec![5, 6, 7],
            emc_hz: vec![1, 2],
        };
        let all: std::collections::HashSet<_> = s.iter().collect();
        assert_eq!(all.len(), 36);
        assert_eq!(
            s.get(0).unwrap(),
            PinnedMode {
                cores: 1,
                cpu_hz: 10,
                gpu_hz: 5,
                emc_hz: 1
            }
        );
        assert_eq!(s.get(36), None);
        for (i, m) in s.iter().enumerate() {
            assert_eq!(s.index_of(&m), Some(i));
        }
        let outside = PinnedMode {
            gpu_hz: 8,
            ..s.get(0).unwrap()
        };
        assert_eq!(s.index_of(&outside), None);
    }
}
