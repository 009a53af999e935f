//! Packet headers (RFC 9000 section 17), packet numbers, header protection (RFC 9001
//! section 5.4), Version Negotiation and Retry packets, and stateless reset recognition.
//!
//! Receiving: [`decode_header`] parses the still-protected first packet of a datagram and
//! reports its length, so that coalesced packets can be split off one by one:
//!
//! ```text
//! let mut rest = datagram;
//! while !rest.is_empty() {
//!     let Ok(hdr) = decode_header(rest, 8) else { break };
//!     let (packet, tail) = rest.split_at(hdr.packet_len);
//!     // ... remove header protection and decrypt `packet` ...
//!     rest = tail;
//! }
//! ```
//!
//! Sending: [`write_long_header`] / [`write_short_header`] append a header whose packet
//! number is still unprotected; once the payload is encrypted, [`set_long_header_length`]
//! (long headers, done before encryption since the header is authenticated) and
//! [`apply_header_protection`] finish the packet.
//!
//! All offsets in this module are relative to the first byte of the packet concerned.

use crate::coding::{BufExt, BufMutExt};
use crate::shared::{ConnectionId, MAX_CID_SIZE, RESET_TOKEN_SIZE};
use crate::varint::VarInt;
use bytes::BufMut;
use rustls::quic::HeaderProtectionKey;
use std::ops::Range;

/// QUIC version 1.
//= https://www.rfc-editor.org/rfc/rfc9000#section-15
//# This version of the specification is identified by the number 0x00000001.
pub const VERSION_1: u32 = 0x0000_0001;

/// QUIC version 2 (RFC 9369).
//= https://www.rfc-editor.org/rfc/rfc9369#section-3.1
//# The Version field of long headers is 0x6b3343cf.
pub const VERSION_2: u32 = 0x6b33_43cf;

/// The versions this implementation speaks. Which of them an endpoint offers or accepts,
/// and in which order of preference, is configuration ([`crate::ClientConfig`],
/// [`crate::ServerConfig`]).
pub const SUPPORTED_VERSIONS: &[u32] = &[VERSION_1, VERSION_2];

/// Whether a connection can switch from `from` to `to` during its handshake (compatible
/// version negotiation, RFC 9368 section 2.3): version 1 and version 2 differ only in
/// constants (RFC 9369 section 3), so the first flight of either converts into the other.
pub fn is_compatible(from: u32, to: u32) -> bool {
    is_supported_version(from) && is_supported_version(to)
}

/// Whether `version` is one this implementation speaks.
pub fn is_supported_version(version: u32) -> bool {
    SUPPORTED_VERSIONS.contains(&version)
}

/// Whether `version` is reserved for exercising version negotiation (0x?a?a?a?a).
//= https://www.rfc-editor.org/rfc/rfc9000#section-15
//# Versions that follow the pattern 0x?a?a?a?a are reserved for use in forcing
//# version negotiation to be exercised -- that is, any version number where the low
//# four bits of all bytes is 1010 (in binary).
pub fn is_reserved_version(version: u32) -> bool {
    version & 0x0f0f_0f0f == 0x0a0a_0a0a
}

/// A reserved (greasing) version built from `random`: its high nibbles are kept and its low
/// nibbles forced to 0xa.
pub fn grease_version(random: u32) -> u32 {
    (random & 0xf0f0_f0f0) | 0x0a0a_0a0a
}

/// Length of the ciphertext sample that header protection takes, for every cipher suite
/// usable with QUIC version 1.
//= https://www.rfc-editor.org/rfc/rfc9001#section-5.4.2
//# The
//# cipher suites defined in {{!TLS13}} -- other than TLS_AES_128_CCM_8_SHA256, for
//# which a header protection scheme is not defined in this document -- have 16-byte
//# expansions and 16-byte header protection samples.
pub const HP_SAMPLE_LEN: usize = 16;

/// The sample starts this many bytes after the start of the Packet Number field.
//= https://www.rfc-editor.org/rfc/rfc9001#section-5.4.2
//# in sampling packet ciphertext for header protection, the Packet Number field is
//# assumed to be 4 bytes long (its maximum possible encoded length).
pub const HP_SAMPLE_OFFSET: usize = 4;

/// Smallest datagram that can be a stateless reset.
//= https://www.rfc-editor.org/rfc/rfc9000#section-10.3
//# The resulting minimum size of 21 bytes does not guarantee that a Stateless Reset
//# is difficult to distinguish from other packets if the recipient requires the use
//# of a connection ID.
pub const MIN_STATELESS_RESET_LEN: usize = 21;

/// Length of the Retry Integrity Tag.
pub const RETRY_INTEGRITY_TAG_LEN: usize = 16;

/// Largest value the 2-byte Length field reserved by [`write_long_header`] can carry.
pub const MAX_LONG_HEADER_LENGTH: usize = (1 << 14) - 1;

const LONG_HEADER_FORM: u8 = 0x80;
const FIXED_BIT: u8 = 0x40;
const SPIN_BIT: u8 = 0x20;
const KEY_PHASE_BIT: u8 = 0x04;
const LONG_RESERVED_BITS: u8 = 0x0c;
const SHORT_RESERVED_BITS: u8 = 0x18;
const PN_LEN_BITS: u8 = 0x03;

/// The long header packet types. Their codes depend on the version: version 2 rotates
/// them.
//= https://www.rfc-editor.org/rfc/rfc9000#section-17.2
//# The next two bits (those with a mask of 0x30) of byte 0 contain a packet type.
#[derive(Debug, Copy, Clone, Eq, PartialEq, Hash)]
pub enum LongType {
    /// Initial (0x00 in version 1, 0x01 in version 2).
    Initial,
    /// 0-RTT (0x01 in version 1, 0x02 in version 2).
    ZeroRtt,
    /// Handshake (0x02 in version 1, 0x03 in version 2).
    Handshake,
    /// Retry (0x03 in version 1, 0x00 in version 2).
    Retry,
}

impl LongType {
    /// The four types in the order of their version 1 codes.
    const BY_V1_CODE: [LongType; 4] = [
        LongType::Initial,
        LongType::ZeroRtt,
        LongType::Handshake,
        LongType::Retry,
    ];

    /// The two-bit code of this type in `version`.
    //= https://www.rfc-editor.org/rfc/rfc9369#section-3.2
    //# Initial: 0b01
    //# 0-RTT: 0b10
    //# Handshake: 0b11
    //# Retry: 0b00
    fn code(self, version: u32) -> u8 {
        let v1 = match self {
            LongType::Initial => 0,
            LongType::ZeroRtt => 1,
            LongType::Handshake => 2,
            LongType::Retry => 3,
        };
        if version == VERSION_2 {
            (v1 + 1) & 3
        } else {
            v1
        }
    }

    /// The two type bits for `version` (already shifted into place: 0x00, 0x10, 0x20 or
    /// 0x30).
    pub fn bits(self, version: u32) -> u8 {
        self.code(version) << 4
    }

    /// The type encoded in the first byte of a long header of `version`.
    pub fn from_first_byte(first: u8, version: u32) -> Self {
        let code = (first & 0x30) >> 4;
        let v1 = if version == VERSION_2 {
            (code + 3) & 3
        } else {
            code
        };
        Self::BY_V1_CODE[usize::from(v1)]
    }
}

