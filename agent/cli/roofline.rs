//! `jpower roofline`: time and energy rooflines per power mode.
//!
//! On a Jetson (or a `--root` tree, or a simulated board): a sampler session meters the
//! INA3221 rails at 1 kHz; for each mode the board is switched through the controller with
//! the measurement lock, left to settle, swept, and fitted; everything is put back at the
//! end (and by the next jpower command if this one dies). On a machine that is not a
//! Jetson (a data-centre GPU) the sweep runs at the GPU's own clocks with NVML's energy
//! counter. A simulated board runs the sweep on its GPU model, and every output says so.

use super::telemetry::{SampleArgs, Session};
use super::{Output, Target};
use crate::board::{Board, BoardError};
use crate::control::lock;
use crate::control::mode::{Mode, ModeSpace};
use crate::gpu::cuda::Cuda;
use crate::gpu::cuda::LoadPath;
use crate::gpu::nvml::{same_bus_id, Agreement, NvmlMeter};
use crate::gpu::peaks::{self, Peaks};
use crate::gpu::plot;
use crate::gpu::roofline::{
    self, fit_energy, fit_time, Device, EnergyRoofline, Kernel, Measured, Meter, RingMeter,
    TimeRoofline,
};
use crate::sim::gpu::SimGpu;
use crate::telemetry::ring::RingReader;
use anyhow::{Context, Result};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `jpower roofline`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Measure these presets of the board's nvpmodel file (name or id; repeatable)
    /// [default: every preset].
    #[arg(long = "preset", value_name = "PRESET")]
    pub presets: Vec<String>,
    /// Measure N pinned modes instead: all cores at the top CPU clock, (GPU, EMC) pairs
    /// spread evenly over the board's grid.
    #[arg(allow_negative_numbers = true, long, value_name = "N", conflicts_with = "presets", value_parser = super::bounds::count)]
    pub sample: Option<usize>,
    /// Elements per buffer (4-byte floats; three buffers), far larger than L2.
    #[arg(long, default_value_t = 1 << 26,
          value_parser = clap::value_parser!(u64).range(1024..=1 << 32))]
    pub elements: u64,
    /// The sweep's largest inner loop count (FP32 intensity 2 x this FLOP/byte).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(2..=1 << 20))]
    pub max_iters: u32,
    /// Seconds each point runs (NVML's counter wants 1 s or more).
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0, value_parser = super::bounds::seconds)]
    pub point_seconds: f64,
    /// Seconds to wait after each switch for the clocks to settle.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0, value_parser = super::bounds::seconds_or_zero)]
    pub settle: f64,
    /// Leave CPU idle states, GPU rail gating and the fan as they are.
    #[arg(long)]
    pub no_lock: bool,
    /// The CUDA device [default: 0]; none is used with --sim.
    #[arg(long)]
    pub gpu: Option<usize>,
    /// Off a Jetson: also run `copy` for this many seconds and check NVML's energy
    /// counter against its power readings (the first 2 s dropped).
    #[arg(allow_negative_numbers = true, long, value_name = "SECONDS", value_parser = super::bounds::seconds)]
    pub nvml_check: Option<f64>,
    /// Write every point as CSV.
    #[arg(long, value_name = "FILE.csv")]
    pub csv: Option<PathBuf>,
    /// Write one CSV row per mode (the fits).
    #[arg(long, value_name = "FILE.csv")]
    pub modes_csv: Option<PathBuf>,
    /// Write the plot.
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<PathBuf>,
}

/// One measured mode.
#[derive(Debug, Serialize)]
struct ModeResult {
    mode: String,
    gpu_hz: Option<f64>,
    emc_hz: Option<f64>,
    time: TimeRoofline,
    energy: EnergyRoofline,
    /// The best FP32 point over cores x 2 x the clock it ran at (the mean of the reads
    /// while it ran); copy and triad over the vendor DRAM peak at this EMC clock.
    f32_fraction_of_peak: Option<f64>,
    copy_fraction_of_dram_peak: Option<f64>,
    triad_fraction_of_dram_peak: Option<f64>,
    /// The FP16 peak over the FP32 peak (about 2 where `half2` runs at full rate).
    f16_over_f32: Option<f64>,
    /// The FP32 point with the most iterations over the one with half as many, in time
    /// (about 2 when nothing was folded away and both are compute-bound).
    f32_doubling: Option<f64>,
    points: Vec<Measured>,
}

