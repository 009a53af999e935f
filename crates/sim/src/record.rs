//! Recorders: per-flow, per-path and per-link time series, per-packet delay
//! and RFC 3550 jitter, completion times; CSV files plus a JSON summary, all
//! hashed for determinism checks.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::SimError;
use crate::link::DropReason;
use crate::radio::RadioSummary;

/// One output file: written (if there is an output directory) and hashed.
pub(crate) struct OutFile {
    name: &'static str,
    path: Option<PathBuf>,
    hasher: Sha256,
    writer: Option<BufWriter<File>>,
}

impl OutFile {
    pub fn create(dir: Option<&Path>, name: &'static str, header: &str) -> Result<Self, SimError> {
        let (path, writer) = match dir {
            Some(d) => {
                let p = d.join(name);
                let f = File::create(&p).map_err(|e| SimError::io(&p, e))?;
                (Some(p), Some(BufWriter::with_capacity(1 << 16, f)))
            }
            None => (None, None),
        };
        let mut f = Self {
            name,
            path,
            hasher: Sha256::new(),
            writer,
        };
        f.write(header)?;
        Ok(f)
    }

    pub fn write(&mut self, s: &str) -> Result<(), SimError> {
        self.hasher.update(s.as_bytes());
        if let Some(w) = &mut self.writer {
            w.write_all(s.as_bytes()).map_err(|e| {
                SimError::io(self.path.as_deref().unwrap_or(Path::new(self.name)), e)
            })?;
        }
        Ok(())
    }

    /// Flushes and returns (name, hex digest).
    pub fn finish(mut self) -> Result<(&'static str, String), SimError> {
        if let Some(w) = &mut self.writer {
            w.flush().map_err(|e| {
                SimError::io(self.path.as_deref().unwrap_or(Path::new(self.name)), e)
            })?;
        }
        Ok((self.name, hex::encode(self.hasher.finalize())))
    }
}

