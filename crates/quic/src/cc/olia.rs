//! OLIA, the "Opportunistic Linked Increases Algorithm" of R. Khalili, N. Gast,
//! M. Popovic, J.-Y. Le Boudec, "MPTCP is not Pareto-optimal: performance issues and a
//! possible solution", IEEE/ACM Transactions on Networking 21(5), 2013
//! (<https://doi.org/10.1109/TNET.2013.2274462>), also specified in
//! <https://datatracker.ietf.org/doc/html/draft-khalili-mptcp-congestion-control-05>.
//!
//! Neither text is vendored in the project, so the comments below cite them and paraphrase
//! rather than quote. "Section 5" refers to the paper's section defining OLIA and
//! "section 3" to the draft's algorithm description.
//!
//! See [`Olia`] for the algorithm.

use super::coupled::{Registry, lock, rtt_secs};
use super::new_reno::{AckAction, RenoCore};
use super::{CongestionController, CongestionEvent, CongestionMetrics, ControllerFactory};
use crate::recovery::RttEstimator;
use crate::shared::PathId;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What an OLIA controller publishes to the other paths of its connection.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Subflow {
    /// w_r, bytes.
    window: f64,
    /// rtt_r, seconds (the smoothed RTT).
    rtt: f64,
    /// l_r, bytes.
    inter_loss: f64,
}

impl Subflow {
    /// `l_r / rtt_r^2`, the quality that defines the set of best paths.
    fn quality(&self) -> f64 {
        self.inter_loss / (self.rtt * self.rtt)
    }
}

type Shared = Arc<Mutex<Registry<Subflow>>>;

/// The factory of coupled [`Olia`] controllers for **one connection**.
///
/// Every controller this factory builds joins the same shared state, so give each
/// connection its own factory (a factory shared by several connections would couple all
/// of their paths into one). A controller leaves the shared state when it is dropped, i.e.
/// when its path is closed.
#[derive(Debug, Default)]
pub struct OliaFactory {
    shared: Shared,
    initial_window: Option<u64>,
}

impl OliaFactory {
    /// A factory with fresh shared state and the RFC 9002 initial window.
    pub fn new() -> Self {
        Self::default()
    }

    /// A factory with fresh shared state whose controllers start with `initial_window`
    /// bytes (`None` for the RFC 9002 value, [`super::initial_window`]).
    pub fn with_initial_window(initial_window: Option<u64>) -> Self {
        OliaFactory {
            shared: Shared::default(),
            initial_window,
        }
    }

    /// The number of live controllers (open paths) coupled by this factory.
    pub fn subflows(&self) -> usize {
        lock(&self.shared).len()
    }

    /// The current `alpha_r` of every live controller, in path order (for diagnostics;
    /// allocates).
    pub fn alphas(&self) -> Vec<(PathId, f64)> {
        let shared = lock(&self.shared);
        shared
            .iter()
            .map(|(&key, _)| (key.0, alpha_r(&shared, key)))
            .collect()
    }
}

impl ControllerFactory for OliaFactory {
    fn for_connection(&self) -> Option<std::sync::Arc<dyn ControllerFactory>> {
        Some(std::sync::Arc::new(OliaFactory::with_initial_window(
            self.initial_window,
        )))
    }

    fn build(
        &self,
        _now: Instant,
        path_id: PathId,
        max_datagram_size: u16,
    ) -> Box<dyn CongestionController> {
        Box::new(Olia::new(
            &self.shared,
            path_id,
            self.initial_window,
            max_datagram_size,
        ))
    }
}

/// `alpha_r` of the subflow `own` given all subflows.
///
//= https://doi.org/10.1109/TNET.2013.2274462
// Paraphrase (section 5, definition of alpha_r): with M the paths of largest window and B
// the presumably best paths, alpha_r is (1/|R_u|)/|B\M| for the best paths that do not
// have the largest window, -(1/|R_u|)/|M| for the paths of largest window when B\M is
// not empty, and 0 otherwise.
fn alpha_r(shared: &Registry<Subflow>, own: (PathId, u64)) -> f64 {
    let (mut max_window, mut best_quality) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for s in shared.values() {
        max_window = max_window.max(s.window);
        best_quality = best_quality.max(s.quality());
    }
    let (mut in_m, mut best_not_m) = (0usize, 0usize);
    let (mut own_in_m, mut own_best_not_m) = (false, false);
    for (&key, s) in shared.iter() {
        let m = s.window == max_window;
        let b = s.quality() == best_quality;
        in_m += usize::from(m);
        best_not_m += usize::from(b && !m);
        if key == own {
            own_in_m = m;
            own_best_not_m = b && !m;
        }
    }
    if best_not_m == 0 {
        return 0.0;
    }
    let n = shared.len() as f64;
    if own_best_not_m {
        1.0 / n / best_not_m as f64
    } else if own_in_m {
        -1.0 / n / in_m as f64
    } else {
        0.0
    }
}

