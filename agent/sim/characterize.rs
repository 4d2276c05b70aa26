//! The SIGMETRICS'23 characterisation on a simulated board: a sweep over power modes
//! (nvpmodel presets or pinned knobs), minibatch sizes, data-loader workers, storage media
//! and cache state, with repeats, each run some epochs of [`datapath::epoch`] in simulated
//! time. A run's seed derives from its configuration ([`Config::seed`]), never from its
//! place in the sweep, so a resumed sweep computes exactly what an uninterrupted one does.
//! Its records and their CSV are the ones a board's sweep writes
//! ([`crate::predict::characterize::runs`]).

use super::datapath::{self, Cache, DataPath, Medium};
use super::kernel::pick;
use super::power::Operating;
use super::spec::BoardSpec;
use super::workload::Workload;
use crate::board::{Board, Values};
use crate::predict::characterize::modes::SweepMode;
use crate::predict::characterize::runs::{self, Config, EpochRow, Run};
use crate::support::rng::hash;

/// Why a sweep cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
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
    /// Where each preset the modes name runs the board ([`busy_operating`] of the preset
    /// applied), by name.
    pub presets: Vec<(String, Operating)>,
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

/// Where `board` runs with its knobs at `values` and every core busy, as the simulated
/// kernel runs it: each clock the highest of its table within its limits (the governor
/// under load), the EMC at its cap (the table's top uncapped), the cores those online
/// (cpu0, which has no `online` file, among them).
pub fn busy_operating(board: &Board, values: &Values) -> Operating {
    let (mut cores, mut cpu_hz_sum) = (0u32, 0.0);
    for c in &board.clusters {
        let online = board
            .cpus
            .iter()
            .filter(|(cpu, knob)| c.cpus.contains(cpu) && knob.is_none_or(|k| values[k] == 1))
            .count() as u32;
        let hz = pick(
            &c.table_hz,
            values[c.min] * 1000,
            values[c.max] * 1000,
            true,
        );
        cores += online;
        cpu_hz_sum += f64::from(online) * hz as f64;
    }
    let gpu_hz = board.gpu.as_ref().map_or(0, |g| {
        let top = g.table_hz.last().copied().unwrap_or(0);
        let hi = if values[g.max] == 0 {
            top
        } else {
            values[g.max]
        };
        pick(&g.table_hz, values[g.min], hi, true)
    });
    let emc_hz = board.emc.as_ref().map_or(0, |e| {
        let top = e.table_hz.last().copied().unwrap_or(0);
        let cap = match values[e.cap] {
            0 => top,
            v if v == e.uncapped_raw() => top,
            v => v,
        };
        pick(&e.table_hz, 0, cap, true)
    });
    Operating {
        online_cores: cores,
        cpu_hz: cpu_hz_sum / f64::from(cores.max(1)),
        gpu_hz: gpu_hz as f64,
        emc_hz: emc_hz as f64,
    }
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
            SweepMode::Preset(name) => self
                .presets
                .iter()
                .find(|(p, _)| *p == name)
                .map(|(_, op)| *op)
                .expect("a config names one of the sweep's presets"),
        };
        let d = DataPath {
            batch: c.batch,
            workers: c.workers,
            medium: Medium::from_name(&c.medium).expect("a config names one of the sweep's media"),
            cache: c.cache,
            ram_gib: f64::from(self.spec.ram_gib),
            unit: 0,
        };
        // The board and the workload as well as the configuration: each draws its own
        // noise (a review found the same repeat spread on every board and workload).
        let seed = [self.spec.name, self.workload.name()]
            .concat()
            .bytes()
            .fold(c.seed(), |h, b| hash(h ^ u64::from(b)));
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

    /// Each preset of `spec` where it runs the board as it boots.
    fn presets(spec: &BoardSpec) -> Vec<(String, Operating)> {
        let dir = tempfile::tempdir().unwrap();
        crate::sim::export(&spec.id(), dir.path()).unwrap();
        let root = crate::board::sysfs::Root::host(dir.path());
        let board = Board::discover(root).unwrap();
        let file = board
            .root
            .confined(crate::board::paths::NVPMODEL_CONF)
            .unwrap();
        let now = board.read_knobs().unwrap();
        crate::control::preset::Presets::load(&file, &board)
            .unwrap()
            .presets
            .iter()
            .map(|p| {
                let values = crate::control::plan::target(&board, &p.mode, &now).unwrap();
                (p.name.clone(), busy_operating(&board, &values))
            })
            .collect()
    }

    /// A preset of the board's nvpmodel file runs where the simulated board's own model of
    /// it does (the clocks it boots at under load).
    #[test]
    fn a_preset_runs_at_its_clocks_under_load() {
        for spec in spec::BOARDS {
            for (name, op) in presets(spec) {
                let p = spec.presets.iter().find(|p| p.name == name).unwrap();
                let (cpu, gpu, emc) = crate::sim::tree::boot_clocks(spec, p);
                let expected = Operating {
                    online_cores: p.cores as u32,
                    cpu_hz: cpu as f64 * 1e3,
                    gpu_hz: gpu as f64,
                    emc_hz: emc as f64,
                };
                assert_eq!(op, expected, "{} {name}", spec.id());
            }
        }
    }

    fn sweep() -> Sweep {
        let spec = spec::find("xavier-agx").unwrap();
        let presets = presets(spec);
        Sweep {
            spec,
            workload: Workload::ResNet18,
            modes: presets
                .iter()
                .take(2)
                .map(|(name, _)| SweepMode::Preset(name.clone()))
                .collect(),
            presets,
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

    /// Found by a review: the seed came from the configuration alone, so every board and
    /// workload drew the same noise (the same repeat spread, the same epoch-to-epoch ratio).
    #[test]
    fn each_workload_draws_its_own_noise() {
        let s = sweep();
        let c = &s.configs()[0];
        let ratio = |s: &Sweep| {
            let r = s.run(c);
            r.epochs[1].time_s / r.epochs[0].time_s
        };
        let mobile = Sweep {
            workload: Workload::MobileNetV3,
            ..sweep()
        };
        assert_ne!(ratio(&s), ratio(&mobile));
    }

    #[test]
    fn workers_cut_the_stall_and_the_summary_spans_the_repeats() {
        let s = sweep();
        let runs: Vec<Run> = s.configs().iter().map(|c| s.run(c)).collect();
        let sums = runs::summarise(&runs);
        assert_eq!(sums.len(), 8);
        assert!(sums
            .iter()
            .all(|x| x.runs == 3 && x.time_cv.is_some_and(|cv| cv > 0.0)));
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
    fn workloads_without_data_are_named() {
        let s = sweep();
        let bad = Sweep {
            workload: Workload::Lstm,
            ..s
        };
        assert!(bad.check().unwrap_err().to_string().contains("lstm"));
    }
}
