//! The agent's state behind one lock: the controller, the lease ([`lease`]), the requested
//! values, the budget guard. Every request that reads or changes the board goes through
//! here.

use super::guard::Guard;
use super::sensors::{Sensors, SensorsError};
use super::Config;
use crate::board::ina3221;
use crate::board::Values;
use crate::control::mode::{KnobRequest, ModeError, ModeSpace};
use crate::control::plan;
use crate::control::preset::{PresetError, Presets};
use crate::control::state::Owner;
use crate::control::{ControlError, Controller, Switch};
use crate::ipc::events::EventSender;
use crate::ipc::protocol::*;
use crate::support::clock::monotonic_ns;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod caps_overlay;
mod lease;

use lease::{with_pid, Expiry};

/// Who is asking: a connection and its peer's credentials.
#[derive(Debug, Clone)]
pub struct Peer {
    pub client: u64,
    pub pid: u32,
    pub uid: u32,
    pub name: String,
    /// Whether the peer may control (root, or the control group).
    pub may_control: bool,
}

/// The lease on the board.
#[derive(Debug)]
struct Lease {
    client: u64,
    holder: Holder,
    /// What was requested before the lease: restored when it ends.
    prior: Values,
    timeout: Option<Duration>,
    expires: Option<Instant>,
}

/// The connection number of a lease adopted from a mode left before the agent started
/// ([`Core::adopt_left_mode`]): no connection has it.
const LEFT_MODE_CLIENT: u64 = u64::MAX;

/// The agent's state.
pub struct Core {
    pub controller: Controller,
    presets: Option<Presets>,
    lease: Option<Lease>,
    /// What the holder (or the agent's default) asked for, before the guard's caps.
    requested: Values,
    guard: Guard,
    /// Knobs changed behind jpower's back during the current lease.
    external: Vec<usize>,
    /// Where to send events for each connection.
    events: HashMap<u64, EventSender>,
    config: Config,
    /// The sampler, restarted when the sensors' averaging changes.
    sensors: Sensors,
    /// Set by `shutdown`: later requests are refused, so nothing changes the board after
    /// the final restore.
    stopping: bool,
    /// Whether the guard's window was widened beyond `budget_window_ms` (warned of once,
    /// [`Core::guard_window`]).
    widened_window: bool,
    /// Whether the guard has no reading of the total because a rail of it fails to read
    /// (logged when it starts and ends, exported as `jpower_guard_blind`).
    guard_blind: bool,
    /// The connection whose persistent lease the state file names ([`Core::sync_state_owner`]).
    owner_client: Option<u64>,
    /// The capped knobs (a mask) and the request the caps overlay saved for them
    /// ([`caps_overlay`]), while one is saved.
    caps_overlay: Option<(u64, Values)>,
    /// What a status names and never changes: the board's model and SoC, the ring's path
    /// (shared with each reply, so that building one allocates nothing).
    names: Names,
}

/// The texts of [`Core::names`].
struct Names {
    board: Arc<str>,
    soc: Arc<str>,
    ring_path: Arc<str>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").field("lease", &self.lease).finish()
    }
}

/// The knob values of preset `name` (the configuration's `default_mode`) over `from`:
/// checked at start before the agent writes anything, applied by [`Core::apply_default`].
pub fn default_target(
    board: &crate::board::Board,
    presets: Option<&Presets>,
    name: &str,
    from: &Values,
) -> anyhow::Result<Values> {
    let presets = presets
        .ok_or_else(|| anyhow::anyhow!("the board has no nvpmodel file to take the preset from"))?;
    let mode = presets.find(name)?.mode.clone();
    Ok(plan::target(board, &mode, from)?)
}

