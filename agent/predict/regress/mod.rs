//! Regressors predicting DNN-training minibatch time/power from power-mode
//! features (PowerTrain, FGCS 2024): [`Standardizer`], ridge [`Linear`], a ReLU
//! [`Mlp`] (Adam, dropout, best-validation checkpoint, MSE/MAPE, transfer
//! learning) and an [`Ensemble`]. No panics on consistently shaped input;
//! non-finite rows are skipped. Weights are `Vec<f64>`, row-major (a layer of f32 values
//! is written in f32: [`Layer`]).

mod ensemble;
mod linear;
mod mlp;
mod standardize;

pub use ensemble::Ensemble;
pub(crate) use linear::spd_inverse;
pub use linear::{ridge_loo, Linear, RidgeLoo};
pub use mlp::{powertrain_layers, Batch, Layer, Loss, Mlp, TrainConfig, TrainReport, BLOCK};
pub use standardize::Standardizer;

use crate::support::rng::SplitMix64;
use std::fmt;

/// Errors from fitting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegressError {
    /// No usable (finite) training rows, or no layers/members.
    Empty,
    /// Lengths disagree.
    Shape {
        /// The length expected.
        expected: usize,
        /// The length found.
        got: usize,
    },
    /// The normal equations are singular (use `ridge > 0`).
    Singular,
}

impl fmt::Display for RegressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegressError::Empty => write!(f, "no usable training rows"),
            RegressError::Shape { expected, got } => write!(f, "expected {expected}, got {got}"),
            RegressError::Singular => write!(f, "singular normal equations (increase ridge)"),
        }
    }
}

impl std::error::Error for RegressError {}

fn shape(expected: usize, got: usize) -> RegressError {
    RegressError::Shape { expected, got }
}

/// The generator of init, shuffling and dropout, seeded apart from other streams.
fn rng(seed: u64) -> SplitMix64 {
    SplitMix64::new(seed ^ 0x6A09_E667_F3BC_C909)
}

/// Checks every row has width `d` (and `y` matches `x`); returns the indices
/// of rows whose features (and target) are all finite, or `Empty`.
fn usable_rows(x: &[Vec<f64>], y: Option<&[f64]>, d: usize) -> Result<Vec<usize>, RegressError> {
    match y {
        Some(y) if y.len() != x.len() => return Err(shape(x.len(), y.len())),
        _ => {}
    }
    let mut idx = Vec::with_capacity(x.len());
    for (i, row) in x.iter().enumerate() {
        if row.len() != d {
            return Err(shape(d, row.len()));
        }
        if y.is_none_or(|y| y[i].is_finite()) && row.iter().all(|v| v.is_finite()) {
            idx.push(i);
        }
    }
    match idx.is_empty() {
        true => Err(RegressError::Empty),
        false => Ok(idx),
    }
}

/// Mean and population standard deviation (NaN for an empty input).
fn moments(v: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let n = v.clone().count() as f64;
    let m = v.clone().sum::<f64>() / n;
    (m, (v.map(|x| (x - m).powi(2)).sum::<f64>() / n).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    pub(super) fn data(n: usize, d: usize, lo: f64, hi: f64, seed: u64) -> Vec<Vec<f64>> {
        let mut r = rng(seed);
        let mut row = move || (0..d).map(|_| lo + (hi - lo) * r.unit()).collect();
        (0..n).map(|_| row()).collect()
    }
    pub(super) fn f(x: &[f64]) -> f64 {
        x[0] * x[1] + x[2].sin()
    }
    pub(super) fn map(xs: &[Vec<f64>], g: impl Fn(&[f64]) -> f64) -> Vec<f64> {
        xs.iter().map(|x| g(x)).collect()
    }
    pub(super) fn rmse(m: &Mlp, xs: &[Vec<f64>], g: impl Fn(&[f64]) -> f64) -> f64 {
        let se = moments(xs.iter().map(|x| (m.predict(x) - g(x)).powi(2))).0;
        se.sqrt()
    }
    pub(super) fn quick(epochs: usize, lr: f64) -> TrainConfig {
        let mut c = TrainConfig::default();
        (c.epochs, c.lr, c.batch) = (epochs, lr, 16);
        (c.dropout, c.val_fraction) = (vec![], 0.1);
        c
    }

    pub(super) fn round_trip<
        T: Serialize + serde::de::DeserializeOwned + PartialEq + fmt::Debug,
    >(
        v: &T,
    ) {
        let s = serde_json::to_string(v).unwrap();
        let back: T = serde_json::from_str(&s).unwrap();
        assert_eq!(&back, v);
        assert_eq!(serde_json::to_string(&back).unwrap(), s);
    }

    #[test]
    fn serde_round_trip() {
        let x = data(100, 2, -1.0, 1.0, 9);
        let y = map(&x, |r| r[0] - r[1].exp());
        round_trip(&Standardizer::fit(&x).unwrap());
        round_trip(&Linear::fit(&x, &y, 1e-3).unwrap());
        let (ens, reps) = Ensemble::train(&[2, 8, 8, 1], 2, &x, &y, &quick(3, 1e-2)).unwrap();
        round_trip(&ens);
        round_trip(&ens.members[0]);
        round_trip(&reps);
        let mut cfg = quick(3, 1e-2);
        cfg.loss = Loss::Mape;
        round_trip(&cfg);
    }
}
