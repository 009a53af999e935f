//! Decodes transport parameters as sent by either side; whatever decodes must re-encode
//! to an encoding that decodes to the same parameters.
#![no_main]

use libfuzzer_sys::fuzz_target;
use polypath_quic::transport_parameters::TransportParameters;
use polypath_quic::{Side, TransportErrorCode};

fuzz_target!(|data: &[u8]| {
    for side in [Side::Client, Side::Server] {
        match TransportParameters::decode(side, data) {
            Ok(params) => {
                let mut out = Vec::new();
                params.encode(&mut out);
                let again = TransportParameters::decode(side, &out).expect("re-encoded decodes");
                assert_eq!(again, params);
            }
            Err(e) => assert_eq!(e.code, TransportErrorCode::TRANSPORT_PARAMETER_ERROR),
        }
    }
});
