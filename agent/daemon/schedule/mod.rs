//! The real-time scheduler (protocol version 6): training and inference clients share
//! the GPU in turns, under a plan (inference batch size, latency target, declared arrival
//! rate, per-phase modes) a client sets and may change online.
//!
//! ```text
//!  connection threads ──Msg (control channel)──▶ scheduler thread ──TurnReply──▶ gate
//!  schedule_submit ───Request (inbox, bounded)──▶   (turns::Turns)     (a channel of one
//!  declared rate: the thread's own Poisson timer ─┘   │                 per connection)
//!                                                     └─ phase modes: Core::switch_phase
//!                                                        under the planner's session lease
//! ```
//!
//! Every queue and gate is a crossbeam channel: the control channel and the request inbox
//! into the one thread that owns the policy's state ([`turns`]), and each connection's
//! channel of one for its turns out of it; nothing here shares a lock with a connection. A turn ends
//! at its holder's `minibatch_end` of the turn's kind (the connection tells the thread);
//! a connection that closes leaves its gate and aborts its turn, and the others carry on.

mod arrivals;
pub mod turns;

use super::core::{Core, Peer};
use crate::ipc::protocol::{Kind, PhaseModes, ReplyBody, SchedulePlan, ScheduleReply, TurnReply};
use crate::telemetry::ring::monotonic_ns;
use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender, TrySendError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use turns::{Gate, Request, Turns};

/// The most requests the inbox holds before `schedule_submit` is refused `busy`.
pub const INBOX: usize = 4096;

/// What connections tell the scheduler's thread.
#[derive(Debug)]
enum Msg {
    /// A client waits for its turn.
    Gate(Gate),
    /// A client ended a minibatch of `kind` (which ends its turn if it holds one).
    Ended {
        client: u64,
        kind: Kind,
        end_ns: u64,
        duration_ms: f64,
        energy_j: f64,
    },
    /// A plan, and the peer who set it (whose session lease its phase modes switch
    /// under).
    Plan {
        plan: SchedulePlan,
        planner: Peer,
        reply: Sender<ScheduleReply>,
    },
    /// A connection closed.
    Leave(u64),
    /// The plan and the accounting, please.
    Report(Sender<ScheduleReply>),
    /// The agent is stopping.
    Stop,
}

/// The largest inference batch a plan may ask for.
pub const MAX_BATCH: u32 = 1024;
/// The fastest declared arrival rate, requests per second.
pub const MAX_RATE: f64 = 10_000.0;

/// Why `plan` cannot be taken, if it cannot: a batch size of 1 to [`MAX_BATCH`], a
/// positive latency target, a rate above 0 and at most [`MAX_RATE`].
pub fn check(plan: &SchedulePlan) -> Result<(), String> {
    if !(1..=MAX_BATCH).contains(&plan.max_batch) {
        return Err(format!(
            "max_batch {}: a batch holds 1 to {MAX_BATCH} requests",
            plan.max_batch
        ));
    }
    if !(plan.slo_ms > 0.0 && plan.slo_ms.is_finite()) {
        return Err("slo_ms is a positive number of milliseconds".into());
    }
    if plan.rate_per_s.is_some_and(|r| !(r > 0.0 && r <= MAX_RATE)) {
        return Err(format!(
            "rate_per_s is above 0 and at most {MAX_RATE} requests per second (null: none)"
        ));
    }
    Ok(())
}

/// Why a request to the scheduler was refused.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The inbox is full.
    #[error("{INBOX} requests are waiting already: the scheduler is not keeping up")]
    Full,
    /// The scheduler's thread is gone (the agent is stopping).
    #[error("the scheduler has stopped (the agent is stopping)")]
    Stopped,
}

/// The connections' side of the scheduler: cheap to share, never blocks on the thread
/// except for the replies of `plan` and `report`.
#[derive(Debug)]
pub struct Scheduler {
    control: Sender<Msg>,
    inbox: Sender<Request>,
    next_request: Arc<AtomicU64>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Scheduler {
    /// Starts the scheduler's thread; phase modes are switched on `core`.
    pub fn start(core: Arc<Mutex<Core>>) -> std::io::Result<Scheduler> {
        let (control, control_rx) = unbounded();
        let (inbox, inbox_rx) = bounded(INBOX);
        let next_request = Arc::new(AtomicU64::new(1));
        let ids = next_request.clone();
        let thread = std::thread::Builder::new()
            .name("jpower-schedule".into())
            .spawn(move || run(&control_rx, &inbox_rx, &ids, &core))?;
        Ok(Scheduler {
            control,
            inbox,
            next_request,
            thread: Mutex::new(Some(thread)),
        })
    }

    fn send(&self, m: Msg) -> Result<(), ScheduleError> {
        self.control.send(m).map_err(|_| ScheduleError::Stopped)
    }

    /// `client` waits for a turn of `kind`: it is sent on `grant` (a channel of one that
    /// the connection keeps; the turn is aborted should the connection be gone by then).
    pub fn gate(
        &self,
        client: u64,
        kind: Kind,
        grant: Sender<TurnReply>,
    ) -> Result<(), ScheduleError> {
        self.send(Msg::Gate(Gate {
            client,
            kind,
            grant,
        }))
    }

    /// Queues a request whose `served` event goes to `notify`; its number.
    pub fn submit(&self, notify: std::sync::mpsc::Sender<ReplyBody>) -> Result<u64, ScheduleError> {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed);
        let r = Request {
            id,
            at_ns: monotonic_ns(),
            notify: Some(notify),
        };
        match self.inbox.try_send(r) {
            Ok(()) => Ok(id),
            Err(TrySendError::Full(_)) => Err(ScheduleError::Full),
            Err(TrySendError::Disconnected(_)) => Err(ScheduleError::Stopped),
        }
    }

