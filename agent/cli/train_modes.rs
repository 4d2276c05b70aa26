//! `jpower profile`, `jpower predict` and `jpower optimize`: the PowerTrain workflow on a
//! simulated board (or a replayed profile). Profile a workload on a few modes, fit
//! predictors into a model file, then pick modes from the predicted Pareto front.

use super::Output;
use crate::control::mode::{ModeSpace, PinnedMode};
use crate::gpu::cuda::Cuda;
use crate::gpu::net::{Cpu, Trainer};
use crate::ipc::protocol::{ReplyBody, RequestBody};
use crate::predict::evaluate::{self, margin_w, Effort};
use crate::predict::live::{AgentSource, Workload};
use crate::predict::optimize::{self, Measured, TimePower, Verify};
use crate::predict::profile::{self, ProfileConfig, Replay, Row, Source, Strategy};
use crate::predict::{self, active, Method, ModelFile, MODEL_VERSION};
use crate::sim::sources::{reference_over, SimSource};
use crate::sim::spec::BoardSpec;
use crate::sim::workload::Workload as SimWorkload;
use crate::support::units::Freq;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::fmt::Write;
use std::path::PathBuf;

/// Arguments of `jpower profile`.
#[derive(Debug, clap::Args)]
pub struct ProfileArgs {
    /// The simulated workload (resnet18, mobilenetv3, yolov8n, bert, lstm) [default:
    /// resnet18]; not with --truth (a recorded profile is its own) or --live (the built-in
    /// CNN).
    #[arg(long, value_parser = workload_name)]
    pub workload: Option<String>,
    /// How many modes (stratified over the knobs; see --strategy) [default: 50]; not with
    /// --strategy reference or all, which pick their own.
    #[arg(allow_negative_numbers = true, long, value_parser = super::bounds::count)]
    pub modes: Option<usize>,
    /// `stratified`, `random`, `active` (half stratified, then rounds where the physics
    /// ensemble transferred from --reference is least certain), `reference` (PowerTrain's
    /// grid) or `all`.
    #[arg(long, default_value = "stratified", value_parser = ["stratified", "random", "active", "reference", "all"])]
    pub strategy: String,
    /// With --strategy active: the reference workload whose pre-trained models guide it
    /// [default: resnet18].
    #[arg(long, value_parser = workload_name)]
    pub reference: Option<String>,
    /// With --strategy active: pre-train the guide on 800 reference modes with fewer
    /// epochs (as `powertrain eval --quick`).
    #[arg(long)]
    pub quick: bool,
    /// Minibatches recorded per mode once steady (PowerTrain: 40).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(2..))]
    pub minibatches: u32,
    /// Replay a recorded profile instead of simulating (its rows are the modes; each
    /// minibatch scatters around the recorded time and power by 2 % and 1.5 %, as a
    /// measurement would).
    #[arg(long, value_name = "FILE.csv")]
    pub truth: Option<PathBuf>,
    /// Seed of the simulated measurements' noise, the random and stratified selections,
    /// the guide's training and the live trainer's weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the profile here (CSV that --truth can replay) instead of stdout. A simulated
    /// workload's profile begins with the comment `# jpower: simulated W on BOARD`.
    #[arg(long, value_name = "FILE.csv")]
    pub out: Option<PathBuf>,
    /// Profile in real time through the running agent (a Jetson, --root or --sim board):
    /// the built-in CNN trains while the agent switches modes and meters each minibatch.
    #[arg(long, conflicts_with = "truth")]
    pub live: bool,
    /// With --live: train on the CPU reference instead of the GPU.
    #[arg(long, requires = "live")]
    pub cpu: bool,
    /// With --live: images per minibatch.
    #[arg(long, default_value_t = 32, requires = "live")]
    pub batch: usize,
}

