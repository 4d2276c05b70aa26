//! `jpower characterize`: the SIGMETRICS'23 training study as one resumable sweep on a
//! simulated board ([`crate::sim::characterize`]). Each run's epochs are appended to
//! `DIR/runs.csv` as the run finishes; `runs.json` (runs, per-configuration summaries with
//! the CV over repeats, the modes' Pareto front) and `report.html` are written at the end,
//! or after the last finished run when SIGINT or SIGTERM stops the sweep. `--resume`
//! keeps the finished runs of `runs.csv` and runs the rest. In simulated time the board's
//! knobs are never written (each run computes its preset's clocks), so there is nothing
//! to restore.

use super::characterize_report;
use super::Output;
use crate::sim::characterize::{self, header, mode_front, parse_rows, summarise, Run, Sweep};
use crate::sim::datapath::{Cache, Medium};
use crate::sim::spec;
use crate::sim::workload::Workload;
use crate::support::csv_text;
use anyhow::{bail, Context, Result};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Arguments of `jpower characterize`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The training workload: lenet5 (MNIST), resnet18 (CIFAR-10) or mobilenetv3 (GLD-23k).
    #[arg(long, value_name = "NAME", default_value = "resnet18")]
    pub workload: String,
    /// Power modes: preset names, comma-separated, or `presets` for all of the board's.
    #[arg(long, value_name = "LIST", default_value = "presets")]
    pub modes: String,
    /// Minibatch sizes.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "8,16,32"
    )]
    pub batch: Vec<u32>,
    /// Data-loader workers (0: the training process loads).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "0,1,4"
    )]
    pub workers: Vec<u32>,
    /// Storage media of the dataset: sd, hdd, nvme.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "sd,nvme"
    )]
    pub media: Vec<String>,
    /// Page cache at each epoch's start: dropped, warm.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "warm"
    )]
    pub cache: Vec<String>,
    /// Repeats of each configuration (for the coefficient of variation).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeats: u32,
    /// Epochs per run.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub epochs: u32,
    /// A small sweep: the board's first two presets, minibatch 16, workers 0 and 1, SD
    /// card, warm cache, 2 repeats of 2 epochs (overrides the lists above).
    #[arg(long)]
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

/// Set by SIGINT and SIGTERM: stop after the current run.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: nix::libc::c_int) {
    // Release: pairs with the Acquire load between runs.
    STOP.store(true, Ordering::Release);
}

/// Installs [`on_signal`] for SIGINT and SIGTERM.
fn catch_signals() -> Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for s in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { sigaction(s, &action) }.with_context(|| format!("catching {s}"))?;
    }
    Ok(())
}

/// Each comma-separated name of `list` through `parse`, or an error naming `flag`.
fn names<T>(
    flag: &str,
    list: &[String],
    parse: fn(&str) -> Option<T>,
    known: &str,
) -> Result<Vec<T>> {
    list.iter()
        .map(|s| parse(s.trim()).with_context(|| format!("--{flag} {s:?}: one of {known}")))
        .collect()
}

