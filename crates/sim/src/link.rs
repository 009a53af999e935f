//! One direction of a simulated link: drop-tail queue, rate server, random
//! loss, duplication, propagation delay and jitter, outages.

use std::collections::VecDeque;
use std::sync::Arc;

use polypath_scenario::trace::{DeliveryTrace, MAHIMAHI_OPPORTUNITY_BYTES};
use polypath_scenario::{
    Jitter, JitterDist, LinkDirection, LossModel, OutagePolicy, QueueLimit, RateModel,
};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::radio::RadioDl;

const NS_PER_MS: u64 = 1_000_000;

/// Stateful per-packet loss decision.
#[derive(Debug, Clone)]
pub struct LossState {
    model: LossModel,
    bad: bool,
}

impl LossState {
    /// Starts in the Good state.
    pub fn new(model: LossModel) -> Self {
        Self { model, bad: false }
    }

    /// Steps the chain once and says whether this packet is lost.
    pub fn lose(&mut self, rng: &mut impl Rng) -> bool {
        match self.model {
            LossModel::None => false,
            LossModel::Bernoulli(p) => p > 0.0 && rng.random::<f64>() < p,
            LossModel::GilbertElliott { p, r, k, h } => {
                // Transition first, then draw the loss in the new state.
                let u: f64 = rng.random();
                self.bad = if self.bad { u >= r } else { u < p };
                let keep = if self.bad { h } else { k };
                rng.random::<f64>() >= keep
            }
        }
    }
}

/// Draws the extra delay of one packet, in nanoseconds (may be negative for
/// the normal distribution; the caller clips).
fn jitter_ns(j: &Jitter, rng: &mut impl Rng) -> i64 {
    let a = j.amount.as_nanos() as f64;
    if a == 0.0 {
        return 0;
    }
    let v = match j.dist {
        JitterDist::Uniform => rng.random::<f64>() * a,
        JitterDist::Exponential => {
            let u: f64 = rng.random();
            -(1.0 - u).ln() * a
        }
        JitterDist::Normal => {
            // Box-Muller.
            let u1: f64 = 1.0 - rng.random::<f64>();
            let u2: f64 = rng.random();
            (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos() * a
        }
    };
    v as i64
}

/// Cursor over a (possibly looping) rate schedule.
#[derive(Debug, Clone)]
pub(crate) struct ScheduleCursor {
    points: Arc<[(u64, f64)]>,
    period: Option<u64>,
    cycle: u64,
    next: usize,
}

impl ScheduleCursor {
    /// The next change after the current one: (time, rate). Advances.
    pub fn next_change(&mut self) -> Option<(u64, f64)> {
        if self.next >= self.points.len() {
            let period = self.period?;
            if period == 0 {
                return None;
            }
            self.cycle += 1;
            self.next = 0;
        }
        let (at, rate) = *self.points.get(self.next)?;
        self.next += 1;
        let base = self.cycle.checked_mul(self.period.unwrap_or(0))?;
        Some((base.checked_add(at)?, rate))
    }
}

/// Mahimahi opportunity cursor.
#[derive(Debug, Clone)]
pub(crate) struct Opportunities {
    trace: Arc<DeliveryTrace>,
    bytes_per_op: f64,
    looped: bool,
    cycle: u64,
    next: usize,
    leftover: f64,
    leftover_at: u64,
}

impl Opportunities {
    fn time_of(&self, cycle: u64, idx: usize) -> Option<u64> {
        let ms = self.trace.opportunities_ms.get(idx)?;
        let base = cycle.checked_mul(self.trace.period_ms)?;
        base.checked_add(*ms)?.checked_mul(NS_PER_MS)
    }

    /// The time of the next unused opportunity, advancing past the end of a cycle.
    fn peek(&mut self) -> Option<u64> {
        if self.next >= self.trace.opportunities_ms.len() {
            if !self.looped {
                return None;
            }
            self.cycle += 1;
            self.next = 0;
        }
        self.time_of(self.cycle, self.next)
    }

    /// Skips opportunities before `now` (they pass unused while idle).
    fn skip_before(&mut self, now: u64) {
        let period_ns = self.trace.period_ms.saturating_mul(NS_PER_MS);
        if self.looped && period_ns > 0 {
            // Jump whole cycles at once.
            if let Some(t) = self.peek()
                && now > t + period_ns
            {
                let skip = (now - t) / period_ns;
                self.cycle += skip.saturating_sub(1);
            }
        }
        while let Some(t) = self.peek() {
            if t >= now {
                break;
            }
            self.next += 1;
        }
    }

    /// When a packet of `bytes` that starts service at `now` leaves.
    fn departure(&mut self, now: u64, bytes: f64) -> Option<u64> {
        let mut need = bytes;
        if self.leftover > 0.0 && self.leftover_at == now {
            let used = self.leftover.min(need);
            self.leftover -= used;
            need -= used;
            if need <= 0.0 {
                return Some(now);
            }
        }
        self.skip_before(now);
        loop {
            let t = self.peek()?;
            self.next += 1;
            need -= self.bytes_per_op;
            if need <= 0.0 {
                self.leftover = -need;
                self.leftover_at = t;
                return Some(t);
            }
        }
    }
}

/// How a direction serves bytes right now.
#[derive(Debug, Clone)]
pub(crate) enum Service {
    /// A fluid rate in bit/s, changed by events.
    Fluid(f64),
    /// Mahimahi delivery opportunities.
    Opportunities(Box<Opportunities>),
}

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The drop-tail queue was full.
    Queue,
    /// Random loss.
    Loss,
    /// The link was down.
    Down,
    /// A radio link's target cell buffer was full during a handover interruption.
    TargetBuffer,
    /// Lost in the source cell's context release at a handover.
    ContextRelease,
}

