//! The records of a characterisation sweep, whoever runs it (a simulated board in simulated
//! time, or a board in real time through the agent): a run's configuration ([`Config`]),
//! its epochs ([`EpochRow`]), their CSV text ([`header`], [`Run::rows`], read back by
//! [`parse_rows`] for `--resume`), and per configuration the means and the coefficient of
//! variation over repeats ([`summarise`]) and the power modes' (time, energy) Pareto front
//! ([`mode_front`]). A figure the run could not measure (an EMC activity counter the board
//! lacks, a dataset on a device `/proc/diskstats` does not list) is NaN: an empty CSV
//! field and `null` in JSON, never 0.

use crate::support::rng::hash;
use std::collections::HashMap;

/// The page cache at the start of each epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cache {
    /// The dataset's pages dropped before every epoch.
    Dropped,
    /// Warm: whatever of the dataset fits is resident.
    Warm,
}

impl Cache {
    /// `dropped` or `warm`.
    pub fn name(self) -> &'static str {
        match self {
            Cache::Dropped => "dropped",
            Cache::Warm => "warm",
        }
    }

    /// The cache state with this [`Cache::name`].
    pub fn from_name(s: &str) -> Option<Cache> {
        [Cache::Dropped, Cache::Warm]
            .into_iter()
            .find(|c| c.name() == s)
    }
}

/// One run's configuration: everything but the epoch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Config {
    /// The power mode: a preset's name (`MAXN`, `MODE_30W_ALL`) or pinned knobs
    /// ([`super::modes::Mode::name`]).
    pub mode: String,
    /// Minibatch size.
    pub batch: u32,
    /// Data-loader workers.
    pub workers: u32,
    /// Where the dataset lives: a storage medium's name (`sd`, `nvme`, or the name given
    /// to a dataset directory).
    pub medium: String,
    /// Page cache at each epoch's start.
    pub cache: Cache,
    /// Repeat index, from 0.
    pub repeat: u32,
}

impl Config {
    /// The fields that name the configuration, as CSV writes them (without the repeat).
    pub fn label(&self) -> String {
        format!(
            "{} bs{} w{} {} {}",
            self.mode,
            self.batch,
            self.workers,
            self.medium,
            self.cache.name()
        )
    }

    /// The key columns of a CSV row (mode, batch, workers, medium, cache, repeat).
    fn key(&self) -> [String; 6] {
        [
            self.mode.clone(),
            self.batch.to_string(),
            self.workers.to_string(),
            self.medium.clone(),
            self.cache.name().to_string(),
            self.repeat.to_string(),
        ]
    }

    /// The run's seed: a hash of its key, so the same configuration gets the same
    /// epochs (simulated) or sample order (real) wherever it sits in a sweep.
    pub fn seed(&self) -> u64 {
        self.key()
            .join(",")
            .bytes()
            .fold(0x5EED, |h, b| hash(h ^ u64::from(b)))
    }
}

/// Every configuration of the product of these lists, in sweep order (modes outermost,
/// repeats innermost).
pub fn product(
    modes: &[String],
    batches: &[u32],
    workers: &[u32],
    media: &[String],
    caches: &[Cache],
    repeats: u32,
) -> Vec<Config> {
    let mut v = Vec::new();
    for mode in modes {
        for &batch in batches {
            for &w in workers {
                for medium in media {
                    for &cache in caches {
                        v.extend((0..repeats).map(|repeat| Config {
                            mode: mode.clone(),
                            batch,
                            workers: w,
                            medium: medium.clone(),
                            cache,
                            repeat,
                        }));
                    }
                }
            }
        }
    }
    v
}

/// One epoch's figures (in JSON, its utilisations as `cpu_util`, `gpu_util`, `emc_util`,
/// as the CSV names them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochRow {
    /// Epoch time, s.
    pub time_s: f64,
    /// Energy, J.
    pub energy_j: f64,
    /// Mean module power, W.
    pub power_w: f64,
    /// Time waiting for data, s.
    pub stall_s: f64,
    /// Time computing, s.
    pub compute_s: f64,
    /// Mean CPU, GPU, EMC utilisation, 0..=1.
    pub util: [f64; 3],
    /// Read throughput of the dataset's device, MB/s.
    pub disk_mb_s: f64,
    /// Share of the dataset resident in the page cache at the epoch's start, 0..=1.
    pub resident: f64,
}

