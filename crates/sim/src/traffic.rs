//! Raw-UDP traffic generators and sinks, as [`Agent`]s.
//!
//! Sizes are IP packet sizes: a 1500-byte packet carries 1472 bytes of UDP
//! payload over IPv4 (28 bytes of IP and UDP headers; 48 over IPv6), so a
//! `rate` counts the same bytes the links serve.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::agent::{Agent, AgentStats, Datagram, Record};
use crate::time::SimTime;

static ZEROS: [u8; 65536] = [0; 65536];

/// A payload of `len` zero bytes that shares one static buffer (no allocation).
pub fn zero_payload(len: usize) -> Bytes {
    Bytes::from_static(ZEROS.get(..len).unwrap_or(&ZEROS))
}

/// UDP payload bytes of an IP packet of `packet_size` bytes to `dst`.
pub fn payload_len(packet_size: u32, dst: SocketAddr) -> usize {
    let overhead = if dst.is_ipv4() { 28 } else { 48 };
    packet_size.saturating_sub(overhead) as usize
}

/// One (local, remote) address pair a sender uses.
pub type PathAddrs = (SocketAddr, SocketAddr);

/// Sends packets of a fixed size at a constant rate, cycling over its paths; or stands
/// for a population of such devices ([`CbrSource::devices`]).
#[derive(Debug, Clone)]
pub struct CbrSource {
    paths: Vec<PathAddrs>,
    next_path: usize,
    packet_size: u32,
    /// Time between one device's packets, ns.
    interval_ns: f64,
    /// Each device's offset into the interval, ns, ascending (`[0.0]` for one device).
    phases: Vec<f64>,
    base: u64,
    k: u64,
    next_at: u64,
    stop: u64,
    bytes_limit: Option<u64>,
    sent_wire: u64,
    app_sent: u64,
    done: bool,
}

impl CbrSource {
    /// `rate` in bit/s counting IP packets of `packet_size` bytes, from
    /// `start` until `stop` (or forever) or until `bytes_limit` IP bytes.
    pub fn new(
        paths: Vec<PathAddrs>,
        rate: f64,
        packet_size: u32,
        start: SimTime,
        stop: Option<SimTime>,
        bytes_limit: Option<u64>,
    ) -> Self {
        let interval_ns = if rate > 0.0 {
            f64::from(packet_size) * 8.0 * 1e9 / rate
        } else {
            f64::INFINITY
        };
        Self {
            done: paths.is_empty() || !interval_ns.is_finite(),
            paths,
            next_path: 0,
            packet_size,
            interval_ns,
            phases: vec![0.0],
            base: start.0,
            k: 0,
            next_at: start.0,
            stop: stop.map(|s| s.0).unwrap_or(u64::MAX),
            bytes_limit,
            sent_wire: 0,
            app_sent: 0,
        }
    }

    /// `devices` devices, each sending `rate` bit/s (so `devices * rate` in all) of
    /// `packet_size`-byte packets with its own timing: device `i` sends at `start + phase_i
    /// + j * interval`, its phase drawn uniformly in `[0, interval)` from `seed`. One agent
    /// (one socket in the emulator) stands for the whole population, which the
    /// emulator could not run as one process per device; `bytes_limit` counts them all.
    #[allow(clippy::too_many_arguments)]
    pub fn devices(
        paths: Vec<PathAddrs>,
        rate: f64,
        packet_size: u32,
        devices: u32,
        seed: u64,
        start: SimTime,
        stop: Option<SimTime>,
        bytes_limit: Option<u64>,
    ) -> Self {
        let mut s = Self::new(paths, rate, packet_size, start, stop, bytes_limit);
        if s.interval_ns.is_finite() && devices > 1 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut phases: Vec<f64> = (0..devices)
                .map(|_| rng.random::<f64>() * s.interval_ns)
                .collect();
            phases.sort_by(f64::total_cmp);
            s.next_at = start.0.saturating_add(phases[0].round() as u64);
            s.phases = phases;
            s.check_done();
        }
        s
    }

    fn check_done(&mut self) {
        if self.next_at >= self.stop || self.bytes_limit.is_some_and(|b| self.sent_wire >= b) {
            self.done = true;
        }
    }

    /// Restarts the packet clock at `t` (used by on/off).
    fn restart(&mut self, t: u64) {
        self.base = t;
        self.k = 0;
        self.next_at = t.saturating_add(self.phases[0].round() as u64);
    }

    fn emit(&mut self) -> Option<Datagram> {
        let (src, dst) = *self.paths.get(self.next_path)?;
        self.next_path = (self.next_path + 1) % self.paths.len();
        let len = payload_len(self.packet_size, dst);
        self.sent_wire += u64::from(self.packet_size);
        self.app_sent += len as u64;
        self.k += 1;
        let n = self.phases.len() as u64;
        let (round, device) = (self.k / n, (self.k % n) as usize);
        let t = self.base as f64 + self.phases[device] + round as f64 * self.interval_ns;
        self.next_at = if t >= u64::MAX as f64 {
            u64::MAX
        } else {
            t.round() as u64
        };
        self.check_done();
        Some(Datagram {
            src,
            dst,
            payload: zero_payload(len),
        })
    }
}

