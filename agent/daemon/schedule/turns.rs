//! Who runs on the GPU next, and what each turn accounted: the real-time form of the
//! interleaving that `predict::fulcrum::interleave` runs in simulated time.
//!
//! The policy: a turn, once granted, runs until its holder's `minibatch_end` (a minibatch
//! cannot be preempted). At every turn boundary, requests waiting and an inference server
//! at its gate make the next turn an inference batch of at most the plan's `max_batch`
//! requests, oldest first (requests that arrive while a batch runs join the next one);
//! so when a training minibatch ends with requests waiting, the queue is served in
//! batches until it is empty, then training resumes. An inference batch that ends with
//! requests waiting keeps the next turn for its server for up to [`HOLD_NS`] (its way back
//! to the gate: the end marker's reply, `minibatch_begin`, `schedule_gate`), so requests
//! that arrived during a batch do not wait for a whole training minibatch because the
//! server's round trips lost a race with the trainer's gate. Otherwise a training client
//! at its gate gets the turn. Without an inference server at its gate, queued requests wait and
//! training has the whole GPU; without a training client, inference runs whenever
//! requests wait. A new plan takes over at the next boundary, the queue untouched.
//!
//! This module decides and counts; it neither blocks nor switches modes: the scheduler's
//! thread (`super`) does, between [`Turns::due`] and [`Turns::grant`].

use crate::ipc::events::EventSender;
use crate::ipc::protocol::{Kind, ReplyBody, SchedulePlan, ScheduleReply, TurnReply, TurnTotals};
use crossbeam_channel::Sender;
use std::collections::VecDeque;

/// How long an inference batch that ends with requests waiting keeps the next turn for
/// its server, ns: a few of its round trips on a loaded board; training waits no longer
/// for a server that does not come back.
pub const HOLD_NS: u64 = 5_000_000;

/// The plan before any client sets one: every waiting request in one batch (up to 32),
/// no latency target to count against, one mode. Reported as no plan (`null`).
pub const DEFAULT_PLAN: SchedulePlan = SchedulePlan {
    max_batch: 32,
    slo_ms: f64::INFINITY,
    rate_per_s: None,
    phase_modes: None,
};

/// A queued inference request.
#[derive(Debug)]
pub struct Request {
    /// Its number (`submitted.request`).
    pub id: u64,
    /// When it was queued, `CLOCK_MONOTONIC` ns.
    pub at_ns: u64,
    /// Where its `served` event goes (`None`: it arrived at the declared rate).
    pub notify: Option<EventSender>,
}

/// A client waiting at its gate: the turn is sent on `grant`, and `wake` wakes its
/// connection to take it.
#[derive(Debug)]
pub struct Gate {
    /// The connection.
    pub client: u64,
    /// The phase it asks to run.
    pub kind: Kind,
    /// Where its turn goes (the connection's channel of one; its receiver is dropped
    /// with the connection).
    pub grant: Sender<TurnReply>,
    /// The connection's events, whose wake-up the turn rings.
    pub wake: EventSender,
}

/// The turn running now.
#[derive(Debug)]
struct Active {
    client: u64,
    kind: Kind,
    requests: Vec<Request>,
}

/// The next turn [`Turns::due`] chose: the gate it goes to and, for an inference
/// batch, its requests.
#[derive(Debug)]
pub struct Next {
    /// The gate granted.
    pub gate: Gate,
    /// The batch (empty for training).
    pub requests: Vec<Request>,
}

/// The policy's state and its accounting.
#[derive(Debug)]
pub struct Turns {
    plan: SchedulePlan,
    next_plan: Option<SchedulePlan>,
    gates: VecDeque<Gate>,
    queue: VecDeque<Request>,
    active: Option<Active>,
    /// The inference server that ended a batch with requests waiting, and until when
    /// (`CLOCK_MONOTONIC` ns) the next turn waits for it.
    held_for: Option<(u64, u64)>,
    /// The last batch's list, emptied, for the next one: a batch allocates nothing once
    /// one as large has run.
    spare: Vec<Request>,
    totals: ScheduleReply,
}

