//! One ONNX node at a time: its output shape inferred from its inputs', the shape
//! arithmetic exporters emit folded as constants, and each counted operator turned into an
//! [`Op`] on its per-sample shape; with the attribute readers the nodes share.

use super::*;

pub(super) fn attr<'a>(n: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    n.attribute.iter().find(|a| a.name == name)
}

pub(super) fn ints(n: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(n, name).map(|a| a.ints.clone())
}

pub(super) fn int(n: &NodeProto, name: &str, default: i64) -> i64 {
    attr(n, name).map_or(default, |a| a.i)
}

pub(super) fn pair(v: Option<Vec<i64>>, default: u64) -> [u64; 2] {
    match v.as_deref() {
        Some([a, b, ..]) => [*a as u64, *b as u64],
        _ => [default, default],
    }
}

pub(super) fn string<'a>(n: &'a NodeProto, name: &str) -> &'a [u8] {
    attr(n, name).map_or(&[], |a| a.s.as_slice())
}

/// The symmetric padding of a 2-D window over the `[.., H, W]` input `shape`, from `pads`
/// or `auto_pad` (`SAME_*` pads so that the output is the input over the stride, rounded
/// up); padding that differs between the two sides of an axis is not counted.
pub(super) fn padding(
    n: &NodeProto,
    shape: &[i64],
    kernel: [u64; 2],
    stride: [u64; 2],
    dilation: [u64; 2],
) -> Result<[u64; 2], String> {
    let auto = string(n, "auto_pad");
    let pads: Vec<i64> = match auto {
        b"" | b"NOTSET" => ints(n, "pads").unwrap_or_default(),
        b"VALID" => Vec::new(),
        b"SAME_UPPER" | b"SAME_LOWER" => {
            let [h, w] = match shape {
                [.., h, w] => [*h, *w],
                _ => return Err(format!("a 2-D window over {shape:?}")),
            };
            let total = |i: usize, size: i64| {
                let s = stride[i].max(1) as i64;
                let out = (size + s - 1) / s;
                let span = (kernel[i] as i64 - 1) * dilation[i] as i64 + 1;
                ((out - 1) * s + span - size).max(0)
            };
            let (th, tw) = (total(0, h), total(1, w));
            if th % 2 != 0 || tw % 2 != 0 {
                return Err(format!(
                    "auto_pad {} pads unevenly here, which is not counted",
                    String::from_utf8_lossy(auto)
                ));
            }
            vec![th / 2, tw / 2, th / 2, tw / 2]
        }
        other => {
            return Err(format!(
                "auto_pad {} is not counted",
                String::from_utf8_lossy(other)
            ))
        }
    };
    if pads.iter().any(|&p| p < 0) {
        return Err(format!("negative padding {pads:?}"));
    }
    if pads.len() == 4 && (pads[0] != pads[2] || pads[1] != pads[3]) {
        return Err(format!("asymmetric padding {pads:?} is not counted"));
    }
    Ok(pair(Some(pads), 0))
}

/// The attributes read here as integers ([`int`], [`ints`]).
const INTEGER_ATTRIBUTES: [&str; 16] = [
    "axes",
    "axis",
    "ceil_mode",
    "dilations",
    "end",
    "group",
    "hidden_size",
    "kernel_shape",
    "layout",
    "pads",
    "perm",
    "split",
    "start",
    "strides",
    "transA",
    "transB",
];

