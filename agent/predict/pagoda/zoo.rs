//! The built-in models, layer by layer as their reference implementations run them, at
//! Pagoda's input shapes: 3x224x224 for ResNet and MobileNet, 3x640x640 for YOLOv8n,
//! sequence 128 for BERT, 32 tokens for the LSTM.
//!
//! - `resnet18`, `resnet50`: torchvision's ResNet (v1.5: the stride in the bottleneck's 3x3);
//! - `mobilenetv3-large`: torchvision's `mobilenet_v3_large` (squeeze-and-excitation as 1x1
//!   convolutions with biases, hard-swish, the 960 -> 1280 -> 1000 classifier);
//! - `yolov8n`: Ultralytics' `yolov8n.yaml` (depth 0.33, width 0.25; C2f, SPPF, the
//!   anchor-free Detect head with its DFL, 80 classes), unfused (convolution, batch norm,
//!   SiLU);
//! - `bert-base`, `bert-large`: Hugging Face's `BertModel` (embeddings, encoder layers with
//!   attention as `Q K^T`, scale, mask, softmax, `A V`, the pooler), GELU by `erf`;
//! - `lstm`: the model of Pagoda's `create_onnx_models.ipynb` (embedding 29,423 x 256, two
//!   LSTM layers of 256, a linear read-out to the vocabulary).
//!
//! Each is checked against its published size and multiply-accumulates in the tests below.

use super::op::{Activation, Binary, Interpolation, Op, PoolKind, Shape};
use super::Model;

/// The built-in models' names.
pub const NAMES: [&str; 7] = [
    "resnet18",
    "resnet50",
    "mobilenetv3-large",
    "yolov8n",
    "bert-base",
    "bert-large",
    "lstm",
];

/// The built-in model called `name` (case, `-` and `_` ignored; `mobilenetv3`, `mobnet`
/// and `mobilenet` name MobileNetV3-Large, `bert` BERT-base).
pub fn get(name: &str) -> Option<Model> {
    let key: String = name
        .chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    Some(match key.as_str() {
        "resnet18" => resnet(&[2, 2, 2, 2], false),
        "resnet50" => resnet(&[3, 4, 6, 3], true),
        "mobilenetv3large" | "mobilenetv3" | "mobilenet" | "mobnet" => mobilenet_v3_large(),
        "yolov8n" => yolov8n(),
        "bertbase" | "bert" => bert("bert-base", 12, 768, 12, 3072),
        "bertlarge" => bert("bert-large", 24, 1024, 16, 4096),
        "lstm" => lstm(),
        _ => return None,
    })
}

/// A model under construction whose shapes are known to fit.
struct Net(Model);

impl Net {
    fn add(&mut self, name: &str, op: Op) -> Shape {
        self.0
            .push(name, op, None)
            .unwrap_or_else(|e| panic!("the built-in model {}: {e}", self.0.name))
    }

    fn add_on(&mut self, name: &str, op: Op, input: &Shape) -> Shape {
        self.0
            .push(name, op, Some(input.clone()))
            .unwrap_or_else(|e| panic!("the built-in model {}: {e}", self.0.name))
    }

    fn conv(&mut self, name: &str, out: u64, k: u64, s: u64, groups: u64, bias: bool) -> Shape {
        self.add(name, conv(out, k, s, k / 2, groups, bias))
    }

    /// Convolution without bias, batch norm, activation.
    fn conv_bn(
        &mut self,
        name: &str,
        out: u64,
        k: u64,
        s: u64,
        groups: u64,
        act: Option<Activation>,
    ) -> Shape {
        self.conv(&format!("{name}.conv"), out, k, s, groups, false);
        let mut shape = self.add(&format!("{name}.bn"), Op::BatchNorm);
        if let Some(function) = act {
            shape = self.add(&format!("{name}.act"), Op::Activation { function });
        }
        shape
    }

    fn act(&mut self, name: &str, function: Activation) -> Shape {
        self.add(name, Op::Activation { function })
    }

    fn binary(&mut self, name: &str, kind: Binary, other_elements: Option<u64>) -> Shape {
        self.add(
            name,
            Op::Elementwise {
                kind,
                other_elements,
            },
        )
    }
}

