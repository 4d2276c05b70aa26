//! `jpower characterize`: the SIGMETRICS'23 training study as one resumable sweep, either
//! in simulated time on a simulated board (`--sim BOARD`, [`crate::sim::characterize`])
//! or in real time on the board the agent serves (`--live`, or any run without `--sim`:
//! [`crate::predict::characterize::live`], the built-in workload on a real dataset with
//! real loader threads, modes under the sweep's lease, energy from the agent's markers).
//! Each run's epochs are appended to `DIR/runs.csv` as the run finishes; `runs.csv` is
//! rewritten in sweep order with each configuration's CV, and `runs.json` and
//! `report.html` written, at the end or after the last finished run when SIGINT or
//! SIGTERM stops the sweep. `--resume` keeps the finished runs of `runs.csv` and runs the
//! rest. A live sweep's lease ends when it stops, so the agent puts the board back; in
//! simulated time no knob is written.

use super::characterize_report;
use super::{Output, Target};
use crate::gpu::cuda::Cuda;
use crate::gpu::net::Cpu;
use crate::predict::characterize::dataset::{self, Dataset, Shape};
use crate::predict::characterize::live::{LiveSweep, Location};
use crate::predict::characterize::modes::{self, SweepMode};
use crate::predict::characterize::runs::{
    header, mode_front, parse_rows, product, rows_with_cv, summarise, Cache, Config, ModePoint,
    Run, Summary,
};
use crate::sim::characterize::{self, Sweep};
use crate::sim::datapath::Medium;
use crate::sim::kernel::LoadState;
use crate::sim::spec;
use crate::sim::workload::Workload;
use crate::support::csv_text;
use anyhow::{bail, Context, Result};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Arguments of `jpower characterize`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The training workload. Simulated time: lenet5 (MNIST), resnet18 (CIFAR-10) or
    /// mobilenetv3 (GLD-23k). Live: builtin (the built-in CNN on a dataset on disk).
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,
    /// Power modes, comma-separated: preset names (of the board's nvpmodel file, or
    /// --nvpmodel) and pinned modes named by their knobs (8c-2265.6MHz-1377MHz-1065.6MHz:
    /// cores, CPU, GPU, EMC); `presets` for all of the presets; or `sample:N`, N pinned
    /// modes spread over the board's mode space (at most the space's size).
    #[arg(long, value_name = "LIST", default_value = "presets", value_parser = modes_list)]
    pub modes: String,
    /// Minibatch sizes (1 to 4096).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "8,16,32",
        value_parser = clap::value_parser!(u32).range(1..=4096)
    )]
    pub batch: Vec<u32>,
    /// Data-loader workers (0: the training process loads; at most 64).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "0,1,4",
        value_parser = clap::value_parser!(u32).range(0..=64)
    )]
    pub workers: Vec<u32>,
    /// Simulated time: storage media of the dataset: sd, hdd, nvme [default: sd,nvme]. A
    /// live sweep's media are its --data folders.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = medium)]
    pub media: Vec<Medium>,
    /// Live: dataset locations, one per storage medium, as NAME=DIR (or DIR, named by its
    /// last component); the dataset is written under DIR/jpower-dataset once and kept.
    /// Default: DIR of --out, named `out`.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub data: Vec<String>,
    /// Live: samples in the dataset [default: 2048].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub samples: Option<u32>,
    /// Live: bytes per sample file, KiB (a CIFAR-10 PNG is about 2, an ImageNet JPEG
    /// about 110) [default: 64].
    #[arg(long, value_name = "KIB", value_parser = clap::value_parser!(u32).range(2..))]
    pub sample_kib: Option<u32>,
    /// Live: train on the CPU reference instead of CUDA (always so on a simulated board).
    #[arg(long)]
    pub cpu: bool,
    /// Run in real time through the agent, also on a simulated board (`--sim`).
    #[arg(long)]
    pub live: bool,
    /// Live: instead of the built-in workload, this shell command once per epoch, its
    /// placeholders filled (shell-quoted): {bs}, {workers}, {data} (the --data folder),
    /// {mode}, {epoch}, {repeat}, {seed}, {socket}; JPOWER_SOCKET names the agent. It
    /// marks its minibatches to the agent (jpower_client's `loader`), and the sweep takes
    /// their energy, stall and compute from the agent's minibatch totals.
    #[arg(long, value_name = "TEMPLATE")]
    pub run: Option<String>,
    /// Page cache at each epoch's start: dropped (the dataset's pages, every epoch),
    /// warm (the dataset read once before the run).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "warm",
        value_parser = cache
    )]
    pub cache: Vec<Cache>,
    /// Repeats of each configuration (for the coefficient of variation; 1 to 100).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeats: u32,
    /// Epochs per run (1 to 1000).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub epochs: u32,
    /// A small sweep: the board's first two presets, minibatch 16, workers 0 and 1, one
    /// medium, warm cache, 2 repeats of 2 epochs (live, a dataset of 1,024 samples of 16
    /// KiB); it takes none of the options it sets.
    #[arg(long, conflicts_with_all = ["modes", "batch", "workers", "media", "cache", "repeats", "epochs", "samples", "sample_kib"])]
    pub quick: bool,
    /// Where runs.csv, runs.json and report.html go.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Keep the finished runs in DIR/runs.csv and run only the rest.
    #[arg(long)]
    pub resume: bool,
    /// Wall-clock pause after each run, ms (simulated runs take microseconds: pacing lets
    /// one watch a sweep or interrupt it).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub pace_ms: u64,
}

