//! A client connection as the agent sees it, and how its requests reach the board: what
//! only reads the ring (telemetry, subscription samples, minibatch markers, the power in
//! a status) is answered without the core's lock; what reads or changes the board's
//! state takes the lock for exactly that and never across socket I/O, which the
//! [`crate::ipc::server`] does. The scheduler's requests go to its thread over channels
//! ([`super::schedule`]); a `schedule_gate` is answered later ([`Answer::Deferred`]),
//! when the turn arrives on the connection's grant channel, and the connection tells the
//! scheduler when a `minibatch_end` ends its turn and when it closes.

use super::core::Peer;
use super::Shared;
use crate::ipc::events::{EventQueue, EventSender};
use crate::ipc::protocol::{
    ActivityReply, CpuActivityReply, DiskActivityReply, ErrorCode, Kind, MinibatchReply, Phase,
    PhasedMinibatchReply, RailReply, ReplyBody, RequestBody, SampleReply, SchedulePlan,
    TelemetryReply, TurnReply, WindowReply, MAX_RAIL_NAME, MAX_SAMPLE_RAILS,
};
use crate::ipc::server::{Answer, Credentials, Handler, Quiet};
use crate::support::clock::monotonic_ns;
use crate::telemetry::activity::Activity;
use crate::telemetry::energy::{MarkerError, Minibatch, Minibatches, Span};
use crate::telemetry::ring::{ActivityInfo, RingReader};

/// One connection's state.
#[derive(Debug)]
pub struct Connection {
    peer: Peer,
    /// Minibatches begun and not yet ended.
    minibatches: Minibatches<Kind, Phase>,
    /// Events for this connection (lease ended, guard steps, outside changes, requests
    /// served).
    events: EventQueue,
    /// Where the scheduler sends the `served` events of this connection's requests.
    notify: EventSender,
    /// Where the scheduler grants this connection's turns: one channel of one for the
    /// connection's life, so a gate makes no channel (a grant allocates only the list
    /// of its requests' ids, which the reply carries).
    grants: (
        crossbeam_channel::Sender<TurnReply>,
        crossbeam_channel::Receiver<TurnReply>,
    ),
    /// Whether it waits at the gate.
    waiting: bool,
    /// Its requests submitted and not yet reported served: a user waiting for their
    /// `served` events is not idle.
    awaiting_served: usize,
    /// The kind of the turn it holds, until its `minibatch_end` of that kind, and when it
    /// was granted (`CLOCK_MONOTONIC` ns).
    turn: Option<(Kind, u64)>,
}

/// How many idle times a user awaiting its requests' `served` events is kept quiet.
const AWAITING_IDLE_TIMES: u32 = 4;

/// The most characters of a client's name kept for logs and replies.
const NAME_CHARS: usize = 64;

