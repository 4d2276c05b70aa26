//! `jpower flops`: a model's FLOPs and DRAM bytes layer by layer (Pagoda's analytical
//! model, [`crate::predict::pagoda`]), from the built-in zoo, an ONNX file or a JSON layer
//! list; and `jpower plan-inference`: those counts on every mode's rooflines (a saved
//! `jpower roofline --json`, or measured now on the board), and the mode of least
//! predicted energy within a latency bound (or, with `--calibrate`, the model measured on
//! five modes too: [`super::pagoda_plan`]).

use super::Output;
use super::Target;
use crate::gpu::roofline::Precision;
use crate::predict::pagoda::plan::{Bound, Plan, Rooflines};
use crate::predict::pagoda::{layer_file, onnx, zoo, Model, Report};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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
    /// bert-large, lstm), an ONNX file (by its .onnx name or its content) or a JSON layer list (see the README).
    #[arg(value_name = "MODEL")]
    pub model: String,
    /// Samples per forward pass (1 to 65536).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub batch: u64,
    /// Count a training step (3 x inference, as Pagoda does).
    #[arg(long)]
    pub train: bool,
    /// The element type.
    #[arg(long, value_enum, default_value_t = PrecisionArg::Fp32)]
    pub precision: PrecisionArg,
    /// An ONNX file's symbolic dimension by name (`--dim seq=128`; repeatable); one not
    /// given counts as 1, with a warning. The batch is --batch.
    #[arg(long = "dim", value_name = "NAME=N", value_parser = dim)]
    pub dims: Vec<(String, i64)>,
}

/// A `--dim NAME=N`.
fn dim(s: &str) -> Result<(String, i64), String> {
    match s.split_once('=') {
        Some((name, n)) if !name.trim().is_empty() => match n.trim().parse::<i64>() {
            Ok(n) if (1..=1 << 20).contains(&n) => Ok((name.trim().to_string(), n)),
            _ => Err(format!("{n:?} is no size from 1 to 1048576")),
        },
        _ => Err("NAME=N, as `seq=128`".into()),
    }
}

impl ModelArgs {
    /// The model named, counted, and the ONNX nodes it could not count (each also a
    /// warning on stderr).
    pub fn report(&self) -> Result<(Report, Vec<String>)> {
        let dims: onnx::Dims = self.dims.iter().cloned().collect();
        let (model, skipped) = load(&self.model, &dims)?;
        if !skipped.is_empty() {
            log::warn!(
                "{}: {} nodes not counted (the JSON's `not_counted` lists them too): {}",
                self.model,
                skipped.len(),
                skipped.join("; ")
            );
        }
        let r = model.count(self.batch, self.precision.precision(), self.train);
        Ok((r, skipped))
    }
}

/// Refuses saved rooflines measured on another board than the one named (`--sim`, or
/// `--root` for a real board): a simulated board's file names its board (`simulated
/// orin-agx@r35 GPU`), and a file from a simulated GPU does not plan a real board. With no
/// board named, the file's modes are planned as they are.
fn check_measured_here(target: &Target, r: &Rooflines, path: &Path) -> Result<()> {
    let here = match target.sim.as_deref() {
        Some(name) => Some(
            crate::sim::spec::find(name)
                .with_context(|| format!("unknown simulated board {name:?}"))?
                .id(),
        ),
        None => None,
    };
    let fits = match &here {
        Some(id) => r.simulated && r.device.split_whitespace().any(|w| w == id),
        None => target.root.is_none() || !r.simulated,
    };
    if !fits {
        bail!(
            "{}: rooflines of {}, not of this board ({}): measure them here with `jpower roofline --json`",
            path.display(),
            r.device,
            here.map_or("a real board".into(), |id| format!("simulated {id}"))
        );
    }
    Ok(())
}

