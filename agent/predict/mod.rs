//! Predicting a training workload's minibatch time and power on every power mode from a
//! few profiled modes (PowerTrain, FGCS 2024), with the baselines the papers compare.
//!
//! Methods (separate time and power models, inputs standardised):
//! - `powertrain`: the paper's MLP (4 -> 256 -> 128 -> 64 -> 1, dropout 0.4/0.3, Adam)
//!   pre-trained on a reference workload's full profile, then transferred: the last layer
//!   is re-initialised and fine-tuned on the target's profiled modes;
//! - `mlp_scratch`: the same MLP trained on the target's modes alone;
//! - `linear`: least squares on the four knobs (the SIGMETRICS'23 model);
//! - `physics` (jpower's): physics-informed inputs (the logarithms of the clocks and of the
//!   data-loading rate that bound GPU, memory and loading time, hinges of their log-ratios
//!   where one stage takes over from another, and the squared clocks of dynamic power), log
//!   targets, and an ensemble of small MLPs pre-trained on the reference and transferred
//!   by re-fitting their read-out in closed form (ridge regression of the target's
//!   residual on the hidden layer and the inputs, the penalty chosen by leave-one-out, so
//!   few profiled modes keep the reference's shape and more re-shape it); the power
//!   read-out also reads energy terms of the minibatch time (each domain's dynamic energy
//!   per minibatch over the time it takes: measured on profiled modes, the time model's
//!   prediction elsewhere), so power follows a target whose bottlenecks differ from the
//!   reference's; the read-out also blends in a physics anchor fitted to the target alone
//!   (a pipeline model of time, a sum of static and dynamic terms for power; [`anchor`]),
//!   which extrapolates where the reference's shape does not fit the target, weighed by
//!   how well it predicts the profiled modes left out of its fit; the ensemble predicts
//!   the median of its eight members, and their spread is the uncertainty that sets the
//!   power-budget margin.
//!
//! Predicting all 18,096 modes of Orin AGX is a few blocked matrix products
//! ([`regress::Mlp::predict_batch`]).

pub mod active;
pub mod anchor;
pub mod evaluate;
pub mod live;
pub mod optimize;
pub mod profile;
pub mod regress;

use crate::control::mode::PinnedMode;
use crate::predict::profile::Row;
use anchor::Anchor;
use regress::{Ensemble, Linear, Mlp, RegressError, Standardizer, TrainConfig};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Version of saved model files.
pub const MODEL_VERSION: u32 = 4;

/// A prediction method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// PowerTrain: the paper's MLP pre-trained on a reference workload, its last layer fine-tuned
    /// on the target's modes.
    Powertrain,
    /// The same MLP trained on the target's modes alone.
    MlpScratch,
    /// Least squares on the four knobs.
    Linear,
    /// jpower's physics-informed ensemble, transferred from a reference by re-fitting its read-out.
    Physics,
}

impl Method {
    /// Every method.
    pub const ALL: [Method; 4] = [
        Method::Powertrain,
        Method::MlpScratch,
        Method::Linear,
        Method::Physics,
    ];

    /// The name used in outputs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Method::Powertrain => "powertrain",
            Method::MlpScratch => "mlp_scratch",
            Method::Linear => "linear",
            Method::Physics => "physics",
        }
    }

    /// The method of a [`Method::name`], if there is one.
    pub fn from_name(s: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Whether the method needs a reference workload's profile.
    pub fn uses_reference(self) -> bool {
        matches!(self, Method::Powertrain | Method::Physics)
    }
}

/// What is predicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// Minibatch time, milliseconds.
    TimeMs,
    /// Mean power over a minibatch, watts.
    PowerW,
}

fn ghz(hz: u64) -> f64 {
    (hz as f64 * 1e-9).max(1e-3)
}