/// The sensor refresh a live sweep asks the agent for, µs: a mode's power reaches the
/// readings within two refreshes of a switch, and an epoch spans many.
const SENSOR_REFRESH_US: u32 = 20_000;

/// `--modes`, its `sample:N` checked ([`modes::sample_count`]).
fn modes_list(s: &str) -> Result<String, String> {
    modes::sample_count(s).map(|_| s.to_string())
}

/// A `--media` name.
fn medium(s: &str) -> Result<Medium, String> {
    Medium::from_name(s.trim()).ok_or_else(|| "one of sd, hdd, nvme".to_string())
}

/// A `--cache` name.
fn cache(s: &str) -> Result<Cache, String> {
    Cache::from_name(s.trim()).ok_or_else(|| "one of dropped, warm".to_string())
}

/// Refuses a list that names a value twice: the sweep would run it twice and count the
/// copies as repeats (a CV from copies, duplicate rows).
/// `shown(i)` is the `i`th value as given.
fn once<T: PartialEq>(flag: &str, list: &[T], shown: impl Fn(usize) -> String) -> Result<()> {
    match (0..list.len()).find(|&i| list[..i].contains(&list[i])) {
        Some(i) => Err(super::usage(&format!(
            "--{flag} names {} twice: give each once (use --repeats for repeats)",
            shown(i)
        ))),
        None => Ok(()),
    }
}

/// The lists every sweep shares, checked.
struct Lists {
    batches: Vec<u32>,
    workers: Vec<u32>,
    caches: Vec<Cache>,
    repeats: u32,
    epochs: u32,
}

fn lists(a: &Args) -> Result<Lists> {
    if a.quick {
        return Ok(Lists {
            batches: vec![16],
            workers: vec![0, 1],
            caches: vec![Cache::Warm],
            repeats: 2,
            epochs: 2,
        });
    }
    once("batch", &a.batch, |i| a.batch[i].to_string())?;
    once("workers", &a.workers, |i| a.workers[i].to_string())?;
    once("cache", &a.cache, |i| a.cache[i].name().to_string())?;
    Ok(Lists {
        batches: a.batch.clone(),
        workers: a.workers.clone(),
        caches: a.cache.clone(),
        repeats: a.repeats,
        epochs: a.epochs,
    })
}

