//! The agent's protocol: one set of serde types, decoded from either encoding.
//!
//! Both encodings carry these types (see `docs/protocol.md`): enums are externally
//! tagged and snake_case, no untagged or flattened enums, so bincode 2 and JSON agree.
//! Every request carries an `id` that its reply echoes; subscription events carry id 0.

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::sync::Arc;

/// The protocol version this agent speaks. `docs/protocol.md` keeps a changelog of what
/// each version changed.
pub const PROTOCOL_VERSION: u32 = 6;
/// The oldest version `hello` still accepts: versions 4 to 6 only added messages a
/// version 3 client never sends nor receives, so such a client keeps working unchanged.
pub const OLDEST_PROTOCOL_VERSION: u32 = 3;
/// The largest frame or JSON line, bytes.
pub const MAX_FRAME: usize = 64 * 1024;

/// A request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Chosen by the client, from 1 up; the reply echoes it (0 is refused).
    pub id: u64,
    /// What the request asks.
    pub body: RequestBody,
}

/// What a request asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestBody {
    /// Opens the session: the client's protocol version and a name for logs.
    Hello {
        /// The client's protocol version ([`OLDEST_PROTOCOL_VERSION`] to [`PROTOCOL_VERSION`]).
        version: u32,
        /// A name for the client, used in the agent's logs and `status.holder.client`.
        client: String,
    },
    /// The board and what it is doing.
    Status,
    /// Presets and the mode space's size.
    Modes,
    /// Applies a mode under a lease (one controller at a time).
    SetMode {
        /// The mode to apply.
        mode: ModeRequest,
        /// How long the lease holds.
        lease: LeaseKind,
        /// A session lease ends if not renewed within this time (`null`: the config's
        /// `lease_timeout_ms`, 0 = none). Persistent leases do not expire.
        timeout_ms: Option<u64>,
    },
    /// Renews the caller's lease.
    Renew,
    /// Ends the caller's lease: the settings from before it come back.
    Release,
    /// Sets (or clears, with `null`) the power budget.
    SetBudget {
        /// The budget, watts (positive and finite); `null` clears it.
        watts: Option<f64>,
    },
    /// The latest sample, and the mean power and energy of the last `window_ms`.
    Telemetry {
        /// The window to summarise, milliseconds back from now; `null`: no window statistics.
        window_ms: Option<u64>,
    },
    /// Marks a minibatch's start.
    MinibatchBegin {
        /// Training or inference.
        kind: Kind,
        /// The minibatch's number; `(kind, id)` names the minibatch on this connection.
        id: u64,
    },
    /// Marks its end; the reply carries its duration, mean power and energy (and, after a
    /// `minibatch_phase`, the split between its phases: a `phased_minibatch` reply).
    MinibatchEnd {
        /// Training or inference, as given to `minibatch_begin`.
        kind: Kind,
        /// The minibatch's number, as given to `minibatch_begin`.
        id: u64,
    },
    /// Streams a sample event every `every_ms` (0 stops).
    Subscribe {
        /// Interval between sample events, milliseconds (at least 10); 0 stops the subscription.
        every_ms: u64,
    },
    /// Sets every INA3221's averaging under the caller's lease (a session lease unless it
    /// holds one): the averaging from before comes back when the lease ends. The sampler
    /// restarts at the new refresh, in a new ring at the same path.
    SetAveraging {
        /// Conversions averaged: 1, 4, 16, 64, 128, 256, 512 or 1024.
        samples: u32,
    },
    /// Marks that an open minibatch enters `phase` now (version 4). A minibatch begins in
    /// `fetch`: a loop sends `compute` when its data has arrived.
    MinibatchPhase {
        /// Training or inference, as given to `minibatch_begin`.
        kind: Kind,
        /// The minibatch's number, as given to `minibatch_begin`.
        id: u64,
        /// The phase it enters.
        phase: Phase,
    },
    /// The newest record of the activity counters: GPU, CPU, EMC, RAM, fan, disks (version
    /// 4).
    Activity,
    /// What every connection's ended minibatches add up to since the agent started, per
    /// kind (version 5): how a program that did not send the markers (`jpower
    /// characterize --run` around a training command) learns their time, energy and phases.
    MinibatchTotals,
    /// Sets the real-time schedule (version 6): the inference batch size, the latency
    /// target, a declared arrival rate and the per-phase modes. Taken at the next phase
    /// boundary; requests already queued stay queued.
    SchedulePlan(SchedulePlan),
    /// Waits for the caller's turn on the GPU (version 6): answered by `turn` when the
    /// scheduler grants it, which ends at the caller's next `minibatch_end` of `kind`.
    ScheduleGate {
        /// Training or inference: the phase the caller runs in its turn.
        kind: Kind,
    },
    /// Queues one inference request (version 6); a `served` event tells the caller when
    /// the inference batch that held it ended.
    ScheduleSubmit,
    /// The real-time scheduler's plan and accounting (version 6).
    ScheduleStatus,
}

