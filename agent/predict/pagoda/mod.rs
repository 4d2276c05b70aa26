//! Pagoda (arXiv 2509.20189): an analytical count of a DNN's FLOPs and DRAM bytes, layer
//! by layer, to place it on each power mode's time and energy roofline.
//!
//! - [`op`]: the operators, their output shapes and their counts, with the conventions
//!   (pinned to Pagoda's: FLOPs = 2 x MACs, FP32 4 bytes, compulsory DRAM traffic per layer);
//! - [`zoo`]: the built-in models at Pagoda's input shapes (ResNet-18, ResNet-50,
//!   MobileNetV3-Large, YOLOv8n, BERT-base, BERT-large, LSTM);
//! - [`layer_file`]: a model written as a small JSON layer list;
//! - [`onnx`]: an ONNX model, its shapes inferred and the exporters' shape arithmetic folded;
//! - [`plan`]: the counts on each power mode's time and energy rooflines, and the mode of
//!   least predicted energy within a latency bound;
//! - [`calibrate`]: rooflines interpolated over the clocks, and the model itself measured
//!   on five modes to calibrate what the roofline misses (dispatch, efficiency, CPU power);
//! - [`eval`]: the calibrated plan against the exhaustive optimum of a board's truth;
//! - [`svg`]: the plan drawn on the rooflines of the planned mode and of MAXN.
//!
//! A [`Model`] is a list of layers, each with its per-sample input shape; [`Model::count`]
//! multiplies by the batch size and the precision's bytes. Training is counted as 3 x
//! inference (forward, backward for activations and for weights, and the update folded
//! in), as Pagoda does; INT8 and TensorRT's layer fusion are out of scope.

pub mod calibrate;
pub mod eval;
pub mod layer_file;
pub mod onnx;
pub mod op;
pub mod plan;
pub mod svg;
pub mod zoo;

use crate::gpu::roofline::Precision;
use op::{Counts, Op, Shape};
use serde::Serialize;

/// What a model counted on has wrong.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A layer's operator does not fit its input.
    #[error("layer {index} ({name}): {message}")]
    Layer {
        /// Its position, 0-based.
        index: usize,
        /// Its name.
        name: String,
        /// What does not fit.
        message: String,
    },
    /// No built-in model has this name.
    #[error("no built-in model {0:?}; known: {known}", known = zoo::NAMES.join(", "))]
    Unknown(String),
}

/// One layer: its operator and its per-sample input and output shapes.
#[derive(Debug, Clone, Serialize)]
pub struct Layer {
    /// A unique name (`layer1.0.conv1`).
    pub name: String,
    /// The operator.
    pub op: Op,
    /// The per-sample input shape.
    pub input: Shape,
    /// The per-sample output shape.
    pub output: Shape,
}

/// A model: layers in execution order.
#[derive(Debug, Clone, Serialize)]
pub struct Model {
    /// Its name.
    pub name: String,
    /// The per-sample input shape of the first layer.
    pub input: Shape,
    /// The layers.
    pub layers: Vec<Layer>,
    /// The counts of every layer at the largest batch, 8-byte elements and training: what
    /// keeps every total exact in 64 bits ([`Model::push`] refuses a layer past it).
    #[serde(skip)]
    worst: Counts,
}

impl Model {
    /// An empty model taking `input`.
    pub fn new(name: &str, input: Shape) -> Model {
        Model {
            name: name.into(),
            input,
            layers: Vec::new(),
            worst: Counts::default(),
        }
    }

    /// The output shape of the last layer (the model's input while it has none).
    pub fn last(&self) -> &Shape {
        self.layers.last().map_or(&self.input, |l| &l.output)
    }

    /// Appends `op` applied to `input` (the last layer's output where `None`); returns its
    /// output shape.
    pub fn push(&mut self, name: &str, op: Op, input: Option<Shape>) -> Result<Shape, ModelError> {
        let input = input.unwrap_or_else(|| self.last().clone());
        let refused = |message| ModelError::Layer {
            index: self.layers.len(),
            name: name.into(),
            message,
        };
        let output = op.output(&input).map_err(refused)?;
        let worst = op
            .counts(&input, op::MAX_BATCH, 8)
            .map_err(refused)?
            .times(3);
        self.worst = self.worst.checked_plus(worst).ok_or_else(|| {
            refused(format!(
                "the model's total work would exceed what a 64-bit count holds at a batch of {}",
                op::MAX_BATCH
            ))
        })?;
        self.layers.push(Layer {
            name: name.into(),
            op,
            input,
            output: output.clone(),
        });
        Ok(output)
    }

    /// Every layer's counts and the total at `batch` samples (1 to [`op::MAX_BATCH`]) of
    /// `precision`, forward only or (`training`) as 3 x forward.
    pub fn count(&self, batch: u64, precision: Precision, training: bool) -> Report {
        let bytes = bytes_per_element(precision);
        let factor = if training { 3 } else { 1 };
        let layers: Vec<LayerCounts> = self
            .layers
            .iter()
            .map(|l| LayerCounts {
                name: l.name.clone(),
                op: l.op.name(&l.input),
                input: l.input.clone(),
                output: l.output.clone(),
                counts: l
                    .op
                    .counts(&l.input, batch, bytes)
                    .expect(
                        "shapes were checked when the layer was added, and the batch is bounded",
                    )
                    .times(factor),
            })
            .collect();
        let total = layers
            .iter()
            .fold(Counts::default(), |t, l| t.plus(l.counts));
        Report {
            model: self.name.clone(),
            batch,
            precision,
            training,
            layers,
            total,
        }
    }
}

/// Bytes of one element at `precision`.
pub fn bytes_per_element(precision: Precision) -> u64 {
    match precision {
        Precision::F32 => 4,
        Precision::F16 => 2,
    }
}

/// One layer's counts in a [`Report`].
#[derive(Debug, Clone, Serialize)]
pub struct LayerCounts {
    /// The layer's name.
    pub name: String,
    /// The operator's name (`conv2d`, `depthwise_conv2d`, ...).
    pub op: &'static str,
    /// The per-sample input shape.
    pub input: Shape,
    /// The per-sample output shape.
    pub output: Shape,
    /// What it computes and moves for the whole batch.
    pub counts: Counts,
}

/// A model's counts at a batch size and precision.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The model's name.
    pub model: String,
    /// Samples per forward pass.
    pub batch: u64,
    /// The element type (FP32 4 bytes, FP16 2).
    pub precision: Precision,
    /// Whether the counts are a training step's (3 x inference).
    pub training: bool,
    /// Every layer.
    pub layers: Vec<LayerCounts>,
    /// Their sum.
    pub total: Counts,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Layers each within the per-layer bounds still add up past 64 bits at the largest
    /// batch: the model refuses the layer that would, where its totals once saturated in
    /// silence (a total 73 % low).
    #[test]
    fn a_model_whose_totals_would_overflow_refuses_the_layer_that_does() {
        let mut m = Model::new("big", vec![1 << 18, 4096]);
        let linear = Op::Linear {
            out_features: 4096,
            bias: false,
        };
        let refused = (0..100)
            .find_map(|i| m.push(&format!("fc{i}"), linear.clone(), None).err())
            .expect("a layer is refused");
        let ModelError::Layer { index, message, .. } = &refused else {
            panic!("{refused}")
        };
        assert!(*index > 0 && message.contains("64-bit"), "{refused}");
        let r = m.count(op::MAX_BATCH, Precision::F32, true);
        let flops: u128 = r.layers.iter().map(|l| u128::from(l.counts.flops)).sum();
        assert_eq!(u128::from(r.total.flops), flops, "the total is exact");
    }
}
