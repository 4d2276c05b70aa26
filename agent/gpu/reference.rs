//! CPU reference of every kernel in `cuda-kernels/roofline.cu` and
//! `cuda-kernels/train.cu`: the same math in plain loops over slices, taking the same
//! [`super::ops`] descriptors, to check the GPU's results and to run the CNN without one.
//!
//! Each function gets exactly what its kernel gets: the operand slices (already cut to the
//! operand by the caller, see the ranges `check` returns) and the descriptor. Functions
//! panic when a slice is shorter than the descriptor's `check` requires.
//!
//! How close the GPU must come:
//! - `sweep_f32`, `sweep_f16x2`, `copy_f32`, `triad_f32`, `relu_*`, `im2col_f32`,
//!   `col2im_f32`, `maxpool2_*`, `add_bias_f32`, `sgd_momentum_f32`, `gemm_f32`: the
//!   same operations in the same order with the same fused multiply-adds, so bit-exact
//!   unless the kernels are built with `--use_fast_math` or `--ftz=true` (subnormals). The
//!   FP16 sweep is emulated exactly: each HFMA2 and HADD2 rounds once to binary16, as the
//!   hardware does (non-NaN results; NaN payloads are not modelled).
//! - `bias_grad_f32` (tree reduction on the GPU) and `softmax_xent_f32` (tree reductions,
//!   and the GPU's `expf`/`logf` differ from Rust's by an ulp or two): within a relative
//!   1e-5 of the largest magnitude summed.

use super::ops::{Bias, Conv, Gemm, Pool2, Relu, Sgd, Softmax, Stream, Sweep};

/// Independent FMA chains per element of the sweep kernels.
const CHAINS: usize = 8;

/// `sweep_f32`: chain j starts at `x + j` and does `iters` times `c = c * a + b` (fused);
/// the output is the chains' sum in chain order.
pub fn sweep_f32(d: &Sweep, a: f32, b: f32, input: &[f32], out: &mut [f32]) {
    for (o, &x) in out[..d.n].iter_mut().zip(&input[..d.n]) {
        let mut c: [f32; CHAINS] = std::array::from_fn(|j| x + j as f32);
        for _ in 0..d.iters {
            for v in &mut c {
                *v = v.mul_add(a, b);
            }
        }
        *o = c[1..].iter().fold(c[0], |s, &v| s + v);
    }
}

/// `sweep_f16x2`, bit-exact: chain j starts at `x ^ (j * 0x0001_0001)` (the low mantissa
/// bits of both halves flipped), does `iters` HFMA2s `c = c * a + b`, and the chains are
/// summed with HADD2 in chain order. `a`, `b`, inputs and outputs are `half2` bit patterns
/// ([`half2`], [`half2_values`]).
pub fn sweep_f16x2(d: &Sweep, a: u32, b: u32, input: &[u32], out: &mut [u32]) {
    for (o, &x) in out[..d.n].iter_mut().zip(&input[..d.n]) {
        let mut c: [u32; CHAINS] = std::array::from_fn(|j| x ^ (j as u32 * 0x0001_0001));
        for _ in 0..d.iters {
            for v in &mut c {
                *v = lanes(*v, a, b, |c, p, q| {
                    round_sum(f16_value(c) * f16_value(p), f16_value(q))
                });
            }
        }
        *o = c[1..].iter().fold(c[0], |s, &v| {
            lanes(s, v, 0, |s, v, _| round_sum(f16_value(s), f16_value(v)))
        });
    }
}

/// Packs two values into a `half2` (low half first), each rounded to the nearest binary16.
pub fn half2(lo: f32, hi: f32) -> u32 {
    let half = |v: f32| u32::from(round_sum(f64::from(v), -0.0));
    half(lo) | half(hi) << 16
}

/// The two values of a `half2` (low half first).
pub fn half2_values(x: u32) -> [f32; 2] {
    [
        f16_value(x as u16) as f32,
        f16_value((x >> 16) as u16) as f32,
    ]
}