/// What an error about a frequency outside the board's table ends with, where the request
/// has a `snap` field (the CLI shows its own `--snap` instead).
pub const SNAP_ADVICE: &str = "; send \"snap\":true to take the nearest";

/// A mode, as a preset or as pinned knobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModeRequest {
    /// A preset of the board's nvpmodel file.
    Preset {
        /// The preset's name (case-insensitive) or its id as a string.
        name: String,
    },
    /// Pinned knobs; those left `null` keep what is requested now.
    Knobs {
        /// Number of CPUs online (1 to the CPU count; cpu0 stays online).
        cores: Option<u32>,
        /// CPU frequency of every cluster, kHz, pinned (min = max).
        cpu_khz: Option<u64>,
        /// GPU frequency, Hz, pinned (min = max).
        gpu_hz: Option<u64>,
        /// The nvpmodel EMC cap, Hz (a ceiling, not a lock).
        emc_hz: Option<u64>,
        /// Whether a frequency not in the board's table takes the nearest table value instead of
        /// being refused.
        snap: bool,
    },
}

/// How long a lease holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseKind {
    /// Until the client disconnects, its process dies, or it expires unrenewed.
    Session,
    /// Until `release` or `jpower restore` (what `jpower set` through the agent uses).
    Persistent,
}

/// A reply (or, with id 0, an event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// The request's id, or 0 for an event or the error sent before a connection closes.
    pub id: u64,
    /// What the reply says.
    pub body: ReplyBody,
}