/// `jpower roofline`.
pub fn run(target: &Target, a: &Args, out: &Output) -> Result<()> {
    super::check_outputs(
        [&a.csv, &a.modes_csv, &a.svg]
            .into_iter()
            .flatten()
            .map(|p| p.as_path()),
    )?;
    if a.gpu.is_some() && target.sim.is_some() {
        return Err(super::usage(
            "--gpu names a CUDA device: a simulated board's GPU is its model",
        ));
    }
    super::interrupt::catch()?;
    let points = roofline::sweep(a.elements - a.elements % 4, a.max_iters);
    let discovered = target
        .root()
        .and_then(|(root, _)| Ok(Board::discover(root)?));
    let host_gpu = target.sim.is_none() && target.root.is_none();
    let m = match discovered {
        Err(e) if host_gpu && is_not_jetson(&e) => discrete(a, &points, out.json)?,
        Err(e) => return Err(e),
        Ok(_) if a.nvml_check.is_some() => return Err(super::usage(
            "--nvml-check is for GPUs metered by NVML; a Jetson is metered by its INA3221 rails",
        )),
        Ok(_) => jetson(target, a, &points, out.json)?,
    };
    let title = format!(
        "{}{}",
        m.device,
        if m.simulated { " (SIMULATED)" } else { "" }
    );
    if let Some(path) = &a.csv {
        write(path, points_csv(&m.modes, m.simulated))?;
    }
    if let Some(path) = &a.modes_csv {
        write(path, modes_csv(&m.modes, m.simulated))?;
    }
    if let Some(path) = &a.svg {
        let series: Vec<plot::Series> = m
            .modes
            .iter()
            .map(|r| plot::Series {
                name: &r.mode,
                points: &r.points,
                time: &r.time,
                energy: &r.energy,
            })
            .collect();
        write(path, plot::svg(&title, &series)?)?;
    }
    out.print(&serde_json::to_value(&m)?, || text(&title, &m))
}

/// The rooflines of `presets` (or `sample` pinned modes) of the target board, measured as
/// `jpower roofline --preset ... --point-seconds S --settle S` does, as its `--json` output.
pub(super) fn measure_json(
    target: &Target,
    presets: Vec<String>,
    sample: Option<usize>,
    point_seconds: f64,
) -> Result<serde_json::Value> {
    super::interrupt::catch()?;
    let a = Args {
        presets,
        sample,
        elements: 1 << 26,
        max_iters: 256,
        point_seconds,
        settle: point_seconds,
        no_lock: false,
        gpu: None,
        nvml_check: None,
        csv: None,
        modes_csv: None,
        svg: None,
    };
    let points = roofline::sweep(a.elements, a.max_iters);
    Ok(serde_json::to_value(jetson(target, &a, &points, true)?)?)
}

/// Everything one run measured (the `--json` output).
#[derive(Debug, Serialize)]
struct Measurement {
    /// What ran the sweep, whether it was a model, and what metered it.
    device: String,
    simulated: bool,
    power: String,
    /// What the measurement lock held.
    lock: Vec<String>,
    /// A CUDA GPU's versions, load paths and meter identity (absent on a simulated board).
    gpu: Option<GpuInfo>,
    modes: Vec<ModeResult>,
    notes: Vec<String>,
}

/// Whether board discovery failed because this machine is not a Jetson.
pub(super) fn is_not_jetson(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<BoardError>(),
        Some(BoardError::NotJetson { .. })
    )
}

fn write(path: &PathBuf, body: String) -> Result<()> {
    std::fs::write(path, body).with_context(|| format!("writing {}", path.display()))
}