impl Agent for CbrSource {
    fn handle_datagram(&mut self, _now: SimTime, _datagram: Datagram) {}

    fn handle_timeout(&mut self, _now: SimTime) {}

    fn poll_transmit(&mut self, now: SimTime) -> Option<Datagram> {
        if self.done || self.next_at > now.0 {
            return None;
        }
        self.emit()
    }

    fn poll_timeout(&mut self) -> Option<SimTime> {
        (!self.done).then_some(SimTime(self.next_at))
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn stats(&self, stats: &mut AgentStats) {
        stats.app_bytes_sent = self.app_sent;
    }
}

/// Alternates constant-rate bursts (`on`) with silence (`off`); period lengths
/// are fixed or exponential, drawn from a seeded RNG.
#[derive(Debug, Clone)]
pub struct OnOffSource {
    cbr: CbrSource,
    on_mean_ns: f64,
    off_mean_ns: f64,
    exponential: bool,
    rng: ChaCha8Rng,
    on: bool,
    on_until: u64,
    off_until: u64,
}

impl OnOffSource {
    /// See [`CbrSource::new`] for the shared parameters; `on` and `off` are
    /// mean period lengths; `seed` drives the exponential draws.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        paths: Vec<PathAddrs>,
        rate: f64,
        packet_size: u32,
        on: std::time::Duration,
        off: std::time::Duration,
        exponential: bool,
        start: SimTime,
        stop: Option<SimTime>,
        bytes_limit: Option<u64>,
        seed: u64,
    ) -> Self {
        let cbr = CbrSource::new(paths, rate, packet_size, start, stop, bytes_limit);
        let mut s = Self {
            cbr,
            on_mean_ns: on.as_nanos() as f64,
            off_mean_ns: off.as_nanos() as f64,
            exponential,
            rng: ChaCha8Rng::seed_from_u64(seed),
            on: true,
            on_until: 0,
            off_until: 0,
        };
        let first = s.draw(s.on_mean_ns);
        s.on_until = start.0.saturating_add(first);
        s
    }

    fn draw(&mut self, mean: f64) -> u64 {
        let v = if self.exponential {
            let u: f64 = self.rng.random();
            -(1.0 - u).ln() * mean
        } else {
            mean
        };
        if v >= u64::MAX as f64 {
            u64::MAX
        } else {
            v.round().max(1.0) as u64
        }
    }

    fn advance(&mut self, now: u64) {
        loop {
            if self.cbr.done {
                return;
            }
            if self.on {
                if self.cbr.next_at < self.on_until {
                    return;
                }
                self.on = false;
                let off = self.draw(self.off_mean_ns);
                self.off_until = self.on_until.saturating_add(off);
            } else {
                if now < self.off_until {
                    return;
                }
                self.on = true;
                let on = self.draw(self.on_mean_ns);
                self.on_until = self.off_until.saturating_add(on);
                self.cbr.restart(self.off_until);
                self.cbr.check_done();
            }
        }
    }
}

impl Agent for OnOffSource {
    fn handle_datagram(&mut self, _now: SimTime, _datagram: Datagram) {}

