//! The tunnel framing: how an IP packet rides in a QUIC DATAGRAM frame between the gateways.
//!
//! The framing is CONNECT-IP's (RFC 9484) without its HTTP layer: the gateways speak QUIC
//! directly (ALPN [`crate::ALPN`]), so there is no HTTP/3 and no Quarter Stream ID
//! (RFC 9297); each DATAGRAM frame's payload starts with a Context ID and the rest is
//! interpreted by it:
//!
//! ```text
//! Tunnel Datagram {
//!   Context ID (i),
//!   Payload (..),
//! }
//! ```
//!
//! | Context ID | payload |
//! |---|---|
//! | 0 ([`CONTEXT_IP`]) | one full IP packet (IPv4 or IPv6), as RFC 9484 defines Context ID 0 |
//! | 2 ([`CONTEXT_SEQUENCED_IP`]) | `Sequence (i)` then one full IP packet: used for classes the stack duplicates over several paths, so the receiver can discard the copies (CHYMP's per-packet numbers, "duplication removal") |
//!
//! Context IDs are the client's to allocate (even ones, as in RFC 9484 section 6); both are fixed by this document rather than negotiated, and both directions
//! use them. A datagram with any other Context ID is dropped, as RFC 9484 asks of unknown
//! contexts; so is one whose payload is not an IP packet (version 4 or 6 with a consistent
//! length).
//!
//! (RFC 9484 is cited by section only: its text is not among the project's specs, so no
//! sentence of it is quoted here.)

use bytes::{BufMut, Bytes, BytesMut};
use polypath_quic::VarInt;

/// Context ID of a plain IP packet.
pub const CONTEXT_IP: u64 = 0;
/// Context ID of a sequenced IP packet (a duplicated class).
pub const CONTEXT_SEQUENCED_IP: u64 = 2;
/// The most bytes the framing adds to an IP packet: a one-byte Context ID and an
/// eight-byte sequence number.
pub const MAX_OVERHEAD: usize = 1 + 8;

/// A decoded tunnel datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tunneled {
    /// An IP packet, with its sequence number when it was sent sequenced.
    Packet {
        /// The sequence number (context 2), or `None` (context 0).
        seq: Option<u64>,
        /// The IP packet.
        packet: Bytes,
    },
    /// A datagram with a Context ID this gateway does not know (dropped by the caller).
    UnknownContext(u64),
}

/// Why a tunnel datagram was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    /// The datagram ended inside a variable-length integer.
    #[error("truncated variable-length integer")]
    Truncated,
    /// The payload is not an IP packet.
    #[error("not an IP packet: {0}")]
    NotIp(&'static str),
}

/// Decodes a QUIC variable-length integer (RFC 9000 section 16) from the front of `data`:
/// (value, encoded length).
fn get_varint(data: &[u8]) -> Option<(u64, usize)> {
    let mut rest = data;
    let v = VarInt::decode(&mut rest).ok()?;
    Some((v.into_inner(), data.len() - rest.len()))
}

/// Frames an IP packet: context 0, or context 2 with `seq` (at most 2^62 - 1).
pub fn encode(packet: &[u8], seq: Option<u64>) -> Bytes {
    let mut out = BytesMut::with_capacity(packet.len() + MAX_OVERHEAD);
    match seq {
        None => VarInt::from_u32(CONTEXT_IP as u32).encode(&mut out),
        Some(s) => {
            VarInt::from_u32(CONTEXT_SEQUENCED_IP as u32).encode(&mut out);
            VarInt::saturating(s).encode(&mut out);
        }
    }
    out.put_slice(packet);
    out.freeze()
}

/// Decodes a tunnel datagram. The IP packet is checked to be one (version, and a length
/// field matching the datagram), never trusted further here.
pub fn decode(datagram: &Bytes) -> Result<Tunneled, FramingError> {
    let (context, n) = get_varint(datagram).ok_or(FramingError::Truncated)?;
    let (seq, start) = match context {
        CONTEXT_IP => (None, n),
        CONTEXT_SEQUENCED_IP => {
            let rest = datagram.get(n..).ok_or(FramingError::Truncated)?;
            let (s, m) = get_varint(rest).ok_or(FramingError::Truncated)?;
            (Some(s), n + m)
        }
        other => return Ok(Tunneled::UnknownContext(other)),
    };
    let packet = datagram.slice(start..);
    check_ip(&packet)?;
    Ok(Tunneled::Packet { seq, packet })
}