/// Arguments of `jpower predict`.
#[derive(Debug, clap::Args)]
pub struct PredictArgs {
    /// A profile of the target workload (from `jpower profile`).
    #[arg(long, value_name = "FILE.csv")]
    pub profile: PathBuf,
    /// The workload the profile is of (recorded in the model file) [default: the one a
    /// simulated profile's first line names, else `target`]. A simulated profile of
    /// another workload is refused.
    #[arg(long)]
    pub workload: Option<String>,
    /// The reference workload, profiled on PowerTrain's grid for the transfer methods.
    #[arg(long, default_value = "resnet18", value_parser = workload_name)]
    pub reference: String,
    /// physics, powertrain, mlp_scratch or linear.
    #[arg(long, default_value = "physics", value_parser = ["physics", "powertrain", "mlp_scratch", "linear"])]
    pub method: String,
    /// Save the fitted models here.
    #[arg(long, value_name = "MODEL.json")]
    pub save: PathBuf,
    /// Seed of the reference's profile and of the models' training.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Arguments of `jpower optimize`.
#[derive(Debug, clap::Args)]
pub struct OptimizeArgs {
    /// A model file from `jpower predict`.
    #[arg(long, value_name = "MODEL.json")]
    pub model: PathBuf,
    /// The fastest mode whose power stays within this budget, watts.
    #[arg(allow_negative_numbers = true, long, value_name = "W", value_parser = super::bounds::positive)]
    pub budget: Option<f64>,
    /// Run up to ten modes briefly (simulated workload), each the fastest predicted to fit
    /// once corrected by what the runs before it measured, and keep the fastest measured
    /// within the budget. Refused for a model fitted on a recorded or replayed profile, or
    /// on another workload's (its runs would check another truth).
    #[arg(long, requires = "budget")]
    pub verify: bool,
    /// Write the Pareto front, the profiled points and the choice as an SVG plot.
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<PathBuf>,
}

/// The simulated board named by `--sim`.
pub(super) fn spec(sim: Option<&str>) -> Result<&'static BoardSpec> {
    let id = sim.ok_or_else(|| anyhow!("the PowerTrain commands run on a simulated board or a replayed profile: pass --sim BOARD"))?;
    crate::sim::spec::find(id)
        .ok_or_else(|| crate::sim::SimError::UnknownBoard(id.to_string()).into())
}

/// `method`'s models pre-trained on the simulated reference workload `name` on `spec`.
pub(super) fn pretrained(
    spec: &BoardSpec,
    name: &str,
    method: Method,
    effort: &Effort,
) -> Result<(predict::Model, predict::Model)> {
    pretrained_over(spec, &spec.mode_space(), name, method, effort)
}

/// `method`'s models pre-trained on the reference workload `name` run by `spec`'s silicon
/// model over `space` (another board's modes, where the board is not simulated).
fn pretrained_over(
    spec: &BoardSpec,
    space: &ModeSpace,
    name: &str,
    method: Method,
    effort: &Effort,
) -> Result<(predict::Model, predict::Model)> {
    let mut reference = reference_over(spec, space.clone(), workload(name)?, effort.fit.seed);
    Ok(evaluate::pretrained(&mut reference, space, method, effort)?)
}

/// A profile of the board `id` of modes `space` (every row's mode must be one of the
/// board's), and what it was of ([`profile::simulated_source`]; `recorded` if unmarked).
pub(super) fn read_profile(
    path: &std::path::Path,
    space: &ModeSpace,
    id: &str,
) -> Result<(Vec<Row>, String)> {
    let text = crate::support::file_error::read_text(path)?;
    let rows = profile::parse_csv_on(&text, path, profile::CSV_HEADER, (space, id))?;
    let source = profile::simulated_source(&text).unwrap_or_else(|| "recorded".into());
    Ok((rows, source))
}

/// The board a model is fitted for and chosen on: a simulated one (`--sim`), or the one
/// found at `--root` (`/` on a Jetson), with the modes of its own tables.
pub(super) struct ModelBoard {
    /// Its name in model files: the simulated board's id, or the board's key.
    pub id: String,
    /// Its modes.
    pub space: ModeSpace,
    /// The simulated board whose silicon model runs the reference workload: the board
    /// itself under `--sim`; else the simulated board of the same SoC nearest in CPU count,
    /// over this board's modes (`None` where no simulated board shares its SoC).
    pub reference: Option<&'static BoardSpec>,
    /// Whether it is a simulated board (where `optimize --verify` runs its workload).
    pub simulated: bool,
}

