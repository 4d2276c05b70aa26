//! Framing: bincode 2 frames behind a big-endian `u32` length, or newline-delimited JSON,
//! chosen by the first byte a client sends (`0x00`: a frame's length starts with a zero
//! byte because frames are at most 64 KiB; `{`: JSON).
//!
//! The bincode configuration is fixed: little-endian, fixed-width integers (`u32` enum
//! variant indices, `u64` lengths), at most 64 KiB (`docs/protocol.md` spells it out).
//! Buffers are kept per connection and reused; a message is decoded in place.

use super::protocol::MAX_FRAME;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::{self, Read, Write};

/// The encoding a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Length-prefixed bincode frames (the first byte was `0x00`).
    Bincode,
    /// Newline-delimited JSON (the first byte was `{`).
    Json,
}

/// The fixed bincode configuration.
pub fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
        .with_limit::<MAX_FRAME>()
}

/// Why input could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The first byte chose neither encoding.
    #[error("the first byte must be 0x00 (a bincode frame) or '{{' (JSON), not {0:#04x}")]
    UnknownEncoding(u8),
    /// A frame or JSON line longer than [`MAX_FRAME`] (its length, bytes).
    #[error("frame of {0} bytes exceeds the 64 KiB limit")]
    TooLarge(usize),
    /// A message that does not decode, or a frame with bytes left over; the decoder's reason.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// Reading or writing the connection failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// A connection's read side: bytes in, messages out.
#[derive(Debug, Default)]
pub struct Framed {
    encoding: Option<Encoding>,
    buf: Vec<u8>,
}

impl Framed {
    /// The encoding, once the first byte arrived.
    pub fn encoding(&self) -> Option<Encoding> {
        self.encoding
    }

