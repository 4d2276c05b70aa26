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
//!   how well it predicts the profiled modes left out of its fit; and it reads a per-knob
//!   basis of the target's own ([`basis`]: hat functions of each knob's log over the
//!   profiled range), so that the target's profiled modes can bend the prediction along a
//!   knob where neither the reference nor the anchor does. The ensemble predicts the
//!   median of its eight members; their spread, with the read-out's expected miss at the
//!   mode ([`miss`]: its leave-one-out residuals, growing with the distance from the
//!   profiled modes and scaled by how the profiled modes near it missed), is the
//!   uncertainty that sets the power-budget margin; last, both models are corrected by
//!   what they still miss at the profiled modes ([`correct`]: a Gaussian-process
//!   regression of those residuals over knob space).
//!
//! Predicting all 18,096 modes of Orin AGX is a few blocked matrix products a block of
//! modes at a time ([`regress::Batch`]); the first layer's inputs that read only the host
//! knobs or only the device knobs are looked up per point of the modes' lattice instead
//! (`features::Lattice`).
//!
//! [`pagoda`] is the other kind of prediction: a DNN's FLOPs and DRAM bytes counted layer by
//! layer (Pagoda's analytical model), for placing inference on each mode's rooflines.

pub mod active;
pub mod anchor;
mod basis;
pub mod characterize;
mod correct;
pub mod evaluate;
mod features;
mod fit;
pub mod fulcrum;
pub mod live;
mod miss;
mod model_file;
pub mod optimize;
pub mod pagoda;
pub mod pretrain_cache;
pub mod profile;
pub mod regress;

pub use features::features;
pub use fit::{fit_time_and_power, pretrain, FitConfig};
pub use model_file::{ModelFile, ModelFileError, FIT_MODES, MODEL_VERSION};

use crate::control::mode::PinnedMode;
use crate::predict::profile::Row;
use anchor::Anchor;
use basis::KnobBasis;
use correct::Correction;
use features::{energy_terms, features_into, Lattice, ENERGY_TERMS, MAX_FEATURES, PARTS};
use miss::Miss;
use regress::{Batch, Ensemble, Linear, Mlp, Standardizer, BLOCK};
use serde::{Deserialize, Serialize};

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
#[serde(try_from = "ModelData")]
pub struct Model {
    /// Whether the inputs include the physics-informed ones ([`features()`]).
    pub physics: bool,
    /// Whether the regressor predicts the logarithm of the target.
    pub log: bool,
    /// Standardises the inputs.
    pub scale: Standardizer,
    /// The fitted regressor, on standardised inputs.
    pub reg: Regressor,
    /// Predictions are kept within this range (the training targets' range, widened
    /// by half each way): a log-space model must not extrapolate exponentially. A
    /// prediction kept there has an infinite spread (no evidence for it).
    pub bounds: (f64, f64),
    /// Whether the model also reads `energy_terms` of the minibatch time (a physics
    /// power model), so that it predicts from the time model's predictions.
    pub energy: bool,
    /// A physics anchor of the target whose log the read-out blends in (a physics
    /// transfer): its last input column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<Anchor>,
    /// The per-knob basis the read-out of a physics transfer also reads (after the
    /// energy terms, before the anchor's column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<KnobBasis>,
    /// How far a transferred read-out misses a mode it was not fitted on, by the mode's
    /// distance from the profiled ones (from its members' median leave-one-out residuals,
    /// in the model's space: log, so relative), measured on the target rather than
    /// assumed: part of every spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub miss: Option<Miss>,
    /// The knob ranges the network was trained on (a transfer's, its reference's):
    /// outside them it extrapolates, and a model with an anchor predicts by the anchor
    /// alone there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trained_on: Option<KnobRange>,
    /// What the model still missed at the profiled modes, carried to every mode and
    /// applied to each prediction (a physics transfer's; [`correct`]). Its miss is then
    /// the corrected model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correction: Option<Correction>,
}

/// A model as a file holds it, before its parts are checked to agree (so that the
/// error of a file with a weight missing carries its line).
#[derive(Deserialize)]
struct ModelData {
    physics: bool,
    log: bool,
    scale: Standardizer,
    reg: Regressor,
    bounds: (f64, f64),
    energy: bool,
    #[serde(default)]
    anchor: Option<Anchor>,
    #[serde(default)]
    basis: Option<KnobBasis>,
    #[serde(default)]
    miss: Option<Miss>,
    #[serde(default)]
    trained_on: Option<KnobRange>,
    #[serde(default)]
    correction: Option<Correction>,
}

impl TryFrom<ModelData> for Model {
    type Error = String;

