//! Must-show 2: the LAMP5G handover geometry (two gNBs 400 m apart, 250 m radius, UE at
//! 8.3 m/s from one to the other). The A3 event and the handover happen inside the 100 m
//! overlap; an A4 event (target above threshold) comes before it and an A2 (serving below
//! threshold) after it. Run with `--nocapture` to see the event times.

mod common;
use common::*;
use polypath_link::{CellId, DownReason, LinkEventKind, MeasEvent};

const SPEED: f64 = 8.3;

#[test]
fn lamp5g_events_in_order_inside_the_overlap() {
    let cfg = load_radio("handover-two-gnb.toml");
    let out = run(&cfg, 1, 50.0);
    let evs = events(&out);
    let x = |t: u64| secs(t) * SPEED;

    // UE 0: single connectivity, break-before-make A3 handover.
    let a4 = first(&evs, 0, |k| {
        matches!(
            k,
            LinkEventKind::RrcEventEntered {
                event: MeasEvent::A4,
                cell: Some(CellId(2)),
                ..
            }
        )
    })
    .expect("A4 on the target");
    let a3 = first(&evs, 0, |k| {
        matches!(
            k,
            LinkEventKind::RrcEventEntered {
                event: MeasEvent::A3,
                cell: Some(CellId(2)),
                ..
            }
        )
    })
    .expect("A3");
    let report = first(&evs, 0, |k| {
        matches!(
            k,
            LinkEventKind::MeasurementReport {
                event: MeasEvent::A3,
                ..
            }
        )
    })
    .expect("A3 report");
    let cmd = first(&evs, 0, |k| {
        matches!(k, LinkEventKind::HandoverCommand { .. })
    })
    .expect("command");
    let exec = first(&evs, 0, |k| {
        matches!(k, LinkEventKind::HandoverExecution { .. })
    })
    .expect("exec");
    let ra = first(&evs, 0, |k| {
        matches!(k, LinkEventKind::RandomAccessComplete { cell: CellId(2) })
    })
    .expect("RA complete");
    // UE 1: NR-DC, inter-MN handover without SN change, then SN release on A2 and SN
    // addition on the target gNB.
    let mn_cmd = first(&evs, 1, |k| {
        matches!(
            k,
            LinkEventKind::HandoverCommand {
                keeps_sn: true,
                target: CellId(2),
                ..
            }
        )
    })
    .expect("inter-MN handover without SN change");
    let mn_ra = first(&evs, 1, |k| {
        matches!(k, LinkEventKind::RandomAccessComplete { cell: CellId(2) })
    })
    .expect("MN RA");
    let a2 = first(&evs, 1, |k| {
        matches!(
            k,
            LinkEventKind::RrcEventEntered {
                event: MeasEvent::A2,
                serving: CellId(11),
                ..
            }
        )
    })
    .expect("A2 on the source SN");
    let sn_rel = first(&evs, 1, |k| {
        matches!(k, LinkEventKind::SnRelease { cell: CellId(11) })
    })
    .expect("SN release");
    let sn_add = evs
        .iter()
        .find(|e| {
            e.ue == 1 && e.t_ns > sn_rel.t_ns && matches!(e.event, LinkEventKind::SnAddition { .. })
        })
        .expect("SN addition after release");

    println!("event                          t (s)    x (m)");
    for (name, t) in [
        ("UE0 A4 entered (cell 2)", a4.t_ns),
        ("UE0 A3 entered (cell 2)", a3.t_ns),
        ("UE0 A3 measurement report", report.t_ns),
        ("UE0 handover command", cmd.t_ns),
        ("UE0 handover execution", exec.t_ns),
        ("UE0 random access complete", ra.t_ns),
        ("UE1 MN handover (keep SN) cmd", mn_cmd.t_ns),
        ("UE1 MN random access complete", mn_ra.t_ns),
        ("UE1 A2 entered on SN (cell 11)", a2.t_ns),
        ("UE1 SN release", sn_rel.t_ns),
        ("UE1 SN addition", sn_add.t_ns),
    ] {
        println!("{name:<31}{:>6.2}  {:>7.1}", secs(t), x(t));
    }

    let overlap = 150.0..=250.0;
    assert!(overlap.contains(&x(a3.t_ns)), "A3 at x = {}", x(a3.t_ns));
    assert!(
        overlap.contains(&x(exec.t_ns)),
        "execution at x = {}",
        x(exec.t_ns)
    );
    assert!(overlap.contains(&x(ra.t_ns)));
    assert!(a4.t_ns < a3.t_ns, "A4 before A3");
    assert!(
        a3.t_ns < report.t_ns + 1
            && report.t_ns < cmd.t_ns
            && cmd.t_ns < exec.t_ns
            && exec.t_ns < ra.t_ns
    );
    assert!(ra.t_ns < a2.t_ns, "A2 after the handover");
    // Report -> execution within M2HO's measured range; interruption as configured.
    let r2e = secs(exec.t_ns - report.t_ns) * 1e3;
    assert!((32.7..=330.0).contains(&r2e), "{r2e} ms");
    let intr = secs(ra.t_ns - exec.t_ns) * 1e3;
    assert!((12.0..=42.0).contains(&intr), "{intr} ms");
    // UE 0's link was down only between execution and random access.
    let downs: Vec<_> = evs
        .iter()
        .filter(|e| e.ue == 0 && matches!(e.event, LinkEventKind::LinkDown { .. }))
        .collect();
    assert_eq!(downs.len(), 1);
    assert!(matches!(
        downs[0].event,
        LinkEventKind::LinkDown {
            reason: DownReason::Handover,
            ..
        }
    ));
    // UE 1: the MN handover happens in the overlap and the SN path (iface 1) stays up through it.
    assert!(overlap.contains(&x(mn_cmd.t_ns)));
    assert!(!evs.iter().any(|e| e.ue == 1
        && e.iface == 1
        && e.t_ns <= mn_ra.t_ns
        && matches!(e.event, LinkEventKind::LinkDown { .. })));
    assert!(a2.t_ns < sn_rel.t_ns && sn_rel.t_ns < sn_add.t_ns);
}

#[test]
fn runs_are_deterministic() {
    let cfg = load_radio("handover-two-gnb.toml");
    assert_eq!(run(&cfg, 9, 40.0), run(&cfg, 9, 40.0));
}