/// The kinds of packets that carry frames (and therefore a packet number and a protected
/// payload).
#[derive(Debug, Copy, Clone, Eq, PartialEq, Hash)]
pub enum PacketKind {
    /// Initial packets (long header).
    Initial,
    /// 0-RTT packets (long header).
    ZeroRtt,
    /// Handshake packets (long header).
    Handshake,
    /// 1-RTT packets (short header).
    OneRtt,
}

impl PacketKind {
    /// The packet number space packets of this kind belong to.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-12.3
    //# Initial space:
    //# : All Initial packets ({{packet-initial}}) are in this space.
    //#
    //# Handshake space:
    //# : All Handshake packets ({{packet-handshake}}) are in this space.
    //#
    //# Application data space:
    //# : All 0-RTT ({{packet-0rtt}}) and 1-RTT ({{packet-1rtt}}) packets are in this
    //#   space.
    pub fn space(self) -> SpaceId {
        match self {
            PacketKind::Initial => SpaceId::Initial,
            PacketKind::Handshake => SpaceId::Handshake,
            PacketKind::ZeroRtt | PacketKind::OneRtt => SpaceId::Data,
        }
    }
}

/// A packet number space.
#[derive(Debug, Copy, Clone, Eq, PartialEq, Ord, PartialOrd, Hash)]
pub enum SpaceId {
    /// The Initial space.
    Initial,
    /// The Handshake space.
    Handshake,
    /// The application data space (0-RTT and 1-RTT; one per path under multipath).
    Data,
}

impl SpaceId {
    /// The three spaces in handshake order.
    pub const ALL: [SpaceId; 3] = [SpaceId::Initial, SpaceId::Handshake, SpaceId::Data];
}

/// Why a received packet could not be parsed (or unprotected).
#[derive(Debug, Clone, Eq, PartialEq, thiserror::Error)]
pub enum PacketDecodeError {
    /// A long header carried a version this implementation does not speak; a server
    /// answers with a Version Negotiation packet. The connection IDs are given as byte
    /// ranges of the input, since other versions allow them to be up to 255 bytes long.
    #[error("unsupported QUIC version {version:#010x}")]
    UnsupportedVersion {
        /// The version found in the packet.
        version: u32,
        /// Byte range of the Destination Connection ID in the input.
        dcid: Range<usize>,
        /// Byte range of the Source Connection ID in the input.
        scid: Range<usize>,
    },
    /// The packet is malformed and must be discarded.
    #[error("invalid packet header: {0}")]
    InvalidHeader(&'static str),
}

/// What kind of packet a header introduced, with its kind-specific fields.
#[derive(Debug, Clone, Eq, PartialEq)]
pub enum Header {
    /// An Initial, 0-RTT or Handshake packet (never [`LongType::Retry`]).
    Long {
        /// The long packet type.
        ty: LongType,
        /// The version (one of [`SUPPORTED_VERSIONS`]).
        version: u32,
        /// The Source Connection ID.
        scid: ConnectionId,
        /// Byte range of the Token (Initial packets; empty otherwise). A client receiving
        /// an Initial with a non-empty token discards it or closes the connection
        /// (RFC 9000 section 17.2.2); that is connection-level policy.
        token: Range<usize>,
        /// Offset of the still-protected Packet Number field.
        pn_offset: usize,
    },
    /// A 1-RTT packet.
    Short {
        /// Offset of the still-protected Packet Number field (1 + DCID length).
        pn_offset: usize,
    },
    /// A Version Negotiation packet (version 0).
    VersionNegotiation {
        /// The Source Connection ID.
        scid: ConnectionId,
        /// The versions the server lists, in packet order.
        versions: Vec<u32>,
    },
    /// A Retry packet.
    Retry {
        /// The version.
        version: u32,
        /// The Source Connection ID (the client's next Destination Connection ID).
        scid: ConnectionId,
        /// Byte range of the Retry Token (never empty).
        token: Range<usize>,
        /// Byte range of the Retry Integrity Tag (the last 16 bytes).
        integrity_tag: Range<usize>,
    },
}

/// The unprotected fields of the first packet of a datagram; see [`decode_header`].
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct PacketHeader {
    /// The header form and its specific fields.
    pub header: Header,
    /// The Destination Connection ID.
    pub dcid: ConnectionId,
    /// Length of this packet within the datagram: up to the end of the Length field's
    /// extent for Initial, 0-RTT and Handshake packets, the rest of the datagram otherwise.
    pub packet_len: usize,
}

impl PacketHeader {
    /// Offset of the protected Packet Number field, for packets that have one.
    pub fn pn_offset(&self) -> Option<usize> {
        match self.header {
            Header::Long { pn_offset, .. } | Header::Short { pn_offset } => Some(pn_offset),
            Header::VersionNegotiation { .. } | Header::Retry { .. } => None,
        }
    }

    /// The kind of packet, for packets that carry frames.
    pub fn kind(&self) -> Option<PacketKind> {
        match self.header {
            Header::Long { ty, .. } => match ty {
                LongType::Initial => Some(PacketKind::Initial),
                LongType::ZeroRtt => Some(PacketKind::ZeroRtt),
                LongType::Handshake => Some(PacketKind::Handshake),
                LongType::Retry => None,
            },
            Header::Short { .. } => Some(PacketKind::OneRtt),
            Header::VersionNegotiation { .. } | Header::Retry { .. } => None,
        }
    }

    /// The packet number space, for packets that carry frames.
    pub fn space(&self) -> Option<SpaceId> {
        self.kind().map(PacketKind::space)
    }

