//! cargo-fuzz binary of the `gw_control` target: the body is `polypath_fuzz::gw_control`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = polypath_fuzz::gw_control(data);
});