impl serde::Serialize for EpochRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Named {
            time_s: f64,
            energy_j: f64,
            power_w: f64,
            stall_s: f64,
            compute_s: f64,
            cpu_util: f64,
            gpu_util: f64,
            emc_util: f64,
            disk_mb_s: f64,
            resident: f64,
        }
        let [cpu_util, gpu_util, emc_util] = self.util;
        Named {
            time_s: self.time_s,
            energy_j: self.energy_j,
            power_w: self.power_w,
            stall_s: self.stall_s,
            compute_s: self.compute_s,
            cpu_util,
            gpu_util,
            emc_util,
            disk_mb_s: self.disk_mb_s,
            resident: self.resident,
        }
        .serialize(s)
    }
}

impl EpochRow {
    /// The figures in the CSV's order (the header after `epoch`).
    fn fields(&self) -> [f64; 10] {
        [
            self.time_s,
            self.energy_j,
            self.power_w,
            self.stall_s,
            self.compute_s,
            self.util[0],
            self.util[1],
            self.util[2],
            self.disk_mb_s,
            self.resident,
        ]
    }
}

/// One finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Its configuration.
    pub config: Config,
    /// Its epochs, in order.
    pub epochs: Vec<EpochRow>,
}

/// The CSV header: the key, the epoch, the figures, then the run time's coefficient of
/// variation over the configuration's repeats (empty in rows appended as runs finish,
/// filled when the sweep ends or stops).
pub fn header() -> [&'static str; 18] {
    [
        "mode",
        "batch",
        "workers",
        "medium",
        "cache",
        "repeat",
        "epoch",
        "time_s",
        "energy_j",
        "power_w",
        "stall_s",
        "compute_s",
        "cpu_util",
        "gpu_util",
        "emc_util",
        "disk_mb_s",
        "resident",
        "time_cv",
    ]
}

/// A figure as CSV writes it: six decimals, empty when absent (NaN).
fn field(v: f64) -> String {
    if v.is_nan() {
        String::new()
    } else {
        format!("{v:.6}")
    }
}

impl Run {
    /// Its CSV rows, one per epoch, the header's columns; `time_cv` as [`Summary::time_cv`]
    /// gives it, or `None` (an empty field) before the configuration's repeats are known.
    pub fn rows(&self, time_cv: Option<f64>) -> Vec<Vec<String>> {
        self.epochs
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut r: Vec<String> = self.config.key().into();
                r.push(i.to_string());
                r.extend(e.fields().iter().map(|&v| field(v)));
                r.push(time_cv.map_or_else(String::new, field));
                r
            })
            .collect()
    }
}

/// Every run's rows, `time_cv` filled from its configuration's [`Summary`].
pub fn rows_with_cv(runs: &[Run], sums: &[Summary]) -> Vec<Vec<String>> {
    let cv: HashMap<&str, Option<f64>> =
        sums.iter().map(|s| (s.label.as_str(), s.time_cv)).collect();
    runs.iter()
        .flat_map(|r| r.rows(cv.get(r.config.label().as_str()).copied().flatten()))
        .collect()
}

/// The runs in CSV `records` (header first) that have all `epochs` epochs and every
/// field readable; anything else (a run cut short by a kill) is left out, to run again.
pub fn parse_rows(records: &[csv::StringRecord], epochs: u32) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for r in records.iter().skip(1) {
        let Some((c, e, row)) = parse_row(r) else {
            continue;
        };
        match runs.last_mut() {
            Some(last) if last.config == c && last.epochs.len() == e => last.epochs.push(row),
            _ if e == 0 => runs.push(Run {
                config: c,
                epochs: vec![row],
            }),
            _ => {}
        }
    }
    runs.retain(|r| r.epochs.len() == epochs as usize);
    runs
}