/// The modes `--modes` names: `presets` (the board's, the first two with `--quick`),
/// `sample:N` of `space`, or a list of preset names (any case) and pinned modes of `space`
/// in the rows' form (`8c-2265.6MHz-1377MHz-1065.6MHz`: cores, then the CPU, GPU and EMC
/// clocks), the paper's one-knob comparisons.
fn sweep_modes(
    a: &Args,
    presets: &[String],
    space: &crate::control::mode::ModeSpace,
) -> Result<Vec<SweepMode>> {
    let all = || presets.iter().cloned().map(SweepMode::Preset);
    if a.quick {
        return Ok(all().take(2).collect());
    }
    if let Some(n) = modes::sample_count(&a.modes).map_err(|e| super::usage(&e))? {
        if n > space.len() {
            return Err(super::usage(&format!(
                "--modes sample:{n}: the board has {} modes; name at most that many",
                space.len()
            )));
        }
        return Ok(modes::sample(space, n, 0x5A3F));
    }
    if a.modes == "presets" {
        return Ok(all().collect());
    }
    let mut named: Vec<SweepMode> = Vec::new();
    for given in a.modes.split(',').map(str::trim) {
        let mode = match SweepMode::parse(given) {
            SweepMode::Pinned(m) if space.contains(&m) => SweepMode::Pinned(m),
            SweepMode::Pinned(_) => {
                return Err(super::usage(&format!(
                    "--modes: {given} is not a mode of this board (`jpower modes --all` lists them)"
                )))
            }
            SweepMode::Preset(_) => match presets.iter().find(|p| p.eq_ignore_ascii_case(given)) {
                Some(p) => SweepMode::Preset(p.clone()),
                None => {
                    return Err(super::usage(&format!(
                    "--modes: no preset {given:?} (the board's: {}; or a pinned mode such as {})",
                    presets.join(", "),
                    space
                        .get(0)
                        .map_or_else(String::new, |m| SweepMode::Pinned(m).name())
                )))
                }
            },
        };
        // Two names of one mode would run it twice and count the copies as repeats.
        if named.contains(&mode) {
            return Err(super::usage(&format!(
                "--modes names {} twice ({given:?} is {}): give each mode once",
                mode.name(),
                mode.name()
            )));
        }
        named.push(mode);
    }
    Ok(named)
}

