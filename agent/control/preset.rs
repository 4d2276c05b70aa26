//! Presets imported from an nvpmodel configuration.
//!
//! The file's absolute paths are mapped to the discovered knobs by kind, not by string,
//! so a file written for one layout (the Orin AGX file names `17000000.ga10b` and
//! `devfreq_dev` paths an L4T 36 tree does not have) still finds the board's GPU, and
//! everything lands under `--root`:
//! - `FILE` parameters writing `/sys/devices/system/cpu/cpuN/online` are core hotplug;
//! - `CLOCK` parameters writing `.../cpuN/cpufreq/scaling_{min,max}_freq` are cpuN's cluster;
//! - `CLOCK` parameters writing a devfreq `min_freq`/`max_freq` of the GPU are the GPU;
//! - `CLOCK` parameters writing `nvpmodel_emc_cap/emc_iso_cap` or `nvpmodel_clk_cap/emc`
//!   are the EMC cap (the `nafll_*` files beside the first are DLA/PVA caps, skipped).
//!
//! Values follow nvpmodel: `-1` is the table's maximum, a lower limit of `0` its minimum,
//! an EMC cap of `0` no cap, and a value between table entries the largest entry below it
//! (reported as snapped). Parameters jpower does not model (DLA, PVA, CVNAS, GPU power
//! control, TPC power gating) are kept as skipped, with the reason.

use crate::board::nvpmodel::{NvpConfig, NvpError, ParamType, Setting, SettingValue};
use crate::board::{Board, KnobKind};
use crate::control::mode::{EmcLimit, Mode, Range};
use serde::Serialize;
use std::path::PathBuf;

/// What a parameter controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Online,
    Cluster(usize),
    Gpu,
    Emc,
    Unmodelled,
}

/// A setting jpower does not apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The nvpmodel parameter (`GPU_POWER_CONTROL_ENABLE`).
    pub param: String,
    /// The parameter's argument (`GPU_PWR_CNTL_EN`).
    pub arg: String,
    /// The value the file sets, as written there.
    pub value: String,
    /// Why jpower does not apply it.
    pub why: &'static str,
}

/// One preset.
#[derive(Debug, Clone, Serialize)]
pub struct Preset {
    /// The nvpmodel mode id.
    pub id: u32,
    /// The nvpmodel mode name (`MAXN`, `MODE_30W`).
    pub name: String,
    /// What it sets on this board.
    pub mode: Mode,
    /// Settings not applied, and why.
    pub skipped: Vec<Skipped>,
    /// Values that were not table entries (`CPU_A78_0 MAX_FREQ 1200000 -> 1190400`).
    pub snapped: Vec<String>,
}

/// The presets of one file.
#[derive(Debug, Clone, Serialize)]
pub struct Presets {
    /// The nvpmodel file (a real path).
    pub source: PathBuf,
    /// The id of the file's default mode.
    pub default_id: u32,
    /// Every mode of the file, in file order.
    pub presets: Vec<Preset>,
    /// What of the board no preset sets while others of its kind are set (CPUs no
    /// preset names, clusters whose clock no preset limits): a file written for another
    /// board leaves them as they are.
    pub unset: Vec<String>,
    /// What of the file does not fit this board, as `file:line: what` (a file written for
    /// another board, or in another unit): parameters about CPUs the board lacks, two
    /// parameters setting one CPU cluster's limit to different values in one mode, values
    /// over ten times off the board's frequency table; each once, with the lines it is on.
    pub warnings: Vec<String>,
}