/// A square convolution.
pub fn conv(out: u64, k: u64, s: u64, p: u64, groups: u64, bias: bool) -> Op {
    Op::Conv2d {
        out_channels: out,
        kernel: [k, k],
        stride: [s, s],
        padding: [p, p],
        dilation: [1, 1],
        groups,
        bias,
    }
}

fn square_pool(kind: PoolKind, k: u64, s: u64, p: u64) -> Op {
    Op::Pool {
        kind,
        kernel: [k, k],
        stride: [s, s],
        padding: [p, p],
    }
}

/// torchvision's ResNet: basic blocks (ResNet-18/34) or bottlenecks (50/101/152).
fn resnet(blocks: &[usize; 4], bottleneck: bool) -> Model {
    let name = if bottleneck { "resnet50" } else { "resnet18" };
    let relu = Some(Activation::Relu);
    let mut n = Net(Model::new(name, vec![3, 224, 224]));
    n.conv_bn("conv1", 64, 7, 2, 1, relu);
    n.add("maxpool", square_pool(PoolKind::Max, 3, 2, 1));
    let expansion = if bottleneck { 4 } else { 1 };
    for (stage, &count) in blocks.iter().enumerate() {
        let width = 64 << stage;
        for b in 0..count {
            let p = format!("layer{}.{b}", stage + 1);
            let stride = if stage > 0 && b == 0 { 2 } else { 1 };
            let input = n.0.last().clone();
            if bottleneck {
                n.conv_bn(&format!("{p}.1"), width, 1, 1, 1, relu);
                n.conv_bn(&format!("{p}.2"), width, 3, stride, 1, relu);
                n.conv_bn(&format!("{p}.3"), width * expansion, 1, 1, 1, None);
            } else {
                n.conv_bn(&format!("{p}.1"), width, 3, stride, 1, relu);
                n.conv_bn(&format!("{p}.2"), width, 3, 1, 1, None);
            }
            let main = n.0.last().clone();
            if stride != 1 || input[0] != width * expansion {
                n.add_on(
                    &format!("{p}.downsample.conv"),
                    conv(width * expansion, 1, stride, 0, 1, false),
                    &input,
                );
                n.add(&format!("{p}.downsample.bn"), Op::BatchNorm);
            }
            n.add_on(
                &format!("{p}.add"),
                Op::Elementwise {
                    kind: Binary::Add,
                    other_elements: None,
                },
                &main,
            );
            n.act(&format!("{p}.relu"), Activation::Relu);
        }
    }
    n.add(
        "avgpool",
        Op::GlobalPool {
            kind: PoolKind::Avg,
        },
    );
    n.add(
        "flatten",
        Op::Reshape {
            to: vec![512 * expansion],
        },
    );
    n.add(
        "fc",
        Op::Linear {
            out_features: 1000,
            bias: true,
        },
    );
    n.0
}

/// torchvision's `_make_divisible(v, 8)`.
fn make_divisible(v: u64) -> u64 {
    let d = ((v + 4) / 8 * 8).max(8);
    if d * 10 < v * 9 {
        d + 8
    } else {
        d
    }
}

