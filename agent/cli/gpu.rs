//! `jpower train` (the built-in CNN on the GPU, or the CPU reference, with per-minibatch
//! time, power and energy from telemetry markers) and `jpower kernels` (compile every
//! kernel with NVRTC for the Jetson architectures and check registers and spills with
//! ptxas).

use super::telemetry::{SampleArgs, Session};
use super::{Output, Target};
use crate::board::Board;
use crate::gpu::cuda::Cuda;
use crate::gpu::kernels::{self, CudaSource, JETSON_ARCHS};
use crate::gpu::net::{Backend, Cpu, Trainer};
use crate::gpu::nvml::NvmlMeter;
use crate::gpu::roofline::{Meter, Run};
use crate::ipc::protocol::Kind;
use crate::sim::kernel::LoadState;
use crate::support::clock::monotonic_ns;
use crate::telemetry::energy::{Minibatch, Minibatches};
use crate::telemetry::ring::RingReader;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::json;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Arguments of `jpower train`.
#[derive(Debug, clap::Args)]
pub struct TrainArgs {
    /// Train on the CPU reference instead of the GPU.
    #[arg(long)]
    pub cpu: bool,
    /// Minibatches to train, 1 to 1,000,000.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub steps: u64,
    /// Images per minibatch, 1 to 4096.
    #[arg(long, default_value_t = 32, value_parser = batch)]
    pub batch: usize,
    /// Learning rate (SGD with momentum 0.9), above 0 and at most 10.
    #[arg(long, default_value_t = 0.02, value_parser = learning_rate)]
    pub lr: f32,
    /// Seed of the synthetic task and the initial weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The CUDA device [default: 0]; none is used with --cpu or --sim.
    #[arg(long)]
    pub gpu: Option<usize>,
    /// Write one CSV row per minibatch.
    #[arg(long, value_name = "FILE.csv")]
    pub csv: Option<PathBuf>,
}

/// One trained minibatch.
#[derive(Debug, Serialize)]
struct Step {
    step: u64,
    loss: f32,
    #[serde(flatten)]
    energy: Minibatch<Kind>,
}

/// `jpower train`: on a Jetson (or a `--root` tree, or a simulated board) each minibatch
/// is metered from the telemetry ring; off a Jetson (a data-centre GPU) the run is metered
/// by NVML's energy counter and each minibatch gets the run's mean power.
pub fn train(target: &Target, a: &TrainArgs, out: &Output) -> Result<()> {
    if a.gpu.is_some() && (a.cpu || target.sim.is_some()) {
        return Err(super::usage(
            "--gpu names a CUDA device: none is used with --cpu or --sim",
        ));
    }
    if let Some(path) = &a.csv {
        super::check_outputs([path.as_path()])?;
    }
    super::interrupt::catch()?;
    let host_gpu = target.sim.is_none() && target.root.is_none() && !a.cpu;
    let discovered = target
        .root()
        .and_then(|(root, _)| Ok(Board::discover(root)?));
    let (steps, accuracy, flops, notes) = match discovered {
        Err(e) if host_gpu && super::roofline::is_not_jetson(&e) => train_with_nvml(a, out)?,
        Err(e) => return Err(e),
        Ok(_) => train_on_board(target, a, out)?,
    };
    if let Some(path) = &a.csv {
        let s = crate::support::csv_text::write(
            &[
                "step",
                "loss",
                "duration_s",
                "mean_w",
                "energy_j",
                "samples",
            ],
            steps.iter().map(|st| {
                let e = &st.energy;
                [
                    st.step.to_string(),
                    format!("{:.6}", st.loss),
                    format!("{:.6}", e.duration_s),
                    format!("{:.3}", e.mean_w),
                    format!("{:.6}", e.energy_j),
                    e.samples.to_string(),
                ]
            }),
        );
        std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))?;
    }
    let n = steps.len() as f64;
    let mean = |f: fn(&Step) -> f64| steps.iter().map(f).sum::<f64>() / n;
    let (ms, w, j) = (
        1e3 * mean(|s| s.energy.duration_s),
        mean(|s| s.energy.mean_w),
        mean(|s| s.energy.energy_j),
    );
    let first = steps.first().map_or(0.0, |s| s.loss);
    let last = steps.last().map_or(0.0, |s| s.loss);
    let device = match (a.cpu, &target.sim) {
        (true, _) => "CPU reference",
        (false, Some(_)) => SIMULATED_GPU,
        (false, None) => "CUDA GPU",
    };
    out.print(
        &json!({"device": device, "steps": steps.len(), "batch": a.batch, "first_loss": first,
                "final_loss": last, "held_out_accuracy": accuracy, "flops_per_step": flops,
                "mean_minibatch_s": ms / 1e3, "mean_w": w, "energy_per_minibatch_j": j,
                "minibatches": steps, "notes": notes}),
        || {
            let mut t = format!(
                "trained the built-in CNN on the {device}: {} minibatches of {}\n  loss {first:.3} -> {last:.3}, held-out accuracy {:.1}%\n  per minibatch: {ms:.2} ms, {w:.2} W, {:.3} J ({:.1} MFLOP)\n",
                steps.len(), a.batch, 100.0 * accuracy, j, flops as f64 / 1e6
            );
            for n in &notes {
                let _ = writeln!(t, "note: {n}");
            }
            t
        },
    )
}