/// A peer-supplied name as it may reach a log line or a reply: control characters
/// escaped (no forged log lines), at most [`NAME_CHARS`] characters, `…` where cut.
fn printable(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if i == NAME_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

fn error(code: ErrorCode, message: String) -> ReplyBody {
    ReplyBody::Error { code, message }
}

/// A marker refused: `conflict` for a minibatch already open or too many markers,
/// `not_found` for one never begun.
fn refused(e: MarkerError<Kind>) -> ReplyBody {
    let code = match e {
        MarkerError::NotBegun { .. } => ErrorCode::NotFound,
        _ => ErrorCode::Conflict,
    };
    error(code, e.to_string())
}

/// The reply to `minibatch_end`: version 3's `minibatch` when the client marked no phase
/// (one span), else the time and energy of each phase summed over its spans.
fn ended(m: Minibatch<Kind>, spans: &[Span<Phase>]) -> ReplyBody {
    if spans.len() == 1 {
        return ReplyBody::Minibatch(MinibatchReply {
            kind: m.kind,
            id: m.id,
            duration_ms: m.duration_s * 1000.0,
            mean_w: m.mean_w,
            energy_j: m.energy_j,
        });
    }
    let total = |phase: Phase| {
        spans
            .iter()
            .filter(|s| s.phase == phase)
            .fold((0.0, 0.0), |(t, e), s| {
                (t + s.duration_s * 1000.0, e + s.energy_j)
            })
    };
    let ((fetch_ms, fetch_j), (compute_ms, compute_j)) =
        (total(Phase::Fetch), total(Phase::Compute));
    ReplyBody::PhasedMinibatch(PhasedMinibatchReply {
        kind: m.kind,
        id: m.id,
        duration_ms: m.duration_s * 1000.0,
        mean_w: m.mean_w,
        energy_j: m.energy_j,
        fetch_ms,
        fetch_j,
        compute_ms,
        compute_j,
    })
}

const _: () = assert!(MAX_SAMPLE_RAILS == crate::telemetry::ring::MAX_RAILS);

/// The newest sample as the protocol carries it (nothing allocated).
fn sample(ring: &RingReader) -> Option<SampleReply> {
    ring.latest().map(|s| SampleReply {
        t_ns: s.t_ns,
        module_mw: u64::from(s.module_uw) / 1000,
        flags: s.flags,
        rails: ring
            .info
            .rails
            .iter()
            .zip(s.rails())
            .map(|(r, v)| RailReply {
                name: rail_name(&r.name),
                power_mw: u64::from(v.power_uw) / 1000,
            })
            .collect(),
    })
}

/// `name` as a sample carries it: whole, as the ring's 24-byte names always fit, else cut
/// at a character boundary.
fn rail_name(name: &str) -> heapless::String<MAX_RAIL_NAME> {
    let mut out = heapless::String::new();
    for c in name.chars() {
        if out.push(c).is_err() {
            break;
        }
    }
    out
}

/// The newest sample and, with `window_ms`, the window's statistics: over the last
/// `window_ms`, or the ring's whole history when that is shorter.
fn telemetry(ring: &RingReader, ring_path: &str, window_ms: Option<u64>) -> TelemetryReply {
    let window = window_ms.map(|ms| {
        let now = monotonic_ns();
        let since = now
            .saturating_sub(ms.saturating_mul(1_000_000))
            .max(ring.oldest_t_ns().unwrap_or(now).min(now));
        let e = ring.energy(since, now);
        WindowReply {
            duration_ms: e.duration_s * 1000.0,
            samples: e.samples as u64,
            mean_w: e.mean_module_w,
            energy_j: e.module_j,
        }
    });
    TelemetryReply {
        ring_path: ring_path.to_string(),
        latest: sample(ring),
        window,
    }
}

/// The activity reply of a ring's activity section `info` and its newest record `a`.
pub fn activity_reply(info: &ActivityInfo, a: &Activity, now_ns: u64) -> ActivityReply {
    let m = a.memory;
    ActivityReply {
        age_ms: now_ns.saturating_sub(a.t_ns) as f64 / 1e6,
        window_ms: info.window_ns as f64 / 1e6,
        gpu_load_pm: a.gpu_load_pm,
        gpu_hz: a.gpu_hz,
        emc_activity_pm: a.emc_activity_pm,
        emc_hz: a.emc_hz,
        fan_pwm: a.fan_pwm,
        fan_rpm: a.fan_rpm,
        ram_used_kb: m.map(|m| m.ram_used_kb),
        ram_total_kb: m.map(|m| m.ram_total_kb),
        swap_used_kb: m.map(|m| m.swap_used_kb),
        swap_total_kb: m.map(|m| m.swap_total_kb),
        cpus: (a.cpus().iter().enumerate())
            .map(|(cpu, c)| CpuActivityReply {
                cpu: cpu as u32,
                util_pm: c.util_pm,
                khz: c.khz,
            })
            .collect(),
        disks: (info.disks.iter().zip(&a.disk_read_bps))
            .map(|(d, bps)| DiskActivityReply {
                name: d.name.clone(),
                major: d.major,
                minor: d.minor,
                read_bps: *bps,
            })
            .collect(),
    }
}

impl Handler for Shared {
    type Connection = Connection;

    fn may_control(&self, c: Credentials) -> bool {
        self.access.may_control(c.pid, c.uid, c.gid)
    }

    fn open(&self, client: u64, c: Credentials) -> std::io::Result<Connection> {
        let (tx, rx) = crate::ipc::events::queue()?;
        self.lock().connect(client, tx.clone());
        Ok(Connection {
            peer: Peer {
                client,
                pid: c.pid,
                uid: c.uid,
                name: format!("client {client}"),
                may_control: Handler::may_control(self, c),
            },
            minibatches: Minibatches::default(),
            events: rx,
            notify: tx,
            grants: crossbeam_channel::bounded(1),
            waiting: false,
            awaiting_served: 0,
            turn: None,
        })
    }

    fn handle(&self, conn: &mut Connection, body: RequestBody) -> Answer {
        match body {
            RequestBody::ScheduleGate { kind } => {
                if let Some((held, _)) = conn.turn {
                    return Answer::Now(error(
                        ErrorCode::Conflict,
                        format!(
                            "you hold a {held} turn: end it with minibatch_end of kind {held} first"
                        ),
                    ));
                }
                match self.schedule.gate(
                    conn.peer.client,
                    kind,
                    conn.grants.0.clone(),
                    conn.notify.clone(),
                ) {
                    Ok(()) => {
                        conn.waiting = true;
                        Answer::Deferred
                    }
                    Err(e) => Answer::Now(error(ErrorCode::Failed, e.to_string())),
                }
            }
            body => Answer::Now(self.answer(conn, body)),
        }
    }

    fn deferred(&self, conn: &mut Connection) -> Option<ReplyBody> {
        if !conn.waiting {
            return None;
        }
        match conn.grants.1.try_recv() {
            Ok(turn) => {
                conn.waiting = false;
                conn.turn = Some((turn.kind, monotonic_ns()));
                Some(ReplyBody::Turn(turn))
            }
            Err(_) => {
                self.lock().heartbeat(conn.peer.client);
                None
            }
        }
    }

    fn events<'a>(&self, conn: &'a Connection) -> &'a EventQueue {
        &conn.events
    }

    fn event(&self, conn: &mut Connection) -> Option<ReplyBody> {
        let event = conn.events.try_recv();
        match event {
            // A planner's phase modes switch under its lease: they end with it.
            Some(ReplyBody::LeaseEnded { .. }) => self.schedule.lease_ended(conn.peer.client),
            Some(ReplyBody::Served { .. }) => {
                conn.awaiting_served = conn.awaiting_served.saturating_sub(1)
            }
            _ => {}
        }
        event
    }

    fn sample(&self, _conn: &mut Connection) -> Option<ReplyBody> {
        sample(&self.ring.get()).map(ReplyBody::Sample)
    }

    /// A lease holder may stay quiet, but not while it holds a scheduler turn, even with a
    /// subscription: its turn would starve the others (protocol.md: a quiet turn holder is
    /// closed; a review found one that subscribed stalling every other client for good).
    /// A user whose requests are not yet served waits for their `served` events (a review
    /// found one closed under a long training turn, its events lost), for
    /// [`AWAITING_IDLE_TIMES`] idle times at most (requests no server takes would keep it
    /// for ever). The checks that take no lock come first: this runs at every sample of a
    /// quiet subscriber, and the core's lock is held through a switch.
    fn kept_quiet(&self, conn: &Connection, quiet: Quiet) -> bool {
        if conn.turn.is_some() {
            return false;
        }
        (conn.awaiting_served > 0 && quiet.idle_times < AWAITING_IDLE_TIMES)
            || quiet.streaming
            || self.lock().holds_lease(conn.peer.client)
    }

    fn name<'a>(&self, conn: &'a Connection) -> &'a str {
        &conn.peer.name
    }

    fn close(&self, conn: Connection) {
        self.schedule.leave(conn.peer.client);
        self.lock().disconnect(conn.peer.client);
    }
}

