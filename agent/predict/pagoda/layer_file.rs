//! A model as a small JSON layer list (version 1), for models not in the zoo:
//!
//! ```json
//! {
//!   "version": 1,
//!   "name": "tiny",
//!   "input": [3, 32, 32],
//!   "layers": [
//!     {"name": "conv1", "op": "conv2d", "out_channels": 16, "kernel": 3, "padding": 1},
//!     {"name": "bn1", "op": "batch_norm"},
//!     {"name": "relu1", "op": "relu"},
//!     {"name": "pool", "op": "global_avg_pool"},
//!     {"name": "flat", "op": "flatten"},
//!     {"name": "fc", "op": "linear", "out_features": 10}
//!   ]
//! }
//! ```
//!
//! Shapes are per sample (no batch dimension). Each layer takes the previous layer's output
//! unless it gives its own `input` shape (a branch). Operators and their fields:
//! `conv2d` (`out_channels`, `kernel`, `stride` 1, `padding` 0, `dilation` 1, `groups` 1,
//! `bias` false; the four take a number or `[h, w]`), `depthwise_conv2d` (the same but
//! `groups`, which is the input's channels; `out_channels` a multiple of them, the
//! input's by default), `linear`/`gemm` (`out_features`, `bias` true), `matmul`
//! (`n`: `[.., m, k] x [.., k, n]`), `batch_norm`, `max_pool`/`avg_pool` (`kernel`, `stride`
//! the kernel's, `padding` 0), `global_avg_pool`/`global_max_pool`, activations (`relu`,
//! `relu6`, `sigmoid`, `tanh`, `hard_sigmoid`, `hard_swish`, `silu`, `gelu`), element-wise
//! `add`/`sub`/`mul`/`div` (`other_elements` for a broadcast operand), `concat` (`extra`
//! rows along the first dimension), `reshape` (`to`), `flatten`, `transpose` (`perm`),
//! `resize`, `resize_linear` and `resize_cubic` (`scale`; nearest-neighbour, bilinear,
//! bicubic), `softmax` and `layer_norm` (last dimension), `embedding` (`vocab`,
//! `dim`, input `[tokens]`), `attention` (`heads`, input `[seq, hidden]` of projected Q, K
//! and V: expands to `Q K^T`, scale, softmax, `A V` and the heads' merge) and `lstm`
//! (`hidden`, input `[steps, features]`). An unknown field or operator, or a field the
//! layer's operator does not take, is an error naming its line.

use super::op::{Activation, Binary, Interpolation, Op, PoolKind, Shape};
use super::{zoo, Model};
use crate::support::file_error::{read_text, FileError};
use serde::Deserialize;
use std::path::Path;

/// The layer-list format's version.
pub const VERSION: u32 = 1;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    version: u32,
    name: String,
    input: Shape,
    layers: Vec<Spec>,
}

/// A number for both dimensions, or `[h, w]`.
#[derive(Deserialize, Clone, Copy)]
#[serde(untagged)]
enum Pair {
    Same(u64),
    Each([u64; 2]),
}

