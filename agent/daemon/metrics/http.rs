//! A minimal HTTP/1.1 responder for `GET /metrics`, on blocking threads and the standard
//! library alone: one request per connection (`Connection: close`), `GET /metrics` (a
//! query string is ignored) answered with the exposition and `HEAD /metrics` with its
//! headers, any other path 404, any other method 405, anything that is not a request line
//! 400 as soon as its first bytes show it (a TLS handshake, say). Lines may end in CRLF or
//! a bare LF, empty lines before the request line are skipped (RFC 9112 §2.2), and a
//! target may be in absolute form (`GET http://host:9100/metrics`, RFC 9112 §3.2.2).
//!
//! Its limits are explicit, so that a scanner, a bug or an attacker on the listening
//! address costs one connection and never the agent: at most [`MAX_CONNECTIONS`] at once
//! (when all are taken, the one waiting longest for its request head is cut off to make
//! room, so that connections that send nothing, a port scan or a health check that only
//! connects, cannot shut scrapes out; with none waiting, the next gets 503), a request head
//! of at most [`MAX_HEAD`] bytes (431 beyond), read within [`HEAD_DEADLINE`] in all (a
//! slowloris is cut off at the deadline however slowly it trickles), and a reply that must
//! be taken within [`WRITE_TIMEOUT`]. After a reply the connection's sending side is shut
//! and what the client still sends is read for up to [`LINGER`], so that the close does
//! not reset a reply (a 431's) before the client has read it.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most connections served at once.
pub const MAX_CONNECTIONS: usize = 8;
/// The largest request head (request line and headers), bytes.
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a client has to send its whole request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// How long a client has to take the reply.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// How long a connection must have waited for its request head before a new one may cut
/// it off: a client's head follows its connect within milliseconds, an idle keeper's never.
const IDLE_BEFORE_EVICTION: Duration = Duration::from_millis(500);

/// How long a connection is read after its reply, for the client's close.
pub const LINGER: Duration = Duration::from_millis(100);

/// The connections being served.
#[derive(Debug, Default)]
struct Open {
    next: u64,
    conns: Vec<Conn>,
}

#[derive(Debug)]
struct Conn {
    id: u64,
    since: Instant,
    /// A handle on its socket, to cut it off.
    socket: TcpStream,
    /// Still waiting for its request head.
    waiting: bool,
}

/// A panic while the list is held leaves it valid: a push, a flag or a removal.
fn lock(open: &Mutex<Open>) -> std::sync::MutexGuard<'_, Open> {
    open.lock().unwrap_or_else(|p| p.into_inner())
}

impl Open {
    /// Admits `stream` (its id), cutting off the connection waiting longest for its head
    /// when all are taken and it has waited [`IDLE_BEFORE_EVICTION`]; `None` when all are
    /// taken by requests being answered or just opened (a burst of scrapes: the newest is
    /// refused rather than one whose head is on its way).
    fn admit(&mut self, stream: &TcpStream) -> Option<u64> {
        let socket = stream.try_clone().ok()?;
        if self.conns.len() >= MAX_CONNECTIONS {
            let idle = (self.conns.iter().enumerate())
                .filter(|(_, c)| c.waiting && c.since.elapsed() >= IDLE_BEFORE_EVICTION)
                .min_by_key(|(_, c)| c.since)
                .map(|(i, _)| i)?;
            // Its thread's read ends at once; the thread then leaves.
            let _ = self.conns.swap_remove(idle).socket.shutdown(Shutdown::Both);
        }
        self.next += 1;
        self.conns.push(Conn {
            id: self.next,
            since: Instant::now(),
            socket,
            waiting: true,
        });
        Some(self.next)
    }

    fn headed(&mut self, id: u64) {
        if let Some(c) = self.conns.iter_mut().find(|c| c.id == id) {
            c.waiting = false;
        }
    }

    fn leave(&mut self, id: u64) {
        self.conns.retain(|c| c.id != id);
    }
}

/// A listener serving `GET /metrics` until `stop` is set.
#[derive(Debug)]
pub struct Responder {
    accept: JoinHandle<()>,
    /// Where the listener is: [`Responder::join`] connects there to wake the accept.
    addr: SocketAddr,
}

/// What a request head asks, as far as this responder cares.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// `GET` (`true`: the body too) or `HEAD` (the headers alone) of `/metrics`.
    Metrics(bool),
    /// `NotFound(false)` answers a `HEAD`: its headers alone.
    NotFound(bool),
    MethodNotAllowed,
    BadRequest,
}

