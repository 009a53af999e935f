//! The parts of the `polypath` command that other crates use: the wire format of the
//! `polypath-transfer/1` request, so that it can be fuzzed (`polypath-fuzz`) without
//! going through a server, and the `hq-interop` (HTTP/0.9) server and client, which the
//! interop matrix runs against noq. Everything else lives in the binary.
#![warn(missing_docs)]

pub mod hq;
pub mod request;