/// An OLIA controller for one path (Khalili et al., "MPTCP is not Pareto-optimal:
/// performance issues and a possible solution", IEEE/ACM ToN 2013, section 5; see the
/// module source for citations); built by [`OliaFactory`].
///
/// Every path runs its own NewReno-style state machine (slow start, one window halving
/// per recovery period, persistent congestion, as in RFC 9002 Appendix B); the
/// congestion-avoidance increase of path `r`, per acknowledged packet of `bytes_acked`
/// bytes, is
///
/// ```text
/// MSS_r * bytes_acked * ( (w_r / rtt_r^2) / (sum_p w_p / rtt_p)^2  +  alpha_r / w_r )
/// ```
///
/// (the paper's per-ACK increase in packets, scaled to byte windows), where:
///
/// - `w_p` are the windows and `rtt_p` the smoothed RTTs of all paths of the connection;
/// - `l_r = max(l1_r, l2_r)`, with `l1_r` the bytes successfully delivered on path `r`
///   between its last two losses and `l2_r` the bytes delivered since its last loss (a
///   "loss" is a congestion event that reduced the window, i.e. one per recovery period);
/// - `M` is the set of paths with the largest window and `B` the set of presumably best
///   paths, those with the largest `l_r / rtt_r^2` (the paths where a TCP flow would get
///   the most throughput, since TCP throughput goes as `sqrt(1/p)/rtt` and `l ~ 1/p`);
/// - `alpha_r = (1/n) / |B \ M|` for `r` in `B \ M`, `-(1/n) / |M|` for `r` in `M` when
///   `B \ M` is not empty, and 0 otherwise, `n` being the number of paths.
///
/// The first term alone is the fully coupled, Pareto-optimal increase; the `alpha_r` term
/// moves window from the paths that have the largest windows but are not the best to the
/// best paths that do not yet have the largest windows, which keeps OLIA responsive to
/// changes of the network, while the `alpha_r` sum to zero (so the total stays
/// TCP-friendly).
#[derive(Debug)]
pub struct Olia {
    core: RenoCore,
    shared: Shared,
    key: (PathId, u64),
    /// l1_r: bytes delivered between the last two losses.
    between_losses: u64,
    /// l2_r: bytes delivered since the last loss.
    since_loss: u64,
    /// The alpha_r used by the latest congestion-avoidance increase.
    alpha: f64,
}

impl Olia {
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
                inter_loss: 0.0,
            },
        );
        Olia {
            core,
            shared: Arc::clone(shared),
            key,
            between_losses: 0,
            since_loss: 0,
            alpha: 0.0,
        }
    }

    /// The `alpha_r` used by this path's latest congestion-avoidance increase.
    pub fn alpha_r(&self) -> f64 {
        self.alpha
    }

    /// `l_r = max(l1_r, l2_r)`: the larger of the bytes delivered between the last two
    /// losses and the bytes delivered since the last loss.
    ///
    //= https://doi.org/10.1109/TNET.2013.2274462
    // Paraphrase (section 5): l_r is estimated as the maximum of the bytes successfully
    // transmitted between the last two losses on path r and the bytes successfully
    // transmitted since the last loss.
    pub fn inter_loss_bytes(&self) -> u64 {
        self.between_losses.max(self.since_loss)
    }

    /// Publishes this path's window and `l_r` to the shared state.
    fn publish(&self, shared: &mut Registry<Subflow>) {
        if let Some(entry) = shared.get_mut(self.key) {
            entry.window = self.core.window_f64();
            entry.inter_loss = self.inter_loss_bytes() as f64;
        }
    }
}

impl Drop for Olia {
    /// The path is closed: it no longer takes part in the coupling.
    fn drop(&mut self) {
        lock(&self.shared).remove(self.key);
    }
}

impl CongestionController for Olia {
    fn name(&self) -> &str {
        "olia"
    }