    fn try_from(m: ModelData) -> Result<Model, String> {
        let model = Model {
            physics: m.physics,
            log: m.log,
            scale: m.scale,
            reg: m.reg,
            bounds: m.bounds,
            energy: m.energy,
            anchor: m.anchor,
            basis: m.basis,
            miss: m.miss,
            trained_on: m.trained_on,
            correction: m.correction,
        };
        match model.inputs_mismatch().or_else(|| model.values_unusable()) {
            Some(why) => Err(why),
            None => Ok(model),
        }
    }
}

impl Model {
    /// Where the scaling and the regressor disagree on the number of inputs (a model file
    /// edited or cut short), what disagrees.
    pub fn inputs_mismatch(&self) -> Option<String> {
        let d = self.scale.mean.len();
        if self.scale.std.len() != d {
            return Some(format!(
                "{} input means but {} deviations",
                d,
                self.scale.std.len()
            ));
        }
        let mlp_inputs = |m: &Mlp| m.layers.first().map_or(0, |l| l.n_in);
        let reads = match &self.reg {
            Regressor::Linear(l) => vec![l.w.len()],
            Regressor::Mlp(m) => vec![mlp_inputs(m)],
            Regressor::Ensemble(e) if e.members.is_empty() => {
                return Some("an ensemble without members".into())
            }
            Regressor::Ensemble(e) => e.members.iter().map(mlp_inputs).collect(),
        };
        reads
            .into_iter()
            .find(|&n| n != d)
            .map(|n| format!("{d} scaled inputs, but the regressor reads {n}"))
    }
}

