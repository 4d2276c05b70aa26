//! The ONNX reader on graphs of the patterns real exporters emit, counted layer by layer,
//! and on malformed files.

use super::*;
use crate::gpu::roofline::Precision;
use prost::Message;

fn node(op: &str, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        name: output.into(),
        op_type: op.into(),
        attribute,
    }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        ints: v.to_vec(),
        ..AttributeProto::default()
    }
}

fn int(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        i,
        ..AttributeProto::default()
    }
}

fn weight(name: &str, dims: &[i64]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: 1,
        name: name.into(),
        raw_data: vec![0; 4 * dims.iter().product::<i64>() as usize],
        ..TensorProto::default()
    }
}

/// A 1-D constant, or a scalar when `v` has one value and `output` is `zero`.
fn constant(output: &str, v: &[i64]) -> NodeProto {
    let t = TensorProto {
        dims: if output == "zero" {
            vec![]
        } else {
            vec![v.len() as i64]
        },
        data_type: 7,
        int64_data: v.to_vec(),
        ..TensorProto::default()
    };
    node(
        "Constant",
        &[],
        output,
        vec![AttributeProto {
            name: "value".into(),
            t: Some(t),
            ..AttributeProto::default()
        }],
    )
}

/// Conv, ReLU, then the exporters' flatten: Shape -> Gather -> Unsqueeze -> Concat ->
/// Reshape, a Gemm, and an operator nobody knows followed by one that needs its output.
fn model() -> Vec<u8> {
    model_with(vec![])
}

/// [`model`] with `extra` nodes after it.
fn model_with(extra: Vec<NodeProto>) -> Vec<u8> {
    let input = ValueInfoProto {
        name: "x".into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorType {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: vec![
                        Dimension {
                            dim_value: None,
                            dim_param: Some("N".into()),
                        },
                        Dimension {
                            dim_value: Some(3),
                            dim_param: None,
                        },
                        Dimension {
                            dim_value: Some(8),
                            dim_param: None,
                        },
                        Dimension {
                            dim_value: Some(8),
                            dim_param: None,
                        },
                    ],
                }),
            }),
        }),
    };
    let graph = GraphProto {
        name: "tiny".into(),
        node: vec![
            node(
                "Conv",
                &["x", "w", "b"],
                "conv",
                vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1])],
            ),
            node("Relu", &["conv"], "relu", vec![]),
            node("Shape", &["relu"], "shape", vec![]),
            constant("zero", &[0]),
            node("Gather", &["shape", "zero"], "batch", vec![int("axis", 0)]),
            node("Unsqueeze", &["batch"], "batch1", vec![ints("axes", &[0])]),
            constant("minus1", &[-1]),
            node(
                "Concat",
                &["batch1", "minus1"],
                "target",
                vec![int("axis", 0)],
            ),
            node("Reshape", &["relu", "target"], "flat", vec![]),
            node("Gemm", &["flat", "w2", "b2"], "fc", vec![int("transB", 1)]),
            node("Frobnicate", &["fc"], "odd", vec![]),
            node("Relu", &["odd"], "after", vec![]),
        ]
        .into_iter()
        .chain(extra)
        .collect(),
        initializer: vec![
            weight("w", &[4, 3, 3, 3]),
            weight("b", &[4]),
            weight("w2", &[10, 256]),
            weight("b2", &[10]),
        ],
        input: vec![input],
        ..GraphProto::default()
    };
    ModelProto { graph: Some(graph) }.encode_to_vec()
}

/// A graph input of shape `d` (0: symbolic).
fn input(name: &str, d: &[i64]) -> ValueInfoProto {
    let dim = d
        .iter()
        .map(|&v| Dimension {
            dim_value: (v > 0).then_some(v),
            dim_param: (v == 0).then(|| "N".to_string()),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorType {
                elem_type: 1,
                shape: Some(TensorShapeProto { dim }),
            }),
        }),
    }
}

/// A model of one input, `nodes` and the weights `initializer`, counted.
fn counted(x: ValueInfoProto, nodes: Vec<NodeProto>, initializer: Vec<TensorProto>) -> Onnx {
    let graph = GraphProto {
        node: nodes,
        initializer,
        input: vec![x],
        ..GraphProto::default()
    };
    let bytes = ModelProto { graph: Some(graph) }.encode_to_vec();
    parse(&bytes, Path::new("t.onnx"), &Dims::new()).unwrap()
}