impl Pair {
    fn get(p: Option<Pair>, default: u64) -> [u64; 2] {
        match p {
            None => [default, default],
            Some(Pair::Same(v)) => [v, v],
            Some(Pair::Each(v)) => v,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    name: String,
    op: String,
    input: Option<Shape>,
    out_channels: Option<u64>,
    kernel: Option<Pair>,
    stride: Option<Pair>,
    padding: Option<Pair>,
    dilation: Option<Pair>,
    groups: Option<u64>,
    bias: Option<bool>,
    out_features: Option<u64>,
    n: Option<u64>,
    other_elements: Option<u64>,
    extra: Option<u64>,
    to: Option<Shape>,
    perm: Option<Vec<usize>>,
    scale: Option<u64>,
    vocab: Option<u64>,
    dim: Option<u64>,
    heads: Option<u64>,
    hidden: Option<u64>,
}

/// The operators a layer list may name, each with the fields it takes (beyond `name`,
/// `op` and `input`).
const OPS: &[(&str, &[&str])] = &[
    (
        "conv2d",
        &[
            "out_channels",
            "kernel",
            "stride",
            "padding",
            "dilation",
            "groups",
            "bias",
        ],
    ),
    (
        "depthwise_conv2d",
        &[
            "out_channels",
            "kernel",
            "stride",
            "padding",
            "dilation",
            "bias",
        ],
    ),
    ("linear", &["out_features", "bias"]),
    ("gemm", &["out_features", "bias"]),
    ("matmul", &["n"]),
    ("batch_norm", &[]),
    ("max_pool", &["kernel", "stride", "padding"]),
    ("avg_pool", &["kernel", "stride", "padding"]),
    ("global_avg_pool", &[]),
    ("global_max_pool", &[]),
    ("relu", &[]),
    ("relu6", &[]),
    ("sigmoid", &[]),
    ("tanh", &[]),
    ("hard_sigmoid", &[]),
    ("hard_swish", &[]),
    ("silu", &[]),
    ("gelu", &[]),
    ("add", &["other_elements"]),
    ("sub", &["other_elements"]),
    ("mul", &["other_elements"]),
    ("div", &["other_elements"]),
    ("concat", &["extra"]),
    ("reshape", &["to"]),
    ("flatten", &[]),
    ("transpose", &["perm"]),
    ("resize", &["scale"]),
    ("resize_linear", &["scale"]),
    ("resize_cubic", &["scale"]),
    ("softmax", &[]),
    ("layer_norm", &[]),
    ("embedding", &["vocab", "dim"]),
    ("attention", &["heads"]),
    ("lstm", &["hidden"]),
];

fn need<T>(v: Option<T>, field: &str) -> Result<T, String> {
    v.ok_or_else(|| format!("missing field `{field}`"))
}

impl Spec {
    /// The operator-specific fields this layer gives. The destructuring names every
    /// field, so a field added to [`Spec`] must be listed here too.
    fn given(&self) -> impl Iterator<Item = &'static str> {
        let Spec {
            name: _,
            op: _,
            input: _,
            out_channels,
            kernel,
            stride,
            padding,
            dilation,
            groups,
            bias,
            out_features,
            n,
            other_elements,
            extra,
            to,
            perm,
            scale,
            vocab,
            dim,
            heads,
            hidden,
        } = self;
        [
            ("out_channels", out_channels.is_some()),
            ("kernel", kernel.is_some()),
            ("stride", stride.is_some()),
            ("padding", padding.is_some()),
            ("dilation", dilation.is_some()),
            ("groups", groups.is_some()),
            ("bias", bias.is_some()),
            ("out_features", out_features.is_some()),
            ("n", n.is_some()),
            ("other_elements", other_elements.is_some()),
            ("extra", extra.is_some()),
            ("to", to.is_some()),
            ("perm", perm.is_some()),
            ("scale", scale.is_some()),
            ("vocab", vocab.is_some()),
            ("dim", dim.is_some()),
            ("heads", heads.is_some()),
            ("hidden", hidden.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, given)| given.then_some(field))
    }

    /// Refuses an unknown operator, and a field its operator does not take (it would be
    /// ignored: a `kernel` on a `relu`, `groups` on a `depthwise_conv2d`).
    fn check_fields(&self) -> Result<(), String> {
        let Some((_, takes)) = OPS.iter().find(|(op, _)| *op == self.op) else {
            let known: Vec<&str> = OPS.iter().map(|(op, _)| *op).collect();
            return Err(format!(
                "unknown op {:?}; known: {}",
                self.op,
                known.join(", ")
            ));
        };
        match self.given().find(|f| !takes.contains(f)) {
            Some(field) if takes.is_empty() => Err(format!(
                "{} takes no field `{field}` (it takes none)",
                self.op
            )),
            Some(field) => Err(format!(
                "{} takes no field `{field}` (it takes {})",
                self.op,
                takes.join(", ")
            )),
            None => Ok(()),
        }
    }

    /// The operators this layer adds, each with its name suffix and input shape (`None`:
    /// the previous output).
    fn ops(&self, input: &[u64]) -> Result<Vec<(String, Op, Option<Shape>)>, String> {
        self.check_fields()?;
        let activation = |function| Op::Activation { function };
        let binary = |kind| Op::Elementwise {
            kind,
            other_elements: self.other_elements,
        };
        let pool = |kind| -> Result<Op, String> {
            let kernel = Pair::get(Some(need(self.kernel, "kernel")?), 1);
            Ok(Op::Pool {
                kind,
                kernel,
                stride: self.stride.map_or(kernel, |s| Pair::get(Some(s), 1)),
                padding: Pair::get(self.padding, 0),
            })
        };
        let op = match self.op.as_str() {
            "conv2d" | "depthwise_conv2d" => {
                let depthwise = self.op == "depthwise_conv2d";
                let channels = input.first().copied().unwrap_or(0);
                let out_channels = match self.out_channels {
                    Some(c) => c,
                    None if depthwise => channels,
                    None => return Err("missing field `out_channels`".into()),
                };
                Op::Conv2d {
                    out_channels,
                    kernel: Pair::get(Some(need(self.kernel, "kernel")?), 1),
                    stride: Pair::get(self.stride, 1),
                    padding: Pair::get(self.padding, 0),
                    dilation: Pair::get(self.dilation, 1),
                    groups: if depthwise {
                        channels
                    } else {
                        self.groups.unwrap_or(1)
                    },
                    bias: self.bias.unwrap_or(false),
                }
            }
            "linear" | "gemm" => Op::Linear {
                out_features: need(self.out_features, "out_features")?,
                bias: self.bias.unwrap_or(true),
            },
            "matmul" => Op::MatMul {
                n: need(self.n, "n")?,
            },
            "batch_norm" => Op::BatchNorm,
            "max_pool" => pool(PoolKind::Max)?,
            "avg_pool" => pool(PoolKind::Avg)?,
            "global_avg_pool" => Op::GlobalPool {
                kind: PoolKind::Avg,
            },
            "global_max_pool" => Op::GlobalPool {
                kind: PoolKind::Max,
            },
            "relu" => activation(Activation::Relu),
            "relu6" => activation(Activation::Relu6),
            "sigmoid" => activation(Activation::Sigmoid),
            "tanh" => activation(Activation::Tanh),
            "hard_sigmoid" => activation(Activation::HardSigmoid),
            "hard_swish" => activation(Activation::HardSwish),
            "silu" => activation(Activation::Silu),
            "gelu" => activation(Activation::Gelu),
            "add" => binary(Binary::Add),
            "sub" => binary(Binary::Sub),
            "mul" => binary(Binary::Mul),
            "div" => binary(Binary::Div),
            "concat" => Op::Concat {
                extra: need(self.extra, "extra")?,
            },
            "reshape" => Op::Reshape {
                to: need(self.to.clone(), "to")?,
            },
            "flatten" => Op::Reshape {
                to: vec![input
                    .iter()
                    .try_fold(1u64, |a, &d| a.checked_mul(d))
                    .ok_or("the input has too many elements")?],
            },
            "transpose" => Op::Transpose {
                perm: need(self.perm.clone(), "perm")?,
            },
            "resize" | "resize_linear" | "resize_cubic" => Op::Resize {
                scale: need(self.scale, "scale")?,
                mode: match self.op.as_str() {
                    "resize" => Interpolation::Nearest,
                    "resize_linear" => Interpolation::Linear,
                    _ => Interpolation::Cubic,
                },
            },
            "softmax" => Op::Softmax,
            "layer_norm" => Op::LayerNorm,
            "embedding" => Op::Embedding {
                vocab: need(self.vocab, "vocab")?,
                dim: need(self.dim, "dim")?,
            },
            "lstm" => Op::Lstm {
                hidden: need(self.hidden, "hidden")?,
            },
            "attention" => {
                let heads = need(self.heads, "heads")?;
                let &[seq, hidden] = input else {
                    return Err(format!(
                        "attention needs a [seq, hidden] input, got {input:?}"
                    ));
                };
                if heads == 0 || hidden % heads != 0 {
                    return Err(format!("heads {heads} must divide hidden {hidden}"));
                }
                return Ok(zoo::attention_ops(seq, heads, hidden / heads)
                    .into_iter()
                    .map(|(suffix, op, shape)| (format!(".{suffix}"), op, Some(shape)))
                    .collect());
            }
            other => return Err(format!("unknown op {other:?}")),
        };
        Ok(vec![(String::new(), op, self.input.clone())])
    }
}

/// The 1-based line of the first occurrence of `needle` in `text` (1 if none).
fn line_of(text: &str, needle: &str) -> usize {
    text.find(needle)
        .map_or(1, |at| text[..at].matches('\n').count() + 1)
}

/// The 1-based line on which each element of the top-level object's array `key` begins:
/// a layer's errors name its own line, wherever its name also appears.
fn element_lines(text: &str, key: &str) -> Vec<usize> {
    let (mut depth, mut line, mut lines) = (0usize, 1usize, Vec::new());
    let (mut in_string, mut escaped, mut start) = (false, false, 0usize);
    let (mut last_key, mut array, mut expect) = ("", false, false);
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    in_string = false;
                    if depth == 1 {
                        last_key = &text[start..i];
                    }
                }
                _ => {}
            }
            continue;
        }
        if expect && !c.is_whitespace() && c != ']' {
            lines.push(line);
            expect = false;
        }
        match c {
            '\n' => line += 1,
            '"' => (in_string, start) = (true, i + 1),
            '{' | '[' => {
                depth += 1;
                if c == '[' && depth == 2 && last_key == key && lines.is_empty() {
                    (array, expect) = (true, true);
                }
            }
            '}' | ']' => {
                if array && depth == 2 {
                    return lines;
                }
                depth = depth.saturating_sub(1);
            }
            ',' if array && depth == 2 => expect = true,
            _ => {}
        }
    }
    lines
}

