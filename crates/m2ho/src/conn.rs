//! Per-connection tracking from the packets the shim sees: window scale (from the SYN and
//! the SYN-ACK), the highest sequence number received and the in-order point, the ACKs the
//! device sends (duplicate-ACK detection), receiver-side RTT from TCP timestamps, and the
//! bytes received per round trip.

use crate::packet::{TcpSegment, flags};
use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;

/// `a` after `b` in sequence space (RFC 9293 3.4, modulo 2^32).
pub fn seq_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// `a` at or after `b` in sequence space.
pub fn seq_ge(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

/// Which way a packet goes, seen from the device.
#[derive(Debug, Copy, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Sent by the device (its ACKs carry the window M2HO rewrites).
    Outbound,
    /// Received by the device (the data whose sequence numbers and timestamps M2HO reads).
    Inbound,
}

/// A connection, named from the device's side.
#[derive(Debug, Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnKey {
    /// The device's address.
    pub local: IpAddr,
    /// The device's port.
    pub local_port: u16,
    /// The peer's address.
    pub remote: IpAddr,
    /// The peer's port.
    pub remote_port: u16,
}

impl ConnKey {
    /// The key of a segment going `dir`.
    pub fn of(seg: &TcpSegment, dir: Direction) -> ConnKey {
        match dir {
            Direction::Outbound => ConnKey {
                local: seg.src,
                local_port: seg.src_port,
                remote: seg.dst,
                remote_port: seg.dst_port,
            },
            Direction::Inbound => ConnKey {
                local: seg.dst,
                local_port: seg.dst_port,
                remote: seg.src,
                remote_port: seg.src_port,
            },
        }
    }
}

/// An episode of missing data at the receiver: from the first segment beyond a hole to the
/// segment that fills it. Its duplicate ACKs are unnecessary when the filler was sent before
/// the segments that overtook it (reordering: its TSval is not newer than theirs), and
/// necessary when it is a retransmission (newer TSval).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoleEpisode {
    /// When the hole was first seen (ns).
    pub start_ns: u64,
    /// Where the data received beyond the hole starts (the hole is `[rcv_nxt, hole_end)`).
    pub hole_end: u32,
    /// Highest TSval among the out-of-order segments.
    pub ooo_tsval_max: Option<u32>,
    /// Duplicate ACKs the device sent during the episode.
    pub dup_acks: u32,
    /// Of those, how many M2HO suppressed.
    pub suppressed: u32,
}

/// How a hole episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClosedHole {
    /// The episode.
    pub episode: HoleEpisode,
    /// True when the filler was an original transmission that arrived late (its duplicate
    /// ACKs were unnecessary); false when it was a retransmission or cannot be told.
    pub reordering: bool,
    /// When it closed (ns).
    pub end_ns: u64,
}

