//! `polypath m2ho replay --buffer-db FILE`: the per-cell buffer estimates one run learns
//! from resource-block bursts are there for the next (M2HO Sec. 4.3, "the local
//! database"), and a damaged database is refused with the file and line named.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch directory of this test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("polypath-m2ho-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn replay(events: &Path, db: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_polypath"))
        .args(["m2ho", "replay"])
        .arg(events)
        .arg("--buffer-db")
        .arg(db)
        .output()
        .unwrap()
}

/// The estimates (cell ID → bytes) a successful replay printed.
fn estimates(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["stats"]["buffers"]["per_cell"].clone()
}

fn event(t_ms: u64, kind: &str, body: &str) -> String {
    format!(
        "{{\"t_ns\":{},\"ue\":0,\"iface\":0,\"event\":{{\"{kind}\":{body}}}}}\n",
        t_ms * 1_000_000
    )
}

fn measurement(t_ms: u64, cell: u32) -> String {
    let body = format!(
        "{{\"serving\":{cell},\"cells\":[{{\"cell\":{cell},\"rat\":\"nr_fr1\",\"rsrp_dbm\":-80.0,\"rsrq_db\":-10.0,\"sinr_db\":20.0}}]}}"
    );
    event(t_ms, "measurement", &body)
}

/// One slot's allocation on `cell`: `rbs` of 100 resource blocks, `bytes` delivered.
fn slot(t_ms: u64, cell: u32, slot: u64, rbs: u16, bytes: u32) -> String {
    let body = format!(
        "{{\"cell\":{cell},\"slot\":{slot},\"rbs\":{rbs},\"total_rbs\":100,\"bytes\":{bytes}}}"
    );
    event(t_ms, "rb_allocation", &body)
}

#[test]
fn the_buffer_database_carries_estimates_across_runs() {
    let dir = Scratch::new("db");
    let db = dir.0.join("buffers.json");

    // Run 1 serves cell 5 (sub-6) and sees one burst there: three full slots of 4000 bytes,
    // a partial one of 1000, then an empty one.
    let mut first = measurement(0, 5);
    for (i, (rbs, bytes)) in [(100, 4000), (100, 4000), (100, 4000), (20, 1000), (0, 0)]
        .into_iter()
        .enumerate()
    {
        first += &slot(1 + i as u64, 5, 10 + i as u64, rbs, bytes);
    }
    let run1 = dir.0.join("run1.jsonl");
    std::fs::write(&run1, first).unwrap();
    let learnt = estimates(&replay(&run1, &db));
    assert_eq!(learnt, serde_json::json!({"5": 13000}));
    let stored: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&db).unwrap()).unwrap();
    assert_eq!(
        stored,
        serde_json::json!({"cells": [{"cell": 5, "rat": "nr_fr1", "bytes": 13000}]})
    );

    // Run 2 serves another cell and sees no burst: cell 5's estimate comes from the
    // database, and the database keeps it.
    let run2 = dir.0.join("run2.jsonl");
    std::fs::write(&run2, measurement(0, 6)).unwrap();
    assert_eq!(
        estimates(&replay(&run2, &db)),
        serde_json::json!({"5": 13000})
    );
    let again: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&db).unwrap()).unwrap();
    assert_eq!(again, stored);

    // A damaged database stops the run before anything happens, naming file and line, and
    // is left as it was.
    let damaged = "{\"cells\": [\n  {\"cell\": 5, \"byte\": 13000}\n]}";
    std::fs::write(&db, damaged).unwrap();
    let out = replay(&run2, &db);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&db.display().to_string()) && err.contains("line 2") && err.contains("byte"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&db).unwrap(), damaged);
}