/// A GPU on a machine that is not a Jetson: its own clocks (NVML's SM clock read while
/// each point runs), NVML energy.
fn discrete(a: &Args, points: &[roofline::Point], quiet: bool) -> Result<Measurement> {
    let mut gpu = Cuda::open(a.gpu.unwrap_or(0), None)?;
    let mut meter = NvmlMeter::open(&gpu.pci_bus_id()?)?;
    gpu.watch_clock(meter.sm_clock());
    let name = gpu.name();
    let peaks = peaks::discrete(&name, gpu.sm_count()?, gpu.compute_capability());
    let sweep = Sweep {
        points,
        seconds: a.point_seconds,
        quiet,
    };
    let r = measure_mode("as is".into(), &mut gpu, &mut meter, &sweep, peaks, None)?;
    let mut notes = vec!["not a Jetson: the GPU ran at its own clocks; power from NVML".into()];
    if peaks.is_none() {
        notes.push(format!(
            "no peak table entry for {name}: fractions of peak not reported"
        ));
    }
    let nvml_check = match a.nvml_check {
        Some(seconds) => {
            let copy = points
                .iter()
                .find(|p| p.kernel == Kernel::Copy)
                .context("the sweep has no copy point")?;
            Some(meter.agreement(seconds, 2.0, |s| {
                gpu.prepare(copy)?;
                gpu.run(copy, s).map(|_| ())
            })?)
        }
        None => None,
    };
    Ok(Measurement {
        device: name,
        simulated: false,
        power: meter.name(),
        lock: Vec::new(),
        gpu: Some(gpu_info(&gpu, Some(&meter), nvml_check)?),
        modes: vec![r],
        notes,
    })
}

fn gpu_info(
    cuda: &Cuda,
    nvml: Option<&NvmlMeter>,
    nvml_check: Option<Agreement>,
) -> Result<GpuInfo> {
    let cuda_pci_bus_id = cuda.pci_bus_id()?;
    Ok(GpuInfo {
        versions: crate::gpu::versions(),
        compute_capability: cuda.compute_capability(),
        modules: cuda
            .load_paths()
            .into_iter()
            .map(|(file, path)| ModuleLoad { file, path })
            .collect(),
        nvml_pci_bus_id: nvml.map(|m| m.bus_id.clone()),
        nvml_matches_cuda: nvml.map(|m| same_bus_id(&cuda_pci_bus_id, &m.bus_id)),
        cuda_pci_bus_id,
        nvml_check,
    })
}

/// What loaded the kernels on a CUDA GPU, and which GPU NVML metered.
#[derive(Debug, Serialize)]
struct GpuInfo {
    versions: crate::gpu::Versions,
    compute_capability: u32,
    modules: Vec<ModuleLoad>,
    cuda_pci_bus_id: String,
    nvml_pci_bus_id: Option<String>,
    nvml_matches_cuda: Option<bool>,
    nvml_check: Option<Agreement>,
}

/// How one kernel module was loaded.
#[derive(Debug, Serialize)]
struct ModuleLoad {
    file: &'static str,
    path: LoadPath,
}

/// A Jetson, a `--root` tree or a simulated board: modes switched, rails metered.
fn jetson(
    target: &Target,
    a: &Args,
    points: &[roofline::Point],
    quiet: bool,
) -> Result<Measurement> {
    // A simulated board's GPU meters itself from its rails' model: its sensors are left
    // as they are and sampled at the sampler's default rate.
    let sample = match target.sim {
        Some(_) => SampleArgs {
            averaging: "keep".into(),
            rate: None,
            ..SampleArgs::fast()
        },
        None => SampleArgs::fast(),
    };
    let mut session = Session::start(target, &sample, "roofline")?;
    let measured = measure_board(&mut session, target, a, points, quiet);
    // Put the board back whether or not every mode was measured.
    let notes = session.finish()?;
    let mut m = measured?;
    m.notes.extend(notes);
    Ok(m)
}

