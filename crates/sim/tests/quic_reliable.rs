//! Property test: over random loss (Bernoulli or Gilbert-Elliott bursts), jitter with
//! reordering, duplication and link outages, every byte a QUIC flow sends is delivered to
//! the receiving application exactly once, in order and intact. Uploads and downloads, one
//! path or two (Multipath QUIC), random seeds.

mod common;

use common::{Impairments, hosts_on_links, impaired_flow, impaired_links, scenario};
use polypath_sim::quic::transfer_bytes;
use polypath_sim::{Hooks, QuicFactory, RunOptions, run_scenario};
use proptest::prelude::*;

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
        let flow = impaired_flow(&imp, "{ idle_timeout = \"600s\" }");
        let s = scenario(&hosts_on_links(&impaired_links(&imp), &flow, "1200s"));
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