    fn on_ack(
        &mut self,
        _now: Instant,
        sent_time: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.since_loss = self.since_loss.saturating_add(bytes);
        let action = self.core.on_ack(sent_time, bytes, app_limited);
        let mut shared = lock(&self.shared);
        if let Some(entry) = shared.get_mut(self.key) {
            entry.rtt = rtt_secs(rtt.smoothed());
        }
        self.publish(&mut shared);
        if action != AckAction::CongestionAvoidance {
            return;
        }
        //= https://doi.org/10.1109/TNET.2013.2274462
        // Paraphrase (section 5, OLIA): for each ACK on path r, increase w_r by
        // (w_r/rtt_r^2) / (sum_p w_p/rtt_p)^2 + alpha_r / w_r (packets); for each loss on
        // path r, decrease w_r by w_r / 2.
        let mut sum = 0.0;
        let mut own_rtt = 0.0;
        for (&key, s) in shared.iter() {
            sum += s.window / s.rtt;
            if key == self.key {
                own_rtt = s.rtt;
            }
        }
        let w = self.core.window_f64();
        let alpha = alpha_r(&shared, self.key);
        let acked = bytes as f64;
        let mss = self.core.mss();
        let coupled = if sum > 0.0 && own_rtt > 0.0 {
            (w / (own_rtt * own_rtt)) / (sum * sum)
        } else {
            1.0 / w
        };
        self.alpha = alpha;
        self.core.add(mss * acked * (coupled + alpha / w));
        self.publish(&mut shared);
    }

    fn on_congestion_event(&mut self, now: Instant, event: &CongestionEvent) {
        //= https://datatracker.ietf.org/doc/html/draft-khalili-mptcp-congestion-control-05#section-3
        // Paraphrase: OLIA keeps TCP's slow start, fast retransmit and fast recovery, and
        // halves a path's window on a loss on that path.
        if self.core.on_congestion_event(now, event) {
            // A new loss: the bytes since the previous loss become l1_r.
            self.between_losses = self.since_loss;
            self.since_loss = 0;
        }
        self.publish(&mut lock(&self.shared));
    }

    fn on_spurious_congestion(&mut self, _now: Instant) {
        if self.core.on_spurious_congestion() {
            self.publish(&mut lock(&self.shared));
        }
    }

    fn on_mtu_update(&mut self, max_datagram_size: u16) {
        self.core.on_mtu_update(max_datagram_size);
        self.publish(&mut lock(&self.shared));
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
        self.publish(&mut lock(&self.shared));
    }

