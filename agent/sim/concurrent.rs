//! A simulated board training and serving inference at once, on one GPU: the phase tables
//! of every mode from the board's own models (a training minibatch from [`workload`], an
//! inference batch of each size from [`super::inference`]), measured with their noise, and
//! schedules run in simulated time through the interleaving
//! ([`crate::predict::fulcrum::interleave`]), so that an inference batch between training
//! minibatches delays the next minibatch and each phase draws its own power.
//!
//! # Switching knobs
//!
//! A switch between the phases' modes costs the settle time of the slowest knob it
//! changes ([`SwitchTimes`], the assumptions the simulated kernel settles by too; the
//! knobs are written together, so they settle in parallel), and during it the board draws
//! the mean of the two phases' power (the GPU drains while the clocks move), which the
//! sensor averages in with the phases around it. Core hotplug is the slowest, so per-phase
//! pairs never change the cores.
//!
//! # Noise
//!
//! Profiling a mode measures [`PROFILE_MINIBATCHES`] training minibatches (settled:
//! [`workload::measure`] ten minibatches after the switch) and [`PROFILE_RUNS`] forward
//! passes of each batch size ([`super::inference::measure`]): mean time, the minibatch times'
//! spread, and mean power. Deployed runs scatter phase times by 2 % and power by 1.5 %,
//! as those functions do. Profiles draw their noise from one stream in turn, which a sweep
//! starts anew for each strategy on each problem
//! ([`fulcrum::eval::SweepBoard::set_draws`]): what one strategy measures does not move
//! with how many modes another profiled before it.
//!
//! # Runs kept
//!
//! A completed run's outcome depends on the setting, the switch time, the arrival rate
//! and the percentile, not on the budget or the latency target (they only decide whether
//! it met them, and where a run told to stop early stops): the board keeps completed
//! runs by those (up to [`KEPT_RUNS`]), and answers a repeat, early stop or not, with
//! the kept one. The problems of a sweep share most of the oracle's runs.

use super::kernel::LoadState;
use super::power::{Operating, Silicon};
use super::settle::SwitchTimes;
use super::sources::modelled_rooflines;
use super::sources::InferenceSource;
use super::spec::BoardSpec;
use super::workload::{self, Workload};
use crate::control::mode::{ModeSpace, PinnedMode};
use crate::gpu::roofline::Precision;
use crate::predict::fulcrum::als::Prior;
use crate::predict::fulcrum::interleave::{Engine, Noise, Outcome, Phases};
use crate::predict::fulcrum::{self, PhaseTable, Problem, Setting, BATCHES};
use crate::predict::pagoda::calibrate::{self, KnobRooflines};
use crate::predict::pagoda::{zoo, Report};
use crate::predict::profile::Source;
use crate::predict::{FitConfig, Model};
use crate::support::rng;
use std::collections::HashMap;
use std::sync::Arc;

/// Training minibatches measured when profiling a mode.
pub const PROFILE_MINIBATCHES: u32 = 20;
/// Forward passes measured per batch size when profiling a mode.
pub const PROFILE_RUNS: u32 = 5;
/// Completed runs a board keeps (module docs); past it, it forgets them all.
pub const KEPT_RUNS: usize = 1 << 18;
/// Scatter of deployed phases (the workloads' measurement noise).
const NOISE: Noise = Noise {
    train: 0.02,
    infer: 0.02,
    power: 0.015,
};

/// Why a concurrent board cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ConcurrentError {
    /// No such training workload.
    #[error("unknown training workload {0:?} (known: resnet18, mobilenetv3, yolov8n, bert, lstm)")]
    Train(String),
    /// No such inference model.
    #[error("unknown inference model {0:?} (known: {known})", known = zoo::NAMES.join(", "))]
    Infer(String),
}

