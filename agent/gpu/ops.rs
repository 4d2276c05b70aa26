//! Typed descriptors of the CUDA kernels in `cuda-kernels/roofline.cu` and
//! `cuda-kernels/train.cu`, shared by the CUDA backend and the CPU reference.
//!
//! One small struct per kernel shape. Its `check` validates the length of every buffer the
//! kernel will touch, and that every size fits the kernels' 32-bit `int` arguments and the
//! grid limits, so a launch whose descriptor passed `check` cannot index out of bounds:
//! the `// SAFETY:` comments of the CUDA launches rest on it. Its `launch` gives the grid
//! and block the kernel expects. Lengths are in elements (`f32`, `i32`, or `u32` for
//! `half2`). Where a buffer holds several operands back to back (the per-image matrices of
//! a batch), `check` also returns the validated sub-range the kernel gets.

use std::ops::Range;

/// Threads per block of the 1-D kernels; the block reductions of `train.cu` assume it.
pub const BLOCK: u32 = 256;
/// Side of the square tile of `gemm_f32`, whose block is `TILE x TILE` threads.
pub const TILE: u32 = 16;
/// `gridDim.x` limit (sm_30 and newer).
const MAX_GRID_X: u64 = (1 << 31) - 1;
/// `gridDim.y` limit.
const MAX_GRID_Y: usize = 65_535;
/// Largest size a kernel's `int` argument or index can hold.
const INT_MAX: usize = i32::MAX as usize;

/// A buffer or a shape that a kernel launch cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// A buffer shorter than the launch would index.
    #[error("{op}: buffer `{buffer}` holds {actual} elements, needs at least {expected}")]
    Length {
        /// The kernel (`gemm`, `softmax_xent`, ...).
        op: &'static str,
        /// The buffer's name (`A`, `labels`, ...).
        buffer: &'static str,
        /// Elements the launch needs.
        expected: usize,
        /// Elements the buffer holds.
        actual: usize,
    },
    /// A size beyond the kernels' `int` indices or the grid limits.
    #[error("{op}: {what} exceeds the kernel's 32-bit indices or the grid limits")]
    TooLarge {
        /// The kernel.
        op: &'static str,
        /// The size that is too large.
        what: &'static str,
    },
    /// A convolution that has no output.
    #[error("{op}: {what}")]
    Geometry {
        /// The kernel.
        op: &'static str,
        /// What is wrong with the geometry.
        what: &'static str,
    },
}

/// Grid, block and dynamic shared memory of one kernel launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// Blocks in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory (every kernel here uses static shared memory only).
    pub shared_bytes: u32,
}

impl Launch {
    /// A grid-stride kernel over the product of `dims` items: one thread per item,
    /// `BLOCK` per block (the grid is capped at its limit: the loop covers the rest).
    fn items(dims: &[usize]) -> Launch {
        let n = dims
            .iter()
            .fold(1u64, |acc, &d| acc.saturating_mul(d as u64));
        Launch::blocks(n.div_ceil(u64::from(BLOCK)))
    }

    /// `blocks` blocks of `BLOCK` threads, at least one (an empty grid is a launch error)
    /// and at most the grid limit.
    fn blocks(blocks: u64) -> Launch {
        Launch {
            grid: (blocks.clamp(1, MAX_GRID_X) as u32, 1, 1),
            block: (BLOCK, 1, 1),
            shared_bytes: 0,
        }
    }
}

/// `Err` unless `actual >= expected`.
fn need(
    op: &'static str,
    buffer: &'static str,
    expected: usize,
    actual: usize,
) -> Result<(), ShapeError> {
    if actual >= expected {
        Ok(())
    } else {
        Err(ShapeError::Length {
            op,
            buffer,
            expected,
            actual,
        })
    }
}

/// Every `(name, length)` holds at least `expected` elements.
fn each(
    op: &'static str,
    expected: usize,
    buffers: &[(&'static str, usize)],
) -> Result<(), ShapeError> {
    buffers
        .iter()
        .try_for_each(|&(name, len)| need(op, name, expected, len))
}

/// The product of `dims` (an element count), checked to fit an `int` like each factor.
fn elements(op: &'static str, what: &'static str, dims: &[usize]) -> Result<usize, ShapeError> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= INT_MAX && dims.iter().all(|&d| d <= INT_MAX))
        .ok_or(ShapeError::TooLarge { op, what })
}