fn floats(output: &str, v: &[f32]) -> TensorProto {
    TensorProto {
        dims: vec![v.len() as i64],
        data_type: 1,
        float_data: v.to_vec(),
        name: output.into(),
        ..TensorProto::default()
    }
}

fn text(name: &str, s: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        s: s.as_bytes().to_vec(),
        ..AttributeProto::default()
    }
}

/// Found by review: `nn.Linear` on 3-D input exports as MatMul then an Add of the bias
/// initializer, which was counted as a broadcast activation: missing from the
/// parameters and read again for every sample. It is a bias: parameters, read once.
#[test]
fn a_bias_added_to_a_matmul_is_a_weight() {
    let o = counted(
        input("x", &[0, 4, 8]),
        vec![
            node("MatMul", &["x", "w"], "mm", vec![]),
            node("Add", &["mm", "b"], "y", vec![]),
        ],
        vec![weight("w", &[8, 10]), weight("b", &[10])],
    );
    for batch in [1, 2] {
        let r = o.model.count(batch, Precision::F32, false);
        let ops: Vec<&str> = r.layers.iter().map(|l| l.op).collect();
        assert_eq!(ops, ["linear", "bias"], "{:?}", o.skipped);
        assert_eq!(r.total.params, 8 * 10 + 10);
        let bias = &r.layers[1].counts;
        assert_eq!((bias.weight_bytes, bias.flops), (40, batch * 4 * 10));
    }
    // Two activations added stay an element-wise add.
    let o = counted(
        input("x", &[0, 4, 8]),
        vec![node("Add", &["x", "x"], "y", vec![])],
        vec![],
    );
    assert_eq!(o.model.count(1, Precision::F32, false).layers[0].op, "add");
}

/// Found by review: a weight through `Identity` (a tied embedding) or `Cast` (FP16
/// weights cast up) became an activation: the MatMul was counted without its weights,
/// or not at all, and a Gather from it vanished unlisted.
#[test]
fn a_weight_stays_one_through_identity_and_cast() {
    let direct = counted(
        input("x", &[0, 4, 8]),
        vec![node("MatMul", &["x", "w"], "y", vec![])],
        vec![weight("w", &[8, 10])],
    );
    let want = direct.model.count(1, Precision::F32, false).total;
    assert_eq!(want.params, 80);
    for through in ["Identity", "Cast"] {
        let mut w = weight("w", &[8, 10]);
        if through == "Cast" {
            w.data_type = FLOAT16;
            w.raw_data.truncate(2 * 80);
        }
        let o = counted(
            input("x", &[0, 4, 8]),
            vec![
                node(through, &["w"], "w2", vec![int("to", 1)]),
                node("MatMul", &["x", "w2"], "y", vec![]),
            ],
            vec![w],
        );
        assert!(o.skipped.is_empty(), "{through}: {:?}", o.skipped);
        let got = o.model.count(1, Precision::F32, false).total;
        assert_eq!(
            (got.params, got.flops),
            (want.params, want.flops),
            "{through}"
        );
    }
}

/// Found by review: a symbolic sequence length counted as 1 with no way to give it;
/// `--dim NAME=N` gives it, and a name the file does not use is an error.
#[test]
fn a_symbolic_dimension_takes_the_value_given_by_name() {
    let named = |p: &str| Dimension {
        dim_value: None,
        dim_param: Some(p.into()),
    };
    let x = ValueInfoProto {
        name: "x".into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorType {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: vec![
                        named("batch"),
                        named("seq"),
                        Dimension {
                            dim_value: Some(8),
                            dim_param: None,
                        },
                    ],
                }),
            }),
        }),
    };
    let bytes = ModelProto {
        graph: Some(GraphProto {
            node: vec![node("MatMul", &["x", "w"], "y", vec![])],
            initializer: vec![weight("w", &[8, 10])],
            input: vec![x],
            ..GraphProto::default()
        }),
    }
    .encode_to_vec();
    let flops = |dims: &[(&str, i64)]| {
        let dims: Dims = dims.iter().map(|&(k, v)| (k.to_string(), v)).collect();
        parse(&bytes, Path::new("s.onnx"), &dims)
            .map(|o| o.model.count(1, Precision::F32, false).total.flops)
    };
    assert_eq!(flops(&[]).unwrap(), 2 * 8 * 10);
    assert_eq!(flops(&[("seq", 128)]).unwrap(), 128 * 2 * 8 * 10);
    let e = flops(&[("sequence", 128)]).unwrap_err().to_string();
    assert!(
        e.contains("--dim sequence: the file names no such dimension (batch, seq)"),
        "{e}"
    );
    // The batch is --batch (a review found --dim batch=8 breaking the count).
    let e = flops(&[("batch", 8)]).unwrap_err().to_string();
    assert!(
        e.contains("--dim batch: that is the batch dimension of input x"),
        "{e}"
    );
}

