//! Small identifier types used across the stack: endpoint side, stream IDs, connection IDs,
//! path IDs and stateless reset tokens.

use crate::varint::VarInt;
use std::fmt;

/// Which end of a connection an endpoint is.
#[derive(Debug, Copy, Clone, Eq, PartialEq, Hash)]
pub enum Side {
    /// The endpoint that initiated the connection.
    Client,
    /// The endpoint that accepted it.
    Server,
}

impl Side {
    /// True for [`Side::Client`].
    pub fn is_client(self) -> bool {
        self == Side::Client
    }
    /// True for [`Side::Server`].
    pub fn is_server(self) -> bool {
        self == Side::Server
    }
    /// The other side.
    pub fn peer(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }
}

/// Whether a stream carries data in one direction or both.
#[derive(Debug, Copy, Clone, Eq, PartialEq, Hash, Ord, PartialOrd)]
pub enum Dir {
    /// Data flows both ways.
    Bi,
    /// Data flows only from the initiator.
    Uni,
}

/// A stream identifier.
//= https://www.rfc-editor.org/rfc/rfc9000#section-2.1
//# The least significant bit (0x01) of the stream ID identifies the
//# initiator of the stream.  Client-initiated streams have even-numbered
//# stream IDs (with the bit set to 0), and server-initiated streams have
//# odd-numbered stream IDs (with the bit set to 1).
//#
//# The second least significant bit (0x02) of the stream ID
//# distinguishes between bidirectional streams (with the bit set to 0)
//# and unidirectional streams (with the bit set to 1).
#[derive(Copy, Clone, Eq, PartialEq, Ord, PartialOrd, Hash)]
pub struct StreamId(pub u64);

impl StreamId {
    /// The `index`-th stream of the given initiator and direction.
    pub fn new(initiator: Side, dir: Dir, index: u64) -> Self {
        StreamId(
            (index << 2)
                | (if dir == Dir::Uni { 0x2 } else { 0 })
                | (if initiator == Side::Server { 0x1 } else { 0 }),
        )
    }
    /// Which side opened the stream.
    pub fn initiator(self) -> Side {
        if self.0 & 0x1 == 0 {
            Side::Client
        } else {
            Side::Server
        }
    }
    /// Whether the stream is bidirectional or unidirectional.
    pub fn dir(self) -> Dir {
        if self.0 & 0x2 == 0 { Dir::Bi } else { Dir::Uni }
    }
    /// The position of this stream among the streams of its initiator and direction.
    pub fn index(self) -> u64 {
        self.0 >> 2
    }
}

impl From<StreamId> for VarInt {
    fn from(id: StreamId) -> VarInt {
        VarInt::saturating(id.0)
    }
}

impl From<VarInt> for StreamId {
    fn from(v: VarInt) -> StreamId {
        StreamId(v.into_inner())
    }
}

impl fmt::Debug for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = if self.initiator().is_client() {
            "client"
        } else {
            "server"
        };
        let dir = if self.dir() == Dir::Bi { "bi" } else { "uni" };
        write!(f, "StreamId({} {who} {dir})", self.0)
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Longest connection ID QUIC version 1 allows.
//= https://www.rfc-editor.org/rfc/rfc9000#section-17.2
//# In QUIC version 1, this value MUST NOT exceed 20 bytes.
pub const MAX_CID_SIZE: usize = 20;

/// A connection ID of 0 to 20 bytes, stored inline.
#[derive(Copy, Clone, Eq, PartialEq, Ord, PartialOrd, Hash, Default)]
pub struct ConnectionId {
    len: u8,
    bytes: [u8; MAX_CID_SIZE],
}

