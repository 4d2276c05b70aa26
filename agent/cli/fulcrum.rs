//! `jpower schedule` and `jpower fulcrum eval`: concurrent training and inference on a
//! simulated board in simulated time ([`crate::predict::fulcrum`] on
//! [`crate::sim::concurrent`]): one problem searched and scheduled, or the sweep that
//! scores every strategy against the exhaustive oracle.

use super::{Output, Target};
use crate::predict::evaluate::Effort;
use crate::predict::fulcrum::eval::{self, Report};
use crate::predict::fulcrum::search::{self, Strategy};
use crate::predict::fulcrum::{oracle, Board, Problem, Setting};
use crate::predict::{FitConfig, Method, Model};
use crate::sim::concurrent::ConcurrentBoard;
use crate::sim::settle::SwitchTimes;
use crate::sim::spec::{self, BoardSpec};
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

/// Arguments of `jpower schedule`.
#[derive(Debug, clap::Args)]
pub struct ScheduleArgs {
    /// The training workload: resnet18, mobilenetv3, yolov8n, bert, lstm.
    #[arg(long, value_name = "MODEL")]
    pub train: String,
    /// The inference model (a zoo model; mobilenetv3 is MobileNetV3-Large).
    #[arg(long, value_name = "MODEL")]
    pub infer: String,
    /// Power budget, W (the mean over the guard's 1 s window).
    #[arg(allow_negative_numbers = true, long, value_name = "W", value_parser = super::bounds::positive)]
    pub budget: f64,
    /// Latency target, ms.
    #[arg(allow_negative_numbers = true, long, value_name = "MS", value_parser = super::bounds::positive)]
    pub slo_ms: f64,
    /// The percentile the latency target applies to.
    #[arg(allow_negative_numbers = true, long, value_name = "P", default_value_t = 99.0, value_parser = super::bounds::percentile)]
    pub percentile: f64,
    /// Request arrival rate, per second (at least 0.5).
    #[arg(allow_negative_numbers = true, long, value_name = "PER_S", value_parser = super::bounds::rate)]
    pub rate: f64,
    /// The search: gmd, als, maxn, presets or random.
    #[arg(long, default_value = "gmd", value_parser = ["gmd", "als", "maxn", "presets", "random"])]
    pub strategy: String,
    /// Time of one switch of the GPU and EMC clocks between phases, ms [default: the
    /// board's measured cost (`jpower switch-cost`), else the assumed EMC settle time,
    /// 1 ms; at most 1000].
    #[arg(allow_negative_numbers = true, long, value_name = "MS", value_parser = super::bounds::switch_ms)]
    pub switch_ms: Option<f64>,
    /// Seed of the arrivals and the measurement noise.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run the choice in real time through the agent serving the simulated board (its
    /// real-time scheduler, the built-in workloads' phase times) instead of in simulated
    /// time, and skip the oracle.
    #[arg(long)]
    pub live: bool,
    /// How long a live run submits requests, seconds.
    #[arg(allow_negative_numbers = true, long, value_name = "S", default_value_t = 5.0, requires = "live", value_parser = super::bounds::seconds)]
    pub seconds: f64,
    /// In a live run, the users change to RATE requests per second S seconds in; the
    /// planner re-plans when it measures the drift.
    #[arg(long, value_name = "RATE@S", requires = "live")]
    pub rate_change: Option<super::fulcrum_live::Change>,
    /// In a live run, the trainer's minibatches take FACTOR times as long from S seconds
    /// in (the planner is not told: it measures the drift and re-plans).
    #[arg(long, value_name = "FACTOR@S", requires = "live")]
    pub slowdown: Option<super::fulcrum_live::Change>,
    /// In a live run, the inference server's batches take FACTOR times as long from S
    /// seconds in (the planner measures the drift and re-plans).
    #[arg(long, value_name = "FACTOR@S", requires = "live")]
    pub infer_slowdown: Option<super::fulcrum_live::Change>,
}

/// Arguments of `jpower fulcrum eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// A smaller sweep (48 configurations on the one board).
    #[arg(long)]
    pub quick: bool,
    /// Run only about N of the configurations, evenly spread over the sweep (the
    /// integration test's setting).
    #[arg(allow_negative_numbers = true, long, value_name = "N", value_parser = super::bounds::count)]
    pub limit: Option<usize>,
    /// Seed of the boards' noise and arrivals (0, the default, is the figures the README
    /// quotes; others repeat the sweep on other draws).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `jpower fulcrum ...`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Score the strategies against the exhaustive oracle over a sweep of problems.
    Eval(EvalArgs),
}

