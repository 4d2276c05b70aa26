//! Profiling on a live board through the agent, in real time: the profiler holds a
//! session lease, asks the agent for each mode, and brackets every minibatch of a running
//! workload with the agent's minibatch markers, whose replies carry the minibatch's
//! duration and mean power from the agent's telemetry ring. The same path serves a real
//! Jetson, a `--root` tree and a simulated board (with the agent running on it); a
//! training loop in another process or language can do exactly this over the socket
//! (docs/protocol.md: `set_mode`, `minibatch_begin`, `minibatch_end`).
//!
//! [`MarkerSource`] turns this around for a model jpower cannot run itself (an inference
//! engine in another process): that program marks its minibatches, and the profiler sets
//! each mode and reads what they add to the agent's `minibatch_totals`.

use crate::control::mode::{ModeSpace, PinnedMode};
use crate::gpu::net::{Backend, Trainer};
use crate::ipc::client::Client;
use crate::ipc::protocol::{Kind, KindTotals, LeaseKind, ModeRequest, ReplyBody, RequestBody};
use crate::predict::profile::Source;
use std::time::{Duration, Instant};

/// A workload the profiler runs one minibatch at a time.
pub trait Workload {
    /// Runs one minibatch to completion.
    fn minibatch(&mut self) -> Result<(), String>;
}

impl<B: Backend> Workload for Trainer<B> {
    fn minibatch(&mut self) -> Result<(), String> {
        self.step().map(|_| ()).map_err(|e| e.to_string())
    }
}

/// Minibatches of `workload` measured by the agent at `client`, over the modes of `space`.
pub struct AgentSource<W: Workload> {
    client: Client,
    workload: W,
    space: ModeSpace,
    current: Option<PinnedMode>,
    next_id: u64,
    /// The first failure (the profiler only sees a missing measurement).
    pub error: Option<String>,
}

impl<W: Workload> AgentSource<W> {
    /// Measures `workload` through the agent at `client`, over the modes of `space`.
    pub fn new(client: Client, workload: W, space: ModeSpace) -> AgentSource<W> {
        AgentSource {
            client,
            workload,
            space,
            current: None,
            next_id: 1,
            error: None,
        }
    }

    /// Times one minibatch of the workload, outside any marker, milliseconds.
    pub fn time_minibatch(&mut self) -> Result<f64, String> {
        let start = std::time::Instant::now();
        self.workload.minibatch()?;
        Ok(start.elapsed().as_secs_f64() * 1e3)
    }

    /// The connection to the agent, whose lease the profile holds.
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Ends the lease: the agent puts back what was there before it.
    pub fn release(mut self) -> Result<(), String> {
        release(&mut self.client)
    }
}