impl ModelBoard {
    /// The board `target` names.
    pub(super) fn of(target: &super::Target) -> Result<ModelBoard> {
        if let Some(id) = target.sim.as_deref() {
            let spec = spec(Some(id))?;
            return Ok(ModelBoard {
                id: spec.id(),
                space: spec.mode_space(),
                reference: Some(spec),
                simulated: true,
            });
        }
        let (root, _) = target.root()?;
        let board = crate::board::Board::discover(root)?;
        let soc = |c: &&str| {
            c.starts_with("nvidia,tegra") && board.identity.compatible.iter().any(|b| b == c)
        };
        let reference = crate::sim::spec::BOARDS
            .iter()
            .filter(|s| s.compatible.iter().any(&soc))
            .min_by_key(|s| s.cpus().abs_diff(board.cpus.len()));
        Ok(ModelBoard {
            id: board.key(),
            space: ModeSpace::of(&board),
            reference,
            simulated: false,
        })
    }

    /// `method`'s models pre-trained on the reference workload `name` over this board's
    /// modes.
    fn pretrained(
        &self,
        name: &str,
        method: Method,
        effort: &Effort,
    ) -> Result<(predict::Model, predict::Model)> {
        let spec = self.reference.ok_or_else(|| {
            anyhow!("{}: no simulated board shares its SoC, so there is no reference to pre-train {} on; --method linear or mlp_scratch fit the profile alone", self.id, method.name())
        })?;
        pretrained_over(spec, &self.space, name, method, effort)
    }
}

/// A workload option's value: a simulated workload's name, checked even where the option
/// is not used (it was taken and ignored).
pub(super) fn workload_name(name: &str) -> Result<String, String> {
    workload(name)
        .map(|_| name.to_string())
        .map_err(|e| e.to_string())
}

/// A simulated workload by name.
pub(super) fn workload(name: &str) -> Result<SimWorkload> {
    SimWorkload::from_name(name).ok_or_else(|| {
        anyhow!("unknown workload {name:?}: resnet18, mobilenetv3, yolov8n, bert, lstm")
    })
}

/// The workload `profile` simulates, and `--strategy active` is guided by, unless named.
const DEFAULT_WORKLOAD: &str = "resnet18";

/// `jpower profile`.
pub fn profile(target: &super::Target, a: &ProfileArgs, out: &Output) -> Result<()> {
    super::check_outputs(a.out.as_deref())?;
    // Found by a review: options that would change nothing were ignored without a word.
    if a.quick && a.strategy != "active" {
        return Err(super::usage(
            "--quick shortens --strategy active's pre-training; without it, it would be ignored",
        ));
    }
    if a.reference.is_some() && a.strategy != "active" {
        return Err(super::usage(
            "--reference names the workload that guides --strategy active; without it, it would be ignored",
        ));
    }
    if let (Some(w), true) = (&a.workload, a.truth.is_some() || a.live) {
        return Err(super::usage(&format!(
            "--workload {w} names a simulated workload; {} profiles its own",
            if a.live { "--live" } else { "--truth" }
        )));
    }
    if a.modes.is_some() && matches!(a.strategy.as_str(), "reference" | "all") {
        // Found by a review: the count was ignored without a word.
        return Err(super::usage(&format!(
            "--modes counts the modes --strategy stratified, random or active picks; --strategy {} profiles its own set",
            a.strategy
        )));
    }
    if a.live {
        if a.strategy == "active" {
            bail!(
                "--strategy active runs on simulated boards and replayed profiles, not with --live"
            );
        }
        return profile_live(target, a, out);
    }
    let spec = spec(target.sim.as_deref())?;
    let space = spec.mode_space();
    let mut src: Box<dyn Source> = match &a.truth {
        Some(p) => Box::new(Replay::new(
            &read_profile(p, &space, &spec.id())?.0,
            (0.02, 0.015),
            a.seed,
        )),
        None => Box::new(SimSource::new(
            spec.silicon,
            workload(a.workload_name())?,
            space.clone(),
            a.seed,
        )),
    };
    let available = src.modes().len();
    if let Some(n) = a.modes.filter(|&n| n > available) {
        log::warn!("--modes {n}: the source has {available} modes; profiling them all");
    }
    let (rows, secs) = if a.strategy == "active" {
        let effort = Effort::new(a.quick, a.seed);
        let reference = a.reference.as_deref().unwrap_or(DEFAULT_WORKLOAD);
        let (time, power) = pretrained(spec, reference, Method::Physics, &effort)?;
        let guide = active::Guide {
            time: &time,
            power: &power,
            fit: &effort.fit,
        };
        let mut progress = Progress::new(a, a.mode_count(), "simulated ")?;
        let candidates = src.modes();
        let rows = active::profile_active(&candidates, a.mode_count(), &guide, a.seed, |m| {
            progress.run(src.as_mut(), m)
        })?;
        (rows, progress.secs)
    } else {
        let modes = choose(a, src.as_ref(), &space)?;
        let mut progress = Progress::new(a, modes.len(), "simulated ")?;
        (progress.run(src.as_mut(), &modes), progress.secs)
    };
    report(&spec.id(), &rows, secs, "simulated ", a, out)
}

