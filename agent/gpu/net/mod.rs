//! The built-in training workload: a small CNN written once over a [`Backend`] (the CPU
//! reference, [`Cpu`], or CUDA), and a synthetic task it learns ([`Synthetic`]).
//!
//! ```text
//! x [B,1,16,16] -> im2col -> GEMM (8 filters 3x3, pad 1) -> +bias -> ReLU -> maxpool 2x2
//!   -> [B,512] -> GEMM (512 -> 10) -> +bias -> softmax cross-entropy;   SGD with momentum
//! ```
//!
//! Every buffer is allocated once by [`Net::new`] for a fixed batch: a step launches
//! kernels and downloads the per-sample losses, nothing more. The convolution runs image
//! by image on sub-ranges of the batch buffers (the `at` of [`Gemm`], the `image` of
//! [`Conv`]), so nothing is copied. The first layer needs no input gradient, so `col2im`
//! is not used by this network (the backends still provide it, as part of the kernel set).

mod backend;
mod synthetic;

pub use backend::{Backend, Cpu};
pub use synthetic::Synthetic;

use super::ops::{Bias, Conv, Gemm, Pool2, Relu, Sgd, Softmax};
use crate::support::rng::SplitMix64;

/// The built-in training workload: the CNN on the synthetic task, with a fixed set of
/// batches uploaded once and cycled, so a minibatch uploads and allocates nothing.
pub struct Trainer<B: Backend> {
    /// The network being trained.
    pub net: Net<B>,
    task: Synthetic,
    batches: Vec<(B::F, B::I)>,
    lr: f32,
    steps: u64,
}

/// Distinct training batches a [`Trainer`] cycles through.
pub const TRAIN_BATCHES: u64 = 16;

impl<B: Backend> Trainer<B> {
    /// A network and `TRAIN_BATCHES` batches of `batch` images on `backend`.
    pub fn new(backend: B, batch: usize, seed: u64, lr: f32) -> Result<Trainer<B>, B::Error> {
        let net = Net::new(backend, batch, seed)?;
        let task = Synthetic::new(seed, batch);
        let batches = (0..TRAIN_BATCHES)
            .map(|i| {
                let (x, y) = task.batch(i);
                Ok((net.backend.upload(&x)?, net.backend.upload_i(&y)?))
            })
            .collect::<Result<_, B::Error>>()?;
        Ok(Trainer {
            net,
            task,
            batches,
            lr,
            steps: 0,
        })
    }

    /// One minibatch, finished on the device; returns its loss.
    pub fn step(&mut self) -> Result<f32, B::Error> {
        let (x, y) = &self.batches[(self.steps % TRAIN_BATCHES) as usize];
        let loss = self.net.step(x, y, self.lr)?;
        self.net.backend.synchronize()?;
        self.steps += 1;
        Ok(loss)
    }

    /// Accuracy on `batches` batches the training never sees.
    pub fn held_out_accuracy(&mut self, batches: u64) -> Result<f64, B::Error> {
        let (mut right, mut total) = (0usize, 0usize);
        for i in TRAIN_BATCHES..TRAIN_BATCHES + batches {
            let (x, labels) = self.task.batch(i);
            let x = self.net.backend.upload(&x)?;
            let logits = self.net.forward(&x)?;
            for (row, &label) in logits.chunks(CLASSES).zip(&labels) {
                let best = (0..CLASSES).max_by(|&p, &q| row[p].total_cmp(&row[q]));
                right += usize::from(best == Some(label as usize));
                total += 1;
            }
        }
        Ok(right as f64 / total.max(1) as f64)
    }
}