    /// Whether the packet has a long header.
    pub fn is_long(&self) -> bool {
        !matches!(self.header, Header::Short { .. })
    }
}

/// Reads a connection ID of at most 20 bytes (a version 1 rule).
fn read_cid(buf: &mut &[u8], what: &'static str) -> Result<ConnectionId, PacketDecodeError> {
    let len = buf
        .read_u8()
        .map_err(|_| PacketDecodeError::InvalidHeader("truncated connection ID length"))?
        as usize;
    //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2
    //# In QUIC version 1, this value MUST NOT exceed 20 bytes.
    //# Endpoints that receive a version 1 long header with a value larger than 20
    //# MUST drop the packet.
    if len > MAX_CID_SIZE {
        return Err(PacketDecodeError::InvalidHeader(what));
    }
    let (cid, rest) = buf
        .split_at_checked(len)
        .ok_or(PacketDecodeError::InvalidHeader("truncated connection ID"))?;
    *buf = rest;
    Ok(ConnectionId::new(cid))
}

/// Reads a length-prefixed connection ID of any length (0..=255), returning its range.
fn read_cid_range(datagram: &[u8], at: usize) -> Result<Range<usize>, PacketDecodeError> {
    let len = *datagram.get(at).ok_or(PacketDecodeError::InvalidHeader(
        "truncated connection ID length",
    ))? as usize;
    let range = at + 1..at + 1 + len;
    if range.end > datagram.len() {
        return Err(PacketDecodeError::InvalidHeader("truncated connection ID"));
    }
    Ok(range)
}

/// Parses the first packet of `datagram` without removing header protection.
///
/// `local_cid_len` is the length of the connection IDs this endpoint issues, which is how
/// long the Destination Connection ID of a short header is. Offsets in the result are
/// relative to `datagram`. The caller splits coalesced packets with
/// [`PacketHeader::packet_len`] and calls this again on the remainder.
///
/// Fails with [`PacketDecodeError::UnsupportedVersion`] for long headers of unknown versions
/// (so a server can send Version Negotiation) and [`PacketDecodeError::InvalidHeader`] for
/// anything that must be dropped: connection IDs longer than 20 bytes, a clear fixed bit,
/// truncated fields, a Length beyond the datagram, or a packet too short to hold the
/// header-protection sample.
pub fn decode_header(
    datagram: &[u8],
    local_cid_len: usize,
) -> Result<PacketHeader, PacketDecodeError> {
    let first = *datagram
        .first()
        .ok_or(PacketDecodeError::InvalidHeader("empty datagram"))?;
    if first & LONG_HEADER_FORM == 0 {
        decode_short(datagram, first, local_cid_len)
    } else {
        decode_long(datagram, first)
    }
}

fn decode_short(
    datagram: &[u8],
    first: u8,
    local_cid_len: usize,
) -> Result<PacketHeader, PacketDecodeError> {
    //= https://www.rfc-editor.org/rfc/rfc9000#section-17.3.1
    //# The next bit (0x40) of byte 0 is set to 1.  Packets containing a zero value
    //# for this bit are not valid packets in this version and MUST be discarded.
    if first & FIXED_BIT == 0 {
        return Err(PacketDecodeError::InvalidHeader("fixed bit is zero"));
    }
    if local_cid_len > MAX_CID_SIZE {
        return Err(PacketDecodeError::InvalidHeader(
            "local connection ID length above 20",
        ));
    }
    let pn_offset = 1 + local_cid_len;
    check_sample_room(datagram.len(), pn_offset)?;
    let dcid = ConnectionId::new(&datagram[1..pn_offset]);
    Ok(PacketHeader {
        header: Header::Short { pn_offset },
        dcid,
        packet_len: datagram.len(),
    })
}

/// Checks that a packet of `packet_len` bytes whose packet number starts at `pn_offset`
/// holds a complete header-protection sample.
fn check_sample_room(packet_len: usize, pn_offset: usize) -> Result<(), PacketDecodeError> {
    //= https://www.rfc-editor.org/rfc/rfc9001#section-5.4.2
    //# An endpoint MUST discard packets that are not long enough to contain a complete
    //# sample.
    if packet_len < pn_offset + HP_SAMPLE_OFFSET + HP_SAMPLE_LEN {
        return Err(PacketDecodeError::InvalidHeader(
            "packet too short for a header protection sample",
        ));
    }
    Ok(())
}

fn decode_long(datagram: &[u8], first: u8) -> Result<PacketHeader, PacketDecodeError> {
    let mut buf = datagram
        .get(1..)
        .ok_or(PacketDecodeError::InvalidHeader("truncated long header"))?;
    let version = buf
        .read_u32()
        .map_err(|_| PacketDecodeError::InvalidHeader("truncated version"))?;

    if version == 0 {
        return decode_version_negotiation(datagram, buf);
    }
    if !is_supported_version(version) {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2
        //# In order to properly form a Version Negotiation packet,
        //# servers SHOULD be able to read longer connection IDs from other QUIC versions.
        let dcid = read_cid_range(datagram, 5)?;
        let scid = read_cid_range(datagram, dcid.end)?;
        return Err(PacketDecodeError::UnsupportedVersion {
            version,
            dcid,
            scid,
        });
    }

    //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2
    //# The next bit (0x40) of byte 0 is set to 1, unless the packet is a Version
    //# Negotiation packet.  Packets containing a zero value for this bit are not
    //# valid packets in this version and MUST be discarded.
    if first & FIXED_BIT == 0 {
        return Err(PacketDecodeError::InvalidHeader("fixed bit is zero"));
    }
    let dcid = read_cid(&mut buf, "destination connection ID longer than 20")?;
    let scid = read_cid(&mut buf, "source connection ID longer than 20")?;
    let ty = LongType::from_first_byte(first, version);
    let offset_of = |rest: &[u8]| datagram.len() - rest.len();

    if ty == LongType::Retry {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.5
        //# Retry Token (..),
        //# Retry Integrity Tag (128),
        let token_start = offset_of(buf);
        let tag_start = datagram
            .len()
            .checked_sub(RETRY_INTEGRITY_TAG_LEN)
            .filter(|&t| t >= token_start)
            .ok_or(PacketDecodeError::InvalidHeader(
                "Retry without integrity tag",
            ))?;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.5.2
        //# A client MUST discard a Retry packet with a zero-length Retry
        //# Token field.
        if tag_start == token_start {
            return Err(PacketDecodeError::InvalidHeader("Retry with empty token"));
        }
        return Ok(PacketHeader {
            header: Header::Retry {
                version,
                scid,
                token: token_start..tag_start,
                integrity_tag: tag_start..datagram.len(),
            },
            dcid,
            packet_len: datagram.len(),
        });
    }

    let mut token = 0..0;
    if ty == LongType::Initial {
        let token_len = buf
            .get_var_u64()
            .map_err(|_| PacketDecodeError::InvalidHeader("truncated token length"))?;
        let start = offset_of(buf);
        let token_len = usize::try_from(token_len)
            .ok()
            .filter(|&l| l <= buf.len())
            .ok_or(PacketDecodeError::InvalidHeader("token beyond datagram"))?;
        token = start..start + token_len;
        buf = &buf[token_len..];
    }
    //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2
    //# This is the length of the remainder of the packet (that is, the Packet Number
    //# and Payload fields) in bytes, encoded as a variable-length integer
    let length = buf
        .get_var_u64()
        .map_err(|_| PacketDecodeError::InvalidHeader("truncated Length field"))?;
    let pn_offset = offset_of(buf);
    let packet_len = usize::try_from(length)
        .ok()
        .filter(|&l| l <= buf.len())
        .ok_or(PacketDecodeError::InvalidHeader("Length beyond datagram"))?
        + pn_offset;
    check_sample_room(packet_len, pn_offset)?;
    Ok(PacketHeader {
        header: Header::Long {
            ty,
            version,
            scid,
            token,
            pn_offset,
        },
        dcid,
        packet_len,
    })
}

fn decode_version_negotiation(
    datagram: &[u8],
    mut buf: &[u8],
) -> Result<PacketHeader, PacketDecodeError> {
    // A client only ever sends connection IDs of at most 20 bytes, so a Version Negotiation
    // packet echoing longer ones cannot be a response to it.
    let dcid = read_cid(
        &mut buf,
        "Version Negotiation destination connection ID too long",
    )?;
    let scid = read_cid(
        &mut buf,
        "Version Negotiation source connection ID too long",
    )?;
    //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.1
    //# The remainder of the Version Negotiation packet is a list of 32-bit versions
    //# that the server supports.
    if !buf.len().is_multiple_of(4) {
        return Err(PacketDecodeError::InvalidHeader(
            "Version Negotiation list is not a whole number of versions",
        ));
    }
    let versions = buf
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(PacketHeader {
        header: Header::VersionNegotiation { scid, versions },
        dcid,
        packet_len: datagram.len(),
    })
}

/// The Destination Connection ID of the first packet of `datagram`, cheaply, for routing.
///
/// Returns `None` if the datagram is too short or the connection ID is longer than 20 bytes
/// (a long header of another version; [`decode_header`] reports those in full).
pub fn peek_dcid(datagram: &[u8], local_cid_len: usize) -> Option<ConnectionId> {
    let first = *datagram.first()?;
    let cid = if first & LONG_HEADER_FORM == 0 {
        datagram.get(1..1usize.checked_add(local_cid_len)?)?
    } else {
        let len = *datagram.get(5)? as usize;
        datagram.get(6..6 + len)?
    };
    ConnectionId::try_new(cid)
}

/// The trailing 16 bytes of `datagram` if it is long enough to be a stateless reset, to be
/// compared (in constant time, see [`crate::ResetToken::ct_eq`]) with known tokens.
//= https://www.rfc-editor.org/rfc/rfc9000#section-10.3.1
//# An endpoint detects a potential Stateless Reset using the trailing 16 bytes of
//# the UDP datagram.
pub fn stateless_reset_token_candidate(datagram: &[u8]) -> Option<&[u8; RESET_TOKEN_SIZE]> {
    if datagram.len() < MIN_STATELESS_RESET_LEN {
        return None;
    }
    datagram
        .get(datagram.len() - RESET_TOKEN_SIZE..)?
        .try_into()
        .ok()
}

/// The header fields revealed by removing header protection.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub struct UnprotectedHeader {
    /// The first byte with protection removed.
    pub first_byte: u8,
    /// Length of the Packet Number field, 1 to 4.
    pub pn_len: usize,
    /// The truncated packet number as sent; see [`decode_packet_number`].
    pub truncated_pn: u32,
}

