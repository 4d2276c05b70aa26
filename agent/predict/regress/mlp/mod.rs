//! The multilayer perceptron: dense ReLU [`Layer`]s and the [`Mlp`] (prediction, transfer
//! by re-initialising or by re-fitting the read-out in closed form), its hyper-parameters
//! ([`TrainConfig`], [`Loss`]), what training reports ([`TrainReport`]) and PowerTrain's
//! architecture ([`powertrain_layers`]); blocked batch prediction in `batch`, Adam
//! training on minibatches with dropout and a best-validation checkpoint in `train`.

use super::linear::{ridge_loo, slope, Linear, RidgeLoo};
use super::{moments, rng, shape, usable_rows, RegressError};
use crate::support::rng::SplitMix64;
use serde::{Deserialize, Serialize};

mod batch;
mod train;

use batch::LayerF32;
pub use batch::{Batch, BLOCK};

/// Training loss. `Mse` is on standardised targets; `Mape` is the mean
/// absolute percentage error (as a fraction) on the original scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Loss {
    /// Mean squared error.
    Mse,
    /// Mean absolute percentage error.
    Mape,
}

/// Hyper-parameters; `Default` follows PowerTrain (100 epochs, Adam 1e-3,
/// dropout 0.4/0.3 after hidden layers 1/2, best-validation checkpoint).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Passes over the training rows.
    pub epochs: usize,
    /// Rows per minibatch (one Adam step each).
    pub batch: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// Dropout probability after each hidden layer (missing entries = 0).
    pub dropout: Vec<f64>,
    /// Fraction held out for best-epoch selection (0 = keep final weights).
    pub val_fraction: f64,
    /// Seed of the shuffling, the validation split and dropout.
    pub seed: u64,
    /// The loss minimised and reported.
    pub loss: Loss,
    /// Number of leading layers whose weights stay fixed (0 = train all).
    pub freeze: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            epochs: 100,
            batch: 32,
            lr: 1e-3,
            dropout: vec![0.4, 0.3],
            val_fraction: 0.2,
            seed: 0,
            loss: Loss::Mse,
            freeze: 0,
        }
    }
}

/// Outcome of [`Mlp::train`]: `cfg.loss` values at `best_epoch` (the train
/// loss is that epoch's running mean, with dropout active).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// The epoch whose weights were kept (the last one without validation rows).
    pub best_epoch: usize,
    /// Training loss at that epoch.
    pub train_loss: f64,
    /// Validation loss at that epoch; `None` without validation rows.
    pub val_loss: Option<f64>,
    /// Rows skipped because a feature or the target was not finite.
    pub skipped: usize,
}

/// PowerTrain's architecture: `n_inputs -> 256 -> 128 -> 64 -> 1`.
pub fn powertrain_layers(n_inputs: usize) -> Vec<usize> {
    vec![n_inputs, 256, 128, 64, 1]
}

/// One dense layer; `w` is row-major `n_in x n_out` (`w[i * n_out + o]`). A saved layer
/// whose weights or biases do not match its shape is refused as it is read, so the error
/// carries the file's line. A layer whose weights and biases are all f32 values (a fitted
/// network's: [`Mlp::round_to_f32`]) is written with `"f32": true` and each number as
/// the shortest text that reads back to the same f32 (about half the text of an f64);
/// any other, in f64. Either reads back to the same values.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "LayerData")]
pub struct Layer {
    /// Inputs.
    pub n_in: usize,
    /// Outputs.
    pub n_out: usize,
    /// Weights, row-major `n_in x n_out`.
    pub w: Vec<f64>,
    /// Biases, one per output.
    pub b: Vec<f64>,
}

/// A layer as a file holds it, before its shape is checked.
#[derive(Deserialize)]
struct LayerData {
    n_in: usize,
    n_out: usize,
    /// Whether the numbers are f32 values, written as such.
    #[serde(default)]
    f32: bool,
    w: Vec<f64>,
    b: Vec<f64>,
}

impl Serialize for Layer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        let exact = |v: &[f64]| v.iter().all(|&x| f64::from(x as f32) == x);
        let narrow = exact(&self.w) && exact(&self.b);
        let mut st = s.serialize_struct("Layer", 4 + usize::from(narrow))?;
        st.serialize_field("n_in", &self.n_in)?;
        st.serialize_field("n_out", &self.n_out)?;
        if narrow {
            st.serialize_field("f32", &true)?;
            st.serialize_field("w", &f32s(&self.w))?;
            st.serialize_field("b", &f32s(&self.b))?;
        } else {
            st.serialize_field("w", &self.w)?;
            st.serialize_field("b", &self.b)?;
        }
        st.end()
    }
}