/// Import errors.
#[derive(Debug, thiserror::Error)]
pub enum PresetError {
    /// The nvpmodel file does not parse.
    #[error(transparent)]
    Parse(#[from] NvpError),
    /// The preset sets a knob whose file is there but unusable: applying the rest would
    /// leave a mode that is not the preset, as if the board lacked that hardware.
    #[error("preset {preset} sets {what}, and {why}: not applied")]
    Unusable {
        /// The preset's name.
        preset: String,
        /// The parameter and argument, as `GPU MAX_FREQ`.
        what: String,
        /// Why it cannot be set.
        why: &'static str,
    },
    /// No preset has the name or id asked for.
    #[error("no preset {wanted:?} in {}; presets: {known}", file.display())]
    Unknown {
        /// The name or id asked for.
        wanted: String,
        /// The nvpmodel file searched.
        file: PathBuf,
        /// The presets there, as `NAME (id)`, comma-separated.
        known: String,
    },
}

const TPC_WHY: &str = "TPC power gating: on a real board a change needs a reboot (nvgpu refuses it once the GPU has been used); jpower does not apply it";
const UNMODELLED_WHY: &str = "not a knob jpower models";
const NO_CPU_TABLE_WHY: &str =
    "this CPU cluster lists no frequencies (its scaling_available_frequencies is missing or empty)";
const NO_GPU_WHY: &str =
    "the board has no GPU frequency control (no GPU devfreq device, or it lists no available_frequencies)";
const NO_EMC_WHY: &str = "the board has no EMC cap control (no nvpmodel clock-cap file)";
const UNUSABLE_GPU_WHY: &str =
    "the GPU's devfreq file is there but cannot be opened or read (see the board's warnings)";
const UNUSABLE_EMC_WHY: &str =
    "the EMC cap file is there but cannot be opened or read (see the board's warnings)";
const NO_EMC_TABLE_WHY: &str = "the board lists no EMC frequencies to cap at";
const NOT_A_NUMBER_WHY: &str = "its value is not an integer";
const CPU0_WHY: &str = "cpu0 cannot go offline (the kernel refuses)";
const NOT_ONLINE_WHY: &str = "an online value is 0 or 1 (the kernel refuses others)";
const NOT_A_LIMIT_WHY: &str = "not a frequency (-1 means the table maximum)";

impl Presets {
    /// Reads and imports the nvpmodel file at `path` (a real path, not a board path).
    pub fn load(path: &std::path::Path, board: &Board) -> Result<Presets, PresetError> {
        Presets::import(&NvpConfig::load(path)?, board)
    }