impl UnprotectedHeader {
    /// Whether this came from a long header.
    pub fn is_long(&self) -> bool {
        self.first_byte & LONG_HEADER_FORM != 0
    }

    /// Number of bits of the truncated packet number (8, 16, 24 or 32).
    pub fn pn_nbits(&self) -> u32 {
        self.pn_len as u32 * 8
    }

    /// The Key Phase bit of a short header (false for long headers).
    //= https://www.rfc-editor.org/rfc/rfc9000#section-17.3.1
    //# The next bit (0x04) of byte 0 indicates the key phase, which allows a
    //# recipient of a packet to identify the packet protection keys that are used to
    //# protect the packet.
    pub fn key_phase(&self) -> bool {
        !self.is_long() && self.first_byte & KEY_PHASE_BIT != 0
    }

    /// The latency spin bit of a short header (false for long headers).
    pub fn spin(&self) -> bool {
        !self.is_long() && self.first_byte & SPIN_BIT != 0
    }

    /// Whether the reserved bits are non-zero. The caller must only act on this once the
    /// packet has also been decrypted successfully, and then close the connection with
    /// PROTOCOL_VIOLATION.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2
    //# An endpoint MUST treat receipt of a packet that has a non-zero value for these
    //# bits after removing both packet and header protection as a connection error
    //# of type PROTOCOL_VIOLATION.
    pub fn reserved_bits_set(&self) -> bool {
        let mask = if self.is_long() {
            LONG_RESERVED_BITS
        } else {
            SHORT_RESERVED_BITS
        };
        self.first_byte & mask != 0
    }
}

/// Removes header protection in place from `packet` (which starts at the packet's first
/// byte), revealing the first byte's protected bits and the packet number.
///
/// The packet must hold the full sample at `pn_offset + 4`; [`decode_header`] has already
/// checked this for packets it returned.
//= https://www.rfc-editor.org/rfc/rfc9001#section-5.4.2
//# sample_offset = pn_offset + 4
//#
//# sample = packet[sample_offset..sample_offset+sample_length]
pub fn remove_header_protection(
    packet: &mut [u8],
    pn_offset: usize,
    hp: &dyn HeaderProtectionKey,
) -> Result<UnprotectedHeader, PacketDecodeError> {
    let sample_start =
        pn_offset
            .checked_add(HP_SAMPLE_OFFSET)
            .ok_or(PacketDecodeError::InvalidHeader(
                "packet number offset overflow",
            ))?;
    let sample_end = sample_start.saturating_add(hp.sample_len());
    if pn_offset == 0 || sample_end > packet.len() {
        return Err(PacketDecodeError::InvalidHeader(
            "packet too short for a header protection sample",
        ));
    }
    let (head, rest) = packet.split_at_mut(pn_offset);
    let (pn_field, after) = rest.split_at_mut(HP_SAMPLE_OFFSET);
    let sample = &after[..hp.sample_len()];
    // `head` is non-empty since pn_offset > 0.
    let first = &mut head[0];
    hp.decrypt_in_place(sample, first, pn_field)
        .map_err(|_| PacketDecodeError::InvalidHeader("header protection removal failed"))?;
    let first_byte = *first;
    let pn_len = (first_byte & PN_LEN_BITS) as usize + 1;
    let truncated_pn = pn_field[..pn_len]
        .iter()
        .fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
    Ok(UnprotectedHeader {
        first_byte,
        pn_len,
        truncated_pn,
    })
}

/// Header protection could not be applied to an outgoing packet (a bug in the caller's
/// packet layout, not a network condition).
#[derive(Debug, Copy, Clone, Eq, PartialEq, thiserror::Error)]
pub enum HeaderProtectionError {
    /// The packet does not extend to the end of the sample; pad it.
    #[error("packet too short for a header protection sample")]
    TooShort,
    /// The packet number length is not 1 to 4 bytes or the key rejected the input.
    #[error("header protection key rejected the input")]
    Key,
}

/// Applies header protection in place to an encrypted `packet` (starting at its first
/// byte) whose Packet Number field of `pn_len` bytes starts at `pn_offset`.
//= https://www.rfc-editor.org/rfc/rfc9001#section-5.4.1
//# Header protection is applied after packet protection is applied (see {{aead}}).
pub fn apply_header_protection(
    packet: &mut [u8],
    pn_offset: usize,
    pn_len: usize,
    hp: &dyn HeaderProtectionKey,
) -> Result<(), HeaderProtectionError> {
    if !(1..=4).contains(&pn_len) {
        return Err(HeaderProtectionError::Key);
    }
    let sample_end = pn_offset
        .saturating_add(HP_SAMPLE_OFFSET)
        .saturating_add(hp.sample_len());
    if pn_offset == 0 || sample_end > packet.len() {
        return Err(HeaderProtectionError::TooShort);
    }
    let (head, rest) = packet.split_at_mut(pn_offset);
    let (pn_field, after) = rest.split_at_mut(HP_SAMPLE_OFFSET);
    let sample = &after[..hp.sample_len()];
    hp.encrypt_in_place(sample, &mut head[0], &mut pn_field[..pn_len])
        .map_err(|_| HeaderProtectionError::Key)
}

