//! Profiling a training workload over power modes: choose modes, switch, wait until
//! minibatch times and power are steady (detected, not a fixed delay), record minibatches, and keep
//! each mode's mean time and power with their spread.
//!
//! Measurements come from a [`Source`]: a simulated workload on a simulated board (in
//! simulated time, so thousands of modes take seconds; `sim::sources`), or a replayed profile (`--truth
//! FILE.csv`, columns `cores,cpu_khz,gpu_hz,emc_hz,time_ms,power_w`, one row per mode) so
//! profiles recorded on a real Jetson can be replayed and scored.

use crate::control::mode::{ModeSpace, PinnedMode};
use crate::support::rng::{self, SplitMix64};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// One mode's time and power (a row of a profile or of a truth file).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Row {
    /// The pinned mode measured.
    pub mode: PinnedMode,
    /// Mean minibatch time, milliseconds.
    pub time_ms: f64,
    /// Mean power, watts.
    pub power_w: f64,
    /// Spread of the recorded minibatches (0 in truth files).
    pub time_std_ms: f64,
    /// Standard deviation of the minibatches' power, watts (0 in truth files).
    pub power_std_w: f64,
}

/// Where minibatches are measured.
pub trait Source {
    /// Runs one minibatch at `mode`, `since_switch` minibatches after switching to it.
    fn minibatch(&mut self, mode: &PinnedMode, since_switch: u32) -> Option<(f64, f64)>;
    /// The noise-free truth at `mode`, where known (for scoring).
    fn truth(&self, mode: &PinnedMode) -> Option<(f64, f64)>;
    /// The modes this source can measure (all of the board's, or a truth file's rows).
    fn modes(&self) -> Vec<PinnedMode>;
}

/// A replayed profile, with optional noise (relative sigma of time and power).
#[derive(Debug, Clone)]
pub struct Replay {
    rows: HashMap<PinnedMode, (f64, f64)>,
    order: Vec<PinnedMode>,
    noise: (f64, f64),
    /// The noise's draw: minibatch `n` of seed `s` is draw `n + (s - 1) 2^40` of one
    /// stream, so each seed has its own stretch and seed 1 starts at its beginning.
    count: u64,
}

impl Replay {
    /// Replays `rows`, with relative noise sigmas `noise` of (time, power), drawn from
    /// `seed`'s stretch of the noise.
    pub fn new(rows: &[Row], noise: (f64, f64), seed: u64) -> Replay {
        Replay {
            rows: rows
                .iter()
                .map(|r| (r.mode, (r.time_ms, r.power_w)))
                .collect(),
            order: rows.iter().map(|r| r.mode).collect(),
            noise,
            count: seed.wrapping_sub(1) << 40,
        }
    }
}

impl Source for Replay {
    fn minibatch(&mut self, mode: &PinnedMode, _since_switch: u32) -> Option<(f64, f64)> {
        let (t, p) = *self.rows.get(mode)?;
        self.count += 1;
        let g = |salt: u64| rng::gaussian(rng::spread(self.count) ^ salt);
        Some((
            t * (1.0 + self.noise.0 * g(1)),
            p * (1.0 + self.noise.1 * g(2)),
        ))
    }

    fn truth(&self, mode: &PinnedMode) -> Option<(f64, f64)> {
        self.rows.get(mode).copied()
    }

    fn modes(&self) -> Vec<PinnedMode> {
        self.order.clone()
    }
}

/// Profile and truth-file errors, with file and line.
pub type ProfileError = crate::support::file_error::FileError;

/// The columns of truth and profile CSV files.
pub const CSV_HEADER: &str = "cores,cpu_khz,gpu_hz,emc_hz,time_ms,power_w";

/// The comment `jpower profile` writes first in a profile of a simulated workload,
/// followed by `WORKLOAD on BOARD`: its rows are the simulator's, so a model fitted on
/// them may be checked by running the simulator ([`simulated_source`]).
pub const SIMULATED_MARK: &str = "# jpower: simulated ";

/// What a profile's first line says it is a profile of: `simulated WORKLOAD on BOARD`
/// where `jpower profile` marked it so ([`SIMULATED_MARK`]), else `None` (recorded, or
/// replayed from a recording).
pub fn simulated_source(text: &str) -> Option<String> {
    let first = text.trim_start_matches('\u{feff}').lines().next()?;
    first
        .strip_prefix(SIMULATED_MARK)
        .map(|what| format!("simulated {}", what.trim()))
}

