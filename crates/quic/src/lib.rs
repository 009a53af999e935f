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
//!
//! The entry point is [`Endpoint`]; each [`Connection`] it manages exposes streams,
//! datagrams, paths and statistics.
//!
//! The plug-in policies live in [`sched`] (which path the next packet takes), [`cc`]
//! (congestion control per path) and [`pm`] (which paths exist: path managers acting on
//! link-layer events and path state). Link-layer events are [`polypath_link`] types, given
//! to a connection with [`Connection::handle_link_event`].
#![warn(missing_docs)]

pub mod cc;
// The wire codecs are private unless the fuzz targets ask for them (`fuzzing`); some of
// their functions serve only those targets and the codecs' own tests.
#[cfg(feature = "fuzzing")]
pub mod coding;
#[cfg(not(feature = "fuzzing"))]
#[allow(dead_code)]
mod coding;
pub mod config;
pub mod connection;
pub mod crypto;
pub mod datagrams;
pub mod ecn;
pub mod endpoint;
pub mod error;
#[cfg(feature = "fuzzing")]
pub mod frame;
#[cfg(not(feature = "fuzzing"))]
#[allow(dead_code)]
mod frame;
pub mod link_hints;
#[cfg(feature = "fuzzing")]
pub mod packet;
#[cfg(not(feature = "fuzzing"))]
#[allow(dead_code)]
mod packet;
pub mod pm;
pub mod qlog;
#[cfg(feature = "fuzzing")]
pub mod range_set;
#[cfg(not(feature = "fuzzing"))]
#[allow(dead_code)]
mod range_set;
pub mod recovery;
pub mod registry;
pub mod sched;
pub mod shared;
pub mod streams;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod transport_parameters;
pub mod varint;
pub mod version_negotiation;

pub use polypath_link;

pub use config::{ClientConfig, EndpointConfig, ServerConfig, TransportConfig};
pub use connection::{
    Connection, ConnectionError, ConnectionStats, Event, MigrateError, PathInfo, PathStats,
    Transmit,
};
pub use endpoint::{ConnectError, ConnectionHandle, Endpoint};
pub use error::{TransportError, TransportErrorCode};
pub use packet::{SUPPORTED_VERSIONS, VERSION_1, VERSION_2};
pub use shared::{ConnectionId, Dir, PathId, ResetToken, Side, StreamId};
pub use varint::VarInt;