impl Responder {
    /// Serves `listener`, answering `GET /metrics` with what `body` returns (or 500 with
    /// its error). The accept blocks (a scrape is a new connection: no polling delay).
    pub fn start<F>(listener: TcpListener, body: F, stop: Arc<AtomicBool>) -> io::Result<Responder>
    where
        F: Fn() -> Result<Vec<u8>, String> + Send + Sync + 'static,
    {
        let addr = listener.local_addr()?;
        let body = Arc::new(body);
        let open = Arc::new(Mutex::new(Open::default()));
        let accept = std::thread::Builder::new()
            .name("jpower-metrics".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let stream = match stream {
                        Ok(s) => s,
                        Err(e) => {
                            // EMFILE and the like: let them pass rather than spin.
                            log::warn!("metrics listener: accept failed: {e}");
                            std::thread::sleep(ACCEPT_BACKOFF);
                            continue;
                        }
                    };
                    let Some(id) = lock(&open).admit(&stream) else {
                        let _ = refuse_busy(stream);
                        continue;
                    };
                    let (body, served) = (body.clone(), open.clone());
                    let spawned = std::thread::Builder::new()
                        .name("jpower-metrics-conn".into())
                        .spawn(move || {
                            // A peer's I/O error (a reset, a timeout) ends its connection
                            // and concerns no one else.
                            let _ = serve(stream, &*body, &|| lock(&served).headed(id));
                            lock(&served).leave(id);
                        });
                    if let Err(e) = spawned {
                        lock(&open).leave(id);
                        log::warn!("metrics listener: no thread for a connection: {e}");
                    }
                }
            })?;
        Ok(Responder { accept, addr })
    }

    /// Once the stop flag is set: wakes the accept thread and waits for it; connections in
    /// flight finish within their deadlines on their own.
    pub fn join(self) {
        // The wake-up's error is the listener's own: already gone, nothing to wake.
        let _ = TcpStream::connect_timeout(&self.addr, WRITE_TIMEOUT);
        let _ = self.accept.join();
    }
}

