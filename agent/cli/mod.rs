//! The `jpower` command line: one clap item per command, each in its own module, all
//! opening the board the same way ([`Target::open`]) so that every command first
//! recovers what an earlier process left unfinished. Errors are one line and a
//! non-zero exit; `--json` prints one JSON object instead of text, and an error as
//! `{"error": ..., "kind": ...}` on stdout beside the line on stderr.

mod bench;
mod bench_predict;
mod bounds;
mod characterize;
mod characterize_report;
mod dashboard;
mod demo;
mod fulcrum;
mod fulcrum_live;
mod generate;
mod gpu;
mod interrupt;
mod modes;
mod pagoda;
mod pagoda_eval;
mod pagoda_plan;
mod pareto_plot;
mod powertrain;
mod residency;
mod roofline;
mod set;
mod sim_tools;
mod status;
mod switch_cost;
mod telemetry;
mod train_modes;

use crate::board::sysfs::Root;
use crate::board::Board;
use crate::control::preset::Presets;
use crate::control::state::Owner;
use crate::control::{Controller, Peek};
use crate::sim::SimBoard;
use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};

/// Power-mode control and power telemetry for NVIDIA Jetson boards.
#[derive(Debug, Parser)]
#[command(name = "jpower", version = version(), about)]
pub struct Cli {
    /// Which board the command acts on.
    #[command(flatten)]
    pub target: Target,
    /// Print one JSON object instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// More log output on stderr (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The crate version, with the git revision when the build was given one in
/// `JPOWER_GIT_REV` (`.ci/run` sets it from `git rev-parse`; build.rs is not involved).
fn version() -> &'static str {
    match option_env!("JPOWER_GIT_REV") {
        Some(rev) if !rev.is_empty() => {
            Box::leak(format!("{} ({rev})", env!("CARGO_PKG_VERSION")).into_boxed_str())
        }
        _ => env!("CARGO_PKG_VERSION"),
    }
}

/// Which board a command acts on.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// A simulated board: orin-agx (= orin-agx@r35), orin-agx@r36, xavier-agx, xavier-nx,
    /// nano, orin-nano.
    #[arg(long, global = true, value_name = "BOARD", conflicts_with = "root")]
    pub sim: Option<String>,
    /// A directory laid out like a board's filesystem (`/` on a Jetson, the default).
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Where state files and simulated boards live [default: $JPOWER_RUNTIME_DIR, else the
    /// agent config's runtime_dir, else /run/jpower if writable or an agent answers there,
    /// else $XDG_RUNTIME_DIR/jpower].
    #[arg(long, global = true, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
    /// An nvpmodel configuration to read presets from [default: the board's /etc/nvpmodel.conf].
    #[arg(long, global = true, value_name = "FILE")]
    pub nvpmodel: Option<PathBuf>,
    /// The agent's socket [default: the config's, else <runtime-dir>/jpower.sock]. When an
    /// agent serves it, `set` and `restore` go through its leases, and `status`, `watch`
    /// and `energy` read from it.
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

/// Commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent: own the board, sample it, serve the socket (see docs/protocol.md).
    Agent(AgentArgs),
    /// Board, SoC, L4T, current mode, knobs found and missing, rails and their power now.
    Status,
    /// Presets and the size of the mode space (--all lists every mode).
    Modes(modes::Args),
    /// Apply a preset or knob values (any subset), printing what changed and the switch time.
    Set(set::Args),
    /// Restore the settings saved before jpower's first write to the board.
    Restore(RestoreArgs),
    /// Measure what a switch of each knob costs (time to the clock settled, energy) and
    /// keep it in the board's profile, for `jpower schedule`.
    SwitchCost(switch_cost::Args),
    /// The tour: discover a (simulated) board, list presets, switch modes, watch the rails.
    Demo(demo::Args),
    /// Live per-rail power (V, A, W, fresh values per second, age), or --csv rows.
    Watch(telemetry::WatchArgs),
    /// Run a command and print its duration, mean power and energy per rail.
    Energy(telemetry::EnergyArgs),
    /// Read a telemetry ring (any process can; see docs/telemetry-ring.md).
    #[command(subcommand)]
    Ring(telemetry::RingCommand),
    /// How much of a dataset's files the page cache holds (mincore); --evict drops them.
    Residency(residency::Args),
    /// Profile a training workload over power modes (simulated time, or a replayed profile).
    Profile(train_modes::ProfileArgs),
    /// The SIGMETRICS'23 training study: power modes, minibatch sizes, loader workers,
    /// storage media and cache state, with repeats, in simulated time (--sim) or on the
    /// agent's board in real time; CSV, JSON and an HTML report, resumable.
    Characterize(characterize::Args),
    /// Fit time and power predictors to a profile (PowerTrain and its baselines).
    Predict(train_modes::PredictArgs),
    /// The Pareto front of predicted (time, power), and the fastest mode under a budget.
    Optimize(train_modes::OptimizeArgs),
    /// Predict training time and power over power modes (PowerTrain) and score it.
    #[command(subcommand)]
    Powertrain(powertrain::Command),
    /// Train the built-in CNN on synthetic data (GPU, or the CPU reference with --cpu),
    /// with time, power and energy per minibatch.
    Train(gpu::TrainArgs),
    /// Compile every CUDA kernel with NVRTC for the Jetson architectures and check
    /// registers and spills with ptxas.
    Kernels(gpu::KernelsArgs),
    /// Time and energy rooflines per power mode (CUDA microbenchmarks; a simulated
    /// board's GPU model with --sim).
    Roofline(roofline::Args),
    /// A model's FLOPs and DRAM bytes per layer (Pagoda's analytical model): a built-in
    /// model, an ONNX file or a JSON layer list.
    Flops(pagoda::ModelArgs),
    /// Predict a model's latency and energy on every mode from its counts and each mode's
    /// rooflines, and pick the least energy within a latency bound.
    PlanInference(pagoda::PlanArgs),
    /// Pagoda's planner scored on a simulated board.
    #[command(subcommand)]
    Pagoda(PagodaCommand),
    /// Train and serve inference at once under a power budget and a latency target:
    /// search the mode(s) and the inference batch size, and schedule (simulated time).
    Schedule(fulcrum::ScheduleArgs),
    /// Fulcrum's strategies scored against the exhaustive oracle (simulated time).
    #[command(subcommand)]
    Fulcrum(fulcrum::Command),
    /// Simulated boards.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::Command),
    /// The man pages and shell completions, generated from this command line (packaging).
    #[command(subcommand)]
    Generate(generate::Command),
}

