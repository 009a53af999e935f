//! Errors of the async API. Every failure is a value; nothing here panics.

use polypath_quic::connection::{MigrateError, OpenPathError};
use polypath_quic::{ConnectionError, VarInt};
use std::net::SocketAddr;

/// Setting up an endpoint or a socket failed.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// The endpoint was created outside a Tokio runtime.
    #[error("polypath-io endpoints must be created inside a Tokio runtime")]
    NoRuntime,
    /// No local address was given.
    #[error("an endpoint needs at least one local address")]
    NoLocalAddress,
    /// Binding a UDP socket failed.
    #[error("cannot bind UDP socket {addr}: {source}")]
    Bind {
        /// The address that could not be bound.
        addr: SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// Opening a client connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The endpoint has no socket to reach this address from (or not the given one).
    #[error("no bound local address to connect from (wanted {0})")]
    NoLocalAddress(SocketAddr),
    /// The endpoint is closed.
    #[error("the endpoint is closed")]
    EndpointClosed,
    /// The connection could not be started (bad address or TLS settings).
    #[error("cannot start the connection: {0}")]
    Start(polypath_quic::ConnectError),
    /// The handshake failed or the connection was lost during it.
    #[error("handshake failed: {0}")]
    Handshake(ConnectionError),
}

/// Writing to a stream failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The peer asked us to stop sending (STOP_SENDING) with this code.
    #[error("stopped by the peer with code {0}")]
    Stopped(VarInt),
    /// The stream was finished or reset already.
    #[error("the stream is closed for sending")]
    ClosedStream,
    /// The connection ended.
    #[error("connection lost: {0}")]
    ConnectionLost(ConnectionError),
}

/// Reading from a stream failed (a clean end of stream is not an error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The peer reset the stream with this code.
    #[error("reset by the peer with code {0}")]
    Reset(VarInt),
    /// Reading was stopped or everything was read already.
    #[error("the stream is closed for reading")]
    ClosedStream,
    /// The stream ended with more data than the caller allowed.
    #[error("the stream holds more than {0} bytes")]
    TooLong(usize),
    /// The connection ended.
    #[error("connection lost: {0}")]
    ConnectionLost(ConnectionError),
}

/// Sending an unreliable datagram failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DatagramError {
    /// The peer does not accept datagrams, or this one is too large.
    #[error("datagram refused: {0}")]
    Refused(polypath_quic::datagrams::SendDatagramError),
    /// The connection ended.
    #[error("connection lost: {0}")]
    ConnectionLost(ConnectionError),
}

/// A path operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The endpoint has no socket bound to this local address.
    #[error("no socket is bound to {0}; bind it on the endpoint first")]
    NoSocket(SocketAddr),
    /// The sans-IO connection refused to open the path.
    #[error("cannot open a path: {0}")]
    Open(OpenPathError),
    /// The sans-IO connection refused the migration.
    #[error("cannot migrate: {0}")]
    Migrate(MigrateError),
    /// No such path (or multipath is not in use).
    #[error("unknown path {0}")]
    UnknownPath(polypath_quic::PathId),
    /// The connection ended.
    #[error("connection lost: {0}")]
    ConnectionLost(ConnectionError),
}
