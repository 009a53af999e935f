//! cargo-fuzz binary of the `frames` target: the body is `polypath_fuzz::frames`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = polypath_fuzz::frames(data);
});