/// Recovers a full packet number from its truncated form.
///
/// `largest_pn` is the largest packet number successfully processed in the space (`None`
/// before any), `truncated` the value of the Packet Number field and `pn_nbits` its width
/// (8, 16, 24 or 32).
//= https://www.rfc-editor.org/rfc/rfc9000#section-17.1
//# Once header protection is removed, the packet number is decoded by finding the
//# packet number value that is closest to the next expected packet.  The next
//# expected packet is the highest received packet number plus one.
pub fn decode_packet_number(largest_pn: Option<u64>, truncated: u64, pn_nbits: u32) -> u64 {
    let expected = largest_pn.map_or(0, |l| l.saturating_add(1));
    let win = 1u64 << pn_nbits;
    let hwin = win / 2;
    let mask = win - 1;
    //= https://www.rfc-editor.org/rfc/rfc9000#appendix-A.3
    //# candidate_pn = (expected_pn & ~pn_mask) | truncated_pn
    //# if candidate_pn <= expected_pn - pn_hwin and
    //#    candidate_pn < (1 << 62) - pn_win:
    //#    return candidate_pn + pn_win
    //# if candidate_pn > expected_pn + pn_hwin and
    //#    candidate_pn >= pn_win:
    //#    return candidate_pn - pn_win
    //# return candidate_pn
    let candidate = (expected & !mask) | (truncated & mask);
    if expected
        .checked_sub(hwin)
        .is_some_and(|low| candidate <= low)
        && candidate < (1 << 62) - win
    {
        candidate + win
    } else if candidate > expected.saturating_add(hwin) && candidate >= win {
        candidate - win
    } else {
        candidate
    }
}

/// How many bytes (1 to 4) to encode packet number `full_pn` with, given the largest packet
/// number the peer acknowledged in this space.
//= https://www.rfc-editor.org/rfc/rfc9000#section-17.1
//# After an acknowledgment is received for a packet number space, the sender MUST
//# use a packet number size able to represent more than twice as large a range as
//# the difference between the largest acknowledged packet number and the packet
//# number being sent.
pub fn packet_number_len(full_pn: u64, largest_acked: Option<u64>) -> usize {
    //= https://www.rfc-editor.org/rfc/rfc9000#appendix-A.2
    //# if largest_acked is None:
    //#   num_unacked = full_pn + 1
    //# else:
    //#   num_unacked = full_pn - largest_acked
    let num_unacked = match largest_acked {
        None => full_pn.saturating_add(1),
        Some(acked) => full_pn.saturating_sub(acked),
    };
    // One bit more than the bit length of num_unacked represents more than twice the range.
    let min_bits = (u64::BITS - num_unacked.leading_zeros()) as usize + 1;
    min_bits.div_ceil(8).clamp(1, 4)
}

/// Writes the low `pn_len` bytes (1 to 4) of `pn`, big-endian.
///
/// # Panics
/// If `pn_len` is not in 1..=4 (a caller bug).
pub fn write_packet_number<B: BufMut + ?Sized>(pn: u64, pn_len: usize, buf: &mut B) {
    assert!((1..=4).contains(&pn_len), "packet number length {pn_len}");
    buf.put_uint(pn & ((1u64 << (8 * pn_len)) - 1), pn_len);
}

/// Where [`write_long_header`] put the fields that are filled in or protected later.
/// Offsets are relative to `start`.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub struct LongHeaderLayout {
    /// Position of the packet's first byte in the buffer.
    pub start: usize,
    /// Offset of the 2-byte Length field.
    pub length_offset: usize,
    /// Offset of the Packet Number field.
    pub pn_offset: usize,
    /// Length of the Packet Number field.
    pub pn_len: usize,
}

/// Appends an Initial, 0-RTT or Handshake header with an unprotected packet number. The
/// Length field is reserved as a 2-byte varint; fill it in with [`set_long_header_length`]
/// before encrypting.
///
/// `token` is written for Initial packets only (servers pass an empty token).
///
/// # Panics
/// If `ty` is [`LongType::Retry`] (use [`write_retry`]), `pn_len` is not in 1..=4, or a
/// token is given for a non-Initial packet: caller bugs.
#[allow(clippy::too_many_arguments)]
pub fn write_long_header(
    buf: &mut Vec<u8>,
    ty: LongType,
    version: u32,
    dcid: &ConnectionId,
    scid: &ConnectionId,
    token: &[u8],
    pn: u64,
    pn_len: usize,
) -> LongHeaderLayout {
    assert!(ty != LongType::Retry, "Retry packets have no packet number");
    assert!(
        ty == LongType::Initial || token.is_empty(),
        "only Initial packets carry a token"
    );
    assert!((1..=4).contains(&pn_len), "packet number length {pn_len}");
    let start = buf.len();
    //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2
    //# The value included prior to protection MUST be set to 0.
    buf.put_u8(LONG_HEADER_FORM | FIXED_BIT | ty.bits(version) | (pn_len as u8 - 1));
    buf.put_u32(version);
    buf.put_u8(dcid.len() as u8);
    buf.put_slice(dcid);
    buf.put_u8(scid.len() as u8);
    buf.put_slice(scid);
    if ty == LongType::Initial {
        buf.put_var_u64(token.len() as u64);
        buf.put_slice(token);
    }
    let length_offset = buf.len() - start;
    buf.put_u16(0x4000);
    let pn_offset = buf.len() - start;
    write_packet_number(pn, pn_len, buf);
    LongHeaderLayout {
        start,
        length_offset,
        pn_offset,
        pn_len,
    }
}

/// Fills in the Length field reserved by [`write_long_header`]: `len` covers the packet
/// number, the payload and the AEAD tag.
///
/// # Panics
/// If `len` exceeds [`MAX_LONG_HEADER_LENGTH`] or the layout does not fit `buf`.
pub fn set_long_header_length(buf: &mut [u8], layout: &LongHeaderLayout, len: usize) {
    assert!(len <= MAX_LONG_HEADER_LENGTH, "long header Length {len}");
    let at = layout.start + layout.length_offset;
    let mut field = &mut buf[at..at + 2];
    VarInt::saturating(len as u64).encode_with_len(2, &mut field);
}

/// Appends a 1-RTT (short) header with an unprotected packet number; returns the offset of
/// the Packet Number field from the packet's first byte.
///
/// # Panics
/// If `pn_len` is not in 1..=4.
pub fn write_short_header(
    buf: &mut Vec<u8>,
    spin: bool,
    key_phase: bool,
    dcid: &ConnectionId,
    pn: u64,
    pn_len: usize,
) -> usize {
    assert!((1..=4).contains(&pn_len), "packet number length {pn_len}");
    let mut first = FIXED_BIT | (pn_len as u8 - 1);
    if spin {
        first |= SPIN_BIT;
    }
    if key_phase {
        first |= KEY_PHASE_BIT;
    }
    buf.put_u8(first);
    buf.put_slice(dcid);
    write_packet_number(pn, pn_len, buf);
    1 + dcid.len()
}