    fn handle_timeout(&mut self, now: SimTime) {
        self.advance(now.0);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<Datagram> {
        self.advance(now.0);
        if !self.on {
            return None;
        }
        self.cbr.poll_transmit(now)
    }

    fn poll_timeout(&mut self) -> Option<SimTime> {
        if self.cbr.done {
            None
        } else if self.on {
            Some(SimTime(self.cbr.next_at))
        } else {
            Some(SimTime(self.off_until))
        }
    }

    fn is_done(&self) -> bool {
        self.cbr.done
    }

    fn stats(&self, stats: &mut AgentStats) {
        self.cbr.stats(stats);
    }
}

/// Receives and counts; never sends.
#[derive(Debug, Clone, Default)]
pub struct Sink {
    bytes: u64,
    packets: u64,
}

impl Sink {
    /// A sink with zero counts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Payload bytes received.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Datagrams received.
    pub fn packets(&self) -> u64 {
        self.packets
    }
}

impl Agent for Sink {
    fn handle_datagram(&mut self, _now: SimTime, datagram: Datagram) {
        self.bytes += datagram.payload.len() as u64;
        self.packets += 1;
    }

    fn handle_timeout(&mut self, _now: SimTime) {}

    fn poll_transmit(&mut self, _now: SimTime) -> Option<Datagram> {
        None
    }

    fn poll_timeout(&mut self) -> Option<SimTime> {
        None
    }

    fn is_done(&self) -> bool {
        true
    }

    fn stats(&self, stats: &mut AgentStats) {
        stats.app_bytes_received = self.bytes;
    }
}

const REQUEST: u8 = 1;
const RESPONSE: u8 = 2;
const HEADER: usize = 5;

fn chunks(total: u64, max_payload: usize) -> impl Iterator<Item = usize> {
    let max = max_payload.max(HEADER + 1) as u64 - HEADER as u64;
    let n = total.div_ceil(max);
    (0..n).map(move |i| (max.min(total - i * max)) as usize)
}

fn message(kind: u8, id: u32, body: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(HEADER + body);
    b.put_u8(kind);
    b.put_u32(id);
    b.put_slice(ZEROS.get(..body).unwrap_or(&ZEROS));
    b.freeze()
}

fn parse(payload: &[u8]) -> Option<(u8, u32, usize)> {
    let kind = *payload.first()?;
    let id = u32::from_be_bytes(payload.get(1..5)?.try_into().ok()?);
    Some((kind, id, payload.len() - HEADER))
}

/// Issues a request every `interval` and times the response.
///
/// Each message is split into datagrams of at most `packet_size` IP bytes,
/// each carrying a 5-byte header (kind, request id). A request completes when
/// all its response bytes arrived; it is recorded in `completions.csv`.
/// Requests use the first path.
#[derive(Debug, Clone)]
pub struct RequestClient {
    path: Option<PathAddrs>,
    request_size: u64,
    response_size: u64,
    interval: u64,
    packet_size: u32,
    next_at: u64,
    stop: u64,
    remaining: Option<u64>,
    next_id: u32,
    outstanding: BTreeMap<u32, (u64, u64)>,
    queue: VecDeque<Datagram>,
    records: Vec<Record>,
    app_rx: u64,
    app_tx: u64,
}

impl RequestClient {
    /// `count` requests (unbounded if `None`) from `start` until `stop`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        paths: &[PathAddrs],
        request_size: u64,
        response_size: u64,
        interval: std::time::Duration,
        count: Option<u64>,
        packet_size: u32,
        start: SimTime,
        stop: Option<SimTime>,
    ) -> Self {
        Self {
            path: paths.first().copied(),
            request_size,
            response_size,
            interval: u64::try_from(interval.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
            packet_size,
            next_at: start.0,
            stop: stop.map(|s| s.0).unwrap_or(u64::MAX),
            remaining: count,
            next_id: 0,
            outstanding: BTreeMap::new(),
            queue: VecDeque::new(),
            records: Vec::new(),
            app_rx: 0,
            app_tx: 0,
        }
    }

    fn sending(&self) -> bool {
        self.path.is_some() && self.remaining != Some(0) && self.next_at < self.stop
    }

    fn issue(&mut self, now: u64) {
        while self.sending() && self.next_at <= now {
            let Some((src, dst)) = self.path else { return };
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            self.outstanding.insert(id, (self.next_at, 0));
            for body in chunks(self.request_size, payload_len(self.packet_size, dst)) {
                self.app_tx += body as u64;
                self.queue.push_back(Datagram {
                    src,
                    dst,
                    payload: message(REQUEST, id, body),
                });
            }
            if let Some(r) = self.remaining.as_mut() {
                *r -= 1;
            }
            self.next_at = self.next_at.saturating_add(self.interval);
        }
    }
}

impl Agent for RequestClient {
    fn handle_datagram(&mut self, now: SimTime, datagram: Datagram) {
        let Some((kind, id, body)) = parse(&datagram.payload) else {
            return;
        };
        if kind != RESPONSE {
            return;
        }
        self.app_rx += body as u64;
        let Some(entry) = self.outstanding.get_mut(&id) else {
            return;
        };
        entry.1 += body as u64;
        if entry.1 >= self.response_size {
            let (started, _) = *entry;
            self.outstanding.remove(&id);
            self.records.push(Record::Completion {
                label: format!("request {id}"),
                started: SimTime(started),
                finished: now,
                bytes: self.response_size,
            });
        }
    }