/// A mode error in the protocol's words: the field the client sent and its unit
/// (`cpu_khz` in kHz), the nearest values as plain numbers it can send back, and `snap`
/// rather than the CLI's `--snap`.
fn socket_wording(e: &ModeError) -> String {
    match e {
        ModeError::NotInTable {
            domain,
            requested_hz,
            nearest,
        } => {
            let (field, scale, unit) = match *domain {
                "CPU" => ("cpu_khz", 1000, "kHz"),
                "GPU" => ("gpu_hz", 1, "Hz"),
                _ => ("emc_hz", 1, "Hz"),
            };
            let nearest: Vec<String> = nearest.iter().map(|f| (f / scale).to_string()).collect();
            format!(
                "{field} {} is not in this board's {domain} table; nearest: {} ({unit}){SNAP_ADVICE}",
                requested_hz / scale,
                nearest.join(", ")
            )
        }
        ModeError::Cores {
            requested,
            available,
        } => format!(
            "cores {requested}: this board has {available} CPUs (1..={available}; cpu0 always stays online)"
        ),
        e => e.to_string(),
    }
}

/// Why the requested values could not be put in force.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The switch failed (and was rolled back).
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The switch changed the sensors' averaging, and the sampler did not restart for it.
    #[error("the board switched, but {0}")]
    Sensors(#[from] SensorsError),
}

fn err(code: ErrorCode, message: impl Into<String>) -> ReplyBody {
    ReplyBody::Error {
        code,
        message: message.into(),
    }
}

impl Core {
    /// The state of an agent that controls `controller`'s board.
    pub fn new(
        controller: Controller,
        presets: Option<Presets>,
        config: Config,
        sensors: Sensors,
    ) -> Core {
        let requested = controller.current().clone();
        let identity = &controller.board().identity;
        let names = Names {
            board: identity.model.as_str().into(),
            soc: format!("{:?}", identity.soc).to_lowercase().into(),
            ring_path: sensors.path().display().to_string().into(),
        };
        let mut guard = Guard::default();
        guard.set_budget(config.budget_w);
        Core {
            controller,
            presets,
            lease: None,
            requested,
            guard,
            external: Vec::new(),
            events: HashMap::new(),
            config,
            sensors,
            stopping: false,
            widened_window: false,
            guard_blind: false,
            owner_client: None,
            caps_overlay: None,
            names,
        }
    }

    /// Registers where a connection's events go.
    pub fn connect(&mut self, client: u64, events: EventSender) {
        self.events.insert(client, events);
    }

    fn notify_holder(&self, body: ReplyBody) {
        if let Some(l) = &self.lease {
            if let Some(tx) = self.events.get(&l.client) {
                tx.send(body);
            }
        }
    }

    /// Applies the requested values limited by the guard, and restarts the sampler if
    /// they changed the sensors' averaging.
    fn apply_effective(&mut self) -> Result<Switch, ApplyError> {
        let target = self.guard.clamp(self.controller.board(), &self.requested);
        self.sync_caps_overlay(&target, false);
        let sw = self.controller.apply_values(&target)?;
        self.sync_caps_overlay(&target, true);
        if self
            .sensors
            .follow(self.controller.board(), self.controller.current())?
        {
            log::info!(
                "INA3221 averaging changed: the sampler restarted at {:.0} Hz",
                self.sensors.rate_hz()
            );
        }
        Ok(sw)
    }

    /// Holds the mode a process left before the agent started (`jpower set` without an
    /// agent, or a stopped agent's persistent lease: a state file owned by `left_by`) as a
    /// persistent lease named after it, as if that process had set it through the agent:
    /// it holds after a clean stop again, and its end (`release`, a takeover's release,
    /// `jpower restore`) brings back the baseline saved before jpower's first write, with
    /// the agent's `default_mode` applied over it when it has one, and the agent's own
    /// sensor averaging when it set one (`own_averaging`; with `keep`, the baseline's).
    pub fn adopt_left_mode(
        &mut self,
        left_by: &Owner,
        default_mode: Option<&str>,
        own_averaging: bool,
    ) -> anyhow::Result<()> {
        let Some(state) = self.controller.state() else {
            return Ok(());
        };
        let (mut prior, _) = state.values(self.controller.board(), self.controller.current());
        if let Some(name) = default_mode {
            prior = default_target(self.controller.board(), self.presets.as_ref(), name, &prior)?;
        }
        // The sensors' averaging is the agent's own request where it made one, not the
        // left mode's.
        for (i, k) in self.controller.board().knobs.iter().enumerate() {
            if own_averaging
                && matches!(
                    k.kind,
                    crate::board::KnobKind::InaSamples(_)
                        | crate::board::KnobKind::InaUpdateInterval(_)
                )
            {
                prior[i] = self.requested[i];
            }
        }
        self.lease = Some(Lease {
            client: LEFT_MODE_CLIENT,
            holder: Holder {
                client: left_by.name.as_str().into(),
                pid: left_by.pid,
                uid: nix::unistd::getuid().as_raw(),
                lease: LeaseKind::Persistent,
            },
            prior,
            timeout: None,
            expires: None,
        });
        self.sync_state_owner();
        log::info!(
            "holding the mode {} left as a persistent lease: it ends with `jpower restore` or `release`",
            with_pid(&left_by.name, left_by.pid)
        );
        Ok(())
    }