/// The inputs for `mode`: the four knobs, plus the physics-informed ones.
pub fn features(m: &PinnedMode, physics: bool) -> Vec<f64> {
    let (c, f_cpu, f_gpu, f_emc) = (
        f64::from(m.cores),
        ghz(m.cpu_hz),
        ghz(m.gpu_hz),
        ghz(m.emc_hz),
    );
    if !physics {
        return vec![c, f_cpu, f_gpu, f_emc];
    }
    let loaders = loaders(c);
    let mut f = vec![
        c,
        f_cpu,
        f_gpu,
        f_emc,
        // Logarithms of the bounding rates: time is a power law of each where it binds, and
        // a log-time model stays a power law when it extrapolates.
        f_gpu.ln(),
        f_emc.ln(),
        f_cpu.ln(),
        (loaders * f_cpu).ln(),
        // Dynamic power goes as V^2 f, and V rises with f above its floor.
        f_gpu * f_gpu,
        f_gpu * f_gpu * f_gpu,
        c * f_cpu * f_cpu,
        c * f_cpu * f_cpu * f_cpu,
    ];
    // Which stage binds: time is the largest of power laws in the rates, so its log bends
    // where the log-ratio of two bounding rates crosses a workload's balance point. Hinges
    // of each ratio at a few points let a linear read-out place those bends.
    let (g, e, l) = (f_gpu.ln(), f_emc.ln(), (loaders * f_cpu).ln());
    for ratio in [l - g, l - e, g - e, f_cpu.ln() - g, f_cpu.ln() - e] {
        f.extend(RATIO_KNOTS.iter().map(|k| (ratio - k).max(0.0)));
    }
    f
}

/// The parallelism of four data-loader workers sharing `cores` online cores with the
/// training process.
pub(crate) fn loaders(cores: f64) -> f64 {
    (cores - 0.5).clamp(0.5, 4.0)
}

/// Where the hinges of the log-ratios of bounding rates bend (a factor of e apart).
const RATIO_KNOTS: [f64; 4] = [-1.5, -0.5, 0.5, 1.5];

/// How many [`energy_terms`] there are.
const ENERGY_TERMS: usize = 8;

/// The energy terms a physics power model reads besides the mode's features: power is
/// static power plus each domain's dynamic energy per minibatch over the minibatch's
/// time, and a domain's dynamic energy grows with its clock (through the voltage) but
/// hardly with the time the minibatch takes, so each term is a clock polynomial over
/// the minibatch time (`time_ms`: measured on profiled modes, predicted elsewhere; NaN
/// terms where it is missing).
/// These let the power model follow a target workload whose bottlenecks, and so its
/// utilisations, differ from the reference's.
fn energy_terms(m: &PinnedMode, time_ms: f64) -> [f64; ENERGY_TERMS] {
    let (f_cpu, f_gpu, f_emc) = (ghz(m.cpu_hz), ghz(m.gpu_hz), ghz(m.emc_hz));
    let per_s = 1000.0 / time_ms;
    [
        1.0,
        f_gpu,
        f_gpu * f_gpu,
        f_gpu * f_gpu * f_gpu,
        f_cpu,
        f_cpu * f_cpu,
        f_emc,
        // GPU cycles stalled on DRAM, whose number grows as f_gpu / f_emc.
        f_gpu / f_emc,
    ]
    .map(|v| v * per_s)
}

/// A regressor of one kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Regressor {
    /// Ridge-regularised least squares.
    Linear(Linear),
    /// One multilayer perceptron.
    Mlp(Mlp),
    /// Several MLPs whose median is the prediction.
    Ensemble(Ensemble),
}

/// One fitted model: inputs, scaling, regressor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// Whether the inputs include the physics-informed ones ([`features`]).
    pub physics: bool,
    /// Whether the regressor predicts the logarithm of the target.
    pub log: bool,
    /// Standardises the inputs.
    pub scale: Standardizer,
    /// The fitted regressor, on standardised inputs.
    pub reg: Regressor,
    /// Predictions are kept within this range (the training targets' range, widened
    /// by half each way): a log-space model must not extrapolate exponentially.
    pub bounds: (f64, f64),
    /// Whether the model also reads [`energy_terms`] of the minibatch time (a physics
    /// power model), so that it predicts from the time model's predictions.
    pub energy: bool,
    /// A physics anchor of the target whose log the read-out blends in (a physics
    /// transfer): its last input column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<Anchor>,
    /// The anchor's leave-one-out error on the profiled modes (root mean square, in the
    /// model's space: log, so relative).
    #[serde(default)]
    pub anchor_error: f64,
    /// The knob ranges the network was trained on (a transfer's, its reference's):
    /// outside them it extrapolates, and a model with an anchor predicts by the anchor
    /// alone there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trained_on: Option<KnobRange>,
}

/// The least and the greatest value of each knob over a set of modes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KnobRange {
    /// Each knob's least value over the modes.
    pub lo: PinnedMode,
    /// Each knob's greatest value over the modes.
    pub hi: PinnedMode,
}

