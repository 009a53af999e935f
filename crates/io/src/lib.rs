//! # polypath-io
//!
//! A Tokio driver for the sans-IO [`polypath_quic`] stack: real UDP sockets, real timers
//! and an async API for connections, streams, datagrams and paths.
//!
//! ## Design
//!
//! * **One driver task per endpoint.** [`Endpoint::new`] binds the sockets and spawns a
//!   task that owns the I/O. The sans-IO endpoint, the sockets and the wakers of waiting
//!   application tasks live in one `State` behind one mutex, shared (in an `Arc`) by the
//!   driver and every handle. The driver receives datagrams, runs expired timers, sends
//!   what the connections produce, then turns each connection's events
//!   ([`polypath_quic::Event`]) into wake-ups, all in one critical section; it then sleeps
//!   until a socket is ready, the earliest deadline from
//!   [`polypath_quic::Endpoint::poll_timeout`] passes, or an application call wakes it.
//! * **Application calls are short critical sections.** A write copies data into the
//!   connection's send buffer and wakes the driver; a read takes buffered data. When
//!   nothing can be done, the call registers its task's waker for the matching event
//!   (stream readable or writable, stream opened, datagram received, path event,
//!   connection lost) before releasing the lock, so no event is missed.
//! * **One UDP socket per local address.** Multipath clients bind several local addresses
//!   ([`Endpoint::client`] or [`Endpoint::bind`]) and open one path per address
//!   ([`Connection::open_path`]); each [`polypath_quic::Transmit`] leaves from the socket of
//!   its source address. Sockets use quinn-udp: `recvmmsg`, GRO and GSO where the kernel
//!   offers them, and plain datagram-by-datagram I/O where it does not (a GSO send the
//!   kernel refuses switches GSO off for the socket and is retried singly).
//! * **Errors are values.** Socket, handshake, stream and path failures come back as the
//!   error types of this crate; a dropped or failed driver ends every connection with an
//!   error instead of leaving tasks waiting.
//! * **Lifetimes.** Dropping the last handle of an open connection closes it (application
//!   code 0). The driver task ends once every [`Endpoint`] handle is dropped and every
//!   connection has drained; [`Endpoint::wait_idle`] waits for the latter.
//!
//! **Link events.** [`link_feed`] reads a host's link-event feed (the Unix socket an
//! emulator serves link-layer events on) and [`Connection::handle_link_event`] hands each
//! event to a live connection, for its link hints, scheduler and path manager.
//!
//! [`relay`] holds a userspace UDP relay that drops datagrams at random or blackholes a
//! client address, for loss and path-failure experiments on loopback.
//!
//! qlog output goes to files with [`QlogDir`], set as
//! [`polypath_quic::EndpointConfig::qlog`].
#![warn(missing_docs)]

mod connection;
mod driver;
mod endpoint;
mod error;
pub mod link_feed;
mod qlog;
pub mod relay;
mod socket;
mod state;

pub use connection::{Connection, RecvStream, SendStream};
pub use endpoint::Endpoint;
pub use error::{ConnectError, DatagramError, IoError, PathError, ReadError, WriteError};
pub use polypath_quic::sched::{PathEvent, PathStatus, QosClass};
pub use polypath_quic::{ConnectionError, ConnectionStats, PathId, PathInfo, StreamId};
pub use qlog::QlogDir;
pub use state::PathTimes;