/// Arguments of `jpower restore`.
#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// Only finish what a dead process left (a killed switch, a dead agent's or lease's
    /// state), keeping a persistent mode: what the systemd unit's ExecStopPost runs.
    #[arg(long)]
    pub if_crashed: bool,
}

/// Arguments of `jpower agent`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The configuration file [default: /etc/jpower/jpower.toml if it exists].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `jpower pagoda ...`.
#[derive(Debug, Subcommand)]
pub enum PagodaCommand {
    /// For each zoo model and batch 1, 4, 16, 64: the calibrated plan against the
    /// exhaustive optimum of the simulated board's own inference model (--sim BOARD).
    Eval(pagoda_eval::EvalArgs),
}

/// `jpower sim ...`.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// List the simulated boards.
    List,
    /// Write a simulated board's tree (sysfs, procfs, /etc) as files into DIR.
    Export {
        /// The simulated board (`orin-agx`, `orin-agx@r36`, ...; see `jpower sim list`).
        board: String,
        /// A new or empty directory to write the tree into.
        dir: PathBuf,
    },
    /// Change the --sim board behind jpower's back as NVIDIA's nvpmodel would: apply
    /// preset N of its /etc/nvpmodel.conf through the simulated kernel.
    Nvpmodel {
        /// The preset's id.
        #[arg(short = 'm', value_name = "N")]
        mode: u32,
    },
    /// Change the --sim board behind jpower's back as jetson_clocks would: every online
    /// cluster's and the GPU's min raised to its max.
    JetsonClocks,
    /// Print a ground-truth profile of every mode (CSV for `--truth`) of a board modelled
    /// unlike the simulator: `contention` (loaders take DRAM bandwidth from the GPU),
    /// `launch` (CPU-clock-bound kernel launches, stepped voltages, more cores slower) or
    /// `throttle` (a power limit pulls the GPU clock down).
    Truth {
        /// The kind of board.
        #[arg(long, value_parser = ["contention", "launch", "throttle"])]
        kind: String,
        /// The board (`orin-agx` or `xavier-agx`) [default: the `--sim` board, else
        /// orin-agx].
        #[arg(long)]
        board: Option<String>,
        /// The unit: its leakage and efficiencies vary with the seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// With `--kind throttle`: the power limit, W [default: 32 on Orin AGX, 24 on
        /// Xavier AGX].
        #[arg(long, value_name = "W")]
        limit: Option<f64>,
    },
    /// Load the --sim board as training WORKLOAD does at its running clocks (the rails
    /// follow), printing one minibatch's simulated time and the board's true module power;
    /// without --workload, idle. What a program that trains on a simulated board paces by.
    Load {
        /// The workload (resnet18, mobilenetv3, yolov8n, bert, lstm) [default: idle].
        #[arg(long)]
        workload: Option<String>,
    },
}