/// A zoo name, an ONNX file (named `.onnx`, or not starting as JSON does), else a JSON
/// layer list; with the nodes not counted.
pub fn load(name: &str, dims: &onnx::Dims) -> Result<(Model, Vec<String>)> {
    let onnx_only = |what: &str| {
        anyhow::ensure!(
            dims.is_empty(),
            "--dim names a symbolic dimension of an ONNX file, and {name} is {what}"
        );
        Ok(())
    };
    if let Some(m) = zoo::get(name) {
        onnx_only("a built-in model")?;
        return Ok((m, Vec::new()));
    }
    let path = Path::new(name);
    if !path.exists() {
        bail!(
            "{name}: neither a built-in model ({}) nor a file",
            zoo::NAMES.join(", ")
        );
    }
    let onnx_named = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"));
    if onnx_named || !starts_as_json(path) {
        let o = onnx::load(path, dims)?;
        return Ok((o.model, o.skipped));
    }
    onnx_only("a layer list")?;
    Ok((layer_file::load(path)?, Vec::new()))
}

/// Whether the file at `path` begins (after a UTF-8 BOM and white space) as a JSON object
/// does: a layer list always does, an ONNX file (protobuf) never, whatever its name.
fn starts_as_json(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 64];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    let head = head[..n]
        .strip_prefix(b"\xef\xbb\xbf")
        .unwrap_or(&head[..n]);
    head.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_none_or(|&b| b == b'{')
}

/// `jpower flops`.
pub fn flops(a: &ModelArgs, out: &Output) -> Result<()> {
    let (r, skipped) = a.report()?;
    let mut value = serde_json::to_value(&r)?;
    value["not_counted"] = serde_json::json!(skipped);
    out.print(&value, || {
        let mut t = text(&r);
        for s in &skipped {
            let _ = writeln!(t, "not counted: {s}");
        }
        t
    })
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

/// Arguments of `jpower plan-inference`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The model, batch and precision.
    #[command(flatten)]
    pub model: ModelArgs,
    /// The latency bound, milliseconds per forward pass of the batch.
    #[arg(allow_negative_numbers = true, long, value_name = "MS", conflicts_with = "slowdown", value_parser = super::bounds::positive)]
    pub latency_ms: Option<f64>,
    /// The latency bound as a slowdown against MAXN (0.05: at most 5% slower).
    #[arg(allow_negative_numbers = true, long, value_name = "FRACTION", default_value_t = 0.05, value_parser = super::bounds::slowdown)]
    pub slowdown: f64,
    /// Rooflines saved from `jpower roofline --json` [default: measure them now on the
    /// board, every preset or the --preset/--sample modes].
    #[arg(long, value_name = "FILE", conflicts_with_all = ["presets", "sample"])]
    pub rooflines: Option<PathBuf>,
    /// Measure these presets (name or id; repeatable).
    #[arg(long = "preset", value_name = "PRESET")]
    pub presets: Vec<String>,
    /// Measure N pinned (GPU, EMC) modes spread over the grid (as `jpower roofline --sample`).
    #[arg(allow_negative_numbers = true, long, value_name = "N", conflicts_with = "presets", value_parser = super::bounds::count)]
    pub sample: Option<usize>,
    /// Seconds each roofline point runs, and each switch settles, when measuring.
    #[arg(allow_negative_numbers = true, long, value_name = "S", default_value_t = 1.0, value_parser = super::bounds::seconds,
          conflicts_with = "rooflines")]
    pub point_seconds: f64,
    /// Draw the layers and the model on the rooflines of the planned mode and MAXN.
    #[arg(long, value_name = "FILE.svg", conflicts_with = "calibrate")]
    pub svg: Option<PathBuf>,
    /// Measure the model itself on five modes of the simulated board, interpolate the
    /// rooflines (measured at pinned clocks: --sample, 6 by default) over the clocks, and
    /// plan over the board's whole mode space.
    #[arg(long)]
    pub calibrate: bool,
    /// Measure the calibration and verification runs through the running agent from the
    /// minibatch markers (kind infer) of your inference program, which runs meanwhile:
    /// how --calibrate works on a Jetson.
    #[arg(long, requires = "calibrate")]
    pub markers: bool,
    /// With --markers, how long to wait for your program to end a minibatch, seconds.
    #[arg(allow_negative_numbers = true, long, value_name = "S", default_value_t = 30.0, requires = "markers",
          value_parser = super::bounds::seconds)]
    pub marker_timeout: f64,
    /// Run the planned mode and the top mode and report predicted against measured.
    #[arg(long, requires = "calibrate")]
    pub verify: bool,
    /// Score the calibrated predictions against a recorded profile (columns
    /// cores,cpu_khz,gpu_hz,emc_hz,latency_ms,power_w; any subset of modes).
    #[arg(long, value_name = "FILE.csv", requires = "calibrate")]
    pub truth: Option<PathBuf>,
}

