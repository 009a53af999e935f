//! cargo-fuzz binary of the `traces` target: the body is `polypath_fuzz::traces`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = polypath_fuzz::traces(data);
});
