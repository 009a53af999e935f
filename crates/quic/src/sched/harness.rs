//! A test harness for schedulers, without a connection: path snapshots with chosen RTTs and
//! windows ([`snapshot`]) and a tiny closed-loop simulation ([`Sim`]) that drives any
//! [`Scheduler`] through the public trait, packet by packet, with acknowledgments one RTT
//! later. The crate's own scheduler tests use it; authors of schedulers outside the crate
//! get it with the `testing` cargo feature (`polypath_quic::testing::scheduler`).

use super::{Decision, PathSnapshot, PendingData, Scheduler};
use crate::shared::PathId;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

/// A usable path with the given RTT and window room.
pub fn snapshot(id: u32, srtt_ms: u64, can_send: bool) -> PathSnapshot {
    let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4433));
    let mut p = PathSnapshot::new(PathId(id), addr, addr);
    p.srtt = Duration::from_millis(srtt_ms);
    p.rttvar = Duration::from_millis(srtt_ms / 2);
    p.min_rtt = p.srtt;
    p.latest_rtt = p.srtt;
    p.has_rtt_sample = true;
    p.cwnd = 12_000;
    p.bytes_in_flight = if can_send { 0 } else { 12_000 };
    p.can_send = can_send;
    p
}

/// One simulated path: a fixed RTT and a congestion window counted in packets.
pub struct SimPath {
    /// The snapshot template: `srtt`, `cwnd`, `bytes_in_flight` and `can_send` are
    /// overwritten from the simulation before every decision; other fields are kept.
    pub snap: PathSnapshot,
    /// Round-trip time of every packet.
    pub rtt: Duration,
    /// Congestion window, in full-sized packets.
    pub cwnd_packets: u64,
    /// Acknowledgment times of the packets in flight, oldest first.
    in_flight: std::collections::VecDeque<Instant>,
    /// Packets sent on the path so far.
    pub sent: u64,
}

/// A tiny closed-loop simulation of paths driving a scheduler through the public trait:
/// each packet is full-sized (`mtu` bytes), a path can send while fewer than
/// `cwnd_packets` are in flight, and each packet is acknowledged exactly one RTT later.
pub struct Sim {
    /// The simulated time now.
    pub now: Instant,
    /// When the simulation started.
    pub start: Instant,
    /// The paths, path 0 first.
    pub paths: Vec<SimPath>,
    /// What the scheduler is told is waiting (plenty of stream data unless changed).
    pub pending: PendingData,
    /// Every path choice in order (each copy of a duplicated packet counts).
    pub log: Vec<PathId>,
}

impl Sim {
    /// Paths 0, 1, ... with the given (RTT in ms, window in packets), plenty of data.
    pub fn new(specs: &[(u64, u64)]) -> Sim {
        let now = Instant::now();
        let paths = specs
            .iter()
            .enumerate()
            .map(|(i, &(rtt_ms, cwnd_packets))| SimPath {
                snap: snapshot(i as u32, rtt_ms, true),
                rtt: Duration::from_millis(rtt_ms),
                cwnd_packets,
                in_flight: Default::default(),
                sent: 0,
            })
            .collect();
        Sim {
            now,
            start: now,
            paths,
            pending: PendingData {
                new_stream_bytes: u64::MAX / 2,
                ..PendingData::default()
            },
            log: Vec::new(),
        }
    }

    /// The snapshots the scheduler sees now.
    pub fn snapshots(&self) -> Vec<PathSnapshot> {
        self.paths
            .iter()
            .map(|p| {
                let mut s = p.snap.clone();
                let mtu = u64::from(s.mtu);
                s.srtt = p.rtt;
                s.min_rtt = p.rtt;
                s.latest_rtt = p.rtt;
                s.cwnd = p.cwnd_packets * mtu;
                s.bytes_in_flight = p.in_flight.len() as u64 * mtu;
                s.can_send = s.is_usable() && (p.in_flight.len() as u64) < p.cwnd_packets;
                s.packets_sent = p.sent;
                s
            })
            .collect()
    }

    fn acknowledge(&mut self) {
        for p in &mut self.paths {
            while p.in_flight.front().is_some_and(|t| *t <= self.now) {
                p.in_flight.pop_front();
            }
        }
    }

    /// Jumps to the next acknowledgment; false if nothing is in flight.
    fn advance(&mut self) -> bool {
        let next = self.paths.iter().filter_map(|p| p.in_flight.front()).min();
        match next {
            Some(t) => {
                self.now = *t;
                self.acknowledge();
                true
            }
            None => false,
        }
    }

    fn send(&mut self, s: &mut dyn Scheduler, id: PathId) {
        let now = self.now;
        let Some(p) = self.paths.iter_mut().find(|p| p.snap.id == id) else {
            panic!("scheduler picked unknown {id:?}");
        };
        p.in_flight.push_back(now + p.rtt);
        p.sent += 1;
        let mtu = u64::from(p.snap.mtu);
        self.pending.new_stream_bytes = self.pending.new_stream_bytes.saturating_sub(mtu);
        self.log.push(id);
        s.on_packet_sent(now, id, mtu);
    }

    /// Asks the scheduler for one packet; sends it (and its copies) on the paths that can
    /// take it. Returns how many copies left.
    pub fn step(&mut self, s: &mut dyn Scheduler) -> usize {
        let snaps = self.snapshots();
        let can = |id: PathId| snaps.iter().any(|p| p.id == id && p.can_send);
        match s.schedule(self.now, &snaps, &self.pending) {
            Decision::Send(id) if can(id) => {
                self.send(s, id);
                1
            }
            Decision::Duplicate(ids) => {
                let ids: Vec<_> = ids.into_iter().filter(|id| can(*id)).collect();
                for id in &ids {
                    self.send(s, *id);
                }
                ids.len()
            }
            _ => 0,
        }
    }

    /// Runs until `packets` scheduling decisions sent something, or the scheduler waits
    /// with nothing in flight. Returns the decisions that sent something.
    pub fn run(&mut self, s: &mut dyn Scheduler, packets: u64) -> u64 {
        let mut done = 0;
        while done < packets {
            if self.step(s) > 0 {
                done += 1;
            } else if !self.advance() {
                break;
            }
        }
        done
    }

    /// Sends `bytes` of new data and returns the time from the start until the last
    /// packet is acknowledged.
    pub fn transfer(&mut self, s: &mut dyn Scheduler, bytes: u64) -> Duration {
        self.pending.new_stream_bytes = bytes;
        while self.pending.new_stream_bytes > 0 {
            if self.step(s) == 0 && !self.advance() {
                panic!("scheduler {} stalled with data waiting", s.name());
            }
        }
        while self.advance() {}
        self.now - self.start
    }

    /// Packets sent on path `i`.
    pub fn sent(&self, i: usize) -> u64 {
        self.paths[i].sent
    }
}