/// The simulated-time sweep the arguments ask for on `board`.
fn simulated(target: &Target, board: &str, a: &Args) -> Result<Sweep> {
    let spec = spec::find(board).with_context(|| format!("unknown simulated board {board:?}"))?;
    let name = a.workload.as_deref().unwrap_or("resnet18");
    let workload = Workload::from_name(name).ok_or_else(|| {
        super::usage(&format!(
            "--workload {name:?}: lenet5, resnet18 or mobilenetv3"
        ))
    })?;
    let l = lists(a)?;
    // The presets of the board's nvpmodel file (or --nvpmodel), each where it runs the
    // simulated board from its knobs now (what it leaves alone stays as it is).
    let (root, _) = target.root()?;
    let board = crate::board::Board::discover(root)?;
    let file = target
        .presets(&board)?
        .context("the simulated board has no nvpmodel file: give one with --nvpmodel")?;
    let now = board.read_knobs()?;
    let presets = file
        .presets
        .iter()
        .map(|p| {
            let values = crate::control::plan::target(&board, &p.mode, &now)
                .with_context(|| format!("preset {}", p.name))?;
            Ok((
                p.name.clone(),
                characterize::busy_operating(&board, &values),
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let names: Vec<String> = presets.iter().map(|(n, _)| n.clone()).collect();
    let modes = sweep_modes(a, &names, &crate::control::mode::ModeSpace::of(&board))?;
    let media = if a.quick {
        vec![Medium::Sd]
    } else {
        once("media", &a.media, |i| a.media[i].name().to_string())?;
        if a.media.is_empty() {
            vec![Medium::Sd, Medium::Nvme]
        } else {
            a.media.clone()
        }
    };
    let s = Sweep {
        spec,
        workload,
        modes,
        presets,
        batches: l.batches,
        workers: l.workers,
        media,
        caches: l.caches,
        repeats: l.repeats,
        epochs: l.epochs,
    };
    s.check()?;
    Ok(s)
}

/// The finished runs already in `csv` (none when there is no file).
fn finished(csv: &Path, epochs: u32) -> Result<Vec<Run>> {
    let text = match std::fs::read_to_string(csv) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", csv.display())),
    };
    let records: Vec<_> = csv_text::records(&text, csv)?
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    if records.first().is_some_and(|h| h.iter().ne(header())) {
        bail!("{} is not a runs.csv of this version", csv.display());
    }
    Ok(parse_rows(&records, epochs))
}

/// What a sweep did.
struct Swept {
    runs: Vec<Run>,
    resumed: usize,
    stopped: bool,
}

/// What a sweep's runs are of (`about`: the board, the workload and its dataset; the
/// board's `key`, which tells releases and units of one model apart) and how many epochs
/// each: `--resume` takes runs only from a sweep of the same.
fn manifest(about: &serde_json::Value, key: &str, epochs: u32) -> serde_json::Value {
    serde_json::json!({"about": about, "board_key": key, "epochs": epochs})
}

/// With `--resume`, refuses (before anything is set up) unless the output's `sweep.json`
/// says its runs are of `manifest`: a runs.csv holds no board, workload or dataset, and
/// runs of another sweep were kept and relabelled.
fn check_resumable(a: &Args, manifest: &serde_json::Value) -> Result<()> {
    if !a.out.join("runs.csv").exists() {
        return Ok(());
    }
    // A finished sweep is not overwritten by a new one (found by review: it was, silently).
    if !a.resume {
        return Err(super::usage(&format!(
            "{} holds the runs of a sweep: --resume goes on with it, or give another --out (or remove its runs.csv)",
            a.out.display()
        )));
    }
    let path = a.out.join(MANIFEST);
    let out = &a.out;
    let found: serde_json::Value = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{} does not parse", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(super::usage(&format!(
                "--resume: {} holds runs.csv but no {MANIFEST} (an earlier jpower's): which sweep its runs are of is unknown; give another --out",
                out.display()
            )))
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if &found != manifest {
        return Err(super::usage(&format!(
            "--resume: {} holds the runs of another sweep ({found}), not of this one ({manifest}): resume with the options it was made with, or give another --out",
            out.display()
        )));
    }
    Ok(())
}

/// The file beside runs.csv that says what sweep its runs are of.
const MANIFEST: &str = "sweep.json";