/// `jpower profile --live`: the built-in CNN on this machine, modes and power from the
/// agent.
fn profile_live(target: &super::Target, a: &ProfileArgs, out: &Output) -> Result<()> {
    let client = target.agent()?.ok_or_else(|| {
        anyhow!("jpower profile --live drives the agent: start `jpower agent` on this board first")
    })?;
    let (root, sim) = target.root()?;
    let board = crate::board::Board::discover(root)?;
    if let (Some(sim), true) = (&sim, a.cpu) {
        sim.set_one_core_busy()?;
    }
    let space = crate::control::mode::ModeSpace::of(&board);
    let result = if a.cpu {
        let trainer = Trainer::new(Cpu, a.batch, a.seed, 0.02)?;
        let src = AgentSource::new(client, trainer, space.clone());
        live_with(src, &space, &board, a, out)
    } else {
        let cuda = Cuda::open(0, board.identity.l4t_major)?;
        let trainer = Trainer::new(cuda.train_backend()?, a.batch, a.seed, 0.02)?;
        let src = AgentSource::new(client, trainer, space.clone());
        live_with(src, &space, &board, a, out)
    };
    if let Some(sim) = &sim {
        sim.set_load(crate::sim::kernel::LoadState::default())?;
    }
    result
}

/// How many sensor refreshes a minibatch should span: the profile lowers the averaging
/// until it does, and refuses when even the fastest refresh gives fewer than
/// [`MIN_REFRESHES_PER_MINIBATCH`] (every mode would record about the power of the
/// readings held over it).
const REFRESHES_PER_MINIBATCH: f64 = 4.0;
/// See [`REFRESHES_PER_MINIBATCH`].
const MIN_REFRESHES_PER_MINIBATCH: f64 = 2.0;

/// Makes the agent's sensors resolve a minibatch of `src`'s workload on `board`: times the
/// fastest of three (after two to warm up), and where the slowest rail refreshes slower
/// than a quarter of it, asks the agent to lower the averaging under the profile's lease
/// (it comes back when the lease ends). Returns a note on what it did; refuses, with the
/// reason, when the agent does not lower it or even its fastest refresh is over half a
/// minibatch.
fn resolve_minibatches<W: Workload>(
    src: &mut AgentSource<W>,
    board: &crate::board::Board,
) -> Result<Option<String>> {
    let refresh_ms = |src: &mut AgentSource<W>| -> Result<f64> {
        let ReplyBody::Status(st) = src.client().request(RequestBody::Status)? else {
            bail!("unexpected reply from the agent to status");
        };
        let ring = crate::telemetry::ring::RingReader::open(std::path::Path::new(&*st.ring_path))?;
        Ok(ring.info.slowest_refresh_s() * 1e3)
    };
    let mut minibatch_ms = f64::INFINITY;
    for i in 0..5 {
        let ms = src
            .time_minibatch()
            .map_err(|e| anyhow!("timing the workload: {e}"))?;
        if i >= 2 {
            minibatch_ms = minibatch_ms.min(ms);
        }
    }
    let before_ms = refresh_ms(src)?;
    let wanted_us = (minibatch_ms * 1e3 / REFRESHES_PER_MINIBATCH) as u32;
    if before_ms * 1e3 <= f64::from(wanted_us) {
        return Ok(None);
    }
    let unresolved = format!(
        "the sensors refresh every {before_ms:.1} ms and a minibatch lasts {minibatch_ms:.1} ms: every mode would record about the same power"
    );
    let channels = board.ina.iter().map(|c| c.enabled).max().unwrap_or(3);
    let samples = crate::board::ina3221::averaging_for(wanted_us, channels);
    let note = super::telemetry::agent_averaging(src.client(), samples)
        .map_err(|e| anyhow!("{unresolved}, and the agent did not lower the averaging: {e:#}"))?;
    let after_ms = refresh_ms(src)?;
    if after_ms * MIN_REFRESHES_PER_MINIBATCH > minibatch_ms {
        bail!("{unresolved}; even at {samples} conversion(s) per reading they refresh every {after_ms:.1} ms: use a larger --batch");
    }
    Ok(Some(format!(
        "{unresolved} at the agent's averaging; {note}"
    )))
}