impl TryFrom<LayerData> for Layer {
    type Error = String;

    fn try_from(l: LayerData) -> Result<Layer, String> {
        let need = l.n_in.checked_mul(l.n_out).ok_or("layer shape overflows")?;
        if l.w.len() != need {
            return Err(format!(
                "a {} x {} layer needs {need} weights, the file has {}",
                l.n_in,
                l.n_out,
                l.w.len()
            ));
        }
        if l.b.len() != l.n_out {
            return Err(format!(
                "a layer of {} outputs needs {} biases, the file has {}",
                l.n_out,
                l.n_out,
                l.b.len()
            ));
        }
        // The shortest text of an f32 read as an f64 rounds back to that f32.
        let narrow = |v: Vec<f64>| match l.f32 {
            true => v.into_iter().map(|x| f64::from(x as f32)).collect(),
            false => v,
        };
        Ok(Layer {
            n_in: l.n_in,
            n_out: l.n_out,
            w: narrow(l.w),
            b: narrow(l.b),
        })
    }
}

impl Layer {
    fn he(n_in: usize, n_out: usize, rng: &mut SplitMix64) -> Layer {
        let sd = (2.0 / n_in.max(1) as f64).sqrt();
        let w = (0..n_in * n_out).map(|_| rng.normal() * sd).collect();
        let b = vec![0.0; n_out];
        Layer { n_in, n_out, w, b }
    }

    fn zeros_like(&self) -> Layer {
        let (w, b) = (vec![0.0; self.w.len()], vec![0.0; self.b.len()]);
        Layer { w, b, ..*self }
    }

    /// The weights and biases in f32, for [`Batch`].
    fn f32_weights(&self) -> LayerF32 {
        let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect();
        (f32s(&self.w), f32s(&self.b))
    }

    /// `dst[o] = b[o] + sum_i src[i] w[i][o]` (then optional ReLU) for one row, in f64:
    /// training's forward pass. An axpy per input that skips zero inputs (common after
    /// ReLU).
    fn forward_row(&self, src: &[f64], dst: &mut [f64], relu: bool) {
        dst.copy_from_slice(&self.b);
        for (&a, wr) in src.iter().zip(self.w.chunks_exact(self.n_out)) {
            if a != 0.0 {
                dst.iter_mut().zip(wr).for_each(|(d, w)| *d += a * w);
            }
        }
        if relu {
            dst.iter_mut().for_each(|v| *v = v.max(0.0));
        }
    }
}

/// Dense ReLU network with a linear scalar output. Inputs must already be
/// standardised; the target is standardised internally (`y_mean`, `y_std`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "MlpData")]
pub struct Mlp {
    /// The dense layers, input first; ReLU after each but the last.
    pub layers: Vec<Layer>,
    /// Mean of the training targets.
    pub y_mean: f64,
    /// Standard deviation of the training targets (1 if they are constant).
    pub y_std: f64,
    /// True once target statistics have been fitted.
    pub fitted: bool,
    /// A linear term on the inputs added to the output, in target units (set by
    /// [`Mlp::refit_output`]; [`Mlp::train`] drops it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip: Option<Linear>,
}

/// A network as a file holds it, before its layers are checked to chain.
#[derive(Deserialize)]
struct MlpData {
    layers: Vec<Layer>,
    y_mean: f64,
    y_std: f64,
    fitted: bool,
    #[serde(default)]
    skip: Option<Linear>,
}

impl TryFrom<MlpData> for Mlp {
    type Error = String;

    fn try_from(m: MlpData) -> Result<Mlp, String> {
        let (Some(first), Some(last)) = (m.layers.first(), m.layers.last()) else {
            return Err("a network without layers".into());
        };
        if let Some(i) = m.layers.windows(2).position(|p| p[0].n_out != p[1].n_in) {
            return Err(format!(
                "layer {i} has {} outputs, layer {} {} inputs",
                m.layers[i].n_out,
                i + 1,
                m.layers[i + 1].n_in
            ));
        }
        if last.n_out != 1 {
            return Err(format!("the last layer has {} outputs, not 1", last.n_out));
        }
        if let Some(skip) = m.skip.as_ref().filter(|s| s.w.len() < first.n_in) {
            return Err(format!(
                "the skip term has {} weights for {} inputs",
                skip.w.len(),
                first.n_in
            ));
        }
        Ok(Mlp {
            layers: m.layers,
            y_mean: m.y_mean,
            y_std: m.y_std,
            fitted: m.fitted,
            skip: m.skip,
        })
    }
}

