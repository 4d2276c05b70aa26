//! The SIGMETRICS'23 characterisation on a simulated board: a sweep over power modes
//! (nvpmodel presets or pinned knobs), minibatch sizes, data-loader workers, storage media
//! and cache state, with repeats, each run some epochs of [`datapath::epoch`] in simulated
//! time. A run's seed derives from its configuration ([`Config::seed`]), never from its
//! place in the sweep, so a resumed sweep computes exactly what an uninterrupted one does.
//! Its records and their CSV are the ones a board's sweep writes
//! ([`crate::predict::characterize::runs`]).

use super::datapath::{self, Cache, DataPath, Medium};
use super::power::Operating;
use super::spec::{BoardSpec, PresetSpec};
use super::tree::boot_clocks;
use super::workload::Workload;
use crate::predict::characterize::modes::SweepMode;
use crate::predict::characterize::runs::{self, Config, EpochRow, Run};
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

/// What to sweep: the product of these lists, repeats innermost.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// The board.
    pub spec: &'static BoardSpec,
    /// The workload (one with a dataset: [`datapath::dataset`]).
    pub workload: Workload,
    /// Power modes: presets of the board, or pinned knobs of its mode space.
    pub modes: Vec<SweepMode>,
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
        let modes: Vec<String> = self.modes.iter().map(SweepMode::name).collect();
        let media: Vec<String> = self.media.iter().map(|m| m.name().to_string()).collect();
        runs::product(
            &modes,
            &self.batches,
            &self.workers,
            &media,
            &self.caches,
            self.repeats,
        )
    }

    /// The run of `c`: its epochs on the sweep's one simulated unit.
    pub fn run(&self, c: &Config) -> Run {
        let op = match SweepMode::parse(&c.mode) {
            SweepMode::Pinned(m) => Operating::from(&m),
            SweepMode::Preset(name) => {
                let p =
                    preset(self.spec, &name).expect("a config names one of the sweep's presets");
                let (cpu, gpu, emc) = boot_clocks(self.spec, p);
                Operating {
                    online_cores: p.cores as u32,
                    cpu_hz: cpu as f64 * 1e3,
                    gpu_hz: gpu as f64,
                    emc_hz: emc as f64,
                }
            }
        };
        let d = DataPath {
            batch: c.batch,
            workers: c.workers,
            medium: Medium::from_name(&c.medium).expect("a config names one of the sweep's media"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::spec;

    fn sweep() -> Sweep {
        let spec = spec::find("xavier-agx").unwrap();
        Sweep {
            spec,
            workload: Workload::ResNet18,
            modes: spec
                .presets
                .iter()
                .take(2)
                .map(|p| SweepMode::Preset(p.name.to_string()))
                .collect(),
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
    fn workers_cut_the_stall_and_the_summary_spans_the_repeats() {
        let s = sweep();
        let runs: Vec<Run> = s.configs().iter().map(|c| s.run(c)).collect();
        let sums = runs::summarise(&runs);
        assert_eq!(sums.len(), 8);
        assert!(sums.iter().all(|x| x.runs == 3 && x.time_cv > 0.0));
        // bs16 w0 against bs16 w1 of the first mode.
        assert!(sums[0].mean.stall_s > sums[1].mean.stall_s, "{sums:?}");
        let front = runs::mode_front(&sums);
        assert_eq!(front.len(), 2);
        assert!(front.iter().any(|f| f.pareto));
    }

    #[test]
    fn a_pinned_mode_runs_at_its_knobs() {
        let s = sweep();
        let maxn = s.run(&s.configs()[0]);
        let slow = SweepMode::Pinned(crate::control::mode::PinnedMode {
            cores: 2,
            cpu_hz: s.spec.cpu_khz[0] * 1000,
            gpu_hz: s.spec.gpu.table_hz[0],
            emc_hz: s.spec.emc.table_hz[0],
        });
        let c = Config {
            mode: slow.name(),
            ..s.configs()[0].clone()
        };
        let r = s.run(&c);
        assert!(
            r.epochs[0].time_s > 2.0 * maxn.epochs[0].time_s,
            "{r:?} {maxn:?}"
        );
        assert!(r.epochs[0].power_w < maxn.epochs[0].power_w);
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
    }
}
