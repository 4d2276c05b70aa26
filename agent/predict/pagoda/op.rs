//! One layer's operator, its output shape and its counts: multiply-accumulates, FLOPs,
//! parameters and DRAM bytes, from the per-sample input shape and the batch size.
//!
//! Conventions (pinned to Pagoda's `src/analytical_model/estimates.py`, so totals compare):
//! - FLOPs = 2 x MACs for convolutions, linear layers and matrix products, plus one FLOP per
//!   output element for a bias;
//! - per-element FLOPs of the other operators follow Pagoda's table where it has one (ReLU
//!   1, sigmoid 4, tanh 5, hard-sigmoid 4, hard-swish 5, SiLU 5, softmax 7, erf 8, batch norm 2
//!   for its folded scale and shift, max pool `k*k - 1` and average pool `k*k` per output);
//!   jpower adds ReLU6 2 (two comparisons), GELU 12 (its ONNX decomposition Div, Erf (8),
//!   Add, Mul, Mul), layer norm 7 (mean, subtract, square, mean, divide, scale, shift),
//!   element-wise ops 1 per output element, LSTM 34 per hidden unit and step besides its
//!   matrix products (two bias adds per gate, three sigmoids, two tanh, three products, one
//!   sum);
//! - DRAM bytes are the *compulsory* traffic of each layer on its own: its weights read
//!   once per forward pass of the whole batch, its inputs read once and its outputs written
//!   once, with perfect on-chip reuse inside the layer and none between layers (no fusion:
//!   TensorRT's layer fusion is out of scope). Reshape and flatten are views (0 bytes;
//!   Pagoda counts Flatten as a copy); transpose, concat and resize are copies; an
//!   embedding reads the rows it gathers (at most the whole table) and 8-byte indices; an
//!   LSTM layer reads its weights once per sequence (they stay on chip across time steps)
//!   and its initial and final hidden and cell states once.

use serde::{Deserialize, Serialize};

/// A per-sample tensor shape (the batch dimension is not part of it).
pub type Shape = Vec<u64>;

/// How an upsampling takes each output element from the input's: the nearest one (no
/// arithmetic), or a weighted sum of the 2 x 2 (bilinear) or 4 x 4 (bicubic) around it,
/// one multiply-accumulate per input read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Interpolation {
    /// The nearest input element.
    Nearest,
    /// Bilinear.
    Linear,
    /// Bicubic.
    Cubic,
}

impl Interpolation {
    /// Multiply-accumulates per output element (2 FLOPs each, as everywhere here).
    fn macs_per_element(self) -> u64 {
        match self {
            Interpolation::Nearest => 0,
            Interpolation::Linear => 4,
            Interpolation::Cubic => 16,
        }
    }
}

/// An activation function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// max(x, 0).
    Relu,
    /// min(max(x, 0), 6).
    Relu6,
    /// 1 / (1 + e^-x).
    Sigmoid,
    /// tanh(x).
    Tanh,
    /// relu6(x + 3) / 6.
    HardSigmoid,
    /// x * relu6(x + 3) / 6.
    HardSwish,
    /// x * sigmoid(x) (swish).
    Silu,
    /// x * (1 + erf(x / sqrt 2)) / 2.
    Gelu,
    /// The error function (an ONNX `Erf` node, GELU's core).
    Erf,
}

impl Activation {
    /// FLOPs per element (see the module's conventions).
    pub fn flops_per_element(self) -> u64 {
        match self {
            Activation::Relu => 1,
            Activation::Relu6 => 2,
            Activation::Sigmoid | Activation::HardSigmoid => 4,
            Activation::Tanh => 5,
            Activation::HardSwish | Activation::Silu => 5,
            Activation::Erf => 8,
            Activation::Gelu => 12,
        }
    }
}

/// Maximum or average pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    /// The maximum of each window.
    Max,
    /// The mean of each window.
    Avg,
}

/// An element-wise binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Binary {
    /// a + b.
    Add,
    /// a - b.
    Sub,
    /// a * b.
    Mul,
    /// a / b.
    Div,
}

