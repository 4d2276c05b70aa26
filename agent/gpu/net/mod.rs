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

use super::ops::{Bias, Conv, Gemm, Pool2, Relu, Sgd, ShapeError, Softmax};
use super::reference;
use crate::support::rng::{mix, SplitMix64};

/// What a training step needs from a device; the CPU reference and CUDA implement it.
/// Each kernel method maps to the `train.cu` kernel of the same name (`<name>_f32`): the
/// implementation checks the buffers with the descriptor's `check` and launches with its
/// `launch`.
pub trait Backend {
    /// A device buffer of `f32`.
    type F;
    /// A device buffer of `i32`.
    type I;
    /// The backend's error; shape errors come from the descriptors' checks.
    type Error: std::error::Error + Send + Sync + 'static + From<ShapeError>;

    /// A new buffer holding `data` (and likewise for `i32`).
    fn upload(&self, data: &[f32]) -> Result<Self::F, Self::Error>;
    /// A new `i32` buffer holding `data`.
    fn upload_i(&self, data: &[i32]) -> Result<Self::I, Self::Error>;
    /// A new buffer of `n` zeros (and likewise for `i32`).
    fn zeros(&self, n: usize) -> Result<Self::F, Self::Error>;
    /// A new `i32` buffer of `n` zeros.
    fn zeros_i(&self, n: usize) -> Result<Self::I, Self::Error>;
    /// Copies a buffer to the host (waiting for the work that writes it).
    fn download(&self, buf: &Self::F) -> Result<Vec<f32>, Self::Error>;
    /// Sets a whole buffer to 0.
    fn fill_zero(&self, buf: &mut Self::F) -> Result<(), Self::Error>;
    /// Waits for all launched work.
    fn synchronize(&self) -> Result<(), Self::Error>;

    /// `gemm_f32`: `C = alpha op(A) op(B) + beta C` on the matrices `d` picks.
    fn gemm(
        &self,
        d: &Gemm,
        alpha: f32,
        a: &Self::F,
        b: &Self::F,
        beta: f32,
        c: &mut Self::F,
    ) -> Result<(), Self::Error>;
    /// `add_bias_f32`: adds `bias[ch]` to every element of channel `ch` of `y`.
    fn add_bias(&self, d: &Bias, y: &mut Self::F, bias: &Self::F) -> Result<(), Self::Error>;
    /// `bias_grad_f32`: `db[ch]` is the sum of channel `ch` of `dy` over images and positions.
    fn bias_grad(&self, d: &Bias, dy: &Self::F, db: &mut Self::F) -> Result<(), Self::Error>;
    /// `relu_fwd_f32`: `y = max(x, 0)`.
    fn relu_fwd(&self, d: &Relu, x: &Self::F, y: &mut Self::F) -> Result<(), Self::Error>;
    /// `relu_bwd_f32`: `dx = dy` where the pre-activation `x > 0`, else 0.
    fn relu_bwd(
        &self,
        d: &Relu,
        x: &Self::F,
        dy: &Self::F,
        dx: &mut Self::F,
    ) -> Result<(), Self::Error>;
    /// `im2col` of the `image`-th image of `x` into the `image`-th matrix of `col`.
    fn im2col(
        &self,
        d: &Conv,
        image: usize,
        x: &Self::F,
        col: &mut Self::F,
    ) -> Result<(), Self::Error>;
    /// `col2im` of the `image`-th matrix of `col` into the `image`-th image of `dx`.
    fn col2im(
        &self,
        d: &Conv,
        image: usize,
        col: &Self::F,
        dx: &mut Self::F,
    ) -> Result<(), Self::Error>;
    /// `maxpool2_fwd_f32`: the max of each 2x2 window into `y`, and its flat input index into
    /// `argmax`.
    fn maxpool2_fwd(
        &self,
        d: &Pool2,
        x: &Self::F,
        y: &mut Self::F,
        argmax: &mut Self::I,
    ) -> Result<(), Self::Error>;
    /// `dx` must be zeroed first.
    fn maxpool2_bwd(
        &self,
        d: &Pool2,
        dy: &Self::F,
        argmax: &Self::I,
        dx: &mut Self::F,
    ) -> Result<(), Self::Error>;
    /// `softmax_xent_f32`: each sample's cross-entropy `loss` and the gradient `dlogits` (divided
    /// by the batch size).
    fn softmax_xent(
        &self,
        d: &Softmax,
        logits: &Self::F,
        labels: &Self::I,
        loss: &mut Self::F,
        dlogits: &mut Self::F,
    ) -> Result<(), Self::Error>;
    /// `sgd_momentum_f32`: `v = momentum v + g + weight_decay w`, then `w -= lr v`.
    fn sgd_momentum(
        &self,
        d: &Sgd,
        w: &mut Self::F,
        g: &Self::F,
        v: &mut Self::F,
    ) -> Result<(), Self::Error>;
}

