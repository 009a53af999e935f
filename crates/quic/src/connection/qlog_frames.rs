//! qlog representations of frames (draft-ietf-quic-qlog-quic-events, "QUIC Frames").

use crate::frame::{Frame, FrameIter};
use bytes::Bytes;
use serde_json::{Value, json};

/// The qlog object of a received frame.
pub(super) fn frame_json(frame: &Frame) -> Value {
    match frame {
        Frame::Padding(n) => json!({"frame_type": "padding", "raw": {"payload_length": n}}),
        Frame::Ping => json!({"frame_type": "ping"}),
        Frame::Ack(ack) => {
            let ranges: Vec<Value> = ack.ranges().map(|r| json!([r.start(), r.end()])).collect();
            let mut v =
                json!({"frame_type": "ack", "ack_delay_raw": ack.delay, "acked_ranges": ranges});
            if let Some(path) = ack.path_id {
                v["frame_type"] = json!("path_ack");
                v["path_id"] = json!(path.0);
            }
            v
        }
        Frame::ResetStream(r) => {
            json!({"frame_type": "reset_stream", "stream_id": r.id.0, "error_code": r.error_code.into_inner(), "final_size": r.final_size})
        }
        Frame::StopSending(s) => {
            json!({"frame_type": "stop_sending", "stream_id": s.id.0, "error_code": s.error_code.into_inner()})
        }
        Frame::Crypto(c) => {
            json!({"frame_type": "crypto", "offset": c.offset, "length": c.data.len()})
        }
        Frame::NewToken(t) => {
            json!({"frame_type": "new_token", "token": {"raw": {"length": t.len()}}})
        }
        Frame::Stream(s) => {
            json!({"frame_type": "stream", "stream_id": s.id.0, "offset": s.offset, "length": s.data.len(), "fin": s.fin})
        }
        Frame::MaxData(m) => json!({"frame_type": "max_data", "maximum": m}),
        Frame::MaxStreamData { id, max } => {
            json!({"frame_type": "max_stream_data", "stream_id": id.0, "maximum": max})
        }
        Frame::MaxStreams { dir, count } => {
            json!({"frame_type": "max_streams", "stream_type": dir_name(*dir), "maximum": count})
        }
        Frame::DataBlocked(l) => json!({"frame_type": "data_blocked", "limit": l}),
        Frame::StreamDataBlocked { id, limit } => {
            json!({"frame_type": "stream_data_blocked", "stream_id": id.0, "limit": limit})
        }
        Frame::StreamsBlocked { dir, limit } => {
            json!({"frame_type": "streams_blocked", "stream_type": dir_name(*dir), "limit": limit})
        }
        Frame::NewConnectionId(f) => json!({
            "frame_type": if f.path_id.is_some() { "path_new_connection_id" } else { "new_connection_id" },
            "path_id": f.path_id.map(|p| p.0),
            "sequence_number": f.sequence,
            "retire_prior_to": f.retire_prior_to,
            "connection_id": f.id.to_string(),
        }),
        Frame::RetireConnectionId { path_id, sequence } => json!({
            "frame_type": if path_id.is_some() { "path_retire_connection_id" } else { "retire_connection_id" },
            "path_id": path_id.map(|p| p.0),
            "sequence_number": sequence,
        }),
        Frame::PathChallenge(t) => json!({"frame_type": "path_challenge", "data": hex(t)}),
        Frame::PathResponse(t) => json!({"frame_type": "path_response", "data": hex(t)}),
        Frame::ConnectionClose(c) => json!({
            "frame_type": "connection_close",
            "error_space": "transport",
            "error_code": c.error_code.0,
            "reason": c.reason_lossy(),
        }),
        Frame::ApplicationClose(c) => json!({
            "frame_type": "connection_close",
            "error_space": "application",
            "error_code": c.error_code.into_inner(),
            "reason": c.reason_lossy(),
        }),
        Frame::HandshakeDone => json!({"frame_type": "handshake_done"}),
        Frame::Datagram(d) => json!({"frame_type": "datagram", "length": d.data.len()}),
        Frame::PathAbandon {
            path_id,
            error_code,
        } => {
            json!({"frame_type": "path_abandon", "path_id": path_id.0, "error_code": error_code.0})
        }
        Frame::PathStatus {
            path_id,
            status,
            sequence,
        } => json!({
            "frame_type": match status { crate::sched::PathStatus::Backup => "path_status_backup", crate::sched::PathStatus::Available => "path_status_available" },
            "path_id": path_id.0,
            "sequence_number": sequence,
        }),
        Frame::MaxPathId(p) => json!({"frame_type": "max_path_id", "maximum_path_id": p.0}),
        Frame::PathsBlocked(p) => json!({"frame_type": "paths_blocked", "maximum_path_id": p.0}),
        Frame::PathCidsBlocked {
            path_id,
            next_sequence,
        } => {
            json!({"frame_type": "path_cids_blocked", "path_id": path_id.0, "next_sequence_number": next_sequence})
        }
    }
}

/// The qlog frames of a packet's plaintext payload (a sent packet's, before protection).
/// A payload that does not parse (which would be a bug of the sender) ends with a frame of
/// type `unknown` carrying the parse error.
pub(super) fn payload_json(payload: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    for frame in FrameIter::new(Bytes::copy_from_slice(payload)) {
        match frame {
            Ok(f) => out.push(frame_json(&f)),
            Err(e) => {
                out.push(json!({"frame_type": "unknown", "error": e.to_string()}));
                break;
            }
        }
    }
    out
}

fn dir_name(dir: crate::Dir) -> &'static str {
    match dir {
        crate::Dir::Bi => "bidirectional",
        crate::Dir::Uni => "unidirectional",
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
