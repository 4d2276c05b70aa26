//! The multilayer perceptron: dense ReLU [`Layer`]s and the [`Mlp`] (blocked batch
//! prediction, Adam training on minibatches with dropout and a best-validation
//! checkpoint, transfer by re-initialising or by re-fitting the read-out in closed
//! form), its hyper-parameters ([`TrainConfig`], [`Loss`]), what training reports
//! ([`TrainReport`]), PowerTrain's architecture ([`powertrain_layers`]), and the
//! optimiser's and training's buffers.

use super::linear::{ridge_loo, slope, Linear, RidgeLoo};
use super::{moments, rng, shape, usable_rows, RegressError};
use crate::support::rng::SplitMix64;
use serde::{Deserialize, Serialize};

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

/// `dst[r] = src[r] W` in f32 for the rows of `dst` (`rows x no`, row-major), where row
/// `r` of `src` is its `ni` values from `r * stride` (a row may be wider than the layer's
/// inputs: the GEMM reads it in place, so the network's inputs need no copy) and `w` is
/// `ni x no` row-major: prediction's forward pass, by `matrixmultiply`'s GEMM (its kernels
/// picked for the CPU at run time: AVX2/AVX-512 with FMA on x86-64, NEON on aarch64), or
/// one dot product per row for a read-out (a GEMM of one column packs for nothing). The
/// biases are added after ([`add_bias`]), in the pass that applies the ReLU.
fn gemm(src: &[f32], stride: usize, ni: usize, w: &[f32], no: usize, dst: &mut [f32]) {
    let rows = dst.len() / no.max(1);
    if ni == 0 || rows == 0 {
        dst.fill(0.0);
        return;
    }
    assert!(stride >= ni && w.len() == ni * no && dst.len() == rows * no);
    assert!(src.len() >= (rows - 1) * stride + ni);
    if no == 1 {
        for (r, d) in dst.iter_mut().enumerate() {
            *d = dot32(&src[r * stride..r * stride + ni], w);
        }
        return;
    }
    // SAFETY: `src` holds `rows` rows of `ni` values at row stride `stride`, `w` is
    // `ni x no` row-major (stride `no`), `dst` is `rows x no` row-major (stride `no`),
    // as asserted above; `dst` is borrowed mutably, so it overlaps neither input.
    unsafe {
        matrixmultiply::sgemm(
            rows,
            ni,
            no,
            1.0,
            src.as_ptr(),
            stride as isize,
            1,
            w.as_ptr(),
            no as isize,
            1,
            0.0,
            dst.as_mut_ptr(),
            no as isize,
            1,
        );
    }
}

