//! Property test: over random loss (Bernoulli or Gilbert-Elliott bursts), jitter with
//! reordering, duplication and link outages, every byte a QUIC flow sends is delivered to
//! the receiving application exactly once, in order and intact. Uploads and downloads, one
//! path or two (Multipath QUIC), random seeds.

mod common;

use common::scenario;
use polypath_sim::quic::transfer_bytes;
use polypath_sim::{Hooks, QuicFactory, RunOptions, run_scenario};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Impairments {
    loss: f64,
    burst: Option<f64>,
    jitter_ms: u32,
    reorder: bool,
    duplicate: f64,
    outage_at_ms: u32,
    outage_ms: u32,
    hold: bool,
    two_paths: bool,
    download: bool,
    bytes: u64,
}

fn impairments() -> impl Strategy<Value = Impairments> {
    (
        (0.0..0.12f64, proptest::option::of(1.0..3.0f64), 0u32..20),
        (any::<bool>(), 0.0..0.2f64),
        (0u32..1500, 0u32..1200, any::<bool>()),
        (any::<bool>(), any::<bool>(), 1u64..200_000),
    )
        .prop_map(
            |(
                (loss, burst, jitter_ms),
                (reorder, duplicate),
                (outage_at_ms, outage_ms, hold),
                (two_paths, download, bytes),
            )| Impairments {
                loss,
                burst,
                jitter_ms,
                reorder,
                duplicate,
                outage_at_ms,
                outage_ms,
                hold,
                two_paths,
                download,
                bytes,
            },
        )
}

fn link(name: &str, imp: &Impairments, rate: &str) -> String {
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
        "[[link]]\nname = \"{name}\"\nrate = \"{rate}\"\ndelay = \"5ms\"\njitter = \"{}ms\"\nreorder = {}\nloss = {loss}\nduplicate = {}\nqueue = \"30KB\"\n{outages}\n",
        imp.jitter_ms, imp.reorder, imp.duplicate
    )
}

fn build(imp: &Impairments) -> String {
    let mut s = String::from(
        "[sim]\nduration = \"1200s\"\nstop_when_done = true\n[output]\nbin = \"1s\"\n[[host]]\nname = \"c\"\ninterfaces = [{ name = \"p1\", addr = \"10.0.1.1\", link = \"p1\", side = \"a\" }",
    );
    if imp.two_paths {
        s.push_str(", { name = \"p2\", addr = \"10.0.2.1\", link = \"p2\", side = \"a\" }");
    }
    s.push_str("]\n[[host]]\nname = \"s\"\ninterfaces = [{ name = \"p1\", addr = \"10.9.1.1\", link = \"p1\", side = \"b\" }");
    if imp.two_paths {
        s.push_str(", { name = \"p2\", addr = \"10.9.2.1\", link = \"p2\", side = \"b\" }");
    }
    s.push_str("]\n");
    s.push_str(&link("p1", imp, "20Mbit/s"));
    if imp.two_paths {
        // Both paths suffer the same loss, jitter and duplication; only the first goes down.
        let mut other = imp.clone();
        other.outage_ms = 0;
        s.push_str(&link("p2", &other, "5Mbit/s"));
    }
    s.push_str(&format!(
        "[[flow]]\nname = \"t\"\nkind = \"quic\"\nfrom = \"c\"\nto = \"s\"\nbytes = {}\ndirection = \"{}\"\noptions = {{ idle_timeout = \"600s\" }}\n",
        imp.bytes,
        if imp.download { "download" } else { "upload" }
    ));
    s
}

proptest! {
    // A fixed generator seed: the same 48 cases in every run (raise PROPTEST_CASES to
    // explore more). Liveness needs some packets to get through: with the per-packet
    // Gilbert-Elliott chain, a sparse direction (the receiver's acknowledgments near the
    // end of a transfer, one per probe) can stay in Bad across the probe timeouts'
    // exponential backoff until the idle timeout, a legitimate end of the connection. The
    // ranges (mean loss < 12 %, bursts < 3 packets) and the 600 s idle timeout make that
    // rare: about one case in ten thousand in random exploration, never a wrong byte.
    #![proptest_config(ProptestConfig {
        cases: 48,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0001),
        .. ProptestConfig::default()
    })]

    #[test]
    fn every_byte_is_delivered_once_and_intact(imp in impairments(), seed in any::<u64>()) {
        let s = scenario(&build(&imp));
        let mut factory = QuicFactory::new(None).keep_received(true);
        let opts = RunOptions { seed: Some(seed), out_dir: None, progress: false, events: None };
        let report = run_scenario(&s, &opts, Hooks { agents: Some(&mut factory), sources: Vec::new() })
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let outcomes = factory.outcomes();
        let o = &outcomes[0];
        // Safety: what arrived is exactly the start of what was sent, each byte once.
        let data = o.data.as_deref().unwrap_or_default();
        prop_assert!(data.len() as u64 <= imp.bytes);
        prop_assert!(data == transfer_bytes(data.len()).as_slice(), "delivered bytes differ from sent bytes");
        prop_assert_eq!(o.corrupt, 0);
        prop_assert_eq!(o.received, data.len() as u64);
        // Liveness: everything arrived, both ends finished cleanly.
        prop_assert_eq!(&o.client_error, &None);
        prop_assert_eq!(&o.server_error, &None);
        prop_assert_eq!(report.summary.stopped_by.as_str(), "done");
        prop_assert!(o.completed.is_some());
        prop_assert_eq!(data.len() as u64, imp.bytes);
        let c = report.summary.flows[0].completions.clone();
        prop_assert_eq!(c.map(|c| c.count), Some(1));
        prop_assert_eq!(report.summary.flows[0].app_bytes_received, imp.bytes);
    }
}
