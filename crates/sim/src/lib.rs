//! polypath-sim: a deterministic discrete-event network simulator that drives
//! sans-IO endpoints over simulated links.
//!
//! * [`Agent`]: what runs on a host (the QUIC endpoint adapter, traffic
//!   generators, sinks). Agents get datagrams and timeouts at virtual times and
//!   are polled for datagrams and deadlines, quinn-proto style.
//! * [`Simulator`]: virtual clock, binary-heap event queue with FIFO
//!   tie-breaking, hosts with interfaces and routes, links with per-direction
//!   rate (constant, schedule, Lumos5G / CSV / Mahimahi trace, or an external
//!   [`LinkSource`] such as the radio model), delay, jitter, Bernoulli and
//!   Gilbert-Elliott loss, duplication, drop-tail queues and outages.
//! * [`run`] / [`run_scenario`]: build from a scenario file, run with a
//!   progress bar, write `flows.csv`, `paths.csv`, `links.csv`,
//!   `completions.csv`, optional `packets.csv` and `summary.json`, and hash
//!   them. Same scenario and seed give byte-identical files.
#![warn(missing_docs)]

mod agent;
mod build;
mod engine;
mod error;
mod link;
mod record;
mod run;
mod source;
mod time;
pub mod traffic;

pub use agent::{Agent, AgentStats, Datagram, PathStats, Record};
pub use build::{AgentFactory, BuildContext, FIRST_EPHEMERAL_PORT, UdpTrafficFactory, path_addrs};
pub use engine::{AgentId, Simulator, StopReason, derive_seed};
pub use error::SimError;
pub use link::DropReason;
pub use polypath_scenario as scenario;
pub use record::{CompletionStats, DelayStats, FlowSummary, LinkSummary, Summary};
pub use run::{Hooks, RunOptions, RunReport, run, run_scenario};
pub use source::{LinkChange, LinkDirSel, LinkSource, LinkUpdate, ScheduledSource};
pub use time::SimTime;