/// torchvision's `mobilenet_v3_large`.
fn mobilenet_v3_large() -> Model {
    use Activation::{HardSwish as HS, Relu as RE};
    // (input, kernel, expanded, output, squeeze-and-excite, activation, stride)
    const BLOCKS: [(u64, u64, u64, u64, bool, Activation, u64); 15] = [
        (16, 3, 16, 16, false, RE, 1),
        (16, 3, 64, 24, false, RE, 2),
        (24, 3, 72, 24, false, RE, 1),
        (24, 5, 72, 40, true, RE, 2),
        (40, 5, 120, 40, true, RE, 1),
        (40, 5, 120, 40, true, RE, 1),
        (40, 3, 240, 80, false, HS, 2),
        (80, 3, 200, 80, false, HS, 1),
        (80, 3, 184, 80, false, HS, 1),
        (80, 3, 184, 80, false, HS, 1),
        (80, 3, 480, 112, true, HS, 1),
        (112, 3, 672, 112, true, HS, 1),
        (112, 5, 672, 160, true, HS, 2),
        (160, 5, 960, 160, true, HS, 1),
        (160, 5, 960, 160, true, HS, 1),
    ];
    let mut n = Net(Model::new("mobilenetv3-large", vec![3, 224, 224]));
    n.conv_bn("features.0", 16, 3, 2, 1, Some(HS));
    for (i, &(inp, k, exp, out, se, act, s)) in BLOCKS.iter().enumerate() {
        let p = format!("features.{}", i + 1);
        if exp != inp {
            n.conv_bn(&format!("{p}.expand"), exp, 1, 1, 1, Some(act));
        }
        let dw = n.conv_bn(&format!("{p}.depthwise"), exp, k, s, exp, Some(act));
        if se {
            let squeeze = make_divisible(exp / 4);
            n.add(
                &format!("{p}.se.avgpool"),
                Op::GlobalPool {
                    kind: PoolKind::Avg,
                },
            );
            n.conv(&format!("{p}.se.fc1"), squeeze, 1, 1, 1, true);
            n.act(&format!("{p}.se.relu"), Activation::Relu);
            n.conv(&format!("{p}.se.fc2"), exp, 1, 1, 1, true);
            n.act(&format!("{p}.se.hardsigmoid"), Activation::HardSigmoid);
            n.add_on(
                &format!("{p}.se.scale"),
                Op::Elementwise {
                    kind: Binary::Mul,
                    other_elements: Some(exp),
                },
                &dw,
            );
        }
        n.conv_bn(&format!("{p}.project"), out, 1, 1, 1, None);
        if s == 1 && inp == out {
            n.binary(&format!("{p}.add"), Binary::Add, None);
        }
    }
    n.conv_bn("features.16", 960, 1, 1, 1, Some(HS));
    n.add(
        "avgpool",
        Op::GlobalPool {
            kind: PoolKind::Avg,
        },
    );
    n.add("flatten", Op::Reshape { to: vec![960] });
    n.add(
        "classifier.0",
        Op::Linear {
            out_features: 1280,
            bias: true,
        },
    );
    n.act("classifier.1", HS);
    n.add(
        "classifier.3",
        Op::Linear {
            out_features: 1000,
            bias: true,
        },
    );
    n.0
}