impl Model {
    /// Where a value an edited or damaged file holds would make predictions panic or NaN:
    /// bounds out of order or not finite, a scale of zero, a correction whose weights do not
    /// match its modes.
    fn values_unusable(&self) -> Option<String> {
        let (lo, hi) = self.bounds;
        if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
            return Some(format!("bounds [{lo}, {hi}] are not an interval"));
        }
        if let Some(s) = self
            .scale
            .std
            .iter()
            .find(|s| !(s.is_finite() && **s > 0.0))
        {
            return Some(format!("an input scale of {s}"));
        }
        if let Some(m) = self.scale.mean.iter().find(|m| !m.is_finite()) {
            return Some(format!("an input mean of {m}"));
        }
        self.correction
            .as_ref()
            .and_then(Correction::mismatch)
            .or_else(|| self.miss.as_ref().and_then(Miss::mismatch))
    }
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
    /// The width of the model's input rows: the scaled features, the energy terms of an
    /// [`Model::energy`] model, and the anchor's column of one with an anchor.
    fn width(&self) -> usize {
        let e = self.scale.mean.len() + if self.energy { ENERGY_TERMS } else { 0 };
        e + self.basis.as_ref().map_or(0, KnobBasis::width) + usize::from(self.anchor.is_some())
    }

    /// Writes the input row of mode `m`, whose minibatch takes `time_ms`, into `row`
    /// ([`Model::width`] wide), but for the per-knob basis, which the caller copies from
    /// the grid points' rows.
    fn row_into(&self, m: &PinnedMode, time_ms: f64, row: &mut [f64]) {
        let (k, e) = (self.scale.mean.len(), self.basis_at());
        self.features_into(m, row);
        if self.energy {
            row[k..e].copy_from_slice(&energy_terms(m, time_ms));
        }
        let b = e + self.basis.as_ref().map_or(0, KnobBasis::width);
        if let Some(a) = &self.anchor {
            row[b] = log_positive(a.predict(m, time_ms));
        }
    }

    /// Where a row's per-knob basis starts: after the features and the energy terms.
    fn basis_at(&self) -> usize {
        self.scale.mean.len() + if self.energy { ENERGY_TERMS } else { 0 }
    }

    /// Writes the scaled [`features()`] of mode `m` into the front of `row`.
    fn features_into(&self, m: &PinnedMode, row: &mut [f64]) {
        let k = self.scale.mean.len();
        let mut f = [0.0; MAX_FEATURES];
        let n = features_into(m, self.physics, &mut f);
        self.scale.apply_into(&f[..n], &mut row[..k]);
    }

    /// Predictions and their spread (0 for single models), one per mode of `modes`, which
    /// span `lattice`; an [`Model::energy`] model reads each mode's minibatch time from
    /// `time_ms` (NaN where it is missing). [`BLOCK`] modes at a time: a
    /// block's input rows are built into one buffer and run through every network while
    /// they are in cache, so nothing is allocated per mode; the networks' first layers are
    /// split over the lattice ([`Batch::with_tables`]: what the inputs that read only the
    /// host knobs, or only the device knobs, contribute is computed once for each of the
    /// lattice's few hundred points).
    fn predict(&self, lattice: &Lattice, modes: &[PinnedMode], time_ms: &[f64]) -> Vec<(f64, f64)> {
        let d = self.width();
        let members: &[Mlp] = match &self.reg {
            Regressor::Linear(_) => &[],
            Regressor::Mlp(m) => std::slice::from_ref(m),
            Regressor::Ensemble(e) => &e.members,
        };
        let cap = modes.len().clamp(1, BLOCK);
        // Each grid point's row holds the columns that read only its part: the features
        // and the per-knob basis (the energy terms and the anchor read both, row by row).
        let (k, e) = (self.scale.mean.len(), self.basis_at());
        let grid = lattice.grid.each_ref().map(|g| {
            let mut rows = vec![0.0; g.len() * d];
            for (m, row) in g.iter().zip(rows.chunks_exact_mut(d)) {
                self.features_into(m, row);
                if let Some(b) = &self.basis {
                    b.values_into(m, &mut row[e..e + b.width()]);
                }
            }
            rows
        });
        let parts = &PARTS[..k.min(MAX_FEATURES)];
        let mut skip_parts = parts.to_vec();
        skip_parts.resize(e, None);
        skip_parts.extend(self.basis.iter().flat_map(|b| b.parts().map(Some)));
        let grids = grid.each_ref().map(Vec::as_slice);
        let mut batch = Batch::new(members, d, cap).with_tables(parts, &skip_parts, grids);
        let mut xs = vec![0.0; cap * d];
        let mut outputs = vec![0.0; members.len() * cap];
        // Each member's outputs for a block, the same views for every block.
        let mut views: Vec<&mut [f64]> = outputs.chunks_mut(cap).collect();
        let mut column = Vec::with_capacity(members.len());
        let mut out = Vec::with_capacity(modes.len());
        let misses = self.miss.as_ref().map(|e| e.at_modes(lattice));
        let corrections = self.correction.as_ref().map(|c| c.log_factors(lattice));
        for (b, block) in modes.chunks(BLOCK).enumerate() {
            let xs = &mut xs[..block.len() * d];
            for (i, (m, row)) in block.iter().zip(xs.chunks_exact_mut(d)).enumerate() {
                let t = time_ms.get(b * BLOCK + i).copied().unwrap_or(f64::NAN);
                self.row_into(m, t, row);
                // The basis's host columns come first: copied from the mode's two points.
                if let Some(basis) = &self.basis {
                    let ([h, v], host) = (lattice.at[b * BLOCK + i], basis.host_width());
                    let (from, to) = ([&grid[0][h * d..], &grid[1][v * d..]], e + basis.width());
                    row[e..e + host].copy_from_slice(&from[0][e..e + host]);
                    row[e + host..to].copy_from_slice(&from[1][e + host..to]);
                }
            }
            if !members.is_empty() {
                let at = lattice.at.get(b * BLOCK..).unwrap_or_default();
                batch.predict(xs, at, &mut views);
            }
            for (i, (m, row)) in block.iter().zip(xs.chunks_exact(d)).enumerate() {
                let raw = match &self.reg {
                    Regressor::Linear(l) => (l.predict(row), 0.0),
                    Regressor::Mlp(_) => (views[0][i], 0.0),
                    Regressor::Ensemble(_) => {
                        column.clear();
                        column.extend(views.iter().map(|o| o[i]));
                        median_and_spread(&mut column)
                    }
                };
                let miss = misses.as_ref().map_or(0.0, |e| e[b * BLOCK + i]);
                let correction = corrections.as_ref().map_or(0.0, |c| c[b * BLOCK + i]);
                out.push(self.bounded(m, raw, row[d - 1], miss, correction));
            }
        }
        out
    }

    /// A mode's prediction `(y, spread)` in the model's space, kept within what the model
    /// has seen (`anchor`: the anchor's column of the mode's row), on the target's scale.
    /// `miss`: the expected miss at the mode ([`Miss`]; 0 without one); `correction`: the
    /// log factor of the model's [`Correction`] there (0 without one).
    fn bounded(
        &self,
        m: &PinnedMode,
        (y, s): (f64, f64),
        anchor: f64,
        miss: f64,
        correction: f64,
    ) -> (f64, f64) {
        let (lo, hi) = self.bounds;
        // The read-out's leave-one-out error widens the spread: the members share the
        // target's rows and the anchor, so their disagreement alone would understate how
        // far the model misses a mode it was not fitted on. Beyond
        // the knob ranges the network was trained on, the anchor predicts alone; without
        // one, the network only extrapolates there, as it does beyond its bounds (where the
        // prediction is kept at them): the spread is then infinite, since nothing the model
        // has seen supports the prediction (modes clamped to one bound would otherwise tie,
        // and the choice among them goes to the least power, a slow mode).
        let beyond = self.trained_on.is_some_and(|r| !r.contains(m));
        let (y, s) = match (beyond, &self.anchor) {
            (true, Some(_)) => (anchor, s.hypot(miss)),
            (true, None) => (y.clamp(lo, hi), f64::INFINITY),
            _ if !(lo..=hi).contains(&y) => (y.clamp(lo, hi), f64::INFINITY),
            _ => (y, s.hypot(miss)),
        };
        if self.log {
            // The spread of exp(y) for a small spread of y is exp(y) * spread.
            let y = (y + correction).exp();
            (y, y * s)
        } else {
            let k = correction.exp();
            (y * k, s * k)
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
/// power model reads the time model's predictions. The spread is infinite where a model
/// only extrapolates (beyond its bounds, or beyond the knob ranges it was trained on
/// without an anchor to predict there).
pub fn time_and_power(time: &Model, power: &Model, modes: &[PinnedMode]) -> (Predicted, Predicted) {
    let lattice = Lattice::of(modes);
    let t = time.predict(&lattice, modes, &[]);
    let times: Vec<f64> = t.iter().map(|p| p.0).collect();
    let p = power.predict(&lattice, modes, &times);
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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
        let reference = Some((&ref_time, &ref_power));
        let (time, power) = fit_time_and_power(Method::Physics, &rows, reference, &cfg).unwrap();
        Transferred {
            time,
            power,
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
        // Measured afresh or handed over by the time model, the distances agree.
        assert_eq!(power.predict(&Lattice::of(&held), &held, &times), pp);
        let slower: Vec<f64> = times.iter().map(|t| t * 2.0).collect();
        let moved = power.predict(&Lattice::of(&held), &held, &slower);
        assert!(moved.iter().zip(&pp).all(|(a, b)| a.0 != b.0));
        assert!(power
            .predict(&Lattice::of(&held[..1]), &held[..1], &[])
            .iter()
            .all(|p| p.0.is_nan()));
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
        let misses = |m: &Model| m.miss.as_ref().map(|e| e.at(&all[0]));
        assert!(misses(&time) > Some(0.0) && misses(&power) > Some(0.0));
        let one_core: Vec<PinnedMode> = all.iter().filter(|m| m.cores == 1).copied().collect();
        let (pt, pp) = time_and_power(&time, &power, &one_core);
        // The expected miss at each mode is part of its spread.
        let miss = power.miss.as_ref().unwrap();
        assert!(pp
            .iter()
            .zip(&one_core)
            .all(|(p, m)| p.1 >= 0.99 * p.0 * miss.at(m)));
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
        // (Before the correction by the profiled modes' residuals, which holds there too.)
        let uncorrected = |m: &Model| Model {
            correction: None,
            ..m.clone()
        };
        assert!(time.correction.is_some() && power.correction.is_some());
        let (pt, pp) = time_and_power(&uncorrected(&time), &uncorrected(&power), &one_core);
        for (m, (t, p)) in one_core.iter().zip(pt.iter().zip(&pp)) {
            assert!((t.0 / ta.predict(m, f64::NAN) - 1.0).abs() < 1e-9);
            assert!((p.0 / pa.predict(m, t.0) - 1.0).abs() < 1e-9);
        }
        let two_cores: Vec<PinnedMode> = all.iter().filter(|m| m.cores == 2).copied().collect();
        let (pt, _) = time_and_power(&uncorrected(&time), &uncorrected(&power), &two_cores);
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
    fn predicting_many_modes_at_once_matches_one_mode_per_call() {
        // The batched path (blocks of rows through GEMMs) against the scalar one, over
        // several blocks and a partial one.
        let Transferred {
            all, time, power, ..
        } = transferred(crate::sim::workload::Workload::MobileNetV3, 50, 2);
        let modes: Vec<PinnedMode> = all.iter().step_by(29).copied().collect();
        assert!(modes.len() > 2 * BLOCK && modes.len() % BLOCK != 0);
        let (bt, bp) = time_and_power(&time, &power, &modes);
        let close = |a: (f64, f64), b: (f64, f64)| {
            let rel = |x: f64, y: f64| x == y || ((x - y) / y).abs() <= 1e-12;
            rel(a.0, b.0) && rel(a.1, b.1)
        };
        for (i, m) in modes.iter().enumerate() {
            let (st, sp) = time_and_power(&time, &power, std::slice::from_ref(m));
            assert!(
                close(bt[i], st[0]),
                "{m:?}: time {:?} vs {:?}",
                bt[i],
                st[0]
            );
            assert!(
                close(bp[i], sp[0]),
                "{m:?}: power {:?} vs {:?}",
                bp[i],
                sp[0]
            );
        }
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
}