/// A training and an inference workload on a simulated board.
#[derive(Debug, Clone)]
pub struct ConcurrentBoard {
    spec: &'static BoardSpec,
    space: ModeSpace,
    train: Workload,
    infer: Vec<InferenceSource>,
    /// The inference model's layer counts per batch size (what ALS's prior reads).
    reports: Vec<Report>,
    truths: Vec<PhaseTable>,
    switch: SwitchTimes,
    seed: u64,
    profiles: u64,
    engine: Engine,
    kept: HashMap<RunKey, Outcome>,
    /// What each phase's time is multiplied by ([`ConcurrentBoard::set_phase_scales`]).
    scales: PhaseScales,
    /// ALS's prior, once a reference is given ([`ConcurrentBoard::set_reference`]).
    prior: Option<Arc<Prior>>,
}

/// What a planner measured of each phase's time against the board's model: the training
/// minibatch's and the inference batch's (every size) are multiplied by these.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhaseScales {
    /// The training minibatch's.
    pub train: f64,
    /// The inference batches'.
    pub infer: f64,
}

impl Default for PhaseScales {
    fn default() -> PhaseScales {
        PhaseScales {
            train: 1.0,
            infer: 1.0,
        }
    }
}

/// What a completed run's outcome depends on (module docs): the setting, and the bits of
/// the switch time, the rate and the percentile.
type RunKey = (Setting, [u64; 3]);

/// The inference zoo's name for a short one (`mobilenetv3` is MobileNetV3-Large).
fn zoo_name(name: &str) -> &str {
    match name {
        "mobilenetv3" => "mobilenetv3-large",
        "bert" => "bert-base",
        n => n,
    }
}

impl ConcurrentBoard {
    /// Training `train` (a [`Workload::name`]) and serving `infer` (a zoo model) on `spec`,
    /// switching as `switch` says; `seed` fixes the board's arrivals and noise.
    pub fn new(
        spec: &'static BoardSpec,
        train: &str,
        infer: &str,
        switch: SwitchTimes,
        seed: u64,
    ) -> Result<ConcurrentBoard, ConcurrentError> {
        let train =
            Workload::from_name(train).ok_or_else(|| ConcurrentError::Train(train.into()))?;
        let model =
            zoo::get(zoo_name(infer)).ok_or_else(|| ConcurrentError::Infer(infer.into()))?;
        let reports: Vec<Report> = BATCHES
            .iter()
            .map(|&b| model.count(u64::from(b), Precision::F32, false))
            .collect();
        let infer: Vec<InferenceSource> = reports
            .iter()
            .map(|report| InferenceSource::new(spec, report, seed))
            .collect();
        let space = spec.mode_space();
        let truths = space
            .iter()
            .map(|m| {
                let t = workload::truth(spec.silicon, train, &Operating::from(&m));
                let mut table = PhaseTable {
                    train_ms: t.time_ms,
                    train_spread: NOISE.train,
                    train_w: t.power_w,
                    ..PhaseTable::default()
                };
                for (k, src) in infer.iter().enumerate() {
                    let i = src.truth_s(&m);
                    (table.infer_ms[k], table.infer_w[k]) = (i.latency_s * 1e3, i.power_w);
                }
                table
            })
            .collect();
        Ok(ConcurrentBoard {
            spec,
            space,
            train,
            infer,
            reports,
            truths,
            switch,
            seed,
            profiles: 0,
            engine: Engine::default(),
            kept: HashMap::new(),
            scales: PhaseScales::default(),
            prior: None,
        })
    }

    /// Gives ALS its prior ([`Prior`]): `reference`, the training predictors pre-trained
    /// on a reference workload on this board (re-fitted as `fit` says), beside the
    /// inference model's layer counts on the rooflines `jpower roofline` would measure
    /// here ([`calibrate::roofline_modes`], interpolated over the clocks).
    pub fn set_reference(&mut self, reference: Arc<(Model, Model)>, fit: FitConfig) {
        let sampled = calibrate::roofline_modes(&self.space);
        let rooflines = KnobRooflines::fit(&modelled_rooflines(self.spec, &sampled))
            .expect("the simulated rooflines sample pinned clocks");
        self.prior = Some(Arc::new(Prior {
            reference,
            fit,
            infer: self.reports.clone(),
            rooflines,
        }));
    }