    /// Applies a preset at start, as the agent's own persistent setting.
    pub fn apply_default(&mut self, name: &str) -> anyhow::Result<()> {
        self.requested = default_target(
            self.controller.board(),
            self.presets.as_ref(),
            name,
            &self.requested,
        )?;
        let sw = self.apply_effective()?;
        log::info!("applied default_mode {name}: {} write(s)", sw.steps.len());
        Ok(())
    }

    /// Applies raw knob values as the agent's own (sensor averaging at start).
    pub fn apply_own(&mut self, values: Values) -> anyhow::Result<()> {
        self.requested = values;
        self.apply_effective()?;
        Ok(())
    }

    /// Handles one request from `peer`.
    pub fn handle(&mut self, peer: &Peer, body: RequestBody) -> ReplyBody {
        if self.stopping {
            return err(ErrorCode::Failed, "the agent is stopping");
        }
        match body {
            RequestBody::Hello { version, .. } if !(OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) => {
                err(ErrorCode::Version, format!("protocol version {version} is not supported; this agent speaks {OLDEST_PROTOCOL_VERSION} to {PROTOCOL_VERSION} (docs/protocol.md says what changed)"))
            }
            RequestBody::Hello { version, .. } => ReplyBody::Hello {
                version,
                agent: format!("jpower {}", env!("CARGO_PKG_VERSION")),
                board: self.controller.board().identity.model.clone(),
            },
            RequestBody::Modes => ReplyBody::Modes {
                presets: self.presets.as_ref().map_or_else(Vec::new, |p| {
                    p.presets
                        .iter()
                        .map(|pr| PresetInfo {
                            id: pr.id,
                            name: pr.name.clone(),
                            default: pr.id == p.default_id,
                        })
                        .collect()
                }),
                space_size: ModeSpace::of(self.controller.board()).len() as u64,
            },
            RequestBody::SetMode { mode, lease, timeout_ms } => self.set_mode(peer, &mode, lease, Expiry::Asked(timeout_ms), log::Level::Info),
            RequestBody::Renew if self.holds_lease(peer.client) => {
                self.heartbeat(peer.client);
                ReplyBody::Ok
            }
            RequestBody::Renew => err(ErrorCode::NotFound, "you hold no lease to renew"),
            RequestBody::Release => self.release(peer),
            RequestBody::SetAveraging { samples } => self.set_averaging(peer, samples),
            RequestBody::SetBudget { watts } => {
                if !peer.may_control {
                    return err(ErrorCode::Forbidden, "setting a budget needs control permission (root or the control group)");
                }
                if watts.is_some_and(|w| !(w > 0.0 && w.is_finite())) {
                    return err(ErrorCode::InvalidMode, "a budget is a positive number of watts");
                }
                self.guard.set_budget(watts);
                // Blind or not is judged anew against the new budget, at the next tick.
                self.guard_blind = false;
                let shown = watts.map_or("none".to_string(), |w| format!("{w} W"));
                log::info!("budget set to {shown} by {} (pid {}, uid {})", peer.name, peer.pid, peer.uid);
                if let Err(e) = self.apply_effective() {
                    return err(ErrorCode::Failed, e.to_string());
                }
                ReplyBody::Budget { watts }
            }
            RequestBody::Status
            | RequestBody::Telemetry { .. }
            | RequestBody::Activity
            | RequestBody::MinibatchBegin { .. }
            | RequestBody::MinibatchEnd { .. }
            | RequestBody::MinibatchPhase { .. }
            | RequestBody::MinibatchTotals
            | RequestBody::SchedulePlan(_)
            | RequestBody::ScheduleGate { .. }
            | RequestBody::ScheduleSubmit
            | RequestBody::ScheduleStatus
            | RequestBody::Subscribe { .. } => err(ErrorCode::BadRequest, "handled by the connection"),
        }
    }

