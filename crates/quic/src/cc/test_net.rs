//! A tiny deterministic packet-level network for controller tests: bulk senders on paths,
//! each path crossing one bottleneck (a FIFO of a given rate and buffer, or a pure loss
//! process) and then a fixed propagation delay. One ACK per packet; a lost packet is
//! declared lost when its acknowledgment would have arrived.
//!
//! Times are whole nanoseconds, so RTT samples of packets that found an empty queue are
//! exactly equal (as a min-RTT filter expects on a real idle path).

use super::{CongestionController, CongestionEvent};
use crate::recovery::{DeliveryRateEstimator, K_INITIAL_RTT, RateSample, RttEstimator, SentPacket};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Nanoseconds to send `bytes` at `rate` bytes per second, rounded up.
fn transfer_time(bytes: u64, rate: u64) -> Duration {
    let ns = (u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(rate.max(1)));
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// A bottleneck: serialisation at `rate` (none: infinitely fast), a tail-drop buffer of
/// `buffer` bytes (none: unlimited), and independent random loss with probability `loss`.
#[derive(Debug)]
pub struct Bottleneck {
    rate: Option<u64>,
    buffer: Option<u64>,
    /// Loss probability (tests may change it mid-run).
    pub loss: f64,
    rng: ChaCha8Rng,
    free_at: Option<Instant>,
}

impl Bottleneck {
    /// A bottleneck; `seed` drives its loss process.
    pub fn new(rate: Option<u64>, buffer: Option<u64>, loss: f64, seed: u64) -> Self {
        Bottleneck {
            rate,
            buffer,
            loss,
            rng: ChaCha8Rng::seed_from_u64(seed),
            free_at: None,
        }
    }

    /// A packet of `size` bytes arrives at `now`: when it leaves, and whether it is lost.
    fn transmit(&mut self, now: Instant, size: u64) -> (Instant, bool) {
        let start = self.free_at.map_or(now, |f| f.max(now));
        if let (Some(rate), Some(buffer)) = (self.rate, self.buffer) {
            let backlog = u128::from(rate) * (start - now).as_nanos() / 1_000_000_000;
            if backlog + u128::from(size) > u128::from(buffer) {
                return (start, true);
            }
        }
        let departure = match self.rate {
            Some(rate) => {
                let d = start + transfer_time(size, rate);
                self.free_at = Some(d);
                d
            }
            None => now,
        };
        let lost = self.loss > 0.0 && self.rng.random_bool(self.loss.min(1.0));
        (departure, lost)
    }
}

/// How a path is wired.
#[derive(Debug, Clone, Copy)]
pub struct PathSpec {
    /// Propagation round-trip delay (added after the bottleneck).
    pub base_rtt: Duration,
    /// Index of the bottleneck the path crosses.
    pub bottleneck: usize,
}

impl PathSpec {
    /// A path with round-trip delay `base_rtt` through bottleneck `bottleneck`.
    pub fn lossy(base_rtt: Duration, bottleneck: usize) -> Self {
        PathSpec {
            base_rtt,
            bottleneck,
        }
    }
}

#[derive(Debug)]
struct Flight {
    /// When the acknowledgment (or the loss declaration) reaches the sender.
    at: Instant,
    packet: SentPacket<()>,
    lost: bool,
}

/// One bulk sender on a path.
pub struct SimPath<C: ?Sized> {
    /// The controller under test.
    pub cc: Box<C>,
    /// The path's RTT estimator.
    pub rtt: RttEstimator,
    /// The path's delivery-rate estimator.
    pub dre: DeliveryRateEstimator,
    /// The wiring (tests may raise `base_rtt` mid-run).
    pub spec: PathSpec,
    /// Packet size.
    pub mds: u16,
    flight: VecDeque<Flight>,
    /// Bytes in flight.
    pub bytes_in_flight: u64,
    next_send: Instant,
    /// Bytes acknowledged.
    pub delivered: u64,
    /// Bytes declared lost.
    pub lost: u64,
    /// The RTT of the latest acknowledged packet.
    pub last_rtt_sample: Duration,
    /// The delivery-rate sample of the latest acknowledgment.
    pub last_sample: Option<RateSample>,
}

impl<C: ?Sized + CongestionController> SimPath<C> {
    fn can_send(&self) -> bool {
        self.bytes_in_flight + u64::from(self.mds) <= self.cc.window()
    }
}

/// The network: bottlenecks, paths and the virtual clock.
pub struct Net<C: ?Sized> {
    /// Current time.
    pub now: Instant,
    /// The bottlenecks.
    pub bottlenecks: Vec<Bottleneck>,
    /// The senders.
    pub paths: Vec<SimPath<C>>,
}

impl<C: ?Sized + CongestionController> Net<C> {
    /// A network of pure loss processes, `(loss probability, seed)` per bottleneck.
    pub fn new(losses: Vec<(f64, u64)>) -> Self {
        Self::with_bottlenecks(
            losses
                .into_iter()
                .map(|(p, seed)| Bottleneck::new(None, None, p, seed))
                .collect(),
        )
    }

    /// A network of the given bottlenecks.
    pub fn with_bottlenecks(bottlenecks: Vec<Bottleneck>) -> Self {
        Net {
            now: Instant::now(),
            bottlenecks,
            paths: Vec::new(),
        }
    }

    /// Adds a bulk sender with 1200-byte packets.
    pub fn add_path(&mut self, cc: Box<C>, spec: PathSpec) {
        self.paths.push(SimPath {
            cc,
            rtt: RttEstimator::new(K_INITIAL_RTT),
            dre: DeliveryRateEstimator::new(),
            spec,
            mds: 1200,
            flight: VecDeque::new(),
            bytes_in_flight: 0,
            next_send: self.now,
            delivered: 0,
            lost: 0,
            last_rtt_sample: Duration::ZERO,
            last_sample: None,
        });
    }

    /// Runs for `d`.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        self.run_until(end, |_, _| {});
    }

    /// Runs until `end`, calling `observe(net, path)` after every acknowledgment or loss.
    pub fn run_until(&mut self, end: Instant, mut observe: impl FnMut(&Net<C>, usize)) {
        loop {
            let mut next: Option<Instant> = None;
            for p in &self.paths {
                if let Some(f) = p.flight.front() {
                    next = Some(next.map_or(f.at, |n| n.min(f.at)));
                }
                if p.can_send() {
                    let t = p.next_send.max(self.now);
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
            let Some(t) = next.filter(|&t| t <= end) else {
                break;
            };
            self.now = t;
            for i in 0..self.paths.len() {
                while self.paths[i].flight.front().is_some_and(|f| f.at <= t) {
                    self.deliver(i);
                    observe(self, i);
                }
            }
            for i in 0..self.paths.len() {
                while self.paths[i].can_send() && self.paths[i].next_send <= t {
                    self.send(i);
                }
            }
        }
        self.now = end;
    }

    fn send(&mut self, i: usize) {
        let now = self.now;
        let p = &mut self.paths[i];
        let size = u64::from(p.mds);
        let stamp = p.dre.on_packet_sent(now, p.bytes_in_flight);
        p.bytes_in_flight += size;
        p.cc.on_packet_sent(now, size, p.bytes_in_flight);
        let (left, lost) = self.bottlenecks[p.spec.bottleneck].transmit(now, size);
        p.flight.push_back(Flight {
            at: left + p.spec.base_rtt,
            packet: SentPacket {
                time_sent: now,
                size: p.mds,
                ack_eliciting: true,
                in_flight: true,
                delivery: Some(stamp),
                payload: (),
            },
            lost,
        });
        p.next_send = match p.cc.pacing_rate() {
            Some(rate) if rate > 0 => now + transfer_time(size, rate),
            _ => now,
        };
    }

    fn deliver(&mut self, i: usize) {
        let now = self.now;
        let p = &mut self.paths[i];
        let Some(f) = p.flight.pop_front() else {
            return;
        };
        let size = u64::from(f.packet.size);
        p.bytes_in_flight -= size;
        if f.lost {
            p.lost += size;
            p.dre.on_packet_lost(&f.packet);
            p.cc.on_congestion_event(
                now,
                &CongestionEvent {
                    sent_time: f.packet.time_sent,
                    lost_bytes: size,
                    persistent_congestion: false,
                    ecn: false,
                },
            );
            return;
        }
        let sample = now - f.packet.time_sent;
        p.rtt
            .update(now, Duration::ZERO, sample, Duration::ZERO, true);
        p.last_rtt_sample = sample;
        p.delivered += size;
        p.dre.on_packet_acked(now, &f.packet);
        p.cc.on_ack(now, f.packet.time_sent, size, false, &p.rtt);
        p.last_sample = p.dre.generate_sample(p.rtt.min());
        p.cc.on_ack_batch_end(now, p.bytes_in_flight, &p.rtt, p.last_sample.as_ref());
    }
}
