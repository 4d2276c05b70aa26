//! ONNX models in: the graph decoded with `prost` (the subset of `onnx.proto` the count
//! needs, field numbers as in the ONNX schema; everything else skipped as protobuf
//! allows), shapes inferred node by node with batch 1, the shape arithmetic exporters emit
//! folded as constants (`Shape`, `Gather`, `Unsqueeze`, `Squeeze`, `Concat`, `Cast`,
//! `Constant` feeding `Reshape`, `Resize`, `Expand`, `Split`), and each counted operator
//! turned into an [`Op`] on its per-sample shape.
//!
//! An operator this module does not know is listed in [`Onnx::skipped`] with why, never
//! dropped in silence; the nodes after it still count where their input shapes are known
//! (from the file's `value_info`, which `onnx.shape_inference` writes, or from folding).

use super::op::{Activation, Binary, Interpolation, Op, PoolKind, Shape};
use super::Model;
use std::collections::HashMap;
use std::path::Path;

/// `ModelProto` (the fields read).
#[derive(Clone, PartialEq, prost::Message)]
struct ModelProto {
    #[prost(message, optional, tag = "7")]
    graph: Option<GraphProto>,
}

/// `GraphProto`.
#[derive(Clone, PartialEq, prost::Message)]
struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    node: Vec<NodeProto>,
    #[prost(string, tag = "2")]
    name: String,
    #[prost(message, repeated, tag = "5")]
    initializer: Vec<TensorProto>,
    #[prost(message, repeated, tag = "11")]
    input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    output: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "13")]
    value_info: Vec<ValueInfoProto>,
}

/// `NodeProto`.
#[derive(Clone, PartialEq, prost::Message)]
struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    output: Vec<String>,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(string, tag = "4")]
    op_type: String,
    #[prost(message, repeated, tag = "5")]
    attribute: Vec<AttributeProto>,
}

/// `AttributeProto`.
#[derive(Clone, PartialEq, prost::Message)]
struct AttributeProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(float, tag = "2")]
    f: f32,
    #[prost(int64, tag = "3")]
    i: i64,
    #[prost(bytes = "vec", tag = "4")]
    s: Vec<u8>,
    #[prost(message, optional, tag = "5")]
    t: Option<TensorProto>,
    #[prost(float, repeated, tag = "7")]
    floats: Vec<f32>,
    #[prost(int64, repeated, tag = "8")]
    ints: Vec<i64>,
}

/// `TensorProto`.
#[derive(Clone, PartialEq, prost::Message)]
struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    data_type: i32,
    #[prost(float, repeated, tag = "4")]
    float_data: Vec<f32>,
    #[prost(int32, repeated, tag = "5")]
    int32_data: Vec<i32>,
    #[prost(int64, repeated, tag = "7")]
    int64_data: Vec<i64>,
    #[prost(string, tag = "8")]
    name: String,
    #[prost(bytes = "vec", tag = "9")]
    raw_data: Vec<u8>,
}

/// `ValueInfoProto`.
#[derive(Clone, PartialEq, prost::Message)]
struct ValueInfoProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    r#type: Option<TypeProto>,
}

/// `TypeProto` (only its `tensor_type` member of the `value` oneof).
#[derive(Clone, PartialEq, prost::Message)]
struct TypeProto {
    #[prost(message, optional, tag = "1")]
    tensor_type: Option<TensorType>,
}

/// `TypeProto.Tensor`.
#[derive(Clone, PartialEq, prost::Message)]
struct TensorType {
    #[prost(int32, tag = "1")]
    elem_type: i32,
    #[prost(message, optional, tag = "2")]
    shape: Option<TensorShapeProto>,
}

/// `TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
struct TensorShapeProto {
    #[prost(message, repeated, tag = "1")]
    dim: Vec<Dimension>,
}

/// `TensorShapeProto.Dimension` (`dim_value` or `dim_param`; a parameter counts as 1).
#[derive(Clone, PartialEq, prost::Message)]
struct Dimension {
    #[prost(int64, optional, tag = "1")]
    dim_value: Option<i64>,
    #[prost(string, optional, tag = "2")]
    dim_param: Option<String>,
}

