//! Must-show 4 (radio side): the link-layer event stream of a scenario, including per-slot
//! RB allocations from a loaded link, is written as JSON lines and read back into
//! polypath-link types unchanged. (`polypath sim run ... --events events.jsonl` writes the
//! same stream once the simulator integrates the model.)

mod common;
use common::*;
use polypath_link::jsonl::{JsonLinesReader, JsonLinesWriter};
use polypath_link::{LinkEvent, LinkEventKind};
use polypath_ran::RadioOutput;
use polypath_ran::reflink::ReferenceLink;
use std::collections::BTreeSet;
use std::io::BufReader;

#[test]
fn event_stream_round_trips_through_json_lines() {
    let cfg = load_radio("handover-two-gnb.toml");
    let out = run(&cfg, 1, 35.0);
    let mut evs = events(&out);

    // RB allocations of UE 0's path during the first 200 ms with bursty traffic.
    let mut link = ReferenceLink::new(0, 0, 1);
    let mut id = 0;
    for o in &out {
        if let RadioOutput::Link(c) = o
            && c.ue == 0
            && c.iface == 0
            && c.t_ns <= 200_000_000
        {
            link.apply(c);
        }
    }
    for burst in 0..10u64 {
        for _ in 0..60 {
            link.enqueue(burst * 20_000_000, id, 1500);
            id += 1;
        }
    }
    link.run_until(200_000_000);
    assert!(!link.rb_events.is_empty());
    evs.extend(link.rb_events.iter().cloned());
    evs.sort_by_key(|e| e.t_ns);

    let path =
        std::env::temp_dir().join(format!("polypath-ran-events-{}.jsonl", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let mut w = JsonLinesWriter::new(std::io::BufWriter::new(file));
    for e in &evs {
        w.write(e).unwrap();
    }
    assert_eq!(w.written() as usize, evs.len());
    w.into_inner().unwrap();

    let back: Vec<LinkEvent> =
        JsonLinesReader::new(BufReader::new(std::fs::File::open(&path).unwrap()))
            .collect::<Result<_, _>>()
            .unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(back, evs);
    assert!(
        back.windows(2).all(|w| w[0].t_ns <= w[1].t_ns),
        "time order"
    );

    let kinds: BTreeSet<&str> = back.iter().map(|e| e.event.name()).collect();
    println!("{} events; kinds: {kinds:?}", back.len());
    for k in [
        "measurement",
        "rrc_event_entered",
        "measurement_report",
        "handover_command",
        "handover_execution",
        "random_access_complete",
        "sn_addition",
        "sn_release",
        "rb_allocation",
        "predicted_throughput",
        "link_up",
        "link_down",
    ] {
        assert!(kinds.contains(k), "missing {k}");
    }
    // A burst: fully allocated slots followed by a partial one.
    let rbs: Vec<(u16, u16)> = back
        .iter()
        .filter_map(|e| match e.event {
            LinkEventKind::RbAllocation { rbs, total_rbs, .. } => Some((rbs, total_rbs)),
            _ => None,
        })
        .collect();
    assert!(
        rbs.windows(2)
            .any(|w| w[0].0 == w[0].1 && w[1].0 > 0 && w[1].0 < w[1].1)
    );
}
