//! # polypath-quic
//!
//! A sans-IO implementation of QUIC version 1 (RFC 9000, RFC 9001, RFC 9002), the unreliable
//! datagram extension (RFC 9221) and Multipath QUIC (draft-ietf-quic-multipath-21), with
//! public plug-in traits for schedulers, congestion controllers and path managers.
//!
//! "Sans-IO" means this crate never touches a socket, a clock or a thread: the caller feeds
//! in received datagrams with the current time, asks for datagrams to send and for the next
//! timer deadline, and reports when that deadline passes. The same code therefore runs over
//! real UDP sockets (`polypath-io`), inside the deterministic simulator (`polypath-sim`) and
//! in tests.
#![warn(missing_docs)]

pub mod coding;
pub mod error;
pub mod frame;
pub mod packet;
pub mod range_set;
pub mod shared;
pub mod transport_parameters;
pub mod varint;

pub use error::{TransportError, TransportErrorCode};
pub use shared::{ConnectionId, Dir, PathId, ResetToken, Side, StreamId};
pub use varint::VarInt;
