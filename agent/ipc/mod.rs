//! The agent's socket protocol: the types both sides share ([`protocol`]), the two
//! encodings on one socket ([`codec`]), and the Rust client ([`client`]).
//! `docs/protocol.md` documents it for Python, C++ and `socat`.

pub mod client;
pub mod codec;
pub mod protocol;
