//! The largest-cwnd scheduler alone, in `polypath_quic::testing::scheduler`'s closed-loop
//! simulation (no connection): the harness an outside author tests a scheduler with.

use polypath_example_largest_cwnd::LargestCwnd;
use polypath_quic::sched::{MinRtt, PathStatus};
use polypath_quic::testing::scheduler::Sim;

/// Path 0: 10 ms RTT, 10-packet window; path 1: 40 ms, 80-packet window.
fn two_paths() -> Sim {
    Sim::new(&[(10, 10), (40, 80)])
}

#[test]
fn every_packet_goes_on_the_largest_window() {
    let mut sim = two_paths();
    assert_eq!(sim.run(&mut LargestCwnd, 500), 500);
    assert_eq!((sim.sent(0), sim.sent(1)), (0, 500));
    // Minimum RTT, on the same paths, keeps the fast path busy and spills to the other.
    let mut sim = two_paths();
    sim.run(&mut MinRtt, 500);
    assert!(
        sim.sent(0) > 0 && sim.sent(1) > 0,
        "{} {}",
        sim.sent(0),
        sim.sent(1)
    );
}

#[test]
fn a_full_window_means_waiting_not_spilling() {
    let mut sim = two_paths();
    // Fill path 1's window: the next decisions wait for its acknowledgments.
    for _ in 0..80 {
        assert_eq!(sim.step(&mut LargestCwnd), 1);
    }
    assert_eq!(sim.step(&mut LargestCwnd), 0);
    assert_eq!(sim.sent(0), 0);
}

#[test]
fn backup_paths_are_left_out_while_another_works() {
    let mut sim = two_paths();
    sim.paths[1].snap.local_status = PathStatus::Backup;
    sim.run(&mut LargestCwnd, 200);
    assert_eq!((sim.sent(0), sim.sent(1)), (200, 0));
}

#[test]
fn a_transfer_completes() {
    let mut sim = two_paths();
    let took = sim.transfer(&mut LargestCwnd, 1_200_000);
    // 1000 packets, 80 per 40 ms round trip: 13 rounds.
    assert_eq!(took.as_millis(), 13 * 40);
}