/// PyTorch exports `nn.LSTM` sequence first: its steps are the input's first
/// dimension, not a batch to count per sample (it was forced to 1, counting one step).
#[test]
fn an_lstm_counts_every_step_in_either_layout() {
    let weights = || vec![weight("w", &[1, 1024, 512]), weight("r", &[1, 1024, 256])];
    let lstm = |layout| {
        node(
            "LSTM",
            &["x", "w", "r"],
            "y",
            vec![int("hidden_size", 256), int("layout", layout)],
        )
    };
    for (x, layout) in [([32, 0, 512], 0), ([32, 1, 512], 0), ([0, 32, 512], 1)] {
        let o = counted(input("x", &x), vec![lstm(layout)], weights());
        let r = o.model.count(1, Precision::F32, false);
        assert_eq!(r.layers.len(), 1, "{x:?}: {:?}", o.skipped);
        assert_eq!(r.layers[0].counts.macs, 32 * 4 * 256 * (512 + 256), "{x:?}");
    }
}

/// Resize's factors are found by position (scales, or sizes where given), on both
/// axes; a downsampling or uneven factor is listed, never counted as something else.
#[test]
fn resize_factors_are_read_by_position_and_only_upsampling_counts() {
    let x = || input("x", &[0, 4, 2, 2]);
    let resize = |inputs: &[&str]| node("Resize", inputs, "y", vec![]);
    let out = |o: &Onnx| o.model.layers.first().map(|l| l.output.clone());
    let scales = counted(
        x(),
        vec![resize(&["x", "", "s"])],
        vec![floats("s", &[1.0, 1.0, 4.0, 4.0])],
    );
    assert_eq!(out(&scales), Some(vec![4, 8, 8]), "{:?}", scales.skipped);
    let sizes = counted(
        x(),
        vec![resize(&["x", "", "", "z"])],
        vec![floats("z", &[1.0, 4.0, 6.0, 6.0])],
    );
    assert_eq!(out(&sizes), Some(vec![4, 6, 6]), "{:?}", sizes.skipped);
    for (factors, why) in [
        ([1.0, 4.0, 1.0, 1.0], "0.5 x 0.5"),
        ([1.0, 4.0, 4.0, 2.0], "2 x 1"),
    ] {
        let o = counted(
            x(),
            vec![resize(&["x", "", "", "z"])],
            vec![floats("z", &factors)],
        );
        assert!(o.model.layers.is_empty(), "{factors:?}");
        assert!(o.skipped[0].contains(why), "{:?}", o.skipped);
    }
    // The interpolation is counted as it is (a review found bilinear at no FLOPs): a
    // weighted sum of 4 inputs an output element, of 16 for cubic.
    for (mode, op, flops) in [
        ("nearest", "resize", 0),
        ("linear", "resize_linear", 8),
        ("cubic", "resize_cubic", 32),
    ] {
        let o = counted(
            x(),
            vec![node(
                "Resize",
                &["x", "", "s"],
                "y",
                vec![text("mode", mode)],
            )],
            vec![floats("s", &[1.0, 1.0, 4.0, 4.0])],
        );
        let r = o.model.count(1, Precision::F32, false);
        assert_eq!(r.layers[0].op, op);
        assert_eq!(r.total.flops, flops * 4 * 8 * 8, "{mode}");
    }
    let odd = counted(
        x(),
        vec![node(
            "Resize",
            &["x", "", "s"],
            "y",
            vec![text("mode", "area")],
        )],
        vec![floats("s", &[1.0, 1.0, 4.0, 4.0])],
    );
    assert!(
        odd.skipped[0].contains("mode area is not counted"),
        "{:?}",
        odd.skipped
    );
}