impl KnobRange {
    /// The ranges of the modes of `rows`; `None` without rows.
    pub fn of(rows: &[Row]) -> Option<KnobRange> {
        let first = rows.first()?.mode;
        Some(rows.iter().fold(
            KnobRange {
                lo: first,
                hi: first,
            },
            |r, row| {
                let m = row.mode;
                KnobRange {
                    lo: PinnedMode {
                        cores: r.lo.cores.min(m.cores),
                        cpu_hz: r.lo.cpu_hz.min(m.cpu_hz),
                        gpu_hz: r.lo.gpu_hz.min(m.gpu_hz),
                        emc_hz: r.lo.emc_hz.min(m.emc_hz),
                    },
                    hi: PinnedMode {
                        cores: r.hi.cores.max(m.cores),
                        cpu_hz: r.hi.cpu_hz.max(m.cpu_hz),
                        gpu_hz: r.hi.gpu_hz.max(m.gpu_hz),
                        emc_hz: r.hi.emc_hz.max(m.emc_hz),
                    },
                }
            },
        ))
    }

    /// Whether every knob of `m` lies within its range.
    pub fn contains(&self, m: &PinnedMode) -> bool {
        let (lo, hi) = (&self.lo, &self.hi);
        (lo.cores..=hi.cores).contains(&m.cores)
            && (lo.cpu_hz..=hi.cpu_hz).contains(&m.cpu_hz)
            && (lo.gpu_hz..=hi.gpu_hz).contains(&m.gpu_hz)
            && (lo.emc_hz..=hi.emc_hz).contains(&m.emc_hz)
    }
}

impl Model {
    /// The model's input rows for `modes` (row-major), and their width.
    fn rows(&self, modes: &[PinnedMode], time_ms: &[f64]) -> (Vec<f64>, usize) {
        let k = self.scale.mean.len();
        let e = k + if self.energy { ENERGY_TERMS } else { 0 };
        let d = e + usize::from(self.anchor.is_some());
        let mut xs = vec![0.0; modes.len() * d];
        for (i, (m, row)) in modes.iter().zip(xs.chunks_mut(d)).enumerate() {
            self.scale
                .apply_into(&features(m, self.physics), &mut row[..k]);
            let t = time_ms.get(i).copied().unwrap_or(f64::NAN);
            if self.energy {
                row[k..e].copy_from_slice(&energy_terms(m, t));
            }
            if let Some(a) = &self.anchor {
                row[e] = log_positive(a.predict(m, t));
            }
        }
        (xs, d)
    }

    /// Predictions and their spread (0 for single models), one per mode; an [`Model::energy`]
    /// model reads each mode's minibatch time from `time_ms` (NaN where it is missing).
    fn predict(&self, modes: &[PinnedMode], time_ms: &[f64]) -> Vec<(f64, f64)> {
        let (xs, d) = self.rows(modes, time_ms);
        let raw: Vec<(f64, f64)> = match &self.reg {
            Regressor::Linear(l) => xs.chunks(d).map(|r| (l.predict(r), 0.0)).collect(),
            Regressor::Mlp(m) => {
                let mut out = vec![0.0; modes.len()];
                m.predict_batch(&xs, d, &mut out);
                out.into_iter().map(|v| (v, 0.0)).collect()
            }
            Regressor::Ensemble(e) => {
                let outputs: Vec<Vec<f64>> = e
                    .members
                    .iter()
                    .map(|m| {
                        let mut out = vec![0.0; modes.len()];
                        m.predict_batch(&xs, d, &mut out);
                        out
                    })
                    .collect();
                let mut column = Vec::with_capacity(outputs.len());
                (0..modes.len())
                    .map(|i| {
                        column.clear();
                        column.extend(outputs.iter().map(|o| o[i]));
                        median_and_spread(&mut column)
                    })
                    .collect()
            }
        };
        let (lo, hi) = self.bounds;
        // Beyond the knob ranges the network was trained on, the anchor alone.
        let anchored = |i: usize| {
            let beyond = self.trained_on.is_some_and(|r| !r.contains(&modes[i]));
            (beyond && self.anchor.is_some()).then(|| xs[i * d + d - 1])
        };
        // The anchor's leave-one-out error widens the spread: the members share the anchor,
        // so their disagreement alone would understate the uncertainty it brings.
        let bounded = raw.into_iter().enumerate().map(|(i, (y, s))| {
            let y = anchored(i).unwrap_or(y.clamp(lo, hi));
            (y, s.hypot(self.anchor_error))
        });
        if self.log {
            // The spread of exp(y) for a small spread of y is exp(y) * spread.
            bounded.map(|(y, s)| (y.exp(), y.exp() * s)).collect()
        } else {
            bounded.collect()
        }
    }
}