/// The agent's configuration as the CLI reads it ([`crate::daemon::Config::load_for_cli`]):
/// a file the agent would refuse is a warning here, once, so that a typo in an agent-only
/// key never stops `status`, `set` or the crash `restore`, and its valid `socket` and
/// `runtime_dir` still lead to the agent.
pub fn agent_config() -> &'static crate::daemon::Config {
    static CONFIG: std::sync::OnceLock<crate::daemon::Config> = std::sync::OnceLock::new();
    CONFIG.get_or_init(|| {
        let (config, error) = crate::daemon::Config::load_for_cli(std::path::Path::new(
            crate::daemon::config::DEFAULT_PATH,
        ));
        if let Some(e) = error {
            log::warn!("{e} (the agent would refuse this file; the CLI takes its socket, runtime_dir and budget_window_ms where they are valid)");
        }
        config
    })
}

impl Target {
    /// The runtime directory: `--runtime-dir`, `$JPOWER_RUNTIME_DIR`, the agent config's
    /// `runtime_dir` (the default config file's), else the default, so the CLI and the
    /// agent always agree.
    pub fn runtime_dir(&self) -> PathBuf {
        self.runtime_dir_or(|| agent_config().runtime_dir.clone())
    }

    /// [`Target::runtime_dir`] with `configured` for the config's `runtime_dir`.
    fn runtime_dir_or(&self, configured: impl FnOnce() -> Option<PathBuf>) -> PathBuf {
        if self.runtime_dir.is_none() && std::env::var_os("JPOWER_RUNTIME_DIR").is_none() {
            if let Some(dir) = configured() {
                return dir;
            }
        }
        crate::support::runtime::runtime_dir(self.runtime_dir.as_deref())
    }

    /// The board's files, simulated or not.
    pub fn root(&self) -> Result<(Root, Option<SimBoard>)> {
        match (&self.sim, &self.root) {
            (Some(id), _) => {
                let sim = SimBoard::open(id, &self.runtime_dir())?;
                Ok((sim.root(), Some(sim)))
            }
            (None, Some(dir)) => {
                anyhow::ensure!(dir.is_dir(), "--root {}: not a directory", dir.display());
                Ok((Root::host(dir), None))
            }
            (None, None) => Ok((Root::host("/"), None)),
        }
    }

    /// The agent's socket: `--socket`, else the configuration's, else the runtime
    /// directory's.
    pub fn agent_socket(&self) -> PathBuf {
        crate::daemon::socket_path(self.socket.as_deref(), agent_config(), &self.runtime_dir())
    }