/// Counters per link direction.
#[derive(Debug, Clone, Default)]
pub(crate) struct DirStats {
    pub delivered_pkts: u64,
    pub delivered_bytes: u64,
    pub drops_queue: u64,
    pub drops_loss: u64,
    pub drops_down: u64,
    pub drops_target_buffer: u64,
    pub drops_context_release: u64,
    pub duplicates: u64,
    pub max_queue_bytes: u64,
    pub bin_bytes: u64,
    pub bin_drops: u64,
    /// Bits the service rate offered since the current output bin began, up to
    /// `bin_rate_since` (the rate's integral over time, for the bin's mean rate).
    pub bin_rate_bits: f64,
    /// Simulated time (ns) up to which `bin_rate_bits` counts.
    pub bin_rate_since: u64,
}

/// One direction of a link.
pub(crate) struct LinkDir {
    pub service: Service,
    pub schedule: Option<ScheduleCursor>,
    /// The rate the next schedule event applies.
    pub pending_rate: f64,
    pub delay_ns: u64,
    pub reverse_delay_ns: u64,
    pub jitter: Jitter,
    pub reorder: bool,
    pub loss: LossState,
    pub duplicate: f64,
    pub queue_limit: QueueLimit,
    pub policy: OutagePolicy,
    pub up: bool,
    pub rng: ChaCha8Rng,
    /// Packet slab indices waiting, front first.
    pub queue: VecDeque<u32>,
    pub queued_bytes: u64,
    /// The packet being serialized.
    pub in_service: Option<u32>,
    pub in_service_bytes: u32,
    pub remaining_bits: f64,
    pub service_since: u64,
    /// Bumped whenever the pending departure event becomes stale.
    pub epoch: u32,
    pub last_arrival: u64,
    pub stats: DirStats,
    /// `Some(source)` when an external source drives this direction.
    pub external: Option<String>,
    /// Driven by the radio model (`RateModel::Radio`).
    pub radio_driven: bool,
    /// The slot-served radio downlink state (side B to side A of a radio link).
    pub radio: Option<Box<RadioDl>>,
}

impl LinkDir {
    pub fn new(d: &LinkDirection, reverse_delay_ns: u64, rng: ChaCha8Rng) -> Self {
        let mut schedule = None;
        let mut external = None;
        let radio_driven = matches!(d.rate, RateModel::Radio);
        let service = match &d.rate {
            RateModel::Constant(r) => Service::Fluid(*r),
            RateModel::Schedule { points, period } => {
                let pts: Arc<[(u64, f64)]> = points
                    .iter()
                    .map(|(t, r)| (u64::try_from(t.as_nanos()).unwrap_or(u64::MAX), *r))
                    .collect();
                let first = pts.first().map(|p| p.1).unwrap_or(0.0);
                let mut cur = ScheduleCursor {
                    points: pts,
                    period: period.map(|p| u64::try_from(p.as_nanos()).unwrap_or(u64::MAX)),
                    cycle: 0,
                    next: 0,
                };
                // Consume the first point: it is the initial rate.
                cur.next_change();
                schedule = Some(cur);
                Service::Fluid(first)
            }
            RateModel::Deliveries {
                trace,
                scale,
                looped,
            } => Service::Opportunities(Box::new(Opportunities {
                trace: trace.clone(),
                bytes_per_op: MAHIMAHI_OPPORTUNITY_BYTES as f64 * scale,
                looped: *looped,
                cycle: 0,
                next: 0,
                leftover: 0.0,
                leftover_at: 0,
            })),
            RateModel::External { source, initial } => {
                external = Some(source.clone());
                Service::Fluid(*initial)
            }
            // Down until the radio model brings the path up.
            RateModel::Radio => Service::Fluid(0.0),
        };
        Self {
            service,
            schedule,
            pending_rate: 0.0,
            delay_ns: u64::try_from(d.delay.as_nanos()).unwrap_or(u64::MAX),
            reverse_delay_ns,
            jitter: d.jitter,
            reorder: d.reorder,
            loss: LossState::new(d.loss),
            duplicate: d.duplicate,
            queue_limit: d.queue,
            policy: if radio_driven {
                OutagePolicy::Drop
            } else {
                d.outage_policy
            },
            up: !radio_driven,
            rng,
            queue: VecDeque::new(),
            queued_bytes: 0,
            in_service: None,
            in_service_bytes: 0,
            remaining_bits: 0.0,
            service_since: 0,
            epoch: 0,
            last_arrival: 0,
            stats: DirStats::default(),
            external,
            radio_driven,
            radio: None,
        }
    }

