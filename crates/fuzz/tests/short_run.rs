//! The short run of every fuzz target that `make test` does: each body runs on its seeds,
//! on seeded pseudo-random mutations of them and on pseudo-random bytes (the same inputs on
//! every run). A panic in the code under test, or a broken invariant, fails the test; the
//! counts printed and checked show that the inputs got past the first checks. The
//! coverage-guided runs are `make fuzz`.

use polypath_fuzz::{TARGETS, Target, seeds};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Runs `target` on `runs` inputs, half mutated seeds and half random bytes of up to
/// `max_len` bytes; returns how many inputs got anywhere (a body result above zero).
fn run(target: &Target, runs: usize, max_len: usize) -> usize {
    let seeds = seeds::seeds(target.name);
    assert!(!seeds.is_empty(), "{} has seeds", target.name);
    let mut rng = ChaCha8Rng::seed_from_u64(0x706f_6c79_7061_7468);
    let mut reached = 0;
    for seed in &seeds {
        reached += usize::from((target.body)(seed) > 0);
    }
    for i in 0..runs {
        let input = if i % 2 == 0 {
            let mut input = seeds[rng.random_range(0..seeds.len())].clone();
            seeds::mutate(&mut rng, &mut input);
            input
        } else {
            let mut input = vec![0u8; rng.random_range(0..max_len)];
            rng.fill_bytes(&mut input);
            input
        };
        reached += usize::from((target.body)(&input) > 0);
    }
    println!(
        "{:<22} {:>5} inputs ({} seeds), {reached} reached past the first checks",
        target.name,
        runs + seeds.len(),
        seeds.len()
    );
    reached
}

fn target(name: &str) -> &'static Target {
    TARGETS
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no target {name}"))
}

#[test]
fn every_target_has_a_cargo_fuzz_binary() {
    let manifest = include_str!("../../../fuzz/Cargo.toml");
    for t in TARGETS {
        assert!(
            manifest.contains(&format!("name = \"{}\"", t.name)),
            "fuzz/Cargo.toml has no binary {}",
            t.name
        );
    }
}

#[test]
fn decoders() {
    for (name, runs, max_len, at_least) in [
        ("frames", 4000, 120, 500),
        ("packet_header", 4000, 120, 400),
        ("transport_parameters", 4000, 80, 150),
        ("link_events", 2000, 200, 200),
        ("scenario", 1000, 400, 1),
        ("traces", 3000, 100, 150),
        ("transfer_request", 3000, 20, 2),
        ("gw_control", 3000, 300, 2),
        ("gw_tunnel", 3000, 120, 4),
        ("m2ho_packet", 4000, 120, 250),
    ] {
        let reached = run(target(name), runs, max_len);
        assert!(reached >= at_least, "{name}: only {reached} inputs reached");
    }
}

#[test]
fn crypto() {
    for (name, runs, max_len, at_least) in [
        ("retry_token", 2000, 160, 2),
        ("retry_integrity", 2000, 120, 1),
        ("packet_unprotect", 2000, 1300, 900),
    ] {
        let reached = run(target(name), runs, max_len);
        assert!(reached >= at_least, "{name}: only {reached} inputs reached");
    }
}

#[test]
fn endpoint_pair() {
    // Each input runs a handshake or part of one.
    let reached = run(target("endpoint_pair"), 2000, 600);
    assert!(reached >= 1900, "only {reached} inputs ran operations");
}