    /// A connection to a running agent, if one serves the socket.
    pub fn agent(&self) -> Result<Option<crate::ipc::client::Client>> {
        let path = self.agent_socket();
        if !path.exists() {
            return Ok(None);
        }
        match crate::ipc::client::Client::connect(
            &path,
            crate::ipc::codec::Encoding::Bincode,
            "jpower cli",
        ) {
            Ok((c, _)) => Ok(Some(c)),
            Err(crate::ipc::client::ClientError::Connect { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Discovers the board and takes control of it (recovering first).
    pub fn open(&self) -> Result<(Controller, Option<SimBoard>)> {
        let (root, sim) = self.root()?;
        let board = Board::discover(root)?;
        let runtime_dir = self.runtime_dir();
        let chosen = self.runtime_dir.is_none()
            && std::env::var_os("JPOWER_RUNTIME_DIR").is_none()
            && agent_config().runtime_dir.is_none();
        if chosen && self.sim.is_none() && self.root.is_none() {
            let system = Path::new(crate::support::runtime::SYSTEM_RUNTIME_DIR);
            if let Some(e) = crate::support::runtime::hidden_state(&runtime_dir, system) {
                anyhow::bail!(e);
            }
        }
        let controller = Controller::open(board, &runtime_dir, Owner::cli())?;
        // A process that died holding a simulated board left its load there (the training
        // load of `train` or `switch-cost`): on a board the load ends with the process.
        if let Some(sim) = sim.as_ref().filter(|_| !controller.recovered().is_empty()) {
            sim.set_load(crate::sim::kernel::LoadState::default())?;
        }
        Ok((controller, sim))
    }

    /// The presets for `board`: `--nvpmodel FILE`, else the board's `/etc/nvpmodel.conf`
    /// (its links followed inside the board's root: L4T links it to
    /// `/etc/nvpmodel/nvpmodel_<module>.conf`); what the file sets that the board lacks is
    /// logged as warnings.
    pub fn presets(&self, board: &Board) -> Result<Option<Presets>> {
        let path = match &self.nvpmodel {
            Some(p) => p.clone(),
            None => {
                let p = board
                    .root
                    .confined(crate::board::paths::NVPMODEL_CONF)
                    .with_context(|| format!("resolving {}", crate::board::paths::NVPMODEL_CONF))?;
                if !p.exists() {
                    return Ok(None);
                }
                p
            }
        };
        let presets = Presets::load(&path, board)?;
        for w in &presets.warnings {
            log::warn!("{w}");
        }
        Ok(Some(presets))
    }

    /// The presets for a command that works without them (`status`, `watch`, `agent`):
    /// a file that does not parse is a warning naming its line, and none are used.
    pub fn presets_or_warn(&self, board: &Board) -> Option<Presets> {
        self.presets(board).unwrap_or_else(|e| {
            log::warn!("{e:#}: going on without presets (`jpower modes` shows this error)");
            None
        })
    }
}

/// `jpower agent`: the board the options name, with its configuration's runtime directory
/// where neither `--runtime-dir` nor `$JPOWER_RUNTIME_DIR` names one.
fn agent(target: &Target, a: &AgentArgs) -> Result<()> {
    crate::daemon::handle_signals();
    let config = crate::daemon::Config::load(a.config.as_deref())?;
    let mut target = target.clone();
    let runtime_dir = target.runtime_dir_or(|| config.runtime_dir.clone());
    target.runtime_dir = Some(runtime_dir.clone());
    // A simulated board's handle lives as long as the agent.
    let (root, sim) = target.root()?;
    let board = Board::discover(root.clone())?;
    // A process that died holding a simulated board left its load there: the agent's
    // start recovers the board, and the load ends with it, as `Target::open` does.
    if let Some(sim) = &sim {
        if !Peek::read(Board::discover(root)?, &runtime_dir)?
            .pending
            .is_empty()
        {
            sim.set_load(crate::sim::kernel::LoadState::default())?;
        }
    }
    let presets = target.presets_or_warn(&board);
    crate::daemon::run(crate::daemon::Options {
        config,
        board,
        presets,
        runtime_dir,
        socket: target.socket.clone(),
    })
}

/// An error and its causes on one line, each cause once: a message that already quotes
/// its cause (`cannot read F: No such file or directory`) is not followed by it again.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// A command line that parses but asks for what cannot be done: exit status 2 and kind
/// `usage`, as clap's own errors.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UsageError(String);

/// A [`UsageError`].
fn usage(message: &str) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// The kind of an error, for scripts (`--json`): named after the first error in its
/// chain that one of jpower's layers defines, `usage` for the command line, else `error`.
fn kind(e: &anyhow::Error) -> &'static str {
    type Is = fn(&(dyn std::error::Error + 'static)) -> bool;
    const KINDS: &[(&str, Is)] = &[
        ("usage", |e| e.is::<UsageError>()),
        ("board", |e| e.is::<crate::board::BoardError>()),
        ("sysfs", |e| e.is::<crate::board::sysfs::SysfsError>()),
        // A preset file that does not parse is the nvpmodel layer's error, which the
        // presets' error holds transparently (a review found it reported as `preset`).
        ("nvpmodel", |e| {
            e.is::<crate::board::nvpmodel::NvpError>()
                || matches!(
                    e.downcast_ref::<crate::control::preset::PresetError>(),
                    Some(crate::control::preset::PresetError::Parse(_))
                )
        }),
        ("preset", |e| e.is::<crate::control::preset::PresetError>()),
        ("mode", |e| {
            e.is::<crate::control::mode::ModeError>() || e.is::<crate::control::plan::PlanError>()
        }),
        ("control", |e| e.is::<crate::control::ControlError>()),
        ("state", |e| e.is::<crate::control::state::StateError>()),
        ("telemetry", |e| {
            e.is::<crate::telemetry::sampler::SamplerError>()
                || e.is::<crate::telemetry::ring::RingError>()
        }),
        ("agent", |e| {
            e.is::<crate::ipc::client::ClientError>() || e.is::<crate::ipc::codec::CodecError>()
        }),
        ("gpu", |e| e.is::<crate::gpu::GpuError>()),
        ("model", |e| {
            e.is::<crate::predict::ModelFileError>()
                || e.is::<crate::predict::regress::RegressError>()
        }),
        ("sim", |e| e.is::<crate::sim::SimError>()),
        ("file", |e| {
            e.is::<crate::support::file_error::FileError>()
                || e.is::<crate::predict::pagoda::onnx::OnnxError>()
        }),
        ("io", |e| e.is::<std::io::Error>()),
    ];
    e.chain()
        .find_map(|c| KINDS.iter().find(|(_, is)| is(c)).map(|(k, _)| *k))
        .unwrap_or("error")
}

/// Reports an error: one line on stderr and, with `--json`, `{"error", "kind"}` on
/// stdout, so that a script reading stdout always gets one JSON object.
fn report(json: bool, message: &str, kind: &str) {
    eprintln!("jpower: error: {message}");
    if json {
        println!("{}", serde_json::json!({"error": message, "kind": kind}));
    }
}

/// Runs the CLI; returns the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // Before parsing succeeds, `--json` is looked for among the options (not in
            // a command `energy` runs, after `--`).
            let json = std::env::args()
                .take_while(|a| a != "--")
                .any(|a| a == "--json");
            if json && e.use_stderr() {
                // The error's first paragraph, on one line (a missing argument is named
                // on the line after the message).
                let text = e.render().to_string();
                let line = text
                    .lines()
                    .take_while(|l| !l.trim().is_empty())
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join(" ");
                report(true, line.trim_start_matches("error: "), "usage");
                return 2;
            }
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    init_logger(cli.verbose);
    // `--json` is global, so clap cannot see it conflict wherever it is placed.
    if let Command::Watch(w) = &cli.command {
        if w.csv && cli.json {
            report(
                true,
                "the argument '--csv' cannot be used with '--json': one stdout cannot hold both",
                "usage",
            );
            return 2;
        }
    }
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            let kind = kind(&e);
            report(cli.json, &one_line(&e), kind);
            if kind == "usage" {
                2
            } else {
                1
            }
        }
    }
}

fn run(cli: &Cli) -> Result<i32> {
    let out = Output { json: cli.json };
    match &cli.command {
        Command::Energy(a) => return telemetry::energy(&cli.target, a, &out),
        Command::Schedule(a) => return fulcrum::schedule(&cli.target, a, &out),
        _ => {}
    }
    dispatch(cli, &out).map(|()| 0)
}

fn dispatch(cli: &Cli, out: &Output) -> Result<()> {
    match &cli.command {
        Command::Watch(a) => telemetry::watch(&cli.target, a, out),
        Command::Energy(_) => unreachable!("handled in run"),
        Command::Ring(c) => telemetry::ring(c, out),
        Command::Residency(a) => residency::run(a, out),
        Command::Powertrain(c) => powertrain::run(&cli.target, c, out),
        Command::Profile(a) => train_modes::profile(&cli.target, a, out),
        Command::Characterize(a) => characterize::run(&cli.target, a, out),
        Command::Predict(a) => train_modes::predict(&cli.target, a, out),
        Command::Optimize(a) => train_modes::optimize(&cli.target, a, out),
        Command::Agent(a) => agent(&cli.target, a),
        Command::Status => status::run(&cli.target, out),
        Command::Modes(a) => modes::run(&cli.target, a, out),
        Command::Set(a) => set::run(&cli.target, a, out),
        Command::SwitchCost(a) => switch_cost::run(&cli.target, a, out),
        Command::Restore(a) => set::restore(&cli.target, a.if_crashed, out),
        Command::Demo(a) => demo::run(&cli.target, a, out),
        Command::Bench(c) => bench::run(&cli.target, c, out),
        Command::Generate(c) => generate::run(c, out),
        Command::Roofline(a) => roofline::run(&cli.target, a, out),
        Command::Train(a) => gpu::train(&cli.target, a, out),
        Command::Kernels(a) => gpu::kernels(a, out),
        Command::Flops(a) => pagoda::flops(a, out),
        Command::PlanInference(a) => pagoda::plan_inference(&cli.target, a, out),
        Command::Pagoda(PagodaCommand::Eval(a)) => pagoda_eval::eval(&cli.target, a, out),
        Command::Schedule(_) => unreachable!("handled in run"),
        Command::Fulcrum(c) => fulcrum::eval(&cli.target, c, out),
        Command::Sim(SimCommand::List) => {
            let boards: Vec<_> = crate::sim::spec::BOARDS
                .iter()
                .map(|b| serde_json::json!({"id": b.id(), "model": b.model, "release": b.release.tag()}))
                .collect();
            out.print(&serde_json::json!({ "boards": boards }), || {
                crate::sim::spec::BOARDS
                    .iter()
                    .map(|b| format!("{:<14} {}\n", b.id(), b.model))
                    .collect()
            })
        }
        Command::Sim(SimCommand::Nvpmodel { mode }) => sim_tools::nvpmodel(&cli.target, *mode, out),
        Command::Sim(SimCommand::JetsonClocks) => sim_tools::jetson_clocks(&cli.target, out),
        Command::Sim(SimCommand::Load { workload }) => {
            sim_tools::load(&cli.target, workload.as_deref(), out)
        }
        Command::Sim(SimCommand::Truth {
            kind,
            board,
            seed,
            limit,
        }) => {
            // One board named twice (`orin-agx` and `orin-agx@r35`) is one board; a
            // release `--sim` names is kept (its clock tables differ).
            let id = |name: &str| crate::sim::spec::find(name).map(|s| s.id());
            let board = match (board.as_deref(), cli.target.sim.as_deref()) {
                (Some(b), Some(s)) if id(b) != id(s) => {
                    return Err(usage(&format!(
                        "--board {b} and --sim {s} name two boards: give one"
                    )))
                }
                (Some(b), _) => b,
                (None, s) => s.unwrap_or("orin-agx"),
            };
            sim_tools::truth(kind, board, *seed, *limit, out)
        }
        Command::Sim(SimCommand::Export { board, dir }) => {
            let spec = crate::sim::export(board, dir)?;
            out.print(&serde_json::json!({"board": spec.id(), "dir": dir}), || {
                format!(
                    "wrote the {} tree ({}) to {}\n",
                    spec.model,
                    spec.id(),
                    dir.display()
                )
            })
        }
    }
}

/// Checks, before a long run, that the files it will write can be written: an existing
/// regular file is opened for writing (not truncated), a new one created and removed again
/// (permission bits say nothing to root, nor of a read-only mount or a path through a
/// file). A FIFO, a device or a dangling link is left untouched: opening one has effects (a
/// FIFO's reader sees its end). Otherwise the error names the file now rather than after
/// the run.
pub fn check_outputs<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Result<()> {
    use std::fs::OpenOptions;
    for path in paths {
        let cannot = || format!("cannot write {}", path.display());
        match (std::fs::metadata(path), std::fs::symlink_metadata(path)) {
            (Ok(m), _) if m.is_dir() => bail!("cannot write {}: it is a directory", path.display()),
            (Ok(m), _) if m.is_file() => {
                OpenOptions::new()
                    .write(true)
                    .open(path)
                    .with_context(cannot)?;
            }
            (Err(e), Err(_)) if e.kind() == std::io::ErrorKind::NotFound => {
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .with_context(cannot)?;
                std::fs::remove_file(path)
                    .with_context(|| format!("removing {} after checking it", path.display()))?;
            }
            (Err(e), Err(_)) => return Err(e).with_context(cannot),
            _ => {}
        }
    }
    Ok(())
}

/// Text or JSON output.
pub struct Output {
    /// Whether to print JSON (`--json`) rather than text.
    pub json: bool,
}

impl Output {
    /// Prints `value` as JSON with `--json`, else the text `text` builds.
    pub fn print(&self, value: &serde_json::Value, text: impl FnOnce() -> String) -> Result<()> {
        use std::io::Write;
        let body = if self.json {
            format!("{}\n", serde_json::to_string_pretty(value)?)
        } else {
            text()
        };
        let mut stdout = std::io::stdout().lock();
        match stdout
            .write_all(body.as_bytes())
            .and_then(|()| stdout.flush())
        {
            // Whoever read the output stopped reading (`| head`): not an error of ours.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            r => Ok(r.context("writing to stdout")?),
        }
    }
}

/// A progress bar on stderr, hidden under `--json` (`quiet`) or when stderr is not a
/// terminal: `len` steps, or with `None` a spinner whose message names the stage.
pub(super) fn progress(len: Option<u64>, template: &str, quiet: bool) -> Result<ProgressBar> {
    use std::io::IsTerminal;
    let bar = match len {
        _ if quiet || !std::io::stderr().is_terminal() => ProgressBar::hidden(),
        Some(n) => ProgressBar::new(n),
        None => {
            let bar = ProgressBar::new_spinner();
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        }
    };
    bar.set_style(ProgressStyle::with_template(template).context("progress style")?);
    Ok(bar)
}

/// The spinner of a command made of long stages (fitting, pre-training, profiling).
pub(super) fn stages(quiet: bool) -> Result<ProgressBar> {
    progress(None, "{spinner} {msg} ({elapsed})", quiet)
}

/// A temporary directory on tmpfs when there is one (benchmarks, the demo's exports).
pub fn scratch_dir(prefix: &str) -> Result<PathBuf> {
    let base = ["/dev/shm", "/run/shm"]
        .iter()
        .map(Path::new)
        .find(|p| p.is_dir())
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("{prefix}-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

struct StderrLogger {
    level: log::LevelFilter,
}

impl log::Log for StderrLogger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= self.level
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!(
                "jpower: {}: {}",
                r.level().as_str().to_ascii_lowercase(),
                r.args()
            );
        }
    }
    fn flush(&self) {}
}

fn init_logger(verbose: u8) {
    use log::LevelFilter;
    let from_env = match std::env::var("JPOWER_LOG").ok().as_deref() {
        Some("error") => Some(LevelFilter::Error),
        Some("warn") => Some(LevelFilter::Warn),
        Some("info") => Some(LevelFilter::Info),
        Some("debug") => Some(LevelFilter::Debug),
        Some("off") => Some(LevelFilter::Off),
        _ => None,
    };
    let from_flags = match verbose {
        0 => None,
        1 => Some(LevelFilter::Info),
        _ => Some(LevelFilter::Debug),
    };
    // `-v` raises what JPOWER_LOG sets (the unit sets info; `agent -vv` in an override
    // was held at it; the diff's review).
    let level = match (from_env, from_flags) {
        (Some(e), Some(f)) => e.max(f),
        (e, f) => e.or(f).unwrap_or(LevelFilter::Warn),
    };
    // Under systemd stderr is the journal's stream: send each record to the journal with
    // its priority (error 3, warn 4, info 6, debug 7), so `journalctl -p warning -u jpower`
    // filters, instead of lines that all land at the stream's one priority.
    if systemd_journal_logger::connected_to_journal() {
        if let Ok(journal) = systemd_journal_logger::JournalLog::new() {
            if journal
                .with_syslog_identifier("jpower".to_owned())
                .install()
                .is_ok()
            {
                log::set_max_level(level);
                return;
            }
        }
    }
    let logger = Box::leak(Box::new(StderrLogger { level }));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_os_cause_is_printed_once() {
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        let e = anyhow::Error::new(crate::support::file_error::FileError::Io {
            path: "/x.toml".into(),
            source: io,
        });
        let line = one_line(&e);
        assert_eq!(line.matches("os error 2").count(), 1, "{line}");
        let wrapped = anyhow::anyhow!("inner").context("outer");
        assert_eq!(one_line(&wrapped), "outer: inner");
    }
}