/// The log of an anchor's prediction, kept finite where the prediction is.
fn log_positive(v: f64) -> f64 {
    v.max(1e-6).ln()
}

/// A prediction and its spread, per mode.
pub type Predicted = Vec<(f64, f64)>;

/// Predicted (time ms, its spread) and (power W, its spread) of every mode in `modes`: the
/// power model reads the time model's predictions.
pub fn time_and_power(time: &Model, power: &Model, modes: &[PinnedMode]) -> (Predicted, Predicted) {
    let t = time.predict(modes, &[]);
    let times: Vec<f64> = t.iter().map(|p| p.0).collect();
    let p = power.predict(modes, &times);
    (t, p)
}

/// The median of an ensemble's predictions (one badly pre-trained member cannot drag it)
/// and their standard deviation (which it does widen: the disagreement is the point).
fn median_and_spread(v: &mut [f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, 0.0);
    }
    v.sort_by(f64::total_cmp);
    let k = v.len();
    let median = (v[(k - 1) / 2] + v[k / 2]) / 2.0;
    let mean = v.iter().sum::<f64>() / k as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / k as f64;
    (median, var.sqrt())
}

/// How hard to train.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitConfig {
    /// Training epochs (PowerTrain's fine-tuning runs three times as many).
    pub epochs: usize,
    /// Seed of weight initialisation, shuffling and dropout.
    pub seed: u64,
    /// Ensemble members of the physics method.
    pub ensemble: usize,
}

impl Default for FitConfig {
    fn default() -> Self {
        FitConfig {
            epochs: 100,
            seed: 1,
            ensemble: 8,
        }
    }
}

fn target_of(r: &Row, t: Quantity) -> f64 {
    match t {
        Quantity::TimeMs => r.time_ms,
        Quantity::PowerW => r.power_w,
    }
}

fn data(rows: &[Row], t: Quantity, physics: bool, log: bool) -> (Vec<Vec<f64>>, Vec<f64>) {
    let x = rows.iter().map(|r| features(&r.mode, physics)).collect();
    let y = rows
        .iter()
        .map(|r| {
            let v = target_of(r, t);
            if log {
                v.ln()
            } else {
                v
            }
        })
        .collect();
    (x, y)
}

/// The prediction bounds for targets `y` (in the model's space).
fn bounds(y: &[f64], log: bool) -> (f64, f64) {
    let lo = y.iter().copied().fold(f64::MAX, f64::min);
    let hi = y.iter().copied().fold(f64::MIN, f64::max);
    if log {
        (lo - 1.5f64.ln(), hi + 1.5f64.ln())
    } else {
        (lo / 1.5, hi * 1.5)
    }
}

fn scaled(x: &[Vec<f64>], s: &Standardizer) -> Vec<Vec<f64>> {
    x.iter().map(|r| s.apply(r)).collect()
}

/// A model pre-trained on a reference workload's profile (for the transfer methods).
pub fn pretrain(
    method: Method,
    rows: &[Row],
    t: Quantity,
    cfg: &FitConfig,
) -> Result<Model, RegressError> {
    let physics = method == Method::Physics;
    let log = physics;
    let (x, y) = data(rows, t, physics, log);
    let scale = Standardizer::fit(&x)?;
    let xs = scaled(&x, &scale);
    let reg = if physics {
        let tc = TrainConfig {
            epochs: cfg.epochs,
            dropout: vec![],
            seed: cfg.seed,
            ..TrainConfig::default()
        };
        let (e, _) = Ensemble::train(&physics_layers(x[0].len()), cfg.ensemble, &xs, &y, &tc)?;
        Regressor::Ensemble(e)
    } else {
        Regressor::Mlp(powertrain_mlp(&xs, &y, cfg)?)
    };
    let bounds = bounds(&y, log);
    Ok(Model {
        physics,
        log,
        scale,
        reg,
        bounds,
        energy: false,
        anchor: None,
        anchor_error: 0.0,
        trained_on: KnobRange::of(rows),
    })
}

/// The paper's network and training (256-128-64, dropout, Adam) on standardised inputs.
fn powertrain_mlp(xs: &[Vec<f64>], y: &[f64], cfg: &FitConfig) -> Result<Mlp, RegressError> {
    let mut m = Mlp::new(
        &regress::powertrain_layers(xs.first().map_or(4, Vec::len)),
        cfg.seed,
    );
    m.train(
        xs,
        y,
        &TrainConfig {
            epochs: cfg.epochs,
            seed: cfg.seed,
            ..TrainConfig::default()
        },
    )?;
    Ok(m)
}

