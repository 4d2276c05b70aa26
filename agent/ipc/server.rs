//! The agent's side of the socket, whatever answers the requests: binding it (its mode
//! and group, never stealing a live agent's socket), accepting at most `max_clients`
//! connections (the last share kept for peers that may control) and closing idle ones
//! (`idle_timeout_ms`) and those whose process died, and one thread per connection that
//! decodes requests in either encoding, answers each through a [`Handler`], forwards the
//! handler's events and subscription samples, and closes only that connection on a
//! malformed, oversized or truncated frame.
//!
//! A slow client times out on its own socket; nothing here holds a lock of the handler's
//! while blocked on I/O.

use super::codec::{send, CodecError, Encoding, Framed};
use super::events::EventQueue;
use super::protocol::{ErrorCode, Reply, ReplyBody, Request, RequestBody};
use nix::poll::PollFlags;
use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a started frame may take to arrive whole.
const FRAME_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an idle connection looks at its subscription and the stop flag (its events
/// wake it at once).
const POLL: Duration = Duration::from_millis(100);
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The fastest subscription.
const MIN_SUBSCRIPTION: Duration = Duration::from_millis(10);
/// How often a connection looks whether its peer's process still lives.
const PEER_CHECK: Duration = Duration::from_secs(1);

/// What a connecting peer is, from `SO_PEERCRED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credentials {
    /// The peer's process id.
    pub pid: u32,
    /// The peer's user id.
    pub uid: u32,
    /// The peer's primary group id (supplementary groups are not in `SO_PEERCRED`).
    pub gid: u32,
}

/// A handler's answer to one request.
// Returned by value like the reply it holds: boxing it would allocate per request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The reply, now.
    Now(ReplyBody),
    /// The reply comes later (a scheduler's gate): the server asks [`Handler::deferred`]
    /// for it, forwarding events and watching for the peer's hang-up meanwhile, and reads
    /// no further request until it is sent.
    Deferred,
}

/// Why a connection that sent no request for the idle time may still be kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quiet {
    /// A subscription sends to it more often than the idle time.
    pub streaming: bool,
    /// How many idle times it has been quiet (1 at the first check).
    pub idle_times: u32,
}

/// What answers the requests of every connection.
pub trait Handler: Send + Sync + 'static {
    /// What the handler keeps per connection (who the peer is, its open minibatches, its
    /// events).
    type Connection: Send;

    /// Whether a peer may control the board: such peers keep a reserved share of the
    /// connections, so readers cannot lock them out.
    fn may_control(&self, peer: Credentials) -> bool;
    /// A connection was accepted (an error: it cannot be served, and is closed).
    fn open(&self, client: u64, peer: Credentials) -> io::Result<Self::Connection>;
    /// Answers one request (never `Subscribe`, which the server keeps).
    fn handle(&self, conn: &mut Self::Connection, body: RequestBody) -> Answer;
    /// The reply a [`Answer::Deferred`] promised, if it has come (`None`: not yet). Called
    /// whenever the connection's [`Handler::events`] wake it and at least every 100 ms
    /// while the peer waits: whoever sends the reply must wake the connection, and a
    /// pending reply counts as the peer's heartbeat.
    fn deferred(&self, conn: &mut Self::Connection) -> Option<ReplyBody>;
    /// The connection's queue of events, whose descriptor wakes the connection's thread.
    fn events<'a>(&self, conn: &'a Self::Connection) -> &'a EventQueue;
    /// The connection's next pending event, if any.
    fn event(&self, conn: &mut Self::Connection) -> Option<ReplyBody>;
    /// A subscription sample, if there is one yet.
    fn sample(&self, conn: &mut Self::Connection) -> Option<ReplyBody>;
    /// Whether a connection that sent no request for the idle time is kept.
    fn kept_quiet(&self, conn: &Self::Connection, quiet: Quiet) -> bool;
    /// How the connection is named in the log.
    fn name<'a>(&self, conn: &'a Self::Connection) -> &'a str;
    /// The connection closed.
    fn close(&self, conn: Self::Connection);
}