/// `jpower plan-inference`.
pub fn plan_inference(target: &Target, a: &PlanArgs, out: &Output) -> Result<()> {
    let (report, skipped) = a.model.report()?;
    if report.total.flops == 0 && report.total.bytes() == 0 {
        bail!(
            "{}: no layer computes or moves anything, so there is nothing to time ({} nodes not counted)",
            a.model.model,
            skipped.len()
        );
    }
    // What would fail after minutes of measuring is refused before them.
    super::check_outputs(a.svg.as_deref())?;
    if a.markers && a.rooflines.is_none() {
        bail!("--markers measures through the agent, which holds the board, so the rooflines cannot be measured now: measure them first with `jpower roofline --sample 6 --json > FILE` while no agent runs, and pass --rooflines FILE");
    }
    if let Some(path) = &a.truth {
        crate::support::file_error::read_text(path)?;
    }
    if a.calibrate {
        super::pagoda_plan::simulated(target, a.markers)?;
        let min = crate::predict::pagoda::calibrate::MIN_MODES;
        if a.sample.is_some_and(|n| n < min) || (1..min).contains(&a.presets.len()) {
            return Err(super::usage(&format!(
                "--calibrate interpolates over the clocks of at least {min} measured modes: give --sample {min} or more (6 by default)"
            )));
        }
    }
    let (rooflines, source) = match &a.rooflines {
        Some(path) => {
            let r = Rooflines::load(path)?;
            check_measured_here(target, &r, path)?;
            (r, path.display().to_string())
        }
        None => {
            // Interpolating over the clocks needs modes measured at pinned clocks.
            let sample = a
                .sample
                .or((a.calibrate && a.presets.is_empty()).then_some(6));
            let value =
                super::roofline::measure_json(target, a.presets.clone(), sample, a.point_seconds)?;
            let r: Rooflines = serde_json::from_value(value)?;
            r.check().map_err(anyhow::Error::msg)?;
            (r, "measured now".to_string())
        }
    };
    if a.calibrate {
        let flags = super::pagoda_plan::CalibrateFlags {
            not_counted: &skipped,
            latency_ms: a.latency_ms,
            slowdown: a.slowdown,
            verify: a.verify,
            truth: a.truth.as_deref(),
            markers: if a.markers {
                let timeout = std::time::Duration::try_from_secs_f64(a.marker_timeout).ok();
                Some(
                    timeout
                        .filter(|d| !d.is_zero())
                        .context("--marker-timeout must be a positive number of seconds")?,
                )
            } else {
                None
            },
        };
        return super::pagoda_plan::plan(target, &flags, &report, &rooflines, out);
    }
    let bound = match a.latency_ms {
        Some(ms) => Bound::LatencyS(ms / 1e3),
        None => Bound::Slowdown(a.slowdown),
    };
    let plan = Plan::new(&report, &rooflines, bound)?;
    let mut value = plan_json(&report, &rooflines, &source, &plan);
    value["not_counted"] = serde_json::json!(skipped);
    if let Some(path) = &a.svg {
        std::fs::write(
            path,
            crate::predict::pagoda::svg::plan_svg(&report, &rooflines, &plan)?,
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    out.print(&value, || {
        plan_text(&report, &rooflines, &plan) + &partial_note(skipped.len())
    })
}

/// The line a plan's text ends with when the model's count is partial (a review found a
/// plan for a fraction of a graph, its stdout silent about it), or nothing.
pub fn partial_note(not_counted: usize) -> String {
    match not_counted {
        0 => String::new(),
        n => format!(
            "PARTIAL: {n} node{} not counted (listed on stderr, and in the JSON's `not_counted`): the plan is for the counted layers only\n",
            if n == 1 { "" } else { "s" }
        ),
    }
}

/// One mode's summary against the reference.
fn mode_json(plan: &Plan, i: usize) -> serde_json::Value {
    let (m, r) = (&plan.modes[i], plan.reference());
    serde_json::json!({
        "mode": m.mode,
        "latency_ms": m.latency_s * 1e3,
        "energy_j": m.energy_j,
        "power_w": m.power_w,
        "energy_saving": 1.0 - m.energy_j / r.energy_j,
        "latency_change": m.latency_s / r.latency_s - 1.0,
        "within_bound": m.latency_s <= plan.bound_s,
    })
}

fn plan_json(
    report: &Report,
    rooflines: &Rooflines,
    source: &str,
    plan: &Plan,
) -> serde_json::Value {
    let (chosen, reference) = (plan.chosen(), plan.reference());
    let layers: Vec<serde_json::Value> = report
        .layers
        .iter()
        .zip(chosen.layers.iter().zip(&reference.layers))
        .map(|(l, (c, r))| {
            serde_json::json!({
                "name": l.name,
                "op": l.op,
                "flops": l.counts.flops,
                "bytes": l.counts.bytes(),
                "intensity": l.counts.intensity(),
                "chosen": {"time_ms": c.time_s * 1e3, "energy_mj": c.energy_j * 1e3, "memory_bound": c.memory_bound},
                "reference": {"time_ms": r.time_s * 1e3, "energy_mj": r.energy_j * 1e3, "memory_bound": r.memory_bound},
            })
        })
        .collect();
    serde_json::json!({
        "model": report.model,
        "batch": report.batch,
        "precision": report.precision,
        "training": report.training,
        "flops": report.total.flops,
        "bytes": report.total.bytes(),
        "rooflines": {"source": source, "device": rooflines.device, "simulated": rooflines.simulated},
        "reference": mode_json(plan, plan.reference),
        "bound_ms": plan.bound_s * 1e3,
        "chosen": mode_json(plan, plan.feasible[0]),
        "alternatives": plan.feasible.iter().skip(1).take(3).map(|&i| mode_json(plan, i)).collect::<Vec<_>>(),
        "modes": (0..plan.modes.len()).map(|i| mode_json(plan, i)).collect::<Vec<_>>(),
        "layers": layers,
        "notes": [
            "roofline prediction: each layer at max(FLOPs / peak, bytes / bandwidth); launch overheads, per-layer efficiency and CPU dispatch are not modelled",
        ],
    })
}

fn plan_text(report: &Report, rooflines: &Rooflines, plan: &Plan) -> String {
    let (chosen, reference) = (plan.chosen(), plan.reference());
    let mut t = format!(
        "{} at batch {}{}: {}FLOPs, {}B, {:.2} FLOP/byte; rooflines of {}{}\nbound: {:.3} ms\n{:<30} {:>12} {:>12} {:>9} {:>9} {:>9}\n",
        report.model,
        report.batch,
        if report.training { " (a training step: 3 x inference)" } else { "" },
        si(report.total.flops as f64),
        si(report.total.bytes() as f64),
        report.total.intensity(),
        rooflines.device,
        if rooflines.simulated { " (SIMULATED)" } else { "" },
        plan.bound_s * 1e3,
        "mode",
        "latency ms",
        "energy mJ",
        "power W",
        "saving",
        "latency"
    );
    let mut order: Vec<usize> = (0..plan.modes.len()).collect();
    order.sort_by(|&a, &b| plan.modes[a].energy_j.total_cmp(&plan.modes[b].energy_j));
    for i in order {
        let m = &plan.modes[i];
        let mark = if i == plan.feasible[0] {
            " <- plan"
        } else if i == plan.reference {
            " (reference)"
        } else if m.latency_s > plan.bound_s {
            " (too slow)"
        } else {
            ""
        };
        let _ = writeln!(
            t,
            "{:<30} {:>12.3} {:>12.3} {:>9.2} {:>8.1}% {:>+8.1}%{mark}",
            m.mode,
            m.latency_s * 1e3,
            m.energy_j * 1e3,
            m.power_w,
            100.0 * (1.0 - m.energy_j / reference.energy_j),
            100.0 * (m.latency_s / reference.latency_s - 1.0)
        );
    }
    let _ = writeln!(
        t,
        "plan: {} saves {:.1}% energy against {} at {:+.1}% latency (roofline prediction: launch overheads and per-layer efficiency not modelled)",
        chosen.mode,
        100.0 * plan.saving(),
        reference.mode,
        100.0 * (chosen.latency_s / reference.latency_s - 1.0)
    );
    t
}