/// What a reply says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyBody {
    /// Answers `hello`.
    Hello {
        /// The protocol version the agent speaks.
        version: u32,
        /// The agent's name and version (`jpower 0.1.0`).
        agent: String,
        /// The board's device-tree model.
        board: String,
    },
    /// Answers `status`.
    Status(Status),
    /// Answers `modes`.
    Modes {
        /// The presets of the board's nvpmodel file (empty when it has none).
        presets: Vec<PresetInfo>,
        /// The number of distinct modes (cores x CPU x GPU x EMC settings).
        space_size: u64,
    },
    /// Answers `set_mode`.
    ModeSet {
        /// The number of sysfs writes the switch made.
        writes: u32,
        /// How long the switch took, microseconds.
        switch_us: f64,
        /// The lease now held.
        lease: LeaseKind,
        /// The budget guard holds the board below the request.
        capped: bool,
    },
    /// Answers `release`.
    Released {
        /// Whether a lease was ended and the settings from before it restored (false without a
        /// lease, or when the restore failed).
        restored: bool,
    },
    /// Answers `set_budget`.
    Budget {
        /// The budget now in force, watts; `null` when cleared.
        watts: Option<f64>,
    },
    /// Answers `telemetry`.
    Telemetry(TelemetryReply),
    /// Answers `minibatch_end`.
    Minibatch(MinibatchReply),
    /// Success with nothing to say (renew, subscribe).
    Ok,
    /// A subscription's sample.
    Sample(SampleReply),
    /// The budget guard changed the cap (sent to the lease holder).
    Guard {
        /// What the guard did, in words.
        step: String,
        /// The module's mean power over the guard's window, watts.
        module_w: f64,
        /// The budget, watts.
        budget_w: f64,
    },
    /// A knob changed behind jpower's back during the caller's lease.
    ExternalChange {
        /// The knobs' sysfs paths, relative to the board root.
        paths: Vec<String>,
    },
    /// A request failed; with id 0, input that could not be decoded (the connection then
    /// closes) or a connection beyond `max_clients`.
    Error {
        /// The error's stable code, for programs.
        code: ErrorCode,
        /// What went wrong, for people; the wording may change.
        message: String,
    },
    /// The caller's lease ended without a request of its own (it expired, or another
    /// controller took over a persistent lease).
    LeaseEnded {
        /// Why the lease ended, in words.
        reason: String,
    },
    /// Answers `set_averaging`.
    Averaging {
        /// Conversions averaged now.
        samples: u32,
        /// The slowest rail's refresh interval now, microseconds.
        refresh_us: u32,
        /// The rate the restarted sampler runs at, samples per second.
        rate_hz: f64,
    },
    /// Answers `minibatch_end` of a minibatch that had a `minibatch_phase` marker (version 4).
    PhasedMinibatch(PhasedMinibatchReply),
    /// Answers `activity` (version 4).
    Activity(ActivityReply),
    /// Answers `minibatch_totals` (version 5).
    MinibatchTotals(MinibatchTotalsReply),
    /// Answers `schedule_gate`: the caller's turn (version 6).
    Turn(TurnReply),
    /// Answers `schedule_submit` (version 6).
    Submitted {
        /// The request's number, as the `served` event and the `turn` name it.
        request: u64,
    },
    /// The inference batch that held the caller's request ended (an event, version 6).
    Served {
        /// The request's number, as `submitted` gave it.
        request: u64,
        /// From its `schedule_submit` to the `minibatch_end` of its batch, milliseconds.
        latency_ms: f64,
        /// The number of requests in its batch.
        batch: u32,
    },
    /// Answers `schedule_plan` and `schedule_status` (version 6).
    Schedule(ScheduleReply),
}

/// Stable error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Malformed, oversized or truncated input, or a request id of 0; the connection
    /// closes when the input cannot be decoded.
    BadRequest,
    /// Unsupported protocol version.
    Version,
    /// Another client holds the board.
    Busy,
    /// The caller may read but not control.
    Forbidden,
    /// No such preset, no lease to renew, or a minibatch that was never begun.
    NotFound,
    /// The mode is not valid on this board.
    InvalidMode,
    /// A switch failed (and was rolled back).
    Failed,
    /// The request conflicts with what is already so (a minibatch already begun).
    Conflict,
}

/// `status`. Built without allocating (the status round trip is a hot path): its texts
/// are shared with the agent's state, its lists held inline up to a board's size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// The board's device-tree model.
    pub board: Arc<str>,
    /// The SoC, lowercase (`t234`, `t194`, `t210`, ...).
    pub soc: Arc<str>,
    /// Whether the board is simulated.
    pub simulated: bool,
    /// The CPUs online.
    pub online_cpus: SmallVec<[u32; 16]>,
    /// Per cluster: min, max, running.
    pub cpu_khz: SmallVec<[[u64; 3]; 4]>,
    /// GPU min, max and running frequency, Hz; `null` without a GPU devfreq device.
    pub gpu_hz: Option<[u64; 3]>,
    /// `null`: no cap.
    pub emc_cap_hz: Option<u64>,
    /// Who holds the lease; `null` when nobody does.
    pub holder: Option<Holder>,
    /// The power budget, watts; `null` without one.
    pub budget_w: Option<f64>,
    /// The guard's caps in force, in words (they may not bind the current request).
    pub guard: Option<Arc<str>>,
    /// Module power of the latest sample, watts.
    pub module_w: Option<f64>,
    /// Path of the telemetry ring (`docs/telemetry-ring.md`).
    pub ring_path: Arc<str>,
    /// How long the last mode switch took, microseconds; `null` before the first.
    pub last_switch_us: Option<f64>,
}