/// Applies `f` to the low halves and to the high halves of three `half2`s.
fn lanes(x: u32, y: u32, z: u32, f: impl Fn(u16, u16, u16) -> u16) -> u32 {
    let lo = f(x as u16, y as u16, z as u16);
    let hi = f((x >> 16) as u16, (y >> 16) as u16, (z >> 16) as u16);
    u32::from(lo) | u32::from(hi) << 16
}

/// The value of a binary16 bit pattern (exact in `f64`).
fn f16_value(h: u16) -> f64 {
    let sign = if h & 0x8000 == 0 { 1.0 } else { -1.0 };
    let (exp, man) = (i32::from(h >> 10 & 0x1f), f64::from(h & 0x3ff));
    sign * match exp {
        0 => man * 2f64.powi(-24),
        31 if man == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1024.0 + man) * 2f64.powi(e - 25),
    }
}

/// The exact `p + q` rounded once to the nearest binary16, ties to even: an FP16 FMA
/// (`p = a * c`, exact in `f64` with 22 significant bits) or add, rounded as the hardware
/// rounds it.
fn round_sum(p: f64, q: f64) -> u16 {
    let s = p + q;
    if !s.is_finite() {
        return if s.is_nan() {
            0x7fff
        } else {
            0x7c00 | sign_bit(s)
        };
    }
    // TwoSum: s + err == p + q exactly.
    let bv = s - p;
    let err = (p - (s - bv)) + (q - bv);
    let mag = s.abs();
    if mag == 0.0 {
        return sign_bit(s);
    }
    // The binary16 ulp at s's binade: 2^-24 for subnormals, else 2^(exponent - 10).
    let exp = ((mag.to_bits() >> 52) as i32 - 1023 - 10).max(-24);
    let units = mag * 2f64.powi(-exp);
    let rounded = if units.fract() == 0.5 && err != 0.0 {
        // s sits on a midpoint that the exact sum is not on: go the way err points.
        if (err > 0.0) == (s > 0.0) {
            units.ceil()
        } else {
            units.floor()
        }
    } else {
        units.round_ties_even()
    };
    // Subnormals (exp = -24) encode the units directly; above, the exponent field is
    // exp + 25 and a rounding up to 2048 units carries into it.
    let bits = if exp == -24 {
        rounded as u32
    } else {
        (((exp + 25) as u32) << 10) + (rounded as u32 - 1024)
    };
    bits.min(0x7c00) as u16 | sign_bit(s)
}

fn sign_bit(v: f64) -> u16 {
    if v.is_sign_negative() {
        0x8000
    } else {
        0
    }
}

/// `copy_f32`: `b = a` over `4 n4` floats.
pub fn copy_f32(d: &Stream, a: &[f32], b: &mut [f32]) {
    let n = 4 * d.n4;
    b[..n].copy_from_slice(&a[..n]);
}

/// `triad_f32`: `a = b + s * c` over `4 n4` floats, as one FMA each.
pub fn triad_f32(d: &Stream, a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
    let n = 4 * d.n4;
    for ((a, &b), &c) in a[..n].iter_mut().zip(&b[..n]).zip(&c[..n]) {
        *a = s.mul_add(c, b);
    }
}

/// `gemm_f32`: `C = alpha * op(A) * op(B) + beta * C`; each element accumulates over k in
/// order with FMAs, and C is not read when `beta == 0`. The slices are the operands
/// themselves (the ranges [`Gemm::check`] returns).
pub fn gemm_f32(g: &Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    let (m, n, k) = (g.m, g.n, g.k);
    for row in 0..m {
        for col in 0..n {
            let mut acc = 0.0f32;
            for p in 0..k {
                let x = if g.trans_a {
                    a[p * m + row]
                } else {
                    a[row * k + p]
                };
                let y = if g.trans_b {
                    b[col * k + p]
                } else {
                    b[p * n + col]
                };
                acc = x.mul_add(y, acc);
            }
            let out = &mut c[row * n + col];
            *out = if beta == 0.0 {
                alpha * acc
            } else {
                alpha.mul_add(acc, beta * *out)
            };
        }
    }
}