/// The largest time (ms) or power (W) a profile may hold: anything above is a broken
/// file, and would overflow the arithmetic it feeds.
const PLAUSIBLE: f64 = 1e6;
/// The smallest: a microsecond, a microwatt (below, errors relative to it overflow).
const PLAUSIBLE_MIN: f64 = 1e-6;

/// Reads a truth/profile CSV (extra columns after the six are ignored).
pub fn read_csv(path: &Path) -> Result<Vec<Row>, ProfileError> {
    parse_csv(&crate::support::file_error::read_text(path)?, path)
}

/// Parses the text of a truth/profile CSV read from `path` (which errors name).
pub fn parse_csv(text: &str, path: &Path) -> Result<Vec<Row>, ProfileError> {
    parse_csv_with(text, path, CSV_HEADER)
}

/// Parses CSV text whose six columns are named by `header` (a mode's four knobs, a time in
/// ms and a power in W, as [`CSV_HEADER`] but for their names).
pub fn parse_csv_with(text: &str, path: &Path, header: &str) -> Result<Vec<Row>, ProfileError> {
    parse(text, path, header, None)
}

/// [`parse_csv_with`] for the board named `board`, whose modes are `space`: a row of
/// another mode (a profile of another board, whose figures would score nothing here) is
/// an error naming its line.
pub fn parse_csv_on(
    text: &str,
    path: &Path,
    header: &str,
    (space, board): (&ModeSpace, &str),
) -> Result<Vec<Row>, ProfileError> {
    parse(text, path, header, Some((space, board)))
}

fn parse(
    text: &str,
    path: &Path,
    header: &str,
    on: Option<(&ModeSpace, &str)>,
) -> Result<Vec<Row>, ProfileError> {
    let bad = |line: usize, message: String| crate::support::file_error::FileError::Invalid {
        path: path.to_path_buf(),
        line,
        message,
    };
    let columns: Vec<&str> = header.split(',').collect();
    let mut records = crate::support::csv_text::records(text, path)?.into_iter();
    // Every row has the header's fields (a review found a number written `4,184.2242`
    // taken as two, the columns after it shifted: a 4 ms, 184 W mode).
    let width = match records.next() {
        Some((_, h)) if h.iter().take(columns.len()).eq(columns.iter().copied()) => h.len(),
        Some((line, h)) => {
            return Err(bad(
                line,
                format!(
                    "expected the header {header:?}, found {:?}",
                    h.iter().collect::<Vec<_>>().join(",")
                ),
            ))
        }
        None => return Err(bad(1, "empty file".into())),
    };
    let mut records = records.peekable();
    if records.peek().is_none() {
        return Err(bad(1, "no rows after the header".into()));
    }
    let mut rows = Vec::new();
    let mut seen: HashMap<PinnedMode, usize> = HashMap::new();
    while let Some((line, f)) = records.next() {
        if f.len() < columns.len() {
            // A quote never closed takes the rest of the file into one field: the record
            // is the last, with an odd number of quotes on the line it starts on (an
            // escaped one counts two; what follows, comments included, is the field's).
            let quotes = text
                .lines()
                .nth(line - 1)
                .map_or(0, |l| l.matches('"').count());
            let why = if records.peek().is_none() && quotes % 2 == 1 {
                "a quote (\") opened on this line is never closed".to_string()
            } else {
                format!("{} fields, expected {width} as the header", f.len())
            };
            return Err(bad(line, why));
        }
        if f.len() != width {
            return Err(bad(
                line,
                format!("{} fields, expected {width} as the header", f.len()),
            ));
        }
        let int = |k: usize| {
            f[k].parse::<u64>().map_err(|_| {
                bad(
                    line,
                    format!("{} is not an integer: {:?}", columns[k], &f[k]),
                )
            })
        };
        let real = |k: usize| {
            f[k].parse::<f64>()
                .ok()
                .filter(|v| (PLAUSIBLE_MIN..=PLAUSIBLE).contains(v))
                .ok_or_else(|| {
                    bad(
                        line,
                        format!(
                            "{} is not a number from 1e-6 to 1e6: {:?}",
                            columns[k], &f[k]
                        ),
                    )
                })
        };
        let cores = u32::try_from(int(0)?)
            .ok()
            .filter(|&c| c > 0)
            .ok_or_else(|| bad(line, format!("cores is not a core count: {:?}", &f[0])))?;
        let cpu_hz = int(1)?
            .checked_mul(1000)
            .ok_or_else(|| bad(line, format!("cpu_khz is out of range: {:?}", &f[1])))?;
        let mode = PinnedMode {
            cores,
            cpu_hz,
            gpu_hz: int(2)?,
            emc_hz: int(3)?,
        };
        if let Some((_, board)) = on.filter(|(space, _)| !space.contains(&mode)) {
            return Err(bad(
                line,
                format!(
                    "{cores} cores at {} kHz CPU, {} Hz GPU, {} Hz EMC is not a mode of {board}",
                    mode.cpu_hz / 1000,
                    mode.gpu_hz,
                    mode.emc_hz
                ),
            ));
        }
        if let Some(first) = seen.insert(mode, line) {
            return Err(bad(line, format!("the mode of line {first} again")));
        }
        rows.push(Row {
            mode,
            time_ms: real(4)?,
            power_w: real(5)?,
            time_std_ms: 0.0,
            power_std_w: 0.0,
        });
    }
    Ok(rows)
}