fn board_spec(target: &Target, what: &str) -> Result<&'static BoardSpec> {
    let Some(board) = &target.sim else {
        bail!("{what} runs on a simulated board: name one with --sim BOARD");
    };
    spec::find(board).with_context(|| format!("unknown simulated board {board:?}"))
}

/// A mode as JSON ([`PinnedMode`]'s), in words.
fn mode_text(m: &serde_json::Value) -> String {
    let f = |k: &str| m[k].as_f64().unwrap_or(f64::NAN);
    format!(
        "{} cores, CPU {:.1} MHz, GPU {:.2} MHz, EMC {:.1} MHz",
        m["cores"],
        f("cpu_khz") / 1e3,
        f("gpu_hz") / 1e6,
        f("emc_hz") / 1e6
    )
}

/// A setting as [`super::fulcrum_live::chosen`] gives it, in words.
fn chosen_text(c: &serde_json::Value) -> String {
    match (c.get("train"), c.get("infer")) {
        (Some(train), Some(infer)) => format!(
            "train at {}; infer at {}; batch {}",
            mode_text(train),
            mode_text(infer),
            c["infer_batch"]
        ),
        _ => format!("{}; batch {}", mode_text(c), c["infer_batch"]),
    }
}

/// The exit status of a `schedule` whose choice misses the latency target or the budget on
/// the board.
pub const MISSED: i32 = 3;