/// Appends a Version Negotiation packet.
///
/// `dcid` must be the Source Connection ID and `scid` the Destination Connection ID of the
/// packet being answered (both up to 255 bytes). `unused` supplies the arbitrary low bits
/// of the first byte. `grease`, if given, is listed after `versions` (see
/// [`grease_version`]).
///
/// # Panics
/// If a connection ID is longer than 255 bytes.
//= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.1
//# The server MUST include the value from the Source Connection ID field of the
//# packet it receives in the Destination Connection ID field.  The value for Source
//# Connection ID MUST be copied from the Destination Connection ID of the received
//# packet, which is initially randomly selected by a client.
pub fn write_version_negotiation(
    buf: &mut Vec<u8>,
    unused: u8,
    dcid: &[u8],
    scid: &[u8],
    versions: &[u32],
    grease: Option<u32>,
) {
    //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.1
    //# servers SHOULD set the most significant
    //# bit of this field (0x40) to 1 so that Version Negotiation packets appear to have
    //# the Fixed Bit field.
    buf.put_u8(LONG_HEADER_FORM | FIXED_BIT | (unused & 0x3f));
    //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.1
    //# The Version field of a Version Negotiation packet MUST be set to 0x00000000.
    buf.put_u32(0);
    buf.put_u8(u8::try_from(dcid.len()).expect("connection ID above 255 bytes"));
    buf.put_slice(dcid);
    buf.put_u8(u8::try_from(scid.len()).expect("connection ID above 255 bytes"));
    buf.put_slice(scid);
    for &v in versions.iter().chain(grease.as_ref()) {
        buf.put_u32(v);
    }
}

/// Appends a Retry packet without its integrity tag, returning the offset of its first
/// byte. The caller computes the tag over [`retry_pseudo_packet`] of `&buf[start..]` and
/// appends it. `unused` supplies the arbitrary low four bits of the first byte.
//= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.5
//# The value in the Unused field is set to an arbitrary value by the
//# server; a client MUST ignore these bits.
pub fn write_retry(
    buf: &mut Vec<u8>,
    unused: u8,
    version: u32,
    dcid: &ConnectionId,
    scid: &ConnectionId,
    token: &[u8],
) -> usize {
    let start = buf.len();
    buf.put_u8(LONG_HEADER_FORM | FIXED_BIT | LongType::Retry.bits(version) | (unused & 0x0f));
    buf.put_u32(version);
    buf.put_u8(dcid.len() as u8);
    buf.put_slice(dcid);
    buf.put_u8(scid.len() as u8);
    buf.put_slice(scid);
    buf.put_slice(token);
    start
}

