//! # polypath-fuzz
//!
//! The bodies of polypath's fuzz targets, one function per target, shared by the two
//! ways they run:
//!
//! * the cargo-fuzz binaries in `fuzz/fuzz_targets/` (nightly, coverage-guided:
//!   `make fuzz`), each of which only calls its function here;
//! * this crate's tests (`make test`), which run every body on a few thousand seeded
//!   pseudo-random inputs and mutations of a seed corpus ([`seeds`]) in seconds, on the
//!   stable toolchain.
//!
//! A body panics when the code under test panics or breaks an invariant the body checks
//! (a round trip that changes a value, an error code the RFC does not allow, ...);
//! anything else is a pass. Each returns a count of what got through (frames decoded,
//! packets opened, operations run) so that the tests can check their inputs reached the
//! code behind the decoders.
//!
//! The gateway's targets (`gw_control`, `gw_tunnel`) cover its control-message decoder,
//! the policies the control plane carries, the tunnel framing, the IP headers it reads and
//! the measurement probes.
#![warn(missing_docs)]

mod crypto;
mod gateway;
mod m2ho;
pub mod seeds;
mod stateful;
mod text;
mod wire;

pub use crypto::{packet_unprotect, retry_integrity, retry_token};
pub use gateway::{gw_control, gw_tunnel};
pub use m2ho::m2ho_packet;
pub use stateful::endpoint_pair;
pub use text::{link_events, scenario, traces, transfer_request};
pub use wire::{frames, packet_header, transport_parameters};

/// A fuzz target: the name of its cargo-fuzz binary and its body.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The cargo-fuzz binary's name (`cargo fuzz run NAME`).
    pub name: &'static str,
    /// The body; returns how many units of the input got through (see the crate docs).
    pub body: fn(&[u8]) -> usize,
}

/// Every target, in the order `make fuzz` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "frames",
        body: frames,
    },
    Target {
        name: "packet_header",
        body: packet_header,
    },
    Target {
        name: "transport_parameters",
        body: transport_parameters,
    },
    Target {
        name: "retry_token",
        body: retry_token,
    },
    Target {
        name: "retry_integrity",
        body: retry_integrity,
    },
    Target {
        name: "packet_unprotect",
        body: packet_unprotect,
    },
    Target {
        name: "link_events",
        body: link_events,
    },
    Target {
        name: "scenario",
        body: scenario,
    },
    Target {
        name: "traces",
        body: traces,
    },
    Target {
        name: "transfer_request",
        body: transfer_request,
    },
    Target {
        name: "gw_control",
        body: gw_control,
    },
    Target {
        name: "gw_tunnel",
        body: gw_tunnel,
    },
    Target {
        name: "m2ho_packet",
        body: m2ho_packet,
    },
    Target {
        name: "endpoint_pair",
        body: endpoint_pair,
    },
];