impl Default for Turns {
    fn default() -> Turns {
        Turns {
            plan: DEFAULT_PLAN,
            next_plan: None,
            gates: VecDeque::new(),
            queue: VecDeque::new(),
            active: None,
            held_for: None,
            spare: Vec::new(),
            totals: ScheduleReply {
                plan: None,
                replan_pending: false,
                replans: 0,
                mode_switches: 0,
                waiting: 0,
                queued: 0,
                served: 0,
                late: 0,
                latency_sum_ms: 0.0,
                latency_max_ms: 0.0,
                train: TurnTotals::default(),
                infer: TurnTotals::default(),
            },
        }
    }
}

fn totals_of(t: &mut ScheduleReply, kind: Kind) -> &mut TurnTotals {
    match kind {
        Kind::Train => &mut t.train,
        Kind::Infer => &mut t.infer,
    }
}

impl Turns {
    /// The plan in force.
    pub fn plan(&self) -> &SchedulePlan {
        &self.plan
    }

    /// Sets a plan, taken over at the next turn boundary.
    pub fn set_plan(&mut self, plan: SchedulePlan) {
        self.next_plan = Some(plan);
    }

    /// Drops the plan's phase modes (a switch failed): one mode from now on.
    pub fn hold_one_mode(&mut self) {
        self.plan.phase_modes = None;
        if let Some(p) = &mut self.next_plan {
            p.phase_modes = None;
        }
    }

    /// The planner left: its declared rate and its phase modes end with it (the batch size
    /// and the target stay), and the requests its rate queued that still wait are
    /// withdrawn (users that were only its declaration must not hold up the real ones
    /// behind them; `queued` keeps counting them, so that its growth stays the arrival
    /// rate). How many were withdrawn.
    pub fn planner_left(&mut self) -> usize {
        let before = self.queue.len();
        self.queue.retain(|r| r.notify.is_some());
        self.hold_one_mode();
        self.plan.rate_per_s = None;
        if let Some(p) = &mut self.next_plan {
            p.rate_per_s = None;
        }
        before - self.queue.len()
    }

    /// Requests waiting.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// Queues a request.
    pub fn queue(&mut self, r: Request) {
        self.totals.queued += 1;
        self.queue.push_back(r);
    }

    /// A client waits at its gate.
    pub fn wait(&mut self, gate: Gate) {
        self.gates.push_back(gate);
    }

    /// Counts a phase-mode switch.
    pub fn switched(&mut self) {
        self.totals.mode_switches += 1;
    }

    /// Until when (`CLOCK_MONOTONIC` ns) the next turn is kept for an inference server on
    /// its way back to its gate, if it is: [`Turns::due`] is worth asking again then.
    pub fn held_until(&self) -> Option<u64> {
        self.held_for.map(|(_, until)| until)
    }

    /// The next turn at `now_ns`, if one is due: none while a turn runs, nobody suitable
    /// waits, or training would take a turn kept for an inference server (see the module
    /// docs). A plan set since the last boundary takes over first.
    pub fn due(&mut self, now_ns: u64) -> Option<Next> {
        if self.active.is_some() {
            return None;
        }
        if self
            .held_for
            .is_some_and(|(_, until)| now_ns >= until || self.queue.is_empty())
        {
            self.held_for = None;
        }
        if let Some(p) = self.next_plan.take() {
            self.plan = p;
            self.totals.replans += 1;
        }
        let waiting = |kind| self.gates.iter().position(|g| g.kind == kind);
        let (at, kind) = match (
            self.queue.is_empty(),
            waiting(Kind::Infer),
            waiting(Kind::Train),
        ) {
            (false, Some(i), _) => (i, Kind::Infer),
            (_, _, Some(_)) if self.held_for.is_some() => return None,
            (_, _, Some(t)) => (t, Kind::Train),
            _ => return None,
        };
        self.held_for = None;
        let gate = self.gates.remove(at)?;
        let requests = match kind {
            Kind::Infer => {
                let n = self.queue.len().min(self.plan.max_batch as usize);
                let mut batch = std::mem::take(&mut self.spare);
                batch.extend(self.queue.drain(..n));
                batch
            }
            Kind::Train => Vec::new(),
        };
        Some(Next { gate, requests })
    }

    /// Grants `next` (as the thread found it after any mode switch): its turn is sent to
    /// the gate's holder and runs. A holder that hung up meanwhile gets nothing and its
    /// requests go back to the head of the queue.
    pub fn grant(&mut self, next: Next) {
        let Next { gate, requests } = next;
        let turn = self.totals.train.granted + self.totals.infer.granted + 1;
        let reply = TurnReply {
            kind: gate.kind,
            turn,
            requests: requests.iter().map(|r| r.id).collect(),
        };
        if gate.grant.try_send(reply).is_err() {
            self.requeue(requests);
            return;
        }
        gate.wake.wake();
        totals_of(&mut self.totals, gate.kind).granted += 1;
        self.active = Some(Active {
            client: gate.client,
            kind: gate.kind,
            requests,
        });
    }