/// `add_bias_f32`: `y[i][ch][p] += bias[ch]`.
pub fn add_bias_f32(d: &Bias, y: &mut [f32], bias: &[f32]) {
    for (i, v) in y[..d.n * d.c * d.hw].iter_mut().enumerate() {
        *v += bias[i / d.hw % d.c];
    }
}

/// `bias_grad_f32`: `db[ch]` = the sum of channel `ch` over images and positions.
pub fn bias_grad_f32(d: &Bias, dy: &[f32], db: &mut [f32]) {
    for (ch, out) in db[..d.c].iter_mut().enumerate() {
        *out = (0..d.n)
            .flat_map(|i| &dy[(i * d.c + ch) * d.hw..][..d.hw])
            .sum();
    }
}

/// `relu_fwd_f32`: `y = max(x, 0)` (NaN gives 0, as on the GPU).
pub fn relu_fwd_f32(d: &Relu, x: &[f32], y: &mut [f32]) {
    for (y, &x) in y[..d.n].iter_mut().zip(&x[..d.n]) {
        *y = if x > 0.0 { x } else { 0.0 };
    }
}

/// `relu_bwd_f32`: `dx = dy` where the saved pre-activation `x > 0`, else 0.
pub fn relu_bwd_f32(d: &Relu, x: &[f32], dy: &[f32], dx: &mut [f32]) {
    for ((dx, &dy), &x) in dx[..d.n].iter_mut().zip(&dy[..d.n]).zip(&x[..d.n]) {
        *dx = if x > 0.0 { dy } else { 0.0 };
    }
}

/// `im2col_f32` for one image: `col[(ci kh + ky) kw + kx][oy ow + ox]` is the input pixel
/// under kernel tap (ky, kx) at output (oy, ox), 0 in the padding.
pub fn im2col_f32(d: &Conv, x: &[f32], col: &mut [f32]) {
    let (oh, ow) = (d.oh(), d.ow());
    for (row, out) in col[..d.col_len()].chunks_exact_mut(oh * ow).enumerate() {
        let (ci, ky, kx) = (row / (d.kh * d.kw), row / d.kw % d.kh, row % d.kw);
        for (p, v) in out.iter_mut().enumerate() {
            let iy = (p / ow * d.stride + ky)
                .checked_sub(d.pad)
                .filter(|&y| y < d.h);
            let ix = (p % ow * d.stride + kx)
                .checked_sub(d.pad)
                .filter(|&x| x < d.w);
            *v = match (iy, ix) {
                (Some(iy), Some(ix)) => x[(ci * d.h + iy) * d.w + ix],
                _ => 0.0,
            };
        }
    }
}

/// `col2im_f32` for one image, the adjoint of [`im2col_f32`] in gather form: each `dx`
/// element is the sum (ky outer, kx inner) of the `col` entries im2col copied from it.
/// `dx` is overwritten.
pub fn col2im_f32(d: &Conv, col: &[f32], dx: &mut [f32]) {
    let (oh, ow) = (d.oh(), d.ow());
    // The output coordinate whose tap k reads input coordinate i, if any.
    let tap = |i: usize, k: usize, out: usize| {
        (i + d.pad)
            .checked_sub(k)
            .filter(|t| t % d.stride == 0 && t / d.stride < out)
            .map(|t| t / d.stride)
    };
    for (i, v) in dx[..d.x_len()].iter_mut().enumerate() {
        let (ci, iy, ix) = (i / (d.h * d.w), i / d.w % d.h, i % d.w);
        let mut acc = 0.0f32;
        for ky in 0..d.kh {
            let Some(oy) = tap(iy, ky, oh) else { continue };
            for kx in 0..d.kw {
                let Some(ox) = tap(ix, kx, ow) else { continue };
                acc += col[((ci * d.kh + ky) * d.kw + kx) * (oh * ow) + oy * ow + ox];
            }
        }
        *v = acc;
    }
}

