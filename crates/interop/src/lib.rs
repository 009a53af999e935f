//! # polypath-interop
//!
//! The interop matrix: polypath against noq (crates.io, the reference peer) over real
//! loopback UDP, in both directions (polypath client ↔ noq server and noq client ↔
//! polypath server). Cases: handshake with ALPN, Retry, a stream upload and a download
//! (SHA-256 compared), many streams past the stream limit, RESET_STREAM and STOP_SENDING,
//! DATAGRAM frames each way (RFC 9221), key updates forced on both sides in the middle of a
//! transfer, application close codes, HTTP/0.9 (`hq-interop`, the QUIC Interop Runner's
//! protocol: polypath's own server and client of `polypath_cli::hq` against the noq ones of
//! [`hq`]) including many files at once under small flow-control windows, and the
//! multipath extension
//! (draft-ietf-quic-multipath-21): negotiation, a second path from 127.0.0.2, path status,
//! transfers that use both paths and survive the abandonment of one (by either side, the
//! handshake path included), a new path after MAX_PATH_ID, and key updates with two paths;
//! and NAT rebinding (a new port, or a new address, twice during a download, through the
//! loopback NAT of [`nat`]), which the server must follow and validate.
//! Each case runs on fresh connections; see [`Case`] for the checks of each.
//!
//! The polypath side runs on `polypath-io`; the noq client uses [`MultiAddrSocket`] so that
//! its second path leaves from 127.0.0.2 without binding the wildcard address.
//!
//! [`run_matrix`] is the entry point; the `polypath-interop` binary prints its [`Report`]
//! as JSON (`--json`) or as a table and exits non-zero if any case failed.
//! To debug a failure, set `POLYPATH_INTEROP_QLOG=DIR` ([`peer::QLOG_ENV`]): every polypath
//! endpoint of the matrix then writes one qlog file per connection to `DIR`.
//!
//! [`runner`] checks the QUIC Interop Runner's endpoint contract instead: the repository's
//! `interop/runner/run_endpoint.sh` against noq on loopback (`polypath-interop --runner`),
//! including the multipath cases proposed in `interop/MULTIPATH-CASES.md`.
#![warn(missing_docs)]

pub mod cases;
pub mod hq;
pub mod nat;
pub mod noq_socket;
pub mod noq_window;
pub mod peer;
pub mod report;
pub mod runner;

use std::time::Duration;

pub use cases::{Case, Context, DATAGRAM_PASS_PERCENT, MIN_BYTES_PER_PATH, Sizes};
pub use noq_socket::MultiAddrSocket;
pub use report::{CaseResult, Report, Stack};

/// What to run.
#[derive(Debug, Clone)]
pub struct MatrixOptions {
    /// The cases, each run in both directions.
    pub cases: Vec<Case>,
    /// Transfer and datagram counts.
    pub sizes: Sizes,
    /// A case that takes longer fails with a timeout.
    pub case_timeout: Duration,
}

impl Default for MatrixOptions {
    fn default() -> Self {
        MatrixOptions {
            cases: Case::ALL.to_vec(),
            sizes: Sizes::default(),
            case_timeout: Duration::from_secs(60),
        }
    }
}

/// The two directions of the matrix: (client, server).
pub const DIRECTIONS: [(Stack, Stack); 2] =
    [(Stack::Polypath, Stack::Noq), (Stack::Noq, Stack::Polypath)];

/// Runs every case of `options` in both directions, one after the other, and collects the
/// results. A failing or hanging case is recorded and the next one runs. Must be called
/// inside a Tokio runtime (with the time and I/O drivers enabled).
pub async fn run_matrix(options: &MatrixOptions) -> Report {
    let mut report = Report::default();
    let ctx = match Context::new(options.sizes.clone()) {
        Ok(c) => c,
        Err(e) => {
            for &case in &options.cases {
                for (client, server) in DIRECTIONS {
                    report.cases.push(CaseResult {
                        client,
                        server,
                        case: case.name(),
                        ok: false,
                        detail: e.clone(),
                    });
                }
            }
            return report;
        }
    };
    for &case in &options.cases {
        for (client, server) in DIRECTIONS {
            let outcome =
                tokio::time::timeout(options.case_timeout, cases::run(&ctx, case, client, server))
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "timed out after {} s",
                            options.case_timeout.as_secs_f64()
                        ))
                    });
            let (ok, detail) = match outcome {
                Ok(d) => (true, d),
                Err(e) => (false, e),
            };
            report.cases.push(CaseResult {
                client,
                server,
                case: case.name(),
                ok,
                detail,
            });
        }
    }
    report
}