/// Padding comes from `pads` or `auto_pad`; what the count cannot model (uneven pads,
/// `ceil_mode`, a transposed first operand, operands that do not fit) is listed.
#[test]
fn windows_and_products_the_count_cannot_model_are_listed() {
    let x = || input("x", &[0, 3, 224, 224]);
    let conv = counted(
        x(),
        vec![node(
            "Conv",
            &["x", "w"],
            "y",
            vec![
                ints("kernel_shape", &[3, 3]),
                text("auto_pad", "SAME_UPPER"),
            ],
        )],
        vec![weight("w", &[32, 3, 3, 3])],
    );
    assert_eq!(conv.model.layers[0].output, vec![32, 224, 224]);
    let pool = |attrs: Vec<AttributeProto>| {
        let mut a = vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])];
        a.extend(attrs);
        counted(x(), vec![node("MaxPool", &["x"], "y", a)], vec![])
    };
    assert_eq!(pool(vec![]).model.layers[0].output, vec![3, 112, 112]);
    let flat = || input("x", &[0, 768]);
    for (o, why) in [
        (
            pool(vec![ints("pads", &[0, 0, 1, 1])]),
            "asymmetric padding",
        ),
        (pool(vec![int("ceil_mode", 1)]), "ceil_mode"),
        (
            counted(
                flat(),
                vec![node("Gemm", &["x", "w"], "y", vec![int("transA", 1)])],
                vec![weight("w", &[768, 10])],
            ),
            "transA",
        ),
        (
            counted(
                flat(),
                vec![node("MatMul", &["x", "w"], "y", vec![])],
                vec![weight("w", &[512, 10])],
            ),
            "do not fit",
        ),
    ] {
        assert!(o.model.layers.is_empty(), "{why}");
        assert!(o.skipped[0].contains(why), "{why}: {:?}", o.skipped);
    }
}

/// A 2 kB file of chained Concats once folded values without bound (gigabytes); and
/// an uneven `num_outputs` Split gives the last part the remainder.
#[test]
fn folded_constants_stay_small_and_uneven_splits_end_short() {
    let mut nodes = vec![constant("c0", &[1, 2, 3, 4])];
    for i in 1..=6 {
        let prev = format!("c{}", i - 1);
        let inputs = vec![prev.as_str(); 64];
        nodes.push(node(
            "Concat",
            &inputs,
            &format!("c{i}"),
            vec![int("axis", 0)],
        ));
    }
    let o = counted(input("x", &[0, 3]), nodes, vec![]);
    assert!(
        o.skipped.iter().all(|s| !s.contains("c1 ")),
        "{:?}",
        o.skipped
    );
    let split = NodeProto {
        output: vec!["a".into(), "b".into(), "c".into()],
        ..node("Split", &["x"], "a", vec![int("axis", 1)])
    };
    let o = counted(
        input("x", &[0, 62]),
        vec![
            split,
            node("Relu", &["a"], "ra", vec![]),
            node("Relu", &["c"], "rc", vec![]),
        ],
        vec![],
    );
    let outs: Vec<_> = o.model.layers.iter().map(|l| l.output.clone()).collect();
    assert_eq!(outs, [vec![21], vec![20]], "{:?}", o.skipped);
}

#[test]
fn an_exported_graph_counts_layer_by_layer_and_lists_what_it_skips() {
    let o = parse(&model(), Path::new("m.onnx"), &Dims::new()).unwrap();
    let r = o.model.count(2, Precision::F32, false);
    let names: Vec<&str> = r.layers.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["conv", "relu", "fc"]);
    assert_eq!(r.layers[0].counts.macs, 2 * 4 * 8 * 8 * 27);
    assert_eq!(r.layers[0].counts.params, 4 * 27 + 4);
    // The folded flatten gave the Gemm a [256] input: 4 x 8 x 8.
    assert_eq!(r.layers[2].input, vec![256]);
    assert_eq!(r.layers[2].counts.macs, 2 * 256 * 10);
    assert_eq!(o.skipped.len(), 2, "{:?}", o.skipped);
    assert!(o.skipped[0].contains("operator Frobnicate is not counted"));
    assert!(o.skipped[1].contains("the shape of \"odd\" is unknown"));
}

