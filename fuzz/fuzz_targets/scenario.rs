//! cargo-fuzz binary of the `scenario` target: the body is `polypath_fuzz::scenario`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = polypath_fuzz::scenario(data);
});
