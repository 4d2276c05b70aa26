//! The agent's protocol: one set of serde types, decoded from either encoding.
//!
//! Both encodings carry these types (see `docs/protocol.md`): enums are externally
//! tagged and snake_case, no untagged or flattened enums, so bincode 2 and JSON agree.
//! Every request carries an `id` that its reply echoes; subscription events carry id 0.

use serde::{Deserialize, Serialize};

/// The protocol version; `hello` rejects any other.
pub const PROTOCOL_VERSION: u32 = 1;
/// The largest frame or JSON line, bytes.
pub const MAX_FRAME: usize = 64 * 1024;

/// A request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub id: u64,
    pub body: RequestBody,
}

/// What a request asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestBody {
    /// Opens the session: the client's protocol version and a name for logs.
    Hello { version: u32, client: String },
    /// The board and what it is doing.
    Status,
    /// Presets and the mode space's size.
    Modes,
    /// Applies a mode under a lease (one controller at a time).
    SetMode {
        mode: ModeRequest,
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
    SetBudget { watts: Option<f64> },
    /// The latest sample, and the mean power and energy of the last `window_ms`.
    Telemetry { window_ms: Option<u64> },
    /// Marks a minibatch's start.
    MinibatchBegin { kind: Kind, id: u64 },
    /// Marks its end; the reply carries its duration, mean power and energy.
    MinibatchEnd { kind: Kind, id: u64 },
    /// Streams a sample event every `every_ms` (0 stops).
    Subscribe { every_ms: u64 },
}

/// A mode, as a preset or as pinned knobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModeRequest {
    Preset {
        name: String,
    },
    Knobs {
        cores: Option<u32>,
        cpu_khz: Option<u64>,
        gpu_hz: Option<u64>,
        emc_hz: Option<u64>,
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
    pub id: u64,
    pub body: ReplyBody,
}

/// What a reply says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyBody {
    Hello {
        version: u32,
        agent: String,
        board: String,
    },
    Status(Status),
    Modes {
        presets: Vec<PresetInfo>,
        space_size: u64,
    },
    ModeSet {
        writes: u32,
        switch_us: f64,
        lease: LeaseKind,
        /// The budget guard holds the board below the request.
        capped: bool,
    },
    Released {
        restored: bool,
    },
    Budget {
        watts: Option<f64>,
    },
    Telemetry(TelemetryReply),
    Minibatch(MinibatchReply),
    /// Success with nothing to say (renew, subscribe).
    Ok,
    /// A subscription's sample.
    Sample(SampleReply),
    /// The budget guard changed the cap (sent to the lease holder).
    Guard {
        step: String,
        module_w: f64,
        budget_w: f64,
    },
    /// A knob changed behind jpower's back during the caller's lease.
    ExternalChange {
        paths: Vec<String>,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
    /// The caller's lease ended without a request of its own (it expired, or another
    /// controller took over a persistent lease).
    LeaseEnded {
        reason: String,
    },
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

/// `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub board: String,
    pub soc: String,
    pub simulated: bool,
    pub online_cpus: Vec<u32>,
    /// Per cluster: min, max, running.
    pub cpu_khz: Vec<[u64; 3]>,
    pub gpu_hz: Option<[u64; 3]>,
    /// `null`: no cap.
    pub emc_cap_hz: Option<u64>,
    pub holder: Option<Holder>,
    pub budget_w: Option<f64>,
    /// The guard's caps in force, in words (they may not bind the current request).
    pub guard: Option<String>,
    pub module_w: Option<f64>,
    pub ring_path: String,
    pub last_switch_us: Option<f64>,
}

/// Who holds the board.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub client: String,
    pub pid: u32,
    pub uid: u32,
    pub lease: LeaseKind,
}

/// A preset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresetInfo {
    pub id: u32,
    pub name: String,
    pub default: bool,
}

/// `telemetry`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryReply {
    pub ring_path: String,
    pub latest: Option<SampleReply>,
    pub window: Option<WindowReply>,
}

/// One sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleReply {
    pub t_ns: u64,
    pub module_mw: u64,
    pub rails: Vec<RailReply>,
    pub flags: u32,
}

/// One rail of a sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RailReply {
    pub name: String,
    pub power_mw: u64,
}

/// A window's statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowReply {
    pub duration_ms: f64,
    pub samples: u64,
    pub mean_w: f64,
    pub energy_j: f64,
}

/// What a minibatch does: training or inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Train,
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

/// A finished minibatch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MinibatchReply {
    pub kind: Kind,
    pub id: u64,
    pub duration_ms: f64,
    pub mean_w: f64,
    pub energy_j: f64,
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
