//! The whole interop matrix against noq over loopback UDP, and the binary's output
//! contract.

use std::process::Command;

use polypath_interop::{Case, DIRECTIONS, MatrixOptions, run_matrix};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_passes_in_both_directions() {
    let report = run_matrix(&MatrixOptions::default()).await;
    println!("{}", report.to_table());
    assert_eq!(report.cases.len(), Case::ALL.len() * DIRECTIONS.len());
    for case in Case::ALL {
        for (client, server) in DIRECTIONS {
            let row = report
                .cases
                .iter()
                .find(|r| r.case == case.name() && r.client == client && r.server == server)
                .unwrap_or_else(|| panic!("no row for {} {client}->{server}", case.name()));
            assert!(
                row.ok,
                "{} ({client} client, {server} server) failed: {}",
                case.name(),
                row.detail
            );
        }
    }
}

#[test]
fn json_flag_prints_one_object_and_exit_code_follows_the_result() {
    let exe = env!("CARGO_BIN_EXE_polypath-interop");
    let out = Command::new(exe)
        .args(["--json", "--case", "handshake", "--case", "close"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.trim().lines().count(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    for c in cases {
        assert_eq!(c["ok"], true, "{c}");
        assert!(c["detail"].as_str().is_some_and(|d| !d.is_empty()));
    }
    let clients: Vec<_> = cases
        .iter()
        .map(|c| c["client"].as_str().unwrap())
        .collect();
    assert!(clients.contains(&"polypath") && clients.contains(&"noq"));

    // A timeout of zero fails every case: the exit status must say so.
    let out = Command::new(exe)
        .args(["--json", "--case", "handshake", "--case-timeout", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["cases"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["ok"] == false)
    );
}

/// `interop/runner/run_endpoint.sh` passes shellcheck (installed by `make test`'s
/// system-deps; without it the check is skipped, saying so).
#[test]
fn run_endpoint_sh_passes_shellcheck() {
    let options = polypath_interop::runner::HarnessOptions::for_this_checkout();
    match Command::new("shellcheck").arg(&options.script).output() {
        Ok(out) => assert!(
            out.status.success(),
            "shellcheck {}:\n{}",
            options.script.display(),
            String::from_utf8_lossy(&out.stdout)
        ),
        Err(e) => eprintln!("shellcheck not run ({e}): install it (make system-deps)"),
    }
}

/// The runner's endpoint contract on loopback, both directions against noq: every case
/// the script supports passes, the others exit with 127; v2 and connectionmigration also
/// run polypath against polypath (noq has no QUIC v2: its rows are unsupported by the
/// peer; noq's client does not move to a preferred address: that row is too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_contract_holds_against_noq_both_ways() {
    use polypath_interop::Stack;
    use polypath_interop::runner::{CASES, HarnessOptions, Outcome, run_harness, table};
    let options = HarnessOptions::for_this_checkout();
    assert!(
        options.polypath.is_file(),
        "no polypath binary at {} (cargo build -p polypath)",
        options.polypath.display()
    );
    let rows = run_harness(&options).await;
    println!("{}", table(&rows));
    // v2 and connectionmigration also run polypath against polypath.
    assert_eq!(rows.len(), CASES.len() * 2 + 2);
    let unsupported = ["http3"];
    for row in &rows {
        match &row.outcome {
            Outcome::Unsupported => assert!(
                unsupported.contains(&row.case.as_str()),
                "{} reported unsupported",
                row.case
            ),
            Outcome::Ok(_) => assert!(
                !unsupported.contains(&row.case.as_str()),
                "{} passed: update the expectations",
                row.case
            ),
            Outcome::PeerUnsupported(_) => assert!(
                (row.case == "v2" && (row.client == Stack::Noq || row.server == Stack::Noq))
                    || (row.case == "connectionmigration" && row.client == Stack::Noq),
                "{} ({} client, {} server) unsupported by the peer",
                row.case,
                row.client,
                row.server
            ),
            Outcome::Fail(why) => panic!(
                "{} ({} client, {} server) failed: {why}",
                row.case, row.client, row.server
            ),
        }
    }
}