    /// Makes each phase `scales` times as long as the board's model says, in profiles,
    /// truths and runs alike: a planner that measured its trainer or its inference server
    /// slow down scales its model of the board so (`jpower schedule --live`). Runs kept at
    /// other scales are forgotten.
    pub fn set_phase_scales(&mut self, scales: PhaseScales) {
        if scales != self.scales {
            self.scales = scales;
            self.kept.clear();
        }
    }

    /// The scales of [`ConcurrentBoard::set_phase_scales`] (1 until set).
    pub fn phase_scales(&self) -> PhaseScales {
        self.scales
    }

    /// `table` with the phase scales applied.
    fn scaled(&self, mut table: PhaseTable) -> PhaseTable {
        table.train_ms *= self.scales.train;
        for ms in &mut table.infer_ms {
            *ms *= self.scales.infer;
        }
        table
    }

    /// The board's silicon.
    pub fn silicon(&self) -> Silicon {
        self.spec.silicon
    }

    /// What each phase of `s` keeps the board busy with: a training minibatch at the
    /// training mode, and an inference batch of each size at the inference mode (what a
    /// live run loads the simulated board's rails with, phase by phase).
    pub fn phase_loads(&self, s: &Setting) -> PhaseLoads {
        let mode = |i| self.space.get(i).expect("a mode of the space");
        let (train, infer) = (mode(s.train), mode(s.infer));
        let op = Operating::from(&train);
        PhaseLoads {
            train: workload::truth(self.spec.silicon, self.train, &op)
                .load
                .into(),
            infer: std::array::from_fn(|k| self.infer[k].truth_s(&infer).load.into()),
        }
    }
}

/// The utilisations each phase of a setting keeps the board busy at
/// ([`ConcurrentBoard::phase_loads`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhaseLoads {
    /// A training minibatch.
    pub train: LoadState,
    /// An inference batch of each of [`BATCHES`]' sizes.
    pub infer: [LoadState; BATCHES.len()],
}

impl fulcrum::eval::SweepBoard for ConcurrentBoard {
    fn set_fast_switch(&mut self, ms: f64) {
        self.switch = SwitchTimes::fast(ms);
    }

    fn set_draws(&mut self, stream: u64) {
        self.profiles = rng::spread(stream) << 20;
        for src in &mut self.infer {
            src.reseed(self.seed ^ rng::spread(stream.wrapping_add(1)));
        }
    }
}

impl fulcrum::Board for ConcurrentBoard {
    fn space(&self) -> &ModeSpace {
        &self.space
    }

    fn presets(&self) -> Vec<PinnedMode> {
        let top = |t: &[u64], v: i64| -> u64 {
            let last = t.last().copied().unwrap_or(0);
            if v < 0 {
                return last;
            }
            t.iter()
                .rev()
                .copied()
                .find(|&f| f <= v as u64)
                .unwrap_or(t[0])
        };
        self.spec
            .presets
            .iter()
            .map(|p| PinnedMode {
                cores: p.cores as u32,
                cpu_hz: top(&self.space.cpu_hz, p.cpu_max_khz.saturating_mul(1000)),
                gpu_hz: top(&self.space.gpu_hz, p.gpu_max_hz),
                emc_hz: if p.emc_max_hz == 0 {
                    top(&self.space.emc_hz, -1)
                } else {
                    top(&self.space.emc_hz, p.emc_max_hz)
                },
            })
            .collect()
    }