fn live_with<W: Workload>(
    mut src: AgentSource<W>,
    space: &crate::control::mode::ModeSpace,
    board: &crate::board::Board,
    a: &ProfileArgs,
    out: &Output,
) -> Result<()> {
    if let Some(note) = resolve_minibatches(&mut src, board)? {
        eprintln!("jpower: note: {note}");
    }
    let board = &board.identity.model;
    let modes = choose(a, &src, space)?;
    let mut progress = Progress::new(a, modes.len(), "")?;
    let rows = progress.run(&mut src, &modes);
    let secs = progress.secs;
    let error = src.error.take();
    src.release()
        .map_err(|e| anyhow!("releasing the lease: {e}"))?;
    if let Some(e) = error {
        bail!(
            "profiled {} of {} modes, then: {e}",
            rows.len(),
            modes.len()
        );
    }
    report(board, &rows, secs, "", a, out)
}

impl ProfileArgs {
    /// `--modes`, or its default.
    fn mode_count(&self) -> usize {
        self.modes.unwrap_or(50)
    }

    fn workload_name(&self) -> &str {
        self.workload.as_deref().unwrap_or(DEFAULT_WORKLOAD)
    }
}

/// The modes `--strategy` picks from `src`'s.
fn choose(
    a: &ProfileArgs,
    src: &dyn Source,
    space: &crate::control::mode::ModeSpace,
) -> Result<Vec<PinnedMode>> {
    let all = src.modes();
    Ok(match a.strategy.as_str() {
        "all" => all,
        "reference" => {
            // Of PowerTrain's grid, the modes the source has (a replayed profile's rows).
            let grid: Vec<PinnedMode> = evaluate::reference_grid(space)
                .into_iter()
                .filter(|m| all.contains(m))
                .collect();
            if grid.is_empty() {
                bail!(
                    "--strategy reference: none of the {} modes to profile is on PowerTrain's grid",
                    all.len()
                );
            }
            grid
        }
        "random" => profile::select(&all, Strategy::Random(a.mode_count()), a.seed),
        "stratified" => profile::select(&all, Strategy::Stratified(a.mode_count()), a.seed),
        s => unreachable!("--strategy {s} passed clap's check"),
    })
}

/// Profiling with progress and an ETA on stderr: a bar on a terminal, else a line every
/// tenth of the modes.
struct Progress<'a> {
    cfg: ProfileConfig,
    /// Modes to profile in all, done so far, and the seconds they took.
    total: usize,
    done: usize,
    secs: f64,
    clock: &'a str,
    bar: indicatif::ProgressBar,
}