/// Parses a layer list read from `path` (named in errors).
pub fn parse(text: &str, path: &Path) -> Result<Model, FileError> {
    let invalid = |line, message| FileError::Invalid {
        path: path.to_path_buf(),
        line,
        message,
    };
    // A byte-order mark (some Windows editors write one) is no JSON.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let file: File =
        serde_json::from_str(text).map_err(|e| invalid(e.line().max(1), e.to_string()))?;
    if file.version != VERSION {
        return Err(invalid(
            line_of(text, "\"version\""),
            format!("version {} is not the supported {VERSION}", file.version),
        ));
    }
    let mut model = Model::new(&file.name, file.input.clone());
    let lines = element_lines(text, "layers");
    let mut names = std::collections::HashMap::new();
    for (k, spec) in file.layers.iter().enumerate() {
        let quoted = serde_json::to_string(&spec.name).unwrap_or_default();
        let line = lines.get(k).copied().unwrap_or(1);
        if let Some(first) = names.insert(spec.name.as_str(), line) {
            return Err(invalid(
                line,
                format!("layer name {quoted} is used twice (first on line {first})"),
            ));
        }
        let input = spec.input.clone().unwrap_or_else(|| model.last().clone());
        let ops = spec
            .ops(&input)
            .map_err(|m| invalid(line, format!("layer {quoted}: {m}")))?;
        for (suffix, op, shape) in ops {
            model
                .push(&format!("{}{suffix}", spec.name), op, shape)
                .map_err(|e| invalid(line, e.to_string()))?;
        }
    }
    Ok(model)
}