impl Shared {
    /// `schedule_plan`: checked, its phase modes (if any) applied once each under the
    /// caller's session lease (which checks them against the board and leaves the
    /// training phase's in force), then handed to the scheduler.
    fn plan(&self, peer: &Peer, plan: SchedulePlan) -> ReplyBody {
        if !peer.may_control {
            return error(
                ErrorCode::Forbidden,
                "setting a schedule needs control permission (root or the control group)".into(),
            );
        }
        if let Err(e) = super::schedule::check(&plan) {
            return error(ErrorCode::InvalidMode, e);
        }
        if let Some(m) = plan.phase_modes {
            let mut core = self.lock();
            let held = core.holds(peer);
            for (phase, gpu_hz, emc_hz) in [
                ("inference", m.infer_gpu_hz, m.infer_emc_hz),
                ("training", m.train_gpu_hz, m.train_emc_hz),
            ] {
                if let Err((code, message)) = core.switch_phase(peer, gpu_hz, emc_hz, true) {
                    // A client that held no lease holds none after a refused plan.
                    if !held {
                        core.end_own_lease(peer, "its schedule_plan was refused");
                    }
                    return error(code, format!("phase_modes, {phase} phase: {message}"));
                }
            }
        }
        self.schedule.plan(plan, peer.clone()).map_or_else(
            |e| error(ErrorCode::Failed, e.to_string()),
            ReplyBody::Schedule,
        )
    }