/// Every mode of a started session, switched and swept.
fn measure_board(
    session: &mut Session,
    target: &Target,
    a: &Args,
    points: &[roofline::Point],
    quiet: bool,
) -> Result<Measurement> {
    let board = session.controller.board();
    let peaks = peaks::jetson(board.identity.module.as_deref(), board.identity.soc);
    let modes = modes(target, board, a)?;
    // A simulated board's GPU runs in simulated time and meters itself; a GPU is metered
    // by the rails in the ring over the launches' real time.
    let (mut device, mut meter, gpu): (Box<dyn Device>, Box<dyn Meter>, _) = match &session.sim {
        Some(sim) => {
            let gpu = SimGpu::new(sim.clone(), board.totals.module.clone());
            let meter = gpu.meter();
            (Box::new(gpu), Box::new(meter), None)
        }
        None => {
            let mut cuda = Cuda::open(a.gpu.unwrap_or(0), board.identity.l4t_major)?;
            if let Some(g) = &board.gpu {
                let cur = g.cur.try_clone()?;
                cuda.watch_clock(Box::new(move || cur.read_u64().ok().map(|hz| hz as f64)));
            }
            let info = gpu_info(&cuda, None, None)?;
            let ring = RingMeter::new(RingReader::open(&session.telemetry.path)?);
            (Box::new(cuda), Box::new(ring), Some(info))
        }
    };
    let (lock_notes, _idle) = if a.no_lock {
        (Vec::new(), None)
    } else {
        let mut notes = lock::describe(board);
        let idle = match lock::hold_idle(board) {
            Ok(h) => {
                notes.push("CPU idle states: PM QoS latency 0 (/dev/cpu_dma_latency)".into());
                Some(h)
            }
            Err(e) => {
                notes.push(format!("CPU idle states left as they are: {e}"));
                None
            }
        };
        (notes, idle)
    };
    let modes = modes
        .into_iter()
        .map(|(name, mode)| {
            let current = session.controller.current().clone();
            let mut values = crate::control::plan::target(board_of(session), &mode, &current)?;
            if !a.no_lock {
                values = lock::target(board_of(session), &values);
            }
            session
                .change(&values)
                .with_context(|| format!("switching to {name}"))?;
            // A simulated board's clocks reach their rates within its knobs' settle times
            // and it has no caches or temperature to settle; a board's take `--settle`.
            let settle = if device.simulated() {
                crate::sim::settle::SwitchTimes::DEFAULT.clocks_ms() / 1e3
            } else {
                a.settle
            };
            std::thread::sleep(Duration::from_secs_f64(settle));
            let emc_hz = emc_hz(board_of(session));
            let peaks = Some(peaks);
            let sweep = Sweep {
                points,
                seconds: a.point_seconds,
                quiet,
            };
            measure_mode(name, device.as_mut(), meter.as_mut(), &sweep, peaks, emc_hz)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Measurement {
        device: device.name(),
        simulated: device.simulated(),
        power: meter.name(),
        lock: lock_notes,
        gpu,
        modes,
        notes: Vec::new(),
    })
}

fn board_of(session: &Session) -> &Board {
    session.controller.board()
}

/// The modes to measure: `--sample N`, `--preset`s, else every preset (or the board as
/// it is, without an nvpmodel file).
fn modes(target: &Target, board: &Board, a: &Args) -> Result<Vec<(String, Mode)>> {
    if let Some(n) = a.sample {
        let space = ModeSpace::of(board);
        let grid: Vec<(u64, u64)> = space
            .gpu_hz
            .iter()
            .flat_map(|&g| space.emc_hz.iter().map(move |&e| (g, e)))
            .collect();
        anyhow::ensure!(
            !grid.is_empty(),
            "--sample: the board lets jpower set no (GPU, EMC) pair"
        );
        if n > grid.len() {
            log::warn!(
                "--sample {n}: the board has {} (GPU, EMC) pairs, each measured once",
                grid.len()
            );
        }
        let top = space
            .get(space.len().saturating_sub(1))
            .context("empty mode space")?;
        let picks = n.min(grid.len());
        return Ok((0..picks)
            .map(|i| {
                let (g, e) = grid[if picks == 1 {
                    grid.len() - 1
                } else {
                    i * (grid.len() - 1) / (picks - 1)
                }];
                let pinned = crate::control::mode::PinnedMode {
                    gpu_hz: g,
                    emc_hz: e,
                    ..top
                };
                (
                    // Whole MHz cut 114.75 MHz to 114 (a review).
                    format!(
                        "GPU {}, EMC {}",
                        crate::support::units::Freq(g),
                        crate::support::units::Freq(e)
                    ),
                    pinned.to_mode(board),
                )
            })
            .collect());
    }
    let Some(presets) = target.presets(board)? else {
        return Ok(vec![("as is".into(), Mode::default())]);
    };
    // Every preset by default, each as `find` gives it (one that sets an unusable knob is
    // refused, not measured without it; the diff's review).
    let wanted: Vec<String> = match a.presets.is_empty() {
        true => presets.presets.iter().map(|p| p.id.to_string()).collect(),
        false => a.presets.clone(),
    };
    wanted
        .iter()
        .map(|w| {
            let p = presets.find(w)?;
            Ok((p.name.clone(), p.mode.clone()))
        })
        .collect()
}

/// The memory clock: debugfs where readable, else the cap (uncapped: the table's top).
fn emc_hz(board: &Board) -> Option<f64> {
    let emc = board.emc.as_ref()?;
    if let Some(rate) = emc.rate.as_ref().and_then(|r| r.read_u64().ok()) {
        return Some(rate as f64);
    }
    let cap = board.knobs[emc.cap].read().ok()?;
    let top = emc.table_hz.last().copied()?;
    Some(if cap == 0 { top } else { cap.min(top) } as f64)
}

/// The sweep every mode runs: its points, the seconds each runs, and whether the progress
/// bar is hidden (`--json`).
struct Sweep<'a> {
    points: &'a [roofline::Point],
    seconds: f64,
    quiet: bool,
}

