//! Training: Adam on shuffled minibatches with dropout, a best-validation checkpoint,
//! and the optimiser's and backpropagation's buffers.

use super::*;

impl Mlp {
    /// Trains with Adam on shuffled minibatches of (standardised) `x`, dropping any
    /// [`Mlp::skip`] term first. Quantity
    /// statistics are refitted on `y`; an already fitted model first has its
    /// output layer rescaled so that its predictions are unchanged. With a
    /// validation split the best-validation weights are kept.
    pub fn train(
        &mut self,
        x: &[Vec<f64>],
        y: &[f64],
        cfg: &TrainConfig,
    ) -> Result<TrainReport, RegressError> {
        if !self.valid() {
            return Err(RegressError::Empty);
        }
        self.skip = None;
        let mut rows = usable_rows(x, Some(y), self.n_inputs())?;
        let skipped = x.len() - rows.len();
        let (m, s) = moments(rows.iter().map(|&i| y[i]));
        let s = if s > 1e-12 { s } else { 1.0 };
        if let (true, Some(last)) = (self.fitted, self.layers.last_mut()) {
            for w in &mut last.w {
                *w *= self.y_std / s;
            }
            for b in &mut last.b {
                *b = (*b * self.y_std + self.y_mean - m) / s;
            }
        }
        (self.y_mean, self.y_std, self.fitted) = (m, s, true);

        let mut rng = rng(cfg.seed ^ 0xD1B5_4A32_D192_ED03);
        rng.shuffle(&mut rows);
        let n_val = (rows.len() as f64 * cfg.val_fraction.clamp(0.0, 1.0)) as usize;
        let (val, train) = rows.split_at(if n_val < rows.len() { n_val } else { 0 });
        let mut train = train.to_vec();
        let gx = |ix: &[usize]| ix.iter().flat_map(|&i| x[i].clone()).collect::<Vec<_>>();
        let gy = |ix: &[usize]| ix.iter().map(|&i| y[i]).collect::<Vec<_>>();
        let (val_x, val_y) = (gx(val), gy(val));

        let nl = self.layers.len();
        let mut grads: Vec<Layer> = self.layers.iter().map(Layer::zeros_like).collect();
        let (mut m1, mut m2) = (grads.clone(), grads.clone());
        let mut sc = Scratch::new(&self.layers);
        let mut best: Option<(f64, usize, f64, Vec<Layer>)> = None;
        let (mut last_train, mut t) = (f64::NAN, 0i32);
        for epoch in 0..cfg.epochs {
            rng.shuffle(&mut train);
            let mut sum = 0.0;
            for batch in train.chunks(cfg.batch.max(1)) {
                grads.iter_mut().for_each(|g| g.w.fill(0.0));
                grads.iter_mut().for_each(|g| g.b.fill(0.0));
                // Backprop reads the transposes of the layers that pass deltas back.
                sc.transpose(&self.layers, cfg.freeze + 1);
                for &i in batch {
                    sum += self.backprop(&x[i], y[i], cfg, &mut rng, &mut sc, &mut grads);
                }
                t = t.saturating_add(1);
                let step = Adam {
                    lr: cfg.lr,
                    t,
                    scale: 1.0 / batch.len() as f64,
                };
                for l in cfg.freeze.min(nl)..nl {
                    let (p, g) = (&mut self.layers[l], &grads[l]);
                    step.apply(&mut p.w, &g.w, &mut m1[l].w, &mut m2[l].w);
                    step.apply(&mut p.b, &g.b, &mut m1[l].b, &mut m2[l].b);
                }
            }
            last_train = sum / train.len().max(1) as f64;
            if !val.is_empty() {
                let vl = self.eval_loss(&val_x, &val_y, cfg.loss);
                if best.as_ref().is_none_or(|b| vl < b.0) {
                    best = Some((vl, epoch, last_train, self.layers.clone()));
                }
            }
        }
        let (best_epoch, train_loss, val_loss) = match best {
            Some((vl, epoch, tl, layers)) => {
                self.layers = layers;
                (epoch, tl, Some(vl))
            }
            None => {
                if cfg.epochs == 0 {
                    last_train = self.eval_loss(&gx(&train), &gy(&train), cfg.loss);
                }
                let vl = (!val.is_empty()).then(|| self.eval_loss(&val_x, &val_y, cfg.loss));
                (cfg.epochs.saturating_sub(1), last_train, vl)
            }
        };
        Ok(TrainReport {
            best_epoch,
            train_loss,
            val_loss,
            skipped,
        })
    }

    /// Mean loss (no dropout) over a row-major matrix.
    fn eval_loss(&self, xs: &[f64], ys: &[f64], loss: Loss) -> f64 {
        let mut pred = vec![0.0; ys.len()];
        self.predict_batch(xs, self.n_inputs(), &mut pred);
        let (m, s) = (self.y_mean, self.y_std);
        let mut sum = 0.0;
        for (&p, &y) in pred.iter().zip(ys) {
            sum += loss_grad(loss, (p - m) / s, y, m, s).0;
        }
        sum / ys.len().max(1) as f64
    }