    /// Whether part of a message is buffered (a client that stops mid-frame).
    pub fn partial(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Reads what is available into the buffer; `Ok(0)` means the peer closed. A read a
    /// signal interrupts is tried again (on a socket with a timeout the kernel returns EINTR
    /// even under SA_RESTART): the handler has run, and the caller sees its flag once the
    /// read returns.
    pub fn fill(&mut self, r: &mut impl Read) -> io::Result<usize> {
        let mut chunk = [0u8; 4096];
        let n = loop {
            match r.read(&mut chunk) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                n => break n?,
            }
        };
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// The next whole message in the buffer, if any.
    pub fn next_message<T: DeserializeOwned>(&mut self) -> Result<Option<T>, CodecError> {
        if self.encoding.is_none() {
            // Leading whitespace (JSON's: space, tab, CR, LF) is tolerated for hand-typed
            // JSON, before either encoding.
            let blank = self
                .buf
                .iter()
                .take_while(|b| b" \t\r\n".contains(b))
                .count();
            self.buf.drain(..blank);
            self.encoding = match self.buf.first() {
                None => return Ok(None),
                Some(0) => Some(Encoding::Bincode),
                Some(b'{') => Some(Encoding::Json),
                Some(&b) => return Err(CodecError::UnknownEncoding(b)),
            };
        }
        match self.encoding {
            Some(Encoding::Json) => self.next_json(),
            _ => self.next_frame(),
        }
    }

    fn next_json<T: DeserializeOwned>(&mut self) -> Result<Option<T>, CodecError> {
        loop {
            let Some(end) = self.buf.iter().position(|&b| b == b'\n') else {
                if self.buf.len() > MAX_FRAME {
                    return Err(CodecError::TooLarge(self.buf.len()));
                }
                return Ok(None);
            };
            if end > MAX_FRAME {
                return Err(CodecError::TooLarge(end));
            }
            let line = &self.buf[..end];
            if line.iter().all(u8::is_ascii_whitespace) {
                self.buf.drain(..=end);
                continue;
            }
            let msg =
                serde_json::from_slice(line).map_err(|e| CodecError::Malformed(e.to_string()));
            self.buf.drain(..=end);
            return msg.map(Some);
        }
    }

    fn next_frame<T: DeserializeOwned>(&mut self) -> Result<Option<T>, CodecError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > MAX_FRAME {
            return Err(CodecError::TooLarge(len));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let decoded =
            bincode::serde::decode_from_slice::<T, _>(&self.buf[4..4 + len], bincode_config());
        self.buf.drain(..4 + len);
        match decoded {
            Ok((msg, used)) if used == len => Ok(Some(msg)),
            Ok(_) => Err(CodecError::Malformed("trailing bytes in frame".into())),
            Err(e) => Err(CodecError::Malformed(decode_text(&e))),
        }
    }
}

/// A bincode decoding error in words, for people and logs (bincode's own `Display` is its
/// `Debug`: `UnexpectedEnd { additional: 3 }`).
fn decode_text(e: &bincode::error::DecodeError) -> String {
    use bincode::error::DecodeError as E;
    match e {
        E::UnexpectedEnd { additional } => {
            format!("the payload ends {additional} byte(s) or more before the message does")
        }
        E::LimitExceeded => "a length in the payload exceeds the 64 KiB limit".into(),
        E::UnexpectedVariant {
            type_name, found, ..
        } => format!("{found} is not a variant index of {type_name}"),
        E::Utf8 { .. } => "a string is not valid UTF-8".into(),
        E::InvalidBooleanValue(v) => format!("a bool is {v}, not 0 or 1"),
        E::OutsideUsizeRange(v) => format!("a length of {v} is out of range"),
        // serde's own messages (`invalid value: integer `99`, expected variant index 0 <= i < 13`).
        E::OtherString(s) => s.clone(),
        E::Other(s) => (*s).to_string(),
        _ => "the payload does not decode as a message".into(),
    }
}

/// Feeds `bytes` through a connection's decoder as requests, in uneven chunks, until it
/// stops or refuses; returns the requests decoded. The fuzz targets and the corpus
/// replay test call this: it must never panic, whatever the input.
pub fn decode_requests(bytes: &[u8]) -> usize {
    let mut f = Framed::default();
    let mut decoded = 0;
    for chunk in bytes.chunks(97) {
        f.buf.extend_from_slice(chunk);
        loop {
            match f.next_message::<super::protocol::Request>() {
                Ok(Some(_)) => decoded += 1,
                Ok(None) => break,
                Err(_) => return decoded,
            }
        }
    }
    decoded
}

/// Encodes `msg` into `out` (cleared first) ready to write in one call.
pub fn encode<T: Serialize>(enc: Encoding, msg: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
    out.clear();
    match enc {
        Encoding::Json => {
            serde_json::to_writer(&mut *out, msg)
                .map_err(|e| CodecError::Malformed(e.to_string()))?;
            // The limit a peer reads with, as in bincode.
            if out.len() > MAX_FRAME {
                return Err(CodecError::TooLarge(out.len()));
            }
            out.push(b'\n');
        }
        Encoding::Bincode => {
            out.extend_from_slice(&[0; 4]);
            bincode::serde::encode_into_std_write(msg, &mut *out, bincode_config())
                .map_err(|e| CodecError::Malformed(e.to_string()))?;
            let len = out.len() - 4;
            if len > MAX_FRAME {
                return Err(CodecError::TooLarge(len));
            }
            out[..4].copy_from_slice(&(len as u32).to_be_bytes());
        }
    }
    Ok(())
}

/// Encodes and writes `msg`.
pub fn send<T: Serialize>(
    w: &mut impl Write,
    enc: Encoding,
    msg: &T,
    buf: &mut Vec<u8>,
) -> Result<(), CodecError> {
    encode(enc, msg, buf)?;
    w.write_all(buf)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::protocol::{Request, RequestBody};

    /// The request side of the status round trip: once the connection's buffer has grown,
    /// receiving and decoding a status request allocates nothing, in either encoding.
    #[test]
    fn a_status_request_is_received_and_decoded_without_allocating() {
        use crate::support::alloc_count::allocations;
        let req = Request {
            id: 3,
            body: RequestBody::Status,
        };
        for enc in [Encoding::Json, Encoding::Bincode] {
            let mut wire = Vec::new();
            encode(enc, &req, &mut wire).unwrap();
            let mut f = Framed::default();
            let feed = |f: &mut Framed| {
                f.fill(&mut wire.as_slice()).unwrap();
                f.next_message::<Request>().unwrap()
            };
            assert_eq!(feed(&mut f), Some(req.clone()), "{enc:?}");
            let (decoded, n) = allocations(|| (0..100).filter(|_| feed(&mut f).is_some()).count());
            assert_eq!((decoded, n), (100, 0), "{enc:?}: allocations");
        }
    }

    fn round_trip(enc: Encoding) {
        let req = Request {
            id: 7,
            body: RequestBody::Hello {
                version: 1,
                client: "t".into(),
            },
        };
        let mut out = Vec::new();
        encode(enc, &req, &mut out).unwrap();
        let mut f = Framed::default();
        // Byte by byte: messages are found whatever the read sizes.
        for (i, b) in out.iter().enumerate() {
            f.buf.push(*b);
            let got: Option<Request> = f.next_message().unwrap();
            assert_eq!(got.is_some(), i == out.len() - 1);
            if let Some(r) = got {
                assert_eq!(r, req);
            }
        }
    }

    #[test]
    fn both_encodings_round_trip_across_any_split() {
        round_trip(Encoding::Json);
        round_trip(Encoding::Bincode);
    }

    #[test]
    fn a_read_a_signal_interrupts_is_tried_again() {
        struct Interrupted(bool, &'static [u8]);
        impl Read for Interrupted {
            fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
                if std::mem::replace(&mut self.0, false) {
                    return Err(io::ErrorKind::Interrupted.into());
                }
                let n = self.1.len().min(out.len());
                out[..n].copy_from_slice(&self.1[..n]);
                self.1 = &self.1[n..];
                Ok(n)
            }
        }
        let mut f = Framed::default();
        assert_eq!(f.fill(&mut Interrupted(true, b"{}\n")).unwrap(), 3);
        assert_eq!(f.buf, b"{}\n");
    }

    /// JSON's whitespace before the first message is skipped, a tab included (found by a
    /// review writing a client in C: a tab was an unknown first byte).
    #[test]
    fn leading_whitespace_is_skipped_before_either_encoding() {
        let mut f = Framed {
            buf: b" \t\r\n{\"id\":1,\"body\":\"status\"}\n".to_vec(),
            ..Framed::default()
        };
        assert!(matches!(f.next_message::<Request>(), Ok(Some(_))));
        assert_eq!(f.encoding, Some(Encoding::Json));
        let mut f = Framed {
            buf: b"\t\n\0".to_vec(),
            ..Framed::default()
        };
        assert!(matches!(f.next_message::<Request>(), Ok(None)));
        assert_eq!(f.encoding, Some(Encoding::Bincode));
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let mut f = Framed {
            buf: b"GET / HTTP/1.1\r\n".to_vec(),
            ..Framed::default()
        };
        assert!(matches!(
            f.next_message::<Request>(),
            Err(CodecError::UnknownEncoding(b'G'))
        ));
        // A frame declaring 16 MiB - 1 bytes after its zero first byte: 0x00ffffff.
        let mut f = Framed {
            buf: vec![0x00, 0xff, 0xff, 0xff],
            ..Framed::default()
        };
        assert!(matches!(
            f.next_message::<Request>(),
            Err(CodecError::TooLarge(_))
        ));
        let mut f = Framed {
            buf: b"{\"id\": 1, \"body\": \"nope\"}\n".to_vec(),
            ..Framed::default()
        };
        assert!(matches!(
            f.next_message::<Request>(),
            Err(CodecError::Malformed(_))
        ));
        // Deep JSON: serde_json's recursion limit refuses it.
        let mut f = Framed {
            buf: format!("{{\"id\":{}\n", "[".repeat(10_000)).into_bytes(),
            ..Framed::default()
        };
        assert!(matches!(
            f.next_message::<Request>(),
            Err(CodecError::Malformed(_))
        ));
    }

    /// Replays the fuzz corpus (`fuzz/corpus/*`) on stable: no input may panic.
    #[test]
    fn fuzz_corpus_replays_without_panics() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        let mut files = 0;
        for target in std::fs::read_dir(&dir).unwrap() {
            for entry in std::fs::read_dir(target.unwrap().path()).unwrap() {
                let bytes = std::fs::read(entry.unwrap().path()).unwrap();
                decode_requests(&bytes);
                files += 1;
            }
        }
        assert!(files >= 8, "corpus has {files} inputs");
    }