    fn set_mode(
        &mut self,
        peer: &Peer,
        mode: &ModeRequest,
        kind: LeaseKind,
        expiry: Expiry,
        level: log::Level,
    ) -> ReplyBody {
        if let Some(refused) = self.refuse_lease(peer, kind, "setting a mode") {
            return refused;
        }
        self.detect_external();
        let board = self.controller.board();
        let resolved = match mode {
            ModeRequest::Preset { name } => match self.presets.as_ref().map(|p| p.find(name)) {
                Some(Ok(p)) => Ok(p.mode.clone()),
                // A preset there but not settable is no unknown one.
                Some(Err(e @ PresetError::Unusable { .. })) => {
                    return err(ErrorCode::InvalidMode, e.to_string())
                }
                Some(Err(e)) => return err(ErrorCode::NotFound, e.to_string()),
                None => return err(ErrorCode::NotFound, "this board has no nvpmodel presets"),
            },
            ModeRequest::Knobs {
                cores,
                cpu_khz,
                gpu_hz,
                emc_hz,
                snap,
            } => KnobRequest {
                cores: cores.map(|c| c as usize),
                cpu_hz: cpu_khz.map(|v| v.saturating_mul(1000)),
                gpu_hz: *gpu_hz,
                emc_hz: *emc_hz,
                snap: *snap,
            }
            .resolve(board),
        };
        let target = match resolved.map_err(|e| socket_wording(&e)).and_then(|m| {
            plan::target(board, &m, &self.requested).map_err(|e| match e {
                plan::PlanError::Mode(e) => socket_wording(&e),
                e => e.to_string(),
            })
        }) {
            Ok(t) => t,
            Err(e) => return err(ErrorCode::InvalidMode, e),
        };
        match self.lease_and_apply(peer, target, kind, expiry, ("set_mode", level)) {
            Ok(sw) => ReplyBody::ModeSet {
                writes: sw.steps.len() as u32,
                switch_us: sw.elapsed_ns as f64 / 1000.0,
                lease: kind,
                capped: self.guard.clamp(self.controller.board(), &self.requested)
                    != self.requested,
            },
            Err(e) => err(ErrorCode::Failed, e.to_string()),
        }
    }

    /// `set_averaging`: every INA3221 averages `samples` conversions, under the caller's
    /// lease (its own kind if it holds one, else a session lease), so the averaging from
    /// before comes back when the lease ends; the sampler restarts at the new refresh.
    fn set_averaging(&mut self, peer: &Peer, samples: u32) -> ReplyBody {
        // Permission and the board's holder first, as for `set_mode`, then the value.
        let kind = self
            .lease
            .as_ref()
            .filter(|l| l.client == peer.client)
            .map_or(LeaseKind::Session, |l| l.holder.lease);
        if let Some(refused) = self.refuse_lease(peer, kind, "changing the sensors' averaging") {
            return refused;
        }
        if let Err(e) = ina3221::check_samples(samples) {
            return err(ErrorCode::InvalidMode, e);
        }
        let averaging_knob =
            |k: &crate::board::Knob| matches!(k.kind, crate::board::KnobKind::InaSamples(_));
        if !self.controller.board().knobs.iter().any(averaging_knob) {
            return err(
                ErrorCode::InvalidMode,
                "this board's power monitors have no averaging knob (an L4T 32 IIO driver): its refresh is fixed",
            );
        }
        self.detect_external();
        let target =
            ina3221::averaging_count_target(self.controller.board(), &self.requested, samples);
        match self.lease_and_apply(
            peer,
            target,
            kind,
            Expiry::Kept,
            ("set_averaging", log::Level::Info),
        ) {
            Ok(_) => {
                let ring = self.sensors.ring().get();
                ReplyBody::Averaging {
                    samples,
                    refresh_us: ring
                        .info
                        .rails
                        .iter()
                        .map(|r| r.refresh_us)
                        .max()
                        .unwrap_or(0),
                    rate_hz: self.sensors.rate_hz(),
                }
            }
            Err(e) => err(ErrorCode::Failed, e.to_string()),
        }
    }