    /// Puts `next` back as [`Turns::due`] found it (its gate first of its kind, its
    /// requests at the head of the queue): a turn whose phase switch must wait.
    pub fn put_back(&mut self, next: Next) {
        let Next { gate, requests } = next;
        self.gates.push_front(gate);
        self.requeue(requests);
    }

    fn requeue(&mut self, mut requests: Vec<Request>) {
        while let Some(r) = requests.pop() {
            self.queue.push_front(r);
        }
        self.keep_spare(requests);
    }

    /// `client` ended a minibatch of `kind` at `end_ns`: if that ends its turn, the turn
    /// is accounted (its minibatch's duration and energy) and each request of an inference
    /// batch served (its `served` event sent). The number of requests served when it
    /// ended a turn (0 for training).
    pub fn end(
        &mut self,
        client: u64,
        kind: Kind,
        end_ns: u64,
        duration_ms: f64,
        energy_j: f64,
    ) -> Option<usize> {
        if !self
            .active
            .as_ref()
            .is_some_and(|a| a.client == client && a.kind == kind)
        {
            return None;
        }
        let active = self.active.take()?;
        let t = totals_of(&mut self.totals, kind);
        t.ended += 1;
        t.duration_ms += duration_ms;
        t.energy_j += energy_j;
        let served = active.requests.len();
        if kind == Kind::Infer && !self.queue.is_empty() {
            self.held_for = Some((client, end_ns.saturating_add(HOLD_NS)));
        }
        let batch = served as u32;
        let mut requests = active.requests;
        for r in requests.drain(..) {
            let latency_ms = end_ns.saturating_sub(r.at_ns) as f64 / 1e6;
            let s = &mut self.totals;
            s.served += 1;
            s.late += u64::from(latency_ms > self.plan.slo_ms);
            s.latency_sum_ms += latency_ms;
            s.latency_max_ms = s.latency_max_ms.max(latency_ms);
            if let Some(tx) = r.notify {
                tx.send(ReplyBody::Served {
                    request: r.id,
                    latency_ms,
                    batch,
                });
            }
        }
        self.keep_spare(requests);
        Some(served)
    }

    /// Keeps the emptied `list` for the next batch if it holds more than the spare.
    fn keep_spare(&mut self, list: Vec<Request>) {
        if list.capacity() > self.spare.capacity() {
            self.spare = list;
        }
    }

    /// `client`'s connection closed: it leaves its gate, and a turn it held is aborted
    /// (an inference batch's requests go back to the head of the queue).
    pub fn leave(&mut self, client: u64) {
        self.gates.retain(|g| g.client != client);
        if self.held_for.is_some_and(|(held, _)| held == client) {
            self.held_for = None;
        }
        if self.active.as_ref().is_some_and(|a| a.client == client) {
            if let Some(a) = self.active.take() {
                totals_of(&mut self.totals, a.kind).aborted += 1;
                self.requeue(a.requests);
            }
        }
    }