/// Found by a review: a Transpose whose perm repeats an axis and a Split into negative
/// sizes were counted as if they were valid; now each is listed as not counted.
#[test]
fn a_perm_that_is_no_permutation_and_split_sizes_that_do_not_fit_are_not_counted() {
    let mut split = node("Split", &["relu"], "s1", vec![ints("split", &[-5, 8])]);
    split.attribute.push(int("axis", 1));
    split.output.push("s2".into());
    let extra = vec![
        node(
            "Transpose",
            &["relu"],
            "tp",
            vec![ints("perm", &[0, 0, 0, 0])],
        ),
        split,
        node(
            "Split",
            &["relu"],
            "s3",
            vec![int("axis", 1), ints("split", &[1, 2])],
        ),
        node(
            "Transpose",
            &["relu"],
            "ok",
            vec![ints("perm", &[0, 2, 3, 1])],
        ),
    ];
    let o = parse(&model_with(extra), Path::new("m.onnx"), &Dims::new()).unwrap();
    let said = |what: &str| o.skipped.iter().any(|s| s.contains(what));
    assert!(said("is not a permutation of rank 4"), "{:?}", o.skipped);
    assert!(
        said("split sizes [-5, 8] do not add up to the axis's 4"),
        "{:?}",
        o.skipped
    );
    assert!(said("split sizes [1, 2] do not add up"), "{:?}", o.skipped);
    assert_eq!(o.skipped.len(), 5, "{:?}", o.skipped);
}

#[test]
fn truncated_or_foreign_files_are_one_clear_error() {
    let bytes = model();
    for cut in [bytes.len() / 2, 7] {
        let e = parse(&bytes[..cut], Path::new("m.onnx"), &Dims::new())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("m.onnx: not an ONNX model"), "{e}");
        assert!(!e.contains('\n'));
    }
    let e = parse(b"{\"json\": true}", Path::new("m.onnx"), &Dims::new())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("m.onnx: not an ONNX model"), "{e}");
}

/// Found by an attacker of the parsers: a cycle (a reads b, b reads a) and a tensor
/// produced twice were counted as if valid. Both are one clear error.
#[test]
fn a_cycle_and_a_tensor_produced_twice_are_refused() {
    let graph = |nodes: Vec<NodeProto>| {
        ModelProto {
            graph: Some(GraphProto {
                name: "bad".into(),
                node: nodes,
                input: vec![input("x", &[0, 3])],
                ..GraphProto::default()
            }),
        }
        .encode_to_vec()
    };
    let error = |nodes| {
        parse(&graph(nodes), Path::new("g.onnx"), &Dims::new())
            .unwrap_err()
            .to_string()
    };
    let e = error(vec![
        node("Relu", &["b"], "a", vec![]),
        node("Relu", &["a"], "b", vec![]),
    ]);
    assert!(
        e.contains("node a reads `b` before node b produces it"),
        "{e}"
    );
    let e = error(vec![
        node("Relu", &["x"], "a", vec![]),
        node("Sigmoid", &["a"], "a", vec![]),
    ]);
    assert!(
        e.contains("`a` is produced by node a and again by node a"),
        "{e}"
    );
    let e = error(vec![node("Relu", &["x"], "x", vec![])]);
    assert!(e.contains("`x` is produced by the graph's inputs"), "{e}");
    // What nothing produces is left to the count, which lists it.
    assert!(parse(
        &graph(vec![node("Relu", &["nope"], "a", vec![])]),
        Path::new("g.onnx"),
        &Dims::new()
    )
    .is_ok());
}