/// Runs the `configs` that `out/runs.csv` lacks (all of them without `--resume`) through
/// `run_one`, appending each run's rows as it finishes, until done or stopped by a signal;
/// then rewrites `runs.csv` in sweep order with each configuration's CV. A resumed file's
/// runs of configurations outside `configs` stay in it (after them), out of the report.
fn sweep(
    configs: &[Config],
    manifest: &serde_json::Value,
    a: &Args,
    out: &Output,
    run_one: &mut dyn FnMut(&Config) -> Result<Run>,
) -> Result<Swept> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let csv_path = a.out.join("runs.csv");
    let epochs = manifest["epochs"].as_u64().unwrap_or(0) as u32;
    check_resumable(a, manifest)?;
    let (mut done, others): (Vec<Run>, Vec<Run>) = if a.resume && csv_path.exists() {
        finished(&csv_path, epochs)?
            .into_iter()
            .partition(|r| configs.contains(&r.config))
    } else {
        Default::default()
    };
    // The runs first, then what they are of: a crash between the two never leaves old
    // runs under a new sweep's manifest.
    let kept: Vec<Vec<String>> = done
        .iter()
        .chain(&others)
        .flat_map(|r| r.rows(None))
        .collect();
    std::fs::write(&csv_path, csv_text::write(&header(), kept))
        .with_context(|| format!("writing {}", csv_path.display()))?;
    let manifest_path = a.out.join(MANIFEST);
    std::fs::write(&manifest_path, serde_json::to_vec_pretty(manifest)?)
        .with_context(|| format!("writing {}", manifest_path.display()))?;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&csv_path)
        .with_context(|| format!("opening {}", csv_path.display()))?;
    super::interrupt::catch()?;
    let todo: Vec<_> = configs
        .iter()
        .filter(|c| !done.iter().any(|r| &r.config == *c))
        .collect();
    let (resumed, start) = (done.len(), Instant::now());
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut stopped = false;
    for (i, c) in todo.iter().enumerate() {
        if super::interrupt::interrupted() {
            stopped = true;
            break;
        }
        let r = match run_one(c) {
            Ok(r) => r,
            // The run the signal cut short (a command it killed too) is dropped, and the
            // sweep stops as after a finished run.
            Err(e) if super::interrupt::interrupted() => {
                log::warn!("run {} r{} cut short: {e:#}", c.label(), c.repeat);
                stopped = true;
                break;
            }
            Err(e) => return Err(e.context(format!("run {} r{}", c.label(), c.repeat))),
        };
        let mut w = csv_text::writer(Vec::new());
        r.rows(None)
            .iter()
            .try_for_each(|row| w.write_record(row))?;
        file.write_all(&w.into_inner()?)
            .and_then(|()| file.sync_data())
            .with_context(|| format!("appending to {}", csv_path.display()))?;
        done.push(r);
        std::thread::sleep(Duration::from_millis(a.pace_ms));
        if !out.json {
            let left = (todo.len() - i - 1) as f64;
            let eta = start.elapsed().as_secs_f64() / (i + 1) as f64 * left;
            let line = format!(
                "[{}/{}] {} r{}  ETA {eta:.0} s",
                resumed + i + 1,
                configs.len(),
                c.label(),
                c.repeat
            );
            // On a terminal the line is rewritten in place; in a log, one line a run
            // (a review found a log of one long line of carriage returns).
            if terminal {
                eprint!("\r{line}      ");
            } else {
                eprintln!("{line}");
            }
        }
    }
    if !out.json && terminal {
        eprintln!();
    }
    // Canonical order: a resumed sweep's files equal an uninterrupted one's.
    let order: std::collections::HashMap<&Config, usize> =
        configs.iter().enumerate().map(|(i, c)| (c, i)).collect();
    done.sort_by_key(|r| order.get(&r.config).copied());
    // Each configuration's CV over all its runs in the file (a resume with fewer repeats
    // leaves some outside the sweep).
    let sums = summarise(&[done.as_slice(), others.as_slice()].concat());
    let mut rows = rows_with_cv(&done, &sums);
    rows.extend(rows_with_cv(&others, &sums));
    std::fs::write(&csv_path, csv_text::write(&header(), rows))
        .with_context(|| format!("writing {}", csv_path.display()))?;
    Ok(Swept {
        runs: done,
        resumed,
        stopped,
    })
}