/// A model read from ONNX, and the nodes it could not count.
#[derive(Debug)]
pub struct Onnx {
    /// The counted layers.
    pub model: Model,
    /// `name (op): why` for every node not counted.
    pub skipped: Vec<String>,
}

/// A tensor's full shape (batch first) and, where it is a constant, its values.
#[derive(Debug, Clone, Default)]
struct Tensor {
    shape: Vec<i64>,
    values: Option<Vec<f64>>,
    /// An initializer (a weight), not an activation.
    weight: bool,
}

/// The most values a constant keeps: shape-sized constants are folded, anything larger is
/// a weight (and a folded value that grew past it is dropped, so that a small file of
/// chained `Concat`s cannot make the count build gigabytes).
const MAX_FOLDED: usize = 64;

/// The highest rank a tensor may have here (ONNX models use at most 6 or so).
const MAX_RANK: usize = 16;

fn tensor_values(t: &TensorProto) -> Option<Vec<f64>> {
    // Element types of the ONNX schema: 1 float, 6 int32, 7 int64.
    let raw = &t.raw_data;
    let v: Vec<f64> = match t.data_type {
        1 if !raw.is_empty() => raw
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        1 => t.float_data.iter().map(|&x| f64::from(x)).collect(),
        7 if !raw.is_empty() => raw
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")) as f64)
            .collect(),
        7 => t.int64_data.iter().map(|&x| x as f64).collect(),
        6 if !raw.is_empty() => raw
            .chunks_exact(4)
            .map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        6 => t.int32_data.iter().map(|&x| f64::from(x)).collect(),
        _ => return None,
    };
    // Values stored elsewhere (external data) or not matching the dims are not known here.
    (v.len() <= MAX_FOLDED && v.len() as i64 == elements(&t.dims)).then_some(v)
}

/// The values given to symbolic dimensions by name (`--dim seq=128`).
pub type Dims = HashMap<String, i64>;

/// A declared shape, a symbolic dimension as `dims` gives it, else 1; `None` where a
/// dimension is 0 or negative (no shape a count can use), or the rank is beyond
/// [`MAX_RANK`].
fn value_shape(v: &ValueInfoProto, dims: &Dims) -> Option<Vec<i64>> {
    let shape = v.r#type.as_ref()?.tensor_type.as_ref()?.shape.as_ref()?;
    if shape.dim.len() > MAX_RANK {
        return None;
    }
    shape
        .dim
        .iter()
        .map(|d| match d.dim_value {
            Some(x) if x > 0 => Some(x),
            Some(_) => None,
            None => Some(
                d.dim_param
                    .as_ref()
                    .and_then(|p| dims.get(p))
                    .copied()
                    .unwrap_or(1),
            ),
        })
        .collect()
}

/// The name of dimension `i` of `v`'s declared shape where it is symbolic and `dims`
/// gives it no value (`?` where it has no name, or is absent).
fn unset(v: &ValueInfoProto, i: usize, dims: &Dims) -> Option<String> {
    let dim = v
        .r#type
        .as_ref()
        .and_then(|t| t.tensor_type.as_ref())
        .and_then(|t| t.shape.as_ref())
        .and_then(|s| s.dim.get(i));
    match dim {
        Some(d) if d.dim_value.is_some() => None,
        Some(Dimension {
            dim_param: Some(p), ..
        }) if !p.is_empty() => (!dims.contains_key(p)).then(|| p.clone()),
        _ => Some("?".into()),
    }
}

/// ONNX's `TensorProto.DataType` codes of the 16-bit floats.
const FLOAT16: i32 = 10;
const BFLOAT16: i32 = 16;

fn elements(s: &[i64]) -> i64 {
    s.iter().fold(1i64, |a, &d| a.saturating_mul(d.max(0)))
}

fn per_sample(s: &[i64]) -> Result<Shape, String> {
    match s {
        [1, rest @ ..] if !rest.is_empty() => Ok(rest.iter().map(|&d| d.max(1) as u64).collect()),
        _ => Err(format!("expected a [batch, ...] activation, got {s:?}")),
    }
}

