//! The sending buffer of the client gateway: one queue per traffic class, served by strict
//! or weighted priority, each with an optional rate limit, so a bulk class cannot starve a
//! control class on a thin link. Sans-IO: the caller passes the time.
//
//= To Poly or Not to Poly: QoS-Aware Multi-Path Networking, Section III
//# This buffer contains the prioritized traffic by type, with a function to adjust send rates to match traffic requirements and system capacity, thus optimizing flow management.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::policy::{Policy, Scheduling};

/// Bytes a class's queue holds before it drops what arrives (tail drop, as a router).
pub const QUEUE_BYTES: usize = 256 * 1024;
/// The quantum of weighted scheduling per unit of weight, bytes.
const QUANTUM: u64 = 1500;

/// A token bucket: `rate` bit/s, holding at most `burst` bytes.
#[derive(Debug, Clone)]
struct Bucket {
    rate_bytes: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate_bps: f64, now: Instant) -> Bucket {
        let rate_bytes = rate_bps / 8.0;
        // Ten milliseconds of the rate, at least two full packets.
        let burst = (rate_bytes * 0.01).max(3000.0);
        Bucket {
            rate_bytes,
            burst,
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate_bytes).min(self.burst);
        self.at = now;
    }

    /// When `len` bytes will be allowed (now if they are).
    fn ready_at(&self, len: usize) -> Duration {
        let missing = len as f64 - self.tokens;
        if missing <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(missing / self.rate_bytes)
        }
    }
}

/// Counters of one class's queue.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct QueueStats {
    /// Packets queued.
    pub enqueued: u64,
    /// Packets dropped because the queue was full.
    pub dropped: u64,
    /// Packets handed to the transport.
    pub sent: u64,
    /// Bytes handed to the transport.
    pub sent_bytes: u64,
    /// Bytes waiting now.
    pub queued_bytes: usize,
}

#[derive(Debug, Clone)]
struct ClassQueue {
    packets: VecDeque<Bytes>,
    bytes: usize,
    priority: u32,
    weight: u32,
    bucket: Option<Bucket>,
    deficit: u64,
    stats: QueueStats,
}

/// Per-class queues in front of the transport.
#[derive(Debug, Clone)]
pub struct SendBuffer {
    queues: Vec<ClassQueue>,
    scheduling: Scheduling,
    /// Weighted scheduling: the queue whose turn it is.
    turn: usize,
    /// Whether that queue got its quantum this turn.
    topped_up: bool,
}

impl SendBuffer {
    /// A buffer with one queue per class of `policy` (index as in [`Policy::all_classes`]).
    pub fn new(policy: &Policy, now: Instant) -> SendBuffer {
        SendBuffer {
            queues: policy
                .all_classes()
                .map(|c| ClassQueue {
                    packets: VecDeque::new(),
                    bytes: 0,
                    priority: c.priority,
                    weight: c.weight,
                    bucket: c.rate_limit.map(|r| Bucket::new(r, now)),
                    deficit: 0,
                    stats: QueueStats::default(),
                })
                .collect(),
            scheduling: policy.scheduling,
            turn: 0,
            topped_up: false,
        }
    }

    /// Queues a packet of class `class`; false if the queue was full (the packet is
    /// dropped).
    pub fn push(&mut self, class: usize, packet: Bytes) -> bool {
        let Some(q) = self.queues.get_mut(class) else {
            return false;
        };
        if q.bytes + packet.len() > QUEUE_BYTES {
            q.stats.dropped += 1;
            return false;
        }
        q.bytes += packet.len();
        q.stats.enqueued += 1;
        q.packets.push_back(packet);
        true
    }

    /// The next packet to hand to the transport, with its class: among the queues with a
    /// packet whose rate limit admits it and whose class `ready` accepts (the transport
    /// has room for it), the lowest priority number first (strict), or by deficit round
    /// robin in proportion to the weights (weighted).
    pub fn pop(&mut self, now: Instant, ready: impl Fn(usize) -> bool) -> Option<(usize, Bytes)> {
        for q in &mut self.queues {
            if let Some(b) = &mut q.bucket {
                b.refill(now);
            }
        }
        let eligible = |q: &ClassQueue, i: usize| {
            q.packets.front().is_some_and(|p| {
                q.bucket
                    .as_ref()
                    .is_none_or(|b| b.ready_at(p.len()).is_zero())
            }) && ready(i)
        };
        let pick = match self.scheduling {
            Scheduling::Strict => self
                .queues
                .iter()
                .enumerate()
                .filter(|(i, q)| eligible(q, *i))
                .min_by_key(|(i, q)| (q.priority, *i))
                .map(|(i, _)| i),
            Scheduling::Weighted => {
                // Deficit round robin: a queue's turn adds its quantum once; it sends while
                // its deficit covers the next packet, then the turn moves on.
                let n = self.queues.len();
                let mut found = None;
                for _ in 0..=2 * n {
                    let i = self.turn;
                    let q = &mut self.queues[i];
                    if !eligible(q, i) {
                        if q.packets.is_empty() {
                            q.deficit = 0;
                        }
                        self.turn = (i + 1) % n;
                        self.topped_up = false;
                        continue;
                    }
                    if !self.topped_up {
                        q.deficit += QUANTUM * u64::from(q.weight);
                        self.topped_up = true;
                    }
                    let len = q.packets.front().map_or(0, |p| p.len() as u64);
                    if q.deficit >= len {
                        q.deficit -= len;
                        found = Some(i);
                        break;
                    }
                    self.turn = (i + 1) % n;
                    self.topped_up = false;
                }
                found
            }
        }?;
        let q = &mut self.queues[pick];
        let p = q.packets.pop_front()?;
        q.bytes -= p.len();
        if let Some(b) = &mut q.bucket {
            b.tokens -= p.len() as f64;
        }
        q.stats.sent += 1;
        q.stats.sent_bytes += p.len() as u64;
        if self.scheduling == Scheduling::Weighted && q.packets.is_empty() {
            q.deficit = 0;
            self.turn = (pick + 1) % self.queues.len();
            self.topped_up = false;
        }
        Some((pick, p))
    }