/// Ultralytics' YOLOv8n (`yolov8n.yaml`, 80 classes) at 640x640.
fn yolov8n() -> Model {
    let silu = Some(Activation::Silu);
    let mut n = Net(Model::new("yolov8n", vec![3, 640, 640]));
    // C2f(c2, blocks, shortcut): 1x1 to 2c, split, `blocks` bottlenecks of two 3x3 on the
    // last chunk, concatenation of everything, 1x1 to c2.
    fn c2f(n: &mut Net, p: &str, c2: u64, blocks: usize, shortcut: bool) -> Shape {
        let c = c2 / 2;
        let split = n.conv_bn(&format!("{p}.cv1"), 2 * c, 1, 1, 1, Some(Activation::Silu));
        let mut last = vec![c, split[1], split[2]];
        for b in 0..blocks {
            n.add_on(
                &format!("{p}.m.{b}.cv1.conv"),
                conv(c, 3, 1, 1, 1, false),
                &last,
            );
            n.add(&format!("{p}.m.{b}.cv1.bn"), Op::BatchNorm);
            n.act(&format!("{p}.m.{b}.cv1.act"), Activation::Silu);
            n.conv_bn(
                &format!("{p}.m.{b}.cv2"),
                c,
                3,
                1,
                1,
                Some(Activation::Silu),
            );
            if shortcut {
                n.binary(&format!("{p}.m.{b}.add"), Binary::Add, None);
            }
            last = n.0.last().clone();
        }
        n.add_on(
            &format!("{p}.cat"),
            Op::Concat {
                extra: c * blocks as u64,
            },
            &split,
        );
        n.conv_bn(&format!("{p}.cv2"), c2, 1, 1, 1, Some(Activation::Silu))
    }
    n.conv_bn("0", 16, 3, 2, 1, silu);
    n.conv_bn("1", 32, 3, 2, 1, silu);
    c2f(&mut n, "2", 32, 1, true);
    n.conv_bn("3", 64, 3, 2, 1, silu);
    let p3 = c2f(&mut n, "4", 64, 2, true);
    n.conv_bn("5", 128, 3, 2, 1, silu);
    let p4 = c2f(&mut n, "6", 128, 2, true);
    n.conv_bn("7", 256, 3, 2, 1, silu);
    c2f(&mut n, "8", 256, 1, true);
    // SPPF: 1x1 to half, three chained 5x5 max pools, concatenation, 1x1.
    n.conv_bn("9.cv1", 128, 1, 1, 1, silu);
    for i in 0..3 {
        n.add(&format!("9.m.{i}"), square_pool(PoolKind::Max, 5, 1, 2));
    }
    n.add("9.cat", Op::Concat { extra: 3 * 128 });
    let p5 = n.conv_bn("9.cv2", 256, 1, 1, 1, silu);
    n.add(
        "10",
        Op::Resize {
            scale: 2,
            mode: Interpolation::Nearest,
        },
    );
    n.add("11", Op::Concat { extra: p4[0] });
    let h12 = c2f(&mut n, "12", 128, 1, false);
    n.add(
        "13",
        Op::Resize {
            scale: 2,
            mode: Interpolation::Nearest,
        },
    );
    n.add("14", Op::Concat { extra: p3[0] });
    let out15 = c2f(&mut n, "15", 64, 1, false);
    n.conv_bn("16", 64, 3, 2, 1, silu);
    n.add("17", Op::Concat { extra: h12[0] });
    let out18 = c2f(&mut n, "18", 128, 1, false);
    n.conv_bn("19", 128, 3, 2, 1, silu);
    n.add("20", Op::Concat { extra: p5[0] });
    let out21 = c2f(&mut n, "21", 256, 1, false);
    // Detect: per level a box branch (to 4 x 16 DFL bins) and a class branch (80).
    let mut anchors = 0;
    for (i, level) in [out15, out18, out21].iter().enumerate() {
        for (branch, width, outs) in [("cv2", 64, 64), ("cv3", 80, 80)] {
            n.add_on(
                &format!("22.{branch}.{i}.0.conv"),
                conv(width, 3, 1, 1, 1, false),
                level,
            );
            n.add(&format!("22.{branch}.{i}.0.bn"), Op::BatchNorm);
            n.act(&format!("22.{branch}.{i}.0.act"), Activation::Silu);
            n.conv_bn(&format!("22.{branch}.{i}.1"), width, 3, 1, 1, silu);
            n.conv(&format!("22.{branch}.{i}.2"), outs, 1, 1, 1, true);
        }
        n.add(&format!("22.cat.{i}"), Op::Concat { extra: 64 });
        anchors += level[1] * level[2];
    }
    // The levels flattened and joined (a copy of all of them: counted as a concatenation
    // whose output is the joined tensor), DFL: softmax over 16 bins, their expectation.
    n.add_on("22.cat", Op::Concat { extra: 0 }, &vec![144, anchors]);
    n.add_on("22.dfl.softmax", Op::Softmax, &vec![4 * anchors, 16]);
    n.add(
        "22.dfl.conv",
        Op::Linear {
            out_features: 1,
            bias: false,
        },
    );
    n.add_on(
        "22.sigmoid",
        Op::Activation {
            function: Activation::Sigmoid,
        },
        &vec![80, anchors],
    );
    n.0
}

/// Hugging Face's `BertModel` at sequence 128.
fn bert(name: &str, layers: usize, hidden: u64, heads: u64, ff: u64) -> Model {
    const SEQ: u64 = 128;
    let d = hidden / heads;
    let tokens = vec![SEQ, hidden];
    let mut n = Net(Model::new(name, vec![SEQ]));
    let ids = vec![SEQ];
    n.add(
        "embeddings.word",
        Op::Embedding {
            vocab: 30522,
            dim: hidden,
        },
    );
    n.add_on(
        "embeddings.position",
        Op::Embedding {
            vocab: 512,
            dim: hidden,
        },
        &ids,
    );
    n.add_on(
        "embeddings.token_type",
        Op::Embedding {
            vocab: 2,
            dim: hidden,
        },
        &ids,
    );
    n.add_on(
        "embeddings.add",
        Op::Elementwise {
            kind: Binary::Add,
            other_elements: None,
        },
        &tokens,
    );
    n.binary("embeddings.add2", Binary::Add, None);
    n.add("embeddings.norm", Op::LayerNorm);
    let linear = |out| Op::Linear {
        out_features: out,
        bias: true,
    };
    for l in 0..layers {
        let p = format!("encoder.{l}");
        for w in ["query", "key", "value"] {
            n.add_on(&format!("{p}.attention.{w}"), linear(hidden), &tokens);
        }
        attention(&mut n, &format!("{p}.attention"), SEQ, heads, d);
        n.add(&format!("{p}.attention.output"), linear(hidden));
        n.binary(&format!("{p}.attention.residual"), Binary::Add, None);
        n.add(&format!("{p}.attention.norm"), Op::LayerNorm);
        n.add(&format!("{p}.intermediate"), linear(ff));
        n.act(&format!("{p}.intermediate.gelu"), Activation::Gelu);
        n.add(&format!("{p}.output"), linear(hidden));
        n.binary(&format!("{p}.output.residual"), Binary::Add, None);
        n.add(&format!("{p}.output.norm"), Op::LayerNorm);
    }
    n.add_on("pooler.dense", linear(hidden), &vec![1, hidden]);
    n.act("pooler.tanh", Activation::Tanh);
    n.0
}