    fn profile(&mut self, mode: usize) -> PhaseTable {
        let m = self.space.get(mode).expect("a mode of the space");
        let op = Operating::from(&m);
        self.profiles += 1;
        let seed = self.seed ^ rng::spread(self.profiles);
        let n = f64::from(PROFILE_MINIBATCHES);
        let (mut sum_t, mut sum_t2, mut sum_w) = (0.0, 0.0, 0.0);
        for k in 0..PROFILE_MINIBATCHES {
            let (t, w) =
                workload::measure(self.silicon(), self.train, &op, 10, seed ^ u64::from(k));
            (sum_t, sum_t2, sum_w) = (sum_t + t, sum_t2 + t * t, sum_w + w);
        }
        let mean_t = sum_t / n;
        let var = ((sum_t2 - n * mean_t * mean_t) / (n - 1.0)).max(0.0);
        let mut table = PhaseTable {
            train_ms: mean_t,
            train_spread: var.sqrt() / mean_t,
            train_w: sum_w / n,
            ..PhaseTable::default()
        };
        for (k, src) in self.infer.iter_mut().enumerate() {
            let (mut ms, mut w) = (0.0, 0.0);
            for _ in 0..PROFILE_RUNS {
                let (l, p) = src.minibatch(&m, 10).expect("a simulated forward pass");
                (ms, w) = (ms + l, w + p);
            }
            let runs = f64::from(PROFILE_RUNS);
            (table.infer_ms[k], table.infer_w[k]) = (ms / runs, w / runs);
        }
        self.scaled(table)
    }

    fn truth(&self, mode: usize) -> PhaseTable {
        self.scaled(self.truths[mode])
    }

    fn prior(&self) -> Option<Arc<Prior>> {
        self.prior.clone()
    }

    fn run(&mut self, s: &Setting, p: &Problem, stop_early: bool) -> Outcome {
        let (a, b) = (
            self.space.get(s.train).expect("a mode"),
            self.space.get(s.infer).expect("a mode"),
        );
        let (train, infer) = (self.truth(s.train), self.truth(s.infer));
        let phases = Phases {
            train: &train,
            infer: &infer,
            batch: s.batch,
            switch_ms: self.switch.between(&a, &b),
        };
        let key = (
            *s,
            [phases.switch_ms, p.rate_per_s, p.percentile].map(f64::to_bits),
        );
        if let Some(o) = self.kept.get(&key) {
            return *o;
        }
        let o = self.engine.run(
            &phases,
            p,
            &NOISE,
            self.seed,
            self.seed ^ 0xB0A2D,
            stop_early,
        );
        if o.completed {
            if self.kept.len() >= KEPT_RUNS {
                self.kept.clear();
            }
            self.kept.insert(key, o);
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each phase loads the board as its own workload does at its own mode: a live run's
    /// rails follow the phase, not one load for both.
    #[test]
    fn each_phase_loads_the_board_as_its_workload_does_at_its_mode() {
        let spec = crate::sim::spec::find("orin-agx").unwrap();
        let board =
            ConcurrentBoard::new(spec, "resnet18", "mobilenetv3", SwitchTimes::DEFAULT, 1).unwrap();
        let space = spec.mode_space();
        let top = space.len() - 1;
        let low_gpu = space
            .iter()
            .position(|m| {
                let t = space.get(top).unwrap();
                m.cores == t.cores && m.cpu_hz == t.cpu_hz && m.emc_hz == t.emc_hz
            })
            .unwrap();
        let s = Setting {
            train: top,
            infer: low_gpu,
            batch: 2,
        };
        let loads = board.phase_loads(&s);
        let want: LoadState = workload::truth(
            spec.silicon,
            Workload::from_name("resnet18").unwrap(),
            &Operating::from(&space.get(top).unwrap()),
        )
        .load
        .into();
        assert_eq!(loads.train, want);
        for (k, l) in loads.infer.iter().enumerate() {
            assert_ne!(*l, loads.train, "batch {}", BATCHES[k]);
            assert!((0.0..=1.0).contains(&l.gpu) && l.gpu > 0.0, "{l:?}");
        }
        assert!(
            loads.infer[0] != loads.infer[BATCHES.len() - 1],
            "{loads:?}"
        );
    }
}