/// An operator with its parameters; the input shape is the layer's.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// 2-D convolution over a `[C, H, W]` input (depthwise when `groups` equals the input
    /// and output channels).
    Conv2d {
        /// Output channels.
        out_channels: u64,
        /// Kernel height and width.
        kernel: [u64; 2],
        /// Stride (height, width).
        stride: [u64; 2],
        /// Zero padding on each side (height, width).
        padding: [u64; 2],
        /// Dilation (height, width).
        dilation: [u64; 2],
        /// Groups: input and output channels are split into this many independent sets.
        groups: u64,
        /// Whether it adds a bias.
        bias: bool,
    },
    /// `y = x W^T + b` over the last dimension (`linear`, `gemm`).
    Linear {
        /// Output features.
        out_features: u64,
        /// Whether it adds a bias.
        bias: bool,
    },
    /// A product of two activations `[.., m, k] x [.., k, n]` (the second operand has the
    /// same leading dimensions): attention's `Q K^T` and `A V`.
    MatMul {
        /// Columns of the second operand.
        n: u64,
    },
    /// Batch normalisation over the first (channel) dimension, folded to scale and shift.
    BatchNorm,
    /// Pooling over the last two dimensions of a `[C, H, W]` input.
    Pool {
        /// Maximum or average.
        kind: PoolKind,
        /// Window height and width.
        kernel: [u64; 2],
        /// Stride (height, width).
        stride: [u64; 2],
        /// Padding on each side (height, width).
        padding: [u64; 2],
    },
    /// Pooling of each channel to one value.
    GlobalPool {
        /// Maximum or average.
        kind: PoolKind,
    },
    /// An activation function.
    Activation {
        /// Which.
        function: Activation,
    },
    /// An element-wise binary operator; the second operand is the input's shape unless it
    /// is broadcast from a smaller one (squeeze-and-excitation's `[C, 1, 1]`).
    Elementwise {
        /// Which.
        kind: Binary,
        /// The second operand's elements per sample, where it is broadcast.
        other_elements: Option<u64>,
    },
    /// A weight added element-wise, broadcast over the activations: a bias exported as its
    /// own `Add` of an initializer (PyTorch's `nn.Linear` on 3-D input, every transformer
    /// projection). Its elements are parameters, read once a pass, not per sample.
    Bias {
        /// The weight's elements.
        elements: u64,
    },
    /// Concatenation along the first dimension with other tensors of `extra` more rows.
    Concat {
        /// How much the first dimension grows.
        extra: u64,
    },
    /// A view with another shape of the same size (`reshape`, `flatten`).
    Reshape {
        /// The new shape.
        to: Shape,
    },
    /// A permutation of the dimensions (a copy).
    Transpose {
        /// The new order of the input's dimensions.
        perm: Vec<usize>,
    },
    /// Upsampling of the last two dimensions by an integer factor.
    Resize {
        /// The factor.
        scale: u64,
        /// How each output element is taken from the input.
        mode: Interpolation,
    },
    /// Softmax over the last dimension.
    Softmax,
    /// Layer normalisation over the last dimension, with scale and shift.
    LayerNorm,
    /// Looking up `[tokens]` indices in a `vocab x dim` table.
    Embedding {
        /// Rows of the table.
        vocab: u64,
        /// Columns of the table.
        dim: u64,
    },
    /// One LSTM layer over a `[steps, features]` sequence.
    Lstm {
        /// Hidden units.
        hidden: u64,
    },
}

/// What one layer computes and moves, for a whole batch. Serialized with its
/// [`Counts::bytes`] and [`Counts::intensity`] beside the fields.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    /// Multiply-accumulates of its matrix products and convolutions.
    pub macs: u64,
    /// FLOPs (2 per MAC, plus the element-wise work).
    pub flops: u64,
    /// Trained parameters (weights and biases, batch norm's scale and shift).
    pub params: u64,
    /// DRAM bytes of weights read.
    pub weight_bytes: u64,
    /// DRAM bytes of activations read and written.
    pub activation_bytes: u64,
}

impl Serialize for Counts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut c = s.serialize_struct("Counts", 7)?;
        c.serialize_field("macs", &self.macs)?;
        c.serialize_field("flops", &self.flops)?;
        c.serialize_field("params", &self.params)?;
        c.serialize_field("weight_bytes", &self.weight_bytes)?;
        c.serialize_field("activation_bytes", &self.activation_bytes)?;
        c.serialize_field("bytes", &self.bytes())?;
        c.serialize_field("intensity", &self.intensity())?;
        c.end()
    }
}

impl Counts {
    /// All DRAM bytes.
    pub fn bytes(&self) -> u64 {
        self.weight_bytes + self.activation_bytes
    }

    /// FLOPs per DRAM byte (0 where nothing moves).
    pub fn intensity(&self) -> f64 {
        if self.bytes() == 0 {
            0.0
        } else {
            self.flops as f64 / self.bytes() as f64
        }
    }