/// Side of the square single-channel input image.
pub const SIDE: usize = 16;
/// Pixels per input image.
pub const PIXELS: usize = SIDE * SIDE;
/// Number of classes.
pub const CLASSES: usize = 10;
/// Convolution filters.
const FILTERS: usize = 8;
/// Convolution kernel side.
const KERNEL: usize = 3;
/// Features after pooling: `FILTERS x SIDE/2 x SIDE/2`.
const FEATURES: usize = FILTERS * (SIDE / 2) * (SIDE / 2);
const MOMENTUM: f32 = 0.9;
/// L2 weight decay, on every parameter (biases included, for one uniform update).
const WEIGHT_DECAY: f32 = 5e-4;

/// The kernel shapes of one step at a given batch size.
#[derive(Debug, Clone, Copy)]
struct Shapes {
    batch: usize,
    conv: Conv,
    /// `pre_i [8 x 256] = W [8 x 9] col_i [9 x 256]`, per image.
    conv_fwd: Gemm,
    /// `dW [8 x 9] (+)= dpre_i [8 x 256] col_iᵀ`, per image.
    conv_dw: Gemm,
    conv_bias: Bias,
    act: Relu,
    pool: Pool2,
    /// `logits [B x 10] = pooled [B x 512] Wᵀ`.
    fc_fwd: Gemm,
    /// `dW [10 x 512] = dlogitsᵀ pooled`.
    fc_dw: Gemm,
    /// `dpooled [B x 512] = dlogits W`.
    fc_dx: Gemm,
    fc_bias: Bias,
    softmax: Softmax,
}

impl Shapes {
    fn new(batch: usize) -> Shapes {
        let conv = Conv {
            c: 1,
            h: SIDE,
            w: SIDE,
            kh: KERNEL,
            kw: KERNEL,
            pad: 1,
            stride: 1,
        };
        let (taps, positions) = (KERNEL * KERNEL, conv.oh() * conv.ow());
        Shapes {
            batch,
            conv,
            conv_fwd: Gemm::new(false, false, FILTERS, positions, taps),
            conv_dw: Gemm::new(false, true, FILTERS, taps, positions),
            conv_bias: Bias {
                n: batch,
                c: FILTERS,
                hw: positions,
            },
            act: Relu {
                n: batch * FILTERS * positions,
            },
            pool: Pool2 {
                nc: batch * FILTERS,
                h: conv.oh(),
                w: conv.ow(),
            },
            fc_fwd: Gemm::new(false, true, batch, CLASSES, FEATURES),
            fc_dw: Gemm::new(true, false, CLASSES, FEATURES, batch),
            fc_dx: Gemm::new(false, false, batch, FEATURES, CLASSES),
            fc_bias: Bias::rows(batch, CLASSES),
            softmax: Softmax {
                batch,
                classes: CLASSES,
            },
        }
    }
}

/// A parameter tensor with its gradient and momentum.
struct Param<F> {
    n: usize,
    w: F,
    g: F,
    v: F,
}

impl<F> Param<F> {
    fn new<B: Backend<F = F>>(backend: &B, init: &[f32]) -> Result<Param<F>, B::Error> {
        Ok(Param {
            n: init.len(),
            w: backend.upload(init)?,
            g: backend.zeros(init.len())?,
            v: backend.zeros(init.len())?,
        })
    }
}

/// The CNN with its parameters, momentum and every activation and gradient buffer for a
/// fixed batch. Inputs are `[batch][1][16][16]` `f32`, labels `[batch]` `i32` in `0..10`.
pub struct Net<B: Backend> {
    backend: B,
    s: Shapes,
    /// `conv_w [8 x 9]`, `conv_b [8]`, `fc_w [10 x 512]`, `fc_b [10]`.
    params: [Param<B::F>; 4],
    /// Per-image column matrices `[B][9][256]`, kept for the weight gradient.
    col: B::F,
    /// Convolution plus bias (the ReLU's saved input) and its gradient, `[B][8][256]`.
    pre: B::F,
    dpre: B::F,
    /// ReLU output and its gradient, `[B][8][256]`.
    act: B::F,
    dact: B::F,
    /// Pooled features and their gradient, `[B][512]`, and the pooling argmax.
    pooled: B::F,
    dpooled: B::F,
    argmax: B::I,
    /// Logits and their gradient `[B][10]`, per-sample losses `[B]`.
    logits: B::F,
    dlogits: B::F,
    loss: B::F,
}