    /// The plan and the accounting now.
    pub fn report(&self) -> ScheduleReply {
        ScheduleReply {
            plan: (self.totals.replans > 0).then_some(self.plan),
            replan_pending: self.next_plan.is_some(),
            waiting: self.waiting() as u32,
            ..self.totals
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{bounded, Receiver};

    fn gate(t: &mut Turns, client: u64, kind: Kind) -> Receiver<TurnReply> {
        let (grant, rx) = bounded(1);
        let (wake, _) = crate::ipc::events::queue().unwrap();
        t.wait(Gate {
            client,
            kind,
            grant,
            wake,
        });
        rx
    }

    fn request(id: u64, at_ns: u64) -> Request {
        Request {
            id,
            at_ns,
            notify: None,
        }
    }

    fn run_next(t: &mut Turns) -> Option<Kind> {
        run_at(t, u64::MAX)
    }

    /// Grants the turn due at `now_ns`, if one is.
    fn run_at(t: &mut Turns, now_ns: u64) -> Option<Kind> {
        let n = t.due(now_ns)?;
        let kind = n.gate.kind;
        t.grant(n);
        Some(kind)
    }

    #[test]
    fn a_training_minibatch_that_ends_with_requests_waiting_hands_over_the_queue_in_batches() {
        let mut t = Turns::default();
        t.set_plan(SchedulePlan {
            max_batch: 2,
            slo_ms: 100.0,
            ..DEFAULT_PLAN
        });
        let train = gate(&mut t, 1, Kind::Train);
        assert_eq!(run_next(&mut t), Some(Kind::Train));
        assert!(train.try_recv().unwrap().requests.is_empty());
        // Requests arrive during the minibatch; the inference server waits.
        for id in 1..=3 {
            t.queue(request(id, 0));
        }
        let infer = gate(&mut t, 2, Kind::Infer);
        let _train = gate(&mut t, 1, Kind::Train);
        assert!(t.due(0).is_none(), "a running turn is not preempted");
        assert!(t.end(1, Kind::Train, 50_000_000, 50.0, 1.0).is_some());
        // The queue goes first, in batches of at most two, oldest first.
        assert_eq!(run_next(&mut t), Some(Kind::Infer));
        assert_eq!(infer.try_recv().unwrap().requests, vec![1, 2]);
        assert!(t.end(2, Kind::Infer, 60_000_000, 10.0, 0.2).is_some());
        let infer = gate(&mut t, 2, Kind::Infer);
        assert_eq!(run_next(&mut t), Some(Kind::Infer));
        assert_eq!(infer.try_recv().unwrap().requests, vec![3]);
        assert!(t.end(2, Kind::Infer, 200_000_000, 10.0, 0.2).is_some());
        // Then training again, though the server waits again.
        let _infer = gate(&mut t, 2, Kind::Infer);
        assert_eq!(run_next(&mut t), Some(Kind::Train));
        let r = t.report();
        assert_eq!((r.queued, r.served, r.late, r.waiting), (3, 3, 1, 0));
        assert_eq!((r.train.granted, r.train.ended, r.infer.ended), (2, 1, 2));
        assert!((r.infer.energy_j - 0.4).abs() < 1e-12);
        assert_eq!(r.replans, 1);
    }

    #[test]
    fn a_batch_that_ends_with_requests_waiting_keeps_the_next_turn_for_its_server_a_while() {
        let mut t = Turns::default();
        let ms = 1_000_000;
        t.queue(request(1, 0));
        let _infer = gate(&mut t, 2, Kind::Infer);
        assert_eq!(run_at(&mut t, 0), Some(Kind::Infer));
        // A request arrives during the batch; the trainer waits at its gate.
        t.queue(request(2, ms));
        let _train = gate(&mut t, 1, Kind::Train);
        assert_eq!(t.end(2, Kind::Infer, 10 * ms, 10.0, 0.1), Some(1));
        assert_eq!(t.held_until(), Some(10 * ms + HOLD_NS));
        assert!(t.due(11 * ms).is_none(), "kept for the server");
        let infer = gate(&mut t, 2, Kind::Infer);
        assert_eq!(run_at(&mut t, 11 * ms), Some(Kind::Infer));
        assert_eq!(infer.try_recv().unwrap().requests, vec![2]);
        assert_eq!(t.held_until(), None);
        // A server that does not come back holds training up no longer than the hold.
        t.queue(request(3, 12 * ms));
        assert!(t.end(2, Kind::Infer, 20 * ms, 9.0, 0.1).is_some());
        assert!(t.due(20 * ms + HOLD_NS - 1).is_none());
        assert_eq!(run_at(&mut t, 20 * ms + HOLD_NS), Some(Kind::Train));
        assert_eq!(t.held_until(), None);
        // Nor one that hung up, nor an empty queue.
        assert!(t.end(1, Kind::Train, 90 * ms, 60.0, 1.0).is_some());
        let _infer = gate(&mut t, 2, Kind::Infer);
        assert_eq!(run_at(&mut t, 90 * ms), Some(Kind::Infer));
        t.queue(request(4, 91 * ms));
        let _train = gate(&mut t, 1, Kind::Train);
        assert!(t.end(2, Kind::Infer, 95 * ms, 5.0, 0.1).is_some());
        t.leave(2);
        assert_eq!(run_at(&mut t, 95 * ms), Some(Kind::Train));
        let _infer = gate(&mut t, 3, Kind::Infer);
        assert!(t.end(1, Kind::Train, 150 * ms, 55.0, 1.0).is_some());
        assert_eq!(run_at(&mut t, 150 * ms), Some(Kind::Infer));
        let _train = gate(&mut t, 1, Kind::Train);
        assert_eq!(t.end(3, Kind::Infer, 160 * ms, 10.0, 0.1), Some(1));
        assert_eq!(t.held_until(), None, "nothing waits");
        assert_eq!(run_at(&mut t, 160 * ms), Some(Kind::Train));
    }

    #[test]
    fn without_an_inference_server_training_keeps_the_gpu_and_the_queue_waits() {
        let mut t = Turns::default();
        t.queue(request(1, 0));
        for _ in 0..3 {
            let _g = gate(&mut t, 1, Kind::Train);
            assert_eq!(run_next(&mut t), Some(Kind::Train));
            assert!(t.end(1, Kind::Train, 1, 1.0, 0.1).is_some());
        }
        assert_eq!(t.report().waiting, 1);
    }

    #[test]
    fn a_holder_that_leaves_mid_batch_gives_its_requests_back_to_the_head_of_the_queue() {
        let mut t = Turns::default();
        for id in 1..=3 {
            t.queue(request(id, 0));
        }
        let _dead = gate(&mut t, 7, Kind::Infer);
        assert_eq!(run_next(&mut t), Some(Kind::Infer));
        t.leave(7);
        t.queue(request(4, 0));
        let live = gate(&mut t, 8, Kind::Infer);
        assert_eq!(run_next(&mut t), Some(Kind::Infer));
        assert_eq!(live.try_recv().unwrap().requests, vec![1, 2, 3, 4]);
        assert!(
            t.end(7, Kind::Infer, 1, 1.0, 1.0).is_none(),
            "the leaver ends nothing"
        );
        assert_eq!(t.end(8, Kind::Infer, 1, 1.0, 1.0), Some(4));
        let r = t.report();
        assert_eq!((r.served, r.infer.aborted, r.infer.ended), (4, 1, 1));
    }

    #[test]
    fn a_gate_whose_holder_hung_up_is_skipped_without_losing_its_batch() {
        let mut t = Turns::default();
        t.queue(request(1, 0));
        drop(gate(&mut t, 3, Kind::Infer));
        let n = t.due(0).unwrap();
        t.grant(n);
        assert_eq!(t.report().waiting, 1);
        assert_eq!(t.report().infer.granted, 0);
        let live = gate(&mut t, 4, Kind::Infer);
        assert_eq!(run_next(&mut t), Some(Kind::Infer));
        assert_eq!(live.try_recv().unwrap().requests, vec![1]);
    }

    #[test]
    fn a_new_plan_waits_for_the_turn_boundary() {
        let mut t = Turns::default();
        assert_eq!(t.report().plan, None);
        let _g = gate(&mut t, 1, Kind::Train);
        assert_eq!(run_next(&mut t), Some(Kind::Train));
        t.set_plan(SchedulePlan {
            max_batch: 1,
            ..DEFAULT_PLAN
        });
        assert!(t.report().replan_pending);
        assert_eq!(t.plan().max_batch, 32);
        t.queue(request(1, 0));
        t.queue(request(2, 0));
        assert!(t.end(1, Kind::Train, 1, 1.0, 1.0).is_some());
        let infer = gate(&mut t, 2, Kind::Infer);
        assert_eq!(run_next(&mut t), Some(Kind::Infer));
        assert_eq!(
            infer.try_recv().unwrap().requests,
            vec![1],
            "the new batch size"
        );
        assert_eq!(t.report().waiting, 1, "nothing dropped");
    }

    /// Found by a review: a departed planner's declared arrivals were served ahead of real
    /// users' requests; withdrawn, they are counted for the bound on unserved ones.
    #[test]
    fn a_departing_planners_declared_arrivals_are_withdrawn() {
        let mut t = Turns::default();
        let (sub, _rx) = crate::ipc::events::queue().unwrap();
        t.queue(request(1, 0));
        t.queue(Request {
            id: 2,
            at_ns: 1,
            notify: Some(sub),
        });
        t.queue(request(3, 2));
        assert_eq!(t.planner_left(), 2);
        assert_eq!(t.waiting(), 1);
        assert_eq!(t.report().queued, 3, "queued keeps counting them");
    }
}
