//! cargo-fuzz binary of the `link_events` target: the body is `polypath_fuzz::link_events`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = polypath_fuzz::link_events(data);
});
