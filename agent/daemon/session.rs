//! One client connection, on its own thread: read requests (either encoding), answer them,
//! stream subscription samples and guard events. A malformed, oversized or truncated
//! frame gets an error reply and closes this connection only; a slow client times out on
//! its own socket and never holds the core lock while blocked on I/O.

use super::core::Peer;
use super::Shared;
use crate::ipc::codec::{send, CodecError, Encoding, Framed};
use crate::ipc::protocol::*;
use crate::telemetry::energy::Minibatches;
use crate::telemetry::ring::monotonic_ns;
use std::io;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long a started frame may take to arrive whole.
const FRAME_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an idle connection looks at its subscriptions, events and the stop flag.
const POLL: Duration = Duration::from_millis(100);
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The peer's pid, uid and whether it may control.
fn peer(stream: &UnixStream, client: u64, shared: &Shared) -> Peer {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let (pid, uid, gid) = getsockopt(stream, PeerCredentials)
        .map(|c| (c.pid() as u32, c.uid(), c.gid()))
        .unwrap_or((0, u32::MAX, u32::MAX));
    Peer {
        client,
        pid,
        uid,
        name: format!("client {client}"),
        may_control: shared.access.may_control(pid, uid, gid),
    }
}

/// Serves one connection until it closes, misbehaves, or the agent stops.
pub fn serve(shared: Arc<Shared>, mut stream: UnixStream, client: u64) {
    let mut peer = peer(&stream, client, &shared);
    let (tx, rx) = mpsc::channel();
    shared.lock().connect(client, tx);
    let _ = stream.set_read_timeout(Some(POLL));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let mut framed = Framed::default();
    let mut out = Vec::new();
    let mut minibatches = Minibatches::default();
    let mut subscription: Option<(Duration, Instant)> = None;
    let mut partial_since: Option<Instant> = None;
    let result: Result<(), CodecError> = (|| loop {
        if shared.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        while let Some(req) = framed.next_message::<Request>()? {
            // A whole message arrived: the next one's clock starts now.
            partial_since = None;
            let enc = framed.encoding().unwrap_or(Encoding::Json);
            let body = match req.body {
                _ if req.id == 0 => ReplyBody::Error {
                    code: ErrorCode::BadRequest,
                    message: "request ids start at 1: id 0 marks events".into(),
                },
                RequestBody::Hello { ref client, .. } => {
                    peer.name = client.clone();
                    shared.lock().handle(&peer, req.body.clone())
                }
                RequestBody::MinibatchBegin { kind, id } => {
                    match minibatches.begin(kind, id, monotonic_ns()) {
                        Ok(()) => ReplyBody::Ok,
                        Err(e) => ReplyBody::Error {
                            code: ErrorCode::Conflict,
                            message: e.to_string(),
                        },
                    }
                }
                RequestBody::MinibatchEnd { kind, id } => {
                    match minibatches.end(kind, id, monotonic_ns(), &shared.ring) {
                        Ok(m) => ReplyBody::Minibatch(MinibatchReply {
                            kind,
                            id,
                            duration_ms: m.duration_s * 1000.0,
                            mean_w: m.mean_w,
                            energy_j: m.energy_j,
                        }),
                        Err(e) => ReplyBody::Error {
                            code: ErrorCode::NotFound,
                            message: e.to_string(),
                        },
                    }
                }
                RequestBody::Subscribe { every_ms } => {
                    subscription = (every_ms > 0)
                        .then(|| (Duration::from_millis(every_ms.max(10)), Instant::now()));
                    ReplyBody::Ok
                }
                body => shared.lock().handle(&peer, body),
            };
            send(&mut stream, enc, &Reply { id: req.id, body }, &mut out)?;
        }
        partial_since = match (framed.partial(), partial_since) {
            (true, None) => Some(Instant::now()),
            (true, Some(t)) if t.elapsed() > FRAME_TIMEOUT => {
                return Err(CodecError::Malformed(
                    "truncated frame: no complete message within 5 s".into(),
                ));
            }
            (true, since) => since,
            (false, _) => None,
        };
        let enc = framed.encoding().unwrap_or(Encoding::Json);
        while let Ok(event) = rx.try_recv() {
            send(&mut stream, enc, &Reply { id: 0, body: event }, &mut out)?;
        }
        if let Some((every, due)) = &mut subscription {
            let now = Instant::now();
            if now >= *due {
                // A client that cannot keep up skips samples rather than piling them up.
                *due = (*due + *every).max(now);
                let t = shared
                    .lock()
                    .handle(&peer, RequestBody::Telemetry { window_ms: None });
                if let ReplyBody::Telemetry(TelemetryReply {
                    latest: Some(s), ..
                }) = t
                {
                    send(
                        &mut stream,
                        enc,
                        &Reply {
                            id: 0,
                            body: ReplyBody::Sample(s),
                        },
                        &mut out,
                    )?;
                }
            }
        }
        // Wake in time for the next subscription sample.
        let wait = subscription.map_or(POLL, |(_, due)| {
            due.saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), POLL)
        });
        let _ = stream.set_read_timeout(Some(wait));
        match framed.fill(&mut stream) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e.into()),
        }
    })();
    if let Err(e) = result {
        if !matches!(e, CodecError::Io(_)) {
            log::warn!("closing {}: {e}", peer.name);
            let enc = framed.encoding().unwrap_or(Encoding::Json);
            let _ = send(
                &mut stream,
                enc,
                &Reply::error(0, ErrorCode::BadRequest, e.to_string()),
                &mut out,
            );
        }
    }
    shared.lock().disconnect(client);
    shared.clients.fetch_sub(1, Ordering::Relaxed);
}