/// `jpower schedule`: its exit status ([`MISSED`] where the choice misses a target).
pub fn schedule(target: &Target, a: &ScheduleArgs, out: &Output) -> Result<i32> {
    let spec = board_spec(target, "schedule")?;
    let strategy = Strategy::from_name(&a.strategy).with_context(|| {
        format!(
            "unknown strategy {:?} (gmd, als, maxn, presets, random)",
            a.strategy
        )
    })?;
    let (switch_ms, switch_from) = match a.switch_ms {
        Some(ms) => (ms, "--switch-ms".to_string()),
        None => super::switch_cost::measured_fast_switch(target)?.map_or_else(
            || (SwitchTimes::DEFAULT.emc_ms, "assumed".to_string()),
            |(ms, path)| (ms, format!("measured ({path})")),
        ),
    };
    if a.live {
        // Checked before the search: a change after the run would never happen.
        for (flag, change) in [
            ("--rate-change", &a.rate_change),
            ("--slowdown", &a.slowdown),
            ("--infer-slowdown", &a.infer_slowdown),
        ] {
            if let Some(c) = change.as_ref().filter(|c| c.at_s >= a.seconds) {
                bail!(
                    "{flag} at {} s: the run ends at --seconds {} s",
                    c.at_s,
                    a.seconds
                );
            }
        }
        if let Some(c) = a
            .rate_change
            .filter(|c| c.value < super::bounds::MIN_RATE_PER_S)
        {
            bail!(
                "--rate-change to {} requests/s: at least {} (as --rate)",
                c.value,
                super::bounds::MIN_RATE_PER_S
            );
        }
    }
    let mut board = ConcurrentBoard::new(
        spec,
        &a.train,
        &a.infer,
        SwitchTimes::fast(switch_ms),
        a.seed,
    )?;
    if strategy == Strategy::Als {
        let (reference, fit) = reference_models(spec, &a.train, a.seed)?;
        board.set_reference(reference, fit);
    }
    let p = Problem {
        budget_w: a.budget,
        slo_ms: a.slo_ms,
        percentile: a.percentile,
        rate_per_s: a.rate,
        switch_ms,
    };
    let started = Instant::now();
    let choice = search::choose(strategy, &mut board, &p, a.seed);
    let search_s = started.elapsed().as_secs_f64();
    // What both runs report: the problem, the choice and its search.
    let mut value = json!({
        "board": spec.id(),
        "simulated": true,
        "train": a.train,
        "infer": a.infer,
        "strategy": strategy.name(),
        "problem": p,
        "chosen": super::fulcrum_live::chosen(&board, &choice.setting),
        "per_phase": choice.setting.per_phase(),
        "switch_ms_from": switch_from,
        "modes_profiled": choice.modes_profiled,
        "search_s": search_s,
    });
    let mut add = |more: serde_json::Value| {
        if let (Some(v), serde_json::Value::Object(more)) = (value.as_object_mut(), more) {
            v.extend(more);
        }
    };
    if a.live {
        let replanner = super::fulcrum_live::Replanner {
            strategy,
            board: &mut board,
            seed: a.seed,
        };
        let live = super::fulcrum_live::run(
            target,
            replanner,
            &choice.setting,
            &p,
            a.seconds,
            super::fulcrum_live::Changes {
                rate: a.rate_change,
                slowdown: a.slowdown,
                infer_slowdown: a.infer_slowdown,
            },
        )?;
        add(json!({ "live": live, "planned_met": choice.planned.outcome.met(&p) }));
        return out.print(&value, || live_text(&value)).map(|()| 0);
    }
    let o = board.run(&choice.setting, &p, false);
    let started = Instant::now();
    let fixed = oracle::fixed(&mut board, &p);
    let pair = fixed.best.map(|f| oracle::per_phase(&mut board, &p, f));
    let settings_run = fixed.runs + pair.as_ref().map_or(0, |s| s.runs);
    let pair = pair.and_then(|s| s.best);
    let oracle_s = started.elapsed().as_secs_f64();
    let best = [fixed.best, pair].into_iter().flatten().max_by(|x, y| {
        x.outcome
            .throughput_per_s
            .total_cmp(&y.outcome.throughput_per_s)
    });
    let met = o.met(&p);
    add(json!({
        "met": met,
        "met_latency": o.slo_pct_ms <= p.slo_ms,
        "met_budget": o.guard_w <= p.budget_w,
        "throughput_per_s": o.throughput_per_s,
        "latency_p50_ms": o.p50_ms,
        "latency_p99_ms": o.p99_ms,
        "latency_at_percentile_ms": o.slo_pct_ms,
        "mean_power_w": o.mean_w,
        "peak_power_w": o.peak_w,
        "guard_power_w": o.guard_w,
        "switch_share": o.switch_share,
        "planned": {
            "throughput_per_s": choice.planned.outcome.throughput_per_s,
            "latency_at_percentile_ms": choice.planned.outcome.slo_pct_ms,
            "guard_power_w": choice.planned.outcome.guard_w,
        },
        "oracle": {
            "throughput_per_s": best.map(|b| b.outcome.throughput_per_s),
            "feasible": best.is_some(),
            "chosen": best.map(|b| super::fulcrum_live::chosen(&board, &b.setting)),
            "settings_run": settings_run,
            "seconds": oracle_s,
        },
    }));
    out.print(&value, || {
        schedule_text(&board, &value, &choice.setting, best.map(|b| b.setting))
    })?;
    Ok(if met { 0 } else { MISSED })
}

