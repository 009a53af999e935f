//! LIA, the "Linked Increases" coupled congestion control of RFC 6356 ("Coupled Congestion
//! Control for Multipath Transport Protocols", Raiciu, Handley, Wischik), applied to the
//! paths of one Multipath QUIC connection.
//!
//! RFC 6356 is not vendored in the project's spec directory, so the comments below cite its
//! sections by URL and paraphrase them rather than quoting.
//!
//! Every path runs its own NewReno-style state machine (slow start, one window halving
//! per recovery period, persistent congestion, as in RFC 9002 Appendix B); only the
//! congestion-avoidance increase is coupled through state shared by all paths of the
//! connection. QUIC translation: the RFC's "subflow" is a path, `MSS_i` is the path's
//! maximum datagram size, `rtt_i` its smoothed RTT (RFC 9002 section 5.3) and
//! `bytes_acked` the size of each newly acknowledged packet.

use super::coupled::{Registry, lock, rtt_secs};
use super::new_reno::{AckAction, RenoCore};
use super::{CongestionController, CongestionEvent, CongestionMetrics, ControllerFactory};
use crate::recovery::RttEstimator;
use crate::shared::PathId;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a LIA controller publishes to the other paths of its connection.
#[derive(Debug, Clone, Copy)]
struct Subflow {
    /// cwnd_i, bytes.
    window: f64,
    /// rtt_i, seconds (the smoothed RTT).
    rtt: f64,
}

type Shared = Arc<Mutex<Registry<Subflow>>>;

/// The factory of coupled [`Lia`] controllers for **one connection**.
///
/// Every controller this factory builds joins the same shared state, so give each
/// connection its own factory (a factory shared by several connections would couple all
/// of their paths into one). A controller leaves the shared state when it is dropped, i.e.
/// when its path is closed.
#[derive(Debug, Default)]
pub struct LiaFactory {
    shared: Shared,
    initial_window: Option<u64>,
}

impl LiaFactory {
    /// A factory with fresh shared state and the RFC 9002 initial window.
    pub fn new() -> Self {
        Self::default()
    }

    /// A factory with fresh shared state whose controllers start with `initial_window`
    /// bytes (`None` for the RFC 9002 value, [`super::initial_window`]).
    pub fn with_initial_window(initial_window: Option<u64>) -> Self {
        LiaFactory {
            shared: Shared::default(),
            initial_window,
        }
    }

    /// The number of live controllers (open paths) coupled by this factory.
    pub fn subflows(&self) -> usize {
        lock(&self.shared).len()
    }

    /// The current value of RFC 6356's `alpha` over all live controllers (1 when there
    /// are none).
    pub fn alpha(&self) -> f64 {
        alpha_of(lock(&self.shared).values())
    }
}

impl ControllerFactory for LiaFactory {
    fn for_connection(&self) -> Option<std::sync::Arc<dyn ControllerFactory>> {
        Some(std::sync::Arc::new(LiaFactory::with_initial_window(
            self.initial_window,
        )))
    }

    fn build(
        &self,
        _now: Instant,
        path_id: PathId,
        max_datagram_size: u16,
    ) -> Box<dyn CongestionController> {
        Box::new(Lia::new(
            &self.shared,
            path_id,
            self.initial_window,
            max_datagram_size,
        ))
    }
}

/// RFC 6356's `alpha` for subflows given as `(cwnd_i in bytes, rtt_i)`; 1 for no subflow.
///
/// `alpha = cwnd_total * max_i(cwnd_i / rtt_i^2) / (sum_i(cwnd_i / rtt_i))^2`. It makes
/// the multipath flow as aggressive in total as one TCP flow on its best path: for `n`
/// identical paths it is `1/n`, for one path it is 1.
///
//= https://www.rfc-editor.org/rfc/rfc6356#section-3
// Paraphrase: alpha is chosen so that the aggregate throughput of the multipath flow equals
// that of a TCP flow on the best of its paths; it is computed as cwnd_total times the
// largest cwnd_i / rtt_i^2, divided by the square of the sum of cwnd_i / rtt_i
// (Equation 2).
pub fn lia_alpha(subflows: impl IntoIterator<Item = (u64, Duration)>) -> f64 {
    alpha_from(
        subflows
            .into_iter()
            .map(|(w, rtt)| (w as f64, rtt_secs(rtt))),
    )
}