/// `jpower characterize`.
pub fn run(target: &Target, a: &Args, out: &Output) -> Result<()> {
    match target.sim.as_deref() {
        Some(board) if !a.live => {
            let live_only = [
                ("--run", a.run.is_some()),
                ("--data", !a.data.is_empty()),
                ("--samples", a.samples.is_some()),
                ("--sample-kib", a.sample_kib.is_some()),
                ("--cpu", a.cpu),
            ];
            if let Some((name, _)) = live_only.iter().find(|(_, given)| *given) {
                return Err(super::usage(&format!(
                    "{name} is for a run in real time: add --live (the agent's simulated board)"
                )));
            }
            let s = simulated(target, board, a)?;
            let configs = s.configs();
            // Where each preset of the board runs it: a resume must find them the same
            // (found by review: another --nvpmodel, or a knob a preset leaves alone set
            // since, mixed runs of one name at other clocks). All of them, so that a
            // narrower --modes resumes.
            let presets: serde_json::Map<String, serde_json::Value> = s
                .presets
                .iter()
                .map(|(name, op)| {
                    let at = serde_json::json!({
                        "cores": op.online_cores, "cpu_hz": op.cpu_hz,
                        "gpu_hz": op.gpu_hz, "emc_hz": op.emc_hz,
                    });
                    (name.clone(), at)
                })
                .collect();
            let about = serde_json::json!({
                "board": s.spec.id(),
                "simulated": true,
                "workload": s.workload.name(),
                "presets": presets,
            });
            let manifest = manifest(&about, &s.spec.id(), s.epochs);
            let swept = sweep(&configs, &manifest, a, out, &mut |c| Ok(s.run(c)))?;
            let title = format!(
                "jpower characterize: {} on simulated {} (simulated time)",
                s.workload.name(),
                s.spec.id()
            );
            report(about, &title, &configs, s.epochs, swept, a, out)
        }
        _ => live(target, a, out),
    }
}

/// The live sweep: the built-in workload on this machine's disk, through the agent.
fn live(target: &Target, a: &Args, out: &Output) -> Result<()> {
    if let Some(w) = a.workload.as_deref().filter(|w| *w != "builtin") {
        return Err(super::usage(&format!("--workload {w:?}: a live sweep runs the built-in workload (builtin) or a --run command; the simulated models run in simulated time (--sim BOARD without --live)")));
    }
    if !a.media.is_empty() {
        return Err(super::usage("--media is for simulated time: a live sweep's media are its --data folders (NAME=DIR,...)"));
    }
    if a.run.is_some() && (a.data.is_empty() || a.workload.is_some()) {
        return Err(super::usage("--run needs --data NAME=DIR,... (the command's dataset, one per medium) and no --workload"));
    }
    if a.run.is_some() && (a.samples.is_some() || a.sample_kib.is_some()) {
        return Err(super::usage("--samples and --sample-kib shape the built-in workload's dataset: a --run command brings its own (--data)"));
    }
    let given = given_locations(a)?;
    let (root, sim) = target.root()?;
    let board = crate::board::Board::discover(root)?;
    let socket = target.agent_socket();
    let mut client = target.agent()?.with_context(|| {
        format!(
            "a live sweep drives the agent: start `jpower agent` first (no agent serves {})",
            socket.display()
        )
    })?;
    let presets = match client.request(crate::ipc::protocol::RequestBody::Modes)? {
        crate::ipc::protocol::ReplyBody::Modes { presets, .. } => {
            presets.into_iter().map(|p| p.name).collect::<Vec<_>>()
        }
        other => bail!("unexpected reply to modes: {other:?}"),
    };
    drop(client);
    let l = lists(a)?;
    let modes = sweep_modes(a, &presets, &crate::control::mode::ModeSpace::of(&board))?;
    let shape = if a.quick {
        Shape {
            samples: 1024,
            sample_bytes: 16 << 10,
            seed: 1,
        }
    } else {
        Shape {
            samples: a.samples.unwrap_or(2048),
            sample_bytes: (a.sample_kib.unwrap_or(64) as usize) << 10,
            seed: 1,
        }
    };
    if let Some(&batch) = l.batches.iter().max().filter(|&&b| b > shape.samples) {
        if a.run.is_none() {
            return Err(super::usage(&format!(
                "--batch {batch}: the dataset has {} samples, which make no minibatch of {batch} (--samples)",
                shape.samples
            )));
        }
    }
    let on_cuda = !(a.cpu || sim.is_some() || a.run.is_some());
    let data: Vec<serde_json::Value> = given
        .iter()
        .map(|(name, dir)| serde_json::json!({"name": name, "dir": dir}))
        .collect();
    let about = match &a.run {
        Some(template) => serde_json::json!({
            "board": board.identity.model,
            "simulated": sim.is_some(),
            "workload": template,
            "data": data,
        }),
        None => serde_json::json!({
            "board": board.identity.model,
            "simulated": sim.is_some(),
            "workload": "builtin",
            "backend": if on_cuda { "cuda" } else { "cpu" },
            "dataset": {"samples": shape.samples, "sample_bytes": shape.sample_bytes},
            "data": data,
        }),
    };
    let media: Vec<String> = given.iter().map(|(name, _)| name.clone()).collect();
    let names: Vec<String> = modes.iter().map(SweepMode::name).collect();
    let configs = product(&names, &l.batches, &l.workers, &media, &l.caches, l.repeats);
    let manifest = manifest(&about, &board.key(), l.epochs);
    check_resumable(a, &manifest)?;
    let locations = locations(given, a.run.is_none().then_some(shape))?;
    let mut runner = LiveSweep::connect(&socket, locations, l.epochs)?;
    let channels = board.ina.iter().map(|c| c.enabled).max().unwrap_or(3);
    let refresh_us = runner.resolve(channels, SENSOR_REFRESH_US)?;
    if !out.json {
        eprintln!(
            "jpower: the agent's sensors refresh every {:.1} ms during the sweep",
            f64::from(refresh_us) / 1e3
        );
    }
    let cuda = match on_cuda {
        false => None,
        true => Some(Cuda::open(0, board.identity.l4t_major)?),
    };
    if let Some(sim) = &sim {
        sim.set_load(LoadState::TRAINING)?;
    }
    let swept = sweep(&configs, &manifest, a, out, &mut |c| {
        Ok(match (&a.run, &cuda) {
            (Some(template), _) => runner.run_command(c, template)?,
            (None, Some(cuda)) => runner.run_builtin(c, shape, cuda.train_backend()?)?,
            (None, None) => runner.run_builtin(c, shape, Cpu)?,
        })
    });
    // Put the board back whether or not the sweep ran to its end.
    let released = runner.release();
    if let Some(sim) = &sim {
        sim.set_load(LoadState::default())?;
    }
    let swept = swept?;
    released?;
    let title = format!(
        "jpower characterize: {} on {} (real time)",
        a.run.as_deref().unwrap_or("the built-in workload"),
        board.identity.model
    );
    report(about, &title, &configs, l.epochs, swept, a, out)
}

