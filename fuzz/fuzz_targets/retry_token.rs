//! cargo-fuzz binary of the `retry_token` target: the body is `polypath_fuzz::retry_token`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = polypath_fuzz::retry_token(data);
});
