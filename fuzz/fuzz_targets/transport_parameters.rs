//! cargo-fuzz binary of the `transport_parameters` target: the body is `polypath_fuzz::transport_parameters`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = polypath_fuzz::transport_parameters(data);
});