    /// The sum of two counts, `None` where one would overflow.
    pub fn checked_plus(self, o: Counts) -> Option<Counts> {
        Some(Counts {
            macs: self.macs.checked_add(o.macs)?,
            flops: self.flops.checked_add(o.flops)?,
            params: self.params.checked_add(o.params)?,
            weight_bytes: self.weight_bytes.checked_add(o.weight_bytes)?,
            activation_bytes: self.activation_bytes.checked_add(o.activation_bytes)?,
        })
    }

    /// The sum of two counts (saturating; a [`super::Model`]'s totals never reach it).
    pub fn plus(self, o: Counts) -> Counts {
        Counts {
            macs: self.macs.saturating_add(o.macs),
            flops: self.flops.saturating_add(o.flops),
            params: self.params.saturating_add(o.params),
            weight_bytes: self.weight_bytes.saturating_add(o.weight_bytes),
            activation_bytes: self.activation_bytes.saturating_add(o.activation_bytes),
        }
    }

    /// Every count but the parameters times `k` (training as 3x inference), saturating.
    pub fn times(self, k: u64) -> Counts {
        Counts {
            macs: self.macs.saturating_mul(k),
            flops: self.flops.saturating_mul(k),
            params: self.params,
            weight_bytes: self.weight_bytes.saturating_mul(k),
            activation_bytes: self.activation_bytes.saturating_mul(k),
        }
    }
}

/// The largest dimension, and size parameter, of a layer.
pub const MAX_DIM: u64 = 1 << 24;
/// The most elements of a per-sample tensor.
pub const MAX_ELEMENTS: u64 = 1 << 36;
/// The most multiply-accumulates of one layer on one sample.
pub const MAX_MACS: u128 = 1 << 42;
/// The largest batch the counts stay exact for.
pub const MAX_BATCH: u64 = 1 << 16;

fn elements(s: &[u64]) -> u64 {
    s.iter().product()
}

/// A shape of at most 8 non-zero dimensions of at most [`MAX_DIM`], [`MAX_ELEMENTS`] in all.
fn check_shape(s: &[u64], what: &str) -> Result<(), String> {
    if s.is_empty() || s.contains(&0) {
        return Err(format!("{what} shape {s:?} is empty"));
    }
    if s.len() > 8 || s.iter().any(|&d| d > MAX_DIM) {
        return Err(format!(
            "{what} shape {s:?} has more than 8 dimensions or one above {MAX_DIM}"
        ));
    }
    let total = s.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    if total.is_none_or(|t| t > MAX_ELEMENTS) {
        return Err(format!(
            "{what} shape {s:?} has more than {MAX_ELEMENTS} elements"
        ));
    }
    Ok(())
}

fn chw(input: &[u64], what: &str) -> Result<[u64; 3], String> {
    match input {
        &[c, h, w] => Ok([c, h, w]),
        _ => Err(format!("{what} needs a [C, H, W] input, got {input:?}")),
    }
}

/// One spatial output size: `(in + 2p - d (k - 1) - 1) / s + 1`.
fn out_size(input: u64, k: u64, s: u64, p: u64, d: u64) -> Result<u64, String> {
    if k == 0 || s == 0 || d == 0 {
        return Err("kernel, stride and dilation must be at least 1".into());
    }
    let span = d * (k - 1) + 1;
    let padded = input + 2 * p;
    if span > padded {
        return Err(format!(
            "a window of {span} does not fit an input of {input} padded by {p}"
        ));
    }
    Ok((padded - span) / s + 1)
}