/// What the shim knows of one connection.
#[derive(Debug, Clone, Default)]
pub struct Conn {
    /// Window scale the device announced in its SYN or SYN-ACK.
    pub local_wscale: Option<u8>,
    /// Window scale the peer announced.
    pub remote_wscale: Option<u8>,
    /// Whether the device's SYN or SYN-ACK was seen (window scale known).
    pub local_syn_seen: bool,
    /// Whether the peer's SYN or SYN-ACK was seen.
    pub remote_syn_seen: bool,
    /// The next in-order sequence number the device expects.
    pub rcv_nxt: Option<u32>,
    /// End of the highest sequence number received.
    pub rcv_high: Option<u32>,
    /// The last acknowledgment number the device sent, and the window field it carried.
    pub last_ack: Option<(u32, u16)>,
    /// Consecutive duplicate ACKs sent so far.
    pub dup_run: u32,
    /// TSvals the device sent, with when each was first sent (oldest first).
    ts_sent: VecDeque<(u32, u64)>,
    /// Latest receiver-side RTT sample (ns).
    pub rtt_ns: Option<u64>,
    /// Smallest RTT sample (ns).
    pub rtt_min_ns: Option<u64>,
    /// When the byte count for c_est started (ns): the first data since the last restart.
    count_start: Option<u64>,
    /// Arrivals since then, coalesced per [`ARRIVAL_BUCKET_NS`]: (time ns, payload bytes
    /// received up to and including then, counted from the restart). Only the last round
    /// trip's are kept.
    arrivals: VecDeque<(u64, u64)>,
    /// Payload bytes received since the byte count started.
    counted_bytes: u64,
    /// Of those, the bytes up to the first arrival still kept.
    forgotten_bytes: u64,
    /// Bytes received in the round trip up to the latest data, once a whole round trip
    /// has been counted since the last restart: M2HO's c_est (Sec. 4.5).
    pub bytes_last_rtt: Option<u64>,
    /// The window rate control holds while c_est has no round trip on the current cell
    /// yet (set when the estimate restarts at a handover).
    pub held_rwnd: Option<u64>,
    /// Payload bytes received in total.
    pub bytes_received: u64,
    /// The open hole episode, if any.
    pub hole: Option<HoleEpisode>,
    /// Last time a packet of this connection was seen (ns).
    pub last_seen_ns: u64,
    /// FIN or RST seen.
    pub closing: bool,
    /// The highest right edge of the window (acknowledgment number plus window) the peer
    /// was offered, after any rewrite.
    pub offered_edge: Option<u32>,
    /// The right edge of the last ACK the device sent, after any rewrite.
    pub last_edge: Option<u32>,
    /// The last pure ACK the device sent, as sent: what a window update is made from.
    pub last_ack_packet: Vec<u8>,
    /// When data last arrived (ns).
    pub last_data_ns: Option<u64>,
    /// Window updates M2HO sent since data last came.
    pub reopen_attempts: u8,
    /// When M2HO last sent a window update (ns).
    pub reopened_ns: Option<u64>,
    /// Bytes received in the round trip up to the latest data, kept across handovers: what
    /// the sender had in flight, as the device sees it.
    pub flight_bytes: Option<u64>,
    /// `bytes_received` when the device sent its last ACK (the one whose right edge is
    /// `last_edge`).
    pub received_at_last_edge: u64,
    /// The last ACK the device sent carried a window M2HO narrowed: until one passes with
    /// the kernel's own window, the window widens back to it with the data (with
    /// [`crate::Config::limit_widening`]; without it, the kernel's window passes at once).
    pub window_narrowed: bool,
}

/// Window updates M2HO sends to a stalled connection before data comes again: one up to
/// where the sender's flight likely ends, one up to the highest edge it was ever offered.
pub const MAX_REOPEN_ATTEMPTS: u8 = 2;

/// Most TSvals remembered per connection for RTT samples.
const TS_MEMORY: usize = 128;

/// Arrivals closer together than this are one entry of the c_est count (a round trip of
/// seconds at a cell edge then keeps thousands of entries, not one per packet).
const ARRIVAL_BUCKET_NS: u64 = 1_000_000;

impl Conn {
    /// The shift applied to the window fields the device sends, when known: the device's
    /// announced scale if both ends announced one (RFC 7323 2.2), 0 if either did not, `None`
    /// before both SYNs were seen.
    pub fn local_shift(&self) -> Option<u8> {
        if !(self.local_syn_seen && self.remote_syn_seen) {
            return None;
        }
        match (self.local_wscale, self.remote_wscale) {
            //= https://www.rfc-editor.org/rfc/rfc7323#section-2.3
            //# If a Window Scale option is received with a shift.cnt value larger
            //# than 14, the TCP SHOULD log the error but MUST use 14 instead of the
            //# specified value.
            (Some(l), Some(_)) => Some(l.min(14)),
            _ => Some(0),
        }
    }

