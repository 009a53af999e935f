//! polypath-sim: a deterministic discrete-event network simulator that drives
//! sans-IO endpoints over simulated links.
//!
//! * [`Agent`]: what runs on a host (the QUIC endpoint adapter, traffic
//!   generators, sinks). Agents get datagrams and timeouts at virtual times and
//!   are polled for datagrams and deadlines, quinn-proto style.
//! * [`Simulator`]: virtual clock, binary-heap event queue with FIFO
//!   tie-breaking, hosts with interfaces and routes, links with per-direction
//!   rate (constant, schedule, Lumos5G / CSV / Mahimahi trace, or an external
//!   [`LinkSource`]), delay, jitter, Bernoulli and Gilbert-Elliott loss,
//!   duplication, drop-tail queues and outages (with `outage_signal`, announced to
//!   the agents on the hosts at one or both ends as link down / link up events).
//! * [`QuicFactory`]: the QUIC adapter. Every `kind = "quic"` flow instance runs the
//!   real polypath-quic stack, a client endpoint on the `from` host and a server on the
//!   `to` host, Multipath QUIC over the flow's paths, with link events fed to the
//!   endpoints on the hosts they concern as link hints ([`quic`]).
//! * The 5G radio model ([`ran`], `polypath-ran`), driven from the scenario's
//!   `[radio]` section: a link with `radio = { ue, iface }` carries that radio
//!   path, its downlink queued in the serving cell's buffer and served slot by
//!   slot, with the model's rates, handover interruptions (target buffer),
//!   context releases and coverage losses applied as `polypath_ran::action`
//!   specifies. Its link-layer events ([`LinkEvent`]) go to the agents on the
//!   UE's host ([`Agent::handle_link_event`]) and, with
//!   [`RunOptions::events`], to a JSON-lines file; handover figures go to the
//!   summary's `radio` key ([`RadioSummary`]).
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
mod link_predict;
#[cfg(feature = "noq")]
mod noq;
pub mod quic;
mod radio;
mod record;
mod run;
mod source;
mod time;
pub mod traffic;

pub use agent::{Agent, AgentStats, Datagram, PathStats, Record};
pub use build::{
    AgentFactory, BuildContext, FIRST_EPHEMERAL_PORT, UdpPair, UdpTrafficFactory, path_addrs,
    udp_agents,
};
pub use engine::{AgentId, Simulator, StopReason, derive_seed};
pub use error::SimError;
pub use link::DropReason;
pub use polypath_link::{LinkEvent, LinkEventKind};
pub use polypath_ran as ran;
pub use polypath_scenario as scenario;
pub use quic::{QuicFactory, TransferOutcome};
pub use radio::{InterruptionRecord, RadioSummary, radio_config};
pub use record::{CompletionStats, DelayStats, FlowSummary, LinkSummary, Summary};
pub use run::{Hooks, RunOptions, RunReport, prepare, run, run_scenario, write_outputs};
pub use source::{LinkChange, LinkDirSel, LinkSource, LinkUpdate, ScheduledSource};
pub use time::SimTime;