/// A `--batch`: 1 to 4096 images (the built-in CNN's buffers grow with it, 7.7 KB an image).
fn batch(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=4096).contains(&n) => Ok(n),
        _ => Err("a whole number from 1 to 4096".into()),
    }
}

/// A `--lr`: finite, above 0 and at most 10 (SGD diverges well before).
fn learning_rate(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(x) if x > 0.0 && x <= 10.0 => Ok(x),
        _ => Err("a number above 0 and at most 10".into()),
    }
}

/// The device `train --sim BOARD` names, without `--cpu`.
const SIMULATED_GPU: &str = "simulated GPU";

/// What a training run returns: its minibatches, the held-out accuracy, the FLOPs of one
/// step and notes.
type Trained = (Vec<Step>, f64, u64, Vec<String>);

/// A Jetson, a `--root` tree or a simulated board: a sampler session meters each
/// minibatch between markers.
fn train_on_board(target: &Target, a: &TrainArgs, out: &Output) -> Result<Trained> {
    let session = Session::start(target, &SampleArgs::fast(), "train")?;
    let l4t = session.controller.board().identity.l4t_major;
    let mut notes = Vec::new();
    let trained = (|| {
        match &session.sim {
            // The CPU reference keeps one core busy.
            Some(sim) if a.cpu => sim.set_one_core_busy()?,
            // A simulated board has no CUDA: its GPU model carries the training load, as
            // `roofline --sim` runs its sweep there, while the CPU reference computes.
            Some(sim) => {
                sim.set_load(LoadState::TRAINING)?;
                notes.push(format!("{SIMULATED_GPU}: the CPU reference computed each step (this host's time) while the simulated board's GPU model drew a training load's power"));
            }
            None => {}
        }
        let ring = RingReader::open(&session.telemetry.path)?;
        let refresh_s = ring.info.slowest_refresh_s();
        let mut marks = Minibatches::default();
        let mut unbounded = 0;
        let mut meter = |step, t0, t1| -> Result<Minibatch<Kind>> {
            marks.begin(Kind::Train, step, (), t0)?;
            let mut m = marks.end(Kind::Train, step, t1, &ring)?.0;
            // Shorter than a refresh, the minibatch is the readings held over it: they may
            // not measure it at all, so no bound holds (`energy` says the same).
            if m.samples < 2 || m.duration_s < refresh_s {
                m.error_bound_j = f64::INFINITY;
                unbounded += 1;
            }
            Ok(m)
        };
        let trained = if a.cpu || session.sim.is_some() {
            let trainer = Trainer::new(Cpu, a.batch, a.seed, a.lr)?;
            run(trainer, &mut meter, a.steps, out.json)
        } else {
            let cuda = Cuda::open(a.gpu.unwrap_or(0), l4t)?;
            let trainer = Trainer::new(cuda.train_backend()?, a.batch, a.seed, a.lr)?;
            run(trainer, &mut meter, a.steps, out.json)
        };
        if unbounded > 0 {
            notes.push(format!(
                "{unbounded} minibatch(es) shorter than the sensors' {:.1} ms refresh: their power is the readings held over them, which may be older than the minibatch, with no error bound (null)",
                refresh_s * 1e3
            ));
        }
        trained
    })();
    if let Some(sim) = &session.sim {
        sim.set_load(LoadState::default())?;
    }
    // Put the board back whether or not the training ran.
    notes.extend(session.finish()?);
    let (steps, accuracy, flops) = trained?;
    Ok((steps, accuracy, flops, notes))
}