    /// Notes a segment the device sent at `now`; returns whether it is a duplicate ACK
    /// (RFC 5681 section 2: same acknowledgment number, no data, no SYN/FIN, same window).
    pub fn on_outbound(&mut self, seg: &TcpSegment, now: u64) -> bool {
        self.last_seen_ns = now;
        if seg.has(flags::SYN) {
            self.local_syn_seen = true;
            self.local_wscale = seg.options.window_scale;
        }
        if seg.flags & (flags::FIN | flags::RST) != 0 {
            self.closing = true;
        }
        if let Some((val, _)) = seg.options.timestamps
            && self.ts_sent.back().is_none_or(|(v, _)| *v != val)
        {
            if self.ts_sent.len() == TS_MEMORY {
                self.ts_sent.pop_front();
            }
            self.ts_sent.push_back((val, now));
        }
        if !seg.has(flags::ACK) {
            return false;
        }
        //= https://www.rfc-editor.org/rfc/rfc5681#section-2
        //# DUPLICATE ACKNOWLEDGMENT: An acknowledgment is considered a
        //# "duplicate" in the following algorithm when (a) the receiver of the
        //# ACK has outstanding data, (b) the incoming acknowledgment carries no
        //# data, (c) the SYN and FIN bits are both off, (d) the acknowledgment
        //# number is equal to the greatest acknowledgment received on the given
        //# connection (TCP.UNA from [RFC793]) and (e) the advertised window in
        //# the incoming acknowledgment equals the advertised window in the last
        //# incoming acknowledgment.
        let dup = seg.is_pure_ack()
            && self
                .last_ack
                .is_some_and(|(a, w)| a == seg.ack && w == seg.window)
            && self.rcv_high.is_some_and(|h| seq_gt(h, seg.ack));
        if dup {
            self.dup_run += 1;
            if let Some(h) = self.hole.as_mut() {
                h.dup_acks += 1;
            }
        } else if self.last_ack.is_none_or(|(a, _)| a != seg.ack) {
            self.dup_run = 0;
        }
        if self.last_ack.is_none_or(|(a, _)| seq_ge(seg.ack, a)) {
            self.last_ack = Some((seg.ack, seg.window));
        }
        dup
    }

    /// Notes a segment the device received at `now`; returns the hole episode it closed, if
    /// any.
    pub fn on_inbound(&mut self, seg: &TcpSegment, now: u64) -> Option<ClosedHole> {
        self.last_seen_ns = now;
        if seg.has(flags::SYN) {
            self.remote_syn_seen = true;
            self.remote_wscale = seg.options.window_scale;
            self.rcv_nxt = Some(seg.seq.wrapping_add(1));
            self.rcv_high = self.rcv_nxt;
        }
        if seg.flags & (flags::FIN | flags::RST) != 0 {
            self.closing = true;
        }
        let start = seg.seq.wrapping_add(u32::from(seg.has(flags::SYN)));
        // Receiver-side RTT: the peer echoes a TSval the device sent (RFC 7323 4.1). Only
        // new data gives a sample (Karn's rule, RFC 6298 section 3): a retransmission, or a
        // segment filling a hole, echoes the last TSval the sender had, which after a
        // stall or a timeout is as old as the stall, not a round trip.
        if let Some((_, ecr)) = seg.options.timestamps
            && seg.payload_len > 0
            && self.rcv_high.is_none_or(|h| seq_ge(start, h))
            && let Some(pos) = self.ts_sent.iter().position(|(v, _)| *v == ecr)
        {
            let sample = now.saturating_sub(self.ts_sent[pos].1).max(1);
            self.rtt_ns = Some(sample);
            self.rtt_min_ns = Some(self.rtt_min_ns.map_or(sample, |m| m.min(sample)));
            self.ts_sent.drain(..=pos);
        }
        if seg.payload_len == 0 && !seg.has(flags::FIN) {
            return None;
        }
        if seg.payload_len > 0 {
            self.last_data_ns = Some(now);
            self.reopen_attempts = 0;
        }
        self.bytes_received += u64::from(seg.payload_len);
        self.count_bytes(u64::from(seg.payload_len), now);
        let end = start
            .wrapping_add(seg.payload_len)
            .wrapping_add(u32::from(seg.has(flags::FIN)));
        if self.rcv_high.is_none_or(|h| seq_gt(end, h)) {
            self.rcv_high = Some(end);
        }
        let Some(nxt) = self.rcv_nxt else {
            // Joined mid-connection: take the first segment as in order.
            self.rcv_nxt = Some(end);
            return None;
        };
        let tsval = seg.options.timestamps.map(|t| t.0);
        if seq_gt(start, nxt) {
            // Beyond a hole.
            let h = self.hole.get_or_insert(HoleEpisode {
                start_ns: now,
                hole_end: start,
                ooo_tsval_max: None,
                dup_acks: 0,
                suppressed: 0,
            });
            if seq_gt(h.hole_end, start) {
                h.hole_end = start;
            }
            if let Some(v) = tsval {
                h.ooo_tsval_max = Some(
                    h.ooo_tsval_max
                        .map_or(v, |m| if seq_gt(v, m) { v } else { m }),
                );
            }
            return None;
        }
        if !seq_gt(end, nxt) {
            return None; // old data
        }
        // Fills from the in-order point. The tracker keeps one hole: once the filler reaches
        // the data received beyond it, everything up to the highest end is taken as there.
        let high = self.rcv_high.unwrap_or(end);
        let closed = self
            .hole
            .take_if(|h| seq_ge(end, h.hole_end))
            .map(|episode| ClosedHole {
                reordering: match (tsval, episode.ooo_tsval_max) {
                    (Some(v), Some(m)) => !seq_gt(v, m),
                    _ => false,
                },
                episode,
                end_ns: now,
            });
        self.rcv_nxt = Some(if closed.is_some() { high } else { end });
        if self.hole.is_some() && closed.is_none() {
            // Part of the hole filled; the rest still open. A filler that was sent before
            // the overtaking segments keeps the episode's classification possible.
            if let (Some(v), Some(h)) = (tsval, self.hole.as_mut())
                && h.ooo_tsval_max.is_some_and(|m| seq_gt(v, m))
            {
                h.ooo_tsval_max = None;
            }
        }
        closed
    }

