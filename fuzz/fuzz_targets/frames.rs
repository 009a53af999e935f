//! Decodes a packet payload to completion; every frame that decodes must re-encode to
//! bytes that decode to the same frame, with `encoded_len` matching.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use polypath_quic::frame::{Frame, FrameIter};
use polypath_quic::{TransportError, TransportErrorCode};

fuzz_target!(|data: &[u8]| {
    for result in FrameIter::new(Bytes::copy_from_slice(data)) {
        match result {
            Ok(frame) => {
                let _ = frame.ty().is_ack_eliciting();
                let mut out = Vec::new();
                frame.encode(&mut out);
                assert_eq!(out.len(), frame.encoded_len());
                let again: Vec<Frame> = FrameIter::new(Bytes::from(out))
                    .collect::<Result<_, _>>()
                    .expect("re-encoded frame decodes");
                assert_eq!(again, [frame]);
            }
            Err(e) => {
                let code = TransportError::from(e).code;
                assert!(
                    code == TransportErrorCode::FRAME_ENCODING_ERROR
                        || code == TransportErrorCode::PROTOCOL_VIOLATION
                );
            }
        }
    }
});