fn parse_row(r: &csv::StringRecord) -> Option<(Config, usize, EpochRow)> {
    if r.len() != header().len() || r[3].is_empty() {
        return None;
    }
    let c = Config {
        mode: r[0].to_string(),
        batch: r[1].parse().ok()?,
        workers: r[2].parse().ok()?,
        medium: r[3].to_string(),
        cache: Cache::from_name(&r[4])?,
        repeat: r[5].parse().ok()?,
    };
    let mut v = [0.0; 10];
    for (x, i) in v.iter_mut().zip(7..) {
        *x = match &r[i] {
            "" => f64::NAN,
            s => s.parse::<f64>().ok().filter(|x| x.is_finite())?,
        };
    }
    // An epoch without a positive time and energy is no measurement: dropped, so it runs
    // again (as a row that does not parse is).
    if !(v[0] > 0.0 && v[1] > 0.0) {
        return None;
    }
    let row = EpochRow {
        time_s: v[0],
        energy_j: v[1],
        power_w: v[2],
        stall_s: v[3],
        compute_s: v[4],
        util: [v[5], v[6], v[7]],
        disk_mb_s: v[8],
        resident: v[9],
    };
    Some((c, r[6].parse().ok()?, row))
}

/// A configuration over its repeats: means of the per-run totals and their spread.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    /// The configuration's label ([`Config::label`]).
    pub label: String,
    /// Its power mode.
    pub mode: String,
    /// Its minibatch size.
    pub batch: u32,
    /// Its data-loader workers.
    pub workers: u32,
    /// Its dataset's medium.
    pub medium: String,
    /// Its page cache at each epoch's start (`dropped`, `warm`).
    pub cache: &'static str,
    /// Runs (repeats) it has.
    pub runs: usize,
    /// Means over its runs: time, energy, stall and compute per run (all its epochs
    /// summed); power as the epochs' (their energy over the time metered); utilisation,
    /// disk throughput and residency time-weighted over the epochs that measured them (NaN
    /// where none did).
    #[serde(flatten)]
    pub mean: EpochRow,
    /// Coefficient of variation of the run time over repeats (`None` for one run: not
    /// measured).
    pub time_cv: Option<f64>,
    /// Each repeat's time, s.
    pub times_s: Vec<f64>,
}

/// Mean and coefficient of variation (sample standard deviation over the mean).
pub fn mean_cv(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 || mean == 0.0 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt() / mean)
}

/// One [`Summary`] per configuration of `runs`, in the order they first appear.
pub fn summarise(runs: &[Run]) -> Vec<Summary> {
    // Each run's label once: a sweep of tens of thousands of runs stays linear.
    let mut groups: Vec<(String, Vec<&Run>)> = Vec::new();
    let mut group_of: HashMap<String, usize> = HashMap::new();
    for r in runs {
        let label = r.config.label();
        let i = match group_of.get(&label) {
            Some(&i) => i,
            None => {
                group_of.insert(label.clone(), groups.len());
                groups.push((label, Vec::new()));
                groups.len() - 1
            }
        };
        groups[i].1.push(r);
    }
    groups
        .into_iter()
        .map(|(label, mine)| {
            let total = |f: fn(&EpochRow) -> f64| -> Vec<f64> {
                mine.iter().map(|r| r.epochs.iter().map(f).sum()).collect()
            };
            let mean = |v: Vec<f64>| mean_cv(&v).0;
            let times = total(|e| e.time_s);
            let (time_s, cv) = mean_cv(&times);
            let time_cv = (times.len() > 1).then_some(cv);
            let energy_j = mean(total(|e| e.energy_j));
            // Power as each epoch's is: its energy over the time it was metered (a --run
            // command's minibatches, not its start-up), which each epoch's energy over its
            // power gives back.
            let metered_s = mean(total(|e| {
                if e.power_w > 0.0 {
                    e.energy_j / e.power_w
                } else {
                    e.time_s
                }
            }));
            let weighted = |f: fn(&EpochRow) -> f64| {
                let (w, t) = mine
                    .iter()
                    .flat_map(|r| &r.epochs)
                    .filter(|e| !f(e).is_nan())
                    .fold((0.0, 0.0), |(w, t), e| (w + f(e) * e.time_s, t + e.time_s));
                if t > 0.0 {
                    w / t
                } else {
                    f64::NAN
                }
            };
            let c = &mine[0].config;
            Summary {
                mode: c.mode.clone(),
                batch: c.batch,
                workers: c.workers,
                medium: c.medium.clone(),
                cache: c.cache.name(),
                runs: mine.len(),
                mean: EpochRow {
                    time_s,
                    energy_j,
                    power_w: energy_j / metered_s.max(f64::MIN_POSITIVE),
                    stall_s: mean(total(|e| e.stall_s)),
                    compute_s: mean(total(|e| e.compute_s)),
                    util: [
                        weighted(|e| e.util[0]),
                        weighted(|e| e.util[1]),
                        weighted(|e| e.util[2]),
                    ],
                    disk_mb_s: weighted(|e| e.disk_mb_s),
                    resident: weighted(|e| e.resident),
                },
                time_cv,
                times_s: times,
                label,
            }
        })
        .collect()
}