    #[test]
    fn bincode_errors_are_words_not_debug_output() {
        let mut msg = Vec::new();
        encode(
            Encoding::Bincode,
            &Request {
                id: 1,
                body: RequestBody::Hello {
                    version: 2,
                    client: "me".into(),
                },
            },
            &mut msg,
        )
        .unwrap();
        // The frame keeps its length but loses the name's last three bytes.
        let len = msg.len() - 4 - 3;
        let mut cut = (len as u32).to_be_bytes().to_vec();
        cut.extend_from_slice(&msg[4..4 + len]);
        let mut f = Framed {
            buf: cut,
            ..Framed::default()
        };
        let Err(CodecError::Malformed(text)) = f.next_message::<Request>() else {
            panic!("a cut payload must not decode")
        };
        assert!(text.starts_with("the payload ends "), "{text}");
        assert!(!text.contains('{'), "{text}");
        // An unknown variant index: serde's words.
        let mut f = Framed {
            buf: [
                &[0, 0, 0, 12][..],
                &1u64.to_le_bytes(),
                &99u32.to_le_bytes(),
            ]
            .concat(),
            ..Framed::default()
        };
        let Err(CodecError::Malformed(text)) = f.next_message::<Request>() else {
            panic!("variant 99 must not decode")
        };
        assert!(text.contains("99") && !text.contains('{'), "{text}");
    }

    /// What the agent sends is held to the limit a peer reads with, in both encodings.
    #[test]
    fn a_message_over_the_frame_limit_is_not_encoded() {
        use crate::ipc::protocol::{ErrorCode, Reply};
        let long = Reply::error(1, ErrorCode::Failed, "x".repeat(MAX_FRAME));
        for enc in [Encoding::Json, Encoding::Bincode] {
            let mut out = Vec::new();
            let e = encode(enc, &long, &mut out).unwrap_err();
            assert!(
                matches!(e, CodecError::TooLarge(n) if n > MAX_FRAME),
                "{enc:?}: {e}"
            );
        }
    }

    #[test]
    fn unit_requests_are_plain_strings_in_json() {
        let s = serde_json::to_string(&Request {
            id: 2,
            body: RequestBody::Status,
        })
        .unwrap();
        assert_eq!(s, r#"{"id":2,"body":"status"}"#);
    }
}
