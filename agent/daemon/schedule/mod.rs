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
use crate::ipc::events::EventSender;
use crate::ipc::protocol::{Kind, PhaseModes, SchedulePlan, ScheduleReply, TurnReply};
use crate::support::clock::monotonic_ns;
use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;
use turns::{Gate, Request, Turns};

/// The most requests queued or in a batch, not yet served: beyond, `schedule_submit` is
/// refused `busy` and a declared rate adds none. The inbox holds as many.
pub const MAX_UNSERVED: usize = 4096;
/// How soon a phase switch that found the core held (by a switch, or any request that
/// holds it) is tried again.
const CORE_RETRY: Duration = Duration::from_millis(1);

/// What connections and the thread both count: request numbers, and requests not yet
/// served (the queue's bound: the thread's queue is fed from the inbox as fast as
/// requests arrive, so the inbox's own bound alone would not hold it).
#[derive(Debug, Default)]
struct Tally {
    last_request: AtomicU64,
    unserved: AtomicUsize,
}

impl Tally {
    /// The number of a new request, unless [`MAX_UNSERVED`] are unserved already.
    fn admit(&self) -> Option<u64> {
        // Relaxed throughout: a count and a bound, not a synchronisation; the request
        // itself travels over a channel.
        if self.unserved.fetch_add(1, Ordering::Relaxed) >= MAX_UNSERVED {
            self.unserved.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(self.last_request.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// `n` requests were served.
    fn served(&self, n: usize) {
        self.unserved.fetch_sub(n, Ordering::Relaxed);
    }
}

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
    /// A client's lease ended while it stays connected.
    LeaseEnded(u64),
    /// The plan and the accounting, please.
    Report(Sender<ScheduleReply>),
    /// The agent is stopping.
    Stop,
}

/// The largest inference batch a plan may ask for.
pub const MAX_BATCH: u32 = 1024;
/// The fastest declared arrival rate, requests per second.
pub const MAX_RATE: f64 = 10_000.0;
/// The slowest declared arrival rate, requests per second (one every 1,000 s).
pub const MIN_RATE: f64 = 0.001;

/// Why `plan` cannot be taken, if it cannot: a batch size of 1 to [`MAX_BATCH`], a
/// positive latency target, a rate of [`MIN_RATE`] to [`MAX_RATE`].
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
    if plan
        .rate_per_s
        .is_some_and(|r| !(MIN_RATE..=MAX_RATE).contains(&r))
    {
        return Err(format!(
            "rate_per_s is {MIN_RATE} to {MAX_RATE} requests per second (null: none)"
        ));
    }
    Ok(())
}

/// Why a request to the scheduler was refused.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// Too many requests are unserved.
    #[error(
        "{MAX_UNSERVED} requests are waiting already: the inference servers are not keeping up"
    )]
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
    tally: Arc<Tally>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Scheduler {
    /// Starts the scheduler's thread; phase modes are switched on `core`.
    pub fn start(core: Arc<Mutex<Core>>) -> std::io::Result<Scheduler> {
        let (control, control_rx) = unbounded();
        let (inbox, inbox_rx) = bounded(MAX_UNSERVED);
        let tally = Arc::new(Tally::default());
        let counted = tally.clone();
        let thread = std::thread::Builder::new()
            .name("jpower-schedule".into())
            .spawn(move || run(&control_rx, &inbox_rx, &counted, &core))?;
        Ok(Scheduler {
            control,
            inbox,
            tally,
            thread: Mutex::new(Some(thread)),
        })
    }

    fn send(&self, m: Msg) -> Result<(), ScheduleError> {
        self.control.send(m).map_err(|_| ScheduleError::Stopped)
    }

    /// `client` waits for a turn of `kind`: it is sent on `grant` (a channel of one that
    /// the connection keeps; the turn is aborted should the connection be gone by then),
    /// and `wake` wakes the connection to take it.
    pub fn gate(
        &self,
        client: u64,
        kind: Kind,
        grant: Sender<TurnReply>,
        wake: EventSender,
    ) -> Result<(), ScheduleError> {
        self.send(Msg::Gate(Gate {
            client,
            kind,
            grant,
            wake,
        }))
    }

    /// Queues a request whose `served` event goes to `notify`; its number.
    pub fn submit(&self, notify: EventSender) -> Result<u64, ScheduleError> {
        let id = self.tally.admit().ok_or(ScheduleError::Full)?;
        let r = Request {
            id,
            at_ns: monotonic_ns(),
            notify: Some(notify),
        };
        // The tally bounds the inbox too: only a stopped thread refuses.
        self.inbox.try_send(r).map_err(|_| {
            self.tally.served(1);
            ScheduleError::Stopped
        })?;
        Ok(id)
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

    /// `client`'s lease ended (expired, taken over, released by another) while it stays
    /// connected: a plan it set keeps its batch size, target and rate, but its phase
    /// modes, which switch under that lease, end.
    pub fn lease_ended(&self, client: u64) {
        let _ = self.send(Msg::LeaseEnded(client));
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
fn run(control: &Receiver<Msg>, inbox: &Receiver<Request>, tally: &Tally, core: &Mutex<Core>) {
    let mut state = State {
        turns: Turns::default(),
        planner: None,
        phase: None,
        rate: arrivals::Arrivals::default(),
        core_busy: false,
    };
    loop {
        // A turn kept for an inference server on its way back: look again when it lapses,
        // or when the declared rate's next arrival is due, whichever comes first.
        let hold = state.turns.held_until().map_or(Duration::MAX, |until| {
            Duration::from_nanos(until.saturating_sub(monotonic_ns()))
        });
        let retry = if state.core_busy {
            CORE_RETRY
        } else {
            Duration::MAX
        };
        select! {
            recv(control) -> m => match m {
                Ok(Msg::Stop) | Err(_) => return,
                Ok(m) => {
                    // Requests already submitted (their `submitted` reply sent) are queued
                    // first: crossbeam picks at random among ready channels, and a turn's
                    // end must not overtake them to hand the next turn to training.
                    while let Ok(r) = inbox.try_recv() {
                        state.turns.queue(r);
                    }
                    state.on(m, core, tally)
                }
            },
            recv(inbox) -> r => {
                if let Ok(r) = r {
                    state.turns.queue(r);
                }
            }
            default(hold.min(state.rate.due_in()).min(retry)) => {}
        }
        while state.rate.due_in().is_zero() {
            let at_ns = state.rate.arrived();
            // A declared rate adds nothing to a full queue: it is a load, not a backlog.
            if let Some(id) = tally.admit() {
                state.turns.queue(Request {
                    id,
                    at_ns,
                    notify: None,
                });
            }
        }
        state.dispatch(core);
    }
}

/// What the thread keeps beside the policy: who set the plan (its phase modes switch
/// under that client's lease; its declared rate lasts while it is connected), the phase
/// whose mode is set, the declared rate's arrivals, and whether a phase switch waits for
/// the core.
struct State {
    turns: Turns,
    planner: Option<Peer>,
    phase: Option<Kind>,
    rate: arrivals::Arrivals,
    core_busy: bool,
}

impl State {
    /// Handles a connection's message (not `Stop`, which ends the thread).
    fn on(&mut self, m: Msg, core: &Mutex<Core>, tally: &Tally) {
        match m {
            Msg::Gate(g) => self.turns.wait(g),
            Msg::Ended {
                client,
                kind,
                end_ns,
                duration_ms,
                energy_j,
            } => {
                if let Some(served) = self.turns.end(client, kind, end_ns, duration_ms, energy_j) {
                    tally.served(served);
                }
            }
            Msg::Leave(client) => {
                self.turns.leave(client);
                if self.planner.as_ref().is_some_and(|o| o.client == client) {
                    self.rate.set_rate(None);
                    self.phase = None;
                    // Withdrawn requests leave the bound on unserved ones, as served ones do.
                    tally.served(self.turns.planner_left());
                }
            }
            Msg::LeaseEnded(client) => {
                if self.planner.as_ref().is_some_and(|o| o.client == client) {
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
                // The connection applied the plan's phase modes (inference, then
                // training): whatever phase was switched to before, the next turn sets its
                // own.
                self.phase = None;
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
    /// plan has phase modes. While another holds the core, the turn waits (tried
    /// again every [`CORE_RETRY`]) and the thread goes on answering: it never blocks on
    /// the core, so `schedule_status` and the gates' bookkeeping are answered at once,
    /// switch or not.
    fn dispatch(&mut self, core: &Mutex<Core>) {
        self.core_busy = false;
        while let Some(next) = self.turns.due(monotonic_ns()) {
            let kind = next.gate.kind;
            if let (Some(modes), Some(planner)) = (self.turns.plan().phase_modes, &self.planner) {
                if self.phase != Some(kind) {
                    let mut core = match core.try_lock() {
                        Ok(core) => core,
                        Err(TryLockError::Poisoned(p)) => p.into_inner(),
                        Err(TryLockError::WouldBlock) => {
                            self.turns.put_back(next);
                            self.core_busy = true;
                            return;
                        }
                    };
                    let (gpu_hz, emc_hz) = phase_knobs(&modes, kind);
                    let switched = core.switch_phase(planner, gpu_hz, emc_hz, false);
                    drop(core);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_numbered_from_one_and_bounded_until_served() {
        let tally = Tally::default();
        let ids: Vec<u64> = (0..MAX_UNSERVED).map(|_| tally.admit().unwrap()).collect();
        assert_eq!((ids[0], ids[MAX_UNSERVED - 1]), (1, MAX_UNSERVED as u64));
        assert_eq!(tally.admit(), None, "a flood is refused, not queued");
        tally.served(2);
        assert_eq!(tally.admit(), Some(MAX_UNSERVED as u64 + 1));
    }

    #[test]
    fn a_plan_is_checked_field_by_field() {
        let ok = SchedulePlan {
            max_batch: 4,
            slo_ms: 100.0,
            rate_per_s: Some(30.0),
            phase_modes: None,
        };
        assert!(check(&ok).is_ok());
        for bad in [
            SchedulePlan { max_batch: 0, ..ok },
            SchedulePlan {
                max_batch: MAX_BATCH + 1,
                ..ok
            },
            SchedulePlan { slo_ms: 0.0, ..ok },
            SchedulePlan {
                slo_ms: f64::NAN,
                ..ok
            },
            SchedulePlan {
                rate_per_s: Some(0.0),
                ..ok
            },
            SchedulePlan {
                rate_per_s: Some(MAX_RATE * 2.0),
                ..ok
            },
            SchedulePlan {
                rate_per_s: Some(1e-300),
                ..ok
            },
        ] {
            assert!(check(&bad).is_err(), "{bad:?}");
        }
    }
}