/// `maxpool2_fwd_f32`: the max of each 2x2 window and its flat input index (the first in
/// row order on ties).
pub fn maxpool2_fwd_f32(d: &Pool2, x: &[f32], y: &mut [f32], argmax: &mut [i32]) {
    let (oh, ow) = (d.h / 2, d.w / 2);
    for (o, (y, arg)) in y[..d.out_len()]
        .iter_mut()
        .zip(&mut argmax[..d.out_len()])
        .enumerate()
    {
        let (plane, oy, ox) = (o / (oh * ow), o / ow % oh, o % ow);
        let top = (plane * d.h + 2 * oy) * d.w + 2 * ox;
        let best = [top + 1, top + d.w, top + d.w + 1]
            .into_iter()
            .fold(top, |best, j| if x[j] > x[best] { j } else { best });
        *y = x[best];
        *arg = best as i32;
    }
}

/// `maxpool2_bwd_f32`: `dx[argmax[o]] = dy[o]`, `dx` zeroed by the caller; an argmax
/// outside output o's window is ignored (as on the GPU, where that keeps writes in bounds).
pub fn maxpool2_bwd_f32(d: &Pool2, dy: &[f32], argmax: &[i32], dx: &mut [f32]) {
    let (oh, ow) = (d.h / 2, d.w / 2);
    for (o, (&g, &j)) in dy[..d.out_len()]
        .iter()
        .zip(&argmax[..d.out_len()])
        .enumerate()
    {
        let Ok(j) = usize::try_from(j) else { continue };
        let (plane, oy, ox) = (o / (oh * ow), o / ow % oh, o % ow);
        if j / (d.h * d.w) == plane && j / d.w % d.h / 2 == oy && j % d.w / 2 == ox {
            dx[j] = g;
        }
    }
}

/// `softmax_xent_f32`: per sample, `loss = log(sum exp(z - max)) - (z[label] - max)` and
/// `dlogits = (softmax - onehot(label)) / batch`; a label outside `0..classes` gives loss
/// NaN and no one-hot term.
pub fn softmax_xent_f32(
    d: &Softmax,
    logits: &[f32],
    labels: &[i32],
    loss: &mut [f32],
    dlogits: &mut [f32],
) {
    let k = d.classes;
    let rows = logits[..d.batch * k]
        .chunks_exact(k)
        .zip(dlogits[..d.batch * k].chunks_exact_mut(k));
    let samples = labels[..d.batch].iter().zip(&mut loss[..d.batch]);
    for ((z, dz), (&label, loss)) in rows.zip(samples) {
        let m = z.iter().fold(f32::MIN, |m, &v| m.max(v));
        let s: f32 = z.iter().map(|&v| (v - m).exp()).sum();
        let label = usize::try_from(label).ok().filter(|&l| l < k);
        *loss = label.map_or(f32::NAN, |l| s.ln() - (z[l] - m));
        for (c, (g, &v)) in dz.iter_mut().zip(z).enumerate() {
            let onehot = if Some(c) == label { 1.0 } else { 0.0 };
            *g = ((v - m).exp() / s - onehot) / d.batch as f32;
        }
    }
}