/// `row += bias` (then the ReLU where `relu`): one pass over a layer's output.
#[inline(always)]
fn add_bias(row: &mut [f32], bias: impl Iterator<Item = f32>, relu: bool) {
    let z = row.iter_mut().zip(bias);
    if relu {
        z.for_each(|(v, b)| *v = (*v + b).max(0.0));
    } else {
        z.for_each(|(v, b)| *v += b);
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

/// `x . w` in f32, eight partial sums (so the compiler keeps them in vector lanes).
#[inline(always)]
fn dot32(x: &[f32], w: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (xc, wc) = (x.chunks_exact(8), w.chunks_exact(8));
    let tail: f32 = xc
        .remainder()
        .iter()
        .zip(wc.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (x8, w8) in xc.zip(wc) {
        for k in 0..8 {
            acc[k] += x8[k] * w8[k];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// A layer's weights and biases in f32 (prediction's copy).
type LayerF32 = (Vec<f32>, Vec<f32>);

/// Rows per block of [`Batch::predict`]: the block's activations stay in cache while
/// every network runs on them.
pub const BLOCK: usize = 256;

/// Networks prepared for predicting many rows (an ensemble's members, which read the same
/// inputs): their weights converted to f32 once, and the buffers one block of rows needs.
/// The networks run in f32 (GEMMs: all 18,096 modes of Orin AGX by an ensemble of eight,
/// time and power, in tens of milliseconds on one core; `jpower bench predict`), the
/// output's scaling and the linear term in f64. A network reads the first
/// [`Mlp::n_inputs`] columns of a row; columns past them are extra inputs that only its
/// [`Mlp::skip`] term reads.
///
/// Rows that lie on a lattice (power modes: every input reads the host knobs, the device
/// knobs, or both) can have their first layer split over it ([`Batch::with_tables`]): the
/// inputs that read one part of the lattice contribute to the first layer's pre-activation
/// the same at every row on one of that part's grid points, so that contribution is
/// computed once per grid point and looked up, and only the inputs that read both parts
/// go through the GEMM.
pub struct Batch<'a> {
    /// The networks that fit the rows' width.
    nets: Vec<Prepared<'a>>,
    d: usize,
    /// The most rows a block may have.
    cap: usize,
    /// The columns the first layer of a network with tables reads row by row.
    cross: Vec<usize>,
    /// The columns its linear term reads row by row.
    skip_cross: Vec<usize>,
    /// The number of points of each part's grid (none without tables).
    points: [usize; 2],
    inputs: Vec<f32>,
    /// A block's `cross` columns, row-major.
    gathered: Vec<f32>,
    a: Vec<f32>,
    b: Vec<f32>,
}

/// One network of a [`Batch`]: its index among those given, its weights in f32, and its
/// first layer's tables once [`Batch::with_tables`] has split it.
struct Prepared<'a> {
    k: usize,
    m: &'a Mlp,
    weights: Vec<LayerF32>,
    tables: Option<Tables>,
}

/// A first layer split over a lattice: what the inputs of each part contribute to the
/// pre-activation at each of the part's grid points (`no` values a point; the first
/// part's include the biases), and the weights of the inputs that read both parts
/// (`cross.len() x no`, row-major).
struct Tables {
    parts: [Vec<f32>; 2],
    cross: Vec<f32>,
    /// The linear term split alike ([`Mlp::skip`]; f64, as it is computed): what the
    /// columns of each part add at each grid point (the first part's with the term's
    /// constant), and the weights of the columns that read both, by `Batch::skip_cross`.
    skip: Option<([Vec<f64>; 2], Vec<f64>)>,
}

impl<'a> Batch<'a> {
    /// Prepares `nets` for blocks of up to `rows` rows (at most [`BLOCK`]) `d` wide.
    pub fn new(nets: &'a [Mlp], d: usize, rows: usize) -> Batch<'a> {
        let fits = |m: &Mlp| {
            let ni = m.n_inputs();
            let skip_width = m.skip.as_ref().map_or(ni, |s| s.w.len());
            d > 0 && d == skip_width && d >= ni && m.valid()
        };
        let nets: Vec<Prepared> = nets
            .iter()
            .enumerate()
            .filter(|(_, m)| fits(m))
            .map(|(k, m)| Prepared {
                k,
                m,
                weights: m.layers.iter().map(Layer::f32_weights).collect(),
                tables: None,
            })
            .collect();
        let width = nets
            .iter()
            .flat_map(|n| n.m.layers.iter().map(|l| l.n_out))
            .fold(d, usize::max);
        let cap = rows.min(BLOCK);
        Batch {
            nets,
            d,
            cap,
            cross: Vec::new(),
            skip_cross: Vec::new(),
            points: [0, 0],
            inputs: vec![0.0; cap * d],
            gathered: Vec::new(),
            a: vec![0.0; cap * width],
            b: vec![0.0; cap * width],
        }
    }

    /// Splits the first layer of every network with `part.len()` inputs over a lattice:
    /// input `i` reads only part `p` of a row's lattice point where `part[i]` is `Some(p)`
    /// (`p` 0 or 1), both parts where it is `None`. `grid[p]` holds a row (`d` wide, of
    /// which only part `p`'s columns are read) for each grid point of part `p`, in the
    /// order [`Batch::predict`]'s `at` numbers them. The tables cost an axpy per input and
    /// grid point; each row then costs the GEMM of its `None` columns alone. The sums
    /// are the same ones, grouped otherwise: predictions change by float rounding (a
    /// relative 1e-6 at most over Orin AGX's modes).
    ///
    /// `skip_part` does the same for the linear term's columns (all `d` of them; a column
    /// past its end reads both parts), which is split alike.
    pub fn with_tables(
        mut self,
        part: &[Option<usize>],
        skip_part: &[Option<usize>],
        grid: [&[f64]; 2],
    ) -> Batch<'a> {
        let (d, ni) = (self.d, part.len());
        if d == 0 || ni > d {
            return self;
        }
        let reads = |c: usize| skip_part.get(c).copied().flatten();
        self.skip_cross = (0..d).filter(|&c| reads(c).is_none()).collect();
        self.cross = (0..ni).filter(|&i| part[i].is_none()).collect();
        self.gathered = vec![0.0; self.cap * self.cross.len()];
        self.points = grid.map(|g| g.len() / d);
        for net in self.nets.iter_mut().filter(|n| n.m.n_inputs() == ni) {
            let (w, b) = &net.weights[0];
            let no = b.len();
            // A few hundred points at most: an axpy per input, no GEMM (whose set-up
            // would dominate a call for one mode).
            let table = |p: usize| {
                let mut t = Vec::with_capacity(grid[p].len() / d * no);
                for row in grid[p].chunks_exact(d) {
                    let at = t.len();
                    match p {
                        0 => t.extend_from_slice(b),
                        _ => t.resize(at + no, 0.0),
                    }
                    let z = &mut t[at..];
                    for ((_, &x), wr) in part
                        .iter()
                        .zip(row)
                        .zip(w.chunks_exact(no))
                        .filter(|((q, _), _)| **q == Some(p))
                    {
                        let x = x as f32;
                        z.iter_mut().zip(wr).for_each(|(z, w)| *z += x * w);
                    }
                }
                t
            };
            let cross = self.cross.iter().flat_map(|&i| &w[i * no..(i + 1) * no]);
            let skip = net.m.skip.as_ref().map(|l| {
                let table = |p: usize| -> Vec<f64> {
                    let own = (0..d).filter(|&c| reads(c) == Some(p));
                    let constant = if p == 0 { l.b } else { 0.0 };
                    let at = |row: &[f64]| own.clone().fold(constant, |z, c| z + l.w[c] * row[c]);
                    grid[p].chunks_exact(d).map(at).collect()
                };
                let cross = self.skip_cross.iter().map(|&c| l.w[c]).collect();
                ([table(0), table(1)], cross)
            });
            net.tables = Some(Tables {
                parts: [table(0), table(1)],
                cross: cross.copied().collect(),
                skip,
            });
        }
        self
    }

    /// Predicts the rows of the row-major `rows x d` block `xb` (at most the `rows` the
    /// batch was prepared for; rows past them are left out) into `outs[k][..rows]` for
    /// network `k`; NaN for a network that does not fit the width. `at` holds each row's
    /// grid points for the networks [`Batch::with_tables`] split (unless every row has
    /// its points on the grids, they run whole).
    pub fn predict(&mut self, xb: &[f64], at: &[[usize; 2]], outs: &mut [&mut [f64]]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, as checked just above.
            return unsafe { self.predict_avx2(xb, at, outs) };
        }
        self.predict_any(xb, at, outs)
    }

    /// [`Batch::predict`] compiled for AVX2: the loops around the GEMMs (the tables, the
    /// biases and ReLUs, the read-outs and the linear terms) run eight lanes wide instead
    /// of SSE2's four, with the same operations in the same order (no fused multiply-add),
    /// so the same answers to the bit. The GEMMs pick their kernels at run time anyway.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn predict_avx2(&mut self, xb: &[f64], at: &[[usize; 2]], outs: &mut [&mut [f64]]) {
        self.predict_any(xb, at, outs)
    }

    /// [`Batch::predict`] for any CPU (inlined into [`Batch::predict_avx2`] to be compiled
    /// for AVX2 there).
    #[inline(always)]
    fn predict_any(&mut self, xb: &[f64], at: &[[usize; 2]], outs: &mut [&mut [f64]]) {
        let d = self.d;
        let rows = (xb.len() / d.max(1)).min(self.cap);
        for out in outs.iter_mut() {
            out[..rows].fill(f64::NAN);
        }
        if rows == 0 {
            return;
        }
        let xb = &xb[..rows * d];
        let (inputs, a, b) = (&mut self.inputs, &mut self.a, &mut self.b);
        let nc = self.cross.len();
        let [n0, n1] = self.points;
        let on_grid = at.len() >= rows && at[..rows].iter().all(|&[i, j]| i < n0 && j < n1);
        // The whole rows in f32, for the networks whose first layer runs whole.
        if !on_grid || self.nets.iter().any(|n| n.tables.is_none()) {
            inputs[..xb.len()]
                .iter_mut()
                .zip(xb)
                .for_each(|(a, &x)| *a = x as f32);
        }
        if on_grid {
            for (g, row) in self
                .gathered
                .chunks_exact_mut(nc.max(1))
                .zip(xb.chunks_exact(d))
            {
                g.iter_mut()
                    .zip(&self.cross)
                    .for_each(|(g, &i)| *g = row[i] as f32);
            }
        }
        for net in &self.nets {
            let Some(out) = outs.get_mut(net.k) else {
                continue;
            };
            let m = net.m;
            let last = m.layers.len() - 1;
            for (l, (layer, (w, bias))) in m.layers.iter().zip(&net.weights).enumerate() {
                let no = layer.n_out;
                let dst = &mut b[..rows * no];
                let relu = l < last;
                match (l, net.tables.as_ref().filter(|_| on_grid)) {
                    (0, Some(t)) => {
                        gemm(&self.gathered[..rows * nc], nc, nc, &t.cross, no, dst);
                        for (row, &[i, j]) in dst.chunks_exact_mut(no).zip(at) {
                            let (u, v) = (&t.parts[0][i * no..], &t.parts[1][j * no..]);
                            add_bias(row, u.iter().zip(v).map(|(u, v)| u + v), relu);
                        }
                    }
                    _ => {
                        // The first layer reads the inputs in place, the next each its
                        // predecessor's.
                        let (src, stride) = match l {
                            0 => (&inputs[..rows * d], d),
                            _ => (&a[..rows * layer.n_in], layer.n_in),
                        };
                        gemm(src, stride, layer.n_in, w, no, dst);
                        dst.chunks_exact_mut(no)
                            .for_each(|row| add_bias(row, bias.iter().copied(), relu));
                    }
                }
                std::mem::swap(a, b);
            }
            let out = &mut out[..rows];
            for (o, &z) in out.iter_mut().zip(a.iter()) {
                *o = f64::from(z) * m.y_std + m.y_mean;
            }
            match (net.tables.as_ref().and_then(|t| t.skip.as_ref()), &m.skip) {
                (Some(([u, v], w)), _) if on_grid => {
                    let rows = out.iter_mut().zip(xb.chunks_exact(d)).zip(at);
                    for ((o, x), &[i, j]) in rows {
                        let cross = self.skip_cross.iter().zip(w).map(|(&c, w)| w * x[c]);
                        *o += u[i] + v[j] + cross.sum::<f64>();
                    }
                }
                (_, Some(skip)) => {
                    for (o, x) in out.iter_mut().zip(xb.chunks_exact(d)) {
                        *o += skip.predict(x);
                    }
                }
                (_, None) => {}
            }
        }
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
    fn backprop(
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
struct Scratch {
    acts: Vec<Vec<f64>>,
    gates: Vec<Vec<f64>>,
    delta: Vec<f64>,
    prev: Vec<f64>,
    wt: Vec<Vec<f64>>,
}

impl Scratch {
    fn new(layers: &[Layer]) -> Scratch {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::regress::tests::{data, f, map, quick, rmse, round_trip};
    use crate::predict::regress::Standardizer;

    #[test]
    fn refit_output_transfers_a_shift_and_an_input_trend() {
        let xs = data(1500, 3, -1.5, 1.5, 24);
        let mut base = Mlp::new(&[3, 32, 16, 1], 25);
        base.train(&xs, &map(&xs, f), &quick(20, 5e-3)).unwrap();
        // The target differs by a level and a trend in an input the reference's hidden
        // layer need not represent linearly; 20 rows suffice to fit it.
        let g = |x: &[f64]| f(x) + 0.7 * x[2] - 0.4;
        let (few, test) = (data(20, 3, -1.5, 1.5, 26), data(500, 3, -1.5, 1.5, 27));
        let mut tl = base.clone();
        tl.refit_output(&few, &map(&few, g), &[1e-3, 1e-2, 0.1, 1.0], None)
            .unwrap();
        let (e_tl, e_base) = (rmse(&tl, &test, g), rmse(&base, &test, g));
        println!("refit RMSE {e_tl:.4} vs untransferred {e_base:.4}");
        assert!(e_tl < 0.3 * e_base, "refit {e_tl} base {e_base}");
        // The skip term is part of predictions (batch and single row alike) and of the
        // saved model; training drops it.
        let flat: Vec<f64> = test.iter().flatten().copied().collect();
        let mut out = vec![0.0; test.len()];
        tl.predict_batch(&flat, 3, &mut out);
        assert!((out[7] - tl.predict(&test[7])).abs() < 1e-12);
        assert!(tl.skip.is_some());
        round_trip(&tl);
        tl.train(&few, &map(&few, g), &quick(1, 1e-3)).unwrap();
        assert!(tl.skip.is_none());
        assert_eq!(
            Mlp::new(&[3, 4, 1], 0).refit_output(&few, &map(&few, g), &[1.0], None),
            Err(RegressError::Empty),
            "an unfitted network has no output to correct"
        );
    }

    #[test]
    fn refit_output_reads_extra_columns_past_the_networks_inputs() {
        let xs = data(1500, 3, -1.5, 1.5, 24);
        let mut base = Mlp::new(&[3, 32, 16, 1], 25);
        base.train(&xs, &map(&xs, f), &quick(20, 5e-3)).unwrap();
        // The target also depends on a fourth column the network never reads.
        let g = |x: &[f64]| f(x) + 0.9 * x[3];
        let (few, test) = (data(30, 4, -1.5, 1.5, 28), data(500, 4, -1.5, 1.5, 29));
        let mut tl = base.clone();
        tl.refit_output(&few, &map(&few, g), &[1e-4, 1e-3, 1e-2, 0.1], None)
            .unwrap();
        assert_eq!(tl.skip.as_ref().map(|s| s.w.len()), Some(4));
        let w = tl.skip.as_ref().unwrap().w[3];
        assert!((w - 0.9).abs() < 0.1, "the extra column's weight {w}");
        let e = rmse(&tl, &test, g);
        assert!(e < 0.15, "refit RMSE with the extra column {e}");
        // Rows as wide as the read-out, else NaN; the network alone reads 3 columns.
        let flat: Vec<f64> = test.iter().flatten().copied().collect();
        let mut out = vec![0.0; test.len()];
        tl.predict_batch(&flat, 4, &mut out);
        assert!((out[3] - tl.predict(&test[3])).abs() < 1e-12);
        assert!(tl.predict(&test[3][..3]).is_nan());
        assert!(base.predict(&test[3][..3]).is_finite());
    }

    #[test]
    fn refit_output_follows_an_anchor_where_the_network_cannot() {
        let xs = data(1500, 3, -1.5, 1.5, 24);
        let mut base = Mlp::new(&[3, 32, 16, 1], 25);
        base.train(&xs, &map(&xs, f), &quick(20, 5e-3)).unwrap();
        // The target is another function entirely; the anchor column (4th) predicts it
        // with a small error of its own.
        let g = |x: &[f64]| (2.0 * x[0]).sin() * x[1] - x[2] * x[2];
        let anchored = |xs: &[Vec<f64>]| -> Vec<Vec<f64>> {
            xs.iter()
                .map(|x| [&x[..3], &[g(x) + 0.05 * x[0]]].concat())
                .collect()
        };
        let (few, test) = (
            anchored(&data(20, 3, -1.5, 1.5, 30)),
            anchored(&data(500, 3, -1.5, 1.5, 31)),
        );
        let lambdas = [1e-3, 1e-2, 0.1, 1.0, 10.0];
        let knobs =
            |xs: &[Vec<f64>]| -> Vec<Vec<f64>> { xs.iter().map(|x| x[..3].to_vec()).collect() };
        let mut plain = base.clone();
        plain
            .refit_output(&knobs(&few), &map(&few, g), &lambdas, None)
            .unwrap();
        let mut tl = base.clone();
        tl.refit_output(&few, &map(&few, g), &lambdas, Some(3))
            .unwrap();
        let e_plain = rmse(&plain, &knobs(&test), g);
        let e_anchor = rmse(&tl, &test, g);
        println!("anchored RMSE {e_anchor:.4} vs the network alone {e_plain:.4}");
        assert!(
            e_anchor < 0.1 && e_anchor < 0.3 * e_plain,
            "{e_anchor} {e_plain}"
        );
        let u = tl.skip.as_ref().unwrap().w[3];
        assert!((u - 1.0).abs() < 0.1, "the anchor's weight {u}");
        // The blend is folded in: batch and single-row predictions read the column as is.
        let flat: Vec<f64> = test.iter().flatten().copied().collect();
        let mut out = vec![0.0; test.len()];
        tl.predict_batch(&flat, 4, &mut out);
        assert!((out[9] - tl.predict(&test[9])).abs() < 1e-12);
        // The anchor must be one of the extra columns.
        let mut bad = base.clone();
        assert!(bad
            .refit_output(&few, &map(&few, g), &lambdas, Some(1))
            .is_err());
        assert!(bad
            .refit_output(&few, &map(&few, g), &lambdas, Some(4))
            .is_err());
        assert_eq!(bad, base, "a refused refit changes nothing");
    }

    #[test]
    fn mlp_fits_product_plus_sine() {
        let mut x = data(2000, 3, -2.0, 2.0, 2);
        let mut y = map(&x, f);
        x.push(vec![0.0, f64::NAN, 0.0]);
        y.push(0.0);
        let st = Standardizer::fit(&x).unwrap();
        let xs: Vec<Vec<f64>> = x.iter().map(|r| st.apply(r)).collect();
        let mut m = Mlp::new(&[3, 32, 16, 1], 7);
        let rep = m.train(&xs, &y, &quick(30, 5e-3)).unwrap();
        assert_eq!(rep.skipped, 1);
        let test = data(500, 3, -2.0, 2.0, 3);
        let err = |r: &Vec<f64>| (m.predict(&st.apply(r)) - f(r)).powi(2);
        let se = moments(test.iter().map(err)).0;
        let r2 = 1.0 - se / moments(test.iter().map(|r| f(r))).1.powi(2);
        println!("R^2 = {r2:.4}, report {rep:?}");
        assert!(r2 > 0.95, "R^2 {r2}");
    }

    #[test]
    fn transfer_beats_scratch_on_50_samples() {
        let g = |x: &[f64]| 1.3 * f(x) + 0.2;
        let xs = data(1500, 3, -1.5, 1.5, 4);
        let mut base = Mlp::new(&[3, 32, 16, 1], 11);
        base.train(&xs, &map(&xs, f), &quick(20, 5e-3)).unwrap();
        let (few, test) = (data(50, 3, -1.5, 1.5, 5), data(500, 3, -1.5, 1.5, 6));
        let gy = map(&few, g);
        let mut cfg = quick(300, 1e-2);
        cfg.val_fraction = 0.0;
        let mut scratch = Mlp::new(&[3, 32, 16, 1], 12);
        scratch.train(&few, &gy, &cfg).unwrap();
        let (mut tl, mut fine) = (base.transfer(true, 99), cfg.clone());
        fine.freeze = 2; // new output layer on the frozen pre-trained features
        tl.train(&few, &gy, &fine).unwrap();
        let (e_tl, e_sc) = (rmse(&tl, &test, g), rmse(&scratch, &test, g));
        println!("transfer RMSE {e_tl:.4} vs scratch {e_sc:.4}");
        assert!(e_tl < e_sc, "transfer {e_tl} scratch {e_sc}");
        // Refitting target statistics without reinit keeps the predictions.
        let mut keep = base.transfer(false, 0);
        let before = keep.predict(&test[0]);
        cfg.epochs = 0;
        keep.train(&few, &gy, &cfg).unwrap();
        // Predictions run the network in f32: equal to its precision.
        assert!((keep.predict(&test[0]) - before).abs() < 1e-5 * before.abs().max(1.0));
    }

    #[test]
    fn backprop_matches_finite_differences() {
        for dropout in [vec![], vec![0.4, 0.3]] {
            let m = Mlp::new(&[3, 8, 6, 4, 1], 5);
            let cfg = TrainConfig {
                dropout,
                ..quick(1, 1e-3)
            };
            let loss_and_grad = |m: &Mlp| {
                let mut g: Vec<Layer> = m.layers.iter().map(Layer::zeros_like).collect();
                let (mut sc, mut rng) = (Scratch::new(&m.layers), rng(42));
                let loss = m.backprop(&[0.3, -0.7, 1.1], 0.9, &cfg, &mut rng, &mut sc, &mut g);
                (loss, g)
            };
            let (g, mut nonzero) = (loss_and_grad(&m).1, 0);
            for (l, k) in (0..4).flat_map(|l| (0..m.layers[l].w.len()).map(move |k| (l, k))) {
                let (mut a, mut b) = (m.clone(), m.clone());
                a.layers[l].w[k] += 1e-6;
                b.layers[l].w[k] -= 1e-6;
                let fd = (loss_and_grad(&a).0 - loss_and_grad(&b).0) / 2e-6;
                assert!((fd - g[l].w[k]).abs() < 1e-6, "w[{l}][{k}] {fd}");
                nonzero += (fd != 0.0) as usize;
            }
            assert!(nonzero > 10, "{nonzero}");
        }
    }

    #[test]
    fn a_first_layer_split_over_a_lattice_predicts_as_the_whole_network() {
        // Six inputs: two read the first part of a row's lattice point, two the second,
        // two both; 7 x 5 points, each row once, over two blocks.
        let mut nets = vec![Mlp::new(&[6, 16, 8, 1], 1), Mlp::new(&[6, 8, 1], 2)];
        for m in &mut nets {
            (m.y_mean, m.y_std) = (1.5, 0.5);
            m.fitted = true;
        }
        let part = [Some(0), None, Some(1), Some(0), Some(1), None];
        let row = |i: usize, j: usize| {
            let (u, v) = (i as f64 * 0.3 - 1.0, j as f64 * 0.45 - 0.9);
            [u, (u - v).max(0.0), v, u * u, v.sin(), u * v]
        };
        let (pi, pj) = (7, 5);
        let at: Vec<[usize; 2]> = (0..pi * pj).map(|k| [k % pi, k / pi]).collect();
        let xs: Vec<f64> = at.iter().flat_map(|&[i, j]| row(i, j)).collect();
        let grid0: Vec<f64> = (0..pi).flat_map(|i| row(i, 0)).collect();
        let grid1: Vec<f64> = (0..pj).flat_map(|j| row(0, j)).collect();
        let mut batch = Batch::new(&nets, 6, 20).with_tables(&part, &part, [&grid0, &grid1]);
        let (mut split, mut whole) = (vec![vec![0.0; at.len()]; 2], vec![0.0; at.len()]);
        for (b, (xb, ab)) in xs.chunks(20 * 6).zip(at.chunks(20)).enumerate() {
            let [s0, s1] = &mut split[..] else {
                unreachable!()
            };
            let views = &mut [&mut s0[b * 20..][..ab.len()], &mut s1[b * 20..][..ab.len()]];
            batch.predict(xb, ab, views);
        }
        for (k, m) in nets.iter().enumerate() {
            m.predict_batch(&xs, 6, &mut whole);
            for (s, w) in split[k].iter().zip(&whole) {
                assert!((s - w).abs() <= 1e-6 * w.abs(), "net {k}: {s} vs {w}");
            }
        }
        // Without grid points, or with a point off its grid, the networks run whole.
        let mut out = vec![vec![0.0; 20]; 2];
        let [o0, o1] = &mut out[..] else {
            unreachable!()
        };
        batch.predict(&xs[..120], &[], &mut [&mut o0[..], &mut o1[..]]);
        nets[1].predict_batch(&xs[..120], 6, &mut whole[..20]);
        assert_eq!(out[1], whole[..20]);
        let off: Vec<[usize; 2]> = at[..20].iter().map(|&[i, _]| [i, pj]).collect();
        let [o0, o1] = &mut out[..] else {
            unreachable!()
        };
        batch.predict(&xs[..120], &off, &mut [&mut o0[..], &mut o1[..]]);
        assert_eq!(out[1], whole[..20]);
    }

    #[test]
    fn a_network_rounded_to_f32_is_saved_in_f32_and_predicts_the_same() {
        let xs = data(200, 3, -1.5, 1.5, 40);
        let mut m = Mlp::new(&[3, 16, 8, 1], 41);
        m.train(&xs, &map(&xs, f), &quick(3, 5e-3)).unwrap();
        let mut r = m.clone();
        r.round_to_f32();
        let (wide, narrow) = (serde_json::to_string(&m), serde_json::to_string(&r));
        let (wide, narrow) = (wide.unwrap(), narrow.unwrap());
        assert!(narrow.contains("\"f32\":true") && !wide.contains("f32"));
        assert!(
            narrow.len() * 10 < wide.len() * 6,
            "{} vs {}",
            narrow.len(),
            wide.len()
        );
        round_trip(&r);
        round_trip(&m);
        for x in &xs {
            assert_eq!(r.predict(x), m.predict(x));
        }
        // Any f32, from the least subnormal up, reads back from its shortest text.
        let mut g = rng(42);
        let w: Vec<f64> = (0..100_000)
            .map(|_| f64::from(f32::from_bits(g.next_u64() as u32)))
            .filter(|v| v.is_finite())
            .chain([f64::from(f32::from_bits(1)), f64::from(f32::MAX)])
            .collect();
        let (n_in, n_out) = (1, w.len());
        round_trip(&Layer {
            n_in,
            n_out,
            w,
            b: vec![0.0; n_out],
        });
    }

    #[test]
    fn predict_batch_matches_predict_and_timing() {
        let mut m = Mlp::new(&powertrain_layers(4), 3);
        (m.y_mean, m.y_std) = (2.5, 0.7);
        let n = if cfg!(debug_assertions) { 1000 } else { 18_096 };
        let rows = data(n, 4, -2.0, 2.0, 8);
        let flat: Vec<f64> = rows.iter().flatten().copied().collect();
        let mut out = vec![0.0; n];
        for pass in ["cold", "warm"] {
            let t0 = std::time::Instant::now();
            m.predict_batch(&flat, 4, &mut out);
            println!(
                "predict_batch ({pass}): {n} rows 4-256-128-64-1 in {:?}",
                t0.elapsed()
            );
        }
        for (r, o) in rows.iter().zip(&out).take(1000) {
            assert!((m.predict(r) - o).abs() < 1e-12);
        }
        let mut short = vec![0.0; 3];
        m.predict_batch(&flat[..9], 4, &mut short);
        assert!(short[0].is_finite() && short[1].is_finite() && short[2].is_nan());
        m.predict_batch(&flat, 3, &mut short);
        assert!(short.iter().all(|v| v.is_nan()));
    }
}
