//! The SIGMETRICS'23 characterisation on a simulated board: a sweep over power modes
//! (nvpmodel presets), minibatch sizes, data-loader workers, storage media and cache state,
//! with repeats, each run some epochs of [`datapath::epoch`] in simulated time. A run's
//! seed derives from its configuration, never from its place in the sweep, so a resumed
//! sweep computes exactly what an uninterrupted one does. Results are rows of CSV text
//! ([`header`], [`Run::rows`]) that [`parse_rows`] reads back for `--resume`, and
//! [`summarise`] gives each configuration's means, coefficient of variation over repeats
//! and whether its power mode is on the (time, energy) Pareto front.

use super::datapath::{self, Cache, DataPath, Medium};
use super::power::Operating;
use super::spec::{BoardSpec, PresetSpec};
use super::tree::boot_clocks;
use super::workload::Workload;
use crate::support::rng::hash;

/// Why a sweep cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// A power mode the board has no preset for.
    #[error("no preset {name:?} on {board} (its presets: {known})")]
    UnknownMode {
        /// The name asked for.
        name: String,
        /// The board.
        board: String,
        /// Its presets' names.
        known: String,
    },
    /// A workload the data path does not model.
    #[error("{0} has no dataset in the data-path model (lenet5, resnet18 or mobilenetv3)")]
    NoDataset(&'static str),
}

/// One run's configuration: everything but the epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The preset's name (`MAXN`, `MODE_30W_ALL`).
    pub mode: String,
    /// Minibatch size.
    pub batch: u32,
    /// Data-loader workers.
    pub workers: u32,
    /// Storage medium of the dataset.
    pub medium: Medium,
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
            self.medium.name(),
            self.cache.name()
        )
    }

    /// The key columns of a CSV row (mode, batch, workers, medium, cache, repeat).
    fn key(&self) -> [String; 6] {
        [
            self.mode.clone(),
            self.batch.to_string(),
            self.workers.to_string(),
            self.medium.name().to_string(),
            self.cache.name().to_string(),
            self.repeat.to_string(),
        ]
    }

    /// The run's seed: a hash of its key, so the same configuration gets the same
    /// epochs wherever it sits in a sweep.
    fn seed(&self) -> u64 {
        self.key()
            .join(",")
            .bytes()
            .fold(0x5EED, |h, b| hash(h ^ u64::from(b)))
    }
}

/// What to sweep: the product of these lists, repeats innermost.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// The board.
    pub spec: &'static BoardSpec,
    /// The workload (one with a dataset: [`datapath::dataset`]).
    pub workload: Workload,
    /// Presets, by name.
    pub modes: Vec<&'static PresetSpec>,
    /// Minibatch sizes.
    pub batches: Vec<u32>,
    /// Data-loader workers.
    pub workers: Vec<u32>,
    /// Storage media.
    pub media: Vec<Medium>,
    /// Cache states.
    pub caches: Vec<Cache>,
    /// Repeats of each configuration.
    pub repeats: u32,
    /// Epochs per run.
    pub epochs: u32,
}