/// A power mode's place among the sweep's modes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModePoint {
    /// The mode's name.
    pub mode: String,
    /// Mean run time over the configurations every mode ran, s (NaN over none).
    pub time_s: f64,
    /// Mean run energy over the same configurations, J.
    pub energy_j: f64,
    /// Their mean power, W (the energy over the time).
    pub power_w: f64,
    /// The configurations (all but the mode) the means are over: those every mode of the
    /// sweep ran, so that an interrupted sweep's modes are compared on equal terms.
    pub configurations: usize,
    /// Whether no other mode is both faster and uses less energy.
    pub pareto: bool,
}

/// Each power mode's mean run time and energy over the configurations every mode ran
/// (`summaries` of an interrupted sweep may lack some of a mode's), and whether it is on
/// the Pareto front.
pub fn mode_front(summaries: &[Summary]) -> Vec<ModePoint> {
    let mut modes: Vec<&str> = Vec::new();
    for s in summaries {
        if !modes.contains(&s.mode.as_str()) {
            modes.push(&s.mode);
        }
    }
    // A configuration apart from its mode: the label after the mode's name.
    fn rest(s: &Summary) -> &str {
        s.label.strip_prefix(s.mode.as_str()).unwrap_or(&s.label)
    }
    // Each configuration with the number of modes that ran it (a summary per pair).
    let mut ran: HashMap<&str, usize> = HashMap::new();
    for s in summaries {
        *ran.entry(rest(s)).or_default() += 1;
    }
    ran.retain(|_, n| *n == modes.len());
    let points: Vec<(&str, f64, f64)> = modes
        .iter()
        .map(|&m| {
            let mine: Vec<&Summary> = summaries
                .iter()
                .filter(|s| s.mode == m && ran.contains_key(rest(s)))
                .collect();
            let n = mine.len() as f64;
            let t = mine.iter().map(|s| s.mean.time_s).sum::<f64>() / n;
            let e = mine.iter().map(|s| s.mean.energy_j).sum::<f64>() / n;
            (m, t, e)
        })
        .collect();
    points
        .iter()
        .map(|&(m, t, e)| {
            let dominated = points
                .iter()
                .any(|&(_, t2, e2)| t2 <= t && e2 <= e && (t2 < t || e2 < e));
            ModePoint {
                mode: m.to_string(),
                time_s: t,
                energy_j: e,
                power_w: e / t,
                configurations: ran.len(),
                // A mode whose time or energy was not measured is on no front.
                pareto: !dominated && t.is_finite() && e.is_finite(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mode: &str, repeat: u32, time_s: f64, gpu: f64) -> Run {
        let e = EpochRow {
            time_s,
            energy_j: 10.0 * time_s,
            power_w: 10.0,
            stall_s: 0.25 * time_s,
            compute_s: 0.75 * time_s,
            util: [0.5, gpu, f64::NAN],
            disk_mb_s: 40.0,
            resident: 0.5,
        };
        Run {
            config: Config {
                mode: mode.into(),
                batch: 16,
                workers: 1,
                medium: "nvme".into(),
                cache: Cache::Warm,
                repeat,
            },
            epochs: vec![e, e],
        }
    }

    fn records(rows: Vec<Vec<String>>) -> Vec<csv::StringRecord> {
        let text = crate::support::csv_text::write(&header(), rows);
        crate::support::csv_text::records(&text, std::path::Path::new("runs.csv"))
            .unwrap()
            .into_iter()
            .map(|(_, r)| r)
            .collect()
    }

    #[test]
    fn rows_read_back_absent_figures_stay_absent_and_a_cut_short_run_is_dropped() {
        let runs = [
            run("A", 0, 2.0, 0.9),
            run("A", 1, 2.2, 0.8),
            run("B", 0, 4.0, 0.4),
        ];
        let mut rows: Vec<Vec<String>> = runs.iter().flat_map(|r| r.rows(None)).collect();
        assert_eq!(
            rows[0][14], "",
            "an absent EMC utilisation is an empty field"
        );
        assert_eq!(rows[0][17], "", "no CV before the sweep ends");
        rows.pop(); // the last run lost its second epoch
        let mut bad_time = rows.clone();
        let back = parse_rows(&records(rows), 2);
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].rows(None), runs[0].rows(None));
        assert!(back[0].epochs[0].util[2].is_nan());
        // An epoch without a time, or a negative one, is no measurement: its run goes
        // (and runs again), where it once made a NaN or a short mean.
        bad_time[0][7] = String::new();
        bad_time[2][7] = "-1.5".into();
        assert!(parse_rows(&records(bad_time), 2).is_empty());
    }

    /// Found by a review: an interrupted sweep's mode means were over whichever of its
    /// configurations had run, so a mode that ran only its fast ones took another off the
    /// front. They are over the configurations every mode ran.
    #[test]
    fn modes_are_compared_over_the_configurations_every_mode_ran() {
        let at = |mode: &str, workers: u32, time_s: f64| {
            let mut r = run(mode, 0, time_s, 0.5);
            r.config.workers = workers;
            r
        };
        // A ran workers 0 and 1; B, interrupted, only workers 1 (the fast one).
        let runs = [at("A", 0, 9.0), at("A", 1, 3.0), at("B", 1, 4.0)];
        let front = mode_front(&summarise(&runs));
        // (Each test run has two epochs of its time.)
        assert_eq!((front[0].time_s, front[1].time_s), (6.0, 8.0));
        assert_eq!(front[0].configurations, 1);
        assert!(front[0].pareto && !front[1].pareto, "{front:?}");
        // Nothing in common: no means, no front.
        let front = mode_front(&summarise(&[at("A", 0, 9.0), at("B", 1, 4.0)]));
        assert!(
            front.iter().all(|p| p.time_s.is_nan() && !p.pareto),
            "{front:?}"
        );
    }

    #[test]
    fn the_final_rows_carry_each_configurations_cv_and_still_read_back() {
        let runs = [
            run("A", 0, 2.0, 0.9),
            run("A", 1, 2.2, 0.8),
            run("B", 0, 4.0, 0.4),
        ];
        let sums = summarise(&runs);
        let rows = rows_with_cv(&runs, &sums);
        let cv = mean_cv(&[4.0, 4.4]).1;
        assert_eq!(rows[0][17], format!("{cv:.6}"));
        // One run has no spread to measure: an empty field, not 0 (found by review).
        assert_eq!(rows[4][17], "");
        let back = parse_rows(&records(rows), 2);
        let text = |r: &[Run]| r.iter().flat_map(|r| r.rows(None)).collect::<Vec<_>>();
        assert_eq!(text(&back), text(&runs));
    }

    #[test]
    fn summaries_weigh_what_was_measured_and_the_front_drops_dominated_modes() {
        let runs = [
            run("A", 0, 2.0, 0.9),
            run("A", 1, 2.2, 0.8),
            run("B", 0, 4.0, 0.4),
        ];
        let sums = summarise(&runs);
        assert_eq!(sums.len(), 2);
        assert_eq!(sums[0].runs, 2);
        assert!((sums[0].mean.time_s - 4.2).abs() < 1e-12);
        let gpu = (0.9 * 4.0 + 0.8 * 4.4) / 8.4;
        assert!((sums[0].mean.util[1] - gpu).abs() < 1e-12);
        assert!(sums[0].mean.util[2].is_nan(), "never measured: absent");
        let front = mode_front(&sums);
        assert!(front[0].pareto && !front[1].pareto, "{front:?}");
        // Found by review: a mode whose energy was not measured (NaN) dominated nothing and
        // was dominated by nothing, so it sat on the front.
        let mut unmeasured = sums.clone();
        unmeasured[1].mean.energy_j = f64::NAN;
        assert!(!mode_front(&unmeasured)[1].pareto);
        assert_eq!(mean_cv(&[1.0, 3.0]), (2.0, 2f64.sqrt() / 2.0));
    }

    #[test]
    fn a_seed_follows_the_key() {
        let a = run("A", 0, 1.0, 0.5).config;
        let mut b = a.clone();
        assert_eq!(a.seed(), b.seed());
        b.repeat = 1;
        assert_ne!(a.seed(), b.seed());
    }
}
