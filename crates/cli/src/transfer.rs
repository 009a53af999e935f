//! The transfer protocol of `polypath server` and `polypath client`, and what both report.
//!
//! One bidirectional stream per connection, opened by the client. It starts with a
//! 13-byte request: the magic `PPT1`, the operation (`U` upload, `D` download) and the
//! object size in bytes (u64, big endian). Then:
//!
//! * **upload**: the client sends the object and its SHA-256 (32 bytes) and finishes its
//!   side. The server hashes what arrives, compares it with the trailer, and answers with
//!   a status byte (0 = verified) and its own SHA-256, then finishes. The client compares
//!   that digest with its own: both ends have verified the object.
//! * **download**: the server sends the object and its SHA-256. The client hashes what
//!   arrives, compares, and sends its own SHA-256 and finishes. The server compares that
//!   digest with its own and answers with a status byte and a JSON [`ConnectionReport`] of its
//!   connection (the sending side's congestion figures), then finishes.

use polypath_io::{Connection, ReadError, RecvStream, SendStream, WriteError};
use polypath_quic::sched::PathState;
use polypath_sim::traffic::AppRate;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use polypath_cli::request::{ALPN, Direction, REQUEST_LEN, Request};

/// Length of a SHA-256 digest.
pub const DIGEST_LEN: usize = 32;
/// Status byte: the object arrived intact.
pub const STATUS_OK: u8 = 0;
/// Status byte: the digests differ.
pub const STATUS_MISMATCH: u8 = 1;
/// Largest sender report the client accepts.
pub const MAX_REPORT_LEN: usize = 1 << 20;
/// Chunk size for generating, hashing and writing data.
pub const CHUNK: usize = 256 * 1024;
/// Seed of the generated object (both sides only hash it, so any seed works).
const PAYLOAD_SEED: u64 = 0x706f_6c79_7061_7468;

pub use polypath_scenario::units::parse_size;

/// The generated object: a deterministic pseudo-random byte stream of a given length.
#[derive(Debug)]
pub struct Generated {
    rng: ChaCha8Rng,
    remaining: u64,
}

impl Generated {
    /// An object of `size` bytes.
    pub fn new(size: u64) -> Self {
        Generated {
            rng: ChaCha8Rng::seed_from_u64(PAYLOAD_SEED),
            remaining: size,
        }
    }

    /// The next chunk (at most [`CHUNK`] bytes), or `None` at the end.
    pub fn next_chunk(&mut self) -> Option<Vec<u8>> {
        if self.remaining == 0 {
            return None;
        }
        let len = self.remaining.min(CHUNK as u64) as usize;
        let mut chunk = vec![0u8; len];
        self.rng.fill_bytes(&mut chunk);
        self.remaining -= len as u64;
        Some(chunk)
    }
}