/// Writes rows as CSV (the six columns, then the spreads).
pub fn write_csv(rows: &[Row]) -> String {
    let header: Vec<&str> = CSV_HEADER
        .split(',')
        .chain(["time_std_ms", "power_std_w"])
        .collect();
    crate::support::csv_text::write(
        &header,
        rows.iter().map(|r| {
            [
                r.mode.cores.to_string(),
                (r.mode.cpu_hz / 1000).to_string(),
                r.mode.gpu_hz.to_string(),
                r.mode.emc_hz.to_string(),
                format!("{:.4}", r.time_ms),
                format!("{:.4}", r.power_w),
                format!("{:.4}", r.time_std_ms),
                format!("{:.4}", r.power_std_w),
            ]
        }),
    )
}

/// How minibatches are recorded per mode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProfileConfig {
    /// Minibatches recorded once steady (PowerTrain: 40).
    pub minibatches: u32,
    /// Window of the steadiness test.
    pub window: u32,
    /// Steady when the window's mean time, and its mean power, are each within this
    /// relative distance of the previous window's.
    pub tolerance: f64,
    /// Give up waiting after this many minibatches.
    pub max_warmup: u32,
    /// Seconds a mode switch takes beyond its minibatches (for the profiling cost).
    pub switch_s: f64,
}

impl Default for ProfileConfig {
    fn default() -> Self {
        ProfileConfig {
            minibatches: 40,
            window: 5,
            tolerance: 0.02,
            max_warmup: 60,
            switch_s: 1.0,
        }
    }
}

/// One mode's profile and what it cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profiled {
    /// The mode's mean time and power, with their spread.
    pub row: Row,
    /// Minibatches run before time and power were steady (at most the configured maximum).
    pub warmup: u32,
    /// Simulated (or replayed) seconds spent on this mode.
    pub seconds: f64,
}

/// Profiles one mode: runs until steady, then records `cfg.minibatches`.
pub fn profile_mode(
    src: &mut dyn Source,
    mode: &PinnedMode,
    cfg: &ProfileConfig,
) -> Option<Profiled> {
    let mut seconds = cfg.switch_s;
    let mut since = 0u32;
    let (mut times, mut powers): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    let w = cfg.window.max(2) as usize;
    loop {
        let (t, p) = src.minibatch(mode, since)?;
        since += 1;
        seconds += t / 1000.0;
        times.push(t);
        powers.push(p);
        let n = times.len();
        // Steady when both the time and the power have stopped moving: a power sensor
        // that averages many conversions still reads the previous mode for a while.
        let steady = |v: &[f64]| {
            let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
            let (prev, last) = (mean(&v[n - 2 * w..n - w]), mean(&v[n - w..]));
            ((last - prev) / prev).abs() <= cfg.tolerance
        };
        if n >= 2 * w && steady(&times) && steady(&powers) {
            break;
        }
        if since >= cfg.max_warmup {
            break;
        }
    }
    let warmup = since;
    let (mut ts, mut ps) = (Vec::new(), Vec::new());
    for _ in 0..cfg.minibatches.max(1) {
        let (t, p) = src.minibatch(mode, since)?;
        since += 1;
        seconds += t / 1000.0;
        ts.push(t);
        ps.push(p);
    }
    let stats = |v: &[f64]| {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>()
            / v.len().max(2).saturating_sub(1) as f64;
        (m, var.sqrt())
    };
    let ((tm, tsd), (pm, psd)) = (stats(&ts), stats(&ps));
    Some(Profiled {
        row: Row {
            mode: *mode,
            time_ms: tm,
            power_w: pm,
            time_std_ms: tsd,
            power_std_w: psd,
        },
        warmup,
        seconds,
    })
}