impl Mlp {
    /// `layers` = widths including input and output (e.g. `[4, 256, 128, 64, 1]`);
    /// widths are clamped to >= 1 and the output width is forced to 1.
    pub fn new(layers: &[usize], seed: u64) -> Mlp {
        let mut sizes: Vec<usize> = layers.iter().map(|&s| s.max(1)).collect();
        if let Some(last) = sizes.last_mut() {
            *last = 1;
        }
        let mut rng = rng(seed);
        let layers = sizes.windows(2).map(|p| Layer::he(p[0], p[1], &mut rng));
        let (layers, y_mean, y_std, fitted) = (layers.collect(), 0.0, 1.0, false);
        Mlp {
            layers,
            y_mean,
            y_std,
            fitted,
            skip: None,
        }
    }

    /// Inputs the network takes (0 without layers).
    pub fn n_inputs(&self) -> usize {
        self.layers.first().map_or(0, |l| l.n_in)
    }

    /// Internal consistency (guards deserialised models).
    fn valid(&self) -> bool {
        let ok = |l: &Layer| l.n_in * l.n_out > 0 && l.w.len() == l.n_in * l.n_out;
        self.layers.last().is_some_and(|l| l.n_out == 1)
            && self.layers.iter().all(|l| ok(l) && l.b.len() == l.n_out)
            && self.layers.windows(2).all(|p| p[0].n_out == p[1].n_in)
    }

    /// Predicts one row (NaN on a shape mismatch).
    pub fn predict(&self, x: &[f64]) -> f64 {
        let mut out = [0.0];
        self.predict_batch(x, x.len(), &mut out);
        out[0]
    }

    /// Predicts the rows of the row-major `n x d` matrix `xs` into `out` ([`Mlp::predict_many`]
    /// with this network alone).
    pub fn predict_batch(&self, xs: &[f64], d: usize, out: &mut [f64]) {
        Mlp::predict_many(std::slice::from_ref(self), xs, d, &mut [out]);
    }

    /// Predicts the rows of the row-major `n x d` matrix `xs` by every network of `nets`
    /// (an ensemble's members, which read the same inputs), `outs[k]` for `nets[k]`, by a
    /// [`Batch`] run over blocks of rows. Rows missing from `xs`, or a `d` that does not
    /// match a network, yield NaN in its output.
    pub fn predict_many(nets: &[Mlp], xs: &[f64], d: usize, outs: &mut [&mut [f64]]) {
        let n = outs
            .iter()
            .map(|o| o.len())
            .min()
            .unwrap_or(0)
            .min(xs.len() / d.max(1));
        let mut batch = Batch::new(nets, d, n);
        for out in outs.iter_mut() {
            out[n..].fill(f64::NAN);
        }
        for (block, xb) in xs[..n * d].chunks(BLOCK * d).enumerate() {
            let at = block * BLOCK;
            let rows = xb.len() / d;
            let mut views: Vec<&mut [f64]> =
                outs.iter_mut().map(|o| &mut o[at..at + rows]).collect();
            batch.predict(xb, &[], &mut views);
        }
    }

    /// The activations the output layer reads (the last hidden layer's) for one row of
    /// standardised inputs.
    pub fn hidden(&self, x: &[f64]) -> Vec<f64> {
        let mut a = x.to_vec();
        for layer in &self.layers[..self.layers.len().saturating_sub(1)] {
            let mut b = vec![0.0; layer.n_out];
            layer.forward_row(&a, &mut b, true);
            a = b;
        }
        a
    }