    /// Forward pass with dropout, then backward for one sample: adds dL/dθ
    /// to `grads` of the non-frozen layers; returns the sample loss.
    pub(super) fn backprop(
        &self,
        x: &[f64],
        y: f64,
        cfg: &TrainConfig,
        rng: &mut SplitMix64,
        sc: &mut Scratch,
        grads: &mut [Layer],
    ) -> f64 {
        let nl = self.layers.len();
        sc.acts[0].copy_from_slice(x);
        for (l, layer) in self.layers.iter().enumerate() {
            let (lo, hi) = sc.acts.split_at_mut(l + 1);
            layer.forward_row(&lo[l], &mut hi[0], false);
            if l + 1 < nl {
                let p = cfg.dropout.get(l).copied().unwrap_or(0.0).clamp(0.0, 0.95);
                for (o, g) in hi[0].iter_mut().zip(sc.gates[l].iter_mut()) {
                    let on = *o > 0.0 && (p == 0.0 || rng.unit() >= p);
                    *g = if on { 1.0 / (1.0 - p) } else { 0.0 };
                    *o *= *g;
                }
            }
        }
        let (loss, dz) = loss_grad(cfg.loss, sc.acts[nl][0], y, self.y_mean, self.y_std);
        sc.delta.clear();
        sc.delta.push(dz);
        for l in (cfg.freeze.min(nl)..nl).rev() {
            let (layer, g, inp) = (&self.layers[l], &mut grads[l], &sc.acts[l]);
            g.b.iter_mut().zip(&sc.delta).for_each(|(g, d)| *g += d);
            for (&a, gr) in inp.iter().zip(g.w.chunks_exact_mut(layer.n_out)) {
                if a != 0.0 {
                    gr.iter_mut().zip(&sc.delta).for_each(|(g, d)| *g += a * d);
                }
            }
            if l > cfg.freeze {
                // prev[i] = sum over o of w[i][o] delta[o], summed in the order of o as
                // `Iterator::sum` does (from -0.0), but an axpy per output over the
                // transposed weights: every input's sum advances at once, in vector lanes.
                sc.prev.clear();
                sc.prev.resize(layer.n_in, -0.0);
                for (wt, &d) in sc.wt[l].chunks_exact(layer.n_in).zip(&sc.delta) {
                    sc.prev.iter_mut().zip(wt).for_each(|(p, w)| *p += w * d);
                }
                for (p, &gate) in sc.prev.iter_mut().zip(&sc.gates[l - 1]) {
                    *p = if gate != 0.0 { *p * gate } else { 0.0 };
                }
                std::mem::swap(&mut sc.delta, &mut sc.prev);
            }
        }
        loss
    }
}

/// Adam (beta1 0.9, beta2 0.999, eps 1e-8) at step `t >= 1`, applied to
/// gradient sums scaled by `scale` (1 / batch size).
struct Adam {
    lr: f64,
    t: i32,
    scale: f64,
}

impl Adam {
    fn apply(&self, p: &mut [f64], g: &[f64], m: &mut [f64], v: &mut [f64]) {
        let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8);
        let (c1, c2) = (1.0 - b1.powi(self.t), 1.0 - b2.powi(self.t));
        for k in 0..p.len() {
            let g = g[k] * self.scale;
            m[k] = b1 * m[k] + (1.0 - b1) * g;
            v[k] = b2 * v[k] + (1.0 - b2) * g * g;
            p[k] -= self.lr * (m[k] / c1) / ((v[k] / c2).sqrt() + eps);
        }
    }
}

/// Per-sample training buffers: layer inputs/outputs, ReLU*dropout gates, deltas, and
/// each layer's weights transposed (`n_out x n_in`) for propagating deltas back, as of
/// the last [`Scratch::transpose`].
pub(super) struct Scratch {
    acts: Vec<Vec<f64>>,
    gates: Vec<Vec<f64>>,
    delta: Vec<f64>,
    prev: Vec<f64>,
    wt: Vec<Vec<f64>>,
}

impl Scratch {
    pub(super) fn new(layers: &[Layer]) -> Scratch {
        let mut acts = vec![vec![0.0; layers.first().map_or(0, |l| l.n_in)]];
        acts.extend(layers.iter().map(|l| vec![0.0; l.n_out]));
        let (gates, delta, prev) = (acts[1..].to_vec(), Vec::new(), Vec::new());
        let wt = layers.iter().map(|l| vec![0.0; l.w.len()]).collect();
        let mut sc = Scratch {
            acts,
            gates,
            delta,
            prev,
            wt,
        };
        sc.transpose(layers, 0);
        sc
    }

    /// Copies the weights of `layers[from..]` into their transposes (after every step
    /// of the optimiser: once a minibatch, not once a row).
    fn transpose(&mut self, layers: &[Layer], from: usize) {
        for (l, wt) in layers.iter().zip(&mut self.wt).skip(from) {
            for (i, row) in l.w.chunks_exact(l.n_out).enumerate() {
                for (o, &w) in row.iter().enumerate() {
                    wt[o * l.n_in + i] = w;
                }
            }
        }
    }
}

/// (loss, dloss/dz) for standardised output `z` and raw target `y`.
fn loss_grad(loss: Loss, z: f64, y: f64, m: f64, s: f64) -> (f64, f64) {
    match loss {
        Loss::Mse => {
            let e = z - (y - m) / s;
            (e * e, 2.0 * e)
        }
        Loss::Mape => {
            let (den, e) = (y.abs().max(1e-12), z * s + m - y);
            (e.abs() / den, e.signum() * s / den)
        }
    }
}