/// The `index`-th run of `size` elements of a buffer of `len`, checked to lie inside it.
fn nth(
    op: &'static str,
    buffer: &'static str,
    index: usize,
    size: usize,
    len: usize,
) -> Result<Range<usize>, ShapeError> {
    let start = index
        .checked_mul(size)
        .filter(|s| s.checked_add(size).is_some())
        .ok_or(ShapeError::TooLarge {
            op,
            what: "operand offset",
        })?;
    need(op, buffer, start + size, len)?;
    Ok(start..start + size)
}

/// `sweep_f32` (floats) and `sweep_f16x2` (`half2` as `u32`): `n` elements in, `n` out,
/// `iters` FMAs on each of 8 chains per element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sweep {
    /// Elements in and out (`u32` ones for `half2`).
    pub n: usize,
    /// FMAs on each chain.
    pub iters: u32,
}

impl Sweep {
    /// `input` and `output`: the lengths of `in` and `out`.
    pub fn check(&self, input: usize, output: usize) -> Result<(), ShapeError> {
        each("sweep", self.n, &[("in", input), ("out", output)])
    }

    /// One thread per element.
    pub fn launch(&self) -> Launch {
        Launch::items(&[self.n])
    }
}

/// `copy_f32` (`b = a`) and `triad_f32` (`a = b + s * c`) over `n4` float4s; the buffers
/// are `f32` (4 * `n4` elements, 16-byte aligned: a whole allocation, or an offset that is
/// a multiple of 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream {
    /// Float4s in each buffer.
    pub n4: usize,
}

impl Stream {
    /// `buffers`: the named `f32` lengths of the kernel's arrays.
    pub fn check(&self, buffers: &[(&'static str, usize)]) -> Result<(), ShapeError> {
        let floats = self.n4.checked_mul(4).ok_or(ShapeError::TooLarge {
            op: "stream",
            what: "n4",
        })?;
        each("stream", floats, buffers)
    }

    /// One thread per float4.
    pub fn launch(&self) -> Launch {
        Launch::items(&[self.n4])
    }
}

/// `gemm_f32`: `C[m x n] = alpha * op(A) * op(B) + beta * C`, row-major; `op(A)` is
/// `m x k` (A stored `k x m` when `trans_a`), `op(B)` is `k x n` (B stored `n x k` when
/// `trans_b`). `at[i]` picks which matrix of its shape operand i (A, B, C) is in its buffer
/// (0 for a buffer holding one; the image's index for a batch of per-image matrices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gemm {
    /// Whether A is stored transposed (`k x m`).
    pub trans_a: bool,
    /// Whether B is stored transposed (`n x k`).
    pub trans_b: bool,
    /// Rows of `op(A)` and of C.
    pub m: usize,
    /// Columns of `op(B)` and of C.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`: the inner dimension.
    pub k: usize,
    /// Which matrix of its buffer each operand (A, B, C) is.
    pub at: [usize; 3],
}

impl Gemm {
    const OP: &'static str = "gemm";

    /// A GEMM of whole buffers (`at` all zero).
    pub fn new(trans_a: bool, trans_b: bool, m: usize, n: usize, k: usize) -> Gemm {
        Gemm {
            trans_a,
            trans_b,
            m,
            n,
            k,
            at: [0; 3],
        }
    }

    /// The same GEMM on the `a`-th, `b`-th and `c`-th matrices of the buffers.
    pub fn at(self, a: usize, b: usize, c: usize) -> Gemm {
        Gemm {
            at: [a, b, c],
            ..self
        }
    }

    /// Floating-point operations: `2 m n k`.
    pub fn flops(&self) -> u64 {
        2 * (self.m as u64) * (self.n as u64) * (self.k as u64)
    }

    /// Checks the three buffers and returns the ranges of A, B and C in them.
    pub fn check(&self, a: usize, b: usize, c: usize) -> Result<[Range<usize>; 3], ShapeError> {
        let op = Self::OP;
        let sizes = [
            elements(op, "A", &[self.m, self.k])?,
            elements(op, "B", &[self.k, self.n])?,
            elements(op, "C", &[self.m, self.n])?,
        ];
        if self.m.div_ceil(TILE as usize) > MAX_GRID_Y {
            return Err(ShapeError::TooLarge { op, what: "m" });
        }
        Ok([
            nth(op, "A", self.at[0], sizes[0], a)?,
            nth(op, "B", self.at[1], sizes[1], b)?,
            nth(op, "C", self.at[2], sizes[2], c)?,
        ])
    }

