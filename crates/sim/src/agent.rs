//! What runs on a simulated host: the [`Agent`] trait.

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use polypath_link::LinkEvent;

use crate::time::SimTime;

/// A UDP datagram as an agent sees it.
///
/// Outgoing: `src` names the local interface address (and port) to send from,
/// which picks the path (a multipath endpoint chooses its path by source
/// address); `dst` is the peer. Incoming: `dst` is the local address it
/// arrived on, `src` the remote sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// UDP payload. The link charges it plus IP and UDP headers (28 bytes for
    /// IPv4, 48 for IPv6).
    pub payload: Bytes,
}

/// Anything that runs on a host: a QUIC endpoint adapter, a traffic generator,
/// a sink. The simulator drives it sans-IO style:
///
/// 1. at time zero and after every [`handle_datagram`](Agent::handle_datagram)
///    or [`handle_timeout`](Agent::handle_timeout), it drains
///    [`poll_transmit`](Agent::poll_transmit) until `None`, then reads
///    [`poll_timeout`](Agent::poll_timeout);
/// 2. when that deadline comes, it calls `handle_timeout` (a deadline in the
///    past fires at the current time);
/// 3. at every recorder bin it reads [`stats`](Agent::stats) and
///    [`drain_records`](Agent::drain_records).
///
/// Agents must not read the wall clock or unseeded randomness: everything they
/// need arrives through `now` and their constructor.
pub trait Agent {
    /// A datagram arrived at one of this agent's bound addresses.
    fn handle_datagram(&mut self, now: SimTime, datagram: Datagram);

    /// The deadline from [`poll_timeout`](Agent::poll_timeout) passed.
    fn handle_timeout(&mut self, now: SimTime);

    /// The next datagram to send now, if any.
    fn poll_transmit(&mut self, now: SimTime) -> Option<Datagram>;

    /// When this agent next wants [`handle_timeout`](Agent::handle_timeout).
    fn poll_timeout(&mut self) -> Option<SimTime>;

    /// Whether the agent has finished its work. A run with `stop_when_done`
    /// ends once every agent is done and no packet is in flight. Passive
    /// agents (sinks, servers) should report `true`.
    fn is_done(&self) -> bool;

    /// Fills `stats` (cleared by the caller) with current counters.
    fn stats(&self, stats: &mut AgentStats);

    /// Moves finished-work records (completion times) into `out`.
    fn drain_records(&mut self, out: &mut Vec<Record>) {
        let _ = out;
    }

    /// A link-layer event from the radio model concerning the UE this agent's host is
    /// (the host whose interface plugs into side `a` of a link bound to one of that UE's
    /// radio paths): measurements, RRC events, handover command / execution, random
    /// access, link up / down, predicted throughput, and RB allocations when the scenario
    /// asks for them.
    ///
    /// Also, for a link with `outage_signal`, the link down / link up events of its
    /// scheduled outages, given to the agents on the hosts with an interface at the told
    /// end(s) of that link;
    /// then `event.ue` is the host's index, `event.iface` the interface's index within the
    /// host and `local` the interface's address (see `scenarios/README.md`).
    ///
    /// `event.iface` is the UE's radio path. `local` is the address of this host's
    /// interface on the link bound to that path (`None` if the path drives no link), so
    /// a multipath endpoint can apply the event as a link hint to the paths whose local
    /// address it is. Called at the event's time (`now == event.t_ns`), in the order
    /// the events were produced; the simulator then polls the agent as after
    /// [`handle_timeout`](Agent::handle_timeout). The default ignores the event.
    fn handle_link_event(&mut self, now: SimTime, event: &LinkEvent, local: Option<IpAddr>) {
        let _ = (now, event, local);
    }
}

/// Counters an agent reports at each recorder bin.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentStats {
    /// Application bytes received so far (stream bytes delivered in order for
    /// QUIC, payload bytes for raw UDP).
    pub app_bytes_received: u64,
    /// Application bytes sent so far.
    pub app_bytes_sent: u64,
    /// Per-path state, when the agent has paths (QUIC); empty otherwise.
    pub paths: Vec<PathStats>,
}

/// One path's congestion state as the agent sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PathStats {
    /// The agent's own path identifier.
    pub id: u64,
    /// Local address of the path.
    pub local: SocketAddr,
    /// Remote address of the path.
    pub remote: SocketAddr,
    /// Smoothed RTT, if measured.
    pub srtt: Option<std::time::Duration>,
    /// Congestion window in bytes.
    pub cwnd: Option<u64>,
    /// Bytes in flight.
    pub bytes_in_flight: Option<u64>,
    /// Packets declared lost so far.
    pub lost_packets: u64,
    /// Packets sent so far.
    pub sent_packets: u64,
}

/// Something an agent finished, for `completions.csv`.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A unit of work (a transfer, a request/response exchange) completed.
    Completion {
        /// What completed, e.g. `transfer` or `request 17`.
        label: String,
        /// When it started.
        started: SimTime,
        /// When it finished.
        finished: SimTime,
        /// Application bytes it moved.
        bytes: u64,
    },
}