/// Scaled dot-product attention of `heads` heads of width `d` over `seq` tokens, from Q,
/// K, V already projected: `Q K^T` (K's transpose a view), the scale, the additive mask,
/// softmax, `A V`, and the heads joined (a copy: HF's `permute(..).contiguous()`).
pub(super) fn attention_ops(seq: u64, heads: u64, d: u64) -> Vec<(&'static str, Op, Shape)> {
    vec![
        ("qk", Op::MatMul { n: seq }, vec![heads, seq, d]),
        (
            "scale",
            Op::Elementwise {
                kind: Binary::Div,
                other_elements: Some(1),
            },
            vec![heads, seq, seq],
        ),
        (
            "mask",
            Op::Elementwise {
                kind: Binary::Add,
                other_elements: Some(seq),
            },
            vec![heads, seq, seq],
        ),
        ("softmax", Op::Softmax, vec![heads, seq, seq]),
        ("av", Op::MatMul { n: d }, vec![heads, seq, seq]),
        (
            "merge_heads",
            Op::Transpose {
                perm: vec![1, 0, 2],
            },
            vec![heads, seq, d],
        ),
        (
            "reshape",
            Op::Reshape {
                to: vec![seq, heads * d],
            },
            vec![seq, heads, d],
        ),
    ]
}

fn attention(n: &mut Net, p: &str, seq: u64, heads: u64, d: u64) {
    for (name, op, input) in attention_ops(seq, heads, d) {
        n.add_on(&format!("{p}.{name}"), op, &input);
    }
}