/// Combines per-file digests (sorted by name) into one output hash.
pub(crate) fn combine_hashes(mut files: Vec<(&'static str, String)>) -> String {
    files.sort();
    let mut h = Sha256::new();
    for (name, digest) in files {
        h.update(name.as_bytes());
        h.update(b"\0");
        h.update(digest.as_bytes());
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}

const HIST_BUCKETS: usize = 1024;

/// Log-linear histogram of nanosecond values (16 sub-buckets per power of
/// two, about 6 % resolution).
#[derive(Clone)]
pub(crate) struct Histogram {
    counts: Box<[u64; HIST_BUCKETS]>,
    total: u64,
}

impl Histogram {
    pub fn new() -> Self {
        Self {
            counts: Box::new([0; HIST_BUCKETS]),
            total: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < 16 {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as usize;
        let sub = ((v >> (e - 4)) & 15) as usize;
        (e - 3) * 16 + sub
    }

    fn value(idx: usize) -> f64 {
        if idx < 16 {
            return idx as f64;
        }
        let e = idx / 16 + 3;
        let sub = (idx % 16) as u64;
        let lo = (16 + sub) << (e - 4);
        lo as f64 + (1u64 << (e - 4)) as f64 / 2.0
    }

    pub fn add(&mut self, v: u64) {
        if let Some(c) = self.counts.get_mut(Self::index(v)) {
            *c += 1;
            self.total += 1;
        }
    }

    /// The value at quantile `q` in [0, 1].
    pub fn quantile(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::value(i);
            }
        }
        0.0
    }
}

/// Network-level record of one stream: one sender agent on one path (the
/// first link direction its packets take). Holds RFC 3550 interarrival
/// jitter and delivered/dropped counters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stream {
    pub path: u32,
    /// Addresses of the first packet seen on this stream.
    pub local: std::net::SocketAddr,
    pub remote: std::net::SocketAddr,
    last_transit: i64,
    have: bool,
    /// Current jitter estimate, nanoseconds.
    pub jitter: f64,
    pub bin_bytes: u64,
    pub bin_drops: u64,
}

impl Stream {
    pub fn new(path: u32, local: std::net::SocketAddr, remote: std::net::SocketAddr) -> Self {
        Self {
            path,
            local,
            remote,
            last_transit: 0,
            have: false,
            jitter: 0.0,
            bin_bytes: 0,
            bin_drops: 0,
        }
    }

    /// Updates with one packet's transit time (arrival - send), nanoseconds.
    pub fn update(&mut self, transit: i64) {
        //= https://www.rfc-editor.org/rfc/rfc3550#section-6.4.1
        //# If Si is the RTP timestamp from packet i, and Ri is the time of
        //# arrival in RTP timestamp units for packet i, then for two packets
        //# i and j, D may be expressed as
        //#
        //#    D(i,j) = (Rj - Ri) - (Sj - Si) = (Rj - Sj) - (Ri - Si)
        //= https://www.rfc-editor.org/rfc/rfc3550#section-6.4.1
        //# The interarrival jitter J is calculated continuously as each data
        //# packet i is received from source SSRC_n, using this difference D
        //# for that packet and the previous packet i-1 in order of arrival (not
        //# necessarily in sequence), according to the formula
        //#
        //#    J(i) = J(i-1) + (|D(i-1,i)| - J(i-1))/16
        if self.have {
            let d = (transit - self.last_transit).unsigned_abs() as f64;
            self.jitter += (d - self.jitter) / 16.0;
        }
        self.last_transit = transit;
        self.have = true;
    }
}

/// Per-flow counters.
pub(crate) struct FlowRec {
    pub name: String,
    pub kind: &'static str,
    pub instances: u32,
    pub sent_pkts: u64,
    pub sent_bytes: u64,
    pub delivered_pkts: u64,
    pub delivered_bytes: u64,
    pub drops: [u64; 7],
    pub owd_sum_ns: u128,
    pub owd_min_ns: u64,
    pub owd_max_ns: u64,
    pub owd_hist: Histogram,
    pub bin_sent_bytes: u64,
    pub bin_sent_pkts: u64,
    pub bin_delivered_bytes: u64,
    pub bin_delivered_pkts: u64,
    pub bin_dropped: u64,
    pub bin_owd_sum_ns: u128,
    pub app_rx_last: u64,
    pub app_rx: u64,
    pub app_tx: u64,
    pub completions: u64,
    pub completion_sum_s: f64,
    pub completion_min_s: f64,
    pub completion_max_s: f64,
    pub first_send_ns: Option<u64>,
    pub last_delivery_ns: u64,
}

/// Index into [`FlowRec::drops`] for a link drop.
pub(crate) fn drop_index(r: DropReason) -> usize {
    match r {
        DropReason::Queue => 0,
        DropReason::Loss => 1,
        DropReason::Down => 2,
        DropReason::TargetBuffer => 5,
        DropReason::ContextRelease => 6,
    }
}

/// Drops for lack of a route.
pub(crate) const DROP_UNROUTED: usize = 3;
/// Drops because the receiving port had no agent.
pub(crate) const DROP_UNBOUND: usize = 4;

impl FlowRec {
    pub fn new(name: String, kind: &'static str, instances: u32) -> Self {
        Self {
            name,
            kind,
            instances,
            sent_pkts: 0,
            sent_bytes: 0,
            delivered_pkts: 0,
            delivered_bytes: 0,
            drops: [0; 7],
            owd_sum_ns: 0,
            owd_min_ns: u64::MAX,
            owd_max_ns: 0,
            owd_hist: Histogram::new(),
            bin_sent_bytes: 0,
            bin_sent_pkts: 0,
            bin_delivered_bytes: 0,
            bin_delivered_pkts: 0,
            bin_dropped: 0,
            bin_owd_sum_ns: 0,
            app_rx_last: 0,
            app_rx: 0,
            app_tx: 0,
            completions: 0,
            completion_sum_s: 0.0,
            completion_min_s: f64::INFINITY,
            completion_max_s: 0.0,
            first_send_ns: None,
            last_delivery_ns: 0,
        }
    }
}

/// One-way delay statistics in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DelayStats {
    /// Mean.
    pub mean: f64,
    /// Minimum.
    pub min: f64,
    /// Median (histogram estimate, about 6 % resolution).
    pub p50: f64,
    /// 95th percentile (histogram estimate).
    pub p95: f64,
    /// 99th percentile (histogram estimate).
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// Completion-time statistics in seconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CompletionStats {
    /// Number of completions.
    pub count: u64,
    /// Mean duration.
    pub mean_s: f64,
    /// Shortest.
    pub min_s: f64,
    /// Longest.
    pub max_s: f64,
}

/// Per-flow results.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FlowSummary {
    /// Flow name.
    pub name: String,
    /// Flow kind.
    pub kind: String,
    /// Number of instances.
    pub instances: u32,
    /// Packets sent by the flow's agents.
    pub packets_sent: u64,
    /// Packets delivered to an agent (duplicates included).
    pub packets_delivered: u64,
    /// IP bytes sent.
    pub bytes_sent: u64,
    /// IP bytes delivered.
    pub bytes_delivered: u64,
    /// Application bytes the flow's agents received.
    pub app_bytes_received: u64,
    /// Application bytes the flow's agents sent.
    pub app_bytes_sent: u64,
    /// Drops by the drop-tail queue.
    pub drops_queue: u64,
    /// Drops by random loss.
    pub drops_loss: u64,
    /// Drops while a link was down.
    pub drops_down: u64,
    /// Drops for lack of a route.
    pub drops_unrouted: u64,
    /// Drops at a port with no agent.
    pub drops_unbound: u64,
    /// Drops because a radio link's target cell buffer was full during a handover.
    pub drops_target_buffer: u64,
    /// Drops in a radio source cell's context release at a handover.
    pub drops_context_release: u64,
    /// Delivered IP bit rate from the first send to the last delivery, Mbit/s.
    pub delivered_mbps: f64,
    /// One-way delay of delivered packets, ms.
    pub owd_ms: Option<DelayStats>,
    /// Mean over the flow's streams of the final RFC 3550 jitter, ms.
    pub jitter_ms: f64,
    /// Completion times reported by the agents.
    pub completions: Option<CompletionStats>,
}

