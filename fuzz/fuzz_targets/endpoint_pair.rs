//! cargo-fuzz binary of the `endpoint_pair` target: the body is `polypath_fuzz::endpoint_pair`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = polypath_fuzz::endpoint_pair(data);
});