    /// One `TILE x TILE` block per tile of C.
    pub fn launch(&self) -> Launch {
        let tiles = |d: usize| d.div_ceil(TILE as usize).max(1) as u32;
        Launch {
            grid: (tiles(self.n), tiles(self.m), 1),
            block: (TILE, TILE, 1),
            shared_bytes: 0,
        }
    }
}

/// `add_bias_f32` (`y[i][ch][p] += bias[ch]`) and `bias_grad_f32` (`db[ch] = sum of
/// dy[..][ch][..]`) over `y` of shape `[n][c][hw]`: a conv output, or with `hw = 1` the
/// rows of a matrix ([`Bias::rows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bias {
    /// Images, or matrix rows.
    pub n: usize,
    /// Channels: one bias each.
    pub c: usize,
    /// Elements per channel of an image (`h w`; 1 for a matrix).
    pub hw: usize,
}

impl Bias {
    /// A bias per column of a `rows x cols` matrix.
    pub fn rows(rows: usize, cols: usize) -> Bias {
        Bias {
            n: rows,
            c: cols,
            hw: 1,
        }
    }

    /// `y`: the activations (or their gradient), `bias`: the bias (or its gradient).
    pub fn check(&self, y: usize, bias: usize) -> Result<(), ShapeError> {
        let op = "bias";
        need(op, "y", elements(op, "y", &[self.n, self.c, self.hw])?, y)?;
        need(op, "bias", self.c, bias)
    }

    /// `add_bias_f32`: one thread per element.
    pub fn launch_add(&self) -> Launch {
        Launch::items(&[self.n, self.c, self.hw])
    }

    /// `bias_grad_f32`: one block per channel.
    pub fn launch_grad(&self) -> Launch {
        Launch::blocks(self.c as u64)
    }
}

/// `relu_fwd_f32` and `relu_bwd_f32` over `n` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relu {
    /// Elements.
    pub n: usize,
}

impl Relu {
    /// `buffers`: the named lengths of `x, y` (forward) or `x, dy, dx` (backward).
    pub fn check(&self, buffers: &[(&'static str, usize)]) -> Result<(), ShapeError> {
        each("relu", elements("relu", "n", &[self.n])?, buffers)
    }

    /// One thread per element.
    pub fn launch(&self) -> Launch {
        Launch::items(&[self.n])
    }
}

/// `im2col_f32` and `col2im_f32` for one image of a batch: `x` (or `dx`) holds images of
/// `c x h x w`, `col` holds their column matrices of `(c kh kw) x (oh ow)`; both kernels
/// touch the `image`-th of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv {
    /// Input channels.
    pub c: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Zero padding on each side.
    pub pad: usize,
    /// Stride, in both directions.
    pub stride: usize,
}

impl Conv {
    const OP: &'static str = "conv";

    /// Output height (meaningful once [`Conv::check`] passes).
    pub fn oh(&self) -> usize {
        Self::out(self.h, self.kh, self.pad, self.stride)
    }

    /// Output width (meaningful once [`Conv::check`] passes).
    pub fn ow(&self) -> usize {
        Self::out(self.w, self.kw, self.pad, self.stride)
    }

    fn out(len: usize, k: usize, pad: usize, stride: usize) -> usize {
        Self::padded(len, pad).saturating_sub(k) / stride.max(1) + 1
    }

    fn padded(len: usize, pad: usize) -> usize {
        len.saturating_add(pad.saturating_mul(2))
    }

    /// Elements of one image.
    pub fn x_len(&self) -> usize {
        self.c * self.h * self.w
    }

    /// Elements of one image's column matrix.
    pub fn col_len(&self) -> usize {
        self.c * self.kh * self.kw * self.oh() * self.ow()
    }