/// A GPU on a machine that is not a Jetson: NVML's energy counter over the whole run
/// (it has no per-minibatch resolution), each minibatch given the run's mean power.
fn train_with_nvml(a: &TrainArgs, out: &Output) -> Result<Trained> {
    let cuda = Cuda::open(a.gpu.unwrap_or(0), None)?;
    let mut nvml = NvmlMeter::open(&cuda.pci_bus_id()?)?;
    let trainer = Trainer::new(cuda.train_backend()?, a.batch, a.seed, a.lr)?;
    let mut meter = |step, t0: u64, t1: u64| -> Result<Minibatch<Kind>> {
        Ok(Minibatch {
            kind: Kind::Train,
            id: step,
            duration_s: t1.saturating_sub(t0) as f64 * 1e-9,
            mean_w: 0.0,
            energy_j: 0.0,
            samples: 0,
            error_bound_j: f64::INFINITY,
        })
    };
    nvml.begin()?;
    let (start_ns, (mut steps, accuracy, flops)) =
        (monotonic_ns(), run(trainer, &mut meter, a.steps, out.json)?);
    let window = Run {
        launches: steps.len() as u32,
        best_s: 0.0,
        single_s: 0.0,
        start_ns,
        end_ns: monotonic_ns(),
        clock_hz: None,
    };
    let mean_w = nvml.end(&window)? / window.total_s().max(1e-9);
    for s in &mut steps {
        s.energy.mean_w = mean_w;
        s.energy.energy_j = mean_w * s.energy.duration_s;
    }
    let notes = vec![format!(
        "not a Jetson: power from {}, the run's mean given to every minibatch (its error bound is unknown: null)",
        nvml.name()
    )];
    Ok((steps, accuracy, flops, notes))
}

/// Trains with `trainer`, metering each minibatch (its number, start and end on the
/// telemetry clock) with `meter`; returns the minibatches, the held-out accuracy and the
/// FLOPs of one step.
fn run<B: Backend>(
    mut trainer: Trainer<B>,
    meter: &mut dyn FnMut(u64, u64, u64) -> Result<Minibatch<Kind>>,
    steps: u64,
    quiet: bool,
) -> Result<(Vec<Step>, f64, u64)> {
    let bar = super::progress(
        Some(steps),
        "{bar:40} {pos}/{len} minibatches, ETA {eta} {msg}",
        quiet,
    )?;
    let mut out = Vec::with_capacity(steps as usize);
    for step in 0..steps {
        super::interrupt::check()?;
        let t0 = monotonic_ns();
        let loss = trainer.step()?;
        let energy = meter(step, t0, monotonic_ns())?;
        bar.set_message(format!("loss {loss:.3}, {:.2} W", energy.mean_w));
        bar.inc(1);
        out.push(Step { step, loss, energy });
    }
    bar.finish_and_clear();
    let accuracy = trainer.held_out_accuracy(4)?;
    Ok((out, accuracy, trainer.net.flops_per_step()))
}