impl Op {
    /// The operator's name in tables (`conv2d`, `depthwise_conv2d`, `linear`, ...).
    pub fn name(&self, input: &[u64]) -> &'static str {
        match self {
            Op::Conv2d {
                groups,
                out_channels,
                ..
            } if *groups > 1 && input.first() == Some(groups) && out_channels == groups => {
                "depthwise_conv2d"
            }
            Op::Conv2d { .. } => "conv2d",
            Op::Linear { .. } => "linear",
            Op::MatMul { .. } => "matmul",
            Op::BatchNorm => "batch_norm",
            Op::Pool {
                kind: PoolKind::Max,
                ..
            } => "max_pool",
            Op::Pool { .. } => "avg_pool",
            Op::GlobalPool {
                kind: PoolKind::Max,
            } => "global_max_pool",
            Op::GlobalPool { .. } => "global_avg_pool",
            Op::Activation { function } => match function {
                Activation::Relu => "relu",
                Activation::Relu6 => "relu6",
                Activation::Sigmoid => "sigmoid",
                Activation::Tanh => "tanh",
                Activation::HardSigmoid => "hard_sigmoid",
                Activation::HardSwish => "hard_swish",
                Activation::Silu => "silu",
                Activation::Gelu => "gelu",
                Activation::Erf => "erf",
            },
            Op::Elementwise { kind, .. } => match kind {
                Binary::Add => "add",
                Binary::Sub => "sub",
                Binary::Mul => "mul",
                Binary::Div => "div",
            },
            Op::Bias { .. } => "bias",
            Op::Concat { .. } => "concat",
            Op::Reshape { .. } => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Resize { mode, .. } => match mode {
                Interpolation::Nearest => "resize",
                Interpolation::Linear => "resize_linear",
                Interpolation::Cubic => "resize_cubic",
            },
            Op::Softmax => "softmax",
            Op::LayerNorm => "layer_norm",
            Op::Embedding { .. } => "embedding",
            Op::Lstm { .. } => "lstm",
        }
    }

    /// The output shape for a per-sample `input`, or why the two do not fit (or are beyond
    /// the [`MAX_DIM`], [`MAX_ELEMENTS`] and [`MAX_MACS`] bounds, which keep every count
    /// of a batch of up to [`MAX_BATCH`] exact in 64 bits).
    pub fn output(&self, input: &[u64]) -> Result<Shape, String> {
        check_shape(input, "input")?;
        self.check_parameters()?;
        let out = self.output_unchecked(input)?;
        check_shape(&out, "output")?;
        let macs = self.per_sample_work(input, &out);
        if macs > MAX_MACS {
            return Err(format!(
                "{macs} multiply-accumulates per sample exceed the bound of {MAX_MACS}"
            ));
        }
        Ok(out)
    }

    /// Every size parameter at most [`MAX_DIM`] (a concatenation's `extra` at most
    /// [`MAX_ELEMENTS`]).
    fn check_parameters(&self) -> Result<(), String> {
        let sizes: Vec<u64> = match self {
            Op::Conv2d {
                out_channels,
                kernel,
                stride,
                padding,
                dilation,
                groups,
                ..
            } => [*out_channels, *groups]
                .into_iter()
                .chain(
                    kernel
                        .iter()
                        .chain(stride)
                        .chain(padding)
                        .chain(dilation)
                        .copied(),
                )
                .collect(),
            Op::Linear { out_features, .. } => vec![*out_features],
            Op::MatMul { n } => vec![*n],
            Op::Pool {
                kernel,
                stride,
                padding,
                ..
            } => kernel
                .iter()
                .chain(stride)
                .chain(padding)
                .copied()
                .collect(),
            Op::Concat { extra } if *extra > MAX_ELEMENTS => vec![*extra],
            Op::Reshape { to } => {
                check_shape(to, "target")?;
                Vec::new()
            }
            Op::Resize { scale, .. } => vec![*scale],
            Op::Embedding { vocab, dim } => vec![*vocab, *dim],
            Op::Lstm { hidden } => vec![*hidden],
            _ => Vec::new(),
        };
        match sizes.iter().find(|&&v| v > MAX_DIM) {
            Some(v) => Err(format!("a size of {v} exceeds the bound of {MAX_DIM}")),
            None => Ok(()),
        }
    }

    /// Multiply-accumulates (or window reads, for pooling) per sample, without overflow.
    fn per_sample_work(&self, input: &[u64], out: &[u64]) -> u128 {
        let wide = |s: &[u64]| s.iter().map(|&d| u128::from(d)).product::<u128>();
        let out_e = wide(out);
        let last = u128::from(*input.last().unwrap_or(&1));
        match self {
            Op::Conv2d { kernel, groups, .. } => {
                out_e * u128::from(input[0] / groups.max(&1)) * wide(kernel)
            }
            Op::Linear { .. } | Op::MatMul { .. } => out_e * last,
            Op::Pool { kernel, .. } => out_e * wide(kernel),
            Op::Lstm { hidden } => out_e * 4 * (last + u128::from(*hidden)),
            _ => 0,
        }
    }

    fn output_unchecked(&self, input: &[u64]) -> Result<Shape, String> {
        match self {
            Op::Conv2d {
                out_channels,
                kernel,
                stride,
                padding,
                dilation,
                groups,
                ..
            } => {
                let [c, h, w] = chw(input, "conv2d")?;
                if *groups == 0 || c % groups != 0 || out_channels % groups != 0 {
                    return Err(format!(
                        "groups {groups} must divide the input channels {c} and the output channels {out_channels}"
                    ));
                }
                if *out_channels == 0 {
                    return Err("out_channels must be at least 1".into());
                }
                Ok(vec![
                    *out_channels,
                    out_size(h, kernel[0], stride[0], padding[0], dilation[0])?,
                    out_size(w, kernel[1], stride[1], padding[1], dilation[1])?,
                ])
            }
            Op::Linear { out_features, .. } => {
                if *out_features == 0 {
                    return Err("out_features must be at least 1".into());
                }
                let mut out = input.to_vec();
                *out.last_mut().expect("non-empty") = *out_features;
                Ok(out)
            }
            Op::MatMul { n } => {
                if input.len() < 2 || *n == 0 {
                    return Err(format!(
                        "matmul needs an [.., m, k] input and n >= 1, got {input:?} and n {n}"
                    ));
                }
                let mut out = input.to_vec();
                *out.last_mut().expect("non-empty") = *n;
                Ok(out)
            }
            Op::Pool {
                kernel,
                stride,
                padding,
                ..
            } => {
                let [c, h, w] = chw(input, "pooling")?;
                Ok(vec![
                    c,
                    out_size(h, kernel[0], stride[0], padding[0], 1)?,
                    out_size(w, kernel[1], stride[1], padding[1], 1)?,
                ])
            }
            Op::GlobalPool { .. } => {
                let [c, _, _] = chw(input, "global pooling")?;
                Ok(vec![c, 1, 1])
            }
            Op::BatchNorm
            | Op::Activation { .. }
            | Op::Softmax
            | Op::LayerNorm
            | Op::Elementwise { .. } => {
                if let Op::Elementwise {
                    other_elements: Some(o),
                    ..
                } = self
                {
                    if *o == 0 || elements(input) % o != 0 {
                        return Err(format!(
                            "a broadcast operand of {o} elements does not divide {input:?}"
                        ));
                    }
                }
                Ok(input.to_vec())
            }
            Op::Bias { elements: o } => {
                if *o == 0 || elements(input) % o != 0 {
                    return Err(format!("a bias of {o} elements does not divide {input:?}"));
                }
                Ok(input.to_vec())
            }
            Op::Concat { extra } => {
                let mut out = input.to_vec();
                out[0] += extra;
                Ok(out)
            }
            Op::Reshape { to } => {
                if elements(to) != elements(input) {
                    return Err(format!(
                        "cannot reshape {input:?} ({} elements) to {to:?} ({} elements)",
                        elements(input),
                        elements(to)
                    ));
                }
                Ok(to.clone())
            }
            Op::Transpose { perm } => {
                let mut seen = perm.clone();
                seen.sort_unstable();
                if seen != (0..input.len()).collect::<Vec<_>>() {
                    return Err(format!(
                        "perm {perm:?} is not a permutation of {} dimensions",
                        input.len()
                    ));
                }
                Ok(perm.iter().map(|&i| input[i]).collect())
            }
            Op::Resize { scale, .. } => {
                let [c, h, w] = chw(input, "resize")?;
                if *scale == 0 {
                    return Err("scale must be at least 1".into());
                }
                Ok(vec![c, h * scale, w * scale])
            }
            Op::Embedding { vocab, dim } => match input {
                [tokens] if *vocab > 0 && *dim > 0 => Ok(vec![*tokens, *dim]),
                _ => Err(format!(
                    "embedding needs a [tokens] input and a non-empty table, got {input:?}"
                )),
            },
            Op::Lstm { hidden } => match input {
                [steps, _] if *hidden > 0 => Ok(vec![*steps, *hidden]),
                _ => Err(format!(
                    "lstm needs a [steps, features] input and hidden >= 1, got {input:?}"
                )),
            },
        }
    }

    /// The counts of this operator on a per-sample `input`, for `batch` samples (at most
    /// [`MAX_BATCH`]) of `bytes_per_element` bytes (at most 8).
    pub fn counts(
        &self,
        input: &[u64],
        batch: u64,
        bytes_per_element: u64,
    ) -> Result<Counts, String> {
        let out = self.output(input)?;
        if batch > MAX_BATCH || bytes_per_element > 8 {
            return Err(format!(
                "a batch of {batch} ({bytes_per_element}-byte elements) exceeds the bound of {MAX_BATCH} (8)"
            ));
        }
        let (n, b) = (batch, bytes_per_element);
        let (in_e, out_e) = (elements(input), elements(&out));
        // Read the input, write the output: the default activation traffic.
        let io = n * (in_e + out_e) * b;
        let per_element = |flops: u64, params: u64, extra_bytes: u64| Counts {
            macs: 0,
            flops: flops * n * out_e,
            params,
            weight_bytes: params * b,
            activation_bytes: io + extra_bytes,
        };
        Ok(match self {
            Op::Conv2d {
                out_channels,
                kernel,
                groups,
                bias,
                ..
            } => {
                let per_group_in = input[0] / groups;
                let weights = out_channels * per_group_in * kernel[0] * kernel[1];
                let macs = n * out_e * per_group_in * kernel[0] * kernel[1];
                let biases = if *bias { *out_channels } else { 0 };
                Counts {
                    macs,
                    flops: 2 * macs + if *bias { n * out_e } else { 0 },
                    params: weights + biases,
                    weight_bytes: (weights + biases) * b,
                    activation_bytes: io,
                }
            }
            Op::Linear { out_features, bias } => {
                let k = *input.last().expect("non-empty");
                let macs = n * out_e * k;
                let biases = if *bias { *out_features } else { 0 };
                Counts {
                    macs,
                    flops: 2 * macs + if *bias { n * out_e } else { 0 },
                    params: k * out_features + biases,
                    weight_bytes: (k * out_features + biases) * b,
                    activation_bytes: io,
                }
            }
            Op::MatMul { n: cols } => {
                let k = *input.last().expect("non-empty");
                let macs = n * out_e * k;
                Counts {
                    macs,
                    flops: 2 * macs,
                    params: 0,
                    weight_bytes: 0,
                    // Both operands are activations: read the second one too.
                    activation_bytes: io + n * other_operand(input, *cols) * b,
                }
            }
            Op::BatchNorm => per_element(2, 2 * input[0], 0),
            Op::Pool { kind, kernel, .. } => {
                let window = kernel[0] * kernel[1];
                per_element(
                    if *kind == PoolKind::Max {
                        window - 1
                    } else {
                        window
                    },
                    0,
                    0,
                )
            }
            Op::GlobalPool { kind } => {
                let window = input[1] * input[2];
                per_element(
                    if *kind == PoolKind::Max {
                        window - 1
                    } else {
                        window
                    },
                    0,
                    0,
                )
            }
            Op::Activation { function } => per_element(function.flops_per_element(), 0, 0),
            Op::Elementwise { other_elements, .. } => {
                per_element(1, 0, n * other_elements.unwrap_or(in_e) * b)
            }
            Op::Bias { elements } => per_element(1, *elements, 0),
            // Every operand is read (together as large as the output) and the output written.
            Op::Concat { .. } => Counts {
                activation_bytes: 2 * n * out_e * b,
                ..Counts::default()
            },
            Op::Transpose { .. } => per_element(0, 0, 0),
            Op::Resize { mode, .. } => Counts {
                macs: mode.macs_per_element() * n * out_e,
                ..per_element(2 * mode.macs_per_element(), 0, 0)
            },
            Op::Reshape { .. } => Counts::default(),
            Op::Softmax => per_element(7, 0, 0),
            Op::LayerNorm => per_element(7, 2 * input[input.len() - 1], 0),
            Op::Embedding { vocab, dim } => {
                let gathered = (n * input[0]).min(*vocab);
                Counts {
                    macs: 0,
                    flops: 0,
                    params: vocab * dim,
                    weight_bytes: gathered * dim * b,
                    // 8-byte (int64) indices in, rows out.
                    activation_bytes: n * in_e * 8 + n * out_e * b,
                }
            }
            Op::Lstm { hidden } => {
                let (steps, features) = (input[0], input[1]);
                let h = *hidden;
                let weights = 4 * h * (features + h) + 8 * h;
                let macs = n * steps * 4 * h * (features + h);
                Counts {
                    macs,
                    flops: 2 * macs + n * steps * h * 34,
                    params: weights,
                    weight_bytes: weights * b,
                    // The sequence in and out, and (h, c) read at the start and written at the end.
                    activation_bytes: io + n * 4 * h * b,
                }
            }
        })
    }
}

/// Elements of a matmul's second operand: `[.., k, n]` with the input's leading dimensions.
fn other_operand(input: &[u64], n: u64) -> u64 {
    let lead = elements(&input[..input.len() - 2]);
    lead * input[input.len() - 1] * n
}