/// Server errors.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A live agent already answers on the socket's path.
    #[error("another agent is serving {0}")]
    InUse(PathBuf),
    /// Something other than a socket is at the socket's path: it is left alone.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    /// A file-system operation on the socket failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done (`binding`, `removing the stale socket`, ...).
        what: &'static str,
        /// The socket's path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// Binds the socket at `path` with `mode`, giving it to group `group` where it exists.
/// A stale socket is replaced; a live one is an error.
pub fn bind(path: &Path, mode: u32, group: &str) -> Result<UnixListener, ServerError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |what: &'static str| {
        move |source| ServerError::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(ServerError::NotASocket(path.to_path_buf()));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(ServerError::InUse(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(io("removing the stale socket"))?;
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io("creating the directory of"))?;
    }
    let listener = UnixListener::bind(path).map_err(io("binding"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io("setting the mode of"))?;
    give_to_group(path, group);
    Ok(listener)
}

/// Gives `path` to group `group` where the group exists, so its members may read it (the
/// socket, and the telemetry ring beside it); says why where it cannot.
pub fn give_to_group(path: &Path, group: &str) {
    if let Ok(Some(g)) = nix::unistd::Group::from_name(group) {
        if let Err(e) = nix::unistd::chown(path, None, Some(g.gid)) {
            log::warn!("cannot give {} to group {group}: {e}", path.display());
        }
    }
}

/// What the server allows each peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections at once; the last [`reserved`]`(max_clients)` only for peers that may
    /// control.
    pub max_clients: usize,
    /// A connection that sends no request for this long, holds no lease and has no
    /// subscription sending more often is closed (`None`: never).
    pub idle: Option<Duration>,
}

/// A server accepting on its own thread until `stop` is set.
#[derive(Debug)]
pub struct Server {
    accept: JoinHandle<()>,
}

impl Server {
    /// Starts accepting on `listener` within `limits`.
    pub fn start<H: Handler>(
        listener: UnixListener,
        handler: Arc<H>,
        limits: Limits,
        stop: Arc<AtomicBool>,
    ) -> io::Result<Server> {
        let Limits { max_clients, idle } = limits;
        listener.set_nonblocking(true)?;
        let clients = Arc::new(AtomicUsize::new(0));
        let accept = std::thread::Builder::new()
            .name("jpower-accept".into())
            .spawn(move || {
                let next = AtomicU64::new(1);
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let _ = stream.set_nonblocking(false);
                            let peer = credentials(&stream);
                            let connected = clients.load(Ordering::Relaxed);
                            if !admit(connected, max_clients, || handler.may_control(peer)) {
                                log::warn!("refusing a client: {max_clients} connections, the last {} kept for control", reserved(max_clients));
                                refuse(stream, max_clients);
                                continue;
                            }
                            clients.fetch_add(1, Ordering::Relaxed);
                            let id = next.fetch_add(1, Ordering::Relaxed);
                            let (h, s, c) = (handler.clone(), stop.clone(), clients.clone());
                            let spawned = std::thread::Builder::new()
                                .name(format!("jpower-client-{id}"))
                                .spawn(move || {
                                    serve(&*h, stream, id, peer, idle, &s);
                                    c.fetch_sub(1, Ordering::Relaxed);
                                });
                            if spawned.is_err() {
                                clients.fetch_sub(1, Ordering::Relaxed);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(20))
                        }
                        Err(e) => {
                            log::warn!("accept: {e}");
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
            })?;
        Ok(Server { accept })
    }

    /// Waits for the accept thread to see the stop flag.
    pub fn join(self) {
        let _ = self.accept.join();
    }
}

/// Connections kept for peers that may control: an eighth of `max_clients`, at least one.
pub fn reserved(max_clients: usize) -> usize {
    (max_clients / 8).clamp(1, max_clients.max(1))
}

