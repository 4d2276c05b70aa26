//! The agent's socket protocol: the types both sides share ([`protocol`], importing
//! nothing else of the crate), the two encodings on one socket ([`codec`]), the Rust
//! client ([`client`]), the server side over a handler trait ([`server`]) and each
//! connection's queue of events ([`events`]).
//! `docs/protocol.md` documents it for Python, C++ and `socat`.

pub mod client;
pub mod codec;
pub mod events;
pub mod protocol;
pub mod server;