impl ConnectionId {
    /// Builds a connection ID from `bytes`.
    ///
    /// # Panics
    /// If `bytes` is longer than [`MAX_CID_SIZE`]; callers parsing network input check the
    /// length first and report a protocol error instead.
    pub fn new(bytes: &[u8]) -> Self {
        assert!(
            bytes.len() <= MAX_CID_SIZE,
            "connection ID longer than 20 bytes"
        );
        let mut cid = ConnectionId {
            len: bytes.len() as u8,
            bytes: [0; MAX_CID_SIZE],
        };
        cid.bytes[..bytes.len()].copy_from_slice(bytes);
        cid
    }
    /// Builds a connection ID from `bytes`, or `None` if it is longer than 20 bytes.
    pub fn try_new(bytes: &[u8]) -> Option<Self> {
        (bytes.len() <= MAX_CID_SIZE).then(|| Self::new(bytes))
    }
    /// A random connection ID of `len` bytes.
    pub fn random<R: rand::Rng + ?Sized>(rng: &mut R, len: usize) -> Self {
        let mut cid = ConnectionId {
            len: len.min(MAX_CID_SIZE) as u8,
            bytes: [0; MAX_CID_SIZE],
        };
        rng.fill_bytes(&mut cid.bytes[..cid.len as usize]);
        cid
    }
    /// Number of bytes in the ID.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// True for a zero-length connection ID.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for ConnectionId {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl fmt::Debug for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.iter() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A path identifier from draft-ietf-quic-multipath-21; path 0 is the path the handshake used.
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.1
//# This value MUST NOT exceed 2<sup>32</sup>-1, the maximum allowed value for the path ID due to
//# restrictions on the nonce calculation (see {{nonce}}).
#[derive(Copy, Clone, Eq, PartialEq, Ord, PartialOrd, Hash, Default)]
pub struct PathId(pub u32);

impl PathId {
    /// The initial path, on which the handshake ran.
    pub const ZERO: PathId = PathId(0);
    /// The largest path ID the draft allows, 2^32 - 1.
    pub const MAX: PathId = PathId(u32::MAX);
}

impl fmt::Debug for PathId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "path{}", self.0)
    }
}

impl fmt::Display for PathId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Length of a stateless reset token.
pub const RESET_TOKEN_SIZE: usize = 16;

/// A stateless reset token bound to a connection ID.
//= https://www.rfc-editor.org/rfc/rfc9000#section-10.3.2
//# The stateless reset token MUST be difficult to guess.
#[derive(Copy, Clone, Eq, PartialEq, Hash, Default)]
pub struct ResetToken(pub [u8; RESET_TOKEN_SIZE]);

impl fmt::Debug for ResetToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl ResetToken {
    /// Compares two tokens in constant time.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-10.3.1
    //# When comparing a datagram to stateless reset token values, endpoints
    //# MUST perform the comparison without leaking information about the
    //# value of the token.
    pub fn ct_eq(&self, other: &[u8]) -> bool {
        other.len() == RESET_TOKEN_SIZE
            && self
                .0
                .iter()
                .zip(other)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_id_bits() {
        let id = StreamId::new(Side::Server, Dir::Uni, 5);
        assert_eq!(id.0, 5 << 2 | 0x3);
        assert_eq!(id.initiator(), Side::Server);
        assert_eq!(id.dir(), Dir::Uni);
        assert_eq!(id.index(), 5);
        assert_eq!(StreamId(0).initiator(), Side::Client);
        assert_eq!(StreamId(0).dir(), Dir::Bi);
    }

    #[test]
    fn connection_id_bounds() {
        assert!(ConnectionId::try_new(&[0; 21]).is_none());
        let cid = ConnectionId::new(&[1, 2, 3]);
        assert_eq!(&*cid, &[1, 2, 3]);
        assert_eq!(format!("{cid}"), "010203");
    }

    #[test]
    fn reset_token_compare() {
        let t = ResetToken([7; 16]);
        assert!(t.ct_eq(&[7; 16]));
        assert!(!t.ct_eq(&[7; 15]));
        let mut other = [7; 16];
        other[15] = 8;
        assert!(!t.ct_eq(&other));
    }
}