fn broadcast(a: &[i64], b: &[i64]) -> Vec<i64> {
    let n = a.len().max(b.len());
    let at = |s: &[i64], i: usize| {
        let pad = n - s.len();
        if i < pad {
            1
        } else {
            s[i - pad]
        }
    };
    (0..n).map(|i| at(a, i).max(at(b, i))).collect()
}

fn norm_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    if (0..rank.max(1) as i64).contains(&a) {
        Ok(a as usize)
    } else {
        Err(format!("axis {axis} is out of range for rank {rank}"))
    }
}

struct Graph<'a> {
    tensors: HashMap<String, Tensor>,
    value_info: HashMap<&'a str, Vec<i64>>,
    model: Model,
    skipped: Vec<String>,
}

impl Graph<'_> {
    fn get(&self, name: &str) -> Option<Tensor> {
        self.tensors.get(name).cloned().or_else(|| {
            self.value_info.get(name).map(|s| Tensor {
                shape: s.clone(),
                ..Tensor::default()
            })
        })
    }

    fn set(&mut self, name: &str, shape: Vec<i64>, values: Option<Vec<f64>>) {
        let values = values.filter(|v| v.len() <= MAX_FOLDED);
        self.tensors.insert(
            name.into(),
            Tensor {
                shape,
                values,
                weight: false,
            },
        );
    }

    /// Counts `op` on the per-sample shape of the activation `input`; returns the full
    /// output shape.
    fn layer(&mut self, name: &str, op: Op, input: &[i64]) -> Result<Vec<i64>, String> {
        let out = self
            .model
            .push(name, op, Some(per_sample(input)?))
            .map_err(|e| e.to_string())?;
        Ok(std::iter::once(1)
            .chain(out.iter().map(|&d| d as i64))
            .collect())
    }
}

fn attr<'a>(n: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    n.attribute.iter().find(|a| a.name == name)
}

fn ints(n: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(n, name).map(|a| a.ints.clone())
}

fn int(n: &NodeProto, name: &str, default: i64) -> i64 {
    attr(n, name).map_or(default, |a| a.i)
}

fn pair(v: Option<Vec<i64>>, default: u64) -> [u64; 2] {
    match v.as_deref() {
        Some([a, b, ..]) => [*a as u64, *b as u64],
        _ => [default, default],
    }
}

fn string<'a>(n: &'a NodeProto, name: &str) -> &'a [u8] {
    attr(n, name).map_or(&[], |a| a.s.as_slice())
}