/// The preset of `spec` named `name` (case-insensitive).
pub fn preset(spec: &'static BoardSpec, name: &str) -> Result<&'static PresetSpec, SweepError> {
    spec.presets
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| SweepError::UnknownMode {
            name: name.to_string(),
            board: spec.id(),
            known: spec
                .presets
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

impl Sweep {
    /// Checks that `workload` has a dataset here.
    pub fn check(&self) -> Result<(), SweepError> {
        datapath::dataset(self.workload)
            .map(|_| ())
            .ok_or(SweepError::NoDataset(self.workload.name()))
    }

    /// Every run's configuration, in sweep order.
    pub fn configs(&self) -> Vec<Config> {
        let mut v = Vec::new();
        for p in &self.modes {
            for &batch in &self.batches {
                for &workers in &self.workers {
                    for &medium in &self.media {
                        for &cache in &self.caches {
                            v.extend((0..self.repeats).map(|repeat| Config {
                                mode: p.name.to_string(),
                                batch,
                                workers,
                                medium,
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

    /// The run of `c`: its epochs on the sweep's one simulated unit.
    pub fn run(&self, c: &Config) -> Run {
        let p = preset(self.spec, &c.mode).expect("a config names one of the sweep's presets");
        let (cpu, gpu, emc) = boot_clocks(self.spec, p);
        let op = Operating {
            online_cores: p.cores as u32,
            cpu_hz: cpu as f64 * 1e3,
            gpu_hz: gpu as f64,
            emc_hz: emc as f64,
        };
        let d = DataPath {
            batch: c.batch,
            workers: c.workers,
            medium: c.medium,
            cache: c.cache,
            ram_gib: f64::from(self.spec.ram_gib),
            unit: 0,
        };
        let seed = c.seed();
        let epochs = (0..u64::from(self.epochs))
            .map(|e| {
                let x = datapath::epoch(self.spec.silicon, self.workload, &op, &d, hash(seed ^ e))
                    .expect("checked: the workload has a dataset");
                EpochRow::from(&x)
            })
            .collect();
        Run {
            config: c.clone(),
            epochs,
        }
    }
}

/// One epoch's figures.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
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
    /// Share of the dataset resident in the page cache, 0..=1.
    pub resident: f64,
}

impl From<&datapath::Epoch> for EpochRow {
    fn from(e: &datapath::Epoch) -> EpochRow {
        EpochRow {
            time_s: e.time_s,
            energy_j: e.time_s * e.power_w,
            power_w: e.power_w,
            stall_s: e.stall_s,
            compute_s: e.compute_s,
            util: [e.load.cpu, e.load.gpu, e.load.emc],
            disk_mb_s: e.disk_mb_s,
            resident: e.resident,
        }
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

/// The CSV header: the key, the epoch, then the figures.
pub fn header() -> [&'static str; 17] {
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
    ]
}

impl Run {
    /// Its CSV rows, one per epoch, the header's columns.
    pub fn rows(&self) -> Vec<Vec<String>> {
        self.epochs
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut r: Vec<String> = self.config.key().into();
                r.push(i.to_string());
                r.extend(e.fields().iter().map(|v| format!("{v:.6}")));
                r
            })
            .collect()
    }
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
    if r.len() != header().len() {
        return None;
    }
    let c = Config {
        mode: r[0].to_string(),
        batch: r[1].parse().ok()?,
        workers: r[2].parse().ok()?,
        medium: Medium::from_name(&r[3])?,
        cache: Cache::from_name(&r[4])?,
        repeat: r[5].parse().ok()?,
    };
    let mut v = [0.0; 10];
    for (x, i) in v.iter_mut().zip(7..) {
        *x = r[i].parse::<f64>().ok().filter(|x| x.is_finite())?;
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
    /// Runs (repeats) it has.
    pub runs: usize,
    /// Means over its runs: time, energy, stall, compute, disk bytes per run (all its
    /// epochs summed); power, utilisation, disk throughput and residency time-weighted.
    #[serde(flatten)]
    pub mean: EpochRow,
    /// Coefficient of variation of the run time over repeats (0 for one run).
    pub time_cv: f64,
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
    let mut labels: Vec<String> = Vec::new();
    for r in runs {
        let l = r.config.label();
        if !labels.contains(&l) {
            labels.push(l);
        }
    }
    labels
        .into_iter()
        .map(|label| {
            let mine: Vec<&Run> = runs.iter().filter(|r| r.config.label() == label).collect();
            let total = |f: fn(&EpochRow) -> f64| -> Vec<f64> {
                mine.iter().map(|r| r.epochs.iter().map(f).sum()).collect()
            };
            let mean = |v: Vec<f64>| mean_cv(&v).0;
            let times = total(|e| e.time_s);
            let (time_s, time_cv) = mean_cv(&times);
            let energy_j = mean(total(|e| e.energy_j));
            let weighted = |f: fn(&EpochRow) -> f64| {
                let (w, t) = mine
                    .iter()
                    .flat_map(|r| &r.epochs)
                    .fold((0.0, 0.0), |(w, t), e| (w + f(e) * e.time_s, t + e.time_s));
                w / t.max(f64::MIN_POSITIVE)
            };
            Summary {
                mode: mine[0].config.mode.clone(),
                runs: mine.len(),
                mean: EpochRow {
                    time_s,
                    energy_j,
                    power_w: energy_j / time_s.max(f64::MIN_POSITIVE),
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

/// Each power mode's mean run time and energy over its configurations, and whether it is
/// on the Pareto front (no other mode both faster and using less energy).
pub fn mode_front(summaries: &[Summary]) -> Vec<(String, f64, f64, bool)> {
    let mut modes: Vec<String> = Vec::new();
    for s in summaries {
        if !modes.contains(&s.mode) {
            modes.push(s.mode.clone());
        }
    }
    let points: Vec<(String, f64, f64)> = modes
        .into_iter()
        .map(|m| {
            let mine: Vec<&Summary> = summaries.iter().filter(|s| s.mode == m).collect();
            let n = mine.len() as f64;
            let t = mine.iter().map(|s| s.mean.time_s).sum::<f64>() / n;
            let e = mine.iter().map(|s| s.mean.energy_j).sum::<f64>() / n;
            (m, t, e)
        })
        .collect();
    points
        .iter()
        .map(|(m, t, e)| {
            let dominated = points
                .iter()
                .any(|(_, t2, e2)| t2 <= t && e2 <= e && (t2 < t || e2 < e));
            (m.clone(), *t, *e, !dominated)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::spec;

    fn sweep() -> Sweep {
        let spec = spec::find("xavier-agx").unwrap();
        Sweep {
            spec,
            workload: Workload::ResNet18,
            modes: spec.presets.iter().take(2).collect(),
            batches: vec![16, 32],
            workers: vec![0, 1],
            media: vec![Medium::Sd],
            caches: vec![Cache::Warm],
            repeats: 3,
            epochs: 2,
        }
    }

    #[test]
    fn a_runs_figures_depend_on_its_configuration_not_its_place() {
        let s = sweep();
        let configs = s.configs();
        assert_eq!(configs.len(), 2 * 2 * 2 * 3);
        let forward: Vec<Run> = configs.iter().map(|c| s.run(c)).collect();
        let backward: Vec<Run> = configs.iter().rev().map(|c| s.run(c)).collect();
        assert!(forward.iter().eq(backward.iter().rev()));
        // Repeats differ, as epochs of one unit do.
        assert_ne!(forward[0].epochs[0].time_s, forward[1].epochs[0].time_s);
        let e = &forward[0].epochs[0];
        assert!((e.stall_s + e.compute_s - e.time_s).abs() < 1e-9 * e.time_s);
    }

    #[test]
    fn rows_read_back_and_a_cut_short_run_is_dropped() {
        let s = sweep();
        let runs: Vec<Run> = s.configs().iter().take(3).map(|c| s.run(c)).collect();
        let mut rows: Vec<Vec<String>> = runs.iter().flat_map(Run::rows).collect();
        rows.pop(); // the last run lost its second epoch
        let text = crate::support::csv_text::write(&header(), rows);
        let recs: Vec<csv::StringRecord> =
            crate::support::csv_text::records(&text, std::path::Path::new("runs.csv"))
                .unwrap()
                .into_iter()
                .map(|(_, r)| r)
                .collect();
        let back = parse_rows(&recs, 2);
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].rows(), runs[0].rows());
        assert_eq!(back[1].config, runs[1].config);
    }

    #[test]
    fn workers_cut_the_stall_and_the_summary_spans_the_repeats() {
        let s = sweep();
        let runs: Vec<Run> = s.configs().iter().map(|c| s.run(c)).collect();
        let sums = summarise(&runs);
        assert_eq!(sums.len(), 8);
        assert!(sums.iter().all(|x| x.runs == 3 && x.time_cv > 0.0));
        // bs16 w0 against bs16 w1 of the first mode.
        assert!(sums[0].mean.stall_s > sums[1].mean.stall_s, "{sums:?}");
        let front = mode_front(&sums);
        assert_eq!(front.len(), 2);
        assert!(front.iter().any(|f| f.3));
    }

    #[test]
    fn unknown_modes_and_workloads_without_data_are_named() {
        let s = sweep();
        let e = preset(s.spec, "TURBO").unwrap_err().to_string();
        assert!(e.contains("TURBO") && e.contains("MAXN"), "{e}");
        let bad = Sweep {
            workload: Workload::Lstm,
            ..s
        };
        assert!(bad.check().unwrap_err().to_string().contains("lstm"));
        assert_eq!(mean_cv(&[1.0, 3.0]), (2.0, 2f64.sqrt() / 2.0));
    }
}
