//! Fitting the models: pre-training on a reference workload's full profile
//! ([`pretrain`]), and fitting each method's time and power models on the target's
//! profiled modes ([`fit_time_and_power`]), transferred from the reference where the
//! method does, a physics transfer then corrected by what it still misses there.

use super::anchor::Anchor;
use super::basis::KnobBasis;
use super::correct::Correction;
use super::features::{energy_terms, features};
use super::miss::Miss;
use super::regress::{self, Ensemble, Linear, Mlp, RegressError, Standardizer, TrainConfig};
use super::{log_positive, KnobRange, Method, Model, Quantity, Regressor};
use crate::control::mode::PinnedMode;
use crate::predict::profile::Row;

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

/// The median of `v`'s finite values (NaN when there are none).
fn median(v: &mut Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        k => (v[(k - 1) / 2] + v[k / 2]) / 2.0,
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
        basis: None,
        miss: None,
        trained_on: KnobRange::of(rows),
        correction: None,
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

/// Fits `method`'s time and power models on the target's profiled `rows`, from the
/// `reference`'s (time, power) models where it transfers. The fitted networks keep their
/// weights as the f32 values that prediction reads ([`Mlp::round_to_f32`]: the same
/// predictions to the bit, and half the text in a model file); pre-trained ones keep f64,
/// since training goes on from them. A physics transfer is then corrected by its residuals
/// at the profiled modes ([`correct`]).
pub fn fit_time_and_power(
    method: Method,
    rows: &[Row],
    reference: Option<(&Model, &Model)>,
    cfg: &FitConfig,
) -> Result<(Model, Model), RegressError> {
    let one = |t, reference| -> Result<(Model, Option<Vec<f64>>), RegressError> {
        let (mut model, left_out) = fit_f64(method, rows, t, reference, cfg)?;
        match &mut model.reg {
            Regressor::Mlp(m) => m.round_to_f32(),
            Regressor::Ensemble(e) => e.members.iter_mut().for_each(Mlp::round_to_f32),
            Regressor::Linear(_) => {}
        }
        Ok((model, left_out))
    };
    let (mut time, time_left_out) = one(Quantity::TimeMs, reference.map(|r| r.0))?;
    let (mut power, power_left_out) = one(Quantity::PowerW, reference.map(|r| r.1))?;
    if let (Some(t), Some(p)) = (time_left_out, power_left_out) {
        correct(&mut time, &mut power, rows, [&t, &p]);
    }
    Ok((time, power))
}

/// Corrects the time model, then the power model (which reads the corrected times), by
/// what each still misses at the profiled modes ([`Correction`]), and measures each
/// one's expected miss ([`Miss`]) anew as the corrected model's: at each profiled mode,
/// the read-out's leave-one-out residual (`left_out`, time and power) less what the
/// correction fitted without that mode predicts there.
fn correct(time: &mut Model, power: &mut Model, rows: &[Row], left_out: [&[f64]; 2]) {
    let modes: Vec<PinnedMode> = rows.iter().map(|r| r.mode).collect();
    for (k, q) in [Quantity::TimeMs, Quantity::PowerW].into_iter().enumerate() {
        let (pt, pp) = super::time_and_power(time, power, &modes);
        let predicted = if k == 0 { pt } else { pp };
        let residual: Vec<f64> = rows
            .iter()
            .zip(&predicted)
            .map(|(r, p)| (target_of(r, q) / p.0).ln())
            .collect();
        let model = if k == 0 { &mut *time } else { &mut *power };
        if let Some((c, predicted_left_out)) = Correction::fit(&modes, &residual) {
            let miss: Vec<f64> = left_out[k]
                .iter()
                .zip(&predicted_left_out)
                .map(|(l, g)| l - g)
                .collect();
            model.miss = Miss::fit(&modes, &miss).or(model.miss.take());
            model.correction = Some(c);
        }
    }
}

/// One model of [`fit_time_and_power`], its networks' weights left in f64, with the
/// read-out's leave-one-out residual at each profiled mode where it is re-fitted in closed
/// form (the physics ensemble's).
fn fit_f64(
    method: Method,
    rows: &[Row],
    t: Quantity,
    reference: Option<&Model>,
    cfg: &FitConfig,
) -> Result<(Model, Option<Vec<f64>>), RegressError> {
    match method {
        Method::Linear | Method::MlpScratch => {
            // Plain regressions of the knobs: no physics, no transfer.
            let (x, y) = data(rows, t, false, false);
            let scale = Standardizer::fit(&x)?;
            let xs = scaled(&x, &scale);
            let reg = match method {
                Method::Linear => Regressor::Linear(Linear::fit(&xs, &y, 1e-6)?),
                _ => Regressor::Mlp(powertrain_mlp(&xs, &y, cfg)?),
            };
            let model = Model {
                physics: false,
                log: false,
                scale,
                reg,
                bounds: bounds(&y, false),
                energy: false,
                anchor: None,
                basis: None,
                miss: None,
                trained_on: KnobRange::of(rows),
                correction: None,
            };
            Ok((model, None))
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
            // And the target's own per-knob shape.
            let basis = base.physics.then(|| KnobBasis::of(rows)).flatten();
            if let Some(b) = &basis {
                for (row, r) in xs.iter_mut().zip(rows) {
                    let at = row.len();
                    row.resize(at + b.width(), 0.0);
                    b.values_into(&r.mode, &mut row[at..]);
                }
            }
            // And it blends in a physics anchor of the target, read on profiled modes as
            // fitted without each (so that its weight is how it predicts, not how it fits).
            let anchor = base.physics.then(|| Anchor::fit(t, rows)).flatten();
            let held_out: Vec<f64> = anchor.as_ref().map_or_else(Vec::new, |a| {
                let v = a.cross_fitted(t, rows);
                v.into_iter().map(log_positive).collect()
            });
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
            let (reg, miss, left_out) = match &base.reg {
                Regressor::Mlp(m) => (Regressor::Mlp(tune(m, cfg.seed)?), None, None),
                Regressor::Ensemble(e) => {
                    let mut errors = Vec::with_capacity(e.members.len());
                    let members = e
                        .members
                        .iter()
                        .map(|m| {
                            let mut n = m.clone();
                            let error = n.refit_output(&xs, &y, &RIDGE_PENALTIES, anchor_column)?;
                            errors.push(error);
                            Ok(n)
                        })
                        .collect::<Result<_, RegressError>>()?;
                    // Each profiled mode's residual: the members' median.
                    let residual: Vec<f64> = (0..rows.len())
                        .map(|i| median(&mut errors.iter().map(|e| e[i]).collect::<Vec<_>>()))
                        .collect();
                    let modes: Vec<_> = rows.iter().map(|r| r.mode).collect();
                    let miss = Miss::fit(&modes, &residual);
                    (
                        Regressor::Ensemble(Ensemble { members }),
                        miss,
                        Some(residual),
                    )
                }
                Regressor::Linear(_) => return Err(RegressError::Empty),
            };
            // The target's own range (widened) bounds what transfer may predict.
            let model = Model {
                physics: base.physics,
                log: base.log,
                scale: base.scale.clone(),
                reg,
                bounds: bounds(&y, base.log),
                energy,
                anchor,
                basis,
                miss,
                trained_on: base.trained_on,
                correction: None,
            };
            Ok((model, left_out))
        }
    }
}
