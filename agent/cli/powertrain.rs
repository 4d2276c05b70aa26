//! `jpower powertrain eval`: the PowerTrain evaluation on a simulated board (or a
//! replayed profile), every method side by side.

use super::train_modes::workload;
use super::Output;
use crate::predict::evaluate::{self, Effort, Eval};
use crate::predict::pretrain_cache::PretrainCache;
use crate::predict::profile::{self, ProfileConfig, Replay};
use crate::sim::sources::{reference_source, SimSource};
use anyhow::{Context, Result};
use std::fmt::Write;
use std::path::PathBuf;

/// `jpower powertrain ...`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Transfer from a reference workload to a target one: MAPE and budget scores per method.
    Eval(EvalArgs),
}

/// Arguments of `jpower powertrain eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// The reference workload (resnet18, mobilenetv3, yolov8n, bert, lstm).
    #[arg(long, default_value = "resnet18", value_parser = super::train_modes::workload_name)]
    pub reference: String,
    /// The target workload (checked, but not run, with --truth).
    #[arg(long, default_value = "mobilenetv3", value_parser = super::train_modes::workload_name)]
    pub target: String,
    /// Modes profiled for the target (3 at least: fewer fit a constant).
    #[arg(allow_negative_numbers = true, long, default_value_t = 50, value_parser = super::bounds::fit_modes)]
    pub modes: usize,
    /// How the target's modes are chosen: `stratified` over the knobs, or `active` (half
    /// stratified, the rest where jpower's physics ensemble is least certain).
    #[arg(long, default_value = "stratified", value_parser = ["stratified", "active"])]
    pub strategy: String,
    /// Replay the target from a profile (columns cores,cpu_khz,gpu_hz,emc_hz,time_ms,power_w).
    #[arg(long, value_name = "FILE.csv")]
    pub truth: Option<PathBuf>,
    /// Noise added to replayed minibatches, relative sigma of time and power.
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.0, value_parser = super::bounds::fraction)]
    pub truth_noise: f64,
    /// A smaller setting: a random subset of the reference grid and fewer epochs (CI).
    #[arg(long)]
    pub quick: bool,
    /// Seed of mode selection, noise and training.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Keep the baselines' pre-training on the reference (PowerTrain's network) in DIR, keyed
    /// by the reference's profile, the board, the setting and the model version [default:
    /// $XDG_CACHE_HOME/jpower/pretrained, else ~/.cache/jpower/pretrained]
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Pre-train the baselines afresh, reading and writing no cache.
    #[arg(long, conflicts_with = "cache")]
    pub no_cache: bool,
}

/// The fewest modes of a `--truth` file left to score beside those profiled.
const MIN_SCORED: usize = 10;

/// The papers' power budgets on Orin AGX, watts (those within the truth's power are scored).
const PAPERS_BUDGETS_W: std::ops::RangeInclusive<u32> = 17..=50;