    /// The current service rate in bit/s (the trace mean for Mahimahi).
    pub fn rate_bps(&self) -> f64 {
        match &self.service {
            Service::Fluid(r) => *r,
            Service::Opportunities(o) => {
                o.trace.mean_bps() * o.bytes_per_op / MAHIMAHI_OPPORTUNITY_BYTES as f64
            }
        }
    }

    /// The queue limit in bytes at the current rate.
    pub fn limit_bytes(&self) -> u64 {
        let r = self.rate_bps();
        let v = match self.queue_limit {
            QueueLimit::Unlimited => return u64::MAX,
            QueueLimit::Bytes(b) => return b,
            QueueLimit::Time(t) => r * t.as_secs_f64() / 8.0,
            QueueLimit::Bdp(m) => {
                m * r * (self.delay_ns + self.reverse_delay_ns) as f64 / 1e9 / 8.0
            }
        };
        if v >= u64::MAX as f64 {
            u64::MAX
        } else {
            v as u64
        }
    }

    /// Whether a packet of `bytes` fits behind the current queue. At least
    /// one packet may always wait.
    pub fn admits(&self, bytes: u32) -> bool {
        self.queue.is_empty()
            || self.queued_bytes.saturating_add(u64::from(bytes)) <= self.limit_bytes()
    }

    /// Starts serving `pkt` of `bytes` at `now`; returns the departure time, if
    /// it will ever leave at the current rate.
    pub fn begin(&mut self, pkt: u32, bytes: u32, now: u64) -> Option<u64> {
        self.in_service = Some(pkt);
        self.in_service_bytes = bytes;
        self.remaining_bits = f64::from(bytes) * 8.0;
        self.service_since = now;
        self.epoch = self.epoch.wrapping_add(1);
        self.departure(now)
    }

    /// Departure time of the packet in service from `now` on.
    fn departure(&mut self, now: u64) -> Option<u64> {
        match &mut self.service {
            Service::Fluid(r) => {
                if *r <= 0.0 {
                    return None;
                }
                let ns = (self.remaining_bits * 1e9 / *r).ceil();
                if ns >= (u64::MAX - now) as f64 {
                    return None;
                }
                Some(now + ns as u64)
            }
            Service::Opportunities(o) => o.departure(now, self.remaining_bits / 8.0),
        }
    }

    /// Adds the current rate's bits since the last rate change (or bin start) to the bin.
    fn account_rate(&mut self, now: u64) {
        let span = now.saturating_sub(self.stats.bin_rate_since);
        self.stats.bin_rate_bits += self.rate_bps() * span as f64 / 1e9;
        self.stats.bin_rate_since = now;
    }

    /// The mean service rate (bit/s) over the output bin of `secs` seconds that ends at
    /// `now`, and a new bin starts. A rate that changes within a bin counts for the time it
    /// held, so the mean times the bin's length is the capacity the bin offered.
    pub fn take_bin_mean_rate(&mut self, now: u64, secs: f64) -> f64 {
        self.account_rate(now);
        let mean = self.stats.bin_rate_bits / secs;
        self.stats.bin_rate_bits = 0.0;
        mean
    }

    /// Changes the fluid rate at `now`; returns a new departure time for the
    /// packet in service (the old departure event becomes stale).
    pub fn set_rate(&mut self, rate: f64, now: u64) -> Option<u64> {
        self.account_rate(now);
        if let (Some(_), Service::Fluid(old)) = (self.in_service, &self.service) {
            let sent = *old * now.saturating_sub(self.service_since) as f64 / 1e9;
            self.remaining_bits = (self.remaining_bits - sent).max(0.0);
        }
        if matches!(self.service, Service::Opportunities(_)) && self.in_service.is_some() {
            // Leaving trace mode mid-packet: serve the whole packet afresh.
            self.remaining_bits = f64::from(self.in_service_bytes) * 8.0;
        }
        self.service = Service::Fluid(rate.max(0.0));
        self.service_since = now;
        if self.in_service.is_some() && self.up {
            self.epoch = self.epoch.wrapping_add(1);
            self.departure(now)
        } else {
            None
        }
    }