/// Reads exactly `len` bytes (a premature end of stream is an error).
pub async fn read_exact(recv: &mut RecvStream, len: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        match recv.read_chunk(len - out.len()).await {
            Ok(Some(chunk)) => out.extend_from_slice(&chunk),
            Ok(None) => {
                return Err(format!("stream ended after {} of {len} bytes", out.len()));
            }
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
    Ok(out)
}

/// Reads `size` bytes of object data, hashing them and handing each chunk to `sink`.
pub async fn receive_object(
    recv: &mut RecvStream,
    size: u64,
    mut sink: impl FnMut(&[u8]) -> Result<(), String>,
) -> Result<[u8; DIGEST_LEN], String> {
    let mut hasher = Sha256::new();
    let mut left = size;
    while left > 0 {
        let max = left.min(4 * CHUNK as u64) as usize;
        match recv.read_chunk(max).await {
            Ok(Some(chunk)) => {
                hasher.update(&chunk);
                sink(&chunk)?;
                left -= chunk.len() as u64;
            }
            Ok(None) => {
                return Err(format!(
                    "stream ended after {} of {size} bytes",
                    size - left
                ));
            }
            Err(e) => return Err(format!("read failed after {} bytes: {e}", size - left)),
        }
    }
    Ok(hasher.finalize().into())
}

/// Expects the end of the stream (no more data).
pub async fn expect_end(recv: &mut RecvStream) -> Result<(), String> {
    match recv.read_chunk(1).await {
        Ok(None) => Ok(()),
        Ok(Some(_)) => Err("unexpected data after the end of the message".into()),
        Err(ReadError::ClosedStream) => Ok(()),
        Err(e) => Err(format!("read failed: {e}")),
    }
}

/// Sends the generated object of `size` bytes, no faster than `rate` when one is given;
/// returns its SHA-256.
pub async fn send_generated(
    send: &mut SendStream,
    size: u64,
    rate: Option<AppRate>,
) -> Result<[u8; DIGEST_LEN], String> {
    let mut hasher = Sha256::new();
    let mut source = Generated::new(size);
    let start = tokio::time::Instant::now();
    let mut sent = 0u64;
    while let Some(chunk) = source.next_chunk() {
        hasher.update(&chunk);
        let mut chunk = bytes::Bytes::from(chunk);
        while !chunk.is_empty() {
            let mut take = chunk.len();
            if let Some(r) = &rate {
                // Wait for the next piece the rate allows.
                let allowed = r.allowed(start.elapsed()).saturating_sub(sent);
                if allowed == 0 {
                    tokio::time::sleep_until(start + r.due(sent)).await;
                    continue;
                }
                take = take.min(usize::try_from(allowed).unwrap_or(usize::MAX));
            }
            let piece = chunk.split_to(take);
            sent += piece.len() as u64;
            send.write_chunk(piece).await.map_err(write_failed)?;
        }
    }
    Ok(hasher.finalize().into())
}

/// Ends an upload whose object hashed to `digest`: sends the digest and the end of the
/// stream, then reads the server's status and digest and checks that they match.
pub async fn confirm_upload(
    send: &mut SendStream,
    recv: &mut RecvStream,
    digest: &[u8; DIGEST_LEN],
) -> Result<(), String> {
    send.write_all(digest).await.map_err(write_failed)?;
    send.finish().map_err(write_failed)?;
    let status = read_exact(recv, 1).await?;
    let server_digest = read_exact(recv, DIGEST_LEN).await?;
    expect_end(recv).await?;
    if status[0] != STATUS_OK || server_digest[..] != digest[..] {
        return Err(format!(
            "SHA-256 mismatch: sent {}, the server received {}",
            hex::encode(digest),
            hex::encode(&server_digest)
        ));
    }
    Ok(())
}

/// Describes a failed write.
pub fn write_failed(e: WriteError) -> String {
    format!("write failed: {e}")
}

/// One side's view of its connection: handshake time, congestion control and per-path
/// figures. `local` and `remote` of its paths are that side's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ConnectionReport {
    /// Whose connection this is: `client` or `server`.
    pub side: String,
    /// Handshake duration, milliseconds (0 if it never completed).
    pub handshake_ms: f64,
    /// Packets sent on all paths (all packet-number spaces).
    pub packets_sent: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// `packets_lost / packets_sent` over the whole connection.
    pub lost_fraction: f64,
    /// Congestion window of the first path (the handshake path), bytes.
    pub cwnd: u64,
    /// Smoothed RTT of the first path, milliseconds.
    pub srtt_ms: f64,
    /// Every path the connection had.
    pub paths: Vec<PathReport>,
    /// The negotiated TLS cipher suite, e.g. `TLS13_CHACHA20_POLY1305_SHA256`.
    #[serde(default)]
    pub cipher_suite: String,
    /// 1-RTT key updates the connection went through (started or followed).
    #[serde(default)]
    pub key_updates: u64,
    /// Peer address changes the connection followed (a server's view of NAT rebindings
    /// and client migrations; RFC 9000 section 9.3).
    #[serde(default)]
    pub peer_address_changes: u64,
    /// Of those, the new addresses validated (PATH_RESPONSE received).
    #[serde(default)]
    pub peer_addresses_validated: u64,
    /// Active migrations of the client to a new local address (`--migrate-to`), and of
    /// those, the ones whose new path validated.
    #[serde(default)]
    pub migrations: u64,
    /// See `migrations`.
    #[serde(default)]
    pub migrations_validated: u64,
    /// Moves to the server's preferred address (RFC 9000 section 9.6): by the client once
    /// it validated the address, by the server once it sends from it.
    #[serde(default)]
    pub preferred_address_migrations: u64,
    /// Whether the handshake resumed an earlier TLS session (a session ticket).
    #[serde(default)]
    pub resumed: bool,
    /// 0-RTT packets sent (client) or opened (server).
    #[serde(default)]
    pub zero_rtt_packets: u64,
    /// Whether the server accepted early data (0-RTT).
    #[serde(default)]
    pub early_data_accepted: bool,
}

/// One path in a [`ConnectionReport`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PathReport {
    /// Path ID (0 is the handshake path).
    pub id: u32,
    /// Local address of the path (of the report's side).
    pub local: String,
    /// Peer address of the path.
    pub remote: String,
    /// `validating`, `validated` or `abandoned`.
    pub state: String,
    /// Stream and datagram payload bytes sent on the path (including retransmissions).
    pub bytes: u64,
    /// UDP payload bytes sent.
    pub udp_bytes_sent: u64,
    /// Packets sent on the path.
    pub packets_sent: u64,
    /// Packets received on the path.
    pub packets_received: u64,
    /// Packets on the path declared lost.
    pub packets_lost: u64,
    /// `packets_lost / packets_sent` on the path, over the whole connection.
    pub lost_fraction: f64,
    /// The loss rate the scheduler sees: exponentially weighted over recent packets, so it
    /// follows the last round trips rather than the whole connection (0 to 1).
    pub recent_loss_rate: f64,
    /// Smoothed RTT, milliseconds.
    pub srtt_ms: f64,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// ECN validation of this side's marks on the path: `disabled`, `testing`, `unknown`,
    /// `capable` or `failed` (RFC 9000 section 13.4.2).
    #[serde(default)]
    pub ecn: String,
    /// Why ECN validation failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecn_failure: Option<String>,
    /// Packets this side sent marked ECT(0).
    #[serde(default)]
    pub ecn_marked: u64,
    /// ECN-CE marks the peer reported for this side's packets.
    #[serde(default)]
    pub ecn_ce_reported: u64,
    /// Packets this side received marked ECT(0), and ECN-CE.
    #[serde(default)]
    pub ecn_ect0_received: u64,
    /// See `ecn_ect0_received`.
    #[serde(default)]
    pub ecn_ce_received: u64,
}