impl<'a> Progress<'a> {
    fn new(a: &ProfileArgs, total: usize, clock: &'a str) -> Result<Progress<'a>> {
        Ok(Progress {
            cfg: ProfileConfig {
                minibatches: a.minibatches,
                ..ProfileConfig::default()
            },
            total,
            done: 0,
            secs: 0.0,
            clock,
            bar: super::progress(
                Some(total as u64),
                "{bar:40} {pos}/{len} modes, {msg}, ETA {eta}",
                false,
            )?,
        })
    }

    /// Profiles `modes`, returning the rows of those it could measure.
    fn run(&mut self, src: &mut dyn Source, modes: &[PinnedMode]) -> Vec<profile::Row> {
        let mut rows = Vec::new();
        for m in modes {
            if let Some(p) = profile::profile_mode(src, m, &self.cfg) {
                self.secs += p.seconds;
                rows.push(p.row);
            }
            self.done += 1;
            let total = self.total.max(self.done);
            self.bar.set_length(total as u64);
            self.bar.set_position(self.done as u64);
            self.bar.set_message(format!(
                "{:.1} {}min profiled",
                self.secs / 60.0,
                self.clock
            ));
            // Without a terminal (a log), a line every tenth.
            if self.bar.is_hidden() && (self.done % (total / 10).max(1) == 0 || self.done == total)
            {
                let eta = self.secs / self.done as f64 * (total - self.done) as f64 / 60.0;
                eprintln!(
                    "profiled {}/{total} modes, {:.1} {clock}min, ETA {eta:.1} {clock}min",
                    self.done,
                    self.secs / 60.0,
                    clock = self.clock
                );
            }
        }
        if self.done == self.total {
            self.bar.finish_and_clear();
        }
        rows
    }
}

fn report(
    board: &str,
    rows: &[profile::Row],
    secs: f64,
    clock: &str,
    a: &ProfileArgs,
    out: &Output,
) -> Result<()> {
    let mut csv = profile::write_csv(rows);
    if !a.live && a.truth.is_none() {
        csv.insert_str(
            0,
            &format!(
                "{}{} on {board}\n",
                profile::SIMULATED_MARK,
                a.workload_name()
            ),
        );
    }
    match &a.out {
        Some(p) => std::fs::write(p, &csv).with_context(|| format!("writing {}", p.display()))?,
        None if !out.json => print!("{csv}"),
        None => {}
    }
    let minutes = secs / 60.0;
    let (source, workload) = match (a.live, &a.truth) {
        (true, _) => ("live", None),
        (false, Some(_)) => ("replayed", None),
        (false, None) => ("simulated", Some(a.workload_name())),
    };
    out.print(&json!({"board": board, "modes": rows.len(), "live": a.live, "source": source, "workload": workload, "profiling_minutes": minutes, "simulated_minutes": if a.live { None } else { Some(minutes) }, "out": a.out, "rows": rows}), || match &a.out {
        Some(p) => format!("profiled {} modes in {minutes:.1} {clock}minutes into {}\n", rows.len(), p.display()),
        None => String::new(),
    })
}

/// `jpower predict`.
pub fn predict(target: &super::Target, a: &PredictArgs, out: &Output) -> Result<()> {
    let board = ModelBoard::of(target)?;
    let method = Method::from_name(&a.method).expect("--method passed clap's check");
    let same_file = |x: &std::path::Path, y: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(x), std::fs::metadata(y)) {
            (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
            _ => false,
        }
    };
    if same_file(&a.save, &a.profile) {
        bail!(
            "--save {} is the profile it fits: the model would overwrite it",
            a.save.display()
        );
    }
    super::check_outputs([a.save.as_path()])?;
    let (rows, source) = read_profile(&a.profile, &board.space, &board.id)?;
    // The workload a simulated profile names (`simulated W on B`).
    let named = source
        .strip_prefix("simulated ")
        .and_then(|s| s.split(" on ").next());
    let workload = match (a.workload.as_deref(), named) {
        (Some(given), Some(named)) if given != named => bail!(
            "--workload {given}: {} is a profile of the {source}",
            a.profile.display()
        ),
        (Some(given), _) => given.to_string(),
        (None, named) => named.unwrap_or("target").to_string(),
    };
    if rows.len() < super::bounds::FIT_MODES {
        bail!(
            "{}: {} profiled modes; a fit needs at least {}",
            a.profile.display(),
            rows.len(),
            super::bounds::FIT_MODES
        );
    }
    let effort = Effort::new(false, a.seed);
    let fit = effort.fit;
    let bar = super::stages(out.json)?;
    let reference = if method.uses_reference() {
        bar.set_message(format!(
            "profiling and pre-training on the reference {}",
            a.reference
        ));
        Some(board.pretrained(&a.reference, method, &effort)?)
    } else {
        None
    };
    let reference = reference.as_ref().map(|(t, p)| (t, p));
    bar.set_message(format!("fitting on {} profiled modes", rows.len()));
    let (time, power) = predict::fit_time_and_power(method, &rows, reference, &fit)?;
    bar.finish_and_clear();
    let file = ModelFile {
        version: MODEL_VERSION,
        board: board.id.clone(),
        workload,
        method,
        time,
        power,
        profiled: rows.iter().map(|r| r.mode).collect(),
        source: Some(source),
    };
    file.save(&a.save)?;
    out.print(&json!({"model": a.save, "board": board.id, "method": method.name(), "profiled_modes": rows.len(), "workload": file.workload, "source": file.source}), || {
        format!("fitted {} on {} profiled modes into {}\n", method.name(), rows.len(), a.save.display())
    })
}