fn alpha_of<'a>(subflows: impl Iterator<Item = &'a Subflow>) -> f64 {
    alpha_from(subflows.map(|s| (s.window, s.rtt)))
}

/// `alpha` from `(window bytes, rtt seconds)` pairs, summed in iteration order.
fn alpha_from(subflows: impl Iterator<Item = (f64, f64)>) -> f64 {
    let (mut total, mut best, mut sum) = (0.0f64, 0.0f64, 0.0f64);
    for (w, rtt) in subflows {
        total += w;
        best = best.max(w / (rtt * rtt));
        sum += w / rtt;
    }
    if sum > 0.0 {
        total * best / (sum * sum)
    } else {
        1.0
    }
}

/// A LIA controller for one path (RFC 6356, "Coupled Congestion Control for Multipath
/// Transport Protocols"); built by [`LiaFactory`].
///
/// Every path runs its own NewReno-style state machine (slow start, one window halving
/// per recovery period, persistent congestion, as in RFC 9002 Appendix B); only the
/// congestion-avoidance increase is coupled: per acknowledged packet of `bytes_acked`
/// bytes the window of path `i` grows by
/// `min(alpha * bytes_acked * MSS_i / cwnd_total, bytes_acked * MSS_i / cwnd_i)` with
/// `alpha` from [`lia_alpha`] over all paths of the connection. The RFC's "subflow" is a
/// path, `MSS_i` the path's maximum datagram size and `rtt_i` its smoothed RTT.
///
/// Two paths through one bottleneck together add about `alpha = 1/2` MSS per RTT and,
/// as each halves only its own window, end up with about one TCP flow's share.
#[derive(Debug)]
pub struct Lia {
    core: RenoCore,
    shared: Shared,
    key: (PathId, u64),
    /// The alpha used by the latest congestion-avoidance increase.
    alpha: f64,
}

impl Lia {
    fn new(
        shared: &Shared,
        path_id: PathId,
        initial_window: Option<u64>,
        max_datagram_size: u16,
    ) -> Self {
        let core = RenoCore::new(initial_window, max_datagram_size);
        let key = lock(shared).register(
            path_id,
            Subflow {
                window: core.window_f64(),
                rtt: rtt_secs(crate::recovery::K_INITIAL_RTT),
            },
        );
        Lia {
            core,
            shared: Arc::clone(shared),
            key,
            alpha: 1.0,
        }
    }

    /// The alpha used by this path's latest congestion-avoidance increase.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Publishes this path's window to the shared state.
    fn publish_window(&self) {
        if let Some(entry) = lock(&self.shared).get_mut(self.key) {
            entry.window = self.core.window_f64();
        }
    }
}

impl Drop for Lia {
    /// The path is closed: its window no longer counts toward the connection's.
    fn drop(&mut self) {
        lock(&self.shared).remove(self.key);
    }
}

impl CongestionController for Lia {
    fn name(&self) -> &str {
        "lia"
    }

    fn on_ack(
        &mut self,
        _now: Instant,
        sent_time: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        let action = self.core.on_ack(sent_time, bytes, app_limited);
        let mut shared = lock(&self.shared);
        let own_rtt = rtt_secs(rtt.smoothed());
        if let Some(entry) = shared.get_mut(self.key) {
            entry.rtt = own_rtt;
            entry.window = self.core.window_f64();
        }
        if action != AckAction::CongestionAvoidance {
            return;
        }
        //= https://www.rfc-editor.org/rfc/rfc6356#section-3
        // Paraphrase: the algorithm only changes the increase of congestion avoidance. For
        // each ACK received on subflow i, cwnd_i grows by
        // min(alpha * bytes_acked * MSS_i / cwnd_total, bytes_acked * MSS_i / cwnd_i)
        // (Equation 1). The second term is what TCP would add in the same situation, so a
        // subflow is never more aggressive than a TCP flow on its path.
        //
        //= https://www.rfc-editor.org/rfc/rfc6356#section-4
        // Paraphrase: alpha need only be recomputed when a window changes; it is recomputed
        // here on every increase, in floating point, from all subflows' current windows
        // and smoothed RTTs (a handful of paths, no allocation).
        let mut total = 0.0;
        for s in shared.values() {
            total += s.window;
        }
        let alpha = alpha_of(shared.values());
        let w = self.core.window_f64();
        let acked = bytes as f64;
        let mss = self.core.mss();
        let increase = if total > 0.0 {
            (alpha * acked * mss / total).min(acked * mss / w)
        } else {
            acked * mss / w
        };
        self.alpha = alpha;
        self.core.add(increase);
        if let Some(entry) = shared.get_mut(self.key) {
            entry.window = self.core.window_f64();
        }
    }

