//! Profiling on a live board through the agent, in real time: the profiler holds a
//! session lease, asks the agent for each mode, and brackets every minibatch of a running
//! workload with the agent's minibatch markers, whose replies carry the minibatch's
//! duration and mean power from the agent's telemetry ring. The same path serves a real
//! Jetson, a `--root` tree and a simulated board (with the agent running on it); a
//! training loop in another process or language can do exactly this over the socket
//! (docs/protocol.md: `set_mode`, `minibatch_begin`, `minibatch_end`).

use crate::control::mode::{ModeSpace, PinnedMode};
use crate::gpu::net::{Backend, Trainer};
use crate::ipc::client::Client;
use crate::ipc::protocol::Kind;
use crate::ipc::protocol::{LeaseKind, ModeRequest, ReplyBody, RequestBody};
use crate::predict::profile::Source;

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

    fn measure(&mut self, mode: &PinnedMode) -> Result<(f64, f64), String> {
        if self.current != Some(*mode) {
            // A session lease without expiry: it ends when this process exits or ends it.
            self.client
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
                .map_err(|e| e.to_string())?;
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
        self.client
            .request(RequestBody::Release)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

impl<W: Workload> Source for AgentSource<W> {
    fn minibatch(&mut self, mode: &PinnedMode, _since_switch: u32) -> Option<(f64, f64)> {
        match self.measure(mode) {
            Ok(m) => Some(m),
            Err(e) => {
                self.error.get_or_insert(e);
                None
            }
        }
    }

    fn truth(&self, _mode: &PinnedMode) -> Option<(f64, f64)> {
        None
    }

    fn modes(&self) -> Vec<PinnedMode> {
        self.space.iter().collect()
    }
}