    fn metrics(&self) -> CongestionMetrics {
        self.core.metrics(vec![
            ("alpha_r", self.alpha),
            ("inter_loss_bytes", self.inter_loss_bytes() as f64),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::test_net::{Net, PathSpec};
    use crate::cc::test_util::{identical_paths_growth, lose, steady_rtt, window_round};
    use crate::cc::{LiaFactory, NewRenoConfig};
    use std::time::Duration;

    const MDS: u16 = 1200;
    const M: u64 = MDS as u64;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn alpha_r_worked_example() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(50));
        let f = OliaFactory::new();
        let mut ccs: Vec<_> = (0..3).map(|i| f.build(t0, PathId(i), MDS)).collect();
        // Congestion avoidance everywhere; windows 10, 20, 20 packets; path 0 has seen
        // 100 packets since its last loss, the others 5: path 0 is the best path, paths 1
        // and 2 have the largest windows.
        for (cc, (w, delivered)) in ccs.iter_mut().zip([(10, 100), (20, 5), (20, 5)]) {
            lose(&mut **cc, t0, t0, M);
            cc.set_window(w * M);
            for _ in 0..delivered {
                // Application-limited: counts the delivery and the RTT, no growth.
                cc.on_ack(t0, t0, M, true, &rtt);
            }
        }
        let alphas: Vec<f64> = f.alphas().iter().map(|&(_, a)| a).collect();
        assert!(close(alphas[0], 1.0 / 3.0), "{alphas:?}");
        assert!(close(alphas[1], -1.0 / 6.0) && close(alphas[2], -1.0 / 6.0));
        assert!(close(alphas.iter().sum(), 0.0));
        // One acknowledgment on path 0: (w/rtt^2)/(sum w/rtt)^2 = 10/(50^2 M) = 0.004/M,
        // plus alpha/w = 1/(30 M): the window grows by (0.004 + 1/30) M, about 44.8 bytes.
        let t1 = t0 + ms(1);
        ccs[0].on_ack(t1, t1, M, false, &rtt);
        let grown = ccs[0].window() - 10 * M;
        assert_eq!(grown, ((0.004 + 1.0 / 30.0) * M as f64) as u64);
        assert_eq!(ccs[0].metrics().extra[0].0, "alpha_r");
        assert!(close(ccs[0].metrics().extra[0].1, 1.0 / 3.0));
        // Path 0 now has the largest window as well: B \ M is empty, all alphas are 0.
        ccs[0].set_window(30 * M);
        assert!(f.alphas().iter().all(|&(_, a)| a == 0.0));
        // Equal l/rtt^2 everywhere (101 packets delivered on each path): all three are
        // best, path 0 alone has the largest window, so the other two gain (1/3)/2 each
        // and path 0 loses 1/3.
        for (cc, extra) in ccs.iter_mut().zip([0, 96, 96]) {
            for _ in 0..extra {
                cc.on_ack(t0, t0, M, true, &rtt);
            }
        }
        let alphas: Vec<f64> = f.alphas().iter().map(|&(_, a)| a).collect();
        assert!(close(alphas[0], -1.0 / 3.0), "{alphas:?}");
        assert!(close(alphas[1], 1.0 / 6.0) && close(alphas[2], 1.0 / 6.0));
        // Closing a path removes it from the coupling.
        ccs.truncate(1);
        assert_eq!(f.subflows(), 1);
        assert_eq!(f.alphas(), vec![(PathId(0), 0.0)]);
    }

    #[test]
    fn inter_loss_distance_tracks_the_last_two_losses() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(50));
        let f = OliaFactory::new();
        let mut cc = Olia::new(&f.shared, PathId(0), None, MDS);
        for _ in 0..30 {
            cc.on_ack(t0, t0, M, true, &rtt);
        }
        assert_eq!(cc.inter_loss_bytes(), 30 * M);
        lose(&mut cc, t0 + ms(10), t0 + ms(5), M);
        // l1 = 30 packets, l2 = 0.
        assert_eq!(cc.inter_loss_bytes(), 30 * M);
        // A loss inside the recovery period is not a new loss.
        lose(&mut cc, t0 + ms(11), t0 + ms(6), M);
        for _ in 0..10 {
            cc.on_ack(t0 + ms(20), t0 + ms(15), M, true, &rtt);
        }
        assert_eq!(cc.inter_loss_bytes(), 30 * M);
        lose(&mut cc, t0 + ms(30), t0 + ms(25), M);
        // l1 = 10 packets, l2 = 0.
        assert_eq!(cc.inter_loss_bytes(), 10 * M);
        for _ in 0..12 {
            cc.on_ack(t0 + ms(40), t0 + ms(35), M, true, &rtt);
        }
        assert_eq!(cc.inter_loss_bytes(), 12 * M);
        assert_eq!(
            cc.metrics().extra,
            vec![("alpha_r", 0.0), ("inter_loss_bytes", (12 * M) as f64)]
        );
    }

    #[test]
    fn single_path_behaves_like_reno() {
        let t0 = Instant::now();
        let rtt = steady_rtt(t0, ms(100));
        let f = OliaFactory::new();
        let mut cc = f.build(t0, PathId(0), MDS);
        let mut now = t0;
        for round in 1..=3 {
            now = window_round(&mut *cc, now, &rtt, M);
            assert_eq!(cc.window(), 12_000 << round);
        }
        lose(&mut *cc, now, now - ms(10), M);
        assert_eq!(cc.window(), 48_000);
        let start = cc.window();
        for _ in 0..20 {
            now = window_round(&mut *cc, now + ms(1), &rtt, M);
        }
        let per_rtt = (cc.window() - start) as f64 / 20.0 / M as f64;
        assert!((0.95..=1.0).contains(&per_rtt), "{per_rtt}");
        assert_eq!(cc.name(), "olia");
    }

    #[test]
    fn two_identical_paths_add_half_an_mss_per_rtt() {
        let f = OliaFactory::new();
        let (a, b, per_rtt) = identical_paths_growth(&f, MDS);
        assert!((0.45..=0.55).contains(&per_rtt), "{per_rtt}");
        // Total growth never exceeds one MSS per RTT, and the windows stay balanced.
        assert!(a.window().abs_diff(b.window()) <= 2 * M);
    }

    /// Delivered bytes per path of an OLIA (or LIA) connection over two paths with loss
    /// probabilities `p0` then `p1`, after `secs`; the loss rates swap after `swap_after`
    /// seconds if given. Returns (first part, second part) per path.
    fn two_paths(
        coupled: &dyn ControllerFactory,
        p: (f64, f64),
        secs: u64,
        swap_after: Option<u64>,
    ) -> ([f64; 2], [f64; 2]) {
        let mut net = Net::new(vec![(p.0, 11), (p.1, 12)]);
        let t0 = net.now;
        net.add_path(
            coupled.build(t0, PathId(0), MDS),
            PathSpec::lossy(ms(40), 0),
        );
        net.add_path(
            coupled.build(t0, PathId(1), MDS),
            PathSpec::lossy(ms(40), 1),
        );
        let first = swap_after.unwrap_or(secs);
        net.run_for(Duration::from_secs(first));
        let part1 = [net.paths[0].delivered as f64, net.paths[1].delivered as f64];
        if swap_after.is_some() {
            net.bottlenecks[0].loss = p.1;
            net.bottlenecks[1].loss = p.0;
            net.run_for(Duration::from_secs(secs - first));
        }
        let part2 = [
            net.paths[0].delivered as f64 - part1[0],
            net.paths[1].delivered as f64 - part1[1],
        ];
        (part1, part2)
    }

    fn reno_alone(p: f64, secs: u64) -> f64 {
        let mut net = Net::new(vec![(p, 12)]);
        net.add_path(
            NewRenoConfig::default().build(net.now, PathId(0), MDS),
            PathSpec::lossy(ms(40), 0),
        );
        net.run_for(Duration::from_secs(secs));
        net.paths[0].delivered as f64
    }

    /// Two paths, one ten times lossier: OLIA keeps less traffic on the congested path
    /// than LIA does (the paper's case that LIA is not Pareto-optimal: traffic on the
    /// congested path costs others more than it gains) while its total stays at least
    /// that of TCP on the best path.
    #[test]
    fn shifts_traffic_to_the_less_congested_path() {
        let secs = 300;
        for p in [(0.01, 0.001), (0.004, 0.001)] {
            let (olia, _) = two_paths(&OliaFactory::new(), p, secs, None);
            let (lia, _) = two_paths(&LiaFactory::new(), p, secs, None);
            let olia_share = olia[0] / (olia[0] + olia[1]);
            let lia_share = lia[0] / (lia[0] + lia[1]);
            assert!(
                olia_share < 0.8 * lia_share,
                "{p:?}: congested-path share OLIA {olia_share} LIA {lia_share}"
            );
            let best = reno_alone(p.1, secs);
            let total = (olia[0] + olia[1]) / best;
            assert!(
                (0.85..=1.25).contains(&total),
                "{p:?}: OLIA / best TCP {total}"
            );
        }
    }

    /// Responsiveness: when the loss rates of the two paths swap, OLIA moves its traffic
    /// to the path that is now the better one.
    #[test]
    fn responds_when_the_better_path_changes() {
        let (before, after) = two_paths(&OliaFactory::new(), (0.01, 0.001), 400, Some(200));
        assert!(before[1] > 3.0 * before[0], "{before:?}");
        assert!(after[0] > 2.0 * after[1], "{after:?}");
    }

    /// At a shared bottleneck two OLIA subflows get about what one Reno flow gets and
    /// about half of what two uncoupled Reno flows get.
    #[test]
    fn shared_bottleneck_no_more_aggressive_than_tcp() {
        for (p, seed) in [(0.004, 3), (0.001, 4)] {
            let spec = PathSpec::lossy(ms(40), 0);
            let run = |ccs: Vec<Box<dyn CongestionController>>| -> f64 {
                let mut net = Net::new(vec![(p, seed)]);
                for cc in ccs {
                    net.add_path(cc, spec);
                }
                net.run_for(Duration::from_secs(200));
                net.paths.iter().map(|p| p.delivered as f64).sum()
            };
            let t0 = Instant::now();
            let reno = || NewRenoConfig::default().build(t0, PathId(0), MDS);
            let one = run(vec![reno()]);
            let two = run(vec![reno(), reno()]);
            let f = OliaFactory::new();
            let olia = run(vec![
                f.build(t0, PathId(0), MDS),
                f.build(t0, PathId(1), MDS),
            ]);
            assert!(
                (0.85..=1.15).contains(&(olia / one)),
                "OLIA / Reno {}",
                olia / one
            );
            assert!(olia / two <= 0.6, "OLIA / two Reno {}", olia / two);
        }
    }

    #[test]
    fn undo_mtu_and_persistent_congestion() {
        let t0 = Instant::now();
        let f = OliaFactory::new();
        let mut a = f.build(t0, PathId(0), MDS);
        a.on_mtu_update(1452);
        assert_eq!(a.window(), 14_520);
        a.set_window(100 * 1452);
        lose(&mut *a, t0, t0, 1452);
        assert_eq!(a.window(), 50 * 1452);
        a.on_spurious_congestion(t0 + ms(1));
        assert_eq!(a.window(), 100 * 1452);
        a.on_congestion_event(
            t0 + ms(200),
            &CongestionEvent {
                sent_time: t0 + ms(100),
                lost_bytes: 1452,
                persistent_congestion: true,
                ecn: false,
            },
        );
        assert_eq!(a.window(), 2 * 1452);
        assert_eq!(a.metrics().persistent_congestion_events, 1);
        drop(a);
        assert_eq!(f.subflows(), 0);
    }
}