/// `sgd_momentum_f32`: `v = momentum v + (g + weight_decay w)`, `w -= lr v`, as FMAs.
pub fn sgd_momentum_f32(d: &Sgd, w: &mut [f32], g: &[f32], v: &mut [f32]) {
    for ((w, &g), v) in w[..d.n].iter_mut().zip(&g[..d.n]).zip(&mut v[..d.n]) {
        *v = d.momentum.mul_add(*v, d.weight_decay.mul_add(*w, g));
        *w = (-d.lr).mul_add(*v, *w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1) without a dependency.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
            })
            .collect()
    }

    fn dot(a: &[f32], b: &[f32]) -> f64 {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| f64::from(x) * f64::from(y))
            .sum()
    }

    #[test]
    fn gemm_matches_a_naive_product_for_every_transpose() {
        let (m, n, k) = (5, 7, 3);
        let (alpha, beta) = (0.75, -0.5);
        for (trans_a, trans_b) in [(false, false), (false, true), (true, false), (true, true)] {
            let (a, b, c0) = (values(m * k, 1), values(k * n, 2), values(m * n, 3));
            // op(A) and op(B) as explicit row-major matrices, then C by definition.
            let op_a: Vec<Vec<f64>> = (0..m)
                .map(|i| {
                    (0..k)
                        .map(|p| f64::from(if trans_a { a[p * m + i] } else { a[i * k + p] }))
                        .collect()
                })
                .collect();
            let op_b: Vec<Vec<f64>> = (0..k)
                .map(|p| {
                    (0..n)
                        .map(|j| f64::from(if trans_b { b[j * k + p] } else { b[p * n + j] }))
                        .collect()
                })
                .collect();
            let mut c = c0.clone();
            gemm_f32(
                &Gemm::new(trans_a, trans_b, m, n, k),
                alpha,
                &a,
                &b,
                beta,
                &mut c,
            );
            for i in 0..m {
                for j in 0..n {
                    let sum: f64 = (0..k).map(|p| op_a[i][p] * op_b[p][j]).sum();
                    let want = f64::from(alpha) * sum + f64::from(beta) * f64::from(c0[i * n + j]);
                    let got = f64::from(c[i * n + j]);
                    assert!(
                        (got - want).abs() < 1e-5,
                        "{trans_a} {trans_b} ({i},{j}): {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn gemm_with_zero_beta_ignores_c() {
        let mut c = vec![f32::NAN; 4];
        gemm_f32(
            &Gemm::new(false, false, 2, 2, 1),
            2.0,
            &[1.0, 2.0],
            &[3.0, 4.0],
            0.0,
            &mut c,
        );
        assert_eq!(c, [6.0, 8.0, 12.0, 16.0]);
    }

    #[test]
    fn bias_add_and_grad_by_hand() {
        let d = Bias { n: 2, c: 2, hw: 2 };
        let mut y = vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0];
        add_bias_f32(&d, &mut y, &[10.0, 20.0]);
        assert_eq!(y, [10.0, 11.0, 22.0, 23.0, 14.0, 15.0, 26.0, 27.0]);
        let mut db = vec![0.0; 2];
        bias_grad_f32(&d, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], &mut db);
        assert_eq!(db, [0.0 + 1.0 + 4.0 + 5.0, 2.0 + 3.0 + 6.0 + 7.0]);
        let mut db = vec![0.0; 3];
        bias_grad_f32(&Bias::rows(2, 3), &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &mut db);
        assert_eq!(db, [5.0, 7.0, 9.0]);
    }

    #[test]
    fn relu_forward_and_backward() {
        let d = Relu { n: 4 };
        let x = [-1.0, 0.0, 2.0, f32::NAN];
        let mut y = [9.0; 4];
        relu_fwd_f32(&d, &x, &mut y);
        assert_eq!(y, [0.0, 0.0, 2.0, 0.0]);
        let mut dx = [9.0; 4];
        relu_bwd_f32(&d, &x, &[1.0, 2.0, 3.0, 4.0], &mut dx);
        assert_eq!(dx, [0.0, 0.0, 3.0, 0.0]);
    }

    #[test]
    fn im2col_by_hand() {
        // One 3x3 channel, 2x2 kernel, no padding: 4 output positions.
        let d = Conv {
            c: 1,
            h: 3,
            w: 3,
            kh: 2,
            kw: 2,
            pad: 0,
            stride: 1,
        };
        let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let mut col = vec![0.0; d.col_len()];
        im2col_f32(&d, &x, &mut col);
        #[rustfmt::skip]
        let want = [
            1.0, 2.0, 4.0, 5.0, // tap (0, 0)
            2.0, 3.0, 5.0, 6.0, // tap (0, 1)
            4.0, 5.0, 7.0, 8.0, // tap (1, 0)
            5.0, 6.0, 8.0, 9.0, // tap (1, 1)
        ];
        assert_eq!(col, want);
        // Padding 1, stride 2 on a 2x2 image: output 2x2, corners read the padding.
        let d = Conv {
            c: 1,
            h: 2,
            w: 2,
            kh: 2,
            kw: 2,
            pad: 1,
            stride: 2,
        };
        let mut col = vec![9.0; d.col_len()];
        im2col_f32(&d, &[1.0, 2.0, 3.0, 4.0], &mut col);
        #[rustfmt::skip]
        let want = [0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 3.0, 0.0, 0.0, 2.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        assert_eq!(col, want);
    }

    #[test]
    fn col2im_is_the_adjoint_of_im2col() {
        for d in [
            Conv {
                c: 2,
                h: 5,
                w: 4,
                kh: 3,
                kw: 3,
                pad: 1,
                stride: 1,
            },
            Conv {
                c: 3,
                h: 7,
                w: 6,
                kh: 3,
                kw: 2,
                pad: 1,
                stride: 2,
            },
            Conv {
                c: 1,
                h: 4,
                w: 4,
                kh: 2,
                kw: 2,
                pad: 0,
                stride: 3,
            },
        ] {
            let x = values(d.x_len(), 4);
            let y = values(d.col_len(), 5);
            let (mut col, mut xt) = (vec![0.0; d.col_len()], vec![f32::NAN; d.x_len()]);
            im2col_f32(&d, &x, &mut col);
            col2im_f32(&d, &y, &mut xt);
            let (lhs, rhs) = (dot(&col, &y), dot(&x, &xt));
            assert!(
                (lhs - rhs).abs() < 1e-5 * lhs.abs().max(1.0),
                "{d:?}: {lhs} vs {rhs}"
            );
        }
    }

    #[test]
    fn maxpool_forward_and_backward_by_hand() {
        // One 3x4 plane (the odd last row is dropped): windows {1,5,2,6} and {3,7,4,8}.
        let d = Pool2 { nc: 1, h: 3, w: 4 };
        let x = [1.0, 5.0, 3.0, 3.0, 2.0, 6.0, 3.0, 0.0, 9.0, 9.0, 9.0, 9.0];
        let (mut y, mut arg) = ([0.0; 2], [0; 2]);
        maxpool2_fwd_f32(&d, &x, &mut y, &mut arg);
        assert_eq!(
            (y, arg),
            ([6.0, 3.0], [5, 2]),
            "ties go to the first in row order"
        );
        let mut dx = [0.0; 12];
        maxpool2_bwd_f32(&d, &[10.0, 20.0], &arg, &mut dx);
        assert_eq!(
            dx,
            [0.0, 0.0, 20.0, 0.0, 0.0, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        );
        // An argmax outside its window (or negative) is ignored.
        let mut dx = [0.0; 12];
        maxpool2_bwd_f32(&d, &[10.0, 20.0], &[8, -1], &mut dx);
        assert_eq!(dx, [0.0; 12]);
    }

    #[test]
    fn softmax_xent_by_hand_and_against_finite_differences() {
        // Logits (0, ln 3): softmax (1/4, 3/4); label 1: loss ln(4/3).
        let d = Softmax {
            batch: 2,
            classes: 2,
        };
        let logits = [0.0, 3f32.ln(), 100.0, 100.0];
        let (mut loss, mut g) = ([0.0; 2], [0.0; 4]);
        softmax_xent_f32(&d, &logits, &[1, 0], &mut loss, &mut g);
        assert!((loss[0] - (4.0f32 / 3.0).ln()).abs() < 1e-6 && (loss[1] - 2f32.ln()).abs() < 1e-6);
        let want = [0.125, -0.125, -0.25, 0.25];
        assert!(
            g.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{g:?}"
        );

        // The gradient of the mean loss, by central differences in f64 of the f32 kernel.
        let d = Softmax {
            batch: 3,
            classes: 5,
        };
        let (z, labels) = (
            values(15, 6).iter().map(|v| 3.0 * v).collect::<Vec<_>>(),
            [4, 0, 2],
        );
        let mean_loss = |z: &[f32]| {
            let (mut loss, mut g) = ([0.0; 3], [0.0; 15]);
            softmax_xent_f32(&d, z, &labels, &mut loss, &mut g);
            loss.iter().map(|&l| f64::from(l)).sum::<f64>() / 3.0
        };
        let (mut loss, mut g) = ([0.0; 3], [0.0; 15]);
        softmax_xent_f32(&d, &z, &labels, &mut loss, &mut g);
        let eps = 1e-2;
        for i in 0..15 {
            let (mut up, mut down) = (z.clone(), z.clone());
            up[i] += eps;
            down[i] -= eps;
            let fd = (mean_loss(&up) - mean_loss(&down)) / (2.0 * f64::from(eps));
            assert!(
                (fd - f64::from(g[i])).abs() < 1e-4,
                "logit {i}: {fd} vs {}",
                g[i]
            );
        }
    }

    #[test]
    fn softmax_xent_flags_a_bad_label_and_survives_large_logits() {
        let d = Softmax {
            batch: 2,
            classes: 3,
        };
        let (mut loss, mut g) = ([0.0; 2], [0.0; 6]);
        softmax_xent_f32(
            &d,
            &[1e30, 0.0, -1e30, 1.0, 2.0, 3.0],
            &[0, 3],
            &mut loss,
            &mut g,
        );
        assert_eq!(loss[0], 0.0);
        assert!(loss[1].is_nan());
        assert!(g.iter().all(|v| v.is_finite()));
        assert!(
            (g[3..].iter().sum::<f32>() - 0.5).abs() < 1e-6,
            "no one-hot term: softmax / batch"
        );
    }

    #[test]
    fn sgd_momentum_by_hand() {
        let d = Sgd {
            n: 2,
            lr: 0.5,
            momentum: 0.9,
            weight_decay: 0.1,
        };
        let (mut w, mut v) = ([1.0, -2.0], [1.0, 0.0]);
        sgd_momentum_f32(&d, &mut w, &[0.5, 1.0], &mut v);
        // v = 0.9 v + g + 0.1 w = (1.5, 0.8); w -= 0.5 v.
        assert!(
            (v[0] - 1.5).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6,
            "{v:?}"
        );
        assert!(
            (w[0] - 0.25).abs() < 1e-6 && (w[1] + 2.4).abs() < 1e-6,
            "{w:?}"
        );
    }

    #[test]
    fn copy_and_triad() {
        let d = Stream { n4: 2 };
        let src: Vec<f32> = (0..8).map(|v| v as f32).collect();
        let mut dst = vec![0.0; 9];
        copy_f32(&d, &src, &mut dst);
        assert_eq!(dst[..8], src[..]);
        assert_eq!(dst[8], 0.0);
        let mut a = vec![0.0; 8];
        triad_f32(&d, &mut a, &src, &[2.0; 8], 0.5);
        assert_eq!(a, src.iter().map(|v| v + 1.0).collect::<Vec<_>>());
    }

    #[test]
    fn sweep_f32_by_hand() {
        let mut out = [0.0; 2];
        sweep_f32(&Sweep { n: 2, iters: 0 }, 2.0, 1.0, &[1.0, -1.0], &mut out);
        assert_eq!(out, [8.0 + 28.0, -8.0 + 28.0]);
        // One step of c = 2c + 1 from 1 + j: sum (3 + 2j) = 24 + 56.
        sweep_f32(&Sweep { n: 1, iters: 1 }, 2.0, 1.0, &[1.0], &mut out);
        assert_eq!(out[0], 80.0);
        // c = c/2 + 1 converges exactly to 2 in f32: 8 chains sum to 16.
        sweep_f32(&Sweep { n: 1, iters: 200 }, 0.5, 1.0, &[5.0], &mut out);
        assert_eq!(out[0], 16.0);
    }

    #[test]
    fn sweep_f16x2_by_hand() {
        let mut out = [0];
        // iters 0: lane values 1 + j/1024 and -2 - j/512; HADD2 rounds the partial sums.
        sweep_f16x2(
            &Sweep { n: 1, iters: 0 },
            0,
            0,
            &[half2(1.0, -2.0)],
            &mut out,
        );
        let [lo, hi] = half2_values(out[0]);
        assert!((lo - (8.0 + 28.0 / 1024.0)).abs() <= 8.0 / 1024.0, "{lo}");
        assert!((hi - (-16.0 - 28.0 / 512.0)).abs() <= 16.0 / 1024.0, "{hi}");
        // c = c/2 + 1/4 converges to 1/2 exactly: 8 chains sum to 4; c = -c/2 to 0.
        let (a, b) = (half2(0.5, -0.5), half2(0.25, 0.0));
        sweep_f16x2(
            &Sweep { n: 1, iters: 40 },
            a,
            b,
            &[half2(1.5, 3.0)],
            &mut out,
        );
        assert_eq!(half2_values(out[0]), [4.0, 0.0]);
    }

    #[test]
    fn binary16_round_trips_and_rounds_to_nearest_even() {
        for h in (0..=u16::MAX).filter(|h| h & 0x7c00 != 0x7c00 || h & 0x3ff == 0) {
            assert_eq!(round_sum(f16_value(h), -0.0), h, "{h:#06x}");
        }
        let cases: [(f32, u16); 10] = [
            (1.0, 0x3c00),
            (-2.0, 0xc000),
            (1.0 + 1.0 / 2048.0, 0x3c00), // tie: to even
            (1.0 + 3.0 / 2048.0, 0x3c02), // tie: to even (up)
            (65504.0, 0x7bff),
            (65519.99, 0x7bff),
            (65520.0, 0x7c00),        // tie above the largest finite: infinity
            (2f32.powi(-24), 0x0001), // smallest subnormal
            (2f32.powi(-25), 0x0000), // tie with 0: to even
            (3.0 * 2f32.powi(-26), 0x0001),
        ];
        for (v, h) in cases {
            assert_eq!(half2(v, -v) as u16, h, "{v}");
            assert_eq!((half2(v, -v) >> 16) as u16, h ^ 0x8000, "-{v}");
        }
    }

    #[test]
    fn an_fma_rounds_once() {
        // (1 + 2^-10)(1 + 2^-10) = 1 + 2^-9 + 2^-20: one rounding gives 1 + 2^-9, and so
        // does adding 0; adding -2^-20 first would make it a tie. Subnormal addend.
        let p = f16_value(0x3c01) * f16_value(0x3c01);
        assert_eq!(round_sum(p, 0.0), 0x3c02);
        assert_eq!(round_sum(p, f16_value(0x8001)), 0x3c02);
        // A midpoint sum nudged off by an addend too small for f64 goes the addend's way.
        let mid = 1.0 + 2f64.powi(-11);
        assert_eq!(round_sum(mid, 2f64.powi(-70)), 0x3c01);
        assert_eq!(round_sum(mid, -(2f64.powi(-70))), 0x3c00);
        assert_eq!(round_sum(mid, 0.0), 0x3c00);
        assert_eq!(round_sum(-mid, -(2f64.powi(-70))), 0xbc01);
    }

    #[test]
    fn hfma_matches_an_exact_rational_oracle() {
        // (a, c, b, round16(a * c + b)) from exact rationals (Python `fractions`), picked
        // among 6000 such vectors and 20000 f32 conversions that all matched: ties, subnormal
        // results, overflow to infinity, plain cases.
        #[rustfmt::skip]
        let cases: [(u16, u16, u16, u16); 12] = [
            (0x52a0, 0xb6c6, 0x4d42, 0xbda0), (0x9af0, 0xd7da, 0xb708, 0xa31e), (0x3c00, 0x3abe, 0x3e88, 0x40f4),
            (0xa648, 0x8a9a, 0x025b, 0x02ae), (0x22f7, 0x133f, 0x8018, 0x00b2), (0x050d, 0x2a04, 0x81d5, 0x8198),
            (0x7311, 0x78e5, 0xa6ce, 0x7c00), (0xd5f4, 0x63ca, 0x6ec9, 0xfc00), (0xf06c, 0xe198, 0x6196, 0x7c00),
            (0x2265, 0x91b7, 0xd8f1, 0xd8f1), (0xcd61, 0xc386, 0x1027, 0x550f), (0x414c, 0x1e2f, 0xc2ce, 0xc2c6),
        ];
        for (a, c, b, want) in cases {
            let got = round_sum(f16_value(a) * f16_value(c), f16_value(b));
            assert_eq!(got, want, "fma({a:#06x}, {c:#06x}, {b:#06x})");
        }
    }
}