fn live_text(v: &serde_json::Value) -> String {
    let l = &v["live"];
    let f = |k: &str| l[k].as_f64().unwrap_or(f64::NAN);
    let mut replans = String::new();
    for r in l["replans"].as_array().into_iter().flatten() {
        let _ = writeln!(
            replans,
            "  re-planned  at {:.2} s for the {} ({:.1} requests/s, {} W, phase times x{:.2} training, x{:.2} inference): {}",
            r["at_s"].as_f64().unwrap_or(f64::NAN),
            r["why"].as_str().unwrap_or(""),
            r["rate_per_s"].as_f64().unwrap_or(f64::NAN),
            r["budget_w"],
            r["training_scale"].as_f64().unwrap_or(f64::NAN),
            r["inference_scale"].as_f64().unwrap_or(f64::NAN),
            chosen_text(&r["chosen"]),
        );
    }
    let sensor = &l["sensor"];
    let sensed = match sensor["refresh_ms"].as_f64() {
        Some(r) => format!(
            "the INA3221s averaged {} conversion(s), a refresh every {r:.2} ms",
            sensor["samples"]
        ),
        None => format!(
            "the sensors' averaging could not be lowered ({})",
            sensor["not_lowered"].as_str().unwrap_or("")
        ),
    };
    let _ = writeln!(
        replans,
        "  sensors     {sensed}; the shortest phase {:.1} ms, a period {:.1} ms; the guard judges {} ms means (about {:.0} periods)",
        sensor["shortest_phase_ms"].as_f64().unwrap_or(f64::NAN),
        sensor["period_ms"].as_f64().unwrap_or(f64::NAN),
        sensor["guard_window_ms"],
        sensor["periods_per_guard_window"].as_f64().unwrap_or(f64::NAN),
    );
    let verdict = match (l["met_latency"] == true, l["met_budget"].as_bool()) {
        (true, Some(true)) => "met both targets",
        (false, Some(false)) => "MISSED both targets",
        (false, Some(true)) => "MISSED the latency target",
        (true, Some(false)) => "MISSED the power budget",
        (true, None) => "met the latency target (the power is unknown: no window in the ring)",
        (false, None) => "MISSED the latency target (the power is unknown: no window in the ring)",
    };
    let planned = if v["planned_met"] == true {
        ""
    } else {
        " (the search found no setting predicted to meet both: it deployed the one that misses least)"
    };
    format!(
        "schedule on simulated {} (SIMULATED board, real time through the agent): train {}, infer {}\n  \
         chosen      {}\n  \
         verdict     {verdict} as measured{planned}\n  \
         training    {:.1} samples/s ({} minibatches in {:.2} s)\n  \
         requests    {} served of {}, {} late; latency p50 {:.1} ms, p99 {:.1} ms (target {} ms)\n  \
         power       mean {:.2} W; energy train {:.2} J, infer {:.2} J; {} phase-mode switches\n{replans}",
        v["board"].as_str().unwrap_or(""),
        v["train"].as_str().unwrap_or(""),
        v["infer"].as_str().unwrap_or(""),
        chosen_text(&v["chosen"]),
        f("throughput_per_s"),
        l["minibatches"],
        f("seconds"),
        l["served"],
        l["requests"],
        l["late"],
        f("latency_p50_ms"),
        f("latency_p99_ms"),
        v["problem"]["slo_ms"],
        f("mean_power_w"),
        f("train_energy_j"),
        f("infer_energy_j"),
        l["mode_switches"],
    )
}

fn schedule_text(
    board: &ConcurrentBoard,
    v: &serde_json::Value,
    s: &Setting,
    oracle: Option<Setting>,
) -> String {
    let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let describe = |s: &Setting| chosen_text(&super::fulcrum_live::chosen(board, s));
    let mut t = String::new();
    let _ = writeln!(
        t,
        "schedule on simulated {} (SIMULATED, simulated time): train {}, infer {}, {} strategy",
        v["board"].as_str().unwrap_or(""),
        v["train"].as_str().unwrap_or(""),
        v["infer"].as_str().unwrap_or(""),
        v["strategy"].as_str().unwrap_or("")
    );
    let _ = writeln!(t, "  chosen      {}", describe(s));
    let verdict = match (v["met_latency"] == true, v["met_budget"] == true) {
        _ if v["met"] == true => "meets both targets",
        (false, false) => "MISSES both targets",
        (false, true) => "MISSES the latency target",
        (true, false) => "MISSES the power budget",
        (true, true) => "MISSES: the run did not finish",
    };
    let _ = writeln!(
        t,
        "  training    {:.1} samples/s (planned {:.1}); {verdict}",
        f("throughput_per_s"),
        v["planned"]["throughput_per_s"]
            .as_f64()
            .unwrap_or(f64::NAN),
    );
    let _ = writeln!(
        t,
        "  latency     p50 {:.1} ms, p99 {:.1} ms (target {} ms at p{})",
        f("latency_p50_ms"),
        f("latency_p99_ms"),
        v["problem"]["slo_ms"],
        v["problem"]["percentile"]
    );
    let _ = writeln!(
        t,
        "  power       mean {:.1} W, peak {:.1} W (10 ms sensor), guard {:.1} W (1 s; budget {} W)",
        f("mean_power_w"),
        f("peak_power_w"),
        f("guard_power_w"),
        v["problem"]["budget_w"]
    );
    let _ = writeln!(
        t,
        "  switching   {:.2} % of the time, {:.3} ms a switch ({}); {} modes profiled in {:.2} s",
        100.0 * f("switch_share"),
        v["problem"]["switch_ms"].as_f64().unwrap_or(f64::NAN),
        v["switch_ms_from"].as_str().unwrap_or(""),
        v["modes_profiled"],
        f("search_s")
    );
    match oracle {
        Some(o) => {
            let _ = writeln!(
                t,
                "  oracle      {:.1} samples/s: {} ({} settings run, {:.1} s)",
                v["oracle"]["throughput_per_s"].as_f64().unwrap_or(f64::NAN),
                describe(&o),
                v["oracle"]["settings_run"],
                v["oracle"]["seconds"].as_f64().unwrap_or(f64::NAN)
            );
        }
        None => {
            let _ = writeln!(t, "  oracle      no setting meets both targets");
        }
    }
    t
}