/// Who holds the board.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The hello name with the pid appended (`client N (pid P)` without a hello).
    pub client: Arc<str>,
    /// The holder's process id (`SO_PEERCRED`).
    pub pid: u32,
    /// The holder's user id (`SO_PEERCRED`).
    pub uid: u32,
    /// The kind of lease held.
    pub lease: LeaseKind,
}

/// A preset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresetInfo {
    /// The preset's nvpmodel id.
    pub id: u32,
    /// The preset's name.
    pub name: String,
    /// Whether it is the nvpmodel file's default mode.
    pub default: bool,
}

/// `telemetry`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryReply {
    /// Path of the telemetry ring (`docs/telemetry-ring.md`).
    pub ring_path: String,
    /// The ring's newest sample; `null` before the first.
    pub latest: Option<SampleReply>,
    /// Statistics of the last `window_ms`; `null` when the request gave none.
    pub window: Option<WindowReply>,
}

/// `activity`: the activity counters' newest record (`docs/telemetry-ring.md`, "Activity
/// section"); a counter the board lacks is `null`, never zero.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivityReply {
    /// How old the record is, milliseconds.
    pub age_ms: f64,
    /// The window utilisations and read rates are taken over, milliseconds.
    pub window_ms: f64,
    /// GPU load, per mille.
    pub gpu_load_pm: Option<u32>,
    /// The GPU's running clock, Hz.
    pub gpu_hz: Option<u64>,
    /// EMC activity, per mille of its running clock.
    pub emc_activity_pm: Option<u32>,
    /// The EMC's running clock, Hz.
    pub emc_hz: Option<u64>,
    /// The fan's PWM duty, 0-255.
    pub fan_pwm: Option<u32>,
    /// The fan's speed, rpm.
    pub fan_rpm: Option<u32>,
    /// RAM in use, kB.
    pub ram_used_kb: Option<u64>,
    /// RAM in all, kB.
    pub ram_total_kb: Option<u64>,
    /// Swap in use, kB.
    pub swap_used_kb: Option<u64>,
    /// Swap in all, kB.
    pub swap_total_kb: Option<u64>,
    /// Each possible CPU.
    pub cpus: Vec<CpuActivityReply>,
    /// Each disk followed.
    pub disks: Vec<DiskActivityReply>,
}

/// One CPU of an [`ActivityReply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuActivityReply {
    /// The CPU's id.
    pub cpu: u32,
    /// Utilisation over the window, per mille; `null` while offline.
    pub util_pm: Option<u32>,
    /// Its cluster's running clock, kHz; `null` while offline.
    pub khz: Option<u32>,
}

/// One disk of an [`ActivityReply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskActivityReply {
    /// Its kernel name (`mmcblk0`).
    pub name: String,
    /// Device number, major.
    pub major: u32,
    /// Device number, minor.
    pub minor: u32,
    /// Bytes read per second over the window.
    pub read_bps: Option<u64>,
}

/// The most rails a sample carries (the telemetry ring's).
pub const MAX_SAMPLE_RAILS: usize = 16;
/// The longest rail name, bytes (the telemetry ring's).
pub const MAX_RAIL_NAME: usize = 24;

