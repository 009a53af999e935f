//! Protocol violations close the connection with the error code RFC 9000 or the multipath
//! draft requires, and the peer learns that code from the CONNECTION_CLOSE frame.

use super::*;
use crate::TransportErrorCode as Code;
use crate::coding::BufMutExt;
use crate::frame::{self, Frame};

fn multipath_transport() -> TransportConfig {
    TransportConfig {
        initial_max_path_id: Some(3),
        ..TransportConfig::default()
    }
}

/// Injects `payload` as the frames of a 1-RTT packet arriving at the server, then checks
/// that the server closed with `expected` and that the client received that code.
fn expect_close(multipath: bool, payload: &[u8], expected: Code) {
    let transport = if multipath {
        multipath_transport()
    } else {
        TransportConfig::default()
    };
    let mut pair = Pair::new(transport.clone(), transport);
    pair.handshake();
    assert_eq!(pair.server().is_multipath(), multipath);
    let now = pair.now;
    pair.server().inject_frames(now, payload);
    match pair.server().close_reason() {
        Some(ConnectionError::TransportError(e)) => {
            assert_eq!(e.code, expected, "server closed with {e}")
        }
        other => panic!("server did not close on a violation: {other:?}"),
    }
    pair.run_until(Duration::from_secs(2), |p| p.client().is_closed());
    match pair.client().close_reason() {
        Some(ConnectionError::ConnectionClosed(e)) => {
            assert_eq!(e.code, expected, "client saw {e}")
        }
        other => panic!("client did not learn the error: {other:?}"),
    }
}

fn encode(frames: &[Frame]) -> Vec<u8> {
    let mut buf = Vec::new();
    for f in frames {
        f.encode(&mut buf);
    }
    buf
}

fn stream(id: StreamId, offset: u64, data: &'static [u8]) -> Frame {
    Frame::Stream(frame::Stream {
        id,
        offset,
        fin: false,
        data: Bytes::from_static(data),
    })
}

#[test]
fn unknown_frame_type_is_frame_encoding_error() {
    expect_close(false, &[0x21], Code::FRAME_ENCODING_ERROR);
}

#[test]
fn truncated_frame_is_frame_encoding_error() {
    // MAX_DATA without its value.
    expect_close(false, &[0x10], Code::FRAME_ENCODING_ERROR);
}

#[test]
fn stream_frame_on_send_only_stream_is_stream_state_error() {
    // Stream 3 is server-initiated unidirectional: the client may not send on it.
    expect_close(
        false,
        &encode(&[stream(StreamId(3), 0, b"x")]),
        Code::STREAM_STATE_ERROR,
    );
}

#[test]
fn stream_above_limit_is_stream_limit_error() {
    let id = StreamId::new(Side::Client, Dir::Uni, 5_000);
    expect_close(
        false,
        &encode(&[stream(id, 0, b"x")]),
        Code::STREAM_LIMIT_ERROR,
    );
}

#[test]
fn data_beyond_stream_window_is_flow_control_error() {
    let id = StreamId::new(Side::Client, Dir::Uni, 0);
    expect_close(
        false,
        &encode(&[stream(id, 100_000_000, b"x")]),
        Code::FLOW_CONTROL_ERROR,
    );
}

#[test]
fn handshake_done_from_client_is_protocol_violation() {
    expect_close(
        false,
        &encode(&[Frame::HandshakeDone]),
        Code::PROTOCOL_VIOLATION,
    );
}

#[test]
fn too_many_streams_is_frame_encoding_error() {
    let mut buf = vec![0x12];
    buf.put_var_u64((1 << 60) + 1);
    expect_close(false, &buf, Code::FRAME_ENCODING_ERROR);
}

#[test]
fn acknowledging_unsent_packets_is_protocol_violation() {
    let mut buf = vec![0x02];
    buf.put_var_u64(1_000_000); // Largest Acknowledged
    buf.put_var_u64(0); // ACK Delay
    buf.put_var_u64(0); // ACK Range Count
    buf.put_var_u64(0); // First ACK Range
    expect_close(false, &buf, Code::PROTOCOL_VIOLATION);
}