    /// Switches the GPU and EMC clocks for a scheduler's phase under `peer`'s lease (its
    /// kind kept). With `take_lease` (the plan that names the phase modes) a session lease
    /// is taken as `set_mode` would; without (a phase change), a `peer` that no longer
    /// holds the lease is refused, so a scheduler never takes a lease for a client that
    /// left. The budget guard's caps apply as to any mode. `Err`: the refusal's code and
    /// message, as `set_mode` gives them.
    pub fn switch_phase(
        &mut self,
        peer: &Peer,
        gpu_hz: u64,
        emc_hz: u64,
        take_lease: bool,
    ) -> Result<(), (ErrorCode, String)> {
        let held = self
            .lease
            .as_ref()
            .filter(|l| l.client == peer.client)
            .map(|l| l.holder.lease);
        let kind = match (held, take_lease) {
            (Some(kind), _) => kind,
            (None, true) => LeaseKind::Session,
            (None, false) => {
                return Err((
                    ErrorCode::NotFound,
                    format!("{} no longer holds the lease", peer.name),
                ))
            }
        };
        let knobs = ModeRequest::Knobs {
            cores: None,
            cpu_khz: None,
            gpu_hz: Some(gpu_hz),
            emc_hz: Some(emc_hz),
            snap: false,
        };
        // A scheduler's phase switches come many a second: logged at debug, the plan's
        // own (taking the lease) at info like any set_mode.
        let level = if take_lease {
            log::Level::Info
        } else {
            log::Level::Debug
        };
        match self.set_mode(peer, &knobs, kind, Expiry::Kept, level) {
            ReplyBody::ModeSet { .. } => Ok(()),
            // Phase modes have no `snap`: they name exact table values.
            ReplyBody::Error { code, message } => Err((code, message.replace(SNAP_ADVICE, ""))),
            other => Err((ErrorCode::Failed, format!("unexpected reply {other:?}"))),
        }
    }

    /// Periodic work: lease expiry and holder death, changes behind jpower's back, the guard.
    pub fn tick(&mut self) {
        let now = Instant::now();
        if let Some(l) = &self.lease {
            if l.holder.lease == LeaseKind::Session {
                if l.expires.is_some_and(|e| now >= e) {
                    self.notify_holder(ReplyBody::LeaseEnded {
                        reason: "it expired without renewal".into(),
                    });
                    self.end_lease("it expired without renewal");
                } else if !crate::support::runtime::process_alive(l.holder.pid) {
                    self.end_lease("the client's process died");
                }
            }
        }
        self.detect_external();
        let window = self.guard_window();
        let (mean, good, left_out) = self.mean_power(window);
        // Blind when the whole window is failed reads, seeing again once there is a mean: a
        // single failed read in a window of two samples is no blindness to report.
        let budget = self.guard.budget_w.is_some();
        if !self.guard_blind && budget && good == 0 && left_out > 0 {
            self.guard_blind = true;
            log::warn!(
                "budget guard blind: a rail of the total fails to read, so there is no reading of it; the guard holds its {} cap(s) until the rail answers",
                self.guard.caps_in_force()
            );
        } else if self.guard_blind && mean.is_some() {
            self.guard_blind = false;
            log::info!("budget guard: the total reads again");
        }
        let effective = self.controller.current().clone();
        if let Some(mean) = mean {
            let hysteresis = self.config.budget_hysteresis_w;
            if let Some(step) = self.guard.tick(
                self.controller.board(),
                &effective,
                mean,
                window,
                hysteresis,
                now,
            ) {
                log::warn!("budget guard: {step}");
                if let Err(e) = self.apply_effective() {
                    log::error!("budget guard could not apply its cap: {e}");
                }
                self.notify_holder(ReplyBody::Guard {
                    step,
                    module_w: mean,
                    budget_w: self.guard.budget_w.unwrap_or(0.0),
                });
            }
        }
    }