    fn handle_timeout(&mut self, now: SimTime) {
        self.issue(now.0);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<Datagram> {
        self.issue(now.0);
        self.queue.pop_front()
    }

    fn poll_timeout(&mut self) -> Option<SimTime> {
        self.sending().then_some(SimTime(self.next_at))
    }

    fn is_done(&self) -> bool {
        !self.sending() && self.outstanding.is_empty() && self.queue.is_empty()
    }

    fn stats(&self, stats: &mut AgentStats) {
        stats.app_bytes_received = self.app_rx;
        stats.app_bytes_sent = self.app_tx;
    }

    fn drain_records(&mut self, out: &mut Vec<Record>) {
        out.append(&mut self.records);
    }
}

/// Answers each complete request with a response of `response_size` bytes.
#[derive(Debug, Clone)]
pub struct ResponseServer {
    request_size: u64,
    response_size: u64,
    packet_size: u32,
    partial: BTreeMap<(SocketAddr, u32), u64>,
    queue: VecDeque<Datagram>,
    app_rx: u64,
    app_tx: u64,
}

impl ResponseServer {
    /// A server for requests of `request_size` bytes.
    pub fn new(request_size: u64, response_size: u64, packet_size: u32) -> Self {
        Self {
            request_size,
            response_size,
            packet_size,
            partial: BTreeMap::new(),
            queue: VecDeque::new(),
            app_rx: 0,
            app_tx: 0,
        }
    }
}

impl Agent for ResponseServer {
    fn handle_datagram(&mut self, _now: SimTime, datagram: Datagram) {
        let Some((kind, id, body)) = parse(&datagram.payload) else {
            return;
        };
        if kind != REQUEST {
            return;
        }
        self.app_rx += body as u64;
        let got = self.partial.entry((datagram.src, id)).or_insert(0);
        *got += body as u64;
        if *got >= self.request_size {
            self.partial.remove(&(datagram.src, id));
            for b in chunks(
                self.response_size,
                payload_len(self.packet_size, datagram.src),
            ) {
                self.app_tx += b as u64;
                self.queue.push_back(Datagram {
                    src: datagram.dst,
                    dst: datagram.src,
                    payload: message(RESPONSE, id, b),
                });
            }
        }
    }

    fn handle_timeout(&mut self, _now: SimTime) {}

    fn poll_transmit(&mut self, _now: SimTime) -> Option<Datagram> {
        self.queue.pop_front()
    }

    fn poll_timeout(&mut self) -> Option<SimTime> {
        None
    }

    fn is_done(&self) -> bool {
        self.queue.is_empty()
    }

    fn stats(&self, stats: &mut AgentStats) {
        stats.app_bytes_received = self.app_rx;
        stats.app_bytes_sent = self.app_tx;
    }
}

/// How a rate-limited sending application (the `rate` of `quic` and `tcp` flows) hands its
/// bytes to the transport: in pieces of one millisecond's worth at the rate (at least
/// [`AppRate::MIN_PIECE`] bytes), piece `k` at `k * piece / rate` after the start, so the
/// transport never holds more than what the rate allows plus one piece, like a
/// rate-limited `iperf` client. The simulator's QUIC application, `polypath client` /
/// `server --rate` and `polypath tcp send --rate` all pace with it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AppRate {
    bytes_per_s: f64,
    piece: u64,
}

impl AppRate {
    /// Smallest piece handed over at once, bytes (one full-size packet's payload).
    pub const MIN_PIECE: u64 = 1200;
    /// Time one piece lasts at the rate (unless [`AppRate::MIN_PIECE`] is larger).
    pub const PIECE_TIME: std::time::Duration = std::time::Duration::from_millis(1);

    /// The pacing of `bits_per_s`; `None` unless it is positive and finite.
    pub fn new(bits_per_s: f64) -> Option<AppRate> {
        Self::with_message(bits_per_s, None)
    }