/// Found by review: an empty constant added to another panicked (an index into nothing),
/// as did a Split of an initializer with a negative dimension; a MatMul whose second
/// operand broadcast the first's batch dimensions counted one product of the several,
/// silently, and a weight batched that way was counted as a linear layer of one slice.
#[test]
fn empty_constants_negative_weights_and_broadcasting_matmuls() {
    let ints_tensor = |name: &str, dims: &[i64], v: &[i64]| TensorProto {
        dims: dims.to_vec(),
        data_type: 7,
        int64_data: v.to_vec(),
        name: name.into(),
        ..TensorProto::default()
    };
    let o = counted(
        input("x", &[0, 3]),
        vec![
            node("Add", &["e", "one"], "t", vec![]),
            node("Relu", &["x"], "y", vec![]),
        ],
        vec![ints_tensor("e", &[0], &[]), ints_tensor("one", &[1], &[1])],
    );
    let r = o.model.count(1, Precision::F32, false);
    assert_eq!(r.layers.len(), 1, "{:?}", o.skipped);
    assert_eq!(r.total.flops, 3);
    // A negative dimension of an initializer is a clear error, whoever reads it.
    let mut w = weight("w", &[4, 2]);
    w.dims = vec![-4, 2];
    let bytes = ModelProto {
        graph: Some(GraphProto {
            node: vec![node("Split", &["w"], "a", vec![int("axis", 0)])],
            initializer: vec![w],
            input: vec![input("x", &[0, 3])],
            ..GraphProto::default()
        }),
    }
    .encode_to_vec();
    let e = parse(&bytes, Path::new("s.onnx"), &Dims::new())
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "s.onnx: initializer `w` has dimensions [-4, 2]: a negative one"
    );
    // [4, 6] times [3, 6, 5], per sample: three products of 4 x 6 x 5.
    let bytes = ModelProto {
        graph: Some(GraphProto {
            node: vec![node("MatMul", &["a", "b"], "y", vec![])],
            input: vec![input("a", &[0, 4, 6]), input("b", &[0, 3, 6, 5])],
            ..GraphProto::default()
        }),
    }
    .encode_to_vec();
    let o = parse(&bytes, Path::new("m.onnx"), &Dims::new()).unwrap();
    let r = o.model.count(1, Precision::F32, false);
    assert_eq!(r.total.macs, 3 * 4 * 6 * 5, "{:?}", o.skipped);
    // A weight batched over 3 is listed, not counted as one slice's linear layer.
    let o = counted(
        input("x", &[0, 1, 4, 6]),
        vec![node("MatMul", &["x", "w"], "y", vec![])],
        vec![weight("w", &[3, 6, 5])],
    );
    assert!(o.model.count(1, Precision::F32, false).layers.is_empty());
    assert!(
        o.skipped.iter().any(|s| s.contains("batched over [3]")),
        "{:?}",
        o.skipped
    );
}

/// Found by review: an integer attribute stored as floats (`strides=[2.0, 2.0]`) read as
/// its default (stride 1: four times the count), silently; and `Flatten` refused its axis
/// at the rank, which ONNX allows, while past the batch it folded dimensions into the
/// batch (a ReLU after `Flatten(axis=2)` of [N, 2, 3, 4] counted 12 elements, not 24).
#[test]
fn integer_attributes_of_another_type_are_listed_and_flatten_keeps_the_batch() {
    let strides = AttributeProto {
        name: "strides".into(),
        floats: vec![2.0, 2.0],
        r#type: 6,
        ..AttributeProto::default()
    };
    let o = counted(
        input("x", &[0, 4, 8, 8]),
        vec![node("Conv", &["x", "w"], "y", vec![strides])],
        vec![weight("w", &[4, 4, 3, 3])],
    );
    assert!(o.model.count(1, Precision::F32, false).layers.is_empty());
    assert!(
        o.skipped
            .iter()
            .any(|s| s.contains("attribute strides is given as FLOATS")),
        "{:?}",
        o.skipped
    );
    for axis in [2, 3, 4, -1] {
        let o = counted(
            input("x", &[0, 2, 3, 4]),
            vec![
                node("Flatten", &["x"], "f", vec![int("axis", axis)]),
                node("Relu", &["f"], "y", vec![]),
            ],
            vec![],
        );
        let r = o.model.count(2, Precision::F32, false);
        assert_eq!(r.total.flops, 2 * 24, "axis {axis}: {:?}", o.skipped);
    }
}

