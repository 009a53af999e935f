//! cargo-fuzz binary of the `packet_unprotect` target: the body is `polypath_fuzz::packet_unprotect`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = polypath_fuzz::packet_unprotect(data);
});