/// The symmetric padding of a 2-D window over the `[.., H, W]` input `shape`, from `pads`
/// or `auto_pad` (`SAME_*` pads so that the output is the input over the stride, rounded
/// up); padding that differs between the two sides of an axis is not counted.
fn padding(
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

/// The batch dimension of graph input `name`: the first, or the second where it feeds an
/// LSTM of the default layout, `[steps, batch, features]`.
fn batch_axis(graph: &GraphProto, name: &str) -> usize {
    usize::from(graph.node.iter().any(|n| {
        n.op_type == "LSTM"
            && int(n, "layout", 0) == 0
            && n.input.first().is_some_and(|i| i == name)
    }))
}

/// Counts every node of `graph`, its symbolic dimensions as `dims` gives them.
fn walk(graph: &GraphProto, dims: &Dims) -> Onnx {
    let mut g = Graph {
        tensors: HashMap::new(),
        value_info: graph
            .value_info
            .iter()
            .chain(&graph.output)
            .filter_map(|v| Some((v.name.as_str(), value_shape(v, dims)?)))
            .collect(),
        model: Model::new(
            if graph.name.is_empty() {
                "onnx"
            } else {
                &graph.name
            },
            Vec::new(),
        ),
        skipped: Vec::new(),
    };
    if graph
        .initializer
        .iter()
        .any(|t| [FLOAT16, BFLOAT16].contains(&t.data_type))
    {
        log::warn!(
            "the file's weights are stored as 16-bit floats: --precision fp16 counts them as stored (fp32, the default, counts 4 bytes each)"
        );
    }
    for t in &graph.initializer {
        g.tensors.insert(
            t.name.clone(),
            Tensor {
                shape: t.dims.clone(),
                values: tensor_values(t),
                weight: true,
            },
        );
    }
    for v in &graph.input {
        if g.tensors.contains_key(&v.name) {
            continue;
        }
        if let Some(mut s) = value_shape(v, dims) {
            let batch = batch_axis(graph, &v.name);
            // The batch dimension is 1: the count multiplies by the batch size later.
            if let Some(b) = s.get_mut(batch) {
                if *b != 1 {
                    log::warn!(
                        "{}: a fixed batch of {b} in the file is counted per sample (the batch is --batch)",
                        v.name
                    );
                }
                *b = 1;
            }
            for (i, p) in (0..s.len())
                .filter(|&i| i != batch)
                .filter_map(|i| Some((i, unset(v, i, dims)?)))
            {
                log::warn!(
                    "{}: dimension {i} ({p}) is symbolic and counted as 1{}",
                    v.name,
                    if p == "?" {
                        String::new()
                    } else {
                        format!(" (--dim {p}=N gives it a value)")
                    }
                );
            }
            if g.model.input.is_empty() {
                g.model.input = per_sample(&s).unwrap_or_default();
            }
            g.set(&v.name, s, None);
        }
    }
    for (i, n) in graph.node.iter().enumerate() {
        let name = if n.name.is_empty() {
            format!("{}_{i}", n.op_type)
        } else {
            n.name.clone()
        };
        if let Err(why) = node(&mut g, n, &name) {
            g.skipped.push(format!("{name} ({}): {why}", n.op_type));
        }
    }
    Onnx {
        model: g.model,
        skipped: g.skipped,
    }
}

/// Infers, folds and counts one node.
fn node(g: &mut Graph, n: &NodeProto, name: &str) -> Result<(), String> {
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
            let t = attr(n, "value")
                .and_then(|a| a.t.as_ref())
                .ok_or("no tensor value")?;
            g.set(&out, t.dims.clone(), tensor_values(t));
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
            let axis = norm_axis(int(n, "axis", 1), t.shape.len())?;
            let s = vec![elements(&t.shape[..axis]), elements(&t.shape[axis..])];
            g.set(&out, s, t.values);
        }
        "Expand" => {
            let t = x()?;
            let to = input(g, 1)?
                .values
                .ok_or("the target shape is not a constant")?;
            let to: Vec<i64> = to.iter().map(|&d| d as i64).collect();
            g.set(&out, broadcast(&t.shape, &to), None);
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
                    let len = va.len().max(vb.len());
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
            // The smaller operand a weight broadcast over the activations: a bias.
            let weight = if elements(&a.shape) < elements(&b.shape) {
                &a
            } else {
                &b
            };
            let op = match (kind, other) {
                (Binary::Add | Binary::Sub, Some(elements)) if weight.weight => {
                    Op::Bias { elements }
                }
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
            let cols = cols as u64;
            let op = if b.weight || n.op_type == "Gemm" {
                Op::Linear {
                    out_features: cols,
                    bias: n.input.len() > 2 && !n.input[2].is_empty(),
                }
            } else {
                Op::MatMul { n: cols }
            };
            let s = g.layer(name, op, &a.shape)?;
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
            if t.values.is_none() {
                // A copy: counted on the flattened tensor (the batch may move).
                let e = elements(&t.shape);
                g.layer(name, Op::Transpose { perm: vec![0] }, &[1, e])?;
            }
            g.set(&out, s, t.values);
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

/// An ONNX file that cannot be read or decoded.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct OnnxError {
    /// The file.
    pub path: std::path::PathBuf,
    /// What is wrong.
    pub message: String,
}

/// Decodes and counts an ONNX model held in `bytes` (read from `path`, named in errors).
pub fn parse(bytes: &[u8], path: &Path, dims: &Dims) -> Result<Onnx, OnnxError> {
    use prost::Message;
    let invalid = |message: String| OnnxError {
        path: path.to_path_buf(),
        message,
    };
    let m = ModelProto::decode(bytes).map_err(|e| invalid(format!("not an ONNX model: {e}")))?;
    let graph = m
        .graph
        .ok_or_else(|| invalid("not an ONNX model: no graph".into()))?;
    if graph.node.is_empty() {
        return Err(invalid("not an ONNX model: the graph has no nodes".into()));
    }
    check_dataflow(&graph).map_err(invalid)?;
    let named: Vec<&str> = graph
        .input
        .iter()
        .chain(&graph.value_info)
        .chain(&graph.output)
        .filter_map(|v| v.r#type.as_ref()?.tensor_type.as_ref()?.shape.as_ref())
        .flat_map(|s| s.dim.iter().filter_map(|d| d.dim_param.as_deref()))
        .collect();
    // The batch is --batch: a dimension named for it would count the batch in the shapes.
    let batch_named = graph.input.iter().find_map(|v| {
        let shape = v.r#type.as_ref()?.tensor_type.as_ref()?.shape.as_ref()?;
        let p = shape
            .dim
            .get(batch_axis(&graph, &v.name))?
            .dim_param
            .as_deref()?;
        dims.contains_key(p).then_some((p, v.name.as_str()))
    });
    if let Some((p, input)) = batch_named {
        return Err(invalid(format!(
            "--dim {p}: that is the batch dimension of input {input}; the batch is --batch"
        )));
    }
    if let Some(p) = dims.keys().find(|p| !named.contains(&p.as_str())) {
        return Err(invalid(format!(
            "--dim {p}: the file names no such dimension ({})",
            if named.is_empty() {
                "it names none".to_string()
            } else {
                named.join(", ")
            }
        )));
    }
    Ok(walk(&graph, dims))
}

/// What ONNX requires of a graph and counting relies on: each tensor has one producer (a
/// graph input, an initializer or one node's output), and the nodes come in topological
/// order, every input produced before the node that reads it (so a cycle is refused). An
/// input that nothing produces is left to the count, which lists what it cannot shape.
fn check_dataflow(graph: &GraphProto) -> Result<(), String> {
    let node_name = |i: usize| {
        let n = &graph.node[i];
        if n.name.is_empty() {
            format!("{}_{i}", n.op_type)
        } else {
            n.name.clone()
        }
    };
    let mut producer: HashMap<&str, Option<usize>> = graph
        .input
        .iter()
        .map(|v| v.name.as_str())
        .chain(graph.initializer.iter().map(|t| t.name.as_str()))
        .map(|name| (name, None))
        .collect();
    let later: HashMap<&str, usize> = graph
        .node
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.output.iter().map(move |o| (o.as_str(), i)))
        .collect();
    for (i, n) in graph.node.iter().enumerate() {
        for input in n.input.iter().filter(|s| !s.is_empty()) {
            if let (None, Some(&j)) = (producer.get(input.as_str()), later.get(input.as_str())) {
                return Err(format!(
                    "node {} reads `{input}` before node {} produces it: the nodes are not in topological order (ONNX requires it), or they form a cycle",
                    node_name(i),
                    node_name(j)
                ));
            }
        }
        for output in n.output.iter().filter(|s| !s.is_empty()) {
            if let Some(first) = producer.insert(output, Some(i)) {
                let by = first.map_or("the graph's inputs".to_string(), |f| {
                    format!("node {}", node_name(f))
                });
                return Err(format!(
                    "`{output}` is produced by {by} and again by node {}: each tensor of an ONNX graph has one producer",
                    node_name(i)
                ));
            }
        }
    }
    Ok(())
}

/// Reads and counts the ONNX model at `path`.
pub fn load(path: &Path, dims: &Dims) -> Result<Onnx, OnnxError> {
    let bytes = std::fs::read(path).map_err(|e| OnnxError {
        path: path.to_path_buf(),
        message: format!("cannot read: {e}"),
    })?;
    parse(&bytes, path, dims)
}

#[cfg(test)]
mod tests {
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
}