/// The sweep's problems for one board and workload pair: budgets as shares of the top
/// mode's training power, latency targets as multiples of its training minibatch plus a
/// single inference, and arrival rates.
fn problems(board: &ConcurrentBoard, quick: bool) -> Vec<Problem> {
    let space = board.space();
    let top = board.truth(space.len() - 1);
    let unit = top.train_ms + top.infer_ms[0];
    let (budgets, slos, rates) = grid(quick);
    let mut v = Vec::new();
    for &b in budgets {
        for &s in slos {
            for &rate_per_s in rates {
                v.push(Problem {
                    budget_w: (b * top.train_w.max(top.infer_w[0])).round(),
                    slo_ms: (s * unit).round(),
                    percentile: 99.0,
                    rate_per_s,
                    switch_ms: eval::DEFAULT_SWITCH_MS,
                });
            }
        }
    }
    v
}

/// Budget shares, latency multiples and rates of [`problems`].
fn grid(quick: bool) -> (&'static [f64], &'static [f64], &'static [f64]) {
    if quick {
        (&[0.55, 0.7, 0.9], &[1.5, 3.0], &[10.0, 40.0])
    } else {
        (&[0.5, 0.7, 0.9], &[1.3, 2.0, 4.0], &[5.0, 30.0])
    }
}

fn problems_per_group(quick: bool) -> usize {
    let (b, s, r) = grid(quick);
    b.len() * s.len() * r.len()
}

/// The reference workload ALS's training predictors are pre-trained on: ResNet-18 (as
/// PowerTrain's), or MobileNetV3 where ResNet-18 is the target itself.
fn reference_of(train: &str) -> &'static str {
    if train == "resnet18" {
        "mobilenetv3"
    } else {
        "resnet18"
    }
}

/// ALS's training predictors for target `train` on `spec`: the `physics` models
/// pre-trained on [`reference_of`]'s profile on the board, at the quick effort of
/// `powertrain eval --quick` (800 reference modes, three members; a few seconds).
fn reference_models(
    spec: &BoardSpec,
    train: &str,
    seed: u64,
) -> Result<(Arc<(Model, Model)>, FitConfig)> {
    let effort = Effort::new(true, seed);
    let models =
        super::train_modes::pretrained(spec, reference_of(train), Method::Physics, &effort)?;
    Ok((Arc::new(models), effort.fit))
}