    /// Checks the geometry and both buffers; returns the ranges of the `image`-th image in
    /// `x` and of its column matrix in `col`.
    pub fn check(
        &self,
        image: usize,
        x: usize,
        col: usize,
    ) -> Result<(Range<usize>, Range<usize>), ShapeError> {
        let op = Self::OP;
        if self.stride == 0 {
            return Err(ShapeError::Geometry {
                op,
                what: "stride 0",
            });
        }
        let (padded_h, padded_w) = (
            Self::padded(self.h, self.pad),
            Self::padded(self.w, self.pad),
        );
        if self.kh > padded_h || self.kw > padded_w {
            return Err(ShapeError::Geometry {
                op,
                what: "kernel larger than the padded input",
            });
        }
        // The kernels compute input coordinates up to the padded sizes in `int`.
        for v in [padded_h, padded_w, self.stride] {
            elements(op, "padded input or stride", &[v])?;
        }
        let x_len = elements(op, "x", &[self.c, self.h, self.w])?;
        let col_len = elements(op, "col", &[self.c, self.kh, self.kw, self.oh(), self.ow()])?;
        Ok((
            nth(op, "x", image, x_len, x)?,
            nth(op, "col", image, col_len, col)?,
        ))
    }

    /// `im2col_f32`: one thread per column-matrix element.
    pub fn launch_im2col(&self) -> Launch {
        Launch::items(&[self.c, self.kh, self.kw, self.oh(), self.ow()])
    }

    /// `col2im_f32`: one thread per image element.
    pub fn launch_col2im(&self) -> Launch {
        Launch::items(&[self.c, self.h, self.w])
    }
}

/// `maxpool2_fwd_f32` and `maxpool2_bwd_f32`: 2x2 windows, stride 2, over `nc` planes of
/// `h x w` (input) into `nc` planes of `h/2 x w/2` (output, and one argmax per output).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2 {
    /// Planes: images times channels.
    pub nc: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
}

impl Pool2 {
    /// Output elements.
    pub fn out_len(&self) -> usize {
        self.nc * (self.h / 2) * (self.w / 2)
    }

    /// `input`: `x` or `dx`; `output`: `y` or `dy`.
    pub fn check(&self, input: usize, output: usize, argmax: usize) -> Result<(), ShapeError> {
        let op = "maxpool2";
        need(
            op,
            "input",
            elements(op, "input", &[self.nc, self.h, self.w])?,
            input,
        )?;
        each(
            op,
            self.out_len(),
            &[("output", output), ("argmax", argmax)],
        )
    }

    /// One thread per output.
    pub fn launch(&self) -> Launch {
        Launch::items(&[self.nc, self.h / 2, self.w / 2])
    }
}

/// `softmax_xent_f32` over `batch` rows of `classes` logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Softmax {
    /// Rows: samples of the batch.
    pub batch: usize,
    /// Logits per row.
    pub classes: usize,
}

impl Softmax {
    /// The lengths of the kernel's four buffers.
    pub fn check(
        &self,
        logits: usize,
        labels: usize,
        loss: usize,
        dlogits: usize,
    ) -> Result<(), ShapeError> {
        let op = "softmax_xent";
        let len = elements(op, "logits", &[self.batch, self.classes])?;
        each(op, len, &[("logits", logits), ("dlogits", dlogits)])?;
        each(op, self.batch, &[("labels", labels), ("loss", loss)])
    }

    /// One block per sample.
    pub fn launch(&self) -> Launch {
        Launch::blocks(self.batch as u64)
    }
}

/// `sgd_momentum_f32` over `n` parameters: `v = momentum v + g + weight_decay w`,
/// `w -= lr v`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sgd {
    /// Parameters.
    pub n: usize,
    /// Learning rate.
    pub lr: f32,
    /// Momentum factor.
    pub momentum: f32,
    /// L2 weight decay, added to the gradient.
    pub weight_decay: f32,
}

impl Sgd {
    /// The lengths of the weights, gradients and momentum.
    pub fn check(&self, w: usize, g: usize, v: usize) -> Result<(), ShapeError> {
        let n = elements("sgd", "n", &[self.n])?;
        each("sgd", n, &[("w", w), ("g", g), ("v", v)])
    }