/// The sweep the arguments ask for on `board`.
fn sweep(board: &str, a: &Args) -> Result<Sweep> {
    let spec = spec::find(board).with_context(|| format!("unknown simulated board {board:?}"))?;
    let workload = Workload::from_name(&a.workload).with_context(|| {
        format!(
            "--workload {:?}: lenet5, resnet18 or mobilenetv3",
            a.workload
        )
    })?;
    let all = || spec.presets.iter().collect::<Vec<_>>();
    let s = if a.quick {
        Sweep {
            spec,
            workload,
            modes: all().into_iter().take(2).collect(),
            batches: vec![16],
            workers: vec![0, 1],
            media: vec![Medium::Sd],
            caches: vec![Cache::Warm],
            repeats: 2,
            epochs: 2,
        }
    } else {
        let modes = if a.modes == "presets" {
            all()
        } else {
            a.modes
                .split(',')
                .map(|m| characterize::preset(spec, m.trim()))
                .collect::<Result<_, _>>()?
        };
        if a.batch.contains(&0) || a.repeats == 0 || a.epochs == 0 {
            bail!("--batch, --repeats and --epochs must be positive");
        }
        Sweep {
            spec,
            workload,
            modes,
            batches: a.batch.clone(),
            workers: a.workers.clone(),
            media: names("media", &a.media, Medium::from_name, "sd, hdd, nvme")?,
            caches: names("cache", &a.cache, Cache::from_name, "dropped, warm")?,
            repeats: a.repeats,
            epochs: a.epochs,
        }
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

/// `jpower characterize`.
pub fn run(board: Option<&str>, a: &Args, out: &Output) -> Result<()> {
    let Some(board) = board else {
        bail!("characterize sweeps a simulated board: name one with --sim BOARD");
    };
    let s = sweep(board, a)?;
    let configs = s.configs();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let csv_path = a.out.join("runs.csv");
    let mut done = if a.resume {
        finished(&csv_path, s.epochs)?
    } else {
        Vec::new()
    };
    done.retain(|r| configs.contains(&r.config));
    let kept: Vec<Vec<String>> = done.iter().flat_map(Run::rows).collect();
    std::fs::write(&csv_path, csv_text::write(&header(), kept))
        .with_context(|| format!("writing {}", csv_path.display()))?;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&csv_path)
        .with_context(|| format!("opening {}", csv_path.display()))?;
    catch_signals()?;
    let todo: Vec<_> = configs
        .iter()
        .filter(|c| !done.iter().any(|r| &r.config == *c))
        .collect();
    let (skipped, start) = (done.len(), Instant::now());
    let mut stopped = false;
    for (i, c) in todo.iter().enumerate() {
        if STOP.load(Ordering::Acquire) {
            stopped = true;
            break;
        }
        let r = s.run(c);
        let mut w = csv_text::writer(Vec::new());
        r.rows().iter().try_for_each(|row| w.write_record(row))?;
        file.write_all(&w.into_inner()?)
            .and_then(|()| file.sync_data())
            .with_context(|| format!("appending to {}", csv_path.display()))?;
        done.push(r);
        std::thread::sleep(Duration::from_millis(a.pace_ms));
        if !out.json {
            let left = (todo.len() - i - 1) as f64;
            let eta = start.elapsed().as_secs_f64() / (i + 1) as f64 * left;
            eprint!(
                "\r[{}/{}] {} r{}  ETA {eta:.0} s      ",
                skipped + i + 1,
                configs.len(),
                c.label(),
                c.repeat
            );
        }
    }
    if !out.json {
        eprintln!();
    }
    // Canonical order: a resumed sweep's files equal an uninterrupted one's.
    done.sort_by_key(|r| configs.iter().position(|c| *c == r.config));
    let rows: Vec<Vec<String>> = done.iter().flat_map(Run::rows).collect();
    std::fs::write(&csv_path, csv_text::write(&header(), rows))
        .with_context(|| format!("writing {}", csv_path.display()))?;
    let sums = summarise(&done);
    let front = mode_front(&sums);
    let title = format!(
        "jpower characterize: {} on simulated {}",
        s.workload.name(),
        s.spec.id()
    );
    let page = characterize_report::html(&title, &sums, &front)?;
    std::fs::write(a.out.join("report.html"), page).context("writing report.html")?;
    let value = serde_json::json!({
        "board": s.spec.id(),
        "simulated": true,
        "workload": s.workload.name(),
        "runs_total": configs.len(),
        "runs_done": done.len(),
        "resumed_runs": skipped,
        "interrupted": stopped,
        "epochs": s.epochs,
        "configurations": sums,
        "modes": front.iter().map(|(m, t, e, on)| serde_json::json!({
            "mode": m, "time_s": t, "energy_j": e, "pareto": on,
        })).collect::<Vec<_>>(),
        "runs": done.iter().map(|r| serde_json::json!({
            "mode": r.config.mode,
            "batch": r.config.batch,
            "workers": r.config.workers,
            "medium": r.config.medium.name(),
            "cache": r.config.cache.name(),
            "repeat": r.config.repeat,
            "epochs": r.epochs.iter().map(|e| serde_json::json!({
                "time_s": e.time_s, "energy_j": e.energy_j, "power_w": e.power_w,
                "stall_s": e.stall_s, "compute_s": e.compute_s, "cpu_util": e.util[0],
                "gpu_util": e.util[1], "emc_util": e.util[2], "disk_mb_s": e.disk_mb_s,
                "resident": e.resident,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    std::fs::write(
        a.out.join("runs.json"),
        serde_json::to_string_pretty(&value)? + "\n",
    )
    .context("writing runs.json")?;
    if stopped {
        bail!(
            "interrupted after {} of {} runs; `--resume --out {}` runs the rest",
            done.len(),
            configs.len(),
            a.out.display()
        );
    }
    out.print(&value, || text(&value, &sums, &front, &a.out))
}

fn text(
    v: &serde_json::Value,
    sums: &[characterize::Summary],
    front: &[(String, f64, f64, bool)],
    dir: &Path,
) -> String {
    let mut t = format!(
        "{} on simulated {}: {} runs ({} resumed), {} configurations\n",
        v["workload"].as_str().unwrap_or(""),
        v["board"].as_str().unwrap_or(""),
        v["runs_done"],
        v["resumed_runs"],
        sums.len()
    );
    t += "configuration                      time s   energy J  stall s  compute s  CV %\n";
    for s in sums {
        t += &format!(
            "{:<32} {:>8.2} {:>10.1} {:>8.2} {:>10.2} {:>5.2}\n",
            s.label,
            s.mean.time_s,
            s.mean.energy_j,
            s.mean.stall_s,
            s.mean.compute_s,
            s.time_cv * 100.0
        );
    }
    for (m, time, e, on) in front {
        t += &format!(
            "mode {m}: {time:.2} s, {e:.1} J{}\n",
            if *on { " (Pareto front)" } else { "" }
        );
    }
    t + &format!(
        "wrote {0}/runs.csv, {0}/runs.json, {0}/report.html\n",
        dir.display()
    )
}