/// Runs `jpower powertrain ...` on the simulated board `target` names (orin-agx unless
/// `--sim` names another; a `--root` tree is refused: the evaluation needs the board's
/// model for its reference and its truth).
pub fn run(target: &super::Target, cmd: &Command, out: &Output) -> Result<()> {
    let Command::Eval(a) = cmd;
    if target.sim.is_none() && target.root.is_some() {
        anyhow::bail!("powertrain eval scores on a simulated board (--sim BOARD, orin-agx by default), not a --root tree");
    }
    let spec = super::train_modes::spec(Some(target.sim.as_deref().unwrap_or("orin-agx")))?;
    let space = spec.mode_space();
    let mut reference = reference_source(spec, workload(&a.reference)?, a.seed);
    let mut sim_target;
    let mut replay;
    let target: &mut dyn profile::Source = match &a.truth {
        Some(path) => {
            let (rows, _) = super::train_modes::read_profile(path, &spec.mode_space(), &spec.id())?;
            // A MAPE over a handful of modes says nothing (a review found --modes 29 on a
            // 30-row file scoring one mode without a word).
            anyhow::ensure!(
                rows.len() >= a.modes + MIN_SCORED,
                "{}: {} rows leave {} mode(s) to score beside --modes {}; at least {MIN_SCORED} are needed",
                path.display(),
                rows.len(),
                rows.len().saturating_sub(a.modes),
                a.modes
            );
            replay = Replay::new(&rows, (a.truth_noise, a.truth_noise), a.seed);
            &mut replay
        }
        None => {
            anyhow::ensure!(
                a.reference != a.target,
                "the reference and the target are the same workload"
            );
            sim_target = SimSource::new(spec.silicon, workload(&a.target)?, space.clone(), a.seed);
            &mut sim_target
        }
    };
    let cache = match (&a.cache, a.no_cache) {
        (_, true) => None,
        (Some(dir), false) => Some(PretrainCache::new(dir)),
        (None, false) => PretrainCache::default_dir().map(PretrainCache::new),
    };
    let started = std::time::Instant::now();
    let bar = super::stages(out.json)?;
    bar.set_message(format!(
        "profiling the reference {} and the target, fitting every method",
        a.reference
    ));
    // Each stage on stderr as it finishes, with the time since the start.
    let mut progress = |what: &str| {
        let at = started.elapsed().as_secs_f64();
        bar.suspend(|| eprintln!("[{at:6.1} s] {what}"));
    };
    let report = evaluate::evaluate(Eval {
        board: spec.id(),
        reference: &mut reference,
        reference_space: space,
        target,
        modes: a.modes,
        active: a.strategy == "active",
        effort: Effort::new(a.quick, a.seed),
        profile: ProfileConfig::default(),
        // The papers' budgets on Orin AGX.
        budgets: (spec.name == "orin-agx").then(|| PAPERS_BUDGETS_W.map(f64::from).collect()),
        cache: cache.as_ref(),
        progress: &mut progress,
    })
    .context("fitting the predictors")?;
    bar.finish_and_clear();
    let mut value = serde_json::to_value(&report)?;
    // What was evaluated, as the text's first line says it.
    let target = match &a.truth {
        Some(truth) => vec![
            ("truth", serde_json::json!(truth)),
            ("truth_noise", serde_json::json!(a.truth_noise)),
        ],
        None => vec![("target", serde_json::json!(a.target))],
    };
    for (key, v) in target.into_iter().chain([
        ("reference", serde_json::json!(a.reference)),
        ("target_modes", serde_json::json!(a.modes)),
        ("strategy", serde_json::json!(a.strategy)),
        ("quick", serde_json::json!(a.quick)),
        ("seed", serde_json::json!(a.seed)),
    ]) {
        value[key] = v;
    }
    out.print(&value, || {
        let mut t = format!(
            "PowerTrain evaluation on {}: reference {} ({} modes, {:.0} simulated min), target {} ({} modes scored)\n\n",
            report.board,
            a.reference,
            report.reference_modes,
            report.reference_profiling_minutes,
            a.truth.as_ref().map_or(a.target.clone(), |p| p.display().to_string()),
            report.evaluated_modes
        );
        let _ = writeln!(t, "  {:<12} {:>9} {:>10} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9} {:>8}", "method", "time MAPE", "power MAPE", "(grid) time", "power", "median pen", "p90 pen", ">1W over", "profiled", "minutes");
        // A figure of nothing (no mode on the grid, no budget any mode meets) is n/a.
        let pct = |v: f64, digits: usize| {
            if v.is_finite() {
                format!("{v:.digits$}%")
            } else {
                "n/a".to_string()
            }
        };
        for (name, s) in &report.methods {
            let _ = writeln!(
                t,
                "  {name:<12} {:>9} {:>10} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9} {:>8.1}",
                pct(s.time_mape, 2), pct(s.power_mape, 2), pct(s.grid_time_mape, 2), pct(s.grid_power_mape, 2), pct(s.median_time_penalty_pct, 2), pct(s.p90_time_penalty_pct, 2), pct(s.over_budget_1w_pct, 1), s.profiled_modes, s.profiling_minutes
            );
            if let Some(v) = &s.verified {
                let _ = writeln!(
                    t,
                    "  {:<12} {:>9} {:>10} {:>11} {:>10} {:>10} {:>9} {:>9}   (up to ten modes predicted to fit run 40 minibatches each{})",
                    format!("{name}+verify"),
                    "",
                    "",
                    "",
                    "",
                    pct(v.median_time_penalty_pct, 2),
                    pct(v.p90_time_penalty_pct, 2),
                    pct(v.over_budget_1w_pct, 1),
                    // Nothing scored has no runs per budget (said below).
                    if v.mean_runs.is_finite() {
                        format!(", {:.1} per budget", v.mean_runs)
                    } else {
                        String::new()
                    }
                );
            }
        }
        let top = report.truth_power_w[1];
        let above = report.budgets_w.iter().filter(|&&b| b > top).count();
        if let (true, Some(lo), Some(hi)) = (spec.name == "orin-agx", report.budgets_w.first(), report.budgets_w.last()) {
            if !report.budgets_w.iter().all(|&b| PAPERS_BUDGETS_W.contains(&(b as u32))) {
                // No Jetson draws 100 W: such a profile's power is in another unit.
                let unit = if *lo > 100.0 { " (is power in watts?)" } else { "" };
                let _ = writeln!(t, "\n  budgets: the whole watts {lo:.0} to {hi:.0} W of the truth's power range, which none of the papers' {} to {} W falls within{unit}", PAPERS_BUDGETS_W.start(), PAPERS_BUDGETS_W.end());
            }
        }
        if above > 0 {
            let _ = writeln!(t, "\n  {above} of the {} budgets lie above every mode scored (up to {top:.2} W): each chooses the unconstrained fastest mode, so the median and p90 penalties lean on that one choice", report.budgets_w.len());
        }
        if report.methods.values().all(|s| s.budgets == 0 || !s.median_time_penalty_pct.is_finite()) {
            let [lo, hi] = report.truth_power_w;
            let why = match (report.budgets_w.first(), report.budgets_w.last()) {
                (Some(a), Some(b)) => format!("no mode meets the budgets of {a:.0} to {b:.0} W (is power in watts?)"),
                _ => "and the budgets are the whole watts from their lowest + 1 W to their highest: there are none".into(),
            };
            let _ = writeln!(t, "\n  no budget could be scored: the modes scored draw {lo:.2} to {hi:.2} W, {why}");
        }
        let pretraining: Vec<String> = report
            .pretraining
            .iter()
            .map(|(name, p)| {
                let how = if p.cached { " (cached)" } else { "" };
                format!("{name} {:.1} s{how}", p.seconds)
            })
            .collect();
        let _ = writeln!(
            t,
            "\n  pre-training on the reference: {}; the whole evaluation {:.1} s",
            pretraining.join(", "),
            started.elapsed().as_secs_f64()
        );
        t.push_str("\n  (grid): over the modes of PowerTrain's reference grid, where the paper validated\n");
        t.push_str("  PowerTrain (FGCS 2024, 50 modes): time MAPE < 15%, power MAPE < 6%, median penalty ~1%, 26.5% of budgets exceeded by > 1 W\n");
        t
    })
}