impl<B: Backend> Net<B> {
    /// A network for batches of `batch` (at least 1) images: He-uniform convolution
    /// weights, Xavier-uniform fully connected weights, zero biases, all drawn from `seed`.
    pub fn new(backend: B, batch: usize, seed: u64) -> Result<Net<B>, B::Error> {
        let s = Shapes::new(batch);
        let mut rng = SplitMix64::new(seed);
        let mut uniform = |n: usize, limit: f32| {
            (0..n)
                .map(|_| uniform(&mut rng, limit))
                .collect::<Vec<f32>>()
        };
        let taps = KERNEL * KERNEL;
        let conv_w = uniform(FILTERS * taps, (6.0 / taps as f32).sqrt());
        let fc_w = uniform(
            CLASSES * FEATURES,
            (6.0 / (FEATURES + CLASSES) as f32).sqrt(),
        );
        let params = [
            Param::new(&backend, &conv_w)?,
            Param::new(&backend, &[0.0; FILTERS])?,
            Param::new(&backend, &fc_w)?,
            Param::new(&backend, &[0.0; CLASSES])?,
        ];
        let act_len = s.act.n;
        Ok(Net {
            col: backend.zeros(batch * s.conv.col_len())?,
            pre: backend.zeros(act_len)?,
            dpre: backend.zeros(act_len)?,
            act: backend.zeros(act_len)?,
            dact: backend.zeros(act_len)?,
            pooled: backend.zeros(batch * FEATURES)?,
            dpooled: backend.zeros(batch * FEATURES)?,
            argmax: backend.zeros_i(batch * FEATURES)?,
            logits: backend.zeros(batch * CLASSES)?,
            dlogits: backend.zeros(batch * CLASSES)?,
            loss: backend.zeros(batch)?,
            params,
            backend,
            s,
        })
    }

    /// The batch size it was built for.
    pub fn batch(&self) -> usize {
        self.s.batch
    }

    /// One SGD step on a batch given on the host (uploaded first), finished on the device;
    /// returns the batch's mean loss before the update.
    pub fn step_host(&mut self, x: &[f32], labels: &[i32], lr: f32) -> Result<f32, B::Error> {
        let x = self.backend.upload(x)?;
        let labels = self.backend.upload_i(labels)?;
        let loss = self.step(&x, &labels, lr)?;
        self.backend.synchronize()?;
        Ok(loss)
    }

    /// The logits `[batch][10]` of a batch.
    pub fn forward(&mut self, x: &B::F) -> Result<Vec<f32>, B::Error> {
        self.forward_logits(x)?;
        self.backend.download(&self.logits)
    }

    /// One SGD step on a batch; returns the batch's mean loss before the update.
    pub fn step(&mut self, x: &B::F, labels: &B::I, lr: f32) -> Result<f32, B::Error> {
        let loss = self.loss_and_grads(x, labels)?;
        for p in &mut self.params {
            let sgd = Sgd {
                n: p.n,
                lr,
                momentum: MOMENTUM,
                weight_decay: WEIGHT_DECAY,
            };
            self.backend.sgd_momentum(&sgd, &mut p.w, &p.g, &mut p.v)?;
        }
        Ok(loss as f32)
    }

    /// The parameters on the host: `conv_w [8 x 9]`, `conv_b [8]`, `fc_w [10 x 512]`,
    /// `fc_b [10]`.
    pub fn params(&self) -> Result<Vec<Vec<f32>>, B::Error> {
        self.params
            .iter()
            .map(|p| self.backend.download(&p.w))
            .collect()
    }