/// The `--data` locations, named and checked (default: the output directory, `out`).
fn given_locations(a: &Args) -> Result<Vec<(String, PathBuf)>> {
    let given: Vec<(String, PathBuf)> = if a.data.is_empty() {
        vec![("out".to_string(), a.out.clone())]
    } else {
        a.data
            .iter()
            .map(|d| match d.split_once('=') {
                Some((name, dir)) => (name.to_string(), PathBuf::from(dir)),
                None => {
                    let dir = PathBuf::from(d);
                    let name = dir
                        .file_name()
                        .map_or_else(|| d.clone(), |n| n.to_string_lossy().into_owned());
                    (name, dir)
                }
            })
            .collect()
    };
    if let Some((_, dir)) = given.iter().find(|(name, _)| name.is_empty()) {
        return Err(super::usage(&format!(
            "--data ={}: a location needs a name (NAME=DIR)",
            dir.display()
        )));
    }
    once(
        "data",
        &given.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        |i| format!("the location {:?}", given[i].0),
    )?;
    Ok(given)
}

/// The dataset locations `given`: with the built-in workload's `shape`, each with that
/// dataset ready in it; else (a `--run` command's) each an existing folder.
fn locations(given: Vec<(String, PathBuf)>, shape: Option<Shape>) -> Result<Vec<Location>> {
    given
        .into_iter()
        .map(|(name, dir)| match shape {
            Some(shape) => std::fs::create_dir_all(&dir)
                .and_then(|()| Dataset::prepare(&dir, shape))
                .map(|d| Location { name, dir: d.dir })
                .with_context(|| {
                    format!(
                        "preparing the dataset in {}",
                        dir.join(dataset::FOLDER).display()
                    )
                }),
            None if dir.is_dir() => Ok(Location { name, dir }),
            None => bail!("--data {name}={}: not a directory", dir.display()),
        })
        .collect()
}