    /// Maps every mode of `cfg` onto `board`; a value no knob of its kind can take (a
    /// limit below -1, an online value other than 0 and 1, a non-integer) is an error
    /// naming its line.
    pub fn import(cfg: &NvpConfig, board: &Board) -> Result<Presets, PresetError> {
        let kinds: Vec<(String, Kind)> = cfg
            .params
            .iter()
            .map(|p| {
                let paths: Vec<&str> = p.args.iter().map(|a| a.path.as_str()).collect();
                (p.name.clone(), classify(p.ty, &paths, board))
            })
            .collect();
        let kind_of = |name: &str| {
            kinds
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, k)| *k)
                .unwrap_or(Kind::Unmodelled)
        };
        let mut found = Vec::new();
        let presets = cfg
            .modes
            .iter()
            .map(|m| {
                let mut b = Builder::new(board);
                for s in &m.settings {
                    let path = cfg
                        .params
                        .iter()
                        .find(|p| p.name == s.param)
                        .and_then(|p| p.args.iter().find(|a| a.name == s.arg))
                        .map(|a| a.path.as_str());
                    b.apply(kind_of(&s.param), (&s.param, &s.arg, path), s);
                }
                if let Some((line, message)) = b.invalid.take() {
                    return Err(NvpError::Syntax {
                        path: cfg.path.clone(),
                        line,
                        message,
                    });
                }
                found.append(&mut b.misfits);
                Ok(Preset {
                    id: m.id,
                    name: m.name.clone(),
                    mode: b.finish(),
                    skipped: b.skipped,
                    snapped: b.snapped,
                })
            })
            .collect::<Result<Vec<Preset>, NvpError>>()?;
        Ok(Presets {
            source: cfg.path.clone(),
            default_id: cfg.default_mode,
            unset: unset(board, &presets),
            presets,
            warnings: foreign(cfg, board, &kinds)
                .into_iter()
                .chain(Misfit::describe(&cfg.path, &found))
                .collect(),
        })
    }

    /// The preset the knobs at `current` hold, if one does: applying it would change nothing.
    /// A GPU min below the table reads as its lowest entry, which the GPU runs at: devfreq
    /// on L4T 32's 4.9 kernel keeps the `0` that nvpmodel's `GPU MIN_FREQ 0` writes (a
    /// review found every such board "custom").
    pub fn matching(&self, board: &Board, current: &crate::board::Values) -> Option<&Preset> {
        let mut current = current.clone();
        if let Some(gpu) = &board.gpu {
            if let Some(&lo) = gpu.table_hz.first() {
                current[gpu.min] = current[gpu.min].max(lo);
            }
        }
        self.presets.iter().find(|p| {
            crate::control::plan::target(board, &p.mode, &current).is_ok_and(|t| t == current)
        })
    }

    /// A preset by id (as `nvpmodel -m` takes it), else by name (any case): a preset named
    /// `2` does not shadow the preset of id 2.
    /// A preset that sets an unusable knob ([`Board::unusable`]) is an error.
    pub fn find(&self, wanted: &str) -> Result<&Preset, PresetError> {
        let id = wanted.parse().ok();
        let p = self
            .presets
            .iter()
            .find(|p| id == Some(p.id))
            .or_else(|| {
                self.presets
                    .iter()
                    .find(|p| p.name.eq_ignore_ascii_case(wanted))
            })
            .ok_or_else(|| PresetError::Unknown {
                wanted: wanted.to_string(),
                file: self.source.clone(),
                known: self
                    .presets
                    .iter()
                    .map(|p| format!("{} ({})", p.name, p.id))
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        match p
            .skipped
            .iter()
            .find(|s| [UNUSABLE_GPU_WHY, UNUSABLE_EMC_WHY].contains(&s.why))
        {
            Some(s) => Err(PresetError::Unusable {
                preset: p.name.clone(),
                what: format!("{} {}", s.param, s.arg),
                why: s.why,
            }),
            None => Ok(p),
        }
    }
}

/// What of `board` no preset of `presets` sets while others of its kind are set
/// ([`Presets::unset`]).
fn unset(board: &Board, presets: &[Preset]) -> Vec<String> {
    let list = crate::board::sysfs::format_cpu_list;
    let mut out = Vec::new();
    let named: Option<Vec<usize>> = presets.iter().try_fold(Vec::new(), |mut all, p| {
        let m = &p.mode;
        match (&m.online_cpus, &m.cpus_named) {
            (None, _) => Some(all),
            (Some(_), None) => None,
            (Some(_), Some(n)) => {
                all.extend(n);
                Some(all)
            }
        }
    });
    if presets.iter().any(|p| p.mode.online_cpus.is_some()) {
        if let Some(named) = named {
            let never: Vec<usize> = board
                .cpus
                .iter()
                // cpu0 never goes offline: it needs no naming.
                .filter(|(cpu, knob)| *cpu != 0 && knob.is_some() && !named.contains(cpu))
                .map(|(cpu, _)| *cpu)
                .collect();
            if !never.is_empty() {
                out.push(format!(
                    "cpu{} online or offline (no preset names them)",
                    list(&never)
                ));
            }
        }
    }
    let limited = |i: usize| {
        presets
            .iter()
            .any(|p| p.mode.cpu.get(i).is_some_and(Option::is_some))
    };
    if (0..board.clusters.len()).any(limited) {
        let never = board
            .clusters
            .iter()
            .enumerate()
            .filter(|(i, _)| !limited(*i));
        for c in never.map(|(_, c)| c) {
            out.push(format!(
                "policy{} (cpu{}) clocks (no preset limits them)",
                c.policy,
                list(&c.cpus)
            ));
        }
    }
    out
}

/// The parameters of `cfg` about CPUs `board` lacks ([`Presets::warnings`]).
fn foreign(cfg: &NvpConfig, board: &Board, kinds: &[(String, Kind)]) -> Vec<String> {
    let has: Vec<usize> = board.cpus.iter().map(|c| c.0).collect();
    let list = crate::board::sysfs::format_cpu_list;
    let mut out = Vec::new();
    for (p, (_, kind)) in cfg.params.iter().zip(kinds) {
        let mut missing: Vec<usize> = p
            .args
            .iter()
            .filter_map(|a| match kind {
                Kind::Online => cpu_of(&a.path),
                _ if p.ty == ParamType::Clock => cpufreq_cpu_of(&a.path),
                _ => None,
            })
            .filter(|c| !has.contains(c))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            out.push(format!(
                "{}:{}: {} is about cpu{}, which this board lacks (it has cpu{}): a file for another board? what it sets for them is ignored",
                cfg.path.display(), p.line, p.name, list(&missing), list(&has)
            ));
        }
    }
    out
}