    fn detect_external(&mut self) {
        let Ok(actual) = self.controller.board().read_knobs() else {
            return;
        };
        let knobs = &self.controller.board().knobs;
        let changed: Vec<usize> = actual
            .iter()
            .zip(self.controller.current())
            .enumerate()
            .filter(|(i, (a, c))| a != c && knobs[*i].kind.watched())
            .map(|(i, _)| i)
            .collect();
        if changed.is_empty() {
            return;
        }
        let paths: Vec<String> = changed
            .iter()
            .map(|&i| self.controller.board().knobs[i].path.display().to_string())
            .collect();
        log::warn!(
            "changed behind jpower's back (nvpmodel? jetson_clocks?): {}",
            paths.join(", ")
        );
        if self.lease.is_some() {
            self.external.extend(&changed);
        }
        for &i in &changed {
            self.requested[i] = actual[i];
        }
        // The request the caps' overlay keeps follows (a knob outside the caps' reach
        // changed, or one they hold down).
        let effective = self.guard.clamp(self.controller.board(), &self.requested);
        self.sync_caps_overlay(&effective, true);
        // A min lowered to equal its max is the kernel's clamp of a max written below it
        // (seen in this tick or an earlier one), not a write: taken as a baseline it would
        // pin the clock (DVFS off) for good.
        let board = self.controller.board();
        let clamped: Vec<usize> = plan::pairs(board)
            .filter(|&(min, max)| {
                changed.contains(&min)
                    && actual[min] == actual[max]
                    && self.controller.current()[min] > actual[min]
            })
            .map(|(min, _)| min)
            .collect();
        let adopted: Vec<usize> = changed
            .iter()
            .copied()
            .filter(|i| !clamped.contains(i))
            .collect();
        // The knobs as read above, not read again: a change landing between two reads
        // would be taken in unreported (the diff's review).
        self.controller.observed(actual);
        if !self.config.restore_overrides_external {
            self.controller.adopt_as_baseline(&adopted);
        }
        self.notify_holder(ReplyBody::ExternalChange { paths });
    }

    /// The guard's window: `budget_window_ms`, widened to 2.1 sample periods where the
    /// sampler runs slower (the board's averaging, or a client's), since a mean needs two
    /// samples (a review found the guard silent with 400 ms at 2.3 Hz). Warned of once: a
    /// client's averaging comes and goes.
    fn guard_window(&mut self) -> Duration {
        let configured = Duration::from_millis(self.config.budget_window_ms);
        let least = Duration::from_nanos(self.sensors.ring().get().info.period_ns) * 21 / 10;
        if least <= configured || self.guard.budget_w.is_none() {
            return configured;
        }
        let why = format!(
            "budget guard: budget_window_ms = {} holds fewer than two samples at the sampler's rate: judging {} ms means",
            self.config.budget_window_ms,
            least.as_millis()
        );
        if !std::mem::replace(&mut self.widened_window, true) {
            log::warn!("{why}");
        }
        least
    }

    /// The mean of the budgeted total over the last `window`, from the ring without
    /// copying it (integer microwatts add exactly in an f64, in any order).
    /// The mean of the total over `window` (of at least two samples), the samples it is of,
    /// and how many were left out for a failed read of a rail of the total.
    fn mean_power(&self, window: Duration) -> (Option<f64>, usize, usize) {
        let now = monotonic_ns();
        let pick = |s: &crate::telemetry::Sample| match self.config.budget_total {
            super::config::BudgetTotal::Module => s.module_uw,
            super::config::BudgetTotal::Input => s.input_uw,
        };
        let ring = self.sensors.ring().get();
        // A sample whose total holds a rail's failed read is no reading of the total: left
        // out, so that a guard whose rails stop answering holds its caps, blind, rather
        // than judging a stale value.
        let info = &ring.info;
        let in_total = match (self.config.budget_total, info.input_rail) {
            (super::config::BudgetTotal::Module, None) => info.module_mask,
            (_, Some(i)) => 1 << i,
            (super::config::BudgetTotal::Input, None) => 0,
        };
        let (sum, n, left_out) = ring
            .newest_since(now.saturating_sub(window.as_nanos() as u64))
            .fold((0.0, 0usize, 0usize), |(sum, n, out), s| {
                if s.failed() & in_total != 0 {
                    (sum, n, out + 1)
                } else {
                    (sum + f64::from(pick(&s)), n + 1, out)
                }
            });
        ((n >= 2).then(|| sum / n as f64 * 1e-6), n, left_out)
    }