    /// `client` ended a minibatch of `kind` at `end_ns`.
    pub fn ended(&self, client: u64, kind: Kind, end_ns: u64, duration_ms: f64, energy_j: f64) {
        let _ = self.send(Msg::Ended {
            client,
            kind,
            end_ns,
            duration_ms,
            energy_j,
        });
    }

    /// Sets `plan` for `planner` (its phase modes switched under `planner`'s lease, its
    /// declared rate in force while `planner` is connected); the report after.
    pub fn plan(&self, plan: SchedulePlan, planner: Peer) -> Result<ScheduleReply, ScheduleError> {
        let (reply, rx) = bounded(1);
        self.send(Msg::Plan {
            plan,
            planner,
            reply,
        })?;
        rx.recv().map_err(|_| ScheduleError::Stopped)
    }

    /// The plan and the accounting.
    pub fn report(&self) -> Result<ScheduleReply, ScheduleError> {
        let (reply, rx) = bounded(1);
        self.send(Msg::Report(reply))?;
        rx.recv().map_err(|_| ScheduleError::Stopped)
    }

    /// A connection closed.
    pub fn leave(&self, client: u64) {
        let _ = self.send(Msg::Leave(client));
    }

    /// Stops the thread (waiting gates get nothing: their connections are closing too).
    pub fn stop(&self) {
        let _ = self.send(Msg::Stop);
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// The scheduler's thread: waits for a message, a request or the declared rate's next
/// arrival, then grants the next turn if one is due.
fn run(control: &Receiver<Msg>, inbox: &Receiver<Request>, ids: &AtomicU64, core: &Mutex<Core>) {
    let mut state = State {
        turns: Turns::default(),
        planner: None,
        phase: None,
        rate: arrivals::Arrivals::default(),
    };
    loop {
        let timer = state.rate.timer().clone();
        select! {
            recv(control) -> m => match m {
                Ok(Msg::Stop) | Err(_) => return,
                Ok(m) => state.on(m, core),
            },
            recv(inbox) -> r => {
                if let Ok(r) = r {
                    state.turns.queue(r);
                }
            }
            recv(timer) -> _ => {
                let at_ns = state.rate.arrived();
                // A declared rate adds nothing to a full queue: it is a load, not a backlog.
                if state.turns.waiting() < INBOX {
                    state.turns.queue(Request {
                        id: ids.fetch_add(1, Ordering::Relaxed),
                        at_ns,
                        notify: None,
                    });
                }
            }
        }
        state.dispatch(core);
    }
}

/// What the thread keeps beside the policy: who set the plan (its phase modes switch
/// under that client's lease; its declared rate lasts while it is connected), the phase
/// whose mode is set, and the declared rate's arrivals.
struct State {
    turns: Turns,
    planner: Option<Peer>,
    phase: Option<Kind>,
    rate: arrivals::Arrivals,
}

impl State {
    /// Handles a connection's message (not `Stop`, which ends the thread).
    fn on(&mut self, m: Msg, core: &Mutex<Core>) {
        match m {
            Msg::Gate(g) => self.turns.wait(g),
            Msg::Ended {
                client,
                kind,
                end_ns,
                duration_ms,
                energy_j,
            } => {
                self.turns.end(client, kind, end_ns, duration_ms, energy_j);
            }
            Msg::Leave(client) => {
                self.turns.leave(client);
                if self.planner.as_ref().is_some_and(|o| o.client == client) {
                    self.rate.set_rate(None);
                    self.drop_phase_modes();
                }
            }
            Msg::Plan {
                plan,
                planner,
                reply,
            } => {
                self.rate.set_rate(plan.rate_per_s);
                self.planner = Some(planner);
                self.turns.set_plan(plan);
                // Taken at once when no turn runs, so the reply says so.
                self.dispatch(core);
                let _ = reply.send(self.turns.report());
            }
            Msg::Report(reply) => {
                let _ = reply.send(self.turns.report());
            }
            Msg::Stop => {}
        }
    }

    fn drop_phase_modes(&mut self) {
        self.phase = None;
        self.turns.hold_one_mode();
    }

    /// Grants the next turn if one is due, switching the phase's mode first where the
    /// plan has phase modes.
    fn dispatch(&mut self, core: &Mutex<Core>) {
        while let Some(next) = self.turns.due() {
            let kind = next.gate.kind;
            if let (Some(modes), Some(planner)) = (self.turns.plan().phase_modes, &self.planner) {
                if self.phase != Some(kind) {
                    let (gpu_hz, emc_hz) = phase_knobs(&modes, kind);
                    let switched = core
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .switch_phase(planner, gpu_hz, emc_hz, false);
                    match switched {
                        Ok(()) => {
                            self.phase = Some(kind);
                            self.turns.switched();
                        }
                        Err((_, why)) => {
                            log::warn!("schedule: holding one mode from now on: {why}");
                            self.drop_phase_modes();
                        }
                    }
                }
            }
            self.turns.grant(next);
        }
    }
}

/// The GPU and EMC clocks of `kind`'s phase.
fn phase_knobs(m: &PhaseModes, kind: Kind) -> (u64, u64) {
    match kind {
        Kind::Train => (m.train_gpu_hz, m.train_emc_hz),
        Kind::Infer => (m.infer_gpu_hz, m.infer_emc_hz),
    }
}