    /// Notes the ACK the device sends with acknowledgment number `ack` and `window` in its
    /// window field (after any rewrite), scaled by the device's `shift`; `packet` is the
    /// packet as sent when it is a pure ACK (the template of a later window update).
    pub fn note_sent_ack(&mut self, ack: u32, window: u16, shift: u8, packet: Option<&[u8]>) {
        let edge = ack.wrapping_add(u32::from(window) << shift.min(14));
        self.last_edge = Some(edge);
        self.received_at_last_edge = self.bytes_received;
        if self.offered_edge.is_none_or(|e| seq_gt(edge, e)) {
            self.offered_edge = Some(edge);
        }
        if let Some(p) = packet {
            self.last_ack_packet.clear();
            self.last_ack_packet.extend_from_slice(p);
        }
    }

    /// Whether the sender may be stuck behind a retracted window: the last ACK ends below an
    /// edge the peer was offered before (it may hold data it sent beyond the window), and
    /// no data came for `stall_ns` up to `now` since data last came, since `could_receive`
    /// (when the device could receive again after a handover) and since the last window
    /// update; at most [`MAX_REOPEN_ATTEMPTS`] updates between data.
    pub fn stalled_behind_window(&self, now: u64, stall_ns: u64, could_receive: u64) -> bool {
        let (Some(last), Some(offered), Some(data)) =
            (self.last_edge, self.offered_edge, self.last_data_ns)
        else {
            return false;
        };
        let quiet_since = data.max(could_receive).max(self.reopened_ns.unwrap_or(0));
        seq_gt(offered, last)
            && now.saturating_sub(quiet_since) >= stall_ns
            && self.reopen_attempts < MAX_REOPEN_ATTEMPTS
            && !self.last_ack_packet.is_empty()
            && !self.closing
    }

    /// Forgets the bytes counted so far for c_est: the next estimate counts only what
    /// arrives from now on (from the cell the device has just handed over to). Until then
    /// rate control holds the window at `hold` (none: the kernel's).
    pub fn restart_rate_estimate(&mut self, hold: Option<u64>) {
        self.count_start = None;
        self.arrivals.clear();
        self.counted_bytes = 0;
        self.forgotten_bytes = 0;
        self.bytes_last_rtt = None;
        self.held_rwnd = hold;
    }