    /// Draws loss for a departing packet.
    pub fn lose(&mut self) -> bool {
        self.loss.lose(&mut self.rng)
    }

    /// Draws duplication for a departing packet.
    pub fn duplicates(&mut self) -> bool {
        self.duplicate > 0.0 && self.rng.random::<f64>() < self.duplicate
    }

    /// Arrival time at the far end of a packet leaving at `now`.
    pub fn arrival(&mut self, now: u64) -> u64 {
        let j = jitter_ns(&self.jitter, &mut self.rng);
        let base = now.saturating_add(self.delay_ns);
        let mut t = if j >= 0 {
            base.saturating_add(j as u64)
        } else {
            base.saturating_sub(j.unsigned_abs()).max(now)
        };
        if !self.reorder {
            t = t.max(self.last_arrival);
        }
        self.last_arrival = self.last_arrival.max(t);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn gilbert_elliott_matches_mean_and_burst() {
        // Mean loss 2 %, mean burst 4 packets, in the simple Gilbert form.
        let mean = 0.02;
        let burst = 4.0;
        let r = 1.0 / burst;
        let p = mean * r / (1.0 - mean);
        let mut s = LossState::new(LossModel::GilbertElliott {
            p,
            r,
            k: 1.0,
            h: 0.0,
        });
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        let n = 4_000_000u64;
        let (mut lost, mut bursts, mut run) = (0u64, 0u64, 0u64);
        for _ in 0..n {
            if s.lose(&mut rng) {
                lost += 1;
                run += 1;
            } else if run > 0 {
                bursts += 1;
                run = 0;
            }
        }
        if run > 0 {
            bursts += 1;
        }
        let got_mean = lost as f64 / n as f64;
        let got_burst = lost as f64 / bursts as f64;
        assert!(
            (got_mean - mean).abs() / mean < 0.10,
            "mean loss {got_mean}"
        );
        assert!(
            (got_burst - burst).abs() / burst < 0.10,
            "mean burst {got_burst}"
        );
        assert!(
            (LossModel::GilbertElliott {
                p,
                r,
                k: 1.0,
                h: 0.0
            }
            .mean_loss()
                - mean)
                .abs()
                < 1e-12
        );
    }

    #[test]
    fn bernoulli_matches_p() {
        let mut s = LossState::new(LossModel::Bernoulli(0.01));
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let n = 1_000_000;
        let lost = (0..n).filter(|_| s.lose(&mut rng)).count();
        assert!((lost as f64 / n as f64 - 0.01).abs() < 0.001);
    }

    #[test]
    fn schedule_cursor_loops() {
        let mut c = ScheduleCursor {
            points: Arc::from(vec![(0u64, 1.0), (10, 2.0)]),
            period: Some(30),
            cycle: 0,
            next: 1,
        };
        assert_eq!(c.next_change(), Some((10, 2.0)));
        assert_eq!(c.next_change(), Some((30, 1.0)));
        assert_eq!(c.next_change(), Some((40, 2.0)));
        let mut c = ScheduleCursor {
            points: Arc::from(vec![(0u64, 1.0)]),
            period: None,
            cycle: 0,
            next: 1,
        };
        assert_eq!(c.next_change(), None);
    }

    #[test]
    fn mahimahi_opportunities_serve_packets() {
        let trace = Arc::new(DeliveryTrace {
            opportunities_ms: vec![1, 1, 2, 4],
            period_ms: 4,
        });
        let mut o = Opportunities {
            trace,
            bytes_per_op: 1500.0,
            looped: true,
            cycle: 0,
            next: 0,
            leftover: 0.0,
            leftover_at: 0,
        };
        let ms = NS_PER_MS;
        // Two 750-byte packets share the first opportunity at 1 ms.
        assert_eq!(o.departure(0, 750.0), Some(ms));
        assert_eq!(o.departure(ms, 750.0), Some(ms));
        // Next 1500-byte packet uses the second opportunity at 1 ms.
        assert_eq!(o.departure(ms, 1500.0), Some(ms));
        // A 3000-byte packet needs the 2 ms and 4 ms opportunities.
        assert_eq!(o.departure(ms, 3000.0), Some(4 * ms));
        // Idle until 9 ms: opportunities before pass unused; next cycle starts
        // at 8 ms (1,1,2,4 -> 9,9,10,12 in the third cycle).
        assert_eq!(o.departure(9 * ms, 1500.0), Some(9 * ms));
        assert_eq!(o.departure(9 * ms, 1500.0), Some(9 * ms));
        assert_eq!(o.departure(9 * ms, 1500.0), Some(10 * ms));
    }
}