/// The ridge penalties leave-one-out chooses from when the physics ensemble transfers.
const RIDGE_PENALTIES: [f64; 13] = [
    1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0,
];

fn physics_layers(d: usize) -> Vec<usize> {
    vec![d, 64, 32, 1]
}

/// Fits `method` on the target's profiled `rows`, from `reference` where it transfers.
pub fn fit(
    method: Method,
    rows: &[Row],
    t: Quantity,
    reference: Option<&Model>,
    cfg: &FitConfig,
) -> Result<Model, RegressError> {
    match method {
        Method::Linear => {
            let (x, y) = data(rows, t, false, false);
            let scale = Standardizer::fit(&x)?;
            let reg = Regressor::Linear(Linear::fit(&scaled(&x, &scale), &y, 1e-6)?);
            Ok(Model {
                physics: false,
                log: false,
                scale,
                reg,
                bounds: bounds(&y, false),
                energy: false,
                anchor: None,
                anchor_error: 0.0,
                trained_on: KnobRange::of(rows),
            })
        }
        Method::MlpScratch => {
            let (x, y) = data(rows, t, false, false);
            let scale = Standardizer::fit(&x)?;
            let m = powertrain_mlp(&scaled(&x, &scale), &y, cfg)?;
            Ok(Model {
                physics: false,
                log: false,
                scale,
                reg: Regressor::Mlp(m),
                bounds: bounds(&y, false),
                energy: false,
                anchor: None,
                anchor_error: 0.0,
                trained_on: KnobRange::of(rows),
            })
        }
        Method::Powertrain | Method::Physics => {
            let base = reference.ok_or(RegressError::Empty)?;
            let (x, y) = data(rows, t, base.physics, base.log);
            // The reference's scaling is kept: the transferred layers expect it.
            let mut xs = scaled(&x, &base.scale);
            // The physics ensemble's power read-out also reads the energy terms.
            let energy = base.physics && t == Quantity::PowerW;
            if energy {
                for (row, r) in xs.iter_mut().zip(rows) {
                    row.extend(energy_terms(&r.mode, r.time_ms));
                }
            }
            // And it blends in a physics anchor of the target, read on profiled modes as
            // fitted without each (so that its weight is how it predicts, not how it fits).
            let anchor = base.physics.then(|| Anchor::fit(t, rows)).flatten();
            let held_out: Vec<f64> = anchor.as_ref().map_or_else(Vec::new, |a| {
                let v = a.cross_fitted(t, rows);
                v.into_iter().map(log_positive).collect()
            });
            let errors: Vec<f64> = held_out
                .iter()
                .zip(&y)
                .map(|(a, y)| a - y)
                .filter(|e| e.is_finite())
                .collect();
            let anchor_error =
                (errors.iter().map(|e| e * e).sum::<f64>() / errors.len().max(1) as f64).sqrt();
            let anchor_column = anchor.as_ref().map(|_| {
                for (row, v) in xs.iter_mut().zip(held_out) {
                    row.push(v);
                }
                xs.first().map_or(0, Vec::len) - 1
            });
            // As PowerTrain: the last layer is re-initialised and trained alone (the
            // physics ensemble re-fits its read-out in closed form instead).
            let tune = |m: &Mlp, seed: u64| -> Result<Mlp, RegressError> {
                let mut n = m.transfer(true, seed);
                let freeze = n.layers.len() - 1;
                n.train(
                    &xs,
                    &y,
                    &TrainConfig {
                        epochs: cfg.epochs * 3,
                        seed,
                        dropout: vec![],
                        val_fraction: 0.0,
                        freeze,
                        lr: 1e-2,
                        ..TrainConfig::default()
                    },
                )?;
                Ok(n)
            };
            let reg = match &base.reg {
                Regressor::Mlp(m) => Regressor::Mlp(tune(m, cfg.seed)?),
                Regressor::Ensemble(e) => Regressor::Ensemble(Ensemble {
                    members: e
                        .members
                        .iter()
                        .map(|m| {
                            let mut n = m.clone();
                            n.refit_output(&xs, &y, &RIDGE_PENALTIES, anchor_column)
                                .map(|_| n)
                        })
                        .collect::<Result<_, _>>()?,
                }),
                Regressor::Linear(_) => return Err(RegressError::Empty),
            };
            // The target's own range (widened) bounds what transfer may predict.
            Ok(Model {
                physics: base.physics,
                log: base.log,
                scale: base.scale.clone(),
                reg,
                bounds: bounds(&y, base.log),
                energy,
                anchor,
                anchor_error,
                trained_on: base.trained_on,
            })
        }
    }
}