/// Answers 503 after reading what the client has sent already, without waiting for more
/// (the accept thread must not wait on a client): a close with its request unread would
/// reset the connection, and a reset can discard the 503 before the client reads it.
fn refuse_busy(mut s: TcpStream) -> io::Result<()> {
    s.set_nonblocking(true)?;
    let mut sink = [0u8; 1024];
    let mut drained = 0;
    while drained <= MAX_HEAD {
        match s.read(&mut sink) {
            Ok(0) => break,
            Ok(n) => drained += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    s.set_nonblocking(false)?;
    s.set_write_timeout(Some(WRITE_TIMEOUT))?;
    respond(
        &mut s,
        503,
        "Service Unavailable",
        &[],
        b"too many connections\n",
    )?;
    s.shutdown(Shutdown::Write)
}

/// The methods served.
const ALLOW: &str = "GET, HEAD";

/// Reads one request head (`headed` once it is in), answers it, and lingers for the
/// client's close.
fn serve(
    mut s: TcpStream,
    body: &dyn Fn() -> Result<Vec<u8>, String>,
    headed: &dyn Fn(),
) -> io::Result<()> {
    s.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let head = read_head(&mut s, Instant::now() + HEAD_DEADLINE)?;
    if matches!(head, Head::Closed) {
        return Ok(());
    }
    headed();
    answer(&mut s, head, body)?;
    linger(&mut s)
}

/// Shuts the sending side and reads what the client still sends, for up to [`LINGER`]
/// and [`MAX_HEAD`] bytes: a close with bytes unread would reset the connection, and a
/// reset can discard the reply before the client reads it.
fn linger(s: &mut TcpStream) -> io::Result<()> {
    s.shutdown(Shutdown::Write)?;
    let deadline = Instant::now() + LINGER;
    let mut sink = [0u8; 1024];
    let mut drained = 0;
    while drained <= 8 * MAX_HEAD {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut sink) {
            Ok(0) => break,
            Ok(n) => drained += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    Ok(())
}

/// The reply to `head`.
fn answer(
    s: &mut TcpStream,
    head: Head,
    body: &dyn Fn() -> Result<Vec<u8>, String>,
) -> io::Result<()> {
    let route = match head {
        Head::Complete(h) => route(&h),
        Head::Bad => Route::BadRequest,
        Head::TooLarge => return respond(s, 431, "Request Header Fields Too Large", &[], b""),
        Head::TimedOut => return respond(s, 408, "Request Timeout", &[], b""),
        Head::Closed => return Ok(()),
    };
    let (code, reason, headers, text, with_body): (_, _, &[(&str, &str)], _, _) = match route {
        Route::Metrics(with_body) => match body() {
            Ok(b) => (
                200,
                "OK",
                &[("Content-Type", super::exposition::CONTENT_TYPE)],
                b,
                with_body,
            ),
            Err(e) => (500, "Internal Server Error", &[], e.into_bytes(), with_body),
        },
        Route::NotFound(with_body) => (
            404,
            "Not Found",
            &[],
            b"only /metrics is served\n".to_vec(),
            with_body,
        ),
        Route::MethodNotAllowed => (
            405,
            "Method Not Allowed",
            &[("Allow", ALLOW)],
            b"only GET and HEAD are served\n".to_vec(),
            true,
        ),
        Route::BadRequest => (400, "Bad Request", &[], Vec::new(), true),
    };
    if with_body {
        respond(s, code, reason, headers, &text)
    } else {
        respond_head(s, code, reason, headers, text.len())
    }
}

/// How reading a request head ended.
enum Head {
    Complete(Vec<u8>),
    /// Its first bytes are no request line.
    Bad,
    TooLarge,
    TimedOut,
    Closed,
}

/// Reads up to the blank line that ends the head, within `deadline` and [`MAX_HEAD`],
/// or until its first bytes show it is no request.
fn read_head(s: &mut TcpStream, deadline: Instant) -> io::Result<Head> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    // Empty lines skipped before the request line: they count toward [`MAX_HEAD`].
    let mut skipped = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Head::TimedOut);
        }
        s.set_read_timeout(Some(left))?;
        let n = match s.read(&mut buf) {
            Ok(0) => return Ok(Head::Closed),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(Head::TimedOut)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        // Search only where the terminator can newly appear.
        let mut from = head.len().saturating_sub(2);
        head.extend_from_slice(&buf[..n]);
        // Empty lines before the request line are skipped (RFC 9112 §2.2): a lone CR may
        // be the first half of one, and the deadline bounds how many come.
        let lead = head
            .iter()
            .take_while(|b| matches!(b, b'\r' | b'\n'))
            .count();
        if lead > 0 {
            head.drain(..lead);
            skipped += lead;
            from = 0;
        }
        if let Some(end) = blank_line(&head, from) {
            if skipped + end > MAX_HEAD {
                return Ok(Head::TooLarge);
            }
            head.truncate(end);
            return Ok(Head::Complete(head));
        }
        if !may_be_request(&head) {
            return Ok(Head::Bad);
        }
        if skipped + head.len() > MAX_HEAD {
            return Ok(Head::TooLarge);
        }
    }
}

/// Where the head's blank line begins (the line feed before it ends the last header), at
/// or after `from`: lines end in LF, or CRLF.
fn blank_line(head: &[u8], from: usize) -> Option<usize> {
    (from..head.len()).find(|&i| {
        head[i] == b'\n'
            && (head.get(i + 1) == Some(&b'\n') || head.get(i + 1..i + 3) == Some(b"\r\n"))
    })
}

/// Whether `head`, received so far, may still become a request: its request line, when
/// complete, is one, and until then its first word may be a method.
fn may_be_request(head: &[u8]) -> bool {
    if head.contains(&b'\n') {
        return route(head) != Route::BadRequest;
    }
    let method = head.split(|&b| b == b' ').next().unwrap_or_default();
    method.iter().all(u8::is_ascii_alphabetic)
}

/// Where a request head goes: only its request line matters.
fn route(head: &[u8]) -> Route {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Ok(line) = std::str::from_utf8(line) else {
        return Route::BadRequest;
    };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphabetic());
    let Some(path) = origin_form(target) else {
        return Route::BadRequest;
    };
    if !token(method) || !version.starts_with("HTTP/1.") {
        return Route::BadRequest;
    }
    let with_body = match method {
        "GET" => true,
        "HEAD" => false,
        _ => return Route::MethodNotAllowed,
    };
    match path.split('?').next() {
        Some("/metrics") => Route::Metrics(with_body),
        _ => Route::NotFound(with_body),
    }
}