fn measure_mode(
    mode: String,
    device: &mut dyn Device,
    meter: &mut dyn Meter,
    sweep: &Sweep,
    peaks: Option<Peaks>,
    emc_hz: Option<f64>,
) -> Result<ModeResult> {
    // Point by point, so the bar moves: each runs `--point-seconds` or more.
    let bar = super::progress(
        Some(sweep.points.len() as u64),
        "{bar:40} {pos}/{len} sweep points of {msg}, ETA {eta}",
        sweep.quiet,
    )?;
    bar.set_message(mode.clone());
    let mut measured = Vec::with_capacity(sweep.points.len());
    for p in sweep.points {
        super::interrupt::check()?;
        measured.extend(roofline::measure(
            device,
            meter,
            std::slice::from_ref(p),
            sweep.seconds,
        )?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let time = fit_time(&measured);
    let energy = fit_energy(&measured);
    let gpu_hz = measured
        .iter()
        .filter_map(|m| m.run.clock_hz)
        .reduce(f64::max);
    let bandwidth = |k: Kernel| {
        measured
            .iter()
            .find(|m| m.point.kernel == k)
            .map(|m| m.bytes_per_s)
    };
    let f32_time = |iters: u32| {
        measured
            .iter()
            .find(|m| m.point.kernel == Kernel::SweepF32 && m.point.iters == iters)
            .map(|m| m.run.best_s)
    };
    let top = measured
        .iter()
        .filter(|m| m.point.kernel == Kernel::SweepF32)
        .map(|m| m.point.iters)
        .max()
        .unwrap_or(0);
    let f32_doubling = f32_time(top)
        .zip(f32_time(top / 2).filter(|_| top >= 2))
        .map(|(t, half)| t / half);
    let fraction = |bw: Option<f64>| peaks.zip(bw).map(|(p, bw)| bw / p.dram(emc_hz));
    Ok(ModeResult {
        mode,
        gpu_hz,
        emc_hz,
        // Each FP32 point against the peak at the clock it ran at; the best of them.
        f32_fraction_of_peak: peaks.and_then(|p| {
            measured
                .iter()
                .filter(|m| m.point.kernel == Kernel::SweepF32)
                .filter_map(|m| Some(m.flops_per_s / p.f32_flops(m.run.clock_hz?)))
                .reduce(f64::max)
        }),
        copy_fraction_of_dram_peak: fraction(bandwidth(Kernel::Copy)),
        triad_fraction_of_dram_peak: fraction(bandwidth(Kernel::Triad)),
        f16_over_f32: (time.peak_f32_flops > 0.0)
            .then(|| time.peak_f16_flops / time.peak_f32_flops),
        f32_doubling,
        time,
        energy,
        points: measured,
    })
}

/// Each sweep point of each mode, one CSV row.
fn points_csv(results: &[ModeResult], simulated: bool) -> String {
    let header = [
        "simulated",
        "mode",
        "kernel",
        "iters",
        "elements",
        "intensity",
        "launches",
        "best_s",
        "single_s",
        "gflops",
        "gbytes_per_s",
        "mean_s",
        "energy_j",
        "power_w",
    ];
    let rows = results.iter().flat_map(|r| {
        r.points.iter().map(move |m| {
            [
                simulated.to_string(),
                r.mode.clone(),
                m.point.kernel.symbol().to_string(),
                m.point.iters.to_string(),
                m.point.elements.to_string(),
                m.intensity.to_string(),
                m.run.launches.to_string(),
                format!("{:.9}", m.run.best_s),
                format!("{:.9}", m.run.single_s),
                format!("{:.3}", m.flops_per_s / 1e9),
                format!("{:.3}", m.bytes_per_s / 1e9),
                format!("{:.9}", m.mean_s),
                format!("{:.6}", m.energy_j),
                format!("{:.3}", m.power_w),
            ]
        })
    });
    crate::support::csv_text::write(&header, rows)
}

/// Each mode's fitted rooflines, one CSV row (an empty field where a value is unknown).
fn modes_csv(results: &[ModeResult], simulated: bool) -> String {
    let header = [
        "simulated",
        "mode",
        "gpu_hz",
        "emc_hz",
        "peak_f32_gflops",
        "peak_f16_gflops",
        "peak_gbytes_per_s",
        "ridge_f32",
        "time_rms_rel",
        "eps_flop_pj",
        "eps_flop_f16_pj",
        "eps_byte_pj",
        "pi0_w",
        "energy_rms_rel",
        "f32_fraction",
        "copy_fraction",
    ];
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.4}"));
    let rows = results.iter().map(|r| {
        [
            simulated.to_string(),
            r.mode.clone(),
            opt(r.gpu_hz),
            opt(r.emc_hz),
            format!("{:.3}", r.time.peak_f32_flops / 1e9),
            format!("{:.3}", r.time.peak_f16_flops / 1e9),
            format!("{:.3}", r.time.peak_bytes_per_s / 1e9),
            format!("{:.3}", r.time.ridge_f32),
            format!("{:.4}", r.time.rms_rel_error),
            format!("{:.4}", r.energy.eps_flop_j * 1e12),
            opt(r.energy.eps_flop_f16_j.map(|e| e * 1e12)),
            format!("{:.4}", r.energy.eps_byte_j * 1e12),
            format!("{:.4}", r.energy.pi0_w),
            format!("{:.4}", r.energy.rms_rel_error),
            opt(r.f32_fraction_of_peak),
            opt(r.copy_fraction_of_dram_peak),
        ]
    });
    crate::support::csv_text::write(&header, rows)
}

fn text(title: &str, m: &Measurement) -> String {
    let mut t = format!("roofline of {title}\npower: {}\n", m.power);
    for l in &m.lock {
        let _ = writeln!(t, "lock: {l}");
    }
    let pct = |v: Option<f64>| v.map_or("-".into(), |x| format!("{:.0}%", 100.0 * x));
    for r in &m.modes {
        let _ = writeln!(
            t,
            "\n== {}: running at GPU {} MHz, EMC {} MHz\n  FP32 {:.3} TFLOP/s ({} of cores x 2 x clock), FP16 {:.3} TFLOP/s\n  DRAM {:.1} GB/s (copy {} of the vendor peak at this EMC), ridge {:.1} FLOP/byte, fit error {:.1}%\n  energy: {:.2} pJ/FLOP (FP16 {}), {:.1} pJ/byte, {:.2} W constant, fit error {:.1}%",
            r.mode,
            r.gpu_hz.map_or("?".into(), |h| format!("{:.1}", h / 1e6)),
            r.emc_hz.map_or("?".into(), |h| format!("{:.0}", h / 1e6)),
            r.time.peak_f32_flops / 1e12,
            pct(r.f32_fraction_of_peak),
            r.time.peak_f16_flops / 1e12,
            r.time.peak_bytes_per_s / 1e9,
            pct(r.copy_fraction_of_dram_peak),
            r.time.ridge_f32,
            100.0 * r.time.rms_rel_error,
            r.energy.eps_flop_j * 1e12,
            r.energy.eps_flop_f16_j.map_or("-".into(), |e| format!("{:.2} pJ", e * 1e12)),
            r.energy.eps_byte_j * 1e12,
            r.energy.pi0_w,
            100.0 * r.energy.rms_rel_error
        );
        for m in &r.points {
            let _ = writeln!(
                t,
                "    {:<10} {:>7.2} FLOP/B {:>10.1} GFLOP/s {:>8.1} GB/s {:>7.2} W",
                m.label,
                m.intensity,
                m.flops_per_s / 1e9,
                m.bytes_per_s / 1e9,
                m.power_w
            );
        }
    }
    for n in &m.notes {
        let _ = writeln!(t, "note: {n}");
    }
    t
}