    /// FLOPs of one step, forward and backward: those of the GEMMs (the convolution counted
    /// as its im2col GEMM). The elementwise kernels and the SGD update, roughly a tenth
    /// more at small batches, are not counted.
    pub fn flops_per_step(&self) -> u64 {
        let s = &self.s;
        s.batch as u64 * (s.conv_fwd.flops() + s.conv_dw.flops())
            + s.fc_fwd.flops()
            + s.fc_dw.flops()
            + s.fc_dx.flops()
    }

    /// Forward pass up to the logits, keeping what the backward pass needs.
    fn forward_logits(&mut self, x: &B::F) -> Result<(), B::Error> {
        let (s, b) = (self.s, &self.backend);
        let [conv_w, conv_b, fc_w, fc_b] = &self.params;
        for i in 0..s.batch {
            b.im2col(&s.conv, i, x, &mut self.col)?;
            b.gemm(
                &s.conv_fwd.at(0, i, i),
                1.0,
                &conv_w.w,
                &self.col,
                0.0,
                &mut self.pre,
            )?;
        }
        b.add_bias(&s.conv_bias, &mut self.pre, &conv_b.w)?;
        b.relu_fwd(&s.act, &self.pre, &mut self.act)?;
        b.maxpool2_fwd(&s.pool, &self.act, &mut self.pooled, &mut self.argmax)?;
        b.gemm(&s.fc_fwd, 1.0, &self.pooled, &fc_w.w, 0.0, &mut self.logits)?;
        b.add_bias(&s.fc_bias, &mut self.logits, &fc_b.w)
    }

    /// Forward and backward: fills every parameter's gradient and returns the mean loss.
    fn loss_and_grads(&mut self, x: &B::F, labels: &B::I) -> Result<f64, B::Error> {
        self.forward_logits(x)?;
        let (s, b) = (self.s, &self.backend);
        let [conv_w, conv_b, fc_w, fc_b] = &mut self.params;
        b.softmax_xent(
            &s.softmax,
            &self.logits,
            labels,
            &mut self.loss,
            &mut self.dlogits,
        )?;
        b.gemm(&s.fc_dw, 1.0, &self.dlogits, &self.pooled, 0.0, &mut fc_w.g)?;
        b.bias_grad(&s.fc_bias, &self.dlogits, &mut fc_b.g)?;
        b.gemm(
            &s.fc_dx,
            1.0,
            &self.dlogits,
            &fc_w.w,
            0.0,
            &mut self.dpooled,
        )?;
        b.fill_zero(&mut self.dact)?;
        b.maxpool2_bwd(&s.pool, &self.dpooled, &self.argmax, &mut self.dact)?;
        b.relu_bwd(&s.act, &self.pre, &self.dact, &mut self.dpre)?;
        b.bias_grad(&s.conv_bias, &self.dpre, &mut conv_b.g)?;
        for i in 0..s.batch {
            let beta = if i == 0 { 0.0 } else { 1.0 };
            b.gemm(
                &s.conv_dw.at(i, i, 0),
                1.0,
                &self.dpre,
                &self.col,
                beta,
                &mut conv_w.g,
            )?;
        }
        let loss = b.download(&self.loss)?;
        Ok(loss.iter().map(|&l| f64::from(l)).sum::<f64>() / s.batch as f64)
    }
}