/// Builds the Retry pseudo-packet (the associated data of the Retry Integrity Tag) from the
/// Original Destination Connection ID and the Retry packet without its tag.
//= https://www.rfc-editor.org/rfc/rfc9001#section-5.8
//# The Retry Pseudo-Packet is not sent over the wire. It is computed by taking
//# the transmitted Retry packet, removing the Retry Integrity Tag, and prepending
//# the two following fields:
pub fn retry_pseudo_packet(odcid: &ConnectionId, retry_without_tag: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + odcid.len() + retry_without_tag.len());
    out.push(odcid.len() as u8);
    out.extend_from_slice(odcid);
    out.extend_from_slice(retry_without_tag);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rustls::quic::{Keys, Version};

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s.split_whitespace().collect::<String>()).unwrap()
    }

    fn v1_initial_keys(side: rustls::Side) -> Keys {
        let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
            .tls13()
            .unwrap()
            .quic_suite()
            .unwrap();
        suite.keys(&unhex("8394c8f03e515708"), side, Version::V1)
    }

    #[test]
    fn long_types_rotate_in_version_2() {
        let all = [
            LongType::Initial,
            LongType::ZeroRtt,
            LongType::Handshake,
            LongType::Retry,
        ];
        let v1: Vec<u8> = all.iter().map(|t| t.bits(VERSION_1)).collect();
        let v2: Vec<u8> = all.iter().map(|t| t.bits(VERSION_2)).collect();
        assert_eq!(v1, [0x00, 0x10, 0x20, 0x30]);
        assert_eq!(v2, [0x10, 0x20, 0x30, 0x00]);
        for version in [VERSION_1, VERSION_2] {
            for t in all {
                assert_eq!(
                    LongType::from_first_byte(0xc0 | t.bits(version), version),
                    t
                );
            }
        }
        // A v1 Initial's first byte read as version 2 is a Retry.
        assert_eq!(LongType::from_first_byte(0xc0, VERSION_2), LongType::Retry);
    }

    #[test]
    fn reserved_versions() {
        assert!(is_reserved_version(0x1a2a3a4a));
        assert!(is_reserved_version(0x0a0a0a0a));
        assert!(!is_reserved_version(VERSION_1));
        assert!(is_reserved_version(grease_version(0x12345678)));
        assert!(is_supported_version(1));
        assert!(is_supported_version(VERSION_2));
        assert!(!is_supported_version(0xff00_001d));
    }

    //= https://www.rfc-editor.org/rfc/rfc9000#appendix-A.3
    //# For example, if the highest successfully authenticated packet had a packet
    //# number of 0xa82f30ea, then a packet containing a 16-bit value of 0x9b32 will be
    //# decoded as 0xa82f9b32.
    #[test]
    fn packet_number_decoding_example() {
        assert_eq!(
            decode_packet_number(Some(0xa82f30ea), 0x9b32, 16),
            0xa82f9b32
        );
        assert_eq!(decode_packet_number(None, 0, 8), 0);
        assert_eq!(decode_packet_number(None, 5, 32), 5);
        // Wrap forwards and backwards around a window boundary.
        assert_eq!(decode_packet_number(Some(0xff), 0x01, 8), 0x101);
        assert_eq!(decode_packet_number(Some(0x101), 0xff, 8), 0xff);
        // Near 2^62 the candidate must not overflow.
        let top = (1u64 << 62) - 1;
        assert_eq!(decode_packet_number(Some(top - 1), 0xff, 8), top);
    }

    //= https://www.rfc-editor.org/rfc/rfc9000#appendix-A.2
    //# For example, if an endpoint has received an acknowledgment for packet 0xabe8b3
    //# and is sending a packet with a number of 0xac5c02, there are 29,519 (0x734f)
    //# outstanding packet numbers.  In order to represent at least twice this range
    //# (59,038 packets, or 0xe69e), 16 bits are required.
    //#
    //# In the same state, sending a packet with a number of 0xace8fe uses the 24-bit
    //# encoding, because at least 18 bits are required to represent twice the range
    //# (131,222 packets, or 0x020096).
    #[test]
    fn packet_number_length_example() {
        assert_eq!(packet_number_len(0xac5c02, Some(0xabe8b3)), 2);
        assert_eq!(packet_number_len(0xace8fe, Some(0xabe8b3)), 3);
        assert_eq!(packet_number_len(0, None), 1);
        assert_eq!(packet_number_len(127, None), 2);
        assert_eq!(packet_number_len(u64::MAX >> 2, None), 4);
    }

    proptest! {
        #[test]
        fn packet_number_roundtrip(largest_acked in 0u64..(1 << 40), gap in 1u64..(1 << 30)) {
            // The receiver has seen at least up to the peer's largest acked packet.
            let pn = largest_acked + gap;
            let len = packet_number_len(pn, Some(largest_acked));
            let mut out = Vec::new();
            write_packet_number(pn, len, &mut out);
            let truncated = out.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b));
            prop_assert_eq!(decode_packet_number(Some(largest_acked), truncated, 8 * len as u32), pn);
        }
    }

    //= https://www.rfc-editor.org/rfc/rfc9001#appendix-A.3
    //# The final protected packet is then:
    #[test]
    fn rfc9001_server_initial() {
        let mut packet = unhex(
            "cf000000010008f067a5502a4262b500 4075c0d95a482cd0991cd25b0aac406a
             5816b6394100f37a1c69797554780bb3 8cc5a99f5ede4cf73c3ec2493a1839b3
             dbcba3f6ea46c5b7684df3548e7ddeb9 c3bf9c73cc3f3bded74b562bfb19fb84
             022f8ef4cdd93795d77d06edbb7aaf2f 58891850abbdca3d20398c276456cbc4
             2158407dd074ee",
        );
        let original = packet.clone();
        let hdr = decode_header(&packet, 8).unwrap();
        assert_eq!(hdr.packet_len, packet.len());
        assert_eq!(hdr.dcid, ConnectionId::new(&[]));
        assert_eq!(hdr.kind(), Some(PacketKind::Initial));
        let Header::Long {
            ty,
            version,
            scid,
            token,
            pn_offset,
        } = hdr.header.clone()
        else {
            panic!("not a long header")
        };
        assert_eq!((ty, version), (LongType::Initial, VERSION_1));
        assert_eq!(scid, ConnectionId::new(&unhex("f067a5502a4262b5")));
        assert!(token.is_empty());
        assert_eq!(pn_offset, 18);

        // The client removes the server's header protection.
        let keys = v1_initial_keys(rustls::Side::Client);
        let un =
            remove_header_protection(&mut packet, pn_offset, keys.remote.header.as_ref()).unwrap();
        assert_eq!(un.first_byte, 0xc1);
        assert_eq!((un.pn_len, un.truncated_pn), (2, 1));
        assert!(!un.reserved_bits_set());
        assert_eq!(
            &packet[..20],
            &unhex("c1000000010008f067a5502a4262b50040750001")[..]
        );

        // Rebuilding the header and protecting it gives the RFC's bytes back.
        let mut rebuilt = Vec::new();
        let layout = write_long_header(
            &mut rebuilt,
            LongType::Initial,
            VERSION_1,
            &ConnectionId::new(&[]),
            &scid,
            &[],
            1,
            2,
        );
        set_long_header_length(&mut rebuilt, &layout, packet.len() - pn_offset);
        assert_eq!(&rebuilt[..], &packet[..20]);
        rebuilt.extend_from_slice(&packet[20..]);
        let server = v1_initial_keys(rustls::Side::Server);
        apply_header_protection(
            &mut rebuilt,
            layout.pn_offset,
            2,
            server.local.header.as_ref(),
        )
        .unwrap();
        assert_eq!(rebuilt, original);
    }

    //= https://www.rfc-editor.org/rfc/rfc9001#appendix-A.2
    //# header = c000000001088394c8f03e5157080000449e7b9aec34
    #[test]
    fn rfc9001_client_initial_header_protection() {
        // Only the header and the sample of the 1200-byte packet are needed.
        let mut packet = unhex(
            "c000000001088394c8f03e5157080000 449e7b9aec34d1b1c98dd7689fb8ec11
             d242b123dc9bd8bab936",
        );
        let keys = v1_initial_keys(rustls::Side::Server);
        let un = remove_header_protection(&mut packet, 18, keys.remote.header.as_ref()).unwrap();
        assert_eq!(un.first_byte, 0xc3);
        assert_eq!((un.pn_len, un.truncated_pn), (4, 2));
        assert_eq!(
            &packet[..22],
            &unhex("c300000001088394c8f03e5157080000449e00000002")[..]
        );
        // Length beyond the datagram is rejected by the decoder.
        assert_eq!(
            decode_header(&packet, 8),
            Err(PacketDecodeError::InvalidHeader("Length beyond datagram"))
        );
    }

    //= https://www.rfc-editor.org/rfc/rfc9001#appendix-A.5
    //# The protected packet is the smallest possible packet size of 21 bytes.
    #[test]
    fn rfc9001_chacha_short_header() {
        let suite = rustls::crypto::ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256
            .tls13()
            .unwrap();
        let hp_bytes: [u8; 32] =
            unhex("25a282b9e82f06f21f488917a4fc8f1b73573685608597d0efcb076b0ab7a7a4")
                .try_into()
                .unwrap();
        let hp = suite
            .quic
            .unwrap()
            .header_protection_key(rustls::crypto::cipher::AeadKey::from(hp_bytes));
        let original = unhex("4cfe4189655e5cd55c41f69080575d7999c25a5bfb");
        let mut packet = original.clone();
        let hdr = decode_header(&packet, 0).unwrap();
        assert_eq!(hdr.header, Header::Short { pn_offset: 1 });
        assert_eq!(hdr.packet_len, 21);
        let un = remove_header_protection(&mut packet, 1, hp.as_ref()).unwrap();
        assert_eq!(un.first_byte, 0x42);
        assert_eq!(un.pn_len, 3);
        assert!(!un.key_phase() && !un.spin() && !un.reserved_bits_set());
        assert_eq!(
            decode_packet_number(Some(654_360_563), u64::from(un.truncated_pn), 24),
            654_360_564
        );
        let mut rebuilt = Vec::new();
        let pn_offset = write_short_header(
            &mut rebuilt,
            false,
            false,
            &ConnectionId::new(&[]),
            654_360_564,
            3,
        );
        assert_eq!(rebuilt, unhex("4200bff4"));
        rebuilt.extend_from_slice(&packet[4..]);
        apply_header_protection(&mut rebuilt, pn_offset, 3, hp.as_ref()).unwrap();
        assert_eq!(rebuilt, original);
        // One byte shorter cannot hold the sample.
        assert!(decode_header(&original[..20], 0).is_err());
        assert_eq!(
            remove_header_protection(&mut packet[..20], 1, hp.as_ref()),
            Err(PacketDecodeError::InvalidHeader(
                "packet too short for a header protection sample"
            ))
        );
        assert_eq!(
            apply_header_protection(&mut rebuilt[..20], 1, 3, hp.as_ref()),
            Err(HeaderProtectionError::TooShort)
        );
    }

    //= https://www.rfc-editor.org/rfc/rfc9001#appendix-A.4
    //# This shows a Retry packet that might be sent in response to the Initial packet
    //# in {{sample-client-initial}}.
    #[test]
    fn rfc9001_retry() {
        let packet = unhex(
            "ff000000010008f067a5502a4262b574 6f6b656e04a265ba2eff4d829058fb3f
             0f2496ba",
        );
        let hdr = decode_header(&packet, 8).unwrap();
        let Header::Retry {
            version,
            scid,
            token,
            integrity_tag,
        } = hdr.header.clone()
        else {
            panic!("not a Retry")
        };
        assert_eq!(version, VERSION_1);
        assert!(hdr.dcid.is_empty());
        assert_eq!(scid, ConnectionId::new(&unhex("f067a5502a4262b5")));
        assert_eq!(&packet[token.clone()], b"token");
        assert_eq!(integrity_tag, packet.len() - 16..packet.len());
        assert_eq!(hdr.pn_offset(), None);

        // Re-encode and check the tag with the RFC 9001 section 5.8 key and nonce.
        let mut out = Vec::new();
        let start = write_retry(&mut out, 0xf, VERSION_1, &hdr.dcid, &scid, b"token");
        assert_eq!(&out[..], &packet[..integrity_tag.start]);
        let odcid = ConnectionId::new(&unhex("8394c8f03e515708"));
        let aad = retry_pseudo_packet(&odcid, &out[start..]);
        let key = ring::aead::LessSafeKey::new(
            ring::aead::UnboundKey::new(
                &ring::aead::AES_128_GCM,
                &unhex("be0c690b9f66575a1d766b54e368c84e"),
            )
            .unwrap(),
        );
        let nonce =
            ring::aead::Nonce::try_assume_unique_for_key(&unhex("461599d35d632bf2239825bb"))
                .unwrap();
        let tag = key
            .seal_in_place_separate_tag(nonce, ring::aead::Aad::from(&aad), &mut [])
            .unwrap();
        assert_eq!(tag.as_ref(), &packet[integrity_tag]);

        // Empty token or missing tag.
        let mut no_token = Vec::new();
        write_retry(&mut no_token, 0, VERSION_1, &hdr.dcid, &scid, &[]);
        no_token.extend_from_slice(&[0; 16]);
        assert_eq!(
            decode_header(&no_token, 8),
            Err(PacketDecodeError::InvalidHeader("Retry with empty token"))
        );
        assert!(decode_header(&no_token[..no_token.len() - 1], 8).is_err());
    }

    #[test]
    fn version_negotiation_roundtrip() {
        let mut out = Vec::new();
        write_version_negotiation(
            &mut out,
            0x15,
            &[1, 2, 3],
            &[4; 20],
            SUPPORTED_VERSIONS,
            Some(grease_version(0x5555_5555)),
        );
        assert_eq!(out[0] & 0xc0, 0xc0);
        let hdr = decode_header(&out, 8).unwrap();
        assert_eq!(hdr.dcid, ConnectionId::new(&[1, 2, 3]));
        assert_eq!(
            hdr.header,
            Header::VersionNegotiation {
                scid: ConnectionId::new(&[4; 20]),
                versions: vec![VERSION_1, VERSION_2, 0x5a5a_5a5a],
            }
        );
        assert_eq!(hdr.packet_len, out.len());
        assert_eq!(hdr.kind(), None);
        out.push(0);
        assert!(decode_header(&out, 8).is_err());
    }

    #[test]
    fn unsupported_version_reports_cids() {
        let mut p = vec![0xc0, 0xff, 0x00, 0x00, 0x1d, 30];
        p.extend_from_slice(&[7; 30]);
        p.push(2);
        p.extend_from_slice(&[9, 9]);
        p.extend_from_slice(&[0; 1200]);
        assert_eq!(
            decode_header(&p, 8),
            Err(PacketDecodeError::UnsupportedVersion {
                version: 0xff00_001d,
                dcid: 6..36,
                scid: 37..39,
            })
        );
        // The 30-byte DCID is not routable.
        assert_eq!(peek_dcid(&p, 8), None);
        // Truncated before the SCID.
        assert!(matches!(
            decode_header(&p[..36], 8),
            Err(PacketDecodeError::InvalidHeader(_))
        ));
    }

    fn build_long(ty: LongType, token: &[u8], payload_len: usize) -> (Vec<u8>, LongHeaderLayout) {
        let mut buf = Vec::new();
        let layout = write_long_header(
            &mut buf,
            ty,
            VERSION_1,
            &ConnectionId::new(&[0xaa; 8]),
            &ConnectionId::new(&[0xbb; 5]),
            token,
            0x1234,
            2,
        );
        buf.resize(buf.len() + payload_len, 0x5c);
        set_long_header_length(&mut buf[..], &layout, 2 + payload_len);
        (buf, layout)
    }

    #[test]
    fn long_header_roundtrip_and_coalescing() {
        let (mut datagram, l1) = build_long(LongType::Initial, b"tok", 40);
        let (hs, _) = build_long(LongType::Handshake, &[], 30);
        let first_len = datagram.len();
        datagram.extend_from_slice(&hs);
        let mut short = Vec::new();
        let pn_off =
            write_short_header(&mut short, true, true, &ConnectionId::new(&[0xaa; 8]), 7, 1);
        short.resize(short.len() + 25, 0);
        datagram.extend_from_slice(&short);

        let h1 = decode_header(&datagram, 8).unwrap();
        assert_eq!(h1.packet_len, first_len);
        assert_eq!(h1.pn_offset(), Some(l1.pn_offset));
        let Header::Long { token, .. } = &h1.header else {
            panic!()
        };
        assert_eq!(&datagram[token.clone()], b"tok");
        assert_eq!(peek_dcid(&datagram, 8), Some(ConnectionId::new(&[0xaa; 8])));

        let rest = &datagram[h1.packet_len..];
        let h2 = decode_header(rest, 8).unwrap();
        assert_eq!(h2.kind(), Some(PacketKind::Handshake));
        assert_eq!(h2.space(), Some(SpaceId::Handshake));
        assert_eq!(h2.packet_len, hs.len());

        let rest = &rest[h2.packet_len..];
        let h3 = decode_header(rest, 8).unwrap();
        assert_eq!(h3.header, Header::Short { pn_offset: pn_off });
        assert_eq!(h3.packet_len, rest.len());
        assert_eq!(rest[0], 0x40 | 0x20 | 0x04);
        assert_eq!(peek_dcid(rest, 8), Some(ConnectionId::new(&[0xaa; 8])));
    }

    #[test]
    fn header_errors() {
        let (good, _) = build_long(LongType::Handshake, &[], 30);
        // Fixed bit cleared.
        let mut bad = good.clone();
        bad[0] &= !FIXED_BIT;
        assert_eq!(
            decode_header(&bad, 8),
            Err(PacketDecodeError::InvalidHeader("fixed bit is zero"))
        );
        let mut short = vec![0x01];
        short.extend_from_slice(&[0; 40]);
        assert_eq!(
            decode_header(&short, 8),
            Err(PacketDecodeError::InvalidHeader("fixed bit is zero"))
        );
        // DCID length 21.
        let mut bad = good.clone();
        bad[5] = 21;
        assert_eq!(
            decode_header(&bad, 8),
            Err(PacketDecodeError::InvalidHeader(
                "destination connection ID longer than 20"
            ))
        );
        // Length beyond the datagram.
        assert_eq!(
            decode_header(&good[..good.len() - 1], 8),
            Err(PacketDecodeError::InvalidHeader("Length beyond datagram"))
        );
        // Length too small for the sample.
        let (tiny, _) = build_long(LongType::Handshake, &[], 17);
        assert_eq!(
            decode_header(&tiny, 8),
            Err(PacketDecodeError::InvalidHeader(
                "packet too short for a header protection sample"
            ))
        );
        let (ok, _) = build_long(LongType::Handshake, &[], 18);
        assert!(decode_header(&ok, 8).is_ok());
        // Every truncation of a valid packet fails cleanly.
        for n in 0..good.len() {
            assert!(decode_header(&good[..n], 8).is_err(), "prefix {n}");
        }
        assert_eq!(
            decode_header(&[], 8),
            Err(PacketDecodeError::InvalidHeader("empty datagram"))
        );
    }

    #[test]
    fn stateless_reset_candidate() {
        assert_eq!(stateless_reset_token_candidate(&[0x40; 20]), None);
        let mut d = vec![0x41; 5];
        d.extend_from_slice(&[0xee; 16]);
        assert_eq!(stateless_reset_token_candidate(&d), Some(&[0xee; 16]));
        let token = crate::ResetToken([0xee; 16]);
        assert!(token.ct_eq(stateless_reset_token_candidate(&d).unwrap()));
    }
}