    /// One thread per parameter.
    pub fn launch(&self) -> Launch {
        Launch::items(&[self.n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_buffers_are_rejected_by_name() {
        let g = Gemm::new(false, true, 4, 3, 5);
        assert!(g.check(20, 15, 12).is_ok());
        assert_eq!(
            g.check(20, 15, 11),
            Err(ShapeError::Length {
                op: "gemm",
                buffer: "C",
                expected: 12,
                actual: 11
            })
        );
        let e = Softmax {
            batch: 2,
            classes: 10,
        }
        .check(20, 1, 2, 20)
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("`labels` holds 1 elements, needs at least 2"),
            "{e}"
        );
        assert!(Sgd {
            n: 3,
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 0.0
        }
        .check(3, 3, 2)
        .is_err());
        assert!(Relu { n: 3 }
            .check(&[("x", 3), ("dy", 3), ("dx", 2)])
            .is_err());
        assert!(Pool2 { nc: 2, h: 4, w: 5 }.check(40, 8, 7).is_err());
        assert!(Bias { n: 2, c: 3, hw: 4 }.check(24, 2).is_err());
        assert!(Sweep { n: 8, iters: 1 }.check(8, 7).is_err());
        assert!(Stream { n4: 2 }.check(&[("a", 8), ("b", 7)]).is_err());
    }

    #[test]
    fn operand_offsets_are_checked_and_returned() {
        let g = Gemm::new(false, false, 2, 3, 4).at(0, 2, 1);
        assert_eq!(g.check(8, 36, 12).unwrap(), [0..8, 24..36, 6..12]);
        assert!(matches!(
            g.check(8, 35, 12),
            Err(ShapeError::Length {
                buffer: "B",
                expected: 36,
                ..
            })
        ));
        let conv = Conv {
            c: 1,
            h: 4,
            w: 4,
            kh: 3,
            kw: 3,
            pad: 1,
            stride: 1,
        };
        assert_eq!(conv.check(1, 32, 288).unwrap(), (16..32, 144..288));
        assert!(conv.check(2, 32, 288).is_err());
        assert!(matches!(
            Gemm::new(false, false, 1, 1, 1)
                .at(usize::MAX, 0, 0)
                .check(1, 1, 1),
            Err(ShapeError::TooLarge { .. })
        ));
    }

    #[test]
    fn sizes_beyond_int_and_bad_geometry_are_rejected() {
        let big = Gemm::new(false, false, 1 << 16, 1 << 16, 1);
        assert!(matches!(
            big.check(usize::MAX, usize::MAX, usize::MAX),
            Err(ShapeError::TooLarge { what: "C", .. })
        ));
        let tall = Gemm::new(false, false, 16 * 65_536, 1, 1);
        assert!(matches!(
            tall.check(1 << 20, 1, 1 << 20),
            Err(ShapeError::TooLarge { what: "m", .. })
        ));
        let zero_dim_huge = Relu { n: usize::MAX };
        assert!(zero_dim_huge.check(&[]).is_err());
        let conv = Conv {
            c: 1,
            h: 2,
            w: 2,
            kh: 5,
            kw: 1,
            pad: 1,
            stride: 1,
        };
        assert!(matches!(
            conv.check(0, 4, 100),
            Err(ShapeError::Geometry { .. })
        ));
        let conv = Conv {
            stride: 0,
            kh: 1,
            ..conv
        };
        assert!(matches!(
            conv.check(0, 4, 100),
            Err(ShapeError::Geometry { .. })
        ));
    }

    #[test]
    fn conv_output_size() {
        let c = Conv {
            c: 2,
            h: 7,
            w: 5,
            kh: 3,
            kw: 3,
            pad: 1,
            stride: 2,
        };
        assert_eq!((c.oh(), c.ow()), (4, 3));
        assert_eq!(c.col_len(), 2 * 9 * 12);
        let same = Conv { stride: 1, ..c };
        assert_eq!((same.oh(), same.ow()), (7, 5));
    }

    #[test]
    fn launches_cover_the_work() {
        assert_eq!(Gemm::new(false, false, 33, 17, 4).launch().grid, (2, 3, 1));
        assert_eq!(
            Gemm::new(false, false, 33, 17, 4).launch().block,
            (16, 16, 1)
        );
        assert_eq!(Relu { n: 257 }.launch().grid, (2, 1, 1));
        assert_eq!(Relu { n: 0 }.launch().grid, (1, 1, 1));
        assert_eq!(
            Softmax {
                batch: 5,
                classes: 10
            }
            .launch()
            .grid,
            (5, 1, 1)
        );
        let b = Bias {
            n: 4,
            c: 8,
            hw: 256,
        };
        assert_eq!(
            (b.launch_add().grid, b.launch_grad().grid),
            ((32, 1, 1), (8, 1, 1))
        );
        assert_eq!(
            Sweep {
                n: 1 << 40,
                iters: 1
            }
            .launch()
            .grid
            .0,
            (1 << 31) - 1
        );
    }
}
