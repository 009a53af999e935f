//! `polypath sim run SCENARIO --events FILE` writes the radio model's link-layer event
//! stream as JSON lines, and the file reads back into `polypath-link` types.

use polypath_link::LinkEventKind;
use polypath_link::jsonl::JsonLinesReader;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::Command;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn handover_scenario_event_stream_reads_back() {
    let dir = std::env::temp_dir().join(format!("polypath-events-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let events = dir.join("events.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_polypath"))
        .args(["sim", "run"])
        .arg(repo_root().join("scenarios/handover-two-gnb.toml"))
        .arg("--events")
        .arg(&events)
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let file = std::fs::File::open(&events).unwrap();
    let parsed: Vec<_> = JsonLinesReader::new(BufReader::new(file))
        .collect::<Result<_, _>>()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    let count = |pred: fn(&LinkEventKind) -> bool| parsed.iter().filter(|e| pred(&e.event)).count();
    let measurements = count(|k| matches!(k, LinkEventKind::Measurement { .. }));
    let reports = count(|k| matches!(k, LinkEventKind::MeasurementReport { .. }));
    let commands = count(|k| matches!(k, LinkEventKind::HandoverCommand { .. }));
    let access = count(|k| matches!(k, LinkEventKind::RandomAccessComplete { .. }));
    println!(
        "{} events: {measurements} measurements, {reports} reports, {commands} handover commands, {access} random-access completions",
        parsed.len()
    );
    assert!(measurements > 0 && reports > 0);
    assert!(commands >= 1, "the UE crosses from one gNB to the other");
    // Random access also completes at initial attach and at SN addition.
    assert!(access >= commands, "every handover completes random access");
    assert!(
        parsed.windows(2).all(|w| w[0].t_ns <= w[1].t_ns),
        "events in time order"
    );
}