/// `jpower fulcrum eval`.
pub fn eval(target: &Target, c: &Command, out: &Output) -> Result<()> {
    let Command::Eval(a) = c;
    let spec = board_spec(target, "fulcrum eval")?;
    let other = if spec.name == "xavier-agx" {
        "orin-agx"
    } else {
        "xavier-agx"
    };
    let boards: Vec<&'static BoardSpec> = if a.quick {
        vec![spec]
    } else {
        vec![spec, spec::find(other).expect("a known board")]
    };
    let pairs: &[(&str, &str)] = if a.quick {
        &[
            ("resnet18", "mobilenetv3"),
            ("lstm", "resnet50"),
            ("mobilenetv3", "lstm"),
            ("resnet18", "yolov8n"),
        ]
    } else {
        &[
            ("resnet18", "mobilenetv3"),
            ("resnet18", "yolov8n"),
            ("lstm", "resnet50"),
            ("lstm", "bert-base"),
            ("mobilenetv3", "lstm"),
            ("mobilenetv3", "resnet18"),
        ]
    };
    let started = Instant::now();
    let per_group = problems_per_group(a.quick);
    let total = boards.len() * pairs.len() * per_group;
    let stride = a.limit.map_or(1, |n| (total / n).max(1));
    let mut wanted = Vec::new();
    for (i, s) in boards.iter().enumerate() {
        for (j, pair) in pairs.iter().enumerate() {
            let first = (i * pairs.len() + j) * per_group;
            let keep: Vec<usize> = (0..per_group)
                .filter(|k| (first + k) % stride == 0)
                .collect();
            if !keep.is_empty() {
                let seed = (i * 16 + j) as u64 + 1 + (a.seed << 16);
                wanted.push((*s, *pair, seed, keep));
            }
        }
    }
    // ALS's pre-trained predictors, one per board and reference workload.
    let mut references = HashMap::new();
    for (s, (train, _), ..) in &wanted {
        if let std::collections::hash_map::Entry::Vacant(e) =
            references.entry((s.name, reference_of(train)))
        {
            e.insert(reference_models(s, train, a.seed)?);
        }
    }
    // The boards' truth tables (every mode) take seconds each: built a thread each.
    let groups = std::thread::scope(|scope| {
        let handles: Vec<_> = wanted
            .into_iter()
            .map(|(s, (train, infer), seed, keep)| {
                let (reference, fit) = references[&(s.name, reference_of(train))].clone();
                scope.spawn(move || -> Result<_> {
                    let mut board =
                        ConcurrentBoard::new(s, train, infer, SwitchTimes::DEFAULT, seed)?;
                    board.set_reference(reference, fit);
                    let all = problems(&board, a.quick);
                    let mine: Vec<Problem> = keep.iter().map(|&k| all[k]).collect();
                    Ok((board, mine))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a board thread"))
            .collect::<Result<Vec<_>>>()
    })?;
    let setup_s = started.elapsed().as_secs_f64();
    let report = eval::sweep(groups, 7);
    let value = json!({
        "boards": boards.iter().map(|b| b.id()).collect::<Vec<_>>(),
        "simulated": true,
        "quick": a.quick,
        "seed": a.seed,
        "pairs": pairs,
        "setup_s": setup_s,
        "total_s": started.elapsed().as_secs_f64(),
        "configurations": report.configurations,
        "feasible": report.feasible,
        "strategies": report.strategies,
        "per_phase": report.per_phase,
        "break_even_ms_median": report.break_even_ms_median,
        "oracle_fixed_s": report.oracle_fixed_s,
        "oracle_fixed_runs": report.oracle_fixed_runs,
        "gmd_s": report.gmd_s,
    });
    out.print(&value, || eval_text(&value, &report))
}

fn eval_text(v: &serde_json::Value, r: &Report) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "fulcrum eval on simulated {} (SIMULATED, simulated time): {} configurations, {} feasible",
        v["boards"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| b.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        r.configurations,
        r.feasible
    );
    let _ = writeln!(
        t,
        "  strategy  met %  mean/oracle  p10/oracle  modes  per-phase %"
    );
    for (name, s) in &r.strategies {
        let _ = writeln!(
            t,
            "  {name:<8} {:>6.1}  {:>11.3}  {:>10.3}  {:>5.1}  {:>11.1}",
            s.met_pct,
            s.mean_ratio_to_oracle,
            s.p10_ratio_to_oracle,
            s.mean_modes_profiled,
            s.per_phase_pct
        );
    }
    for p in &r.per_phase {
        let _ = writeln!(
            t,
            "  per-phase pairs at {:>4} ms per switch: won in {:.1} % of the feasible, by {:.1} % on average",
            p.switch_ms, p.won_pct, p.mean_gain_pct
        );
    }
    match r.break_even_ms_median {
        Some(b) => {
            let _ = writeln!(
                t,
                "  break-even switch time (median over the pairs that win at 0.1 ms): {b:.2} ms"
            );
        }
        None => {
            let _ = writeln!(t, "  no per-phase pair wins at 0.1 ms: no break-even time");
        }
    }
    let _ = writeln!(
        t,
        "  oracle (fixed modes): {:.2} s and {:.0} settings run per configuration; GMD search {:.3} s; total {:.1} s",
        r.oracle_fixed_s,
        r.oracle_fixed_runs,
        r.gmd_s,
        v["total_s"].as_f64().unwrap_or(f64::NAN)
    );
    t
}
