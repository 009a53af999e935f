//! # polypath-m2ho
//!
//! M2HO ("M2HO: Mitigating the Adverse Effects of 5G Handovers on TCP", MobiCom '24,
//! doi:10.1145/3636534.3690680) on the device: a shim between the
//! modem's link-layer events and the kernel's TCP that keeps an unmodified TCP sender
//! (CUBIC, BBR, ...) fast across handovers, by rewriting and suppressing the device's own
//! outgoing ACKs.
//!
//! * [`packet`]: IPv4 / IPv6 + TCP parsing, in-place window rewrite with the RFC 1624
//!   incremental checksum ([`checksum`]);
//! * [`conn`]: per-connection tracking (window scale, sequence numbers, duplicate ACKs,
//!   receiver-side RTT from timestamps, bytes per round trip);
//! * [`predict`]: Algorithm 1 with both fallbacks (Sec. 4.2), and HO-Naive;
//! * [`buffer`]: per-cell buffer estimates from resource-block bursts (Sec. 4.3);
//! * [`rate`]: Eq. 2 (Sec. 4.5);
//! * [`controller`]: the Stable / Preparation / Smoothing state machine (Sec. 4.1) that
//!   ties them together, sans-IO: it is given every event and packet with its time;
//! * `daemon` (Linux): the controller on NFQUEUE, with its nftables rules, the link-event
//!   feed and the statistics (`polypath m2ho run`).
//!
//! ```
//! use polypath_m2ho::{Config, Controller, Direction, Verdict};
//! let mut m2ho = Controller::new(Config::default());
//! let mut not_tcp = vec![0x45u8, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
//! assert!(matches!(m2ho.on_packet(0, Direction::Outbound, &mut not_tcp), Verdict::Unparsed(_)));
//! ```
#![warn(missing_docs)]

pub mod buffer;
pub mod checksum;
pub mod config;
pub mod conn;
pub mod controller;
#[cfg(target_os = "linux")]
pub mod daemon;
pub mod packet;
pub mod predict;
pub mod rate;

pub use config::{Config, PredictorKind};
pub use conn::Direction;
pub use controller::{Controller, State, Stats, Verdict};

/// Writes `value` as pretty JSON to `path` atomically: a temporary file beside it, renamed
/// over it, so a reader (or a crash) never sees half a file.
pub(crate) fn write_json_atomically<T: serde::Serialize>(
    path: &std::path::Path,
    value: &T,
) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text + "\n")?;
    std::fs::rename(&tmp, path)
}
