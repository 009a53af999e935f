//! The request that opens every `polypath-transfer/1` stream (see the binary's
//! `transfer` module for the rest of the protocol): the magic `PPT1`, the operation (`U`
//! upload, `D` download) and the object size in bytes (u64, big endian), 13 bytes in all.
//! The server decodes it from whatever a client sends, so [`Request::decode`] must refuse
//! anything else without panicking.

use serde::Serialize;

/// ALPN protocol of the transfer protocol.
pub const ALPN: &[u8] = b"polypath-transfer/1";
/// First bytes of every request.
const MAGIC: &[u8; 4] = b"PPT1";
/// Length of a request.
pub const REQUEST_LEN: usize = 13;

/// Which way the object goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Client to server.
    Upload,
    /// Server to client.
    Download,
}

/// A transfer request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Which way.
    pub direction: Direction,
    /// Object size in bytes.
    pub size: u64,
}

impl Request {
    /// The request on the wire.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0u8; REQUEST_LEN];
        out[..4].copy_from_slice(MAGIC);
        out[4] = match self.direction {
            Direction::Upload => b'U',
            Direction::Download => b'D',
        };
        out[5..].copy_from_slice(&self.size.to_be_bytes());
        out
    }

    /// Parses a request; says what is wrong otherwise.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let Ok(bytes) = <&[u8; REQUEST_LEN]>::try_from(bytes) else {
            return Err(format!(
                "request of {} bytes, expected {REQUEST_LEN}",
                bytes.len()
            ));
        };
        let [m0, m1, m2, m3, op, size @ ..] = *bytes;
        if [m0, m1, m2, m3] != *MAGIC {
            return Err("request does not start with PPT1".into());
        }
        let direction = match op {
            b'U' => Direction::Upload,
            b'D' => Direction::Download,
            other => return Err(format!("unknown operation {other:#04x}")),
        };
        Ok(Request {
            direction,
            size: u64::from_be_bytes(size),
        })
    }
}