    /// The pacing of `bits_per_s` in pieces of `message` bytes (a device's message; the
    /// default pieces when `None`); `None` unless the rate is positive and finite and the
    /// message, if given, at least a byte.
    pub fn with_message(bits_per_s: f64, message: Option<u64>) -> Option<AppRate> {
        if !(bits_per_s.is_finite() && bits_per_s > 0.0) || message == Some(0) {
            return None;
        }
        let bytes_per_s = bits_per_s / 8.0;
        let piece = message.unwrap_or_else(|| {
            ((bytes_per_s * Self::PIECE_TIME.as_secs_f64()) as u64).max(Self::MIN_PIECE)
        });
        Some(AppRate { bytes_per_s, piece })
    }

    /// Bytes per piece.
    pub fn piece(&self) -> u64 {
        self.piece
    }

    /// Bytes the application may have handed over `elapsed` after its start (every piece
    /// that is due, the first one at once).
    pub fn allowed(&self, elapsed: std::time::Duration) -> u64 {
        // The tolerance keeps `allowed(due(x)) > x` despite rounding.
        let pieces = (elapsed.as_secs_f64() * self.bytes_per_s / self.piece as f64 + 1e-6).floor();
        let pieces = if pieces.is_finite() && pieces >= 0.0 {
            (pieces as u64).saturating_add(1)
        } else {
            1
        };
        pieces.saturating_mul(self.piece)
    }

