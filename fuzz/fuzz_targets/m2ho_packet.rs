//! cargo-fuzz binary of the `m2ho_packet` target: the body is `polypath_fuzz::m2ho_packet`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = polypath_fuzz::m2ho_packet(data);
});
