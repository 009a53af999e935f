//! polypath-emu: the real-time emulator. One scenario file, two drivers: what
//! `polypath sim run` simulates, `polypath emu run` emulates between real processes.
//!
//! * **Hosts** become network namespaces (`<run id>.<host>`, the run id unique per process
//!   and run) and **interfaces** TUN devices carrying the scenario's addresses, with
//!   source routing as the simulator applies it ([`testbed`](crate::testbed)).
//! * **One link model, two clocks.** The links, their traces, loss, queues, outages,
//!   `steps`, and the `[radio]` model with its slot scheduler, handovers, context releases,
//!   target buffers and NR-DC, are the simulator's own engine (`polypath_sim::Simulator`),
//!   prepared from the scenario exactly as `polypath sim run` prepares it
//!   (`polypath_sim::prepare`) and advanced on the monotonic clock instead of the virtual
//!   one (`Simulator::advance`). Packets the hosts' kernels send are read from the TUN
//!   devices and enter the model at the moment they are read; what the model delivers is
//!   written to the destination host's TUN device when it is due. There is no second copy
//!   of the link model.
//! * **Link events** (radio events, `outage_signal` link down / up) reach the processes
//!   on each host through a Unix socket named in `POLYPATH_LINK_EVENTS`
//!   (`polypath_link::feed`), and `--events FILE` writes the radio event stream as the
//!   simulator does.
//! * **Traffic**: `command` flows run a command line in the `from` host's namespace;
//!   `quic` flows run the real `polypath server` and `polypath client`; `cbr`, `onoff` and
//!   `reqresp` run the simulator's own generator agents over real UDP sockets
//!   ([`udpgen`](crate::udpgen)); [`tcp`] is a TCP / MPTCP bulk tool for command flows.
//! * **Outputs** as the simulator writes them (`flows.csv`, `paths.csv`, `links.csv`,
//!   `completions.csv`, `summary.json`), from the model's own recorders, plus what the
//!   emulator measured of itself: how late packets reached their host compared with the
//!   model's schedule, the engine's CPU share, and a warning when the machine could not
//!   keep up ([`Realtime`]).
//! * **Cleanup**: namespaces (with their devices, routes and MPTCP endpoints), processes
//!   and sockets are removed on exit, on error and on SIGINT / SIGTERM; [`clean`] removes
//!   what a killed run left, and runs at the start of every run.

#![warn(missing_docs)]

mod error;
mod feed;
mod ns;
mod packet;
mod procs;
mod rt;
mod run;
pub mod tcp;
mod testbed;
mod udpgen;

pub use error::EmuError;
pub use ns::{CleanReport, PREFIX, available, clean};
pub use procs::{ProcessReport, Role};
pub use rt::LatenessReport;
pub use run::{EmuOptions, EmuReport, EmuSummary, Realtime, run, run_scenario};