    /// When a rate-limited queue with a packet waiting will be allowed to send (the caller
    /// sleeps until then if nothing else wakes it).
    pub fn next_release(&self, now: Instant) -> Option<Instant> {
        self.queues
            .iter()
            .filter_map(|q| {
                let p = q.packets.front()?;
                let b = q.bucket.as_ref()?;
                let mut b = b.clone();
                b.refill(now);
                let wait = b.ready_at(p.len());
                (!wait.is_zero()).then_some(now + wait)
            })
            .min()
    }

    /// True if no packet waits.
    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(|q| q.packets.is_empty())
    }

    /// Counters of each class's queue.
    pub fn stats(&self) -> Vec<QueueStats> {
        self.queues
            .iter()
            .map(|q| QueueStats {
                queued_bytes: q.bytes,
                ..q.stats
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(scheduling: &str, bulk_limit: &str) -> Policy {
        Policy::parse(
            &format!(
                r#"{{
              "allowed_interfaces": [{{ "name": "eth0" }}],
              "mode": "aggregate",
              "scheduling": "{scheduling}",
              "classes": [
                {{ "name": "control", "match": {{ "protocol": ["udp"] }}, "mode": "failover",
                  "priority": 0, "weight": 1 }},
                {{ "name": "bulk", "match": {{ "protocol": ["tcp"] }}, "mode": "aggregate",
                  "priority": 5, "weight": 3 {bulk_limit} }}
              ]
            }}"#
            ),
            "p.json",
        )
        .unwrap()
    }

    fn packet(len: usize) -> Bytes {
        Bytes::from(vec![0u8; len])
    }

    #[test]
    fn strict_priority_serves_control_before_bulk() {
        let now = Instant::now();
        let mut b = SendBuffer::new(&policy("strict", ""), now);
        for _ in 0..5 {
            assert!(b.push(2, packet(1000)));
        }
        assert!(b.push(1, packet(100)));
        let order: Vec<usize> = std::iter::from_fn(|| b.pop(now, |_| true).map(|p| p.0)).collect();
        assert_eq!(order, vec![1, 2, 2, 2, 2, 2]);
        // A class whose transport has no room steps aside.
        b.push(1, packet(100));
        b.push(2, packet(100));
        assert_eq!(b.pop(now, |c| c != 1).map(|p| p.0), Some(2));
        assert_eq!(b.pop(now, |c| c != 1), None);
        assert_eq!(b.pop(now, |_| true).map(|p| p.0), Some(1));
    }

    #[test]
    fn weights_share_and_rate_limits_cap() {
        let now = Instant::now();
        let mut b = SendBuffer::new(&policy("weighted", ""), now);
        for _ in 0..200 {
            assert!(b.push(1, packet(1000)));
            assert!(b.push(2, packet(1000)));
        }
        let mut sent = [0usize; 3];
        for _ in 0..200 {
            let (c, _) = b.pop(now, |_| true).unwrap();
            sent[c] += 1;
        }
        let ratio = sent[2] as f64 / sent[1] as f64;
        assert!((ratio - 3.0).abs() < 0.2, "{sent:?}");

        // 8 Mbit/s = 1 MB/s: a 10 kB burst, then a 1000-byte packet per millisecond.
        let mut b = SendBuffer::new(&policy("strict", ", \"rate_limit\": \"8Mbit/s\""), now);
        for _ in 0..250 {
            b.push(2, packet(1000));
        }
        let mut bytes = 0;
        let mut t = now;
        let end = now + Duration::from_millis(200);
        while t < end {
            while let Some((_, p)) = b.pop(t, |_| true) {
                bytes += p.len();
            }
            let next = b.next_release(t).unwrap();
            assert!(next > t);
            t = next;
        }
        assert!((205_000..=211_000).contains(&bytes), "{bytes}");
        // A full queue drops.
        let mut b = SendBuffer::new(&policy("strict", ""), now);
        let n = QUEUE_BYTES / 1000;
        for _ in 0..n {
            assert!(b.push(0, packet(1000)));
        }
        assert!(!b.push(0, packet(1000)));
        assert_eq!(b.stats()[0].dropped, 1);
    }
}