/// Per-link-direction results.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LinkSummary {
    /// Link name.
    pub link: String,
    /// `up` (a to b) or `down` (b to a).
    pub dir: String,
    /// Packets that left the queue onto the wire and were not lost.
    pub packets: u64,
    /// IP bytes of those.
    pub bytes: u64,
    /// Mean delivered rate over the run, Mbit/s.
    pub mean_mbps: f64,
    /// Drop-tail drops.
    pub drops_queue: u64,
    /// Random-loss drops.
    pub drops_loss: u64,
    /// Drops while down.
    pub drops_down: u64,
    /// Radio downlink: drops because the target cell's buffer was full during a handover
    /// interruption.
    pub drops_target_buffer: u64,
    /// Radio downlink: drops in the source cell's context release.
    pub drops_context_release: u64,
    /// Duplicated packets.
    pub duplicates: u64,
    /// Largest queue seen, bytes.
    pub max_queue_bytes: u64,
}

/// The deterministic result of a run (also written as `summary.json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Scenario name.
    pub scenario: String,
    /// Seed used.
    pub seed: u64,
    /// Simulated time at the end, seconds.
    pub sim_time_s: f64,
    /// Why the run ended: `duration`, `done` or `idle`.
    pub stopped_by: String,
    /// Events processed.
    pub events: u64,
    /// Agents in the run.
    pub agents: usize,
    /// Per flow.
    pub flows: Vec<FlowSummary>,
    /// Per link direction.
    pub links: Vec<LinkSummary>,
    /// Radio model figures (handovers, their losses), when the scenario has `[radio]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub radio: Option<RadioSummary>,
}

pub(crate) fn delay_stats(f: &FlowRec) -> Option<DelayStats> {
    if f.delivered_pkts == 0 {
        return None;
    }
    let ms = |ns: f64| ns / 1e6;
    Some(DelayStats {
        mean: ms(f.owd_sum_ns as f64 / f.delivered_pkts as f64),
        min: ms(f.owd_min_ns as f64),
        p50: ms(f.owd_hist.quantile(0.5)),
        p95: ms(f.owd_hist.quantile(0.95)),
        p99: ms(f.owd_hist.quantile(0.99)),
        max: ms(f.owd_max_ns as f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_close() {
        let mut h = Histogram::new();
        for v in 1..=100_000u64 {
            h.add(v * 1000);
        }
        let p50 = h.quantile(0.5);
        assert!((p50 / 50_000_000.0 - 1.0).abs() < 0.07, "{p50}");
        let p99 = h.quantile(0.99);
        assert!((p99 / 99_000_000.0 - 1.0).abs() < 0.07, "{p99}");
        assert_eq!(Histogram::new().quantile(0.5), 0.0);
        for v in [0u64, 1, 15, 16, 17, 1 << 40, u64::MAX] {
            let i = Histogram::index(v);
            assert!(i < HIST_BUCKETS);
            let back = Histogram::value(i);
            if v >= 16 {
                assert!((back / v as f64 - 1.0).abs() < 0.07, "{v} {back}");
            }
        }
    }

    #[test]
    fn rfc3550_jitter() {
        let a: std::net::SocketAddr = "10.0.0.1:1".parse().unwrap();
        let mut j = Stream::new(0, a, a);
        j.update(10);
        assert_eq!(j.jitter, 0.0);
        j.update(26); // |D| = 16
        assert_eq!(j.jitter, 1.0);
        j.update(26); // |D| = 0
        assert_eq!(j.jitter, 1.0 - 1.0 / 16.0);
    }

    #[test]
    fn hashes_combine_in_name_order() {
        let a = combine_hashes(vec![("a", "1".into()), ("b", "2".into())]);
        let b = combine_hashes(vec![("b", "2".into()), ("a", "1".into())]);
        assert_eq!(a, b);
        let c = combine_hashes(vec![("a", "1".into()), ("b", "3".into())]);
        assert_ne!(a, c);
    }
}