/// One sample: built without allocating (a subscription sends up to 100 a second); on
/// the wire its lists are sequences and its names strings, as any other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleReply {
    /// When the sample was taken, `CLOCK_MONOTONIC` nanoseconds.
    pub t_ns: u64,
    /// The module's total power, milliwatts.
    pub module_mw: u64,
    /// Each rail's power, in the ring's rail order.
    pub rails: heapless::Vec<RailReply, MAX_SAMPLE_RAILS>,
    /// Bit 0 throttled, bit 1 INA3221 warning alarm, bit 2 critical alarm (as in the ring's slots).
    pub flags: u32,
}

/// One rail of a sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RailReply {
    /// The rail's name (`VDD_GPU_SOC`).
    pub name: heapless::String<MAX_RAIL_NAME>,
    /// The rail's power, milliwatts.
    pub power_mw: u64,
}

/// A window's statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowReply {
    /// The window's length, milliseconds.
    pub duration_ms: f64,
    /// Samples in the window.
    pub samples: u64,
    /// Mean module power over the window, watts.
    pub mean_w: f64,
    /// Module energy over the window (trapezoid integral), joules.
    pub energy_j: f64,
}

/// What a minibatch does: training or inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A training minibatch.
    Train,
    /// An inference minibatch.
    Infer,
}

impl std::fmt::Display for Kind {
    /// `train` or `infer`, as the protocol spells them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Train => "train",
            Kind::Infer => "infer",
        })
    }
}

/// What a minibatch is doing: waiting for its data or computing on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Waiting for the data (a training loop's fetch stall; an inference server's wait
    /// for its input).
    Fetch,
    /// Computing on the data.
    Compute,
}

/// A finished minibatch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MinibatchReply {
    /// Training or inference.
    pub kind: Kind,
    /// The minibatch's number, as the client gave it.
    pub id: u64,
    /// Time between the two markers, as the agent handled them, milliseconds.
    pub duration_ms: f64,
    /// Mean module power between the markers, watts.
    pub mean_w: f64,
    /// Module energy between the markers (trapezoid integral), joules.
    pub energy_j: f64,
}

/// A finished minibatch with its phases: the time and energy spent fetching and computing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhasedMinibatchReply {
    /// Training or inference.
    pub kind: Kind,
    /// The minibatch's number, as the client gave it.
    pub id: u64,
    /// Time between `minibatch_begin` and `minibatch_end`, milliseconds.
    pub duration_ms: f64,
    /// Mean module power between them, watts.
    pub mean_w: f64,
    /// Module energy between them, joules.
    pub energy_j: f64,
    /// Time spent in `fetch` (from `minibatch_begin` to the first phase marker, and in
    /// every later `fetch` span), milliseconds.
    pub fetch_ms: f64,
    /// Module energy over the `fetch` spans, joules.
    pub fetch_j: f64,
    /// Time spent in `compute`, milliseconds.
    pub compute_ms: f64,
    /// Module energy over the `compute` spans, joules.
    pub compute_j: f64,
}

/// The ended minibatches of one kind, summed over every connection since the agent
/// started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct KindTotals {
    /// Minibatches ended.
    pub minibatches: u64,
    /// Of those, the ones with phase markers (answered by `phased_minibatch`).
    pub phased: u64,
    /// Their durations summed, milliseconds.
    pub duration_ms: f64,
    /// Their energies summed, joules.
    pub energy_j: f64,
    /// The `fetch` time of the phased ones, milliseconds.
    pub fetch_ms: f64,
    /// The `compute` time of the phased ones, milliseconds.
    pub compute_ms: f64,
}

/// Ended minibatches per kind (version 5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct MinibatchTotalsReply {
    /// Training minibatches.
    pub train: KindTotals,
    /// Inference minibatches.
    pub infer: KindTotals,
}

/// The real-time schedule a client sets (version 6).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SchedulePlan {
    /// The most requests in one inference batch (1 to 1024).
    pub max_batch: u32,
    /// The latency target, milliseconds: a request served later counts as late.
    pub slo_ms: f64,
    /// A declared arrival rate, requests per second: the agent queues requests itself at
    /// this mean rate (Poisson arrivals); `null`: only submitted requests.
    pub rate_per_s: Option<f64>,
    /// The mode of each phase (GPU and EMC clocks only), switched at phase changes under
    /// the caller's session lease; `null`: one mode, whatever is set, held throughout.
    pub phase_modes: Option<PhaseModes>,
}