#[test]
fn zero_length_new_connection_id_is_frame_encoding_error() {
    let mut buf = vec![0x18];
    buf.put_var_u64(5); // Sequence Number
    buf.put_var_u64(0); // Retire Prior To
    buf.push(0); // Length
    buf.extend_from_slice(&[0; 16]);
    expect_close(false, &buf, Code::FRAME_ENCODING_ERROR);
}

#[test]
fn retiring_an_unissued_connection_id_is_protocol_violation() {
    expect_close(
        false,
        &encode(&[Frame::RetireConnectionId {
            path_id: None,
            sequence: 50,
        }]),
        Code::PROTOCOL_VIOLATION,
    );
}

#[test]
fn crypto_data_past_the_buffer_limit_is_crypto_buffer_exceeded() {
    let f = Frame::Crypto(frame::Crypto {
        offset: 10_000_000,
        data: Bytes::from_static(b"x"),
    });
    expect_close(false, &encode(&[f]), Code::CRYPTO_BUFFER_EXCEEDED);
}

#[test]
fn multipath_frame_without_negotiation_is_protocol_violation() {
    let f = Frame::PathAbandon {
        path_id: PathId(1),
        error_code: Code::NO_ERROR,
    };
    expect_close(false, &encode(&[f]), Code::PROTOCOL_VIOLATION);
}

#[test]
fn path_id_above_limit_is_protocol_violation() {
    let f = Frame::PathAbandon {
        path_id: PathId(4),
        error_code: Code::NO_ERROR,
    };
    expect_close(true, &encode(&[f]), Code::PROTOCOL_VIOLATION);
    let f = Frame::PathStatus {
        path_id: PathId(9),
        status: crate::sched::PathStatus::Backup,
        sequence: 1,
    };
    expect_close(true, &encode(&[f]), Code::PROTOCOL_VIOLATION);
}

#[test]
fn path_ack_for_unknown_space_is_protocol_violation() {
    // Path 2 is within the limit but was never opened: it has no packet number space.
    let mut buf = Vec::new();
    buf.put_var_u64(0x3e);
    buf.put_var_u64(2); // Path Identifier
    buf.put_var_u64(0); // Largest Acknowledged
    buf.put_var_u64(0); // ACK Delay
    buf.put_var_u64(0); // ACK Range Count
    buf.put_var_u64(0); // First ACK Range
    expect_close(true, &buf, Code::PROTOCOL_VIOLATION);
}

#[test]
fn path_id_beyond_32_bits_is_frame_encoding_error() {
    let mut buf = Vec::new();
    buf.put_var_u64(0x3e75); // PATH_ABANDON
    buf.put_var_u64(1 << 33);
    buf.put_var_u64(0);
    expect_close(true, &buf, Code::FRAME_ENCODING_ERROR);
}

#[test]
fn max_path_id_below_initial_is_protocol_violation() {
    expect_close(
        true,
        &encode(&[Frame::MaxPathId(PathId(1))]),
        Code::PROTOCOL_VIOLATION,
    );
}

#[test]
fn path_cids_blocked_for_unissued_sequence_is_protocol_violation() {
    let f = Frame::PathCidsBlocked {
        path_id: PathId(1),
        next_sequence: 100,
    };
    expect_close(true, &encode(&[f]), Code::PROTOCOL_VIOLATION);
}

#[test]
fn paths_blocked_above_our_limit_is_protocol_violation() {
    expect_close(
        true,
        &encode(&[Frame::PathsBlocked(PathId(7))]),
        Code::PROTOCOL_VIOLATION,
    );
}

#[test]
fn empty_packet_is_protocol_violation() {
    expect_close(false, &[], Code::PROTOCOL_VIOLATION);
}