/// Found by review: a weight transposed before its MatMul became a per-sample copy and
/// the MatMul was lost; an initializer added whole (a position embedding) was read per
/// sample with no parameters; an Expand of an activation vanished unlisted; `Where` over
/// constants and opset 12's `Constant(value_ints)` stopped the shape arithmetic.
#[test]
fn transposed_weights_whole_biases_expands_and_folded_wheres() {
    let o = counted(
        input("x", &[0, 20]),
        vec![
            node("Transpose", &["w"], "wt", vec![ints("perm", &[1, 0])]),
            node("MatMul", &["x", "wt"], "y", vec![]),
        ],
        vec![weight("w", &[30, 20])],
    );
    let r = o.model.count(4, Precision::F32, false);
    let ops: Vec<&str> = r.layers.iter().map(|l| l.op).collect();
    assert_eq!(ops, ["linear"], "{:?}", o.skipped);
    assert_eq!((r.total.params, r.total.macs), (600, 4 * 600));
    let o = counted(
        input("x", &[0, 4, 8]),
        vec![node("Add", &["x", "pos"], "y", vec![])],
        vec![weight("pos", &[1, 4, 8])],
    );
    let r = o.model.count(4, Precision::F32, false);
    assert_eq!((r.layers[0].op, r.total.params), ("bias", 32));
    assert_eq!(r.total.weight_bytes, 4 * 32, "read once, not per sample");
    let o = counted(
        input("x", &[0, 1, 8]),
        vec![
            constant("shape", &[1, 16, 8]),
            node("Expand", &["x", "shape"], "y", vec![]),
            node("Relu", &["y"], "z", vec![]),
        ],
        vec![],
    );
    assert!(
        o.skipped.iter().any(|s| s.contains("(Expand)")),
        "{:?}",
        o.skipped
    );
    assert_eq!(o.model.count(1, Precision::F32, false).total.flops, 16 * 8);
    // Where([1, 0, 0], [1, 9, 9], [7, 2, 16]) picks [1, 2, 16]; Constant(value_ints) gives
    // the same target: both reshape [4, 8] to [2, 16] before the Relu.
    let bools = TensorProto {
        dims: vec![3],
        data_type: 7,
        int64_data: vec![1, 0, 0],
        name: "c".into(),
        ..TensorProto::default()
    };
    let value_ints = node("Constant", &[], "t2", vec![ints("value_ints", &[1, 2, 16])]);
    for target in ["t", "t2"] {
        let o = counted(
            input("x", &[0, 4, 8]),
            vec![
                constant("a", &[1, 9, 9]),
                constant("b", &[7, 2, 16]),
                node("Where", &["c", "a", "b"], "t", vec![]),
                value_ints.clone(),
                node("Reshape", &["x", target], "y", vec![]),
                node("Relu", &["y"], "z", vec![]),
            ],
            vec![bools.clone()],
        );
        assert!(o.skipped.is_empty(), "{target}: {:?}", o.skipped);
        let r = o.model.count(1, Precision::F32, false);
        assert_eq!(r.layers.last().unwrap().input, vec![2, 16], "{target}");
    }
}

/// Found by a review: a Conv whose kernel is a graph input without an initializer (weights
/// exported apart) had the kernel's first dimension, its 16 output channels, taken for a
/// batch: counted per "sample", 16 times too few. A graph input used only where operators
/// take weights is a weight, whole.
#[test]
fn a_kernel_given_as_a_graph_input_is_a_weight() {
    let with_values = counted(
        input("x", &[1, 8, 4, 4]),
        vec![node("Conv", &["x", "w"], "y", vec![])],
        vec![weight("w", &[16, 8, 1, 1])],
    );
    let graph = GraphProto {
        node: vec![node("Conv", &["x", "w"], "y", vec![])],
        input: vec![input("x", &[1, 8, 4, 4]), input("w", &[16, 8, 1, 1])],
        ..GraphProto::default()
    };
    let bytes = ModelProto { graph: Some(graph) }.encode_to_vec();
    let without = parse(&bytes, Path::new("t.onnx"), &Dims::new()).unwrap();
    let count = |o: &Onnx| o.model.count(1, Precision::F32, false);
    let (a, b) = (count(&with_values), count(&without));
    assert_eq!(a.total.flops, 2 * 16 * 8 * 16);
    assert_eq!(
        (b.total.flops, b.total.params, b.total.bytes()),
        (a.total.flops, a.total.params, a.total.bytes())
    );
    // A recurrent cell's initial state is a per-batch activation, its weights weights.
    let graph = GraphProto {
        node: vec![node("LSTM", &["x", "w", "r", "", "", "h0"], "y", vec![])],
        ..GraphProto::default()
    };
    assert!(is_weight_input(&graph, "w") && is_weight_input(&graph, "r"));
    assert!(!is_weight_input(&graph, "h0") && !is_weight_input(&graph, "x"));
    // An input that is also a MatMul's first operand stays a batch of activations.
    let graph = GraphProto {
        node: vec![node("MatMul", &["x", "x"], "y", vec![])],
        input: vec![input("x", &[3, 4, 4])],
        ..GraphProto::default()
    };
    let bytes = ModelProto { graph: Some(graph) }.encode_to_vec();
    let o = parse(&bytes, Path::new("t.onnx"), &Dims::new()).unwrap();
    assert_eq!(count(&o).total.flops, 2 * 4 * 4 * 4);
}