/// Whether one more peer may connect beside `connected` others: never beyond `max`, and
/// into the reserved share only if it may control.
fn admit(connected: usize, max: usize, may_control: impl FnOnce() -> bool) -> bool {
    let open = max.saturating_sub(connected);
    open > reserved(max) || (open > 0 && may_control())
}

/// Tells a client over the limit why it is closed (in JSON: its encoding is unknown yet).
fn refuse(mut stream: UnixStream, max: usize) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let mut buf = Vec::new();
    let reply = Reply::error(
        0,
        ErrorCode::Busy,
        format!(
            "too many clients: {max} may connect, the last {} of them only to control",
            reserved(max)
        ),
    );
    let _ = send(&mut stream, Encoding::Json, &reply, &mut buf);
}

/// The peer's credentials (nobody's where the kernel will not say).
fn credentials(stream: &UnixStream) -> Credentials {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    getsockopt(stream, PeerCredentials)
        .map(|c| Credentials {
            pid: c.pid() as u32,
            uid: c.uid(),
            gid: c.gid(),
        })
        .unwrap_or(Credentials {
            pid: 0,
            uid: u32::MAX,
            gid: u32::MAX,
        })
}

/// Whether the process that connected has died, looked at most every [`PEER_CHECK`]. A
/// process it forked (a data loader's worker) may hold the socket open after it, but the
/// connection was the client's and goes with it: its lease, its gate and its turn (a
/// review found a killed trainer's turn held for as long as its worker lived).
struct PeerLife {
    pid: u32,
    /// When the process started (its pid may be given to another later).
    start: Option<u64>,
    next: Instant,
    /// Whether it was found dead.
    dead: bool,
}

impl PeerLife {
    fn of(peer: Credentials) -> PeerLife {
        PeerLife {
            pid: peer.pid,
            start: crate::support::runtime::start_time(peer.pid),
            next: Instant::now() + PEER_CHECK,
            dead: false,
        }
    }

    /// Looks, if it is time to; a pid of 0 (a peer in another pid namespace) is never
    /// looked at.
    fn died(&mut self) -> bool {
        if self.pid == 0 || Instant::now() < self.next {
            return false;
        }
        self.next = Instant::now() + PEER_CHECK;
        self.dead = !crate::support::runtime::same_process_alive(self.pid, self.start);
        self.dead
    }
}