    fn on_congestion_event(&mut self, now: Instant, event: &CongestionEvent) {
        //= https://www.rfc-editor.org/rfc/rfc6356#section-3
        // Paraphrase: slow start, fast retransmit and fast recovery, and the multiplicative
        // decrease of congestion avoidance, are those of standard TCP: each subflow halves
        // its own window on a loss.
        self.core.on_congestion_event(now, event);
        self.publish_window();
    }

    fn on_spurious_congestion(&mut self, _now: Instant) {
        if self.core.on_spurious_congestion() {
            self.publish_window();
        }
    }

    fn on_mtu_update(&mut self, max_datagram_size: u16) {
        self.core.on_mtu_update(max_datagram_size);
        self.publish_window();
    }

    fn window(&self) -> u64 {
        self.core.window()
    }

    fn ssthresh(&self) -> Option<u64> {
        self.core.ssthresh()
    }

    fn in_slow_start(&self) -> bool {
        self.core.in_slow_start()
    }

    fn set_window(&mut self, bytes: u64) {
        self.core.set_window(bytes);
        self.publish_window();
    }

    fn metrics(&self) -> CongestionMetrics {
        self.core.metrics(vec![("alpha", self.alpha)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::test_net::{Net, PathSpec};
    use crate::cc::test_util::{identical_paths_growth, lose, steady_rtt, window_round};
    use crate::cc::{NewReno, NewRenoConfig};

    const MDS: u16 = 1200;
    const M: u64 = MDS as u64;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn alpha_worked_example() {
        // Two subflows: 10 packets at 100 ms and 20 packets at 50 ms.
        // cwnd_total = 30; cwnd_i/rtt_i^2 = 1000 and 8000 (packets/s^2), max 8000;
        // sum cwnd_i/rtt_i = 100 + 400 = 500; alpha = 30 * 8000 / 500^2 = 0.96.
        let a = lia_alpha([(10 * M, ms(100)), (20 * M, ms(50))]);
        assert!((a - 0.96).abs() < 1e-12, "{a}");
        // n identical paths: 1/n; one path: 1.
        assert!((lia_alpha([(10 * M, ms(40)); 2]) - 0.5).abs() < 1e-12);
        assert!((lia_alpha([(10 * M, ms(40)); 4]) - 0.25).abs() < 1e-12);
        assert_eq!(lia_alpha([(7 * M, ms(9))]), 1.0);
        assert_eq!(lia_alpha([]), 1.0);
    }

    #[test]
    fn alpha_from_live_controllers_and_increase_formula() {
        let t0 = Instant::now();
        let f = LiaFactory::new();
        let mut a = f.build(t0, PathId(0), MDS);
        let mut b = f.build(t0, PathId(1), MDS);
        assert_eq!(f.subflows(), 2);
        // Leave slow start on both, then set the windows of the worked example.
        lose(&mut *a, t0, t0, M);
        lose(&mut *b, t0, t0, M);
        a.set_window(10 * M);
        b.set_window(20 * M);
        let (ra, rb) = (steady_rtt(t0, ms(100)), steady_rtt(t0, ms(50)));
        // Application-limited acknowledgments publish the RTTs without growing.
        a.on_ack(t0, t0, M, true, &ra);
        b.on_ack(t0, t0, M, true, &rb);
        assert!((f.alpha() - 0.96).abs() < 1e-12);
        // One acknowledged packet on path a (sent after the recovery period began):
        // increase = min(0.96 * M * M / (30 M), M * M / (10 M)) = min(0.032, 0.1) * M.
        let before = a.metrics();
        let t1 = t0 + ms(1);
        a.on_ack(t1, t1, M, false, &ra);
        let grown = a.window() as f64 - before.window as f64;
        assert!((grown - (0.032 * M as f64).floor()).abs() <= 1.0, "{grown}");
        let extra = a.metrics().extra;
        assert_eq!(extra.len(), 1);
        assert_eq!(extra[0].0, "alpha");
        assert!((extra[0].1 - 0.96).abs() < 1e-12);
        // Closing path b leaves path a alone: alpha becomes 1.
        drop(b);
        assert_eq!(f.subflows(), 1);
        assert_eq!(f.alpha(), 1.0);
        drop(a);
        assert_eq!(f.subflows(), 0);
    }

    #[test]
    fn single_subflow_behaves_like_reno() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(100));
        let f = LiaFactory::new();
        let mut lia = f.build(t0, PathId(0), MDS);
        let mut reno = NewReno::new(NewRenoConfig::default(), MDS);
        // Slow start is identical.
        let (mut t_l, mut t_r) = (t0, t0);
        for _ in 0..3 {
            t_l = window_round(&mut *lia, t_l, &rtt, M);
            t_r = window_round(&mut reno, t_r, &rtt, M);
            assert_eq!(lia.window(), reno.window());
        }
        // The same loss halves both.
        lose(&mut *lia, t_l, t_l - ms(10), M);
        lose(&mut reno, t_r, t_r - ms(10), M);
        assert_eq!(lia.window(), reno.window());
        assert_eq!(lia.ssthresh(), reno.ssthresh());
        // Congestion avoidance: about one MSS per RTT, within one MSS of Reno after 20
        // rounds (LIA adds MSS/cwnd per packet continuously, Reno one MSS per window).
        let start = lia.window();
        for _ in 0..20 {
            t_l = window_round(&mut *lia, t_l + ms(1), &rtt, M);
            t_r = window_round(&mut reno, t_r + ms(1), &rtt, M);
        }
        let per_rtt = (lia.window() - start) as f64 / 20.0 / M as f64;
        assert!((0.95..=1.0).contains(&per_rtt), "{per_rtt}");
        assert!(lia.window().abs_diff(reno.window()) <= M);
        assert_eq!(lia.name(), "lia");
    }

    #[test]
    fn slow_start_is_per_subflow() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(100));
        let f = LiaFactory::new();
        let mut a = f.build(t0, PathId(0), MDS);
        let mut b = f.build(t0, PathId(1), MDS);
        // Path b is in congestion avoidance; path a still doubles per round.
        lose(&mut *b, t0, t0, M);
        let mut now = t0;
        for round in 1..=3 {
            now = window_round(&mut *a, now, &rtt, M);
            assert_eq!(a.window(), 12_000 << round);
        }
        assert!(a.in_slow_start() && !b.in_slow_start());
    }

    /// Two subflows over identical paths grow together by alpha = 1/2 MSS per RTT, half
    /// of what one Reno flow adds: never more aggressive than Reno.
    #[test]
    fn two_identical_subflows_add_half_an_mss_per_rtt() {
        let f = LiaFactory::new();
        // The subflows stay alive for alpha, which counts the live ones.
        let (_a, _b, per_rtt) = identical_paths_growth(&f, MDS);
        assert!((0.45..=0.51).contains(&per_rtt), "{per_rtt}");
        assert!((f.alpha() - 0.5).abs() < 0.01, "{}", f.alpha());
    }

    /// Total throughput of Reno (one flow), two uncoupled Reno flows, and two LIA subflows,
    /// all through one random-loss bottleneck.
    fn shared_bottleneck(secs: u64, p: f64, seed: u64) -> (f64, f64, f64, f64) {
        let spec = PathSpec::lossy(ms(40), 0);
        let run = |ccs: Vec<Box<dyn CongestionController>>| {
            let mut net = Net::new(vec![(p, seed)]);
            for cc in ccs {
                net.add_path(cc, spec);
            }
            net.run_for(Duration::from_secs(secs));
            net.paths
                .iter()
                .map(|p| p.delivered as f64)
                .collect::<Vec<_>>()
        };
        let t0 = Instant::now();
        let reno = || NewRenoConfig::default().build(t0, PathId(0), MDS);
        let one = run(vec![reno()])[0];
        let two: f64 = run(vec![reno(), reno()]).iter().sum();
        let f = LiaFactory::new();
        let lia = run(vec![
            f.build(t0, PathId(0), MDS),
            f.build(t0, PathId(1), MDS),
        ]);
        (one, two, lia[0] + lia[1], lia[0] / (lia[0] + lia[1]))
    }

    /// At a shared bottleneck (one loss process for both subflows) two LIA subflows
    /// together get about what one Reno flow gets, and about half of what two
    /// uncoupled Reno flows get.
    ///
    /// They get somewhat more than one Reno flow (about 1.1-1.2 times here), an inherent
    /// property of LIA rather than of this implementation: in equilibrium the coupled
    /// increase balances the same second moment of the total window as Reno does
    /// (E[w^2] = 2/p), but the sum of two sawtooths fluctuates less than one, so its mean
    /// is closer to sqrt(2/p) than a single Reno sawtooth's (about 1.2/sqrt(p) here).
    #[test]
    fn shared_bottleneck_total_close_to_one_reno_flow() {
        for (p, seed) in [(0.004, 7), (0.001, 8)] {
            let (one, two, lia, share) = shared_bottleneck(200, p, seed);
            let vs_one = lia / one;
            let vs_two = lia / two;
            assert!((0.85..=1.2).contains(&vs_one), "LIA / Reno = {vs_one}");
            assert!(vs_two <= 0.62, "LIA / two Reno = {vs_two}");
            // The two subflows share about equally.
            assert!((0.35..=0.65).contains(&share), "{share}");
        }
    }

    /// Paths with different loss rates: LIA moves most traffic to the less congested one
    /// while the total stays close to a TCP flow on the best path.
    #[test]
    fn prefers_the_less_congested_path() {
        let secs = 200;
        let f = LiaFactory::new();
        let mut net = Net::new(vec![(0.01, 1), (0.001, 2)]);
        let t0 = net.now;
        net.add_path(f.build(t0, PathId(0), MDS), PathSpec::lossy(ms(40), 0));
        net.add_path(f.build(t0, PathId(1), MDS), PathSpec::lossy(ms(40), 1));
        net.run_for(Duration::from_secs(secs));
        let (d0, d1) = (net.paths[0].delivered, net.paths[1].delivered);
        assert!(d1 > 4 * d0, "{d0} vs {d1}");
        let best = {
            let mut net = Net::new(vec![(0.001, 2)]);
            net.add_path(
                NewRenoConfig::default().build(net.now, PathId(0), MDS),
                PathSpec::lossy(ms(40), 0),
            );
            net.run_for(Duration::from_secs(secs));
            net.paths[0].delivered
        };
        let ratio = (d0 + d1) as f64 / best as f64;
        assert!((0.7..=1.2).contains(&ratio), "{ratio}");
    }

    #[test]
    fn persistent_congestion_mtu_and_undo() {
        let t0 = Instant::now();
        let f = LiaFactory::new();
        let mut a = f.build(t0, PathId(0), MDS);
        a.on_mtu_update(1452);
        assert_eq!(a.window(), 14_520);
        a.set_window(100 * 1452);
        lose(&mut *a, t0, t0, 1452);
        assert_eq!(a.window(), 50 * 1452);
        a.on_spurious_congestion(t0 + ms(1));
        assert_eq!(a.window(), 100 * 1452);
        assert_eq!(a.metrics().spurious_undos, 1);
        a.on_congestion_event(
            t0 + ms(200),
            &CongestionEvent {
                sent_time: t0 + ms(100),
                lost_bytes: 5 * 1452,
                persistent_congestion: true,
                ecn: false,
            },
        );
        assert_eq!(a.window(), 2 * 1452);
        assert_eq!(a.metrics().persistent_congestion_events, 1);
        // The shared state saw every change.
        assert!((f.alpha() - 1.0).abs() < 1e-12);
    }
}