/// Writes `runs.json` and `report.html` and prints the summary.
fn report(
    about: serde_json::Value,
    title: &str,
    configs: &[Config],
    epochs: u32,
    swept: Swept,
    a: &Args,
    out: &Output,
) -> Result<()> {
    let done = &swept.runs;
    let sums = summarise(done);
    let front = mode_front(&sums);
    // A partial sweep's page says so (found by review: only runs.json did).
    let title = if swept.stopped {
        format!(
            "{title}: INTERRUPTED after {} of {} runs (partial; `--resume` runs the rest)",
            done.len(),
            configs.len()
        )
    } else {
        title.to_string()
    };
    let page = characterize_report::html(&title, &sums, &front, done)?;
    std::fs::write(a.out.join("report.html"), page).context("writing report.html")?;
    let mut value = about;
    value["runs_total"] = configs.len().into();
    value["runs_done"] = done.len().into();
    value["resumed_runs"] = swept.resumed.into();
    value["interrupted"] = swept.stopped.into();
    value["epochs"] = epochs.into();
    value["configurations"] = serde_json::to_value(&sums)?;
    value["modes"] = serde_json::to_value(&front)?;
    value["runs"] = done
        .iter()
        .map(|r| {
            serde_json::json!({
                "mode": r.config.mode,
                "batch": r.config.batch,
                "workers": r.config.workers,
                "medium": r.config.medium,
                "cache": r.config.cache.name(),
                "repeat": r.config.repeat,
                "epochs": r.epochs,
            })
        })
        .collect();
    std::fs::write(
        a.out.join("runs.json"),
        serde_json::to_string_pretty(&value)? + "\n",
    )
    .context("writing runs.json")?;
    if swept.stopped {
        // The command as given, with --resume (found by a review: `--resume --out DIR`
        // alone, without the interrupted sweep's `--quick`, planned 216 runs to its 8).
        let mut words: Vec<String> = std::env::args_os()
            .map(|w| shell_word(&w.to_string_lossy()))
            .collect();
        if !a.resume {
            words.push("--resume".into());
        }
        bail!(
            "interrupted after {} of {} runs; `{}` runs the rest",
            done.len(),
            configs.len(),
            words.join(" ")
        );
    }
    out.print(&value, || text(&value, &sums, &front, &a.out))
}

/// `word` as a POSIX shell reads it back: as is where it holds nothing the shell treats
/// specially, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

fn text(v: &serde_json::Value, sums: &[Summary], front: &[ModePoint], dir: &Path) -> String {
    let mut t = format!(
        "{} on {}{}: {} runs ({} resumed), {} configurations\n",
        v["workload"].as_str().unwrap_or(""),
        if v["simulated"] == true {
            "simulated "
        } else {
            ""
        },
        v["board"].as_str().unwrap_or(""),
        v["runs_done"],
        v["resumed_runs"],
        sums.len()
    );
    t += "configuration                      time s   energy J  stall s  compute s  CV %\n";
    for s in sums {
        t += &format!(
            "{:<32} {:>8.2} {:>10.1} {:>8.2} {:>10.2} {:>5}\n",
            s.label,
            s.mean.time_s,
            s.mean.energy_j,
            s.mean.stall_s,
            s.mean.compute_s,
            s.time_cv
                .map_or_else(|| "-".to_string(), |cv| format!("{:.2}", cv * 100.0))
        );
    }
    for p in front {
        t += &format!(
            "mode {}: {:.2} s, {:.1} J{}\n",
            p.mode,
            p.time_s,
            p.energy_j,
            if p.pareto { " (Pareto front)" } else { "" }
        );
    }
    t + &format!(
        "wrote {0}/runs.csv, {0}/runs.json, {0}/report.html\n",
        dir.display()
    )
}