    /// Counts `bytes` of data arriving at `now` for c_est: the bytes received in the round
    /// trip (the latest RTT sample) that ends now, a window sliding with every arrival.
    /// Counted in consecutive round trips instead, c_est would step once a round trip, and
    /// with it the window (Eq. 2): a window held to a few kB in one round trip and widened
    /// by hundreds of kB in the next lets the sender send those at once, in a burst the
    /// cell's buffer may not hold. Sliding, the window follows each arrival.
    fn count_bytes(&mut self, bytes: u64, now: u64) {
        let Some(rtt) = self.rtt_ns else {
            return;
        };
        let start = *self.count_start.get_or_insert(now);
        self.counted_bytes += bytes;
        match self.arrivals.back_mut() {
            Some((t, total)) if now.saturating_sub(*t) < ARRIVAL_BUCKET_NS => {
                *total = self.counted_bytes
            }
            _ => self.arrivals.push_back((now, self.counted_bytes)),
        }
        // The last arrival at or before the start of the round trip that ends now says how
        // many bytes had come by then; older ones are no longer needed. (Should the RTT
        // grow past what was kept, the round trip counts from the oldest arrival kept.)
        let from = now.saturating_sub(rtt);
        while self.arrivals.get(1).is_some_and(|(t, _)| *t <= from) {
            if let Some((_, total)) = self.arrivals.pop_front() {
                self.forgotten_bytes = total;
            }
        }
        if now.saturating_sub(start) >= rtt {
            let by_then = match self.arrivals.front() {
                Some((t, total)) if *t <= from => *total,
                _ => self.forgotten_bytes,
            };
            let in_rtt = self.counted_bytes.saturating_sub(by_then);
            self.bytes_last_rtt = Some(in_rtt);
            self.flight_bytes = Some(in_rtt);
        }
    }
}

/// The connections being tracked, with a bound on their number.
#[derive(Debug, Clone)]
pub struct ConnTable {
    conns: BTreeMap<ConnKey, Conn>,
    max: usize,
    idle_ns: u64,
}

impl ConnTable {
    /// A table of at most `max` connections, forgetting one idle for `idle_ns`.
    pub fn new(max: usize, idle_ns: u64) -> Self {
        ConnTable {
            conns: BTreeMap::new(),
            max: max.max(1),
            idle_ns,
        }
    }

    /// The entry of `key`, created if there is room (after expiring idle entries).
    pub fn entry(&mut self, key: ConnKey, now: u64) -> Option<&mut Conn> {
        if !self.conns.contains_key(&key) {
            if self.conns.len() >= self.max {
                self.expire(now);
            }
            if self.conns.len() >= self.max {
                return None;
            }
            self.conns.insert(key, Conn::default());
        }
        self.conns.get_mut(&key)
    }

    /// Forgets connections idle for longer than the idle time (and closed ones idle for a
    /// tenth of it).
    pub fn expire(&mut self, now: u64) {
        let idle = self.idle_ns;
        self.conns.retain(|_, c| {
            let quiet = now.saturating_sub(c.last_seen_ns);
            quiet < idle && !(c.closing && quiet >= idle / 10)
        });
    }

    /// A connection, if tracked.
    pub fn get(&self, key: &ConnKey) -> Option<&Conn> {
        self.conns.get(key)
    }

    /// A connection, if tracked, mutable.
    pub fn get_mut(&mut self, key: &ConnKey) -> Option<&mut Conn> {
        self.conns.get_mut(key)
    }

    /// All tracked connections.
    pub fn iter(&self) -> impl Iterator<Item = (&ConnKey, &Conn)> {
        self.conns.iter()
    }

    /// All tracked connections, mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&ConnKey, &mut Conn)> {
        self.conns.iter_mut()
    }

    /// Connections that received data within `within_ns` of `now` (at least one).
    pub fn active(&self, now: u64, within_ns: u64) -> usize {
        self.conns
            .values()
            .filter(|c| !c.closing && now.saturating_sub(c.last_seen_ns) <= within_ns)
            .count()
            .max(1)
    }

    /// Number of tracked connections.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// True when nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }
}