/// The CPU reference as a backend: host vectors and the kernels of
/// [`mod@reference`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu;

impl Backend for Cpu {
    type F = Vec<f32>;
    type I = Vec<i32>;
    type Error = ShapeError;

    fn upload(&self, data: &[f32]) -> Result<Vec<f32>, ShapeError> {
        Ok(data.to_vec())
    }

    fn upload_i(&self, data: &[i32]) -> Result<Vec<i32>, ShapeError> {
        Ok(data.to_vec())
    }

    fn zeros(&self, n: usize) -> Result<Vec<f32>, ShapeError> {
        Ok(vec![0.0; n])
    }

    fn zeros_i(&self, n: usize) -> Result<Vec<i32>, ShapeError> {
        Ok(vec![0; n])
    }

    fn download(&self, buf: &Vec<f32>) -> Result<Vec<f32>, ShapeError> {
        Ok(buf.clone())
    }

    fn fill_zero(&self, buf: &mut Vec<f32>) -> Result<(), ShapeError> {
        buf.fill(0.0);
        Ok(())
    }

    fn synchronize(&self) -> Result<(), ShapeError> {
        Ok(())
    }

    fn gemm(
        &self,
        d: &Gemm,
        alpha: f32,
        a: &Vec<f32>,
        b: &Vec<f32>,
        beta: f32,
        c: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        let [ra, rb, rc] = d.check(a.len(), b.len(), c.len())?;
        reference::gemm_f32(d, alpha, &a[ra], &b[rb], beta, &mut c[rc]);
        Ok(())
    }

    fn add_bias(&self, d: &Bias, y: &mut Vec<f32>, bias: &Vec<f32>) -> Result<(), ShapeError> {
        d.check(y.len(), bias.len())?;
        reference::add_bias_f32(d, y, bias);
        Ok(())
    }

    fn bias_grad(&self, d: &Bias, dy: &Vec<f32>, db: &mut Vec<f32>) -> Result<(), ShapeError> {
        d.check(dy.len(), db.len())?;
        reference::bias_grad_f32(d, dy, db);
        Ok(())
    }

    fn relu_fwd(&self, d: &Relu, x: &Vec<f32>, y: &mut Vec<f32>) -> Result<(), ShapeError> {
        d.check(&[("x", x.len()), ("y", y.len())])?;
        reference::relu_fwd_f32(d, x, y);
        Ok(())
    }

    fn relu_bwd(
        &self,
        d: &Relu,
        x: &Vec<f32>,
        dy: &Vec<f32>,
        dx: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        d.check(&[("x", x.len()), ("dy", dy.len()), ("dx", dx.len())])?;
        reference::relu_bwd_f32(d, x, dy, dx);
        Ok(())
    }

    fn im2col(
        &self,
        d: &Conv,
        image: usize,
        x: &Vec<f32>,
        col: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        let (rx, rc) = d.check(image, x.len(), col.len())?;
        reference::im2col_f32(d, &x[rx], &mut col[rc]);
        Ok(())
    }

    fn col2im(
        &self,
        d: &Conv,
        image: usize,
        col: &Vec<f32>,
        dx: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        let (rx, rc) = d.check(image, dx.len(), col.len())?;
        reference::col2im_f32(d, &col[rc], &mut dx[rx]);
        Ok(())
    }

    fn maxpool2_fwd(
        &self,
        d: &Pool2,
        x: &Vec<f32>,
        y: &mut Vec<f32>,
        argmax: &mut Vec<i32>,
    ) -> Result<(), ShapeError> {
        d.check(x.len(), y.len(), argmax.len())?;
        reference::maxpool2_fwd_f32(d, x, y, argmax);
        Ok(())
    }

    fn maxpool2_bwd(
        &self,
        d: &Pool2,
        dy: &Vec<f32>,
        argmax: &Vec<i32>,
        dx: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        d.check(dx.len(), dy.len(), argmax.len())?;
        reference::maxpool2_bwd_f32(d, dy, argmax, dx);
        Ok(())
    }