/// Infers, folds and counts one node.
pub(super) fn node(g: &mut Graph, n: &NodeProto, name: &str) -> Result<(), String> {
    // An integer attribute given as another type would read as its default.
    if let Some(a) = n
        .attribute
        .iter()
        .find(|a| INTEGER_ATTRIBUTES.contains(&a.name.as_str()) && ![0, 2, 7].contains(&a.r#type))
    {
        let kind = match a.r#type {
            1 => "FLOAT",
            3 => "STRING",
            4 => "TENSOR",
            6 => "FLOATS",
            8 => "STRINGS",
            _ => "a non-integer type",
        };
        return Err(format!(
            "attribute {} is given as {kind} where ONNX gives integers",
            a.name
        ));
    }
    let input = |g: &Graph, i: usize| -> Result<Tensor, String> {
        let t = n
            .input
            .get(i)
            .filter(|s| !s.is_empty())
            .ok_or("missing input")?;
        g.get(t)
            .ok_or_else(|| format!("the shape of {t:?} is unknown"))
    };
    let out = n.output.first().cloned().unwrap_or_default();
    let x = || input(g, 0);
    let activation = |function| Op::Activation { function };
    let unary = match n.op_type.as_str() {
        "Relu" => Some(activation(Activation::Relu)),
        "Sigmoid" => Some(activation(Activation::Sigmoid)),
        "Tanh" => Some(activation(Activation::Tanh)),
        "HardSigmoid" => Some(activation(Activation::HardSigmoid)),
        "HardSwish" => Some(activation(Activation::HardSwish)),
        "Clip" => Some(activation(Activation::Relu6)),
        "Erf" => Some(activation(Activation::Erf)),
        "Gelu" => Some(activation(Activation::Gelu)),
        "Softmax" => Some(Op::Softmax),
        "BatchNormalization" => Some(Op::BatchNorm),
        "LayerNormalization" => Some(Op::LayerNorm),
        "GlobalAveragePool" => Some(Op::GlobalPool {
            kind: PoolKind::Avg,
        }),
        "GlobalMaxPool" => Some(Op::GlobalPool {
            kind: PoolKind::Max,
        }),
        _ => None,
    };
    if let Some(op) = unary {
        let t = x()?;
        let s = g.layer(name, op, &t.shape)?;
        g.set(&out, s, None);
        return Ok(());
    }
    match n.op_type.as_str() {
        "Constant" => {
            // `value` (a tensor), or opset 12's `value_int(s)` and `value_float(s)`.
            let (dims, values) = if let Some(t) = attr(n, "value").and_then(|a| a.t.as_ref()) {
                (t.dims.clone(), tensor_values(t))
            } else if let Some(a) = attr(n, "value_ints") {
                let v: Vec<f64> = a.ints.iter().map(|&i| i as f64).collect();
                (vec![v.len() as i64], Some(v))
            } else if let Some(a) = attr(n, "value_floats") {
                let v: Vec<f64> = a.floats.iter().map(|&f| f64::from(f)).collect();
                (vec![v.len() as i64], Some(v))
            } else if let Some(a) = attr(n, "value_int") {
                (vec![], Some(vec![a.i as f64]))
            } else if let Some(a) = attr(n, "value_float") {
                (vec![], Some(vec![f64::from(a.f)]))
            } else {
                return Err(
                    "no value this count reads (value, value_int(s), value_float(s))".into(),
                );
            };
            g.set(&out, dims, values);
        }
        "Identity" | "Cast" | "Dropout" => {
            // A weight stays one through them (a tied embedding, FP16 weights cast up): a
            // review found them counted as activations and the embedding dropped unlisted.
            let t = x()?;
            g.set(&out, t.shape, t.values);
            if let Some(o) = g.tensors.get_mut(&out) {
                o.weight = t.weight;
            }
        }
        "Shape" => {
            let s = x()?.shape;
            let rank = s.len() as i64;
            let clamp = |i: i64| (if i < 0 { i + rank } else { i }).clamp(0, rank) as usize;
            let start = clamp(int(n, "start", 0));
            let end = clamp(attr(n, "end").map_or(rank, |a| a.i));
            let s = s.get(start..end.max(start)).unwrap_or_default();
            g.set(
                &out,
                vec![s.len() as i64],
                Some(s.iter().map(|&d| d as f64).collect()),
            );
        }
        "Gather" => {
            let (data, idx) = (x()?, input(g, 1)?);
            let axis = norm_axis(int(n, "axis", 0), data.shape.len())?;
            match (&data.values, &idx.values) {
                (Some(v), Some(i)) if data.shape.len() == 1 => {
                    let pick: Vec<f64> = i
                        .iter()
                        .map(|&k| {
                            let k = if k < 0.0 { k + v.len() as f64 } else { k };
                            (k >= 0.0)
                                .then(|| v.get(k as usize).copied())
                                .flatten()
                                .ok_or("index out of range")
                        })
                        .collect::<Result<_, _>>()?;
                    g.set(&out, idx.shape.clone(), Some(pick));
                }
                _ if data.weight && data.shape.len() == 2 && axis == 0 => {
                    let s = g.layer(
                        name,
                        Op::Embedding {
                            vocab: data.shape[0] as u64,
                            dim: data.shape[1] as u64,
                        },
                        &[1, elements(&idx.shape).max(1)],
                    )?;
                    let mut full = idx.shape.clone();
                    full.push(s[2]);
                    g.set(&out, full, None);
                }
                _ if axis < data.shape.len() => {
                    let mut s = data.shape.clone();
                    s.splice(axis..=axis, idx.shape.iter().copied());
                    if data.values.is_none() {
                        // Shaped on, but the copy it makes is not modelled: listed.
                        g.skipped.push(format!(
                            "{name} (Gather): the copy of an activation to {s:?} is not counted"
                        ));
                    }
                    g.set(&out, s, None);
                }
                _ => return Err(format!("cannot gather from {:?}", data.shape)),
            }
        }
        "Unsqueeze" | "Squeeze" => {
            let t = x()?;
            let axes = ints(n, "axes")
                .or_else(|| {
                    input(g, 1)
                        .ok()
                        .and_then(|a| a.values)
                        .map(|v| v.iter().map(|&a| a as i64).collect())
                })
                .unwrap_or_default();
            let mut s = t.shape.clone();
            if n.op_type == "Unsqueeze" {
                let rank = s.len() + axes.len();
                if rank > MAX_RANK {
                    return Err(format!("a rank of {rank} is beyond {MAX_RANK}"));
                }
                let mut axes: Vec<usize> = axes
                    .iter()
                    .map(|&a| norm_axis(a, rank))
                    .collect::<Result<_, _>>()?;
                axes.sort_unstable();
                if axes.windows(2).any(|w| w[0] == w[1]) {
                    return Err("an axis named twice".into());
                }
                for a in axes {
                    s.insert(a.min(s.len()), 1);
                }
            } else if axes.is_empty() {
                s.retain(|&d| d != 1);
            } else {
                let rank = s.len();
                let drop: Vec<usize> = axes
                    .iter()
                    .map(|&a| norm_axis(a, rank))
                    .collect::<Result<_, _>>()?;
                s = s
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !drop.contains(i))
                    .map(|(_, &d)| d)
                    .collect();
            }
            g.set(&out, s, t.values);
        }
        "Concat" => {
            let ts: Vec<Tensor> = (0..n.input.len())
                .map(|i| input(g, i))
                .collect::<Result<_, _>>()?;
            let rank = ts.first().ok_or("no inputs")?.shape.len();
            if rank == 0 || ts.iter().any(|t| t.shape.len() != rank) {
                return Err("operands of different ranks".into());
            }
            let axis = norm_axis(int(n, "axis", 0), rank)?;
            let mut s = ts[0].shape.clone();
            s[axis] = ts
                .iter()
                .map(|t| t.shape.get(axis).copied().unwrap_or(1))
                .fold(0i64, i64::saturating_add);
            if ts.iter().all(|t| t.values.is_some()) {
                let v = ts
                    .iter()
                    .flat_map(|t| t.values.clone().unwrap_or_default())
                    .collect();
                g.set(&out, s, Some(v));
            } else {
                // A copy of every operand: counted on the flattened first one.
                let first = elements(&ts[0].shape) as u64;
                let extra = (elements(&s) as u64).saturating_sub(first);
                g.layer(name, Op::Concat { extra }, &[1, first as i64])?;
                g.set(&out, s, None);
            }
        }
        "Reshape" => {
            let t = x()?;
            let target = input(g, 1)?
                .values
                .ok_or("the target shape is not a constant")?;
            let mut s: Vec<i64> = target
                .iter()
                .enumerate()
                .map(|(i, &d)| {
                    if d == 0.0 {
                        t.shape.get(i).copied().unwrap_or(1)
                    } else {
                        d as i64
                    }
                })
                .collect();
            if let Some(pos) = s.iter().position(|&d| d == -1) {
                let known = elements(&s.iter().copied().filter(|&d| d != -1).collect::<Vec<_>>());
                s[pos] = elements(&t.shape) / known.max(1);
            }
            if elements(&s) != elements(&t.shape) {
                return Err(format!("cannot reshape {:?} to {s:?}", t.shape));
            }
            g.set(&out, s, t.values);
        }
        "Flatten" => {
            let t = x()?;
            // Flatten's axis may also be the rank itself (an output of [all, 1]).
            let rank = t.shape.len();
            let axis = match int(n, "axis", 1) {
                a if a == rank as i64 => rank,
                a => norm_axis(a, rank)?,
            };
            // Past the batch (axis 2 and on), ONNX's [N * a, b] is kept as [N, a, b]:
            // the batch stays its own dimension, so the per-sample counts after it hold.
            let s = if axis >= 2 {
                vec![
                    t.shape[0],
                    elements(&t.shape[1..axis]),
                    elements(&t.shape[axis..]),
                ]
            } else {
                vec![elements(&t.shape[..axis]), elements(&t.shape[axis..])]
            };
            g.set(&out, s, t.values);
        }
        "Expand" => {
            let t = x()?;
            let to = input(g, 1)?
                .values
                .ok_or("the target shape is not a constant")?;
            let to: Vec<i64> = to.iter().map(|&d| d as i64).collect();
            let s = broadcast(&t.shape, &to);
            if t.values.is_none() && elements(&s) > elements(&t.shape) {
                // Shaped on, but the copy it makes is not modelled: listed.
                g.skipped.push(format!(
                    "{name} (Expand): the copy of an activation to {s:?} is not counted"
                ));
            }
            g.set(&out, s, None);
        }
        "Split" => {
            let t = x()?;
            let axis = norm_axis(int(n, "axis", 0), t.shape.len())?;
            if axis >= t.shape.len() {
                return Err("a split of a scalar".into());
            }
            let given = ints(n, "split").or_else(|| {
                input(g, 1)
                    .ok()
                    .and_then(|a| a.values)
                    .map(|v| v.iter().map(|&a| a as i64).collect())
            });
            // Given sizes are non-negative and, where the axis is known, add up to it.
            if let Some(sizes) = &given {
                let known = t.shape[axis] > 0;
                if sizes.iter().any(|&d| d < 0)
                    || (known && sizes.iter().sum::<i64>() != t.shape[axis])
                {
                    return Err(format!(
                        "split sizes {sizes:?} do not add up to the axis's {}",
                        t.shape[axis]
                    ));
                }
            }
            // Equal parts, the last one smaller where the axis does not divide evenly.
            let sizes = given.unwrap_or_else(|| {
                let parts = n.output.len().max(1) as i64;
                let each = (t.shape[axis] + parts - 1) / parts;
                (0..parts)
                    .map(|i| (t.shape[axis] - i * each).clamp(0, each))
                    .collect()
            });
            for (o, size) in n.output.iter().zip(sizes) {
                let mut s = t.shape.clone();
                s[axis] = size;
                g.set(o, s, None);
            }
        }
        "Where" => {
            let (c, a, b) = (x()?, input(g, 1)?, input(g, 2)?);
            let s = broadcast(&broadcast(&c.shape, &a.shape), &b.shape);
            if let (Some(vc), Some(va), Some(vb)) = (&c.values, &a.values, &b.values) {
                // Shape arithmetic on constants: folded, not counted (each operand of the
                // result's length, or one value broadcast).
                let len = elements(&s) as usize;
                let at = |v: &Vec<f64>, i: usize| match v.len() {
                    1 => Some(v[0]),
                    n if n == len => Some(v[i]),
                    _ => None,
                };
                let folded: Option<Vec<f64>> = (0..len)
                    .map(|i| {
                        Some(if at(vc, i)? != 0.0 {
                            at(va, i)?
                        } else {
                            at(vb, i)?
                        })
                    })
                    .collect();
                if let Some(v) = folded {
                    g.set(&out, s, Some(v));
                    return Ok(());
                }
            }
            g.layer(
                name,
                Op::Elementwise {
                    kind: Binary::Add,
                    other_elements: Some(elements(&b.shape).max(1) as u64),
                },
                &s,
            )?;
            g.set(&out, s, None);
        }
        "Add" | "Sub" | "Mul" | "Div" | "Pow" => {
            let (a, b) = (x()?, input(g, 1)?);
            let s = broadcast(&a.shape, &b.shape);
            if let (Some(va), Some(vb)) = (&a.values, &b.values) {
                // Shape arithmetic on constants: folded, not counted.
                if va.len() == vb.len() || va.len() == 1 || vb.len() == 1 {
                    // An empty operand broadcasts to an empty result.
                    let len = if va.is_empty() || vb.is_empty() {
                        0
                    } else {
                        va.len().max(vb.len())
                    };
                    let at = |v: &Vec<f64>, i: usize| v[if v.len() == 1 { 0 } else { i }];
                    let f = |p: f64, q: f64| match n.op_type.as_str() {
                        "Add" => p + q,
                        "Sub" => p - q,
                        "Mul" => p * q,
                        "Div" => (p / q).trunc(),
                        _ => p.powf(q),
                    };
                    g.set(
                        &out,
                        s,
                        Some((0..len).map(|i| f(at(va, i), at(vb, i))).collect()),
                    );
                    return Ok(());
                }
            }
            let kind = match n.op_type.as_str() {
                "Add" => Binary::Add,
                "Sub" => Binary::Sub,
                "Div" => Binary::Div,
                _ => Binary::Mul,
            };
            let smaller = elements(&a.shape).min(elements(&b.shape)).max(1) as u64;
            let other = (smaller != elements(&s) as u64).then_some(smaller);
            // A weight added to the activations, broadcast (a bias) or whole (a position
            // embedding): a bias of its elements, read once.
            let weight = match (a.weight, b.weight) {
                (true, false) => Some(&a),
                (false, true) => Some(&b),
                _ => None,
            };
            let op = match (kind, weight) {
                (Binary::Add | Binary::Sub, Some(w)) => Op::Bias {
                    elements: elements(&w.shape).max(1) as u64,
                },
                _ => Op::Elementwise {
                    kind,
                    other_elements: other,
                },
            };
            g.layer(name, op, &s)?;
            g.set(&out, s, None);
        }
        "Conv" => {
            let (t, w) = (x()?, input(g, 1)?);
            let &[m, _, kh, kw] = w.shape.as_slice() else {
                return Err(format!(
                    "a 2-D convolution needs a 4-D weight, got {:?}",
                    w.shape
                ));
            };
            let (kernel, stride, dilation) = (
                [kh as u64, kw as u64],
                pair(ints(n, "strides"), 1),
                pair(ints(n, "dilations"), 1),
            );
            let op = Op::Conv2d {
                out_channels: m as u64,
                kernel,
                stride,
                padding: padding(n, &t.shape, kernel, stride, dilation)?,
                dilation,
                groups: int(n, "group", 1) as u64,
                bias: n.input.len() > 2 && !n.input[2].is_empty(),
            };
            let s = g.layer(name, op, &t.shape)?;
            g.set(&out, s, None);
        }
        "MaxPool" | "AveragePool" => {
            let t = x()?;
            let (kernel, stride) = (
                pair(ints(n, "kernel_shape"), 1),
                pair(ints(n, "strides"), 1),
            );
            if int(n, "ceil_mode", 0) != 0 {
                return Err("ceil_mode is not counted".into());
            }
            if pair(ints(n, "dilations"), 1) != [1, 1] {
                return Err("a dilated pooling window is not counted".into());
            }
            let op = Op::Pool {
                kind: if n.op_type == "MaxPool" {
                    PoolKind::Max
                } else {
                    PoolKind::Avg
                },
                kernel,
                stride,
                padding: padding(n, &t.shape, kernel, stride, [1, 1])?,
            };
            let s = g.layer(name, op, &t.shape)?;
            g.set(&out, s, None);
        }
        "Gemm" | "MatMul" => {
            let (a, b) = (x()?, input(g, 1)?);
            let gemm = n.op_type == "Gemm";
            if gemm && int(n, "transA", 0) != 0 {
                return Err("transA is not counted".into());
            }
            let trans_b = gemm && int(n, "transB", 0) != 0;
            // B's rows (the inner dimension) and columns.
            let (rows, cols) = match (b.shape.as_slice(), trans_b) {
                ([.., k, m], false) => (*k, *m),
                ([.., m, k], true) => (*k, *m),
                _ => return Err(format!("a second operand of shape {:?}", b.shape)),
            };
            let inner = a.shape.last().copied().unwrap_or(0);
            if inner != rows {
                return Err(format!(
                    "the operands do not fit: {:?} times {:?}{}",
                    a.shape,
                    b.shape,
                    if trans_b { " transposed" } else { "" }
                ));
            }
            // Leading (batch) dimensions broadcast (ONNX's MatMul): where the second
            // operand's widen the first's, the product is counted on the first as
            // broadcast to them; a weight batched that way is no linear layer.
            let lead = |s: &[i64]| s[..s.len().saturating_sub(2)].to_vec();
            let (lead_a, lead_b) = (lead(&a.shape), lead(&b.shape));
            if b.weight && lead_b.iter().product::<i64>() > 1 {
                return Err(format!("a weight batched over {lead_b:?} is not counted"));
            }
            let wide = broadcast(&lead_a, &lead_b);
            let shape = if wide == lead_a || a.shape.len() < 2 {
                a.shape.clone()
            } else {
                wide.into_iter()
                    .chain(a.shape[a.shape.len() - 2..].iter().copied())
                    .collect()
            };
            let cols = cols as u64;
            let op = if b.weight || n.op_type == "Gemm" {
                Op::Linear {
                    out_features: cols,
                    bias: n.input.len() > 2 && !n.input[2].is_empty(),
                }
            } else {
                Op::MatMul { n: cols }
            };
            let s = g.layer(name, op, &shape)?;
            g.set(&out, s, None);
        }
        "Transpose" => {
            let t = x()?;
            let rank = t.shape.len();
            let perm: Vec<usize> = ints(n, "perm")
                .map(|p| {
                    p.iter()
                        .map(|&a| norm_axis(a, rank))
                        .collect::<Result<Vec<_>, _>>()
                })
                .unwrap_or_else(|| Ok((0..rank).rev().collect()))?;
            let mut seen = vec![false; rank];
            let mut each_once = || perm.iter().all(|&i| !std::mem::replace(&mut seen[i], true));
            if perm.len() != rank || rank == 0 || !each_once() {
                return Err(format!("perm {perm:?} is not a permutation of rank {rank}"));
            }
            let s: Vec<i64> = perm.iter().map(|&i| t.shape[i]).collect();
            if t.values.is_none() && !t.weight {
                // A copy: counted on the flattened tensor (the batch may move).
                let e = elements(&t.shape);
                g.layer(name, Op::Transpose { perm: vec![0] }, &[1, e])?;
            }
            g.set(&out, s, t.values);
            // A weight transposed (an exporter's W^T before a MatMul) stays a weight.
            if let Some(o) = g.tensors.get_mut(&out) {
                o.weight = t.weight;
            }
        }
        "Resize" | "Upsample" => {
            let t = x()?;
            // Where the factors are, by position: Upsample-7's `scales` attribute;
            // Upsample and Resize-10 take scales as input 1; Resize-11 on takes roi, scales,
            // sizes (inputs 1, 2, 3), sizes where given.
            let constant = |i: usize| {
                n.input
                    .get(i)
                    .filter(|s| !s.is_empty())
                    .and_then(|_| input(g, i).ok())
                    .and_then(|v| v.values)
            };
            let factors: Vec<f64> = if let Some(a) = attr(n, "scales") {
                a.floats.iter().map(|&f| f64::from(f)).collect()
            } else if n.op_type == "Upsample" || n.input.len() == 2 {
                constant(1).ok_or("the scales are not a constant")?
            } else if let Some(sizes) = constant(3) {
                sizes
                    .iter()
                    .zip(&t.shape)
                    .map(|(&to, &from)| to / from as f64)
                    .collect()
            } else {
                constant(2).ok_or("the scales or sizes are not constants")?
            };
            let ([1.0, 1.0, h, w], 4) = (factors.as_slice(), t.shape.len()) else {
                return Err(format!(
                    "factors {factors:?} of an input {:?} are no [N, C, H, W] upsampling",
                    t.shape
                ));
            };
            let scale = *h;
            if h != w || scale.fract() != 0.0 || scale < 1.0 {
                return Err(format!(
                    "a scale of {h} x {w} is not an integer upsampling, the same on both axes"
                ));
            }
            // Both operators' default is nearest; Upsample-7 says `bilinear` (a review
            // found a bilinear Resize counted as nearest, at no FLOPs, unlisted).
            let mode = match attr(n, "mode").map_or(&b"nearest"[..], |a| &a.s[..]) {
                b"nearest" => Interpolation::Nearest,
                b"linear" | b"bilinear" => Interpolation::Linear,
                b"cubic" => Interpolation::Cubic,
                other => {
                    return Err(format!(
                        "mode {} is not counted",
                        String::from_utf8_lossy(other)
                    ))
                }
            };
            let s = g.layer(
                name,
                Op::Resize {
                    scale: scale as u64,
                    mode,
                },
                &t.shape,
            )?;
            g.set(&out, s, None);
        }
        "LSTM" => {
            let (t, w) = (x()?, input(g, 1)?);
            let hidden = int(n, "hidden_size", 0) as u64;
            let dirs = w.shape.first().copied().unwrap_or(1);
            if !(1..=2).contains(&dirs) {
                return Err(format!("{dirs} directions"));
            }
            // Layout 0: X is [steps, batch, features]; layout 1: [batch, steps, features].
            let batch_first = int(n, "layout", 0) == 1;
            let ((&[steps, _, features], false) | (&[_, steps, features], true)) =
                (t.shape.as_slice(), batch_first)
            else {
                return Err(format!("an LSTM needs a 3-D input, got {:?}", t.shape));
            };
            for d in 0..dirs {
                let suffix = if dirs > 1 {
                    format!(".{d}")
                } else {
                    String::new()
                };
                g.model
                    .push(
                        &format!("{name}{suffix}"),
                        Op::Lstm { hidden },
                        Some(vec![steps as u64, features as u64]),
                    )
                    .map_err(|e| e.to_string())?;
            }
            let h = hidden as i64;
            let outs = if batch_first {
                [vec![1, steps, dirs, h], vec![1, dirs, h], vec![1, dirs, h]]
            } else {
                [vec![steps, dirs, 1, h], vec![dirs, 1, h], vec![dirs, 1, h]]
            };
            for (o, s) in n.output.iter().zip(outs) {
                g.set(o, s, None);
            }
        }
        other => return Err(format!("operator {other} is not counted")),
    }
    Ok(())
}