/// `jpower optimize`.
pub fn optimize(target: &super::Target, a: &OptimizeArgs, out: &Output) -> Result<()> {
    super::check_outputs(a.svg.as_deref())?;
    let board = ModelBoard::of(target)?;
    if a.verify && !board.simulated {
        bail!("--verify runs the model's workload on a simulated board (--sim); on a Jetson, profile the modes you would choose with `jpower profile --live`");
    }
    let file = ModelFile::load(&a.model, Some(&board.id))?;
    let modes: Vec<PinnedMode> = board.space.iter().collect();
    let (pt, pp) = predict::time_and_power(&file.time, &file.power, &modes);
    let points = optimize::points(&pt, &pp);
    let margin = |p: &TimePower| margin_w(file.method, pt[p.mode], pp[p.mode]);
    // The front of the modes a choice may take: a prediction clamped to the model's bounds
    // (an extrapolation no margin bounds) is never chosen, so on the front it would dominate
    // the choices (found by a review: a narrow profile's front began at the clamp floor).
    let supported: Vec<TimePower> = (points.iter().copied())
        .filter(|p| margin(p).is_finite())
        .collect();
    let extrapolated = points.len() - supported.len();
    let front = optimize::pareto(if supported.is_empty() {
        &points
    } else {
        &supported
    });
    // How a prediction is held against the budget, in words.
    let held = |p: &TimePower| match margin(p) {
        m if m.is_infinite() => "an extrapolation no margin bounds".to_string(),
        m if m > 0.0 => format!("with the model's margin of {m:.2} W"),
        _ => format!(
            "on the prediction alone ({} keeps no margin)",
            file.method.name()
        ),
    };
    let chosen = match a.budget {
        None => None,
        Some(b) => {
            let src = SimWorkload::from_name(&file.workload)
                .zip(board.reference.filter(|_| board.simulated))
                .map(|(w, spec)| SimSource::new(spec.silicon, w, board.space.clone(), 7));
            let measure = |p: &TimePower| {
                let mut s = src.clone().expect("checked before use");
                profile::profile_mode(&mut s, &modes[p.mode], &ProfileConfig::default()).map_or(
                    Measured {
                        time_ms: f64::NAN,
                        power_w: f64::NAN,
                    },
                    |r| Measured {
                        time_ms: r.row.time_ms,
                        power_w: r.row.power_w,
                    },
                )
            };
            if a.verify && src.is_none() {
                bail!("--verify runs the model's workload on the simulated board: {:?} is not a simulated workload", file.workload);
            }
            // Files from before the source was kept trust the workload's name.
            let simulated = format!("simulated {} on {}", file.workload, board.id);
            if let Some(source) = file
                .source
                .as_ref()
                .filter(|s| a.verify && **s != simulated)
            {
                bail!("--verify runs the {simulated}, but the model was fitted on a profile {}: the runs would check another truth than the one it learnt", if source == "recorded" { "recorded or replayed".to_string() } else { format!("of the {source}") });
            }
            let knobs: Vec<optimize::LogCoords> = modes.iter().map(optimize::log_coords).collect();
            let verify = Verify {
                run: &measure,
                knobs: &knobs,
            };
            optimize::choose(&points, b, &margin, a.verify.then_some(&verify))
        }
    };
    if let Some(path) = &a.svg {
        let plot = super::pareto_plot::ParetoPlot {
            title: format!(
                "{}{}{}: {}",
                if board.simulated { "SIMULATED " } else { "" },
                board.id,
                if file.source.as_deref() == Some("recorded") {
                    ", recorded profile"
                } else {
                    ""
                },
                file.workload
            ),
            all: &points,
            front: &front,
            profiled: file
                .profiled
                .iter()
                .filter_map(|m| modes.iter().position(|x| x == m))
                .map(|i| points[i])
                .collect(),
            budget_w: a.budget,
            runs: chosen.as_ref().map_or(&[][..], |c| &c.runs[..]),
            chosen: chosen.as_ref().map(|c| &c.mode),
        };
        std::fs::write(path, super::pareto_plot::render(&plot)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let knobs = |p: &TimePower| {
        let m = modes[p.mode];
        format!(
            "cores {} cpu {} gpu {} emc {}",
            m.cores,
            Freq(m.cpu_hz),
            Freq(m.gpu_hz),
            Freq(m.emc_hz)
        )
    };
    if let (Some(b), Some(c)) = (a.budget, &chosen) {
        if !c.fits {
            let measured = match c.runs.len() {
                0 => String::new(),
                n => format!(" ({n} verification run(s), none within the budget)"),
            };
            bail!(
                "no mode fits {b} W; the lowest predicted power is {:.2} W, {}, at {} ({:.1} ms){measured}",
                c.mode.power_w,
                held(&c.mode),
                knobs(&c.mode),
                c.mode.time_ms
            );
        }
    }
    let mode_json = |p: &TimePower| {
        let mut m = json!(modes[p.mode]);
        m["time_ms"] = json!(p.time_ms);
        m["power_w"] = json!(p.power_w);
        // What a budget must leave above the predicted power (a review: only the text
        // said it, so a script could not check a choice against its budget).
        m["margin_w"] = json!(Some(margin(p)).filter(|m| m.is_finite()));
        m
    };
    let runs = chosen.as_ref().map_or(&[][..], |c| &c.runs[..]);
    let runs_json: Vec<Value> = runs
        .iter()
        .map(|(p, m)| json!({"mode": mode_json(p), "measured": {"time_ms": m.time_ms, "power_w": m.power_w}}))
        .collect();
    let measured = |p: &TimePower| runs.iter().find(|(r, _)| r.mode == p.mode).map(|(_, m)| *m);
    out.print(
        &json!({"board": board.id, "modes": modes.len(), "extrapolated": extrapolated, "front": front.iter().map(mode_json).collect::<Vec<_>>(),
                "budget_w": a.budget, "chosen": chosen.as_ref().map(|c| mode_json(&c.mode)),
                "chosen_measured": chosen.as_ref().and_then(|c| measured(&c.mode)),
                "verified": a.verify, "runs": runs_json}),
        || {
            let beyond = match (extrapolated, supported.is_empty()) {
                (0, _) => String::new(),
                (n, false) => format!(" ({n} predicted beyond the model's data are left off: none is ever chosen)"),
                (n, true) => format!(" (all {n} predicted beyond the model's data: none is ever chosen)"),
            };
            let mut t = format!("{} modes predicted; Pareto front of {} modes (fastest first){beyond}:\n", modes.len(), front.len());
            for p in front.iter().take(FRONT_SHOWN) {
                let _ = writeln!(t, "  {:>8.1} ms {:>6.2} W  {}", p.time_ms, p.power_w, knobs(p));
            }
            if front.len() > FRONT_SHOWN {
                let _ = writeln!(t, "  ... {} more (--json lists them all)", front.len() - FRONT_SHOWN);
            }
            for (i, (p, m)) in runs.iter().enumerate() {
                let _ = writeln!(t, "verify run {}: {}: predicted {:.1} ms {:.2} W, measured {:.1} ms {:.2} W", i + 1, knobs(p), p.time_ms, p.power_w, m.time_ms, m.power_w);
            }
            if let (Some(b), Some(c)) = (a.budget, &chosen) {
                let p = &c.mode;
                let how = match measured(p) {
                    Some(m) => format!("measured {:.1} ms, {:.2} W by a run", m.time_ms, m.power_w),
                    None if a.verify => format!("no run fit: chosen by the predictions corrected by the runs, {}", held(p)),
                    None => held(p),
                };
                let _ = writeln!(t, "fastest within {b} W: {} ({:.1} ms, {:.2} W predicted; {how})", knobs(p), p.time_ms, p.power_w);
            }
            t
        },
    )
}

/// How many rows of the Pareto front the text shows; `--json` lists every one.
const FRONT_SHOWN: usize = 12;