/// Megabits per second of `bytes` carried in `seconds`.
pub fn goodput_mbps(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 * 8.0 / seconds.max(1e-9) / 1e6
}

/// `lost / sent`, 0 when nothing was sent.
fn lost_fraction(lost: u64, sent: u64) -> f64 {
    if sent == 0 {
        0.0
    } else {
        lost as f64 / sent as f64
    }
}

impl ConnectionReport {
    /// The report of a connection as it is now; `side` is `client` or `server`.
    pub fn of(conn: &Connection, side: &str) -> Self {
        let stats = conn.stats();
        let paths: Vec<PathReport> = conn
            .paths()
            .iter()
            .map(|p| PathReport {
                id: p.snapshot.id.0,
                local: p.snapshot.local.to_string(),
                remote: p.snapshot.remote.to_string(),
                state: match p.snapshot.state {
                    PathState::Validating => "validating",
                    PathState::Validated => "validated",
                    PathState::Abandoned => "abandoned",
                }
                .into(),
                bytes: p.stats.payload_bytes_sent,
                udp_bytes_sent: p.stats.udp_bytes_sent,
                packets_sent: p.stats.packets_sent,
                packets_received: p.stats.packets_received,
                packets_lost: p.stats.packets_lost,
                lost_fraction: lost_fraction(p.stats.packets_lost, p.stats.packets_sent),
                recent_loss_rate: p.snapshot.loss_rate,
                srtt_ms: p.snapshot.srtt.as_secs_f64() * 1000.0,
                cwnd: p.snapshot.cwnd,
                ecn: p.ecn.state.name().into(),
                ecn_failure: p.ecn.failure.map(str::to_string),
                ecn_marked: p.ecn.marked_sent,
                ecn_ce_reported: p.ecn.peer_reported_ce,
                ecn_ect0_received: p.ecn.received_ect0,
                ecn_ce_received: p.ecn.received_ce,
            })
            .collect();
        let first = paths.first();
        ConnectionReport {
            side: side.into(),
            handshake_ms: stats
                .handshake_duration
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            packets_sent: stats.packets_sent,
            packets_lost: stats.packets_lost,
            lost_fraction: lost_fraction(stats.packets_lost, stats.packets_sent),
            cwnd: first.map_or(0, |p| p.cwnd),
            srtt_ms: first.map_or(0.0, |p| p.srtt_ms),
            paths,
            cipher_suite: conn
                .cipher_suite()
                .map(|s| format!("{s:?}"))
                .unwrap_or_default(),
            key_updates: stats.key_updates,
            peer_address_changes: stats.peer_address_changes,
            peer_addresses_validated: stats.peer_addresses_validated,
            migrations: stats.migrations,
            migrations_validated: stats.migrations_validated,
            preferred_address_migrations: stats.preferred_address_migrations,
            resumed: conn.is_resumed(),
            zero_rtt_packets: conn.zero_rtt_packets(),
            early_data_accepted: conn.is_early_data_accepted(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_garbage_is_refused() {
        for r in [
            Request {
                direction: Direction::Upload,
                size: 0,
            },
            Request {
                direction: Direction::Download,
                size: u64::MAX,
            },
        ] {
            assert_eq!(Request::decode(&r.encode()), Ok(r));
        }
        let mut bad = Request {
            direction: Direction::Upload,
            size: 5,
        }
        .encode();
        bad[4] = b'X';
        assert!(Request::decode(&bad).is_err());
        assert!(Request::decode(b"PPT2\x55\0\0\0\0\0\0\0\0").is_err());
        assert!(Request::decode(b"PPT1").is_err());
    }

    #[test]
    fn generated_object_is_deterministic_and_sized() {
        let mut a = Generated::new(CHUNK as u64 + 10);
        let mut b = Generated::new(CHUNK as u64 + 10);
        let (a1, b1) = (a.next_chunk().unwrap(), b.next_chunk().unwrap());
        assert_eq!(a1, b1);
        assert_eq!(a1.len(), CHUNK);
        assert_eq!(a.next_chunk().unwrap().len(), 10);
        assert!(a.next_chunk().is_none());
    }
}
