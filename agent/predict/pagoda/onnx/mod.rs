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
use node::{int, node};
use std::collections::HashMap;
use std::path::Path;

mod node;

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
    /// The attribute's type (`AttributeType`: 2 INT, 7 INTS; 0 in files older than the
    /// field).
    #[prost(int32, tag = "20")]
    r#type: i32,
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

/// The batch dimension of each graph input: the first, or the second where it feeds an
/// LSTM of the default layout, `[steps, batch, features]`. Found once for the graph (a
/// search per input took minutes on a file of many inputs and nodes).
struct BatchAxes<'a>(std::collections::HashSet<&'a str>);

impl<'a> BatchAxes<'a> {
    fn of(graph: &'a GraphProto) -> BatchAxes<'a> {
        BatchAxes(
            graph
                .node
                .iter()
                .filter(|n| n.op_type == "LSTM" && int(n, "layout", 0) == 0)
                .filter_map(|n| n.input.first().map(String::as_str))
                .collect(),
        )
    }

    /// The batch dimension of graph input `name`.
    fn of_input(&self, name: &str) -> usize {
        usize::from(self.0.contains(name))
    }
}

/// Whether graph input `name` is used only where operators take their weights (a
/// convolution's kernel and bias, a Gemm's B and C, a normalisation's parameters, a
/// recurrent cell's weights): then it is a weight without its values, not a batch of
/// activations (a review found a Conv's kernel given as an input counted per "sample" of
/// its 16 output channels).
fn is_weight_input(graph: &GraphProto, name: &str) -> bool {
    let mut uses = graph.node.iter().flat_map(|n| {
        n.input
            .iter()
            .enumerate()
            .filter(move |(_, i)| *i == name)
            .map(move |(at, _)| (n.op_type.as_str(), at))
    });
    let first = uses.next();
    first.is_some()
        && first.into_iter().chain(uses).all(|(op, at)| {
            // The operator's weight inputs (a recurrent cell's initial state and sequence
            // lengths are per-batch activations, not weights: the diff review).
            let weights: &[usize] = match op {
                "Conv" | "ConvTranspose" | "Gemm" => &[1, 2],
                "BatchNormalization" => &[1, 2, 3, 4],
                "LayerNormalization" | "InstanceNormalization" => &[1, 2],
                "LSTM" => &[1, 2, 3, 7],
                "GRU" | "RNN" => &[1, 2, 3],
                "PRelu" => &[1],
                _ => &[],
            };
            weights.contains(&at)
        })
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
    let axes = BatchAxes::of(graph);
    for v in &graph.input {
        if g.tensors.contains_key(&v.name) {
            continue;
        }
        if is_weight_input(graph, &v.name) {
            // Weights given as inputs (exported without their values): whole, no batch.
            if let Some(shape) = value_shape(v, dims) {
                let t = Tensor {
                    shape,
                    values: None,
                    weight: true,
                };
                g.tensors.insert(v.name.clone(), t);
            }
            continue;
        }
        if let Some(mut s) = value_shape(v, dims) {
            let batch = axes.of_input(&v.name);
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
    // An initializer's dimensions are counted on as given: none negative, the rank bounded.
    if let Some(t) = graph
        .initializer
        .iter()
        .find(|t| t.dims.len() > MAX_RANK || t.dims.iter().any(|&d| d < 0))
    {
        return Err(invalid(format!(
            "initializer `{}` has dimensions {:?}: {}",
            t.name,
            &t.dims[..t.dims.len().min(MAX_RANK + 1)],
            if t.dims.len() > MAX_RANK {
                format!("a rank beyond {MAX_RANK}")
            } else {
                "a negative one".to_string()
            }
        )));
    }
    let named: Vec<&str> = graph
        .input
        .iter()
        .chain(&graph.value_info)
        .chain(&graph.output)
        .filter_map(|v| v.r#type.as_ref()?.tensor_type.as_ref()?.shape.as_ref())
        .flat_map(|s| s.dim.iter().filter_map(|d| d.dim_param.as_deref()))
        .collect();
    // The batch is --batch: a dimension named for it would count the batch in the shapes.
    let axes = BatchAxes::of(&graph);
    let batch_named = graph.input.iter().find_map(|v| {
        let shape = v.r#type.as_ref()?.tensor_type.as_ref()?.shape.as_ref()?;
        let p = shape
            .dim
            .get(axes.of_input(&v.name))?
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
mod tests;
