//! A congestion controller written outside polypath, plugged in through the public
//! [`ControllerFactory`] trait, and driven by the per-path recovery building blocks over a
//! synthetic path (virtual time, 40 ms RTT, every fiftieth packet dropped).
//!
//! Run with `cargo run -p polypath-quic --example custom_controller`.

use polypath_quic::PathId;
use polypath_quic::cc::{
    CongestionController, CongestionEvent, ControllerFactory, CubicConfig, minimum_window,
};
use polypath_quic::recovery::{
    DeliveryRateEstimator, K_INITIAL_RTT, Pacer, PacerConfig, RttEstimator, SentPacket, SpaceKind,
    SpaceRecovery,
};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A deliberately simple controller: a constant window that halves on loss (once per
/// recovery period) and is restored after ten clean acknowledgments.
struct FixedWindow {
    target: u64,
    window: u64,
    min: u64,
    recovery_start: Option<Instant>,
    clean_acks: u32,
}

impl CongestionController for FixedWindow {
    fn name(&self) -> &str {
        "fixed_window"
    }

    fn on_ack(
        &mut self,
        _now: Instant,
        sent: Instant,
        _bytes: u64,
        _app: bool,
        _rtt: &RttEstimator,
    ) {
        if self.recovery_start.is_some_and(|start| sent <= start) {
            return;
        }
        self.clean_acks += 1;
        if self.clean_acks >= 10 {
            self.window = self.target;
        }
    }

    fn on_congestion_event(&mut self, now: Instant, event: &CongestionEvent) {
        if self
            .recovery_start
            .is_some_and(|start| event.sent_time <= start)
        {
            return;
        }
        self.recovery_start = Some(now);
        self.clean_acks = 0;
        self.window = (self.window / 2).max(self.min);
        if event.persistent_congestion {
            self.window = self.min;
        }
    }

    fn on_mtu_update(&mut self, max_datagram_size: u16) {
        self.min = minimum_window(max_datagram_size);
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn ssthresh(&self) -> Option<u64> {
        None
    }

    fn in_slow_start(&self) -> bool {
        false
    }

    fn set_window(&mut self, bytes: u64) {
        self.window = bytes.max(self.min);
    }
}

/// Builds a [`FixedWindow`] of `packets` datagrams for every path.
struct FixedWindowFactory {
    packets: u64,
}

impl ControllerFactory for FixedWindowFactory {
    fn build(&self, _now: Instant, _path: PathId, mds: u16) -> Box<dyn CongestionController> {
        let target = self.packets * u64::from(mds);
        Box::new(FixedWindow {
            target,
            window: target,
            min: minimum_window(mds),
            recovery_start: None,
            clean_acks: 0,
        })
    }
}

/// Sends `count` packets over the synthetic path with the controller built by `factory`.
fn run(factory: &dyn ControllerFactory, count: u64) {
    const MDS: u16 = 1200;
    let rtt_path = Duration::from_millis(40);
    let t0 = Instant::now(); // the driver owns the clock; the stack only gets times passed in
    let mut now = t0;
    let mut cc = factory.build(now, PathId::ZERO, MDS);
    let mut rtt = RttEstimator::new(K_INITIAL_RTT);
    let mut space: SpaceRecovery<()> = SpaceRecovery::new(SpaceKind::ApplicationData);
    let mut pacer = Pacer::new(PacerConfig::default());
    let mut rate = DeliveryRateEstimator::new();
    // ACKs on their way back: (arrival time, acknowledged packet number).
    let mut acks: VecDeque<(Instant, u64)> = VecDeque::new();
    let (mut next_pn, mut lost_total) = (0u64, 0u64);

    // The loop ends when nothing is left to wait for; a dropped last packet stays
    // outstanding, since this example does not model the PTO.
    while next_pn < count || !acks.is_empty() {
        // Receive due ACKs, one frame per packet.
        while let Some(&(at, pn)) = acks.front().filter(|(at, _)| *at <= now) {
            acks.pop_front();
            let outcome = space
                .on_ack_received(
                    at,
                    [pn..=pn],
                    Duration::ZERO,
                    &mut rtt,
                    Duration::ZERO,
                    true,
                )
                .expect("only sent packets are acknowledged");
            if let Some(sent_time) = outcome.lost.newest_in_flight_sent_time() {
                let persistent = outcome.lost.in_persistent_congestion(&rtt, Duration::ZERO);
                cc.on_congestion_event(
                    at,
                    &CongestionEvent {
                        sent_time,
                        lost_bytes: outcome.lost.in_flight_bytes(),
                        persistent_congestion: persistent,
                        ecn: false,
                    },
                );
            }
            for lost in &outcome.lost {
                rate.on_packet_lost(&lost.packet);
                lost_total += 1;
            }
            for (_, packet) in &outcome.acked {
                rate.on_packet_acked(at, packet);
                cc.on_ack(at, packet.time_sent, u64::from(packet.size), false, &rtt);
            }
            let sample = rate.generate_sample(rtt.min());
            cc.on_ack_batch_end(at, space.bytes_in_flight(), &rtt, sample.as_ref());
        }
        if space.loss_time().is_some_and(|t| t <= now) {
            lost_total += space.detect_lost(now, &rtt).len() as u64;
        }

        // Send while the window and the pacer allow.
        let mut next_wakeup: Option<Instant> = None;
        while next_pn < count && space.bytes_in_flight() + u64::from(MDS) <= cc.window() {
            let wait = pacer.delay_until(
                now,
                MDS.into(),
                MDS,
                cc.window(),
                rtt.smoothed(),
                cc.pacing_rate(),
                cc.send_quantum(),
            );
            if let Some(t) = wait {
                next_wakeup = Some(next_wakeup.map_or(t, |w| w.min(t)));
                break;
            }
            let stamp = rate.on_packet_sent(now, space.bytes_in_flight());
            let packet = SentPacket {
                time_sent: now,
                size: MDS,
                ack_eliciting: true,
                in_flight: true,
                delivery: Some(stamp),
                payload: (),
            };
            space.on_packet_sent(next_pn, packet);
            cc.on_packet_sent(now, u64::from(MDS), space.bytes_in_flight());
            pacer.on_sent(now, u64::from(MDS));
            if next_pn % 50 != 49 {
                acks.push_back((now + rtt_path, next_pn));
            }
            next_pn += 1;
        }
        for t in [acks.front().map(|&(at, _)| at), space.loss_time()]
            .into_iter()
            .flatten()
        {
            next_wakeup = Some(next_wakeup.map_or(t, |w| w.min(t)));
        }
        match next_wakeup {
            Some(t) => now = now.max(t),
            None => break,
        }
    }
    let m = cc.metrics();
    println!(
        "{:>12}: {} packets in {:?}, {} lost, {} outstanding, srtt {:?}, window {} B, max delivery rate {:?} B/s",
        cc.name(),
        count,
        now - t0,
        lost_total,
        space.outstanding_len(),
        rtt.smoothed(),
        m.window,
        rate.max_delivery_rate(),
    );
}

fn main() {
    run(&FixedWindowFactory { packets: 20 }, 2000);
    run(&CubicConfig::default(), 2000);
}