    /// Every request but the gate, answered at once.
    fn answer(&self, conn: &mut Connection, body: RequestBody) -> ReplyBody {
        match body {
            RequestBody::SchedulePlan(plan) => self.plan(&conn.peer, plan),
            RequestBody::ScheduleSubmit => match self.schedule.submit(conn.notify.clone()) {
                Ok(request) => {
                    conn.awaiting_served += 1;
                    ReplyBody::Submitted { request }
                }
                Err(e @ super::schedule::ScheduleError::Full) => {
                    error(ErrorCode::Busy, e.to_string())
                }
                Err(e) => error(ErrorCode::Failed, e.to_string()),
            },
            RequestBody::ScheduleStatus => self.schedule.report().map_or_else(
                |e| error(ErrorCode::Failed, e.to_string()),
                ReplyBody::Schedule,
            ),
            RequestBody::Hello { ref client, .. } => {
                let name = printable(client);
                let reply = self.lock().handle(&conn.peer, body);
                // A refused hello (another version) names nobody.
                if matches!(reply, ReplyBody::Hello { .. }) {
                    conn.peer.name = name;
                }
                reply
            }
            RequestBody::Status => {
                // The core's lock is released before the ring is read.
                let status = self.lock().status();
                match status {
                    ReplyBody::Status(mut st) => {
                        st.module_w = self
                            .ring
                            .get()
                            .latest()
                            .map(|s| f64::from(s.module_uw) * 1e-6);
                        ReplyBody::Status(st)
                    }
                    other => other,
                }
            }
            RequestBody::Telemetry { window_ms } => {
                ReplyBody::Telemetry(telemetry(&self.ring.get(), &self.ring_path, window_ms))
            }
            RequestBody::Activity => {
                let ring = self.ring.get();
                match (&ring.info.activity, ring.activity()) {
                    (Some(info), Some(a)) => {
                        ReplyBody::Activity(activity_reply(info, &a, monotonic_ns()))
                    }
                    (None, _) => error(
                        ErrorCode::NotFound,
                        "the activity counters are off (activity_rate_hz = 0)".into(),
                    ),
                    (Some(_), None) => {
                        error(ErrorCode::NotFound, "no activity record yet; retry".into())
                    }
                }
            }
            RequestBody::MinibatchBegin { kind, id } => conn
                .minibatches
                .begin(kind, id, Phase::Fetch, monotonic_ns())
                .map_or_else(refused, |()| ReplyBody::Ok),
            RequestBody::MinibatchPhase { kind, id, phase } => conn
                .minibatches
                .phase(kind, id, phase, monotonic_ns())
                .map_or_else(refused, |()| ReplyBody::Ok),
            RequestBody::MinibatchEnd { kind, id } => {
                let now = monotonic_ns();
                conn.minibatches
                    .end(kind, id, now, &self.ring.get())
                    .map_or_else(refused, |(m, spans)| {
                        let (duration_ms, energy_j) = (m.duration_s * 1000.0, m.energy_j);
                        if let Some((held, granted_ns)) = conn.turn.filter(|t| t.0 == kind) {
                            // The turn's own span, from its grant: a minibatch begun before
                            // its gate also spans the other turns it waited behind.
                            conn.turn = None;
                            let e = self.ring.get().energy(granted_ns, now);
                            let turn_ms = now.saturating_sub(granted_ns) as f64 / 1e6;
                            self.schedule
                                .ended(conn.peer.client, held, now, turn_ms, e.module_j);
                        }
                        let reply = ended(m, spans);
                        let phases = match &reply {
                            ReplyBody::PhasedMinibatch(p) => Some((p.fetch_ms, p.compute_ms)),
                            _ => None,
                        };
                        self.minibatch_totals
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .add(kind, duration_ms, energy_j, phases);
                        reply
                    })
            }
            RequestBody::MinibatchTotals => ReplyBody::MinibatchTotals(
                *self
                    .minibatch_totals
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()),
            ),
            RequestBody::Release => {
                let mut core = self.lock();
                let held = core.holds_lease(conn.peer.client);
                let reply = core.handle(&conn.peer, body);
                drop(core);
                if held && matches!(reply, ReplyBody::Released { .. }) {
                    // A planner's phase modes switch under its lease: they end with it,
                    // its own release too (no `lease_ended` tells it of that one).
                    self.schedule.lease_ended(conn.peer.client);
                }
                reply
            }
            body => self.lock().handle(&conn.peer, body),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_name_cannot_forge_a_log_line_or_grow_without_bound() {
        assert_eq!(printable("trainer"), "trainer");
        assert_eq!(
            printable("x\n[WARN] set_mode by root\r\u{1b}[2J"),
            "x\\n[WARN] set_mode by root\\r\\u{1b}[2J"
        );
        let long = printable(&"é".repeat(10_000));
        assert_eq!(long.chars().count(), NAME_CHARS + 1);
        assert!(long.ends_with('…'));
    }
}