/// The GPU and EMC clocks of each phase: the fast knobs a scheduler switches between a
/// training minibatch and an inference batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseModes {
    /// The GPU clock while training, Hz (pinned; a table value).
    pub train_gpu_hz: u64,
    /// The EMC cap while training, Hz (a table value).
    pub train_emc_hz: u64,
    /// The GPU clock while serving inference, Hz.
    pub infer_gpu_hz: u64,
    /// The EMC cap while serving inference, Hz.
    pub infer_emc_hz: u64,
}

/// A turn on the GPU: what the gate's holder runs until its `minibatch_end` of `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnReply {
    /// The phase of the turn.
    pub kind: Kind,
    /// The turn's number, counted over both kinds from 1.
    pub turn: u64,
    /// The requests to serve in this inference batch (empty for a training turn), oldest
    /// first; at most the plan's `max_batch`.
    pub requests: Vec<u64>,
}

/// The turns of one kind the scheduler granted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnTotals {
    /// Turns granted.
    pub granted: u64,
    /// Turns ended by their holder's `minibatch_end`.
    pub ended: u64,
    /// Turns whose holder's connection closed first (an inference batch's requests go
    /// back to the head of the queue).
    pub aborted: u64,
    /// The ended turns' spans summed, each from its grant to its holder's `minibatch_end`
    /// (not the whole minibatch, which may have begun before the gate), milliseconds.
    pub duration_ms: f64,
    /// The module's energy over those spans, summed, joules.
    pub energy_j: f64,
}

/// The real-time scheduler's plan and accounting since the agent started (version 6).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScheduleReply {
    /// The plan in force; `null` before a client set one (then every waiting request
    /// goes in one batch of at most 32, with no latency target and one mode).
    pub plan: Option<SchedulePlan>,
    /// Whether a plan set waits for the next phase boundary.
    pub replan_pending: bool,
    /// Plans taken over at a phase boundary.
    pub replans: u64,
    /// Phase-mode switches made.
    pub mode_switches: u64,
    /// Requests waiting now.
    pub waiting: u32,
    /// Requests queued (submitted or arrived at the declared rate; those a departing
    /// planner's rate had queued and that still waited were withdrawn, but stay counted).
    pub queued: u64,
    /// Requests served (their batch ended).
    pub served: u64,
    /// Of those, the ones served later than the plan's `slo_ms` of their time.
    pub late: u64,
    /// The served requests' latencies summed, milliseconds.
    pub latency_sum_ms: f64,
    /// The longest latency served, milliseconds.
    pub latency_max_ms: f64,
    /// Training turns.
    pub train: TurnTotals,
    /// Inference turns (batches).
    pub infer: TurnTotals,
}

impl MinibatchTotalsReply {
    /// Adds an ended minibatch of `kind`: its duration and energy, and its phases' times
    /// when it had phase markers.
    pub fn add(&mut self, kind: Kind, duration_ms: f64, energy_j: f64, phases: Option<(f64, f64)>) {
        let t = match kind {
            Kind::Train => &mut self.train,
            Kind::Infer => &mut self.infer,
        };
        t.minibatches += 1;
        t.duration_ms += duration_ms;
        t.energy_j += energy_j;
        if let Some((fetch_ms, compute_ms)) = phases {
            t.phased += 1;
            t.fetch_ms += fetch_ms;
            t.compute_ms += compute_ms;
        }
    }
}

impl Reply {
    /// An error reply to request `id`.
    pub fn error(id: u64, code: ErrorCode, message: impl Into<String>) -> Reply {
        Reply {
            id,
            body: ReplyBody::Error {
                code,
                message: message.into(),
            },
        }
    }
}
