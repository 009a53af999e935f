//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use polypath_sim::scenario::Scenario;
use polypath_sim::{Hooks, QuicFactory, RunOptions, RunReport, TransferOutcome, run_scenario};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Parses scenario text as if it were a file in the repository's `scenarios/`
/// folder, so `../traces/...` paths resolve to the bundled traces.
pub fn scenario(src: &str) -> Scenario {
    match Scenario::parse(src, &repo().join("scenarios/inline-test.toml")) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

/// Runs with the built-in agents, no output directory.
pub fn run(s: &Scenario, seed: u64) -> RunReport {
    run_with_out(s, seed, None)
}

/// Runs with the built-in agents, writing to `out`.
pub fn run_with_out(s: &Scenario, seed: u64, out: Option<PathBuf>) -> RunReport {
    let opts = RunOptions {
        seed: Some(seed),
        out_dir: out,
        progress: false,
        events: None,
    };
    match run_scenario(s, &opts, Hooks::default()) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    }
}

/// A fresh temporary directory for one test.
pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("polypath-sim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Two hosts `a` and `b` on one link `l` with the given link body, plus flows.
pub fn pair(link: &str, flows: &str, sim: &str) -> String {
    format!(
        r#"
[sim]
{sim}

[output]
bin = "100ms"

[[host]]
name = "a"
interfaces = [{{ name = "e", addr = "10.0.0.1", link = "l", side = "a" }}]

[[host]]
name = "b"
interfaces = [{{ name = "e", addr = "10.0.0.2", link = "l", side = "b" }}]

[[link]]
name = "l"
{link}

{flows}
"#
    )
}

/// A client `c` and a server `s`, one interface each on every link (`name`, body), and the
/// given flows. Link `name` connects `10.0.<i+1>.1` (client) and `10.9.<i+1>.1` (server).
pub fn hosts_on_links(links: &[(&str, String)], flows: &str, duration: &str) -> String {
    let iface = |addr: &str| {
        links
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                format!(
                    "{{ name = \"{name}\", addr = \"10.{addr}.{}.1\", link = \"{name}\", side = \"{}\" }}",
                    i + 1,
                    if addr == "0" { "a" } else { "b" }
                )
            })
            .collect::<Vec<_>>()
            .join(",\n  ")
    };
    let link_text: String = links
        .iter()
        .map(|(name, body)| format!("[[link]]\nname = \"{name}\"\n{body}\n"))
        .collect();
    format!(
        "[sim]\nduration = \"{duration}\"\nstop_when_done = true\n[output]\nbin = \"100ms\"\n\
         [[host]]\nname = \"c\"\ninterfaces = [\n  {}\n]\n\
         [[host]]\nname = \"s\"\ninterfaces = [\n  {}\n]\n{link_text}\n{flows}",
        iface("0"),
        iface("9")
    )
}

/// What the delivery property tests (`quic_reliable.rs`, `reliable.rs`) do to every path.
#[derive(Debug, Clone)]
pub struct Impairments {
    /// Mean loss rate.
    pub loss: f64,
    /// Mean loss burst length (Gilbert-Elliott); none: Bernoulli loss.
    pub burst: Option<f64>,
    /// Jitter (ms).
    pub jitter_ms: u32,
    /// Whether jitter may reorder packets.
    pub reorder: bool,
    /// Duplication rate.
    pub duplicate: f64,
    /// When the first path goes down (ms).
    pub outage_at_ms: u32,
    /// How long it stays down (ms); 0: never.
    pub outage_ms: u32,
    /// Whether the link holds packets while down (else drops them).
    pub hold: bool,
    /// A second path beside the first.
    pub two_paths: bool,
    /// Server to client instead of client to server.
    pub download: bool,
    /// Bytes to transfer.
    pub bytes: u64,
}

/// The links of the delivery property tests (for [`hosts_on_links`]): `p1` at 20 Mbit/s
/// with the impairments and, with two paths, `p2` at 5 Mbit/s with the same loss, jitter
/// and duplication but no outage, so that a transfer can always finish.
pub fn impaired_links(imp: &Impairments) -> Vec<(&'static str, String)> {
    let body = |imp: &Impairments, rate: &str| {
        let loss = match imp.burst {
            Some(b) => format!(
                "{{ model = \"gilbert-elliott\", mean = {}, burst = {b} }}",
                imp.loss
            ),
            None => format!("{}", imp.loss),
        };
        let outages = if imp.outage_ms > 0 {
            format!(
                "outages = [{{ at = \"{}ms\", duration = \"{}ms\" }}]\noutage_policy = \"{}\"\n",
                imp.outage_at_ms,
                imp.outage_ms,
                if imp.hold { "hold" } else { "drop" }
            )
        } else {
            String::new()
        };
        format!(
            "rate = \"{rate}\"\ndelay = \"5ms\"\njitter = \"{}ms\"\nreorder = {}\nloss = {loss}\nduplicate = {}\nqueue = \"30KB\"\n{outages}",
            imp.jitter_ms, imp.reorder, imp.duplicate
        )
    };
    let mut links = vec![("p1", body(imp, "20Mbit/s"))];
    if imp.two_paths {
        let other = Impairments {
            outage_ms: 0,
            ..imp.clone()
        };
        links.push(("p2", body(&other, "5Mbit/s")));
    }
    links
}

/// A `quic` flow `t` from `c` to `s` of the impairments' bytes and direction, with
/// `options` (a TOML inline table, or empty).
pub fn impaired_flow(imp: &Impairments, options: &str) -> String {
    format!(
        "[[flow]]\nname = \"t\"\nkind = \"quic\"\nfrom = \"c\"\nto = \"s\"\nbytes = {}\ndirection = \"{}\"\n{}",
        imp.bytes,
        if imp.download { "download" } else { "upload" },
        if options.is_empty() {
            String::new()
        } else {
            format!("options = {options}\n")
        }
    )
}

/// Reads `packets.csv` rows as (recv_s, send_s, flow).
pub fn packets(dir: &Path) -> Vec<(f64, f64, String)> {
    let text = std::fs::read_to_string(dir.join("packets.csv")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            (
                c[0].parse().unwrap(),
                c[1].parse().unwrap(),
                c[2].to_string(),
            )
        })
        .collect()
}

/// Runs `s` with a [`QuicFactory`] the test can inspect afterwards.
pub fn run_quic(
    s: &Scenario,
    seed: u64,
    out: Option<PathBuf>,
) -> (RunReport, Vec<TransferOutcome>) {
    let mut factory = QuicFactory::new(out.as_deref());
    let opts = RunOptions {
        seed: Some(seed),
        out_dir: out,
        progress: false,
        events: None,
    };
    let r = run_scenario(
        s,
        &opts,
        Hooks {
            agents: Some(&mut factory),
            sources: Vec::new(),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    (r, factory.outcomes())
}

/// Asserts a QUIC transfer completed with every byte intact and no error on either side.
pub fn assert_complete(o: &TransferOutcome) {
    assert_eq!(o.client_error, None, "{o:?}");
    assert_eq!(o.server_error, None, "{o:?}");
    assert_eq!(o.received, o.bytes, "{o:?}");
    assert_eq!(o.corrupt, 0, "{o:?}");
    assert!(o.completed.is_some(), "{o:?}");
}