/// How modes are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Every mode the source has.
    All,
    /// `n` modes uniformly at random.
    Random(usize),
    /// `n` modes spread over each knob's range (a Latin-hypercube-like design).
    Stratified(usize),
}

/// Picks modes from `modes` by `strategy` (deterministic from `seed`). Asking for as many
/// modes as there are, or more, gives them all.
pub fn select(modes: &[PinnedMode], strategy: Strategy, seed: u64) -> Vec<PinnedMode> {
    let mut rng = SplitMix64::new(seed);
    let strategy = match strategy {
        Strategy::Random(n) | Strategy::Stratified(n) if n >= modes.len() => Strategy::All,
        s => s,
    };
    match strategy {
        Strategy::All => modes.to_vec(),
        Strategy::Random(n) => {
            let mut idx: Vec<usize> = (0..modes.len()).collect();
            for i in (1..idx.len()).rev() {
                idx.swap(i, rng.below(i + 1));
            }
            idx.into_iter().take(n).map(|i| modes[i]).collect()
        }
        Strategy::Stratified(n) => {
            // Per knob, n evenly spaced strata, each permuted independently; take the
            // available mode nearest to each design point.
            let axes: [Vec<u64>; 4] = [
                uniq(modes.iter().map(|m| u64::from(m.cores))),
                uniq(modes.iter().map(|m| m.cpu_hz)),
                uniq(modes.iter().map(|m| m.gpu_hz)),
                uniq(modes.iter().map(|m| m.emc_hz)),
            ];
            let mut perms: Vec<Vec<usize>> = (0..4).map(|_| (0..n).collect()).collect();
            for p in &mut perms {
                for i in (1..p.len()).rev() {
                    p.swap(i, rng.below(i + 1));
                }
            }
            let pick = |axis: &[u64], k: usize| {
                axis[((k as f64 + 0.5) / n as f64 * axis.len() as f64) as usize % axis.len().max(1)]
            };
            let mut chosen: Vec<PinnedMode> = Vec::new();
            let strata = perms[0].iter().zip(&perms[1]).zip(&perms[2]).zip(&perms[3]);
            for (((&k0, &k1), &k2), &k3) in strata {
                let want = PinnedMode {
                    cores: pick(&axes[0], k0) as u32,
                    cpu_hz: pick(&axes[1], k1),
                    gpu_hz: pick(&axes[2], k2),
                    emc_hz: pick(&axes[3], k3),
                };
                let near = modes
                    .iter()
                    .filter(|m| !chosen.contains(m))
                    .min_by_key(|m| {
                        let d = |a: u64, b: u64, axis: &[u64]| {
                            let (ia, ib) = (
                                axis.binary_search(&a).unwrap_or(0) as i64,
                                axis.binary_search(&b).unwrap_or(0) as i64,
                            );
                            (ia - ib).unsigned_abs()
                        };
                        d(u64::from(m.cores), u64::from(want.cores), &axes[0])
                            + d(m.cpu_hz, want.cpu_hz, &axes[1])
                            + d(m.gpu_hz, want.gpu_hz, &axes[2])
                            + d(m.emc_hz, want.emc_hz, &axes[3])
                    })
                    .copied();
                if let Some(m) = near {
                    chosen.push(m);
                }
            }
            chosen
        }
    }
}