/// Serves one connection until it closes, misbehaves, its process dies, or `stop` is set.
fn serve<H: Handler>(
    handler: &H,
    mut stream: UnixStream,
    client: u64,
    peer: Credentials,
    idle: Option<Duration>,
    stop: &AtomicBool,
) {
    let mut conn = match handler.open(client, peer) {
        Ok(conn) => conn,
        Err(e) => {
            log::warn!("cannot serve client {client}: {e}");
            let reply = Reply::error(0, ErrorCode::Busy, format!("cannot serve: {e}"));
            let _ = send(&mut stream, Encoding::Json, &reply, &mut Vec::new());
            return;
        }
    };
    let mut last_request = Instant::now();
    let mut life = PeerLife::of(peer);
    let _ = stream.set_read_timeout(Some(POLL));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let mut framed = Framed::default();
    let mut out = Vec::new();
    let mut subscription: Option<(Duration, Instant)> = None;
    let mut partial_since: Option<Instant> = None;
    let result: Result<(), CodecError> = (|| loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        while let Some(req) = framed.next_message::<Request>()? {
            // A whole message arrived: the next one's clock starts now.
            partial_since = None;
            last_request = Instant::now();
            let enc = framed.encoding().unwrap_or(Encoding::Json);
            let body = match req.body {
                _ if req.id == 0 => ReplyBody::Error {
                    code: ErrorCode::BadRequest,
                    message: "request ids start at 1: id 0 marks events".into(),
                },
                RequestBody::Subscribe { every_ms } => {
                    subscription = (every_ms > 0).then(|| {
                        (
                            Duration::from_millis(every_ms).max(MIN_SUBSCRIPTION),
                            Instant::now(),
                        )
                    });
                    ReplyBody::Ok
                }
                body => match handler.handle(&mut conn, body) {
                    Answer::Now(body) => body,
                    Answer::Deferred => {
                        let waiting = (&stream, &mut life);
                        match wait_deferred(handler, &mut conn, waiting, enc, &mut out, stop)? {
                            Some(body) => body,
                            None => return Ok(()),
                        }
                    }
                },
            };
            match send(&mut stream, enc, &Reply { id: req.id, body }, &mut out) {
                // A reply over the frame limit (an error echoing a huge name): the request
                // is answered, with what went wrong, and the connection lives on.
                Err(CodecError::TooLarge(n)) => {
                    let why = format!("the reply would be {n} bytes, over the 64 KiB limit");
                    send(
                        &mut stream,
                        enc,
                        &Reply::error(req.id, ErrorCode::Failed, why),
                        &mut out,
                    )?;
                }
                sent => sent?,
            }
            // A deferred reply may have waited long: the idle clock starts when it is sent.
            last_request = Instant::now();
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
        while let Some(event) = handler.event(&mut conn) {
            send(&mut stream, enc, &Reply { id: 0, body: event }, &mut out)?;
        }
        if let Some((every, due)) = &mut subscription {
            let now = Instant::now();
            if now >= *due {
                // A client that cannot keep up skips samples rather than piling them up.
                *due = (*due + *every).max(now);
                if let Some(body) = handler.sample(&mut conn) {
                    send(&mut stream, enc, &Reply { id: 0, body }, &mut out)?;
                }
            }
        }
        if let Some(limit) = idle.filter(|&limit| last_request.elapsed() >= limit) {
            let quiet = Quiet {
                streaming: subscription.is_some_and(|(every, _)| every < limit),
                idle_times: (last_request.elapsed().as_nanos() / limit.as_nanos().max(1))
                    .try_into()
                    .unwrap_or(u32::MAX),
            };
            if !handler.kept_quiet(&conn, quiet) {
                log::info!(
                    "closing {}: no request for {} ms (idle_timeout_ms)",
                    handler.name(&conn),
                    limit.as_millis()
                );
                let reply = Reply::error(
                    0,
                    ErrorCode::Busy,
                    format!(
                        "closed after {} ms without a request (idle_timeout_ms)",
                        limit.as_millis()
                    ),
                );
                send(&mut stream, enc, &reply, &mut out)?;
                return Ok(());
            }
        }
        if life.died() {
            return Ok(());
        }
        // Wake in time for the next subscription sample.
        let wait = subscription.map_or(POLL, |(_, due)| {
            due.saturating_duration_since(Instant::now())
                .clamp(Duration::from_millis(1), POLL)
        });
        // Wait for bytes from the peer or an event for it, whichever comes first.
        let (readable, woken) = wait_for(
            Some((&stream, PollFlags::POLLIN)),
            handler.events(&conn),
            wait,
        );
        if woken {
            handler.events(&conn).clear();
        }
        if !readable {
            continue;
        }
        match framed.fill(&mut stream) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e.into()),
        }
    })();
    if life.dead {
        log::info!(
            "closing {}: its process (pid {}) has died, the socket held open by another",
            handler.name(&conn),
            life.pid
        );
    }
    if let Err(e) = result {
        if !matches!(e, CodecError::Io(_)) {
            log::warn!("closing {}: {e}", handler.name(&conn));
            let enc = framed.encoding().unwrap_or(Encoding::Json);
            let _ = send(
                &mut stream,
                enc,
                &Reply::error(0, ErrorCode::BadRequest, e.to_string()),
                &mut out,
            );
            drain(&mut stream);
        }
    }
    handler.close(conn);
}

/// How much of what a peer still sends after its connection's closing error is read and
/// dropped, and for how long at most.
const DRAIN_BYTES: usize = 1 << 20;
const DRAIN_WAIT: Duration = Duration::from_millis(200);