/// Ends the session lease: the agent puts back what was there before it.
fn release(client: &mut Client) -> Result<(), String> {
    client
        .request(RequestBody::Release)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Sets `mode` under a session lease without expiry: it ends when this process exits or
/// ends it.
fn set_mode(client: &mut Client, mode: &PinnedMode) -> Result<(), String> {
    client
        .request(RequestBody::SetMode {
            mode: ModeRequest::Knobs {
                cores: Some(mode.cores),
                cpu_khz: Some(mode.cpu_hz / 1000),
                gpu_hz: Some(mode.gpu_hz),
                emc_hz: Some(mode.emc_hz),
                snap: false,
            },
            lease: LeaseKind::Session,
            timeout_ms: Some(0),
        })
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Minibatches ended after a switch that are not counted: the one in flight at the
/// switch ran partly at the mode before, and the next lets the clocks and caches settle.
const SETTLE: u64 = 2;
/// How often the totals are read while waiting for a minibatch to end.
const POLL: Duration = Duration::from_millis(5);

/// Minibatches of `kind` that another program runs and marks through the agent
/// (`minibatch_begin`, `minibatch_end`), measured from what they add to the agent's
/// `minibatch_totals`: each call to [`Source::minibatch`] waits for at least one more to
/// end and gives the mean duration and power of those that did. The mode is set under
/// this connection's session lease; after a switch, [`SETTLE`] minibatches are not counted.
pub struct MarkerSource {
    client: Client,
    kind: Kind,
    space: ModeSpace,
    current: Option<PinnedMode>,
    /// The totals the next measurement starts from.
    from: KindTotals,
    /// How long to wait for a minibatch to end before giving up.
    timeout: Duration,
    /// The first failure (the profiler only sees a missing measurement).
    pub error: Option<String>,
}

impl MarkerSource {
    /// Measures the minibatches of `kind` marked through the agent at `client`, over the
    /// modes of `space`, waiting at most `timeout` for each.
    pub fn new(client: Client, kind: Kind, space: ModeSpace, timeout: Duration) -> MarkerSource {
        MarkerSource {
            client,
            kind,
            space,
            current: None,
            from: KindTotals::default(),
            timeout,
            error: None,
        }
    }

    fn totals(&mut self) -> Result<KindTotals, String> {
        match self
            .client
            .request(RequestBody::MinibatchTotals)
            .map_err(|e| e.to_string())?
        {
            ReplyBody::MinibatchTotals(t) => Ok(match self.kind {
                Kind::Train => t.train,
                Kind::Infer => t.infer,
            }),
            other => Err(format!("unexpected reply to minibatch_totals: {other:?}")),
        }
    }

    /// Waits until `n` more minibatches than in `from` ended: the totals then.
    fn wait_for(&mut self, from: &KindTotals, n: u64) -> Result<KindTotals, String> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let now = self.totals()?;
            if now.minibatches >= from.minibatches + n {
                return Ok(now);
            }
            if Instant::now() >= deadline {
                let kind = match self.kind {
                    Kind::Train => "train",
                    Kind::Infer => "infer",
                };
                return Err(format!(
                    "no minibatch of kind {kind} ended through the agent in {:.0} s: run the \
                     program with its minibatch_begin and minibatch_end markers \
                     (docs/protocol.md) while this measures",
                    self.timeout.as_secs_f64()
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Ends the lease: the agent puts back what was there before it.
    pub fn release(mut self) -> Result<(), String> {
        release(&mut self.client)
    }
}

impl Measurer for MarkerSource {
    fn measure(&mut self, mode: &PinnedMode) -> Result<(f64, f64), String> {
        if self.current != Some(*mode) {
            set_mode(&mut self.client, mode)?;
            self.current = Some(*mode);
            let now = self.totals()?;
            self.from = self.wait_for(&now, SETTLE)?;
        }
        let from = self.from;
        let to = self.wait_for(&from, 1)?;
        self.from = to;
        let (n, ms) = (
            (to.minibatches - from.minibatches) as f64,
            to.duration_ms - from.duration_ms,
        );
        Ok((ms / n, (to.energy_j - from.energy_j) / (ms / 1e3)))
    }

    fn error(&mut self) -> &mut Option<String> {
        &mut self.error
    }

    fn space(&self) -> &ModeSpace {
        &self.space
    }
}

impl<W: Workload> Measurer for AgentSource<W> {
    fn measure(&mut self, mode: &PinnedMode) -> Result<(f64, f64), String> {
        if self.current != Some(*mode) {
            set_mode(&mut self.client, mode)?;
            self.current = Some(*mode);
        }
        let id = self.next_id;
        self.next_id += 1;
        let kind = Kind::Train;
        self.client
            .request(RequestBody::MinibatchBegin { kind, id })
            .map_err(|e| e.to_string())?;
        self.workload.minibatch()?;
        match self
            .client
            .request(RequestBody::MinibatchEnd { kind, id })
            .map_err(|e| e.to_string())?
        {
            ReplyBody::Minibatch(m) => Ok((m.duration_ms, m.mean_w)),
            other => Err(format!("unexpected reply to minibatch_end: {other:?}")),
        }
    }

    fn error(&mut self) -> &mut Option<String> {
        &mut self.error
    }

    fn space(&self) -> &ModeSpace {
        &self.space
    }
}

/// A source that measures minibatches through the agent, one at a time; [`Source`]
/// follows: the first failure is kept, and every later measurement fails at once.
pub trait Measurer {
    /// One minibatch at `mode`: milliseconds and watts.
    fn measure(&mut self, mode: &PinnedMode) -> Result<(f64, f64), String>;
    /// Where the first failure is kept.
    fn error(&mut self) -> &mut Option<String>;
    /// The modes it measures.
    fn space(&self) -> &ModeSpace;
}

impl<T: Measurer> Source for T {
    fn minibatch(&mut self, mode: &PinnedMode, _since_switch: u32) -> Option<(f64, f64)> {
        if self.error().is_some() {
            return None;
        }
        match self.measure(mode) {
            Ok(m) => Some(m),
            Err(e) => {
                self.error().get_or_insert(e);
                None
            }
        }
    }

    fn truth(&self, _mode: &PinnedMode) -> Option<(f64, f64)> {
        None
    }

    fn modes(&self) -> Vec<PinnedMode> {
        self.space().iter().collect()
    }
}