/// Checks that `p` is one whole IPv4 or IPv6 packet.
pub fn check_ip(p: &[u8]) -> Result<(), FramingError> {
    let first = *p.first().ok_or(FramingError::NotIp("empty"))?;
    match first >> 4 {
        4 => {
            if p.len() < 20 {
                return Err(FramingError::NotIp("IPv4 header truncated"));
            }
            let ihl = usize::from(first & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
            if ihl < 20 || total < ihl || total != p.len() {
                return Err(FramingError::NotIp("IPv4 lengths do not match"));
            }
            Ok(())
        }
        6 => {
            if p.len() < 40 {
                return Err(FramingError::NotIp("IPv6 header truncated"));
            }
            let payload = usize::from(u16::from_be_bytes([p[4], p[5]]));
            if 40 + payload != p.len() {
                return Err(FramingError::NotIp("IPv6 length does not match"));
            }
            Ok(())
        }
        _ => Err(FramingError::NotIp("IP version is neither 4 nor 6")),
    }
}

/// Discards duplicate sequence numbers: remembers the highest seen and which of the
/// [`DedupWindow::SPAN`] numbers below it arrived. A number further back than the window is
/// counted as a duplicate (it is older than anything a copy on another path could still be
/// racing with: the span is 0.8 s of packets at 10 000 packets per second).
#[derive(Debug, Clone)]
pub struct DedupWindow {
    highest: Option<u64>,
    /// Bit `n % SPAN` set: number `n` (within the span below `highest`) arrived.
    bits: Box<[u64]>,
}

impl Default for DedupWindow {
    fn default() -> Self {
        DedupWindow {
            highest: None,
            bits: vec![0u64; (Self::SPAN / 64) as usize].into_boxed_slice(),
        }
    }
}

impl DedupWindow {
    /// Sequence numbers remembered below the highest.
    pub const SPAN: u64 = 8192;

    fn slot(n: u64) -> (usize, u64) {
        let i = n % Self::SPAN;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    fn clear(&mut self, n: u64) {
        let (w, b) = Self::slot(n);
        self.bits[w] &= !b;
    }

    /// True the first time `seq` is seen (deliver it), false for a duplicate or a number
    /// that fell out of the window.
    pub fn accept(&mut self, seq: u64) -> bool {
        match self.highest {
            Some(high) if seq > high => {
                // Forget the numbers the window slides past.
                if seq - high >= Self::SPAN {
                    self.bits.iter_mut().for_each(|w| *w = 0);
                } else {
                    for n in high + 1..=seq {
                        self.clear(n);
                    }
                }
                self.highest = Some(seq);
            }
            Some(high) if high - seq >= Self::SPAN => return false,
            Some(_) => {}
            None => self.highest = Some(seq),
        }
        let (w, b) = Self::slot(seq);
        if self.bits[w] & b != 0 {
            return false;
        }
        self.bits[w] |= b;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p
    }

    #[test]
    fn packets_round_trip_in_both_contexts() {
        let p = ipv4(60);
        let d = encode(&p, None);
        assert_eq!(d[0], 0);
        assert_eq!(
            decode(&d),
            Ok(Tunneled::Packet {
                seq: None,
                packet: Bytes::from(p.clone())
            })
        );
        let d = encode(&p, Some(70_000));
        assert_eq!(
            decode(&d),
            Ok(Tunneled::Packet {
                seq: Some(70_000),
                packet: Bytes::from(p)
            })
        );
    }

    #[test]
    fn bad_datagrams_are_refused() {
        assert_eq!(decode(&Bytes::new()), Err(FramingError::Truncated));
        assert_eq!(
            decode(&Bytes::from_static(&[2])),
            Err(FramingError::Truncated)
        );
        assert_eq!(
            decode(&Bytes::from_static(&[4, 1, 2])),
            Ok(Tunneled::UnknownContext(4))
        );
        let mut short = ipv4(40);
        short.truncate(30);
        let d = encode(&short, None);
        assert!(matches!(decode(&d), Err(FramingError::NotIp(_))));
        assert!(matches!(
            decode(&encode(&[0x60; 10], None)),
            Err(FramingError::NotIp(_))
        ));
    }

    #[test]
    fn the_window_drops_copies_and_old_numbers() {
        let mut w = DedupWindow::default();
        assert!(w.accept(10));
        assert!(!w.accept(10));
        assert!(w.accept(12));
        assert!(w.accept(11));
        assert!(!w.accept(11));
        let far = 500 + DedupWindow::SPAN;
        assert!(w.accept(far));
        assert!(!w.accept(12), "fell out of the window");
        assert!(w.accept(far - 100));
        assert!(!w.accept(far - 100));
        assert!(!w.accept(far - DedupWindow::SPAN));
        assert!(w.accept(far - DedupWindow::SPAN + 1));
        // A jump beyond the span forgets everything before it.
        assert!(w.accept(far + 3 * DedupWindow::SPAN));
        assert!(w.accept(far + 3 * DedupWindow::SPAN - 1));
    }
}