    /// A status reply as the core knows it (an error once stopping); `module_w` is the
    /// caller's to read from the ring, outside the lock.
    pub fn status(&self) -> ReplyBody {
        if self.stopping {
            return err(ErrorCode::Failed, "the agent is stopping");
        }
        ReplyBody::Status(self.board_status())
    }

    /// The board's state as `status` reports it (the power is the caller's to read from
    /// the ring), even while stopping.
    pub fn board_status(&self) -> Status {
        let b = self.controller.board();
        let v = self.controller.current();
        let stats = self.controller.stats();
        Status {
            board: self.names.board.clone(),
            soc: self.names.soc.clone(),
            simulated: b.root.is_simulated(),
            online_cpus: b
                .cpus
                .iter()
                .filter(|(_, k)| k.is_none_or(|k| v[k] == 1))
                .map(|(c, _)| *c as u32)
                .collect(),
            cpu_khz: b
                .clusters
                .iter()
                .map(|c| [v[c.min], v[c.max], c.cur.read_u64().unwrap_or(0)])
                .collect(),
            gpu_hz: b
                .gpu
                .as_ref()
                .map(|g| [v[g.min], v[g.max], g.cur.read_u64().unwrap_or(0)]),
            emc_cap_hz: b
                .emc
                .as_ref()
                .and_then(|e| (v[e.cap] != e.uncapped_raw()).then_some(v[e.cap])),
            holder: self.lease.as_ref().map(|l| l.holder.clone()),
            budget_w: self.guard.budget_w,
            guard: self.guard.describe(),
            module_w: None,
            ring_path: self.names.ring_path.clone(),
            last_switch_us: (stats.count > 0).then(|| stats.last_ns as f64 / 1000.0),
        }
    }

    /// For each CPU cluster, whether all its CPUs are offline (its running clock is the one
    /// it last ran at).
    pub fn clusters_offline(&self) -> Vec<bool> {
        let (b, v) = (self.controller.board(), self.controller.current());
        b.clusters
            .iter()
            .map(|c| !crate::control::plan::cluster_online(b, &c.cpus, v))
            .collect()
    }

    /// The preset the knobs hold (id, name), if one does.
    pub fn preset(&self) -> Option<(u32, String)> {
        let p = self
            .presets
            .as_ref()?
            .matching(self.controller.board(), self.controller.current())?;
        Some((p.id, p.name.clone()))
    }

    /// The budget guard.
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// Whether the budget guard has no reading of the total: a rail of it fails to read.
    pub fn guard_blind(&self) -> bool {
        self.guard_blind
    }