    /// Transfers the network to a new target by re-fitting its read-out alone, in closed
    /// form: the target's residual from the network's own prediction is regressed on the
    /// hidden activations and the inputs themselves (a linear [`Mlp::skip`] term, for
    /// what the reference never varied with) by [`ridge_loo`]. Rows may carry extra
    /// columns past the network's inputs, which only that linear term reads. A strong
    /// penalty keeps the reference's shape, shifted to the target's level; a weak one
    /// re-weights the features freely; leave-one-out picks between them.
    ///
    /// An `anchor` column (past the network's inputs) holds another model's prediction of
    /// the target. Its weight `u` is fitted first, unpenalised: least squares of the
    /// residual on the anchor's difference from the network, within [0, 1], blending the
    /// two as `(1 - u) net + u anchor`; the ridge then fits what the blend leaves. The
    /// blend is folded into the output layer and the linear term, so the refitted network
    /// predicts from the anchor column as it is. Returns the read-out's leave-one-out
    /// residual of each row (on the target's scale; NaN for a row not used): how far the
    /// refitted network misses a profiled mode it was not fitted on.
    pub fn refit_output(
        &mut self,
        x: &[Vec<f64>],
        y: &[f64],
        lambdas: &[f64],
        anchor: Option<usize>,
    ) -> Result<Vec<f64>, RegressError> {
        if !self.valid() || !self.fitted {
            return Err(RegressError::Empty);
        }
        let ni = self.n_inputs();
        let d = x.first().map_or(ni, Vec::len).max(ni);
        let idx = usable_rows(x, Some(y), d)?;
        if let Some(a) = anchor.filter(|&a| a < ni || a >= d) {
            return Err(shape(d, a));
        }
        // The residual is from the network alone: the read-out's linear term is re-fitted
        // (and kept if the fit fails).
        let skip = self.skip.take();
        let net: Vec<f64> = idx.iter().map(|&i| self.predict(&x[i][..ni])).collect();
        let mut r: Vec<f64> = idx.iter().zip(&net).map(|(&i, n)| y[i] - n).collect();
        // The anchor's weight first, unpenalised: least squares of the residual on the
        // anchor's difference from the network, within [0, 1].
        let u = anchor.map_or(0.0, |a| {
            let c: Vec<f64> = idx.iter().zip(&net).map(|(&i, n)| x[i][a] - n).collect();
            let u = slope(&c, &r).clamp(0.0, 1.0);
            r.iter_mut().zip(&c).for_each(|(r, c)| *r -= u * c);
            u
        });
        // Then the ridge on what remains, over the hidden activations and the other inputs.
        let h: Vec<Vec<f64>> = idx
            .iter()
            .map(|&i| {
                let mut row = [self.hidden(&x[i][..ni]), x[i].clone()].concat();
                if let Some(a) = anchor {
                    let at = row.len() - d + a;
                    row[at] = 0.0;
                }
                row
            })
            .collect();
        let RidgeLoo { mut fit, loo, .. } = match ridge_loo(&h, &r, lambdas) {
            Ok(fit) => fit,
            Err(e) => {
                self.skip = skip;
                return Err(e);
            }
        };
        let nh = fit.w.len() - d;
        // The linear term reads the anchor with weight u, and the network keeps 1 - u.
        if let Some(a) = anchor {
            fit.w[nh + a] = u;
        }
        let last = self.layers.last_mut().ok_or(RegressError::Empty)?;
        for (w, v) in last.w.iter_mut().zip(&fit.w[..nh]) {
            *w = (1.0 - u) * *w + v / self.y_std;
        }
        last.b[0] = (1.0 - u) * last.b[0] + (fit.b - u * self.y_mean) / self.y_std;
        self.skip = Some(Linear {
            w: fit.w[nh..].to_vec(),
            b: 0.0,
        });
        // The ridge saw the usable rows only: back to the caller's rows.
        let mut residuals = vec![f64::NAN; x.len()];
        for (&i, e) in idx.iter().zip(loo) {
            residuals[i] = e;
        }
        Ok(residuals)
    }

    /// Rounds the layers' weights and biases to f32 values, the ones prediction reads
    /// ([`Batch`]): the predictions stay the same to the bit, and a saved network is
    /// written in f32 ([`Layer`]). The linear term and the target's scaling stay f64 (they
    /// are computed in f64).
    pub fn round_to_f32(&mut self) {
        for l in &mut self.layers {
            for v in l.w.iter_mut().chain(&mut l.b) {
                *v = f64::from(*v as f32);
            }
        }
    }

    /// Copy for transfer learning; `reinit_last` re-draws the output layer
    /// (He init from `seed`) and lets the next `train` refit target statistics.
    pub fn transfer(&self, reinit_last: bool, seed: u64) -> Mlp {
        let mut m = self.clone();
        if reinit_last {
            if let Some(l) = m.layers.last_mut() {
                *l = Layer::he(l.n_in, l.n_out, &mut rng(seed));
            }
            m.fitted = false;
        }
        m
    }
}

#[cfg(test)]
mod tests;