/// Arguments of `jpower kernels`.
#[derive(Debug, clap::Args)]
pub struct KernelsArgs {
    /// Compute capabilities to compile for, comma-separated [default: 53,72,87].
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = JETSON_ARCHS,
        hide_default_value = true
    )]
    pub arch: Vec<u32>,
    /// The ptxas to assemble with [default: `ptxas` on PATH; without one, compile only].
    #[arg(long, value_name = "PATH")]
    pub ptxas: Option<PathBuf>,
    /// Write each PTX as DIR/<file>.compute_<cc>.ptx.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// `jpower kernels`: fails on a compile or assembly error, on any register spill, where
/// nothing could be compiled, and where ptxas reports no kernel of a file.
pub fn kernels(a: &KernelsArgs, out: &Output) -> Result<()> {
    let ptxas = a.ptxas.clone().or_else(|| find_on_path("ptxas"));
    let (mut compiled, mut rows) = (Vec::new(), Vec::new());
    let mut text = String::new();
    let mut spills = Vec::new();
    let supported = kernels::nvrtc_archs()?;
    let mut skipped = Vec::new();
    for &cc in &a.arch {
        if !supported.contains(&cc) {
            let _ = writeln!(
                text,
                "skipped compute_{cc}: this NVRTC ({}) cannot compile for it",
                crate::gpu::versions()
            );
            skipped.push(cc);
        }
    }
    anyhow::ensure!(
        skipped.len() < a.arch.len(),
        "nothing compiled: this NVRTC ({}) compiles for none of compute_{}",
        crate::gpu::versions(),
        a.arch
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", compute_")
    );
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for source in CudaSource::ALL {
        for &cc in a.arch.iter().filter(|cc| !skipped.contains(cc)) {
            let ptx = kernels::compile(source, cc)?;
            let version = ptx
                .lines()
                .find_map(|l| l.strip_prefix(".version "))
                .unwrap_or("?")
                .to_string();
            if let Some(dir) = &a.out {
                let path = dir.join(format!("{}.compute_{cc}.ptx", source.name()));
                std::fs::write(&path, &ptx)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            let _ = writeln!(
                text,
                "{}.cu compute_{cc}: PTX {version}, {} bytes",
                source.name(),
                ptx.len()
            );
            compiled.push(json!({"file": source.name(), "arch": cc, "ptx_version": version, "ptx_bytes": ptx.len()}));
            let Some(ptxas) = &ptxas else { continue };
            let assembled = kernels::assemble(ptxas, &ptx, cc)?;
            anyhow::ensure!(
                !assembled.is_empty(),
                "{} reported no kernel of {}.cu for sm_{cc}: is it ptxas?",
                ptxas.display(),
                source.name()
            );
            for r in assembled {
                let _ = writeln!(
                    text,
                    "  sm_{cc} {:<18} {:>3} registers, {} B stack, {} B spill stores, {} B spill loads",
                    r.kernel, r.registers, r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes
                );
                if r.spill_store_bytes + r.spill_load_bytes > 0 {
                    spills.push(format!("{} on sm_{cc}", r.kernel));
                }
                rows.push(json!({"file": source.name(), "arch": cc, "ptx_version": version, "resources": r}));
            }
        }
    }
    if ptxas.is_none() {
        let _ = writeln!(
            text,
            "no ptxas found: compiled only (give --ptxas PATH to check registers and spills)"
        );
    }
    // A spill is an error: --json prints the error's one object, the text the table first.
    if spills.is_empty() || !out.json {
        out.print(
            &json!({"assembled": ptxas.is_some(), "compiled": compiled, "kernels": rows, "spills": spills, "skipped_archs": skipped}),
            || text,
        )?;
    }
    if !spills.is_empty() {
        bail!("register spills: {}", spills.join(", "));
    }
    Ok(())
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