/// Reads and parses the layer list at `path`.
pub fn load(path: &Path) -> Result<Model, FileError> {
    parse(&read_text(path)?, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::roofline::Precision;

    fn parse_str(text: &str) -> Result<Model, FileError> {
        parse(text, Path::new("m.json"))
    }

    const TINY: &str = r#"{
  "version": 1,
  "name": "tiny",
  "input": [3, 32, 32],
  "layers": [
    {"name": "conv1", "op": "conv2d", "out_channels": 16, "kernel": 3, "padding": 1, "bias": true},
    {"name": "dw", "op": "depthwise_conv2d", "kernel": 3, "stride": 2, "padding": 2, "dilation": 2},
    {"name": "bn", "op": "batch_norm"},
    {"name": "relu", "op": "relu"},
    {"name": "pool", "op": "max_pool", "kernel": 2},
    {"name": "gap", "op": "global_avg_pool"},
    {"name": "flat", "op": "flatten"},
    {"name": "fc", "op": "linear", "out_features": 10},
    {"name": "attn", "op": "attention", "heads": 2, "input": [8, 16]},
    {"name": "rnn", "op": "lstm", "hidden": 4, "input": [5, 3]}
  ]
}"#;

    // Every count below is worked out by hand from the operator's definition.
    #[test]
    fn a_layer_list_counts_as_computed_by_hand() {
        let m = parse_str(TINY).unwrap();
        let r = m.count(2, Precision::F32, false);
        let get = |n: &str| r.layers.iter().find(|l| l.name == n).unwrap();
        // conv1: 3 -> 16, 3x3, pad 1: 32x32 out; 2 x 16 x 32 x 32 x 3 x 9 MACs.
        let c = get("conv1").counts;
        assert_eq!(get("conv1").output, vec![16, 32, 32]);
        assert_eq!(c.macs, 2 * 16 * 32 * 32 * 27);
        assert_eq!(c.flops, 2 * c.macs + 2 * 16 * 32 * 32);
        assert_eq!(c.params, 16 * 27 + 16);
        assert_eq!(c.weight_bytes, 4 * (16 * 27 + 16));
        assert_eq!(c.activation_bytes, 4 * 2 * (3 * 32 * 32 + 16 * 32 * 32));
        // dw: depthwise 3x3, dilation 2 (span 5), pad 2, stride 2: (32 + 4 - 5) / 2 + 1 = 16.
        let d = get("dw");
        assert_eq!(d.op, "depthwise_conv2d");
        assert_eq!(d.output, vec![16, 16, 16]);
        assert_eq!(d.counts.macs, 2 * 16 * 16 * 16 * 9);
        assert_eq!(d.counts.params, 16 * 9);
        // batch norm: 2 FLOPs an element, scale and shift per channel.
        assert_eq!(get("bn").counts.flops, 2 * 2 * 16 * 16 * 16);
        assert_eq!(get("bn").counts.params, 32);
        // max pool 2x2 stride 2: 3 comparisons per output of 16 x 8 x 8.
        assert_eq!(get("pool").counts.flops, 2 * 3 * 16 * 8 * 8);
        assert_eq!(get("gap").counts.flops, 2 * 16 * 64);
        assert_eq!(get("flat").counts.bytes(), 0);
        let fc = get("fc").counts;
        assert_eq!((fc.macs, fc.params), (2 * 16 * 10, 16 * 10 + 10));
        // attention, 2 heads of 8 over 8 tokens: Q K^T and A V, 2 x 8 x 8 x 8 MACs each.
        assert_eq!(get("attn.qk").counts.macs, 2 * 2 * 8 * 8 * 8);
        assert_eq!(get("attn.av").counts.macs, 2 * 2 * 8 * 8 * 8);
        assert_eq!(get("attn.softmax").counts.flops, 2 * 7 * 2 * 8 * 8);
        // Q K^T reads Q and K (2 x 8 x 8 each) and writes 2 x 8 x 8 scores, per sample.
        assert_eq!(
            get("attn.qk").counts.activation_bytes,
            4 * 2 * (128 + 128 + 128)
        );
        assert_eq!(get("attn.reshape").output, vec![8, 16]);
        // LSTM 3 -> 4 over 5 steps: 4 gates x 4 x (3 + 4) MACs a step.
        let l = get("rnn").counts;
        assert_eq!(l.macs, 2 * 5 * 4 * 4 * 7);
        assert_eq!(l.params, 4 * 4 * 7 + 8 * 4);
        let sum: u64 = r.layers.iter().map(|l| l.counts.flops).sum();
        assert_eq!(r.total.flops, sum);
    }

    #[test]
    fn malformed_lists_name_the_file_and_line() {
        let cases = [
            ("{\n  \"version\": 1,\n  \"name\": \"x\",\n  \"input\": [3, 8, 8],\n  \"layers\": [\n    {\"name\": \"a\", \"op\": \"relu\"},,\n  ]\n}", 6, "expected"),
            ("{\"version\": 1, \"name\": \"x\", \"input\": [3, 8, 8], \"layers\": [\n{\"name\": \"a\", \"op\": \"relu\", \"strdie\": 2}]}", 2, "unknown field `strdie`"),
            ("{\"version\": 1, \"name\": \"x\", \"input\": [3, 8, 8], \"layers\": [\n\n{\"name\": \"a\", \"op\": \"frobnicate\"}]}", 3, "unknown op \"frobnicate\""),
            ("{\"version\": 1, \"name\": \"x\", \"input\": [3, 8, 8], \"layers\": [\n{\"name\": \"a\", \"op\": \"conv2d\", \"out_channels\": 4, \"kernel\": 3, \"groups\": 2}]}", 2, "groups 2 must divide"),
            ("{\"version\": 1, \"name\": \"x\", \"input\": [3, 8, 8], \"layers\": [\n{\"name\": \"a\", \"op\": \"conv2d\", \"out_channels\": 4, \"kernel\": 11}]}", 2, "does not fit"),
            ("{\"version\": 2, \"name\": \"x\", \"input\": [3], \"layers\": []}", 1, "version 2"),
            ("{\"version\": 1, \"name\": \"x\", \"input\": [3, 8, 8], \"layers\": [\n{\"name\": \"a\", \"op\": \"relu\"},\n{\"name\": \"a\", \"op\": \"relu\"}]}", 3, "used twice (first on line 2)"),
            // A layer named like an op, or like the model, is found on its own line.
            ("{\"version\": 1, \"name\": \"relu\", \"input\": [3, 8, 8], \"layers\": [\n{\"name\": \"relu\", \"op\": \"relu\"},\n\n{\"name\": \"b[}\\\"\", \"op\": \"conv2d\", \"out_channels\": 4, \"kernel\": 11}]}", 4, "does not fit"),
            ("{\"version\": 1, \"name\": \"x\", \"input\": [3, 8, 8], \"layers\": [\n{\"name\": \"\\u0041\", \"op\": \"relu\"},\n{\"name\": \"A\", \"op\": \"relu\"}]}", 3, "used twice (first on line 2)"),
            ("{\"version\": 1, \"name\": \"x\", \"input\": [3, 8", 1, "EOF"),
            // Found by a review: a field its operator does not take was ignored.
            ("{\"version\": 1, \"name\": \"x\", \"input\": [3, 8, 8], \"layers\": [\n{\"name\": \"a\", \"op\": \"relu\"},\n{\"name\": \"b\", \"op\": \"relu\", \"kernel\": 3}]}", 3, "relu takes no field `kernel` (it takes none)"),
            ("{\"version\": 1, \"name\": \"x\", \"input\": [3, 8, 8], \"layers\": [\n{\"name\": \"a\", \"op\": \"depthwise_conv2d\", \"kernel\": 3, \"groups\": 3}]}", 2, "depthwise_conv2d takes no field `groups` (it takes out_channels, kernel,"),
            ("{\"version\": 1, \"name\": \"x\", \"input\": [3, 8, 8], \"layers\": [\n{\"name\": \"a\", \"op\": \"max_pool\", \"kernel\": 2, \"out_channels\": 3}]}", 2, "max_pool takes no field `out_channels`"),
        ];
        for (text, line, what) in cases {
            let e = parse_str(text).unwrap_err().to_string();
            assert!(e.starts_with(&format!("m.json:{line}: ")), "{e}");
            assert!(e.contains(what), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