    /// How long after the start the piece holding byte `offset` is due (so when
    /// [`AppRate::allowed`] first exceeds `offset`).
    pub fn due(&self, offset: u64) -> std::time::Duration {
        let piece = offset / self.piece;
        // Rounded up to the nanosecond, so the piece is due at the returned time.
        let nanos = (piece as f64 * self.piece as f64 / self.bytes_per_s * 1e9).ceil();
        if nanos >= u64::MAX as f64 {
            return std::time::Duration::MAX;
        }
        std::time::Duration::from_nanos(nanos as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// Every packet time of a source, until `until` ns.
    fn send_times(src: &mut CbrSource, until: u64) -> Vec<u64> {
        let mut times = Vec::new();
        while let Some(t) = src.poll_timeout() {
            if t.0 >= until {
                break;
            }
            assert!(src.poll_transmit(t).is_some());
            times.push(t.0);
        }
        times
    }

    #[test]
    fn a_device_population_keeps_each_devices_timing() {
        let path: PathAddrs = ("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap());
        // 1000 devices of 800 bit/s with 100-byte packets: one packet a second each.
        let mut pop = CbrSource::devices(vec![path], 800.0, 100, 1000, 7, SimTime(0), None, None);
        let times = send_times(&mut pop, 3_000_000_000);
        assert_eq!(times.len(), 3000);
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "in time order");
        // Device i sends at phase_i, phase_i + 1 s, phase_i + 2 s.
        for k in 0..1000 {
            assert_eq!(times[k + 1000] - times[k], 1_000_000_000);
            assert_eq!(times[k + 2000] - times[k], 1_000_000_000 * 2);
        }
        // The phases spread over the second (not one burst, not a regular comb).
        let gaps: Vec<u64> = times[..1000].windows(2).map(|w| w[1] - w[0]).collect();
        assert!(times[0] < 20_000_000 && times[999] > 980_000_000);
        assert!(gaps.iter().max().unwrap() > &(3 * gaps.iter().min().unwrap() + 1));
        // The same seed, the same phases; another seed, others. One device: a plain CBR.
        let again = send_times(
            &mut CbrSource::devices(vec![path], 800.0, 100, 1000, 7, SimTime(0), None, None),
            3_000_000_000,
        );
        assert_eq!(again, times);
        let other = send_times(
            &mut CbrSource::devices(vec![path], 800.0, 100, 1000, 8, SimTime(0), None, None),
            1_000_000_000,
        );
        assert_ne!(other, times[..1000]);
        let one = send_times(
            &mut CbrSource::devices(vec![path], 800.0, 100, 1, 7, SimTime(0), None, None),
            3_500_000_000,
        );
        assert_eq!(one, [0, 1_000_000_000, 2_000_000_000, 3_000_000_000]);
    }

    #[test]
    fn app_rate_paces_pieces() {
        // 96 Mbit/s = 12 MB/s: 12 000-byte pieces, one per millisecond.
        let r = AppRate::new(96e6).unwrap();
        assert_eq!(r.piece(), 12_000);
        assert_eq!(r.allowed(Duration::ZERO), 12_000);
        assert_eq!(r.allowed(Duration::from_micros(999)), 12_000);
        assert_eq!(r.allowed(Duration::from_millis(1)), 24_000);
        assert_eq!(r.allowed(Duration::from_secs(1)), 12_012_000);
        assert_eq!(r.due(0), Duration::ZERO);
        assert_eq!(r.due(11_999), Duration::ZERO);
        assert_eq!(r.due(12_000), Duration::from_millis(1));
        // Every piece is due at the time `due` says, whatever the rounding.
        for rate in [96e6, 12.5e6, 7.77e6, 100e3, 1e9 / 3.0] {
            let r = AppRate::new(rate).unwrap();
            for k in [1u64, 2, 3, 999, 12_345, 1_000_003] {
                let offset = k * r.piece() + k % r.piece();
                assert!(r.allowed(r.due(offset)) > offset, "{rate} {offset}");
                assert!(r.allowed(r.due(offset) - Duration::from_micros(1)) <= offset);
            }
        }
        // Slow rates hand over one packet's payload at a time.
        let slow = AppRate::new(100e3).unwrap();
        assert_eq!(slow.piece(), AppRate::MIN_PIECE);
        assert_eq!(slow.due(1200), Duration::from_millis(96));
        assert!(AppRate::new(0.0).is_none() && AppRate::new(f64::NAN).is_none());
        // A device's 100-byte messages at 800 bit/s: one a second.
        let device = AppRate::with_message(800.0, Some(100)).unwrap();
        assert_eq!(
            (device.piece(), device.due(100)),
            (100, Duration::from_secs(1))
        );
        assert_eq!(device.allowed(Duration::from_millis(1500)), 200);
        assert!(AppRate::with_message(800.0, Some(0)).is_none());
    }
    use super::*;

    fn addrs() -> PathAddrs {
        ("10.0.0.1:1".parse().unwrap(), "10.0.0.2:2".parse().unwrap())
    }

    #[test]
    fn cbr_spacing_and_limits() {
        // 1500-byte packets at 12 Mbit/s: one per millisecond.
        let mut c = CbrSource::new(vec![addrs()], 12e6, 1500, SimTime(0), None, Some(4500));
        let mut times = Vec::new();
        while let Some(t) = c.poll_timeout() {
            while let Some(d) = c.poll_transmit(t) {
                assert_eq!(d.payload.len(), 1472);
                times.push(t.0);
            }
        }
        assert_eq!(times, vec![0, 1_000_000, 2_000_000]);
        assert!(c.is_done());
    }

    #[test]
    fn onoff_alternates() {
        let ms = std::time::Duration::from_millis;
        let mut s = OnOffSource::new(
            vec![addrs()],
            12e6,
            1500,
            ms(3),
            ms(2),
            false,
            SimTime(0),
            Some(SimTime(20_000_000)),
            None,
            1,
        );
        let mut times = Vec::new();
        while let Some(t) = s.poll_timeout() {
            s.handle_timeout(t);
            while s.poll_transmit(t).is_some() {
                times.push(t.0 / 1_000_000);
            }
        }
        assert_eq!(times, vec![0, 1, 2, 5, 6, 7, 10, 11, 12, 15, 16, 17]);
    }

    #[test]
    fn request_response_round_trip() {
        let (c_addr, s_addr) = addrs();
        let mut client = RequestClient::new(
            &[(c_addr, s_addr)],
            3000,
            5000,
            std::time::Duration::from_millis(10),
            Some(2),
            1500,
            SimTime(0),
            None,
        );
        let mut server = ResponseServer::new(3000, 5000, 1500);
        for step in 0..2u64 {
            let now = SimTime(step * 10_000_000);
            client.handle_timeout(now);
            while let Some(d) = client.poll_transmit(now) {
                server.handle_datagram(now, d);
            }
            let later = SimTime(now.0 + 1_000);
            while let Some(d) = server.poll_transmit(later) {
                assert_eq!(d.dst, c_addr);
                client.handle_datagram(later, d);
            }
        }
        let mut recs = Vec::new();
        client.drain_records(&mut recs);
        assert_eq!(recs.len(), 2);
        assert!(client.is_done());
        let mut st = AgentStats::default();
        client.stats(&mut st);
        assert_eq!(st.app_bytes_received, 10_000);
        assert_eq!(st.app_bytes_sent, 6_000);
        assert!(parse(&[1, 2]).is_none());
    }
}