/// A saved pair of models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    /// File layout version ([`MODEL_VERSION`]).
    pub version: u32,
    /// The board's id (`orin-agx@r35`) or model string.
    pub board: String,
    /// The workload the models predict (`resnet18`, ...).
    pub workload: String,
    /// The method that fitted them.
    pub method: Method,
    /// The minibatch-time model.
    pub time: Model,
    /// The power model.
    pub power: Model,
    /// Modes the models were fitted on (they are measured, not predicted).
    pub profiled: Vec<PinnedMode>,
}

/// Model-file errors.
#[derive(Debug, thiserror::Error)]
pub enum ModelFileError {
    /// The file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The model file.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not JSON of a model file.
    #[error("{}: not a jpower model file: {source}", path.display())]
    Format {
        /// The model file.
        path: std::path::PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The file's layout version is not [`MODEL_VERSION`].
    #[error("{}: model file version {found}, this jpower reads version {MODEL_VERSION}", path.display())]
    Version {
        /// The model file.
        path: std::path::PathBuf,
        /// The version it has.
        found: u32,
    },
    /// The models were fitted for another board.
    #[error("{}: the model was fitted for {found}, not {wanted}", path.display())]
    Board {
        /// The model file.
        path: std::path::PathBuf,
        /// The board the file names.
        found: String,
        /// The board asked for.
        wanted: String,
    },
}

impl ModelFile {
    /// Writes the file (JSON).
    pub fn save(&self, path: &Path) -> Result<(), ModelFileError> {
        let text = serde_json::to_vec(self).map_err(|source| ModelFileError::Format {
            path: path.into(),
            source,
        })?;
        std::fs::write(path, text).map_err(|source| ModelFileError::Io {
            path: path.into(),
            source,
        })
    }