/// The path and query of a request target in origin form (`/metrics`) or absolute form
/// (`http://host:9100/metrics`, which a server must accept, RFC 9112 §3.2.2; its host is
/// not checked, as `Host` is not); `None` for any other form.
fn origin_form(target: &str) -> Option<&str> {
    if target.starts_with('/') {
        return Some(target);
    }
    let (scheme, rest) = target.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('/') => Some(&rest[i..]),
        // `http://host?x` has the empty path, which is `/` (RFC 9110 §4.2.3).
        Some(_) | None => Some("/"),
    }
}

/// The status line and headers of a reply of `length` body bytes.
fn status_and_headers(code: u16, reason: &str, headers: &[(&str, &str)], length: usize) -> Vec<u8> {
    let mut out =
        format!("HTTP/1.1 {code} {reason}\r\nContent-Length: {length}\r\nConnection: close\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.into_bytes()
}

fn respond(
    s: &mut TcpStream,
    code: u16,
    reason: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<()> {
    let mut bytes = status_and_headers(code, reason, headers, body.len());
    bytes.extend_from_slice(body);
    s.write_all(&bytes)?;
    s.flush()
}

/// The reply to a `HEAD`: the headers of the reply `GET` would get, without its body.
fn respond_head(
    s: &mut TcpStream,
    code: u16,
    reason: &str,
    headers: &[(&str, &str)],
    length: usize,
) -> io::Result<()> {
    s.write_all(&status_and_headers(code, reason, headers, length))?;
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_metrics_is_served() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x"),
            Route::Metrics(true)
        );
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\nHost: x"),
            Route::Metrics(true)
        );
        assert_eq!(
            route(b"GET /metrics?name[]=x HTTP/1.0"),
            Route::Metrics(true)
        );
        assert_eq!(route(b"HEAD /metrics HTTP/1.1"), Route::Metrics(false));
        assert_eq!(route(b"GET / HTTP/1.1"), Route::NotFound(true));
        assert_eq!(route(b"HEAD / HTTP/1.1"), Route::NotFound(false));
        assert_eq!(route(b"GET /metricsx HTTP/1.1"), Route::NotFound(true));
        assert_eq!(route(b"POST /metrics HTTP/1.1"), Route::MethodNotAllowed);
        assert_eq!(
            route(b"GET http://board:9100/metrics HTTP/1.1"),
            Route::Metrics(true)
        );
        assert_eq!(
            route(b"GET HTTP://board/metrics?x=1 HTTP/1.1"),
            Route::Metrics(true)
        );
        assert_eq!(
            route(b"GET http://board:9100 HTTP/1.1"),
            Route::NotFound(true)
        );
        assert_eq!(route(b"GET http://board?x HTTP/1.1"), Route::NotFound(true));
        assert_eq!(
            route(b"GET ftp://board/metrics HTTP/1.1"),
            Route::BadRequest
        );
    }

    /// The head ends at its blank line whichever line ends it uses, and a head is judged
    /// no request from its first bytes, before it ends.
    #[test]
    fn heads_end_at_a_blank_line_and_garbage_is_seen_early() {
        assert_eq!(blank_line(b"GET / HTTP/1.1\r\nA: b\r\n\r\n", 0), Some(21));
        assert_eq!(blank_line(b"GET / HTTP/1.1\nA: b\n\n", 0), Some(19));
        assert_eq!(blank_line(b"GET / HTTP/1.1\r\nA: b\r\n", 0), None);
        for partial in [&b"GE"[..], b"GET /met", b"GET /metrics HTTP/1.1\r\nHost"] {
            assert!(may_be_request(partial), "{partial:?}");
        }
        for garbage in [&b"\x16\x03\x01"[..], b"GET /metrics SPDY/3\r\n", b"G\x00T"] {
            assert!(!may_be_request(garbage), "{garbage:?}");
        }
    }

    #[test]
    fn anything_but_a_request_line_is_a_bad_request() {
        for garbage in [
            &b""[..],
            b"\x16\x03\x01\x02\x00\x01\x00",
            b"GET /metrics",
            b"GET /metrics HTTP/1.1 extra",
            b"GET metrics HTTP/1.1",
            b"G\xc3\x89T /metrics HTTP/1.1",
            b"GET /metrics SPDY/3",
        ] {
            assert_eq!(route(garbage), Route::BadRequest, "{garbage:?}");
        }
    }
}
