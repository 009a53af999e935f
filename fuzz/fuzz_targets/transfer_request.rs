//! cargo-fuzz binary of the `transfer_request` target: the body is `polypath_fuzz::transfer_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = polypath_fuzz::transfer_request(data);
});