/// A setting that does not fit the board, found while building a mode.
#[derive(Debug, Clone, PartialEq)]
enum Misfit {
    /// `second` sets a CPU cluster's limit `side` to another value than `first` did in the
    /// same mode (the TX2's A57 and Denver parameters on a Nano's one cluster).
    Conflict {
        first: (String, usize),
        second: (String, usize),
        cluster: String,
        side: &'static str,
    },
    /// `what` is over ten times `side` the table's `edge` (file units), taken as `taken`.
    OffTable {
        what: String,
        line: usize,
        raw: i64,
        side: &'static str,
        edge: u64,
        taken: u64,
    },
}

impl Misfit {
    /// The warnings of `found` in `file`: each the first time it is found, with the lines
    /// of the later times (a conflict of the same two parameters, the same argument off
    /// the table the same way).
    fn describe(file: &std::path::Path, found: &[Misfit]) -> Vec<String> {
        let mut out: Vec<(String, String, Vec<usize>)> = Vec::new();
        for m in found {
            let (key, line, text) = match m {
                Misfit::Conflict {
                    first,
                    second,
                    cluster,
                    side,
                } => (
                    format!("{} {} {cluster} {side}", first.0, second.0),
                    second.1,
                    format!(
                        "{} sets {cluster}'s {side} to another value than {} (line {}) in the same mode: a file for another board? the later setting wins",
                        second.0, first.0, first.1
                    ),
                ),
                Misfit::OffTable {
                    what,
                    line,
                    raw,
                    side,
                    edge,
                    taken,
                } => (
                    format!("{what} {side}"),
                    *line,
                    format!(
                        "{what} {raw} is over ten times {side} the board's table ({} {edge}): a value in another unit, or a file for another board? taken as {taken}",
                        if *side == "below" { "lowest" } else { "highest" },
                    ),
                ),
            };
            match out.iter_mut().find(|(k, ..)| *k == key) {
                Some((.., later)) => later.push(line),
                None => out.push((
                    key,
                    format!("{}:{line}: {text}", file.display()),
                    Vec::new(),
                )),
            }
        }
        out.into_iter()
            .map(|(_, text, later)| match later.as_slice() {
                [] => text,
                l => format!(
                    "{text} (also lines {})",
                    l.iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
            .collect()
    }
}

/// The CPU a path of `/sys/devices/system/cpu/cpuN/...` is about.
fn cpu_of(path: &str) -> Option<usize> {
    let rest = path.strip_prefix("/sys/devices/system/cpu/cpu")?;
    rest.split('/').next()?.parse().ok()
}

/// The CPU whose cpufreq policy a path is about: `cpuN/cpufreq/...`, or
/// `cpufreq/policyN/...` (a policy is named after its first CPU).
fn cpufreq_cpu_of(path: &str) -> Option<usize> {
    if !path.contains("scaling_") {
        return None;
    }
    if let Some(rest) = path.strip_prefix("/sys/devices/system/cpu/cpufreq/policy") {
        return rest.split('/').next()?.parse().ok();
    }
    path.contains("/cpufreq/").then(|| cpu_of(path)).flatten()
}

fn classify(ty: ParamType, paths: &[&str], board: &Board) -> Kind {
    let any = |f: &dyn Fn(&str) -> bool| paths.iter().any(|p| f(p));
    match ty {
        ParamType::File if any(&|p| cpu_of(p).is_some() && p.ends_with("/online")) => Kind::Online,
        ParamType::Clock
            // Exact files: L4T 32 also puts DLA/PVA/CVNAS caps (`nafll_*`) in nvpmodel_emc_cap.
            if any(&|p| p.ends_with("nvpmodel_emc_cap/emc_iso_cap") || p.ends_with("nvpmodel_clk_cap/emc")) =>
        {
            Kind::Emc
        }
        ParamType::Clock => {
            let cpu = paths.iter().find_map(|p| cpufreq_cpu_of(p));
            if let Some(cpu) = cpu {
                return board
                    .clusters
                    .iter()
                    .position(|c| c.cpus.contains(&cpu))
                    .map_or(Kind::Unmodelled, Kind::Cluster);
            }
            let gpu_names = crate::board::paths::GPU_OF_NAMES;
            let is_gpu = any(&|p| {
                (p.contains("/devfreq/") || p.contains("/devfreq_dev/"))
                    && (p.contains("gpu") || gpu_names.iter().any(|g| p.contains(g)))
            });
            if is_gpu {
                Kind::Gpu
            } else {
                Kind::Unmodelled
            }
        }
        _ => Kind::Unmodelled,
    }
}

/// Collects one mode's settings.
struct Builder<'b> {
    board: &'b Board,
    misfits: Vec<Misfit>,
    online: Option<Vec<(usize, bool)>>,
    cpu: Vec<(Option<u64>, Option<u64>)>,
    /// The parameter and line that set each cluster's (min, max).
    cpu_set_by: Vec<[Option<(String, usize)>; 2]>,
    gpu: (Option<u64>, Option<u64>),
    emc: Option<EmcLimit>,
    skipped: Vec<Skipped>,
    snapped: Vec<String>,
    /// The first value no knob of its kind can take (line, what): the file is refused.
    invalid: Option<(usize, String)>,
}

impl<'b> Builder<'b> {
    fn new(board: &'b Board) -> Self {
        Builder {
            board,
            misfits: Vec::new(),
            online: None,
            cpu: vec![(None, None); board.clusters.len()],
            cpu_set_by: vec![[None, None]; board.clusters.len()],
            gpu: (None, None),
            emc: None,
            skipped: Vec::new(),
            snapped: Vec::new(),
            invalid: None,
        }
    }

    /// A value that is no value of its knob: skipping it would leave a preset that is not
    /// what the file says (a skipped limit's side filled from the table: a typo in a
    /// power-limited preset raised its cap to the top clock), so the file is refused.
    fn invalid(&mut self, line: usize, what: &str, value: &SettingValue, why: &str) {
        let value = match value {
            SettingValue::Int(v) => v.to_string(),
            SettingValue::Text(t) => t.clone(),
        };
        self.invalid
            .get_or_insert_with(|| (line, format!("`{what} {value}`: {why}")));
    }

    /// Whether a knob of one of `kinds` is there but unusable ([`Board::unusable`]).
    fn unusable(&self, kinds: &[KnobKind]) -> bool {
        self.board.unusable.iter().any(|k| kinds.contains(k))
    }

    fn skip(&mut self, param: &str, arg: &str, value: &SettingValue, why: &'static str) {
        let value = match value {
            SettingValue::Int(v) => v.to_string(),
            SettingValue::Text(t) => t.clone(),
        };
        self.skipped.push(Skipped {
            param: param.into(),
            arg: arg.into(),
            value,
            why,
        });
    }

    /// nvpmodel's reading of a limit against `table` (Hz; `scale` Hz per file unit), set
    /// on `line`; a value ten times off the table's range is a warning.
    fn limit(
        &mut self,
        (what, line): (&str, usize),
        table: &[u64],
        raw: i64,
        scale: u64,
        is_min: bool,
    ) -> Option<u64> {
        let (&lo, &hi) = (table.first()?, table.last()?);
        if raw < 0 || (raw == 0 && !is_min) {
            return Some(hi);
        }
        if raw == 0 {
            return Some(lo);
        }
        // Beyond 64 bits in Hz is above every table entry.
        let hz = (raw as u64).saturating_mul(scale);
        let v = table
            .iter()
            .rev()
            .find(|&&f| f <= hz)
            .copied()
            .unwrap_or(lo);
        if v != hz {
            self.snapped.push(format!("{what} {raw} -> {}", v / scale));
        }
        let off = if hz.saturating_mul(10) < lo {
            Some(("below", lo))
        } else {
            (hz / 10 > hi).then_some(("above", hi))
        };
        if let Some((side, edge)) = off {
            self.misfits.push(Misfit::OffTable {
                what: what.to_string(),
                line,
                raw,
                side,
                edge: edge / scale,
                taken: v / scale,
            });
        }
        Some(v)
    }

    /// One setting: `param`'s argument `arg` (at `path`, as the file declares it) to the
    /// setting's value.
    fn apply(
        &mut self,
        kind: Kind,
        (param, arg, path): (&str, &str, Option<&str>),
        setting: &Setting,
    ) {
        let value = &setting.value;
        let int = match value {
            SettingValue::Int(v) => Some(*v),
            SettingValue::Text(t) => t.trim().parse().ok(),
        };
        let is_min = arg.starts_with("MIN_FREQ");
        let what = format!("{param} {arg}");
        match (kind, int) {
            (Kind::Online, Some(v)) if !(0..=1).contains(&v) => {
                self.invalid(setting.line, &what, value, NOT_ONLINE_WHY)
            }
            (Kind::Cluster(_) | Kind::Gpu | Kind::Emc, Some(v)) if v < -1 => {
                self.invalid(setting.line, &what, value, NOT_A_LIMIT_WHY)
            }
            (Kind::Online, Some(v)) => {
                // The CPU its file is about; nvpmodel writes the path, whatever the name.
                let cpu = path
                    .and_then(cpu_of)
                    .or_else(|| arg.strip_prefix("CORE_").and_then(|n| n.parse().ok()));
                match cpu {
                    Some(0) if v == 0 => self.skip(param, arg, value, CPU0_WHY),
                    Some(cpu) => self.online.get_or_insert_with(Vec::new).push((cpu, v != 0)),
                    None => self.skip(param, arg, value, UNMODELLED_WHY),
                }
            }
            (Kind::Cluster(c), Some(_)) if self.board.clusters[c].table_hz.is_empty() => {
                self.skip(param, arg, value, NO_CPU_TABLE_WHY)
            }
            (Kind::Cluster(c), Some(v)) => {
                let table = self.board.clusters[c].table_hz.clone();
                let hz = self.limit((&what, setting.line), &table, v, 1000, is_min);
                let slot = &mut self.cpu[c];
                let (value, side) = if is_min {
                    (&mut slot.0, 0)
                } else {
                    (&mut slot.1, 1)
                };
                let by = &mut self.cpu_set_by[c][side];
                if let (Some(old), Some((first, line))) = (*value, by.as_ref()) {
                    if first != param && hz != Some(old) {
                        let cluster = &self.board.clusters[c];
                        self.misfits.push(Misfit::Conflict {
                            first: (first.clone(), *line),
                            second: (param.to_string(), setting.line),
                            cluster: format!(
                                "policy{} (cpu{})",
                                cluster.policy,
                                crate::board::sysfs::format_cpu_list(&cluster.cpus)
                            ),
                            side: if side == 0 { "MIN_FREQ" } else { "MAX_FREQ" },
                        });
                    }
                }
                *value = hz;
                *by = Some((param.to_string(), setting.line));
            }
            (Kind::Gpu, Some(_))
                if self
                    .board
                    .gpu
                    .as_ref()
                    .is_none_or(|g| g.table_hz.is_empty()) =>
            {
                let why = if self.unusable(&[KnobKind::GpuMin, KnobKind::GpuMax]) {
                    UNUSABLE_GPU_WHY
                } else {
                    NO_GPU_WHY
                };
                self.skip(param, arg, value, why)
            }
            (Kind::Gpu, Some(v)) => {
                let table = self
                    .board
                    .gpu
                    .as_ref()
                    .map(|g| g.table_hz.clone())
                    .unwrap_or_default();
                let hz = self.limit((&what, setting.line), &table, v, 1, is_min);
                if is_min {
                    self.gpu.0 = hz
                } else {
                    self.gpu.1 = hz
                }
            }
            (Kind::Emc, Some(_)) if self.board.emc.is_none() => {
                let why = if self.unusable(&[KnobKind::EmcCap]) {
                    UNUSABLE_EMC_WHY
                } else {
                    NO_EMC_WHY
                };
                self.skip(param, arg, value, why)
            }
            (Kind::Emc, Some(v))
                if v > 0
                    && self
                        .board
                        .emc
                        .as_ref()
                        .is_some_and(|e| e.table_hz.is_empty()) =>
            {
                self.skip(param, arg, value, NO_EMC_TABLE_WHY)
            }
            (Kind::Emc, Some(v)) => {
                let table = self
                    .board
                    .emc
                    .as_ref()
                    .map(|e| e.table_hz.clone())
                    .unwrap_or_default();
                self.emc = if v <= 0 {
                    Some(EmcLimit::Uncapped)
                } else {
                    self.limit((&what, setting.line), &table, v, 1, false)
                        .map(EmcLimit::CapHz)
                };
            }
            (Kind::Online | Kind::Cluster(_) | Kind::Gpu | Kind::Emc, None) => {
                self.invalid(setting.line, &what, value, NOT_A_NUMBER_WHY)
            }
            _ if param.starts_with("TPC_") => self.skip(param, arg, value, TPC_WHY),
            _ => self.skip(param, arg, value, UNMODELLED_WHY),
        }
    }

    fn finish(&self) -> Mode {
        let range = |(min, max): (Option<u64>, Option<u64>), table: &[u64]| {
            if min.is_none() && max.is_none() {
                return None;
            }
            let max = max.or(table.last().copied())?;
            let min = min.or(table.first().copied())?.min(max);
            Some(Range {
                min_hz: min,
                max_hz: max,
            })
        };
        // The last setting of each CPU the file names; the others are left as they are.
        let named = |on: Option<bool>| -> Option<crate::control::mode::CpuList> {
            let set = self.online.as_ref()?;
            Some(
                self.board
                    .cpus
                    .iter()
                    .map(|c| c.0)
                    .filter(|cpu| {
                        let last = set.iter().rev().find(|(c, _)| c == cpu);
                        last.is_some_and(|(_, o)| on.is_none_or(|on| *o == on))
                    })
                    .collect(),
            )
        };
        let cpus_named = named(None).filter(|n| n.len() < self.board.cpus.len());
        Mode {
            online_cpus: named(Some(true)),
            cpus_named,
            cpu: self
                .cpu
                .iter()
                .zip(&self.board.clusters)
                .map(|(&r, c)| range(r, &c.table_hz))
                .collect(),
            gpu: self
                .board
                .gpu
                .as_ref()
                .and_then(|g| range(self.gpu, &g.table_hz)),
            emc: self.emc,
        }
    }
}
