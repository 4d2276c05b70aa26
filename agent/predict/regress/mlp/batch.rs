//! Blocked batch prediction: many networks over many rows in blocks of [`BLOCK`], their
//! forward passes by GEMM in f32, with the tables of the inputs' fixed parts shared.

use super::*;

/// `dst[r] = src[r] W` in f32 for the rows of `dst` (`rows x no`, row-major), where row
/// `r` of `src` is its `ni` values from `r * stride` (a row may be wider than the layer's
/// inputs: the GEMM reads it in place, so the network's inputs need no copy) and `w` is
/// `ni x no` row-major: prediction's forward pass, by `matrixmultiply`'s GEMM (its kernels
/// picked for the CPU at run time: AVX2/AVX-512 with FMA on x86-64, NEON on aarch64), or
/// one dot product per row for a read-out (a GEMM of one column packs for nothing). The
/// biases are added after ([`add_bias`]), in the pass that applies the ReLU.
pub(super) fn gemm(src: &[f32], stride: usize, ni: usize, w: &[f32], no: usize, dst: &mut [f32]) {
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
pub(super) fn add_bias(row: &mut [f32], bias: impl Iterator<Item = f32>, relu: bool) {
    let z = row.iter_mut().zip(bias);
    if relu {
        z.for_each(|(v, b)| *v = (*v + b).max(0.0));
    } else {
        z.for_each(|(v, b)| *v += b);
    }
}

/// `x . w` in f32, eight partial sums (so the compiler keeps them in vector lanes).
#[inline(always)]
pub(super) fn dot32(x: &[f32], w: &[f32]) -> f32 {
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
pub(super) type LayerF32 = (Vec<f32>, Vec<f32>);

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
pub(super) struct Prepared<'a> {
    k: usize,
    m: &'a Mlp,
    weights: Vec<LayerF32>,
    tables: Option<Tables>,
}

/// A first layer split over a lattice: what the inputs of each part contribute to the
/// pre-activation at each of the part's grid points (`no` values a point; the first
/// part's include the biases), and the weights of the inputs that read both parts
/// (`cross.len() x no`, row-major).
pub(super) struct Tables {
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