fn uniq(v: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut v: Vec<u64> = v.collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truth_files_round_trip_and_errors_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let rows = vec![Row {
            mode: PinnedMode {
                cores: 4,
                cpu_hz: 1_113_600_000,
                gpu_hz: 318_750_000,
                emc_hz: 204_000_000,
            },
            time_ms: 12.5,
            power_w: 9.25,
            time_std_ms: 0.1,
            power_std_w: 0.2,
        }];
        let p = dir.path().join("t.csv");
        std::fs::write(&p, write_csv(&rows)).unwrap();
        let back = read_csv(&p).unwrap();
        assert_eq!(back[0].mode, rows[0].mode);
        assert_eq!(back[0].time_ms, 12.5);
        std::fs::write(
            &p,
            format!("{CSV_HEADER}\n4,1113600,318750000,204000000,12.5,9.25\n4,x,1,1,1,1\n"),
        )
        .unwrap();
        let e = read_csv(&p).unwrap_err().to_string();
        assert!(
            e.ends_with("t.csv:3: cpu_khz is not an integer: \"x\""),
            "{e}"
        );
        std::fs::write(&p, "a,b\n").unwrap();
        assert!(read_csv(&p)
            .unwrap_err()
            .to_string()
            .contains(":1: expected the header"));
    }

    #[test]
    fn a_truth_file_without_rows_or_with_impossible_values_is_refused_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        for (body, line, what) in [
            ("", 1, "no rows"),
            ("0,729600,1,1,10,5\n", 2, "cores"),
            ("99999999999,729600,1,1,10,5\n", 2, "cores"),
            ("2,18446744073709551615,1,1,10,5\n", 2, "cpu_khz"),
            ("2,729600,1,1,10,1e308\n", 2, "power_w"),
            ("2,729600,1,1,inf,5\n", 2, "time_ms"),
            ("# by hand\n\n2,x,1,1,10,5\n", 4, "cpu_khz"),
            ("\"2,729600\",1,1,10,5\n", 2, "5 fields"),
            // Found by a review: an unclosed quote was reported as too few fields, also
            // on the last line.
            (
                "2,729600,1,1,10,5\n2,\"729600,1,1,10,5\n3,729600,1,1,10,5\n",
                3,
                "never closed",
            ),
            (
                "2,729600,1,1,10,5\n2,\"729600,1,1,10,5\n",
                3,
                "never closed",
            ),
            // Found by the diff's review: quotes in a comment after a short row, or a
            // quote opened on a later line, are not this row's.
            ("2,729600,1,1,10\n# a 5\" screen\n", 2, "5 fields"),
            (
                "2,729600,1,1,10\n2,729600,1,1,10,5\n2,\"729600,1,1,10,5\n",
                2,
                "5 fields",
            ),
            // Found by a review: a row with more fields than the header shifted nothing
            // into an error (`4,184.2` read as a 4 ms, 184 W mode).
            (
                "2,729600,1,1,4,184.2,5\n",
                2,
                "7 fields, expected 6 as the header",
            ),
            ("2,729600,1,1,10,5,\n", 2, "7 fields"),
        ] {
            std::fs::write(&p, format!("{CSV_HEADER}\n{body}")).unwrap();
            let e = read_csv(&p).unwrap_err().to_string();
            assert!(
                e.contains(&format!(":{line}:")) && e.contains(what),
                "{body:?}: {e}"
            );
        }
    }

    #[test]
    fn asking_for_more_modes_than_there_are_gives_them_all() {
        let modes: Vec<PinnedMode> = (1..=5)
            .map(|c| PinnedMode {
                cores: c,
                cpu_hz: 1,
                gpu_hz: 1,
                emc_hz: 1,
            })
            .collect();
        for s in [Strategy::Random(usize::MAX), Strategy::Stratified(5)] {
            assert_eq!(select(&modes, s, 1), modes);
        }
        assert!(select(&[], Strategy::Stratified(3), 1).is_empty());
    }

    #[test]
    fn strategies_pick_distinct_modes() {
        let space = crate::control::mode::ModeSpace {
            cores: (1..=12).collect(),
            cpu_hz: (1..=29).map(|i| i * 100).collect(),
            gpu_hz: (1..=13).map(|i| i * 10).collect(),
            emc_hz: vec![1, 2, 3, 4],
        };
        let modes: Vec<PinnedMode> = space.iter().collect();
        for s in [Strategy::Random(50), Strategy::Stratified(50)] {
            let picked = select(&modes, s, 7);
            let set: std::collections::HashSet<_> = picked.iter().collect();
            assert_eq!(set.len(), 50, "{s:?}");
        }
        let strat = select(&modes, Strategy::Stratified(13), 1);
        let gpus: std::collections::HashSet<_> = strat.iter().map(|m| m.gpu_hz).collect();
        assert!(gpus.len() >= 10, "stratified covers the GPU axis: {gpus:?}");
    }
}