    /// Reads a file and checks its version and, if given, its board.
    pub fn load(path: &Path, board: Option<&str>) -> Result<ModelFile, ModelFileError> {
        let text = std::fs::read(path).map_err(|source| ModelFileError::Io {
            path: path.into(),
            source,
        })?;
        let probe: serde_json::Value =
            serde_json::from_slice(&text).map_err(|source| ModelFileError::Format {
                path: path.into(),
                source,
            })?;
        let found = probe["version"].as_u64().unwrap_or(0) as u32;
        if found != MODEL_VERSION {
            return Err(ModelFileError::Version {
                path: path.into(),
                found,
            });
        }
        let f: ModelFile =
            serde_json::from_value(probe).map_err(|source| ModelFileError::Format {
                path: path.into(),
                source,
            })?;
        if let Some(b) = board {
            if f.board != b {
                return Err(ModelFileError::Board {
                    path: path.into(),
                    found: f.board,
                    wanted: b.into(),
                });
            }
        }
        Ok(f)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn physics_features_include_the_bounding_rates() {
        let m = PinnedMode {
            cores: 2,
            cpu_hz: 1_000_000_000,
            gpu_hz: 500_000_000,
            emc_hz: 2_000_000_000,
        };
        let f = features(&m, true);
        assert_eq!(f.len(), 32);
        // The first ratio, loading over GPU rate: ln(1.5 / 0.5) = 1.0986, past three knots.
        let ratio = 3f64.ln();
        assert!((f[12] - (ratio + 1.5)).abs() < 1e-12 && (f[14] - (ratio - 0.5)).abs() < 1e-12);
        assert_eq!(f[15], 0.0, "below the last knot");
        assert!((f[4] - 0.5f64.ln()).abs() < 1e-12 && (f[5] - 2f64.ln()).abs() < 1e-12);
        assert!(
            (f[7] - 1.5f64.ln()).abs() < 1e-12,
            "1.5 loader cores on 2 cores"
        );
        assert_eq!(features(&m, false), vec![2.0, 1.0, 0.5, 2.0]);
    }

    /// Physics time and power models pre-trained quickly (400 reference modes, 20 epochs,
    /// three members) on simulated ResNet-18 on Orin AGX, and the setting used.
    pub(crate) fn quick_resnet18_reference() -> (FitConfig, Model, Model) {
        use crate::predict::evaluate::{profile_modes, reference_grid};
        use crate::predict::profile::{self, ProfileConfig, Strategy};
        use crate::sim::sources::reference_source;
        let spec = crate::sim::spec::find("orin-agx").unwrap();
        let cfg = FitConfig {
            epochs: 20,
            seed: 3,
            ensemble: 3,
        };
        let grid = profile::select(
            &reference_grid(&spec.mode_space()),
            Strategy::Random(400),
            5,
        );
        let mut reference = reference_source(spec, crate::sim::workload::Workload::ResNet18, 1);
        let (rows, _) = profile_modes(&mut reference, &grid, &ProfileConfig::default());
        let time = pretrain(Method::Physics, &rows, Quantity::TimeMs, &cfg).unwrap();
        let power = pretrain(Method::Physics, &rows, Quantity::PowerW, &cfg).unwrap();
        (cfg, time, power)
    }

    /// The quick ResNet-18 reference transferred to simulated `workload` (noise seed
    /// `seed`) profiled on `modes` stratified modes of Orin AGX.
    struct Transferred {
        target: crate::sim::sources::SimSource,
        all: Vec<PinnedMode>,
        time: Model,
        power: Model,
        ref_power: Model,
    }

    fn transferred(
        workload: crate::sim::workload::Workload,
        modes: usize,
        seed: u64,
    ) -> Transferred {
        use crate::predict::evaluate::profile_modes;
        use crate::predict::profile::{self, ProfileConfig, Strategy};
        use crate::sim::sources::SimSource;
        let spec = crate::sim::spec::find("orin-agx").unwrap();
        let (cfg, ref_time, ref_power) = quick_resnet18_reference();
        let mut target = SimSource::new(spec.silicon, workload, spec.mode_space(), seed);
        let all: Vec<PinnedMode> = spec.mode_space().iter().collect();
        let chosen = profile::select(&all, Strategy::Stratified(modes), seed);
        let (rows, _) = profile_modes(&mut target, &chosen, &ProfileConfig::default());
        let fit = |t, reference| fit(Method::Physics, &rows, t, Some(reference), &cfg).unwrap();
        Transferred {
            time: fit(Quantity::TimeMs, &ref_time),
            power: fit(Quantity::PowerW, &ref_power),
            target,
            all,
            ref_power,
        }
    }

    #[test]
    fn the_physics_power_model_reads_the_predicted_minibatch_time() {
        use crate::predict::profile::{self, Source, Strategy};
        // YOLOv8n waits on its loaders where ResNet-18 keeps the GPU busy.
        let Transferred {
            target,
            all,
            time,
            power,
            ref_power,
        } = transferred(crate::sim::workload::Workload::YoloV8n, 50, 2);
        assert!(power.energy && !time.energy && !ref_power.energy);
        let held = profile::select(&all, Strategy::Random(1000), 6);
        let (pt, pp) = time_and_power(&time, &power, &held);
        let times: Vec<f64> = pt.iter().map(|t| t.0).collect();
        assert_eq!(power.predict(&held, &times), pp);
        let slower: Vec<f64> = times.iter().map(|t| t * 2.0).collect();
        let moved = power.predict(&held, &slower);
        assert!(moved.iter().zip(&pp).all(|(a, b)| a.0 != b.0));
        assert!(power.predict(&held[..1], &[]).iter().all(|p| p.0.is_nan()));
        let truth: Vec<(f64, f64)> = held.iter().map(|m| target.truth(m).unwrap()).collect();
        let mape = crate::predict::optimize::mape(
            &pp.iter().map(|p| p.0).collect::<Vec<_>>(),
            &truth.iter().map(|t| t.1).collect::<Vec<_>>(),
        );
        println!("power MAPE {mape:.2}% over 1000 modes");
        assert!(mape < 6.0, "power MAPE {mape}");
    }

    #[test]
    fn the_anchors_carry_a_target_where_the_reference_misleads() {
        use crate::predict::profile::Source;
        // ResNet-18 waits on its loaders on one or two cores; LSTM hardly ever does, and
        // 20 profiled modes say little about one core.
        let Transferred {
            target,
            all,
            time,
            power,
            ..
        } = transferred(crate::sim::workload::Workload::Lstm, 20, 1);
        assert!(matches!(time.anchor, Some(Anchor::Pipeline(_))));
        assert!(matches!(power.anchor, Some(Anchor::Power(_))));
        assert!(time.anchor_error > 0.0 && power.anchor_error > 0.0);
        let one_core: Vec<PinnedMode> = all.iter().filter(|m| m.cores == 1).copied().collect();
        let (pt, pp) = time_and_power(&time, &power, &one_core);
        // The anchor's left-out error is part of every spread.
        assert!(pp.iter().all(|p| p.1 >= 0.99 * p.0 * power.anchor_error));
        let truth: Vec<(f64, f64)> = one_core.iter().map(|m| target.truth(m).unwrap()).collect();
        let err = |pred: &Predicted, pick: fn(&(f64, f64)) -> f64| {
            crate::predict::optimize::mape(
                &pred.iter().map(|p| p.0).collect::<Vec<_>>(),
                &truth.iter().map(pick).collect::<Vec<_>>(),
            )
        };
        let (t, p) = (err(&pt, |t| t.0), err(&pp, |t| t.1));
        println!("one core, 20 modes: time MAPE {t:.1}%, power {p:.1}%");
        // Without the anchors: time 130% and power 21% over these modes.
        assert!(t < 15.0 && p < 10.0, "time {t}% power {p}%");
        // PowerTrain's reference grid has no one-core mode, so there the anchors predict
        // alone; within the grid's ranges, the blend.
        let range = time.trained_on.unwrap();
        assert_eq!((range.lo.cores, range.hi.cores), (2, 12));
        assert_eq!(power.trained_on, time.trained_on);
        let (ta, pa) = (
            time.anchor.as_ref().unwrap(),
            power.anchor.as_ref().unwrap(),
        );
        for (m, (t, p)) in one_core.iter().zip(pt.iter().zip(&pp)) {
            assert!((t.0 / ta.predict(m, f64::NAN) - 1.0).abs() < 1e-9);
            assert!((p.0 / pa.predict(m, t.0) - 1.0).abs() < 1e-9);
        }
        let two_cores: Vec<PinnedMode> = all.iter().filter(|m| m.cores == 2).copied().collect();
        let (pt, _) = time_and_power(&time, &power, &two_cores);
        let blended = two_cores
            .iter()
            .zip(&pt)
            .filter(|(m, t)| (t.0 / ta.predict(m, f64::NAN) - 1.0).abs() > 1e-6)
            .count();
        assert!(
            blended > two_cores.len() / 2,
            "{blended} of {}",
            two_cores.len()
        );
    }

    #[test]
    fn the_ensemble_median_ignores_one_wild_member() {
        let (m, s) = median_and_spread(&mut [1.0, 1.2, 50.0, 0.9]);
        assert!((m - 1.1).abs() < 1e-12);
        assert!(s > 20.0, "the spread still shows the disagreement: {s}");
        assert_eq!(
            median_and_spread(&mut [3.0, 1.0, 2.0]),
            (2.0, (2.0f64 / 3.0).sqrt())
        );
    }

    #[test]
    fn model_files_check_version_and_board() {
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<Row> = (1..30)
            .map(|i| Row {
                mode: PinnedMode {
                    cores: 1 + i % 4,
                    cpu_hz: 1_000_000_000 + i as u64 * 10_000_000,
                    gpu_hz: 300_000_000 + i as u64 * 20_000_000,
                    emc_hz: 2_000_000_000,
                },
                time_ms: 10.0 + i as f64,
                power_w: 5.0 + 0.1 * i as f64,
                time_std_ms: 0.0,
                power_std_w: 0.0,
            })
            .collect();
        let cfg = FitConfig::default();
        let time = fit(Method::Linear, &rows, Quantity::TimeMs, None, &cfg).unwrap();
        let power = fit(Method::Linear, &rows, Quantity::PowerW, None, &cfg).unwrap();
        let f = ModelFile {
            version: MODEL_VERSION,
            board: "orin-agx@r35".into(),
            workload: "x".into(),
            method: Method::Linear,
            time,
            power,
            profiled: vec![],
        };
        let p = dir.path().join("m.json");
        f.save(&p).unwrap();
        assert_eq!(ModelFile::load(&p, Some("orin-agx@r35")).unwrap(), f);
        let e = ModelFile::load(&p, Some("nano@r32"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("fitted for orin-agx@r35, not nano@r32"), "{e}");
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        v["version"] = 7.into();
        std::fs::write(&p, v.to_string()).unwrap();
        assert!(ModelFile::load(&p, None)
            .unwrap_err()
            .to_string()
            .contains("version 7"));
        std::fs::write(&p, "nope").unwrap();
        assert!(ModelFile::load(&p, None)
            .unwrap_err()
            .to_string()
            .contains("not a jpower model file"));
    }
}
