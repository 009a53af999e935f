//! The parts of the `polypath` command that other crates use: the wire format of the
//! `polypath-transfer/1` request, so that it can be fuzzed (`polypath-fuzz`) without
//! going through a server. Everything else lives in the binary.
#![warn(missing_docs)]

pub mod request;