/// Ends the stream after the closing error so that the peer reads the error and then
/// end-of-file: closed with its input unread, the socket resets the connection instead
/// (ECONNRESET, a review found, after an oversized frame sent in one write). The write side
/// is shut, then what the peer still sends is read and dropped (at most [`DRAIN_BYTES`],
/// for at most [`DRAIN_WAIT`]).
fn drain(stream: &mut UnixStream) {
    use std::io::Read;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_nonblocking(false);
    let deadline = Instant::now() + DRAIN_WAIT;
    let mut buf = [0u8; 8192];
    let mut read = 0;
    while read < DRAIN_BYTES {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
}

/// Waits at most `wait` for `stream`'s `flags` (the peer's bytes, or its hang-up; the
/// stream left out: only the events) and for an event: whether the stream is ready, and
/// whether the events woke it.
fn wait_for(
    stream: Option<(&UnixStream, PollFlags)>,
    events: &EventQueue,
    wait: Duration,
) -> (bool, bool) {
    use nix::poll::{poll, PollFd, PollTimeout};
    use std::os::fd::AsFd;
    let ms = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
    let woken = PollFd::new(events.fd(), PollFlags::POLLIN);
    let mut fds = [woken, woken];
    let n = match stream {
        Some((s, flags)) => {
            fds[1] = PollFd::new(s.as_fd(), flags);
            2
        }
        None => 1,
    };
    if poll(&mut fds[..n], PollTimeout::from(ms)).is_err() {
        // EINTR: look again on the next turn of the loop.
        return (false, false);
    }
    // nix reads revents with bits it names only: POLLRDHUP's makes them `None` (a review
    // found a hang-up behind pipelined bytes unseen, and the wait spinning).
    let ready = |f: &PollFd| f.revents().is_none_or(|r| !r.is_empty());
    (n == 2 && ready(&fds[1]), ready(&fds[0]))
}

/// Waits for a deferred reply, forwarding the connection's events as they come; `None`
/// when the peer hung up, its process died, or the server is stopping first.
///
/// The connection's events wake it (the reply's sender rings them too), and so does the
/// peer's hang-up: `POLLRDHUP`, the peer closed or shut its sending side, which is found
/// even with bytes it sent behind the pending request still unread (a review found a
/// gate granted to a client that had pipelined a request behind it and closed: a peek
/// saw the byte, not the end). Bytes of a peer still connected wait for after the reply.
fn wait_deferred<H: Handler>(
    handler: &H,
    conn: &mut H::Connection,
    (stream, life): (&UnixStream, &mut PeerLife),
    enc: Encoding,
    out: &mut Vec<u8>,
    stop: &AtomicBool,
) -> Result<Option<ReplyBody>, CodecError> {
    let mut writer = stream;
    // nix names no POLLRDHUP: the peer shut its end (Linux).
    let rdhup = PollFlags::from_bits_retain(libc::POLLRDHUP);
    loop {
        if stop.load(Ordering::Relaxed) || life.died() {
            return Ok(None);
        }
        while let Some(event) = handler.event(conn) {
            send(&mut writer, enc, &Reply { id: 0, body: event }, out)?;
        }
        if let Some(body) = handler.deferred(conn) {
            return Ok(Some(body));
        }
        let (hung_up, woken) = wait_for(Some((stream, rdhup)), handler.events(conn), POLL);
        if hung_up {
            return Ok(None);
        }
        if woken {
            handler.events(conn).clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_cannot_fill_the_share_kept_for_control() {
        assert_eq!(reserved(64), 8);
        assert_eq!(reserved(1), 1);
        // 56 readers fill the open share; the 57th is refused, a controller is not.
        assert!(admit(55, 64, || false));
        assert!(!admit(56, 64, || false));
        assert!(admit(56, 64, || true));
        assert!(admit(63, 64, || true));
        assert!(!admit(64, 64, || true), "never beyond max_clients");
    }
}