/// Pagoda's LSTM language model at 32 tokens.
fn lstm() -> Model {
    let mut n = Net(Model::new("lstm", vec![32]));
    n.add(
        "embedding",
        Op::Embedding {
            vocab: 29423,
            dim: 256,
        },
    );
    n.add("lstm.0", Op::Lstm { hidden: 256 });
    n.add("lstm.1", Op::Lstm { hidden: 256 });
    n.add(
        "fc",
        Op::Linear {
            out_features: 29423,
            bias: true,
        },
    );
    n.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::roofline::Precision;

    fn totals(name: &str) -> (f64, f64) {
        let r = get(name).unwrap().count(1, Precision::F32, false);
        (r.total.macs as f64, r.total.params as f64)
    }

    fn within(what: &str, got: f64, published: f64, tolerance: f64) {
        let rel = (got - published).abs() / published;
        assert!(
            rel <= tolerance,
            "{what}: {got:.4e} against {published:.4e} ({:.2}% off, tolerance {:.1}%)",
            100.0 * rel,
            100.0 * tolerance
        );
    }

    // torchvision's model table (https://pytorch.org/vision/stable/models.html), whose
    // "GFLOPS" count one multiply-add as one operation: resnet18 1.81, 11,689,512 params;
    // resnet50 4.09, 25,557,032 params; mobilenet_v3_large 0.22, 5,483,032 params. He et
    // al. (CVPR 2016) Table 1: 1.8 and 3.8 x 10^9 multiply-adds (v1, stride in the 1x1).
    // Howard et al. (ICCV 2019) Table 3: MobileNetV3-Large 219 M multiply-adds, 5.4 M params.
    #[test]
    fn torchvision_models_match_their_published_size_and_macs() {
        let (macs, params) = totals("resnet18");
        within("resnet18 MACs", macs, 1.814e9, 0.01);
        assert_eq!(params, 11_689_512.0);
        let (macs, params) = totals("ResNet-50");
        within("resnet50 MACs", macs, 4.089e9, 0.01);
        assert_eq!(params, 25_557_032.0);
        let (macs, params) = totals("mobilenetv3-large");
        within("mobilenetv3 MACs", macs, 0.219e9, 0.02);
        assert_eq!(params, 5_483_032.0);
    }

    // Ultralytics' YOLOv8 table (https://docs.ultralytics.com/models/yolov8/): YOLOv8n at
    // 640, 3.2 M params, 8.7 GFLOPs, which Ultralytics computes as 2 x thop's MACs; the
    // model summary of `yolov8n.yaml` gives 3,157,200 parameters.
    #[test]
    fn yolov8n_matches_its_published_size_and_flops() {
        let r = get("yolov8n").unwrap().count(1, Precision::F32, false);
        within("yolov8n 2 x MACs", 2.0 * r.total.macs as f64, 8.7e9, 0.03);
        within("yolov8n params", r.total.params as f64, 3_157_200.0, 0.001);
    }

    // BERT-base at sequence 128: 109 M parameters and 22.5 G FLOPs (2 x MACs) in
    // MobileBERT (Sun et al., ACL 2020, Table 4) and TinyBERT (Jiao et al., EMNLP 2020,
    // Table 1); Hugging Face's bert-base-uncased has 109,482,240 parameters with the pooler
    // and bert-large-uncased 335,141,888 (Devlin et al. 2019 round it to 340 M).
    #[test]
    fn bert_matches_its_published_size_and_flops() {
        let r = get("bert-base").unwrap().count(1, Precision::F32, false);
        assert_eq!(r.total.params, 109_482_240);
        within("bert-base FLOPs", r.total.flops as f64, 22.5e9, 0.02);
        let r = get("bert-large").unwrap().count(1, Precision::F32, false);
        assert_eq!(r.total.params, 335_141_888);
        // By hand: per token and layer 4 H^2 + 2 H F; per layer 2 S^2 H for the attention.
        let (s, h, f) = (128u64, 1024u64, 4096u64);
        let by_hand = 24 * (s * (4 * h * h + 2 * h * f) + 2 * s * s * h) + h * h;
        assert_eq!(r.total.macs, by_hand);
    }

    // Pagoda's LSTM, by hand: per token 2 layers x 4 x 256 x (256 + 256) MACs, and the
    // 256 x 29,423 read-out.
    #[test]
    fn lstm_matches_a_hand_count() {
        let r = get("lstm").unwrap().count(1, Precision::F32, false);
        assert_eq!(r.total.macs, 32 * (2 * 4 * 256 * 512 + 256 * 29_423));
        let by_name = |n: &str| r.layers.iter().find(|l| l.name == n).unwrap().counts;
        let cell = by_name("lstm.0");
        assert_eq!(cell.flops, 2 * 32 * 4 * 256 * 512 + 32 * 256 * 34);
        assert_eq!(cell.params, 4 * 256 * 512 + 8 * 256);
    }

    #[test]
    fn names_resolve_and_batch_scales_activations_not_weights() {
        for name in NAMES {
            let m = get(name).unwrap();
            assert_eq!(m.name, name);
            let one = m.count(1, Precision::F32, false).total;
            let four = m.count(4, Precision::F32, false).total;
            assert_eq!(four.macs, 4 * one.macs, "{name}");
            assert_eq!(four.activation_bytes, 4 * one.activation_bytes, "{name}");
            // The embedding's gathered rows are the one weight read that grows with the batch.
            if !name.starts_with("bert") && name != "lstm" {
                assert_eq!(four.weight_bytes, one.weight_bytes, "{name}");
            }
            // FP16 halves every activation but the embeddings' 8-byte indices.
            let half = m.count(1, Precision::F16, false).total;
            let indices: u64 = m
                .layers
                .iter()
                .filter(|l| matches!(l.op, Op::Embedding { .. }))
                .map(|l| 8 * l.input[0])
                .sum();
            assert_eq!(
                2 * half.activation_bytes - indices,
                one.activation_bytes,
                "{name}"
            );
            let train = m.count(1, Precision::F32, true).total;
            assert_eq!(train.flops, 3 * one.flops);
            assert_eq!(train.bytes(), 3 * one.bytes());
        }
        assert!(get("mobnet").is_some() && get("nope").is_none());
    }
}
