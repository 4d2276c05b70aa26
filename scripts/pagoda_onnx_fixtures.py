#!/usr/bin/env python3
"""Writes the small ONNX graphs `tests/jpower/pagoda.rs` counts layer by layer.

They are built with the `onnx` package's helpers in the patterns exporters emit
(torch.onnx: the Shape -> Gather -> Unsqueeze -> Concat -> Reshape flatten, attention
with Transpose/MatMul/Div/Softmax, GELU as Div/Erf/Add/Mul/Mul), with zero weights.
Pinned: onnx 1.23.2, opset 17. Run: python3 scripts/pagoda_onnx_fixtures.py
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "pagoda")


def w(name, *dims):
    return numpy_helper.from_array(np.zeros(dims, dtype=np.float32), name)


def i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def node(op, inputs, output, **attrs):
    return helper.make_node(op, inputs, [output], name=output, **attrs)


def save(graph, name, infer):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if infer:
        model = onnx.shape_inference.infer_shapes(model)
    onnx.save(model, os.path.join(OUT, name))


def cnn():
    nodes = [
        node("Conv", ["x", "w", "b"], "conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("BatchNormalization", ["conv", "s", "bb", "m", "v"], "bn"),
        node("Relu", ["bn"], "relu"),
        node("MaxPool", ["relu"], "pool", kernel_shape=[2, 2], strides=[2, 2]),
        node("Shape", ["pool"], "shape"),
        node("Constant", [], "zero", value=i64("zero_v", 0)),
        node("Gather", ["shape", "zero"], "batch", axis=0),
        node("Constant", [], "axes", value=i64("axes_v", [0])),
        node("Unsqueeze", ["batch", "axes"], "batch1"),
        node("Constant", [], "minus1", value=i64("minus1_v", [-1])),
        node("Concat", ["batch1", "minus1"], "target", axis=0),
        node("Reshape", ["pool", "target"], "flat"),
        node("Gemm", ["flat", "fc_w", "fc_b"], "fc", transB=1),
        node("Softmax", ["fc"], "prob", axis=1),
    ]
    inits = [w("w", 8, 3, 3, 3), w("b", 8), w("s", 8), w("bb", 8), w("m", 8), w("v", 8),
             w("fc_w", 10, 512), w("fc_b", 10)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])
    y = helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 10])
    return helper.make_graph(nodes, "cnn", [x], [y], inits)


def attention():
    seq, hidden, heads, d = 8, 16, 2, 8
    nodes = [
        node("Gather", ["emb", "ids"], "tok", axis=0),
        node("LayerNormalization", ["tok", "ln_s", "ln_b"], "x", axis=-1),
    ]
    for p in "qkv":
        nodes += [
            node("MatMul", ["x", f"w{p}"], f"{p}_mm"),
            node("Add", [f"{p}_mm", f"b{p}"], f"{p}_lin"),
            node("Shape", [f"{p}_lin"], f"{p}_shape"),
            node("Gather", [f"{p}_shape", "zero"], f"{p}_batch", axis=0),
            node("Unsqueeze", [f"{p}_batch", "axes"], f"{p}_batch1"),
            node("Concat", [f"{p}_batch1", "heads_shape"], f"{p}_target", axis=0),
            node("Reshape", [f"{p}_lin", f"{p}_target"], f"{p}_heads"),
        ]
    nodes += [
        node("Transpose", ["q_heads"], "q", perm=[0, 2, 1, 3]),
        node("Transpose", ["k_heads"], "kt", perm=[0, 2, 3, 1]),
        node("Transpose", ["v_heads"], "v", perm=[0, 2, 1, 3]),
        node("MatMul", ["q", "kt"], "scores"),
        node("Div", ["scores", "sqrt_d"], "scaled"),
        node("Softmax", ["scaled"], "probs", axis=-1),
        node("MatMul", ["probs", "v"], "ctx"),
        node("Transpose", ["ctx"], "ctx_t", perm=[0, 2, 1, 3]),
        node("Reshape", ["ctx_t", "merged_shape"], "merged"),
        node("MatMul", ["merged", "wo"], "o_mm"),
        node("Div", ["o_mm", "sqrt2"], "g_div"),
        node("Erf", ["g_div"], "g_erf"),
        node("Add", ["g_erf", "one"], "g_add"),
        node("Mul", ["o_mm", "g_add"], "g_mul"),
        node("Mul", ["g_mul", "half"], "gelu"),
        node("Einsum", ["gelu", "gelu"], "odd", equation="bsh,bsh->bs"),
    ]
    inits = [
        w("emb", 50, hidden), w("ln_s", hidden), w("ln_b", hidden),
        w("wq", hidden, hidden), w("bq", hidden), w("wk", hidden, hidden), w("bk", hidden),
        w("wv", hidden, hidden), w("bv", hidden), w("wo", hidden, hidden),
        i64("zero", 0), i64("axes", [0]), i64("heads_shape", [seq, heads, d]),
        i64("merged_shape", [0, seq, hidden]),
        numpy_helper.from_array(np.array(8 ** 0.5, dtype=np.float32), "sqrt_d"),
        numpy_helper.from_array(np.array(2 ** 0.5, dtype=np.float32), "sqrt2"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
        numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half"),
    ]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", seq])
    y = helper.make_tensor_value_info("odd", TensorProto.FLOAT, None)
    return helper.make_graph(nodes, "attention", [ids], [y], inits)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    save(cnn(), "cnn.onnx", infer=False)
    save(attention(), "attention.onnx", infer=False)