/// Uniform in `[-limit, limit)`, with 24 bits.
fn uniform(rng: &mut SplitMix64, limit: f32) -> f32 {
    let unit = (rng.next_u64() >> 40) as f32 / (1u32 << 24) as f32;
    (2.0 * unit - 1.0) * limit
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fraction of samples whose largest logit is their label.
    fn accuracy(logits: &[f32], labels: &[i32]) -> f64 {
        let hits = logits
            .chunks_exact(CLASSES)
            .zip(labels)
            .filter(|(z, &label)| {
                let best = z
                    .iter()
                    .enumerate()
                    .fold(0, |b, (i, &v)| if v > z[b] { i } else { b });
                best as i32 == label
            })
            .count();
        hits as f64 / labels.len() as f64
    }

    #[test]
    fn learns_the_synthetic_task_on_the_cpu() {
        let batch = 8;
        let data = Synthetic::new(7, batch);
        let mut net = Net::new(Cpu, batch, 1).unwrap();
        let losses: Vec<f32> = (0..200)
            .map(|i| {
                let (x, y) = data.batch(i);
                net.step(&x, &y, 0.02).unwrap()
            })
            .collect();
        assert!(
            losses[0] > 2.0,
            "an untrained net does no better than chance: {}",
            losses[0]
        );
        let tail = losses[190..].iter().sum::<f32>() / 10.0;
        assert!(
            tail < 0.5,
            "loss after 200 steps: {tail} (from {})",
            losses[0]
        );
        let (mut hits, mut seen) = (0.0, 0.0);
        for i in 1000..1008 {
            let (x, y) = data.batch(i);
            hits += accuracy(&net.forward(&x).unwrap(), &y) * y.len() as f64;
            seen += y.len() as f64;
        }
        assert!(hits / seen > 0.9, "held-out accuracy {}", hits / seen);
    }

    #[test]
    fn training_is_deterministic() {
        let run = || {
            let data = Synthetic::new(3, 4);
            let mut net = Net::new(Cpu, 4, 9).unwrap();
            let losses: Vec<f32> = (0..3)
                .map(|i| net.step(&data.batch(i).0, &data.batch(i).1, 0.05).unwrap())
                .collect();
            (losses, net.params().unwrap())
        };
        assert_eq!(run(), run());
        let other = Net::new(Cpu, 4, 10).unwrap().params().unwrap();
        assert_ne!(
            other,
            Net::new(Cpu, 4, 9).unwrap().params().unwrap(),
            "the seed matters"
        );
    }

    #[test]
    fn gradients_match_finite_differences() {
        let batch = 4;
        let (x, y) = Synthetic::new(5, batch).batch(0);
        let mut net = Net::new(Cpu, batch, 2).unwrap();
        net.loss_and_grads(&x, &y).unwrap();
        let grads: Vec<Vec<f32>> = net.params.iter().map(|p| p.g.clone()).collect();
        let mut rng = SplitMix64::new(11);
        // Small enough that few ReLU and max-pool kinks are crossed, large enough that the
        // f32 rounding of the loss (~1e-7) stays ~1e-4 in the difference quotient.
        let eps = 3e-4;
        let mut checked = 0;
        for (t, grad) in grads.iter().enumerate() {
            for _ in 0..6 {
                let j = (rng.next_u64() % grad.len() as u64) as usize;
                let w = net.params[t].w[j];
                net.params[t].w[j] = w + eps;
                let up = net.loss_and_grads(&x, &y).unwrap();
                net.params[t].w[j] = w - eps;
                let down = net.loss_and_grads(&x, &y).unwrap();
                net.params[t].w[j] = w;
                let fd = (up - down) / (2.0 * f64::from(eps));
                let g = f64::from(grad[j]);
                assert!(
                    (fd - g).abs() <= 2e-2 * fd.abs().max(g.abs()) + 1e-3,
                    "tensor {t} index {j}: backprop {g}, finite difference {fd}"
                );
                checked += usize::from(g.abs() > 1e-2);
            }
        }
        assert!(
            checked >= 8,
            "only {checked} of the checked gradients are large enough to mean much"
        );
    }

    #[test]
    fn flops_per_step_counts_every_gemm() {
        let net = Net::new(Cpu, 32, 0).unwrap();
        // Per image: conv forward and weight gradient, 2 * 8 * 256 * 9 each; per sample: fc
        // forward, weight gradient and input gradient, 2 * 10 * 512 each.
        assert_eq!(net.flops_per_step(), 32 * (2 * 36_864 + 3 * 10_240));
    }
}
