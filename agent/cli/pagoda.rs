//! `jpower flops`: a model's FLOPs and DRAM bytes layer by layer (Pagoda's analytical
//! model, [`crate::predict::pagoda`]), from the built-in zoo or a JSON layer list.

use super::Output;
use crate::gpu::roofline::Precision;
use crate::predict::pagoda::{layer_file, zoo, Model, Report};
use anyhow::{bail, Result};
use std::fmt::Write as _;
use std::path::Path;

/// The element type counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionArg {
    /// 4-byte floats.
    Fp32,
    /// 2-byte floats.
    Fp16,
}

impl PrecisionArg {
    /// The roofline's precision.
    pub fn precision(self) -> Precision {
        match self {
            PrecisionArg::Fp32 => Precision::F32,
            PrecisionArg::Fp16 => Precision::F16,
        }
    }
}

/// A model and how to count it.
#[derive(Debug, clap::Args)]
pub struct ModelArgs {
    /// A built-in model (resnet18, resnet50, mobilenetv3-large, yolov8n, bert-base,
    /// bert-large, lstm) or a JSON layer list (see the README).
    #[arg(value_name = "MODEL")]
    pub model: String,
    /// Samples per forward pass.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// Count a training step (3 x inference, as Pagoda does).
    #[arg(long)]
    pub train: bool,
    /// The element type.
    #[arg(long, value_enum, default_value_t = PrecisionArg::Fp32)]
    pub precision: PrecisionArg,
}

impl ModelArgs {
    /// The model named, counted.
    pub fn report(&self) -> Result<Report> {
        Ok(load(&self.model)?.count(self.batch, self.precision.precision(), self.train))
    }
}

/// A zoo name, else a JSON layer list.
pub fn load(name: &str) -> Result<Model> {
    if let Some(m) = zoo::get(name) {
        return Ok(m);
    }
    let path = Path::new(name);
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
    {
        bail!("{name}: ONNX models are not read yet; write the model as a JSON layer list (see the README)");
    }
    if !path.exists() {
        bail!(
            "{name}: neither a built-in model ({}) nor a file",
            zoo::NAMES.join(", ")
        );
    }
    Ok(layer_file::load(path)?)
}

/// `jpower flops`.
pub fn flops(a: &ModelArgs, out: &Output) -> Result<()> {
    let r = a.report()?;
    out.print(&serde_json::to_value(&r)?, || text(&r))
}

/// `1.23 G`, `456.8 M`: a count with an SI prefix.
pub fn si(v: f64) -> String {
    let (div, unit) = match v.abs() {
        x if x >= 1e12 => (1e12, " T"),
        x if x >= 1e9 => (1e9, " G"),
        x if x >= 1e6 => (1e6, " M"),
        x if x >= 1e3 => (1e3, " k"),
        _ => (1.0, " "),
    };
    format!("{:.2}{unit}", v / div)
}

fn text(r: &Report) -> String {
    let mut t = format!(
        "{} at batch {}, {}, {}\n{:<34} {:<17} {:>10} {:>10} {:>9}\n",
        r.model,
        r.batch,
        match r.precision {
            Precision::F32 => "FP32",
            Precision::F16 => "FP16",
        },
        if r.training {
            "training (3 x inference)"
        } else {
            "inference"
        },
        "layer",
        "op",
        "FLOPs",
        "bytes",
        "FLOP/B"
    );
    for l in &r.layers {
        let _ = writeln!(
            t,
            "{:<34} {:<17} {:>10} {:>10} {:>9.2}",
            l.name,
            l.op,
            si(l.counts.flops as f64),
            si(l.counts.bytes() as f64),
            l.counts.intensity()
        );
    }
    let c = &r.total;
    let _ = writeln!(
        t,
        "total: {}FLOPs ({}MACs), {}B DRAM ({}B weights), {:.2} FLOP/byte, {} parameters, {} layers",
        si(c.flops as f64),
        si(c.macs as f64),
        si(c.bytes() as f64),
        si(c.weight_bytes as f64),
        c.intensity(),
        si(c.params as f64).trim_end(),
        r.layers.len()
    );
    t
}
