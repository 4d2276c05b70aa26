//! The Rust client of the agent's socket (the CLI uses it when an agent runs).

use super::codec::{send, CodecError, Encoding, Framed};
use super::protocol::{ErrorCode, Reply, ReplyBody, Request, RequestBody, PROTOCOL_VERSION};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Client errors.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be connected to.
    #[error("cannot connect to the agent at {path}: {source}")]
    Connect {
        /// The socket's path.
        path: String,
        /// The error from `connect`.
        source: std::io::Error,
    },
    /// The connection's input could not be decoded, or reading or writing it failed.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The agent accepted the connection but did not answer in time (stopped, or hung).
    #[error("the agent at {path} did not answer within {after:?} (is it stopped or hung?)")]
    Silent {
        /// The socket's path.
        path: String,
        /// How long the client waited.
        after: Duration,
    },
    /// The agent closed the connection before replying.
    #[error("the agent closed the connection")]
    Closed,
    /// The agent answered the request with an error.
    #[error("agent: {message} ({code:?})")]
    Agent {
        /// The error's stable code.
        code: ErrorCode,
        /// The agent's message, for people.
        message: String,
    },
}

/// How long the client waits for the agent's next message.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to the agent.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    /// The socket's path, for errors.
    path: String,
    /// How long it waits for each message.
    wait: Duration,
    enc: Encoding,
    framed: Framed,
    buf: Vec<u8>,
    next_id: u64,
    /// Events received while waiting for a reply.
    pub events: Vec<ReplyBody>,
}

impl Client {
    /// Connects and says hello.
    pub fn connect(
        path: &Path,
        enc: Encoding,
        name: &str,
    ) -> Result<(Client, ReplyBody), ClientError> {
        Self::connect_waiting(path, enc, name, REPLY_TIMEOUT)
    }

    /// [`Client::connect`], waiting up to `wait` for each message from the agent.
    fn connect_waiting(
        path: &Path,
        enc: Encoding,
        name: &str,
        wait: Duration,
    ) -> Result<(Client, ReplyBody), ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| ClientError::Connect {
            path: path.display().to_string(),
            source,
        })?;
        stream
            .set_read_timeout(Some(wait))
            .map_err(CodecError::Io)?;
        let mut c = Client {
            stream,
            path: path.display().to_string(),
            wait,
            enc,
            framed: Framed::default(),
            buf: Vec::new(),
            next_id: 1,
            events: Vec::new(),
        };
        // An agent that accepts and drops the connection (dying, or stopping) is named
        // with its socket: a review found a bare "Broken pipe (os error 32)".
        let hello = c
            .request(RequestBody::Hello {
                version: PROTOCOL_VERSION,
                client: name.to_string(),
            })
            .map_err(|e| match e {
                ClientError::Codec(CodecError::Io(source)) => ClientError::Connect {
                    path: c.path.clone(),
                    source,
                },
                ClientError::Closed => ClientError::Connect {
                    path: c.path.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "it closed the connection before answering hello (stopping?)",
                    ),
                },
                e => e,
            })?;
        Ok((c, hello))
    }

    /// Sends a request without waiting for its reply (it comes through [`Client::read`],
    /// with the returned id); the id.
    pub fn send(&mut self, body: RequestBody) -> Result<u64, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        send(
            &mut self.stream,
            self.enc,
            &Request { id, body },
            &mut self.buf,
        )?;
        Ok(id)
    }

    /// Sends a request and waits for its reply; an error reply is an `Err`.
    pub fn request(&mut self, body: RequestBody) -> Result<ReplyBody, ClientError> {
        let id = self.send(body)?;
        loop {
            let reply = self.read()?;
            match reply {
                // The agent's last word before it closes the connection.
                Reply {
                    id: 0,
                    body: ReplyBody::Error { code, message },
                } => return Err(ClientError::Agent { code, message }),
                Reply { id: 0, body } => self.events.push(body),
                Reply {
                    body: ReplyBody::Error { code, message },
                    ..
                } => return Err(ClientError::Agent { code, message }),
                Reply { id: rid, body } if rid == id => return Ok(body),
                _ => {}
            }
        }
    }

    /// The connection's socket (to shut it from another thread, ending a wait on it).
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// The next message from the agent (a reply or an event).
    pub fn read(&mut self) -> Result<Reply, ClientError> {
        loop {
            if let Some(r) = self.framed.next_message::<Reply>()? {
                return Ok(r);
            }
            match self.framed.fill(&mut self.stream) {
                Ok(0) => return Err(ClientError::Closed),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(ClientError::Silent {
                        path: self.path.clone(),
                        after: self.wait,
                    })
                }
                Err(e) => return Err(CodecError::Io(e).into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by a review: a CLI command beside a stopped agent (`kill -STOP`) failed after
    /// 30 s with "Resource temporarily unavailable (os error 11)", naming neither the agent
    /// nor the wait.
    #[test]
    fn an_agent_that_does_not_answer_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let e = Client::connect_waiting(&path, Encoding::Json, "t", Duration::from_millis(50))
            .unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, ClientError::Silent { .. }), "{text}");
        assert!(
            text.contains("s.sock") && text.contains("within 50ms"),
            "{text}"
        );
    }
}