    /// Clean shutdown: session leases are restored; a persistent lease stays and its
    /// state becomes a CLI-style state that holds until `jpower restore`; with no lease
    /// the board returns to its baseline. Then the ring is marked closed.
    pub fn shutdown(&mut self) {
        self.stopping = true;
        let persistent = self
            .lease
            .as_ref()
            .is_some_and(|l| l.holder.lease == LeaseKind::Persistent);
        if persistent {
            // The state file names the holder ([`Core::sync_state_owner`]): the next agent
            // holds its mode as the same.
            self.sync_state_owner();
            self.lift_caps_at_stop();
            log::info!("stopping with a persistent lease: its mode holds until `jpower restore`");
        } else {
            // A change since the last tick is someone else's too: kept, not restored over.
            self.detect_external();
            self.end_lease("the agent stopped");
            match self.controller.restore() {
                Ok(_) => log::info!("stopped: the board is back at its baseline"),
                Err(e) => log::error!("stopping: restoring the baseline failed: {e}"),
            }
        }
        self.sensors.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::sysfs::Root;
    use crate::board::Board;
    use crate::ipc::codec::{encode, Encoding};
    use crate::support::alloc_count::allocations;
    use crate::telemetry::sampler::SamplerConfig;

    /// An agent's core on a simulated Orin AGX's tree exported to `dir` and read as a real
    /// board's (the simulator's own kernel allocates on every read).
    fn core_on_a_tree(dir: &std::path::Path) -> Core {
        let tree = dir.join("root");
        crate::sim::export("orin-agx", &tree).unwrap();
        let board = Board::discover(Root::host(&tree)).unwrap();
        let controller = Controller::open(board, &dir.join("run"), Owner::agent()).unwrap();
        let (b, v) = (controller.board(), controller.current());
        let cfg = SamplerConfig {
            activity_hz: 0.0,
            ..SamplerConfig::default()
        };
        let sensors = Sensors::start(b, v, &dir.join("ring"), cfg, "").unwrap();
        Core::new(controller, None, Config::default(), sensors)
    }

    /// The mode switch is a hot path: once both modes have been applied, switching
    /// between them through `set_mode` (cores, CPU and GPU clocks, under a lease)
    /// allocates nothing.
    #[test]
    fn a_set_mode_switch_allocates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut core = core_on_a_tree(dir.path());
        let peer = Peer {
            client: 1,
            pid: std::process::id(),
            uid: 0,
            name: "trainer".into(),
            may_control: true,
        };
        let (cpu, gpu) = {
            let b = core.controller.board();
            let gpu = &b.gpu.as_ref().unwrap().table_hz;
            (&b.clusters[0].table_hz, gpu)
        };
        let modes = [
            (12, cpu[cpu.len() - 1], gpu[gpu.len() - 1]),
            (4, cpu[3], gpu[2]),
        ]
        .map(|(cores, cpu_hz, gpu_hz)| RequestBody::SetMode {
            mode: ModeRequest::Knobs {
                cores: Some(cores),
                cpu_khz: Some(cpu_hz / 1000),
                gpu_hz: Some(gpu_hz),
                emc_hz: None,
                snap: false,
            },
            lease: LeaseKind::Session,
            timeout_ms: None,
        });
        for m in &modes {
            let reply = core.handle(&peer, m.clone());
            assert!(matches!(reply, ReplyBody::ModeSet { .. }), "{reply:?}");
        }
        let requests: Vec<RequestBody> = (0..50).map(|i| modes[i % 2].clone()).collect();
        let (switched, n) = allocations(|| {
            let mut switched = 0;
            for r in requests {
                if let ReplyBody::ModeSet { writes, .. } = core.handle(&peer, r) {
                    switched += usize::from(writes > 0);
                }
            }
            switched
        });
        assert_eq!((switched, n), (50, 0), "(switches, allocations)");
    }

    /// The status round trip is a hot path: once warm, building the reply (with a holder
    /// and a guard's caps in it) and encoding it in either encoding allocate nothing.
    #[test]
    fn a_status_reply_is_built_and_encoded_without_allocating() {
        let dir = tempfile::tempdir().unwrap();
        let mut core = core_on_a_tree(dir.path());
        core.lease = Some(Lease {
            client: 1,
            holder: Holder {
                client: "trainer (pid 7)".into(),
                pid: 7,
                uid: 1000,
                lease: LeaseKind::Session,
            },
            prior: core.requested.clone(),
            timeout: None,
            expires: None,
        });
        core.guard.set_budget(Some(10.0));
        let (b, v) = (core.controller.board(), core.controller.current());
        let now = Instant::now();
        let step = core
            .guard
            .tick(b, v, 40.0, Duration::from_secs(1), 1.0, now);
        assert!(step.is_some() && core.guard.describe().is_some());
        let mut out = Vec::new();
        for enc in [Encoding::Json, Encoding::Bincode] {
            let warm = Reply {
                id: 1,
                body: core.status(),
            };
            encode(enc, &warm, &mut out).unwrap();
            let ((), n) = allocations(|| {
                for id in 2..100 {
                    let reply = Reply {
                        id,
                        body: core.status(),
                    };
                    encode(enc, &reply, &mut out).unwrap();
                }
            });
            assert_eq!(n, 0, "{enc:?}: {n} allocations in 98 status replies");
            let ReplyBody::Status(st) = warm.body else {
                panic!("{:?}", warm.body)
            };
            assert!(st.holder.is_some() && st.guard.is_some() && !st.online_cpus.is_empty());
        }
    }
}