    fn softmax_xent(
        &self,
        d: &Softmax,
        logits: &Vec<f32>,
        labels: &Vec<i32>,
        loss: &mut Vec<f32>,
        dlogits: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        d.check(logits.len(), labels.len(), loss.len(), dlogits.len())?;
        reference::softmax_xent_f32(d, logits, labels, loss, dlogits);
        Ok(())
    }

    fn sgd_momentum(
        &self,
        d: &Sgd,
        w: &mut Vec<f32>,
        g: &Vec<f32>,
        v: &mut Vec<f32>,
    ) -> Result<(), ShapeError> {
        d.check(w.len(), g.len(), v.len())?;
        reference::sgd_momentum_f32(d, w, g, v);
        Ok(())
    }
}

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

/// Amplitude of the class templates and of the per-pixel noise: separable, but only by
/// combining many pixels (each pixel's noise is twice its template's amplitude).
const TEMPLATE: f32 = 0.4;
const NOISE: f32 = 0.8;

/// A deterministic synthetic classification task: each class is a fixed random 16x16
/// template uniform in ±0.4; a sample is its class's template plus noise uniform in ±0.8.
pub struct Synthetic {
    seed: u64,
    batch: usize,
    templates: Vec<f32>,
}

impl Synthetic {
    /// The task drawn from `seed`, served in batches of `batch`.
    pub fn new(seed: u64, batch: usize) -> Synthetic {
        let mut rng = SplitMix64::new(seed);
        let templates = (0..CLASSES * PIXELS)
            .map(|_| uniform(&mut rng, TEMPLATE))
            .collect();
        Synthetic {
            seed,
            batch,
            templates,
        }
    }

    /// Batch number `index`: images `[batch][1][16][16]` and labels `[batch]`, the same
    /// for the same seed and index.
    pub fn batch(&self, index: u64) -> (Vec<f32>, Vec<i32>) {
        let mut rng = SplitMix64::new(mix(self.seed ^ mix(index.wrapping_add(1))));
        let mut x = Vec::with_capacity(self.batch * PIXELS);
        let labels = (0..self.batch)
            .map(|_| {
                let label = (rng.next_u64() % CLASSES as u64) as usize;
                let template = &self.templates[label * PIXELS..][..PIXELS];
                x.extend(template.iter().map(|&t| t + uniform(&mut rng, NOISE)));
                label as i32
            })
            .collect();
        (x, labels)
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

    #[test]
    fn the_cpu_backend_checks_and_offsets() {
        let cpu = Cpu;
        // The second 1x2 by 2x1 product of a batch of two, written into the second slot.
        let g = Gemm::new(false, false, 1, 1, 2).at(1, 1, 1);
        let mut c = vec![0.0, 0.0];
        cpu.gemm(
            &g,
            1.0,
            &vec![9.0, 9.0, 1.0, 2.0],
            &vec![9.0, 9.0, 3.0, 4.0],
            0.0,
            &mut c,
        )
        .unwrap();
        assert_eq!(c, [0.0, 11.0]);
        assert!(cpu
            .gemm(&g, 1.0, &vec![0.0; 3], &vec![0.0; 4], 0.0, &mut c)
            .is_err());
        // col2im writes only the chosen image.
        let conv = Conv {
            c: 1,
            h: 2,
            w: 2,
            kh: 1,
            kw: 1,
            pad: 0,
            stride: 1,
        };
        let mut dx = vec![0.0; 8];
        cpu.col2im(
            &conv,
            1,
            &vec![0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0],
            &mut dx,
        )
        .unwrap();
        assert_eq!(dx, [0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0]);
        let e = cpu
            .im2col(&conv, 2, &vec![0.0; 8], &mut vec![0.0; 8])
            .unwrap_err();
        assert!(
            matches!(
                e,
                ShapeError::Length {
                    buffer: "x",
                    expected: 12,
                    actual: 8,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn synthetic_batches_are_reproducible_and_distinct() {
        let data = Synthetic::new(1, 8);
        let (x, y) = data.batch(0);
        assert_eq!((x.len(), y.len()), (8 * PIXELS, 8));
        assert!(y.iter().all(|&l| (0..CLASSES as i32).contains(&l)));
        assert_eq!(data.batch(0), (x.clone(), y));
        assert_ne!(data.batch(1).0, x);
        assert_ne!(Synthetic::new(2, 8).batch(0).0, x);
    }
}
