//! QUIC frames: RFC 9000 section 19, DATAGRAM (RFC 9221) and the multipath frames of
//! draft-ietf-quic-multipath-21 section 4.
//!
//! Decoding: [`FrameIter`] walks a decrypted packet payload and yields one [`Frame`] at a
//! time; data-carrying frames hold [`Bytes`] slices of the payload (no copies). The first
//! malformed frame yields a [`FrameError`] (convertible into a [`TransportError`] with the
//! right code) and ends the iteration.
//!
//! Encoding: [`Frame::encode`] writes any frame; [`Stream::encode`] and
//! [`Datagram::encode`] can omit the Length field for the last frame of a packet;
//! [`encode_ack`] builds ACK and PATH_ACK frames straight from a [`RangeSet`] under a byte
//! budget; the `*_header_len` helpers let a packet builder size frames before writing them.

use crate::coding::BufExt;
use crate::error::{TransportError, TransportErrorCode};
use crate::packet::PacketKind;
use crate::range_set::RangeSet;
use crate::shared::{
    ConnectionId, Dir, MAX_CID_SIZE, PathId, RESET_TOKEN_SIZE, ResetToken, StreamId,
};
use crate::varint::VarInt;
use bytes::{Buf, BufMut, Bytes};
use std::borrow::Cow;
use std::fmt;
use std::ops::RangeInclusive;

/// Largest stream or CRYPTO offset (and largest varint), 2^62 - 1.
const MAX_OFFSET: u64 = (1 << 62) - 1;
/// Largest MAX_STREAMS / STREAMS_BLOCKED value.
const MAX_STREAM_COUNT: u64 = 1 << 60;

/// A frame type: the value of the Frame Type field.
#[derive(Copy, Clone, Eq, PartialEq, Ord, PartialOrd, Hash)]
pub struct FrameType(pub u64);

macro_rules! frame_types {
    ($($(#[$doc:meta])* $name:ident = $value:expr,)*) => {
        impl FrameType {
            $($(#[$doc])* pub const $name: FrameType = FrameType($value);)*

            /// The registered name of the type, if this implementation knows it. STREAM
            /// types are all named `STREAM`.
            pub fn name(self) -> Option<&'static str> {
                if self.is_stream() {
                    return Some("STREAM");
                }
                match self.0 {
                    $($value => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

//= https://www.rfc-editor.org/rfc/rfc9000#section-12.4
//# {{frame-types}} lists and summarizes information about each frame type that is
//# defined in this specification.
frame_types! {
    /// PADDING (RFC 9000 section 19.1).
    PADDING = 0x00,
    /// PING (RFC 9000 section 19.2).
    PING = 0x01,
    /// ACK without ECN counts (RFC 9000 section 19.3).
    ACK = 0x02,
    /// ACK with ECN counts (RFC 9000 section 19.3).
    ACK_ECN = 0x03,
    /// RESET_STREAM (RFC 9000 section 19.4).
    RESET_STREAM = 0x04,
    /// STOP_SENDING (RFC 9000 section 19.5).
    STOP_SENDING = 0x05,
    /// CRYPTO (RFC 9000 section 19.6).
    CRYPTO = 0x06,
    /// NEW_TOKEN (RFC 9000 section 19.7).
    NEW_TOKEN = 0x07,
    /// The first STREAM type (RFC 9000 section 19.8); 0x08..=0x0f carry OFF/LEN/FIN bits.
    STREAM = 0x08,
    /// MAX_DATA (RFC 9000 section 19.9).
    MAX_DATA = 0x10,
    /// MAX_STREAM_DATA (RFC 9000 section 19.10).
    MAX_STREAM_DATA = 0x11,
    /// MAX_STREAMS for bidirectional streams (RFC 9000 section 19.11).
    MAX_STREAMS_BIDI = 0x12,
    /// MAX_STREAMS for unidirectional streams (RFC 9000 section 19.11).
    MAX_STREAMS_UNI = 0x13,
    /// DATA_BLOCKED (RFC 9000 section 19.12).
    DATA_BLOCKED = 0x14,
    /// STREAM_DATA_BLOCKED (RFC 9000 section 19.13).
    STREAM_DATA_BLOCKED = 0x15,
    /// STREAMS_BLOCKED for bidirectional streams (RFC 9000 section 19.14).
    STREAMS_BLOCKED_BIDI = 0x16,
    /// STREAMS_BLOCKED for unidirectional streams (RFC 9000 section 19.14).
    STREAMS_BLOCKED_UNI = 0x17,
    /// NEW_CONNECTION_ID (RFC 9000 section 19.15).
    NEW_CONNECTION_ID = 0x18,
    /// RETIRE_CONNECTION_ID (RFC 9000 section 19.16).
    RETIRE_CONNECTION_ID = 0x19,
    /// PATH_CHALLENGE (RFC 9000 section 19.17).
    PATH_CHALLENGE = 0x1a,
    /// PATH_RESPONSE (RFC 9000 section 19.18).
    PATH_RESPONSE = 0x1b,
    /// CONNECTION_CLOSE signalling a transport error (RFC 9000 section 19.19).
    CONNECTION_CLOSE = 0x1c,
    /// CONNECTION_CLOSE signalling an application error (RFC 9000 section 19.19).
    APPLICATION_CLOSE = 0x1d,
    /// HANDSHAKE_DONE (RFC 9000 section 19.20).
    HANDSHAKE_DONE = 0x1e,
    /// DATAGRAM without a Length field (RFC 9221 section 4).
    DATAGRAM = 0x30,
    /// DATAGRAM with a Length field (RFC 9221 section 4).
    DATAGRAM_LEN = 0x31,
    /// PATH_ACK without ECN counts (draft-ietf-quic-multipath-21 section 4.1).
    PATH_ACK = 0x3e,
    /// PATH_ACK with ECN counts (draft-ietf-quic-multipath-21 section 4.1).
    PATH_ACK_ECN = 0x3f,
    /// PATH_ABANDON (draft-ietf-quic-multipath-21 section 4.2).
    PATH_ABANDON = 0x3e75,
    /// PATH_STATUS_BACKUP (draft-ietf-quic-multipath-21 section 4.3).
    PATH_STATUS_BACKUP = 0x3e76,
    /// PATH_STATUS_AVAILABLE (draft-ietf-quic-multipath-21 section 4.3).
    PATH_STATUS_AVAILABLE = 0x3e77,
    /// PATH_NEW_CONNECTION_ID (draft-ietf-quic-multipath-21 section 4.4).
    PATH_NEW_CONNECTION_ID = 0x3e78,
    /// PATH_RETIRE_CONNECTION_ID (draft-ietf-quic-multipath-21 section 4.5).
    PATH_RETIRE_CONNECTION_ID = 0x3e79,
    /// MAX_PATH_ID (draft-ietf-quic-multipath-21 section 4.6).
    MAX_PATH_ID = 0x3e7a,
    /// PATHS_BLOCKED (draft-ietf-quic-multipath-21 section 4.7).
    PATHS_BLOCKED = 0x3e7b,
    /// PATH_CIDS_BLOCKED (draft-ietf-quic-multipath-21 section 4.7).
    PATH_CIDS_BLOCKED = 0x3e7c,
}

/// STREAM type bit: an Offset field is present.
const STREAM_OFF: u64 = 0x04;
/// STREAM type bit: a Length field is present.
const STREAM_LEN: u64 = 0x02;
/// STREAM type bit: the frame ends the stream.
const STREAM_FIN: u64 = 0x01;

impl FrameType {
    /// Whether this is one of the eight STREAM types (0x08..=0x0f).
    pub fn is_stream(self) -> bool {
        (0x08..=0x0f).contains(&self.0)
    }

    /// Whether this is ACK, ACK_ECN, PATH_ACK or PATH_ACK_ECN.
    pub fn is_ack(self) -> bool {
        matches!(
            self,
            Self::ACK | Self::ACK_ECN | Self::PATH_ACK | Self::PATH_ACK_ECN
        )
    }

    /// Whether this is a frame type defined by draft-ietf-quic-multipath-21.
    pub fn is_multipath(self) -> bool {
        matches!(
            self,
            Self::PATH_ACK
                | Self::PATH_ACK_ECN
                | Self::PATH_ABANDON
                | Self::PATH_STATUS_BACKUP
                | Self::PATH_STATUS_AVAILABLE
                | Self::PATH_NEW_CONNECTION_ID
                | Self::PATH_RETIRE_CONNECTION_ID
                | Self::MAX_PATH_ID
                | Self::PATHS_BLOCKED
                | Self::PATH_CIDS_BLOCKED
        )
    }

    /// Whether this implementation can decode the type.
    pub fn is_known(self) -> bool {
        self.name().is_some()
    }

    /// Whether a packet containing this frame must be acknowledged.
    //= https://www.rfc-editor.org/rfc/rfc9002#section-2
    //# All frames other than ACK, PADDING, and CONNECTION_CLOSE are considered
    //# ack-eliciting.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-19.21
    //# Extension frames MUST be congestion controlled and MUST cause an ACK frame to
    //# be sent.  The exception is extension frames that replace or supplement the ACK
    //# frame.
    pub fn is_ack_eliciting(self) -> bool {
        !(self.is_ack()
            || matches!(
                self,
                Self::PADDING | Self::CONNECTION_CLOSE | Self::APPLICATION_CLOSE
            ))
    }

    /// Whether this is a probing frame (a packet of only probing frames does not migrate
    /// the connection).
    //= https://www.rfc-editor.org/rfc/rfc9000#section-9.1
    //# PATH_CHALLENGE, PATH_RESPONSE, NEW_CONNECTION_ID, and PADDING frames are
    //# "probing frames", and all other frames are "non-probing frames".
    pub fn is_probing(self) -> bool {
        matches!(
            self,
            Self::PATH_CHALLENGE | Self::PATH_RESPONSE | Self::NEW_CONNECTION_ID | Self::PADDING
        )
    }

    /// Whether a frame of this type may appear in a packet of `kind`. Receiving a frame in a
    /// packet where it is not allowed is a PROTOCOL_VIOLATION.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-12.4
    //# Note
    //# that all frames can appear in 1-RTT packets.  An endpoint MUST treat receipt of
    //# a frame in a packet type that is not permitted as a connection error of type
    //# PROTOCOL_VIOLATION.
    pub fn allowed_in(self, kind: PacketKind) -> bool {
        match kind {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.2
            //# The payload of an Initial packet includes a CRYPTO frame (or frames) containing
            //# a cryptographic handshake message, ACK frames, or both.  PING, PADDING, and
            //# CONNECTION_CLOSE frames of type 0x1c are also permitted.
            //= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.4
            //# The payload of this packet contains CRYPTO frames and could contain PING,
            //# PADDING, or ACK frames. Handshake packets MAY contain CONNECTION_CLOSE frames
            //# of type 0x1c.
            PacketKind::Initial | PacketKind::Handshake => matches!(
                self,
                Self::PADDING
                    | Self::PING
                    | Self::ACK
                    | Self::ACK_ECN
                    | Self::CRYPTO
                    | Self::CONNECTION_CLOSE
            ),
            //= https://www.rfc-editor.org/rfc/rfc9000#section-12.5
            //# Note that it is not possible to send the following frames in 0-RTT packets for
            //# various reasons: ACK, CRYPTO, HANDSHAKE_DONE, NEW_TOKEN, PATH_RESPONSE, and
            //# RETIRE_CONNECTION_ID.
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4
            //# All frames defined in this document MUST only be sent in 1-RTT packets.
            PacketKind::ZeroRtt => {
                self.is_known()
                    && !self.is_multipath()
                    && !matches!(
                        self,
                        Self::ACK
                            | Self::ACK_ECN
                            | Self::CRYPTO
                            | Self::HANDSHAKE_DONE
                            | Self::NEW_TOKEN
                            | Self::PATH_RESPONSE
                            | Self::RETIRE_CONNECTION_ID
                    )
            }
            PacketKind::OneRtt => true,
        }
    }

    /// Number of bytes the Frame Type field takes.
    pub fn size(self) -> usize {
        VarInt::encoded_size(self.0)
    }

    fn encode<B: BufMut + ?Sized>(self, buf: &mut B) {
        VarInt::saturating(self.0).encode(buf)
    }
}

impl fmt::Debug for FrameType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) if self.is_stream() => write!(f, "{name}({:#x})", self.0),
            Some(name) => f.write_str(name),
            None => write!(f, "FrameType({:#x})", self.0),
        }
    }
}

impl fmt::Display for FrameType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Why a frame could not be decoded.
#[derive(Debug, Copy, Clone, Eq, PartialEq, thiserror::Error)]
pub enum FrameErrorKind {
    /// The payload ended inside the frame.
    #[error("frame truncated")]
    Truncated,
    /// The frame type is not one this implementation understands.
    #[error("unknown frame type")]
    UnknownType,
    /// The frame type was not encoded in its shortest form.
    #[error("frame type not in its shortest encoding")]
    NonMinimalType,
    /// A NEW_CONNECTION_ID or PATH_NEW_CONNECTION_ID length outside 1..=20.
    #[error("connection ID length outside 1..=20")]
    InvalidConnectionIdLength,
    /// Retire Prior To greater than Sequence Number.
    #[error("Retire Prior To greater than Sequence Number")]
    RetirePriorToAboveSequence,
    /// A STREAM or CRYPTO frame ends beyond offset 2^62 - 1.
    #[error("offset plus length exceeds 2^62 - 1")]
    OffsetOverflow,
    /// A MAX_STREAMS or STREAMS_BLOCKED count above 2^60.
    #[error("stream count above 2^60")]
    StreamCountTooLarge,
    /// An ACK range would extend below packet number 0.
    #[error("ACK range extends below packet number 0")]
    AckRangeUnderflow,
    /// A Path Identifier above 2^32 - 1.
    #[error("path identifier above 2^32 - 1")]
    PathIdTooLarge,
    /// A MAX_PATH_ID value above 2^32 - 1.
    #[error("Maximum Path Identifier above 2^32 - 1")]
    MaxPathIdTooLarge,
    /// A NEW_TOKEN frame with an empty token.
    #[error("empty token")]
    EmptyToken,
}

impl FrameErrorKind {
    /// The transport error code a connection closes with for this error.
    pub fn code(self) -> TransportErrorCode {
        match self {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-12.4
            //# An endpoint MAY treat the receipt of a frame type that uses a longer encoding than
            //# necessary as a connection error of type PROTOCOL_VIOLATION.
            FrameErrorKind::NonMinimalType => TransportErrorCode::PROTOCOL_VIOLATION,
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.6
            //# Receipt of an invalid Maximum Path Identifier value MUST be treated as a
            //# connection error of type PROTOCOL_VIOLATION.
            FrameErrorKind::MaxPathIdTooLarge => TransportErrorCode::PROTOCOL_VIOLATION,
            FrameErrorKind::Truncated
            | FrameErrorKind::UnknownType
            | FrameErrorKind::InvalidConnectionIdLength
            | FrameErrorKind::RetirePriorToAboveSequence
            | FrameErrorKind::OffsetOverflow
            | FrameErrorKind::StreamCountTooLarge
            | FrameErrorKind::AckRangeUnderflow
            | FrameErrorKind::PathIdTooLarge
            | FrameErrorKind::EmptyToken => TransportErrorCode::FRAME_ENCODING_ERROR,
        }
    }
}

/// A frame that could not be decoded: the frame type (if it could be read) and the reason.
#[derive(Debug, Copy, Clone, Eq, PartialEq, thiserror::Error)]
#[error("{kind}{}", frame_type.map(|t| format!(" in {t}")).unwrap_or_default())]
pub struct FrameError {
    /// The offending frame's type, if the type itself could be read.
    pub frame_type: Option<FrameType>,
    /// What was wrong.
    pub kind: FrameErrorKind,
}

impl FrameError {
    /// The transport error code to close the connection with.
    pub fn code(&self) -> TransportErrorCode {
        self.kind.code()
    }
}

impl From<FrameError> for TransportError {
    fn from(e: FrameError) -> TransportError {
        let err = TransportError::new(e.kind.code(), e.kind.to_string());
        match e.frame_type {
            Some(t) => err.in_frame(t.0),
            None => err,
        }
    }
}

/// ECN counts carried by ACK_ECN and PATH_ACK_ECN.
//= https://www.rfc-editor.org/rfc/rfc9000#section-19.3.2
//# ECN Counts {
//#   ECT0 Count (i),
//#   ECT1 Count (i),
//#   ECN-CE Count (i),
//# }
#[derive(Debug, Copy, Clone, Default, Eq, PartialEq, Hash)]
pub struct EcnCounts {
    /// Packets received with ECT(0).
    pub ect0: u64,
    /// Packets received with ECT(1).
    pub ect1: u64,
    /// Packets received with ECN-CE.
    pub ce: u64,
}

impl EcnCounts {
    fn encoded_len(&self) -> usize {
        VarInt::encoded_size(self.ect0)
            + VarInt::encoded_size(self.ect1)
            + VarInt::encoded_size(self.ce)
    }
    fn encode<B: BufMut + ?Sized>(&self, buf: &mut B) {
        put_var(buf, self.ect0);
        put_var(buf, self.ect1);
        put_var(buf, self.ce);
    }
}

/// A decoded ACK or PATH_ACK frame. The ranges are kept in their wire form and validated
/// when the frame is decoded; [`Ack::ranges`] walks them without allocating.
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct Ack {
    /// The path whose packet number space is acknowledged: `None` for ACK frames (which
    /// acknowledge path 0 under multipath), `Some` for PATH_ACK frames.
    pub path_id: Option<PathId>,
    /// Largest Acknowledged.
    pub largest: u64,
    /// The ACK Delay field as sent: microseconds divided by 2^ack_delay_exponent of the
    /// sender.
    pub delay: u64,
    /// ECN counts (present in ACK_ECN and PATH_ACK_ECN).
    pub ecn: Option<EcnCounts>,
    first_range: u64,
    additional_count: u64,
    additional: Bytes,
}

impl Ack {
    /// The frame type this ACK is encoded with.
    pub fn frame_type(&self) -> FrameType {
        match (self.path_id.is_some(), self.ecn.is_some()) {
            (false, false) => FrameType::ACK,
            (false, true) => FrameType::ACK_ECN,
            (true, false) => FrameType::PATH_ACK,
            (true, true) => FrameType::PATH_ACK_ECN,
        }
    }

    /// The acknowledged packet numbers as inclusive ranges, highest first.
    pub fn ranges(&self) -> AckRanges {
        AckRanges {
            next: Some(self.largest - self.first_range..=self.largest),
            remaining: self.additional_count,
            raw: self.additional.clone(),
        }
    }

    /// Number of ranges (ACK Range Count + 1).
    pub fn range_count(&self) -> u64 {
        self.additional_count + 1
    }

    /// The smallest acknowledged packet number.
    pub fn smallest(&self) -> u64 {
        self.ranges()
            .last()
            .map_or(self.largest, |r: RangeInclusive<u64>| *r.start())
    }

    /// Whether packet number `pn` is acknowledged by this frame.
    pub fn contains(&self, pn: u64) -> bool {
        self.ranges()
            .take_while(|r| *r.end() >= pn)
            .any(|r| r.contains(&pn))
    }

    fn encoded_len(&self) -> usize {
        self.frame_type().size()
            + self.path_id.map_or(0, |p| VarInt::encoded_size(p.0.into()))
            + VarInt::encoded_size(self.largest)
            + VarInt::encoded_size(self.delay)
            + VarInt::encoded_size(self.additional_count)
            + VarInt::encoded_size(self.first_range)
            + self.additional.len()
            + self.ecn.map_or(0, |e| e.encoded_len())
    }

    fn encode<B: BufMut + ?Sized>(&self, buf: &mut B) {
        self.frame_type().encode(buf);
        if let Some(p) = self.path_id {
            put_var(buf, p.0.into());
        }
        put_var(buf, self.largest);
        put_var(buf, self.delay);
        put_var(buf, self.additional_count);
        put_var(buf, self.first_range);
        buf.put_slice(&self.additional);
        if let Some(ecn) = &self.ecn {
            ecn.encode(buf);
        }
    }
}

/// Iterator over the ranges of an [`Ack`], highest first, as inclusive ranges.
#[derive(Debug, Clone)]
pub struct AckRanges {
    next: Option<RangeInclusive<u64>>,
    remaining: u64,
    raw: Bytes,
}

impl Iterator for AckRanges {
    type Item = RangeInclusive<u64>;
    fn next(&mut self) -> Option<RangeInclusive<u64>> {
        let current = self.next.take()?;
        if self.remaining > 0 {
            self.remaining -= 1;
            // Validated at decode time; a failure here just ends the iteration.
            let gap = self.raw.get_var_u64().ok();
            let len = self.raw.get_var_u64().ok();
            self.next = gap.zip(len).and_then(|(gap, len)| {
                let largest = current.start().checked_sub(gap)?.checked_sub(2)?;
                Some(largest.checked_sub(len)?..=largest)
            });
        }
        Some(current)
    }
}

/// Summary of an ACK or PATH_ACK frame written by [`encode_ack`].
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub struct AckEncoded {
    /// Bytes written.
    pub len: usize,
    /// Number of ranges included (the highest ones of the set).
    pub ranges: usize,
    /// The smallest packet number the frame acknowledges.
    pub smallest: u64,
    /// The largest packet number the frame acknowledges.
    pub largest: u64,
}

/// Most ACK Ranges after the first that one ACK frame carries. Without this limit a
/// receiver whose ACK frames are never acknowledged (it sends nothing ack-eliciting, as
/// in a one-way transfer) reports every gap since the start, and its ACK frames grow to
/// fill whole packets; the older ranges were reported in earlier frames.
//= https://www.rfc-editor.org/rfc/rfc9000#section-13.2.3
//# A receiver limits the number of ACK Ranges ({{ack-ranges}}) it remembers and
//# sends in ACK frames, both to limit the size of ACK frames and to avoid resource
//# exhaustion.
pub const MAX_ACK_RANGES: usize = 64;

/// Writes an ACK (or, with `path_id`, a PATH_ACK) frame acknowledging the packet numbers
/// in `ranges`, highest ranges first, using at most `max_len` bytes and
/// [`MAX_ACK_RANGES`] ranges after the first: lower ranges that do not fit are left out.
///
/// `ack_delay` is the ACK Delay field value (already divided by 2^ack_delay_exponent).
/// Returns `None`, writing nothing, if `ranges` is empty, if its largest value is not below
/// 2^62, or if not even the highest range fits in `max_len`.
//= https://www.rfc-editor.org/rfc/rfc9000#section-19.3.1
//# Each ACK Range consists of alternating Gap and ACK Range Length values in
//# descending packet number order.
pub fn encode_ack<B: BufMut + ?Sized>(
    buf: &mut B,
    path_id: Option<PathId>,
    ranges: &RangeSet,
    ack_delay: u64,
    ecn: Option<&EcnCounts>,
    max_len: usize,
) -> Option<AckEncoded> {
    let mut iter = ranges.iter().rev();
    let top = iter.next()?;
    let largest = top.end - 1;
    if largest > MAX_OFFSET {
        return None;
    }
    let ack_delay = ack_delay.min(MAX_OFFSET);
    let first_range = largest - top.start;
    let ty = match (path_id.is_some(), ecn.is_some()) {
        (false, false) => FrameType::ACK,
        (false, true) => FrameType::ACK_ECN,
        (true, false) => FrameType::PATH_ACK,
        (true, true) => FrameType::PATH_ACK_ECN,
    };
    let fixed = ty.size()
        + path_id.map_or(0, |p| VarInt::encoded_size(p.0.into()))
        + VarInt::encoded_size(largest)
        + VarInt::encoded_size(ack_delay)
        + VarInt::encoded_size(first_range)
        + ecn.map_or(0, EcnCounts::encoded_len);

    // Count how many further ranges fit.
    let mut count = 0usize;
    let mut body = 0usize;
    let mut prev_smallest = top.start;
    let mut smallest = top.start;
    for r in iter.clone() {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.3.1
        //# largest = previous_smallest - gap - 2
        let gap = prev_smallest - r.end - 1;
        let len = r.end - 1 - r.start;
        let size = VarInt::encoded_size(gap) + VarInt::encoded_size(len);
        if count == MAX_ACK_RANGES
            || fixed + VarInt::encoded_size(count as u64 + 1) + body + size > max_len
        {
            break;
        }
        count += 1;
        body += size;
        prev_smallest = r.start;
        smallest = r.start;
    }
    let total = fixed + VarInt::encoded_size(count as u64) + body;
    if total > max_len {
        return None;
    }

    ty.encode(buf);
    if let Some(p) = path_id {
        put_var(buf, p.0.into());
    }
    put_var(buf, largest);
    put_var(buf, ack_delay);
    put_var(buf, count as u64);
    put_var(buf, first_range);
    let mut prev_smallest = top.start;
    for r in iter.take(count) {
        put_var(buf, prev_smallest - r.end - 1);
        put_var(buf, r.end - 1 - r.start);
        prev_smallest = r.start;
    }
    if let Some(ecn) = ecn {
        ecn.encode(buf);
    }
    Some(AckEncoded {
        len: total,
        ranges: count + 1,
        smallest,
        largest,
    })
}

/// RESET_STREAM.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub struct ResetStream {
    /// The stream being reset.
    pub id: StreamId,
    /// Application Protocol Error Code.
    pub error_code: VarInt,
    /// Final Size of the stream.
    pub final_size: u64,
}

/// STOP_SENDING.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub struct StopSending {
    /// The stream whose incoming data is being discarded.
    pub id: StreamId,
    /// Application Protocol Error Code.
    pub error_code: VarInt,
}

/// CRYPTO.
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct Crypto {
    /// Offset of `data` in the encryption level's crypto stream.
    pub offset: u64,
    /// The handshake bytes.
    pub data: Bytes,
}

impl Crypto {
    /// Bytes of a CRYPTO frame before its data.
    pub fn header_len(offset: u64, data_len: usize) -> usize {
        1 + VarInt::encoded_size(offset) + VarInt::encoded_size(data_len as u64)
    }

    /// Encoded size of this frame.
    pub fn encoded_len(&self) -> usize {
        Self::header_len(self.offset, self.data.len()) + self.data.len()
    }

    /// Writes the frame.
    pub fn encode<B: BufMut + ?Sized>(&self, buf: &mut B) {
        FrameType::CRYPTO.encode(buf);
        put_var(buf, self.offset);
        put_var(buf, self.data.len() as u64);
        buf.put_slice(&self.data);
    }
}

/// STREAM.
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct Stream {
    /// The stream.
    pub id: StreamId,
    /// Offset of `data` in the stream (0 when the Offset field is absent).
    pub offset: u64,
    /// Whether this frame ends the stream.
    pub fin: bool,
    /// The stream bytes.
    pub data: Bytes,
}

/// Bytes of a STREAM frame before its data. The Offset field is present iff `offset` is
/// non-zero; the Length field iff `has_length_field` (it may only be omitted for the last
/// frame of a packet).
pub fn stream_frame_header_len(
    id: StreamId,
    offset: u64,
    data_len: usize,
    has_length_field: bool,
) -> usize {
    1 + VarInt::encoded_size(id.0)
        + if offset != 0 {
            VarInt::encoded_size(offset)
        } else {
            0
        }
        + if has_length_field {
            VarInt::encoded_size(data_len as u64)
        } else {
            0
        }
}

impl Stream {
    /// Encoded size of this frame.
    pub fn encoded_len(&self, has_length_field: bool) -> usize {
        stream_frame_header_len(self.id, self.offset, self.data.len(), has_length_field)
            + self.data.len()
    }

    /// Writes the frame; without a Length field the data runs to the end of the packet.
    pub fn encode<B: BufMut + ?Sized>(&self, has_length_field: bool, buf: &mut B) {
        let length = has_length_field.then_some(self.data.len());
        encode_stream_header(self.id, self.offset, length, self.fin, buf);
        buf.put_slice(&self.data);
    }
}

/// Writes the fields of a STREAM frame before its data (whose length is `length`, if the
/// frame has a Length field), for a writer that appends the data itself.
pub fn encode_stream_header<B: BufMut + ?Sized>(
    id: StreamId,
    offset: u64,
    length: Option<usize>,
    fin: bool,
    buf: &mut B,
) {
    let mut ty = FrameType::STREAM.0;
    if offset != 0 {
        ty |= STREAM_OFF;
    }
    if length.is_some() {
        ty |= STREAM_LEN;
    }
    if fin {
        ty |= STREAM_FIN;
    }
    FrameType(ty).encode(buf);
    put_var(buf, id.0);
    if offset != 0 {
        put_var(buf, offset);
    }
    if let Some(length) = length {
        put_var(buf, length as u64);
    }
}

/// NEW_CONNECTION_ID, or PATH_NEW_CONNECTION_ID when `path_id` is set.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub struct NewConnectionId {
    /// `None` for NEW_CONNECTION_ID (path 0), the path for PATH_NEW_CONNECTION_ID.
    pub path_id: Option<PathId>,
    /// Sequence Number (per path for PATH_NEW_CONNECTION_ID).
    pub sequence: u64,
    /// Retire Prior To.
    pub retire_prior_to: u64,
    /// The connection ID (1 to 20 bytes).
    pub id: ConnectionId,
    /// Stateless Reset Token for the connection ID.
    pub reset_token: ResetToken,
}

impl NewConnectionId {
    fn frame_type(&self) -> FrameType {
        if self.path_id.is_some() {
            FrameType::PATH_NEW_CONNECTION_ID
        } else {
            FrameType::NEW_CONNECTION_ID
        }
    }
}

/// CONNECTION_CLOSE of type 0x1c: a transport-level close.
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct ConnectionClose {
    /// The transport error code.
    pub error_code: TransportErrorCode,
    /// The frame type that triggered the error; `None` is sent as 0 ("unknown").
    pub frame_type: Option<FrameType>,
    /// The Reason Phrase bytes (meant to be UTF-8, but not guaranteed by the peer).
    pub reason: Bytes,
}

impl ConnectionClose {
    /// The reason phrase as text, with invalid UTF-8 replaced.
    pub fn reason_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.reason)
    }

    /// Shortens the reason phrase (at a UTF-8 boundary where possible) so that the frame
    /// encodes in at most `max_len` bytes, if that is possible at all.
    pub fn truncate_to(&mut self, max_len: usize) {
        let fixed = Frame::ConnectionClose(ConnectionClose {
            reason: Bytes::new(),
            ..self.clone()
        })
        .encoded_len();
        self.reason = truncated_reason(&self.reason, max_len.saturating_sub(fixed));
    }
}

impl From<TransportError> for ConnectionClose {
    fn from(e: TransportError) -> Self {
        ConnectionClose {
            error_code: e.code,
            frame_type: e.frame_type.map(FrameType),
            reason: Bytes::from(e.reason.into_bytes()),
        }
    }
}

impl From<&ConnectionClose> for TransportError {
    fn from(c: &ConnectionClose) -> Self {
        let e = TransportError::new(c.error_code, c.reason_lossy());
        match c.frame_type {
            Some(t) => e.in_frame(t.0),
            None => e,
        }
    }
}

/// CONNECTION_CLOSE of type 0x1d: an application-level close.
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct ApplicationClose {
    /// The application's error code.
    pub error_code: VarInt,
    /// The Reason Phrase bytes.
    pub reason: Bytes,
}

impl ApplicationClose {
    /// The reason phrase as text, with invalid UTF-8 replaced.
    pub fn reason_lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.reason)
    }

    /// Shortens the reason phrase so that the frame encodes in at most `max_len` bytes, if
    /// that is possible at all.
    pub fn truncate_to(&mut self, max_len: usize) {
        let fixed = 1 + self.error_code.size();
        self.reason = truncated_reason(&self.reason, max_len.saturating_sub(fixed));
    }
}

/// The longest prefix of `reason` whose length (plus its length varint) fits in `room`,
/// cut at a character boundary when the reason is UTF-8.
fn truncated_reason(reason: &Bytes, room: usize) -> Bytes {
    let mut len = reason.len();
    while len > 0 && len + VarInt::encoded_size(len as u64) > room {
        len -= 1;
    }
    if let Ok(text) = std::str::from_utf8(reason) {
        while len > 0 && !text.is_char_boundary(len) {
            len -= 1;
        }
    }
    reason.slice(..len)
}

/// DATAGRAM (RFC 9221).
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct Datagram {
    /// The application datagram.
    pub data: Bytes,
}

/// Bytes of a DATAGRAM frame before its data.
pub fn datagram_frame_header_len(data_len: usize, has_length_field: bool) -> usize {
    1 + if has_length_field {
        VarInt::encoded_size(data_len as u64)
    } else {
        0
    }
}

impl Datagram {
    /// Encoded size of this frame.
    pub fn encoded_len(&self, has_length_field: bool) -> usize {
        datagram_frame_header_len(self.data.len(), has_length_field) + self.data.len()
    }

    /// Writes the frame; without a Length field the data runs to the end of the packet.
    pub fn encode<B: BufMut + ?Sized>(&self, has_length_field: bool, buf: &mut B) {
        if has_length_field {
            FrameType::DATAGRAM_LEN.encode(buf);
            put_var(buf, self.data.len() as u64);
        } else {
            FrameType::DATAGRAM.encode(buf);
        }
        buf.put_slice(&self.data);
    }
}

pub use crate::sched::PathStatus;

/// A QUIC frame.
#[derive(Debug, Clone, Eq, PartialEq)]
pub enum Frame {
    /// A run of consecutive PADDING bytes, counted (at least 1).
    Padding(usize),
    /// PING.
    Ping,
    /// ACK, ACK_ECN, PATH_ACK or PATH_ACK_ECN.
    Ack(Ack),
    /// RESET_STREAM.
    ResetStream(ResetStream),
    /// STOP_SENDING.
    StopSending(StopSending),
    /// CRYPTO.
    Crypto(Crypto),
    /// NEW_TOKEN, holding the (non-empty) token.
    NewToken(Bytes),
    /// STREAM.
    Stream(Stream),
    /// MAX_DATA.
    MaxData(u64),
    /// MAX_STREAM_DATA.
    MaxStreamData {
        /// The stream.
        id: StreamId,
        /// Maximum Stream Data.
        max: u64,
    },
    /// MAX_STREAMS.
    MaxStreams {
        /// Which kind of streams.
        dir: Dir,
        /// Maximum Streams (at most 2^60).
        count: u64,
    },
    /// DATA_BLOCKED.
    DataBlocked(u64),
    /// STREAM_DATA_BLOCKED.
    StreamDataBlocked {
        /// The stream.
        id: StreamId,
        /// Maximum Stream Data at which the sender is blocked.
        limit: u64,
    },
    /// STREAMS_BLOCKED.
    StreamsBlocked {
        /// Which kind of streams.
        dir: Dir,
        /// Maximum Streams at which the sender is blocked (at most 2^60).
        limit: u64,
    },
    /// NEW_CONNECTION_ID or PATH_NEW_CONNECTION_ID.
    NewConnectionId(NewConnectionId),
    /// RETIRE_CONNECTION_ID (`path_id` is `None`) or PATH_RETIRE_CONNECTION_ID.
    RetireConnectionId {
        /// The path, for PATH_RETIRE_CONNECTION_ID.
        path_id: Option<PathId>,
        /// Sequence Number of the connection ID being retired.
        sequence: u64,
    },
    /// PATH_CHALLENGE.
    PathChallenge([u8; 8]),
    /// PATH_RESPONSE.
    PathResponse([u8; 8]),
    /// CONNECTION_CLOSE (0x1c).
    ConnectionClose(ConnectionClose),
    /// CONNECTION_CLOSE (0x1d).
    ApplicationClose(ApplicationClose),
    /// HANDSHAKE_DONE.
    HandshakeDone,
    /// DATAGRAM.
    Datagram(Datagram),
    /// PATH_ABANDON.
    PathAbandon {
        /// The path to abandon.
        path_id: PathId,
        /// Why (NO_ERROR or one of the multipath path error codes).
        error_code: TransportErrorCode,
    },
    /// PATH_STATUS_AVAILABLE or PATH_STATUS_BACKUP.
    PathStatus {
        /// The path.
        path_id: PathId,
        /// The advertised status.
        status: PathStatus,
        /// Path Status Sequence Number.
        sequence: u64,
    },
    /// MAX_PATH_ID.
    MaxPathId(PathId),
    /// PATHS_BLOCKED, holding the Maximum Path Identifier the sender is blocked at.
    PathsBlocked(PathId),
    /// PATH_CIDS_BLOCKED.
    PathCidsBlocked {
        /// The path lacking connection IDs.
        path_id: PathId,
        /// Next Sequence Number expected to be issued for the path.
        next_sequence: u64,
    },
}

fn put_var<B: BufMut + ?Sized>(buf: &mut B, value: u64) {
    VarInt::saturating(value).encode(buf)
}

fn var_len(value: u64) -> usize {
    VarInt::encoded_size(value)
}

fn path_len(p: PathId) -> usize {
    var_len(p.0.into())
}

impl Frame {
    /// The frame's type (for STREAM and DATAGRAM, the type [`Frame::encode`] writes).
    pub fn ty(&self) -> FrameType {
        match self {
            Frame::Padding(_) => FrameType::PADDING,
            Frame::Ping => FrameType::PING,
            Frame::Ack(a) => a.frame_type(),
            Frame::ResetStream(_) => FrameType::RESET_STREAM,
            Frame::StopSending(_) => FrameType::STOP_SENDING,
            Frame::Crypto(_) => FrameType::CRYPTO,
            Frame::NewToken(_) => FrameType::NEW_TOKEN,
            Frame::Stream(s) => {
                let mut ty = FrameType::STREAM.0 | STREAM_LEN;
                if s.offset != 0 {
                    ty |= STREAM_OFF;
                }
                if s.fin {
                    ty |= STREAM_FIN;
                }
                FrameType(ty)
            }
            Frame::MaxData(_) => FrameType::MAX_DATA,
            Frame::MaxStreamData { .. } => FrameType::MAX_STREAM_DATA,
            Frame::MaxStreams { dir: Dir::Bi, .. } => FrameType::MAX_STREAMS_BIDI,
            Frame::MaxStreams { dir: Dir::Uni, .. } => FrameType::MAX_STREAMS_UNI,
            Frame::DataBlocked(_) => FrameType::DATA_BLOCKED,
            Frame::StreamDataBlocked { .. } => FrameType::STREAM_DATA_BLOCKED,
            Frame::StreamsBlocked { dir: Dir::Bi, .. } => FrameType::STREAMS_BLOCKED_BIDI,
            Frame::StreamsBlocked { dir: Dir::Uni, .. } => FrameType::STREAMS_BLOCKED_UNI,
            Frame::NewConnectionId(n) => n.frame_type(),
            Frame::RetireConnectionId { path_id: None, .. } => FrameType::RETIRE_CONNECTION_ID,
            Frame::RetireConnectionId {
                path_id: Some(_), ..
            } => FrameType::PATH_RETIRE_CONNECTION_ID,
            Frame::PathChallenge(_) => FrameType::PATH_CHALLENGE,
            Frame::PathResponse(_) => FrameType::PATH_RESPONSE,
            Frame::ConnectionClose(_) => FrameType::CONNECTION_CLOSE,
            Frame::ApplicationClose(_) => FrameType::APPLICATION_CLOSE,
            Frame::HandshakeDone => FrameType::HANDSHAKE_DONE,
            Frame::Datagram(_) => FrameType::DATAGRAM_LEN,
            Frame::PathAbandon { .. } => FrameType::PATH_ABANDON,
            Frame::PathStatus {
                status: PathStatus::Available,
                ..
            } => FrameType::PATH_STATUS_AVAILABLE,
            Frame::PathStatus {
                status: PathStatus::Backup,
                ..
            } => FrameType::PATH_STATUS_BACKUP,
            Frame::MaxPathId(_) => FrameType::MAX_PATH_ID,
            Frame::PathsBlocked(_) => FrameType::PATHS_BLOCKED,
            Frame::PathCidsBlocked { .. } => FrameType::PATH_CIDS_BLOCKED,
        }
    }

    /// Whether the frame makes its packet ack-eliciting.
    pub fn is_ack_eliciting(&self) -> bool {
        self.ty().is_ack_eliciting()
    }

    /// Number of bytes [`Frame::encode`] writes.
    pub fn encoded_len(&self) -> usize {
        let ty = self.ty().size();
        match self {
            Frame::Padding(n) => *n,
            Frame::Ping | Frame::HandshakeDone => ty,
            Frame::Ack(a) => a.encoded_len(),
            Frame::ResetStream(r) => {
                ty + var_len(r.id.0) + r.error_code.size() + var_len(r.final_size)
            }
            Frame::StopSending(s) => ty + var_len(s.id.0) + s.error_code.size(),
            Frame::Crypto(c) => c.encoded_len(),
            Frame::NewToken(t) => ty + var_len(t.len() as u64) + t.len(),
            Frame::Stream(s) => s.encoded_len(true),
            Frame::MaxData(x) | Frame::DataBlocked(x) => ty + var_len(*x),
            Frame::MaxStreamData { id, max: x } | Frame::StreamDataBlocked { id, limit: x } => {
                ty + var_len(id.0) + var_len(*x)
            }
            Frame::MaxStreams { count: x, .. } | Frame::StreamsBlocked { limit: x, .. } => {
                ty + var_len(*x)
            }
            Frame::NewConnectionId(n) => {
                ty + n.path_id.map_or(0, path_len)
                    + var_len(n.sequence)
                    + var_len(n.retire_prior_to)
                    + 1
                    + n.id.len()
                    + RESET_TOKEN_SIZE
            }
            Frame::RetireConnectionId { path_id, sequence } => {
                ty + path_id.map_or(0, path_len) + var_len(*sequence)
            }
            Frame::PathChallenge(_) | Frame::PathResponse(_) => ty + 8,
            Frame::ConnectionClose(c) => {
                ty + var_len(c.error_code.0)
                    + var_len(c.frame_type.map_or(0, |t| t.0))
                    + var_len(c.reason.len() as u64)
                    + c.reason.len()
            }
            Frame::ApplicationClose(c) => {
                ty + c.error_code.size() + var_len(c.reason.len() as u64) + c.reason.len()
            }
            Frame::Datagram(d) => d.encoded_len(true),
            Frame::PathAbandon {
                path_id,
                error_code,
            } => ty + path_len(*path_id) + var_len(error_code.0),
            Frame::PathStatus {
                path_id, sequence, ..
            } => ty + path_len(*path_id) + var_len(*sequence),
            Frame::MaxPathId(p) | Frame::PathsBlocked(p) => ty + path_len(*p),
            Frame::PathCidsBlocked {
                path_id,
                next_sequence,
            } => ty + path_len(*path_id) + var_len(*next_sequence),
        }
    }

    /// Writes the frame. STREAM and DATAGRAM frames are written with a Length field, so
    /// the frame can sit anywhere in a packet; use [`Stream::encode`] /
    /// [`Datagram::encode`] to omit it for the last frame.
    ///
    /// Integer fields must be below 2^62 (they are clamped otherwise), as decoded frames
    /// always are.
    pub fn encode<B: BufMut + ?Sized>(&self, buf: &mut B) {
        let ty = self.ty();
        match self {
            Frame::Padding(n) => buf.put_bytes(0, *n),
            Frame::Ping | Frame::HandshakeDone => ty.encode(buf),
            Frame::Ack(a) => a.encode(buf),
            Frame::ResetStream(r) => {
                ty.encode(buf);
                put_var(buf, r.id.0);
                r.error_code.encode(buf);
                put_var(buf, r.final_size);
            }
            Frame::StopSending(s) => {
                ty.encode(buf);
                put_var(buf, s.id.0);
                s.error_code.encode(buf);
            }
            Frame::Crypto(c) => c.encode(buf),
            Frame::NewToken(t) => {
                ty.encode(buf);
                put_var(buf, t.len() as u64);
                buf.put_slice(t);
            }
            Frame::Stream(s) => s.encode(true, buf),
            Frame::MaxData(x) | Frame::DataBlocked(x) => {
                ty.encode(buf);
                put_var(buf, *x);
            }
            Frame::MaxStreamData { id, max: x } | Frame::StreamDataBlocked { id, limit: x } => {
                ty.encode(buf);
                put_var(buf, id.0);
                put_var(buf, *x);
            }
            Frame::MaxStreams { count: x, .. } | Frame::StreamsBlocked { limit: x, .. } => {
                ty.encode(buf);
                put_var(buf, *x);
            }
            Frame::NewConnectionId(n) => {
                ty.encode(buf);
                if let Some(p) = n.path_id {
                    put_var(buf, p.0.into());
                }
                put_var(buf, n.sequence);
                put_var(buf, n.retire_prior_to);
                buf.put_u8(n.id.len() as u8);
                buf.put_slice(&n.id);
                buf.put_slice(&n.reset_token.0);
            }
            Frame::RetireConnectionId { path_id, sequence } => {
                ty.encode(buf);
                if let Some(p) = path_id {
                    put_var(buf, p.0.into());
                }
                put_var(buf, *sequence);
            }
            Frame::PathChallenge(d) | Frame::PathResponse(d) => {
                ty.encode(buf);
                buf.put_slice(d);
            }
            Frame::ConnectionClose(c) => {
                ty.encode(buf);
                put_var(buf, c.error_code.0);
                put_var(buf, c.frame_type.map_or(0, |t| t.0));
                put_var(buf, c.reason.len() as u64);
                buf.put_slice(&c.reason);
            }
            Frame::ApplicationClose(c) => {
                ty.encode(buf);
                c.error_code.encode(buf);
                put_var(buf, c.reason.len() as u64);
                buf.put_slice(&c.reason);
            }
            Frame::Datagram(d) => d.encode(true, buf),
            Frame::PathAbandon {
                path_id,
                error_code,
            } => {
                ty.encode(buf);
                put_var(buf, path_id.0.into());
                put_var(buf, error_code.0);
            }
            Frame::PathStatus {
                path_id, sequence, ..
            } => {
                ty.encode(buf);
                put_var(buf, path_id.0.into());
                put_var(buf, *sequence);
            }
            Frame::MaxPathId(p) | Frame::PathsBlocked(p) => {
                ty.encode(buf);
                put_var(buf, p.0.into());
            }
            Frame::PathCidsBlocked {
                path_id,
                next_sequence,
            } => {
                ty.encode(buf);
                put_var(buf, path_id.0.into());
                put_var(buf, *next_sequence);
            }
        }
    }
}

/// Iterator over the frames of a decrypted packet payload.
///
/// Yields `Ok(frame)` for each frame and stops after the first `Err`. An empty payload
/// yields nothing; the caller treats a packet without frames as a PROTOCOL_VIOLATION
/// (RFC 9000 section 12.4).
#[derive(Debug, Clone)]
pub struct FrameIter {
    bytes: Bytes,
    failed: bool,
}

impl FrameIter {
    /// Iterates over the frames in `payload`.
    pub fn new(payload: Bytes) -> Self {
        FrameIter {
            bytes: payload,
            failed: false,
        }
    }

    fn var(&mut self) -> Result<u64, FrameErrorKind> {
        self.bytes
            .get_var_u64()
            .map_err(|_| FrameErrorKind::Truncated)
    }

    fn take(&mut self, len: u64) -> Result<Bytes, FrameErrorKind> {
        let len = usize::try_from(len).map_err(|_| FrameErrorKind::Truncated)?;
        if len > self.bytes.len() {
            return Err(FrameErrorKind::Truncated);
        }
        Ok(self.bytes.split_to(len))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FrameErrorKind> {
        let mut out = [0u8; N];
        self.bytes
            .read_exact(&mut out)
            .map_err(|_| FrameErrorKind::Truncated)?;
        Ok(out)
    }

    fn path_id(&mut self) -> Result<PathId, FrameErrorKind> {
        //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.1
        //# This value MUST NOT exceed 2<sup>32</sup>-1, the maximum allowed value for the path ID due to
        //# restrictions on the nonce calculation (see {{nonce}}).
        u32::try_from(self.var()?)
            .map(PathId)
            .map_err(|_| FrameErrorKind::PathIdTooLarge)
    }

    fn stream_id(&mut self) -> Result<StreamId, FrameErrorKind> {
        self.var().map(StreamId)
    }

    fn stream_count(&mut self) -> Result<u64, FrameErrorKind> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-4.6
        //# If
        //# either is received, the connection MUST be closed immediately with a connection
        //# error of type TRANSPORT_PARAMETER_ERROR if the offending value was received in a
        //# transport parameter or of type FRAME_ENCODING_ERROR if it was received in a
        //# frame; see {{immediate-close}}.
        let count = self.var()?;
        if count > MAX_STREAM_COUNT {
            return Err(FrameErrorKind::StreamCountTooLarge);
        }
        Ok(count)
    }

    fn ack(&mut self, ty: FrameType) -> Result<Ack, FrameErrorKind> {
        let path_id = if ty.0 >= FrameType::PATH_ACK.0 {
            Some(self.path_id()?)
        } else {
            None
        };
        let largest = self.var()?;
        let delay = self.var()?;
        let additional_count = self.var()?;
        let first_range = self.var()?;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.3.1
        //# If any computed packet number is negative, an endpoint MUST generate a
        //# connection error of type FRAME_ENCODING_ERROR.
        let mut smallest = largest
            .checked_sub(first_range)
            .ok_or(FrameErrorKind::AckRangeUnderflow)?;
        let mut cursor = self.bytes.clone();
        for _ in 0..additional_count {
            let gap = cursor
                .get_var_u64()
                .map_err(|_| FrameErrorKind::Truncated)?;
            let len = cursor
                .get_var_u64()
                .map_err(|_| FrameErrorKind::Truncated)?;
            let range_largest = smallest
                .checked_sub(gap)
                .and_then(|x| x.checked_sub(2))
                .ok_or(FrameErrorKind::AckRangeUnderflow)?;
            smallest = range_largest
                .checked_sub(len)
                .ok_or(FrameErrorKind::AckRangeUnderflow)?;
        }
        let consumed = self.bytes.len() - cursor.len();
        let additional = self.bytes.split_to(consumed);
        let ecn = if ty == FrameType::ACK_ECN || ty == FrameType::PATH_ACK_ECN {
            Some(EcnCounts {
                ect0: self.var()?,
                ect1: self.var()?,
                ce: self.var()?,
            })
        } else {
            None
        };
        Ok(Ack {
            path_id,
            largest,
            delay,
            ecn,
            first_range,
            additional_count,
            additional,
        })
    }

    fn new_connection_id(&mut self, path_id: Option<PathId>) -> Result<Frame, FrameErrorKind> {
        let sequence = self.var()?;
        let retire_prior_to = self.var()?;
        let [len] = self.array::<1>()?;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.15
        //# Values
        //# less than 1 and greater than 20 are invalid and MUST be treated as a
        //# connection error of type FRAME_ENCODING_ERROR.
        if len == 0 || len as usize > MAX_CID_SIZE {
            return Err(FrameErrorKind::InvalidConnectionIdLength);
        }
        let id = self.take(len.into())?;
        let reset_token = ResetToken(self.array::<RESET_TOKEN_SIZE>()?);
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.15
        //# Receiving a value in the Retire
        //# Prior To field that is greater than that in the Sequence Number field MUST be
        //# treated as a connection error of type FRAME_ENCODING_ERROR.
        if retire_prior_to > sequence {
            return Err(FrameErrorKind::RetirePriorToAboveSequence);
        }
        Ok(Frame::NewConnectionId(NewConnectionId {
            path_id,
            sequence,
            retire_prior_to,
            id: ConnectionId::new(&id),
            reset_token,
        }))
    }

    fn close_reason(&mut self) -> Result<Bytes, FrameErrorKind> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.19
        //# This
        //# SHOULD be a UTF-8 encoded string {{!RFC3629}}, though the frame does not carry
        //# information, such as language tags, that would aid comprehension by any entity
        //# other than the one that created the text.
        let len = self.var()?;
        self.take(len)
    }

    fn decode(&mut self, ty: FrameType) -> Result<Frame, FrameErrorKind> {
        Ok(match ty {
            FrameType::PADDING => {
                let run = self.bytes.iter().take_while(|&&b| b == 0).count();
                self.bytes.advance(run);
                Frame::Padding(1 + run)
            }
            FrameType::PING => Frame::Ping,
            FrameType::ACK | FrameType::ACK_ECN | FrameType::PATH_ACK | FrameType::PATH_ACK_ECN => {
                Frame::Ack(self.ack(ty)?)
            }
            FrameType::RESET_STREAM => Frame::ResetStream(ResetStream {
                id: self.stream_id()?,
                error_code: VarInt::saturating(self.var()?),
                final_size: self.var()?,
            }),
            FrameType::STOP_SENDING => Frame::StopSending(StopSending {
                id: self.stream_id()?,
                error_code: VarInt::saturating(self.var()?),
            }),
            FrameType::CRYPTO => {
                let offset = self.var()?;
                let len = self.var()?;
                let data = self.take(len)?;
                //= https://www.rfc-editor.org/rfc/rfc9000#section-19.6
                //# The largest offset delivered on a stream -- the sum of the offset and data
                //# length -- cannot exceed 2<sup>62</sup>-1.  Receipt of a frame that exceeds this
                //# limit MUST be treated as a connection error of type FRAME_ENCODING_ERROR or
                //# CRYPTO_BUFFER_EXCEEDED.
                if offset + data.len() as u64 > MAX_OFFSET {
                    return Err(FrameErrorKind::OffsetOverflow);
                }
                Frame::Crypto(Crypto { offset, data })
            }
            FrameType::NEW_TOKEN => {
                let len = self.var()?;
                let token = self.take(len)?;
                //= https://www.rfc-editor.org/rfc/rfc9000#section-19.7
                //# The token
                //# MUST NOT be empty.  A client MUST treat receipt of a NEW_TOKEN frame with
                //# an empty Token field as a connection error of type FRAME_ENCODING_ERROR.
                if token.is_empty() {
                    return Err(FrameErrorKind::EmptyToken);
                }
                Frame::NewToken(token)
            }
            t if t.is_stream() => {
                let id = self.stream_id()?;
                let offset = if t.0 & STREAM_OFF != 0 {
                    self.var()?
                } else {
                    0
                };
                let data = if t.0 & STREAM_LEN != 0 {
                    let len = self.var()?;
                    self.take(len)?
                } else {
                    //= https://www.rfc-editor.org/rfc/rfc9000#section-19.8
                    //# When
                    //# the LEN bit is set to 0, the Stream Data field consumes all the remaining
                    //# bytes in the packet.
                    self.bytes.split_off(0)
                };
                //= https://www.rfc-editor.org/rfc/rfc9000#section-19.8
                //# Receipt of a frame that exceeds this limit MUST be treated as a
                //# connection error of type FRAME_ENCODING_ERROR or FLOW_CONTROL_ERROR.
                if offset + data.len() as u64 > MAX_OFFSET {
                    return Err(FrameErrorKind::OffsetOverflow);
                }
                Frame::Stream(Stream {
                    id,
                    offset,
                    fin: t.0 & STREAM_FIN != 0,
                    data,
                })
            }
            FrameType::MAX_DATA => Frame::MaxData(self.var()?),
            FrameType::MAX_STREAM_DATA => Frame::MaxStreamData {
                id: self.stream_id()?,
                max: self.var()?,
            },
            FrameType::MAX_STREAMS_BIDI => Frame::MaxStreams {
                dir: Dir::Bi,
                count: self.stream_count()?,
            },
            FrameType::MAX_STREAMS_UNI => Frame::MaxStreams {
                dir: Dir::Uni,
                count: self.stream_count()?,
            },
            FrameType::DATA_BLOCKED => Frame::DataBlocked(self.var()?),
            FrameType::STREAM_DATA_BLOCKED => Frame::StreamDataBlocked {
                id: self.stream_id()?,
                limit: self.var()?,
            },
            //= https://www.rfc-editor.org/rfc/rfc9000#section-19.14
            //# This value cannot exceed 2<sup>60</sup>, as it
            //# is not possible to encode stream IDs larger than 2<sup>62</sup>-1.  Receipt of
            //# a frame that encodes a larger stream ID MUST be treated as a connection error
            //# of type STREAM_LIMIT_ERROR or FRAME_ENCODING_ERROR.
            FrameType::STREAMS_BLOCKED_BIDI => Frame::StreamsBlocked {
                dir: Dir::Bi,
                limit: self.stream_count()?,
            },
            FrameType::STREAMS_BLOCKED_UNI => Frame::StreamsBlocked {
                dir: Dir::Uni,
                limit: self.stream_count()?,
            },
            FrameType::NEW_CONNECTION_ID => self.new_connection_id(None)?,
            FrameType::RETIRE_CONNECTION_ID => Frame::RetireConnectionId {
                path_id: None,
                sequence: self.var()?,
            },
            FrameType::PATH_CHALLENGE => Frame::PathChallenge(self.array()?),
            FrameType::PATH_RESPONSE => Frame::PathResponse(self.array()?),
            FrameType::CONNECTION_CLOSE => {
                let error_code = TransportErrorCode(self.var()?);
                //= https://www.rfc-editor.org/rfc/rfc9000#section-19.19
                //# A value of 0 (equivalent to the mention of the PADDING frame) is used when the
                //# frame type is unknown.
                let frame_type = Some(FrameType(self.var()?)).filter(|t| t.0 != 0);
                Frame::ConnectionClose(ConnectionClose {
                    error_code,
                    frame_type,
                    reason: self.close_reason()?,
                })
            }
            FrameType::APPLICATION_CLOSE => Frame::ApplicationClose(ApplicationClose {
                error_code: VarInt::saturating(self.var()?),
                reason: self.close_reason()?,
            }),
            FrameType::HANDSHAKE_DONE => Frame::HandshakeDone,
            //= https://www.rfc-editor.org/rfc/rfc9221#section-4
            //# if this bit is set to 0, the Length field is absent and the Datagram
            //# Data field extends to the end of the packet; if this bit is set to 1, the
            //# Length field is present.
            FrameType::DATAGRAM => Frame::Datagram(Datagram {
                data: self.bytes.split_off(0),
            }),
            FrameType::DATAGRAM_LEN => {
                let len = self.var()?;
                Frame::Datagram(Datagram {
                    data: self.take(len)?,
                })
            }
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.2
            //# PATH_ABANDON Frame {
            //#   Type (i) = 0x3e75,
            //#   Path Identifier (i),
            //#   Error Code (i),
            //# }
            FrameType::PATH_ABANDON => Frame::PathAbandon {
                path_id: self.path_id()?,
                error_code: TransportErrorCode(self.var()?),
            },
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.3
            //# PATH_STATUS_AVAILABLE Frame {
            //#   Type (i) = 0x3e77,
            //#   Path Identifier (i),
            //#   Path Status Sequence Number (i),
            //# }
            FrameType::PATH_STATUS_AVAILABLE | FrameType::PATH_STATUS_BACKUP => Frame::PathStatus {
                path_id: self.path_id()?,
                status: if ty == FrameType::PATH_STATUS_AVAILABLE {
                    PathStatus::Available
                } else {
                    PathStatus::Backup
                },
                sequence: self.var()?,
            },
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.4
            //# PATH_NEW_CONNECTION_ID Frame {
            //#   Type (i) = 0x3e78,
            //#   Path Identifier (i),
            //#   Sequence Number (i),
            //#   Retire Prior To (i),
            //#   Length (8),
            //#   Connection ID (8..160),
            //#   Stateless Reset Token (128),
            //# }
            FrameType::PATH_NEW_CONNECTION_ID => {
                let path_id = self.path_id()?;
                self.new_connection_id(Some(path_id))?
            }
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.5
            //# PATH_RETIRE_CONNECTION_ID Frame {
            //#   Type (i) = 0x3e79,
            //#   Path Identifier (i),
            //#   Sequence Number (i),
            //# }
            FrameType::PATH_RETIRE_CONNECTION_ID => Frame::RetireConnectionId {
                path_id: Some(self.path_id()?),
                sequence: self.var()?,
            },
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.6
            //# This value MUST NOT exceed 2<sup>32</sup>-1, which is the maximum allowed value for the path ID due to
            //# restrictions on the nonce calculation (see {{nonce}}).
            FrameType::MAX_PATH_ID => Frame::MaxPathId(
                u32::try_from(self.var()?)
                    .map(PathId)
                    .map_err(|_| FrameErrorKind::MaxPathIdTooLarge)?,
            ),
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.7
            //# PATHS_BLOCKED Frame {
            //#   Type (i) = 0x3e7b,
            //#   Maximum Path Identifier (i),
            //# }
            FrameType::PATHS_BLOCKED => Frame::PathsBlocked(self.path_id()?),
            //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-4.7
            //# PATH_CIDS_BLOCKED Frame {
            //#   Type (i) = 0x3e7c,
            //#   Path Identifier (i),
            //#   Next Sequence Number (i),
            //# }
            FrameType::PATH_CIDS_BLOCKED => Frame::PathCidsBlocked {
                path_id: self.path_id()?,
                next_sequence: self.var()?,
            },
            //= https://www.rfc-editor.org/rfc/rfc9000#section-12.4
            //# An endpoint MUST treat the receipt of a frame of unknown type as a connection
            //# error of type FRAME_ENCODING_ERROR.
            _ => return Err(FrameErrorKind::UnknownType),
        })
    }
}

impl Iterator for FrameIter {
    type Item = Result<Frame, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.bytes.is_empty() {
            return None;
        }
        let before = self.bytes.len();
        let ty = match self.bytes.get_var_u64() {
            Ok(t) => FrameType(t),
            Err(_) => {
                self.failed = true;
                return Some(Err(FrameError {
                    frame_type: None,
                    kind: FrameErrorKind::Truncated,
                }));
            }
        };
        //= https://www.rfc-editor.org/rfc/rfc9000#section-12.4
        //# To ensure simple and efficient
        //# implementations of frame parsing, a frame type MUST use the shortest possible
        //# encoding.
        let result = if before - self.bytes.len() != ty.size() {
            Err(FrameErrorKind::NonMinimalType)
        } else {
            self.decode(ty)
        };
        Some(result.map_err(|kind| {
            self.failed = true;
            FrameError {
                frame_type: Some(ty),
                kind,
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(bytes: &[u8]) -> Result<Vec<Frame>, FrameError> {
        FrameIter::new(Bytes::copy_from_slice(bytes)).collect()
    }

    fn roundtrip(frame: &Frame) -> Vec<u8> {
        let mut buf = Vec::new();
        frame.encode(&mut buf);
        assert_eq!(buf.len(), frame.encoded_len(), "encoded_len of {frame:?}");
        let decoded = decode_all(&buf).unwrap();
        assert_eq!(decoded, vec![frame.clone()]);
        buf
    }

    fn err_of(bytes: &[u8]) -> FrameError {
        decode_all(bytes).unwrap_err()
    }

    fn assert_code(bytes: &[u8], kind: FrameErrorKind, code: TransportErrorCode) {
        let e = err_of(bytes);
        assert_eq!(e.kind, kind, "{bytes:02x?}");
        let te = TransportError::from(e);
        assert_eq!(te.code, code);
    }

    fn ack_from(set: &RangeSet, path: Option<PathId>, ecn: Option<EcnCounts>) -> Ack {
        let mut buf = Vec::new();
        encode_ack(&mut buf, path, set, 17, ecn.as_ref(), usize::MAX).unwrap();
        match decode_all(&buf).unwrap().pop() {
            Some(Frame::Ack(a)) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn padding_runs_merge() {
        let frames = decode_all(&[0, 0, 0, 1, 0]).unwrap();
        assert_eq!(frames, [Frame::Padding(3), Frame::Ping, Frame::Padding(1)]);
    }

    #[test]
    fn ack_ranges_descend() {
        let mut set = RangeSet::new();
        set.insert(0..3);
        set.insert(5..6);
        set.insert(10..20);
        let ack = ack_from(&set, None, None);
        assert_eq!(ack.largest, 19);
        assert_eq!(ack.delay, 17);
        assert_eq!(ack.ranges().collect::<Vec<_>>(), [10..=19, 5..=5, 0..=2]);
        assert_eq!(ack.range_count(), 3);
        assert_eq!(ack.smallest(), 0);
        assert!(ack.contains(5) && ack.contains(0) && !ack.contains(4) && !ack.contains(20));
        assert_eq!(ack.frame_type(), FrameType::ACK);

        let path = ack_from(
            &set,
            Some(PathId(7)),
            Some(EcnCounts {
                ect0: 1,
                ect1: 2,
                ce: 3,
            }),
        );
        assert_eq!(path.frame_type(), FrameType::PATH_ACK_ECN);
        assert_eq!(path.path_id, Some(PathId(7)));
        assert_eq!(
            path.ecn,
            Some(EcnCounts {
                ect0: 1,
                ect1: 2,
                ce: 3
            })
        );
        assert_eq!(path.ranges().count(), 3);
    }

    #[test]
    fn ack_carries_at_most_max_ack_ranges() {
        let mut set = RangeSet::new();
        for i in 0..500u64 {
            set.insert_one(i * 2);
        }
        let mut buf = Vec::new();
        let info = encode_ack(&mut buf, None, &set, 0, None, usize::MAX).unwrap();
        assert_eq!(info.ranges, MAX_ACK_RANGES + 1);
        assert_eq!(info.largest, 998);
        assert_eq!(info.smallest, 998 - 2 * MAX_ACK_RANGES as u64);
        let Frame::Ack(ack) = decode_all(&buf).unwrap().remove(0) else {
            panic!()
        };
        assert_eq!(ack.ranges().count(), MAX_ACK_RANGES + 1);
    }

    #[test]
    fn ack_budget_drops_lowest_ranges() {
        let mut set = RangeSet::new();
        for i in 0..50u64 {
            set.insert_one(i * 3);
        }
        let mut full = Vec::new();
        let all = encode_ack(&mut full, None, &set, 0, None, usize::MAX).unwrap();
        assert_eq!(all.ranges, 50);
        assert_eq!(all.len, full.len());
        for budget in 0..full.len() {
            let mut buf = Vec::new();
            match encode_ack(&mut buf, None, &set, 0, None, budget) {
                None => {
                    assert!(buf.is_empty());
                    // Only when not even the top range fits: type, largest (2 bytes),
                    // delay, count and first range.
                    assert!(budget < 6, "budget {budget}");
                }
                Some(info) => {
                    assert!(buf.len() <= budget);
                    assert_eq!(info.len, buf.len());
                    let Frame::Ack(ack) = decode_all(&buf).unwrap().remove(0) else {
                        panic!()
                    };
                    let got: Vec<_> = ack.ranges().collect();
                    assert_eq!(got.len(), info.ranges);
                    assert_eq!(*got[0].end(), 147);
                    assert_eq!(*got.last().unwrap().start(), info.smallest);
                    // The ranges kept are the highest ones.
                    let expect: Vec<_> = set
                        .iter()
                        .rev()
                        .take(info.ranges)
                        .map(|r| r.start..=r.end - 1)
                        .collect();
                    assert_eq!(got, expect);
                }
            }
        }
        assert_eq!(
            encode_ack(&mut Vec::new(), None, &RangeSet::new(), 0, None, 100),
            None
        );
    }

    #[test]
    fn ack_errors() {
        // First ACK Range larger than Largest Acknowledged.
        assert_code(
            &[0x02, 5, 0, 0, 6],
            FrameErrorKind::AckRangeUnderflow,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        // Gap taking the next range below zero: largest 5, first range 0 -> smallest 5;
        // gap 4 -> largest = 5 - 4 - 2 < 0.
        assert_code(
            &[0x02, 5, 0, 1, 0, 4, 0],
            FrameErrorKind::AckRangeUnderflow,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        // Range length going below zero: gap 0 -> largest 3, length 4.
        assert_code(
            &[0x02, 5, 0, 1, 0, 0, 4],
            FrameErrorKind::AckRangeUnderflow,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        // Exactly reaching zero is fine.
        assert!(decode_all(&[0x02, 5, 0, 1, 0, 0, 3]).is_ok());
        // Huge range count with no data.
        assert_code(
            &[0x02, 5, 0, 0x80, 0xff, 0xff, 0xff, 0],
            FrameErrorKind::Truncated,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        // ECN counts missing.
        assert_code(
            &[0x03, 5, 0, 0, 0, 1, 1],
            FrameErrorKind::Truncated,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        // PATH_ACK with a path ID above 2^32 - 1.
        let mut b = vec![0x3e];
        VarInt::from_u64(1 << 32).unwrap().encode(&mut b);
        b.extend_from_slice(&[5, 0, 0, 0]);
        assert_code(
            &b,
            FrameErrorKind::PathIdTooLarge,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
    }

    #[test]
    fn unknown_and_non_minimal_types() {
        let e = err_of(&[0x1f]);
        assert_eq!(e.frame_type, Some(FrameType(0x1f)));
        assert_eq!(e.code(), TransportErrorCode::FRAME_ENCODING_ERROR);
        assert_code(
            &[0x41, 0x00],
            FrameErrorKind::UnknownType,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        // PING encoded on two bytes.
        assert_code(
            &[0x40, 0x01],
            FrameErrorKind::NonMinimalType,
            TransportErrorCode::PROTOCOL_VIOLATION,
        );
        // A truncated frame type has no type.
        let e = err_of(&[0x01, 0x40]);
        assert_eq!((e.frame_type, e.kind), (None, FrameErrorKind::Truncated));
        // Iteration stops after the first error.
        let mut it = FrameIter::new(Bytes::from_static(&[0x01, 0x1f, 0x01]));
        assert_eq!(it.next(), Some(Ok(Frame::Ping)));
        assert!(matches!(it.next(), Some(Err(_))));
        assert_eq!(it.next(), None);
        let te = TransportError::from(err_of(&[0x1f]));
        assert_eq!(te.frame_type, Some(0x1f));
    }

    #[test]
    fn new_connection_id_errors() {
        let ncid = |len: u8, seq: u8, rpt: u8| {
            let mut b = vec![0x18, seq, rpt, len];
            b.extend(std::iter::repeat_n(0xab, len as usize));
            b.extend_from_slice(&[0; 16]);
            b
        };
        assert!(decode_all(&ncid(1, 0, 0)).is_ok());
        assert!(decode_all(&ncid(20, 3, 3)).is_ok());
        for len in [0, 21] {
            assert_code(
                &ncid(len, 0, 0),
                FrameErrorKind::InvalidConnectionIdLength,
                TransportErrorCode::FRAME_ENCODING_ERROR,
            );
        }
        assert_code(
            &ncid(8, 2, 3),
            FrameErrorKind::RetirePriorToAboveSequence,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        // Missing reset token bytes.
        let b = ncid(8, 0, 0);
        assert_code(
            &b[..b.len() - 1],
            FrameErrorKind::Truncated,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        // PATH_NEW_CONNECTION_ID follows the same rules.
        let mut p = vec![0x7e, 0x78, 0x01];
        p.extend_from_slice(&ncid(21, 0, 0)[1..]);
        assert_code(
            &p,
            FrameErrorKind::InvalidConnectionIdLength,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        let mut p = vec![0x7e, 0x78, 0x01];
        p.extend_from_slice(&ncid(4, 1, 2)[1..]);
        assert_code(
            &p,
            FrameErrorKind::RetirePriorToAboveSequence,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
    }

    #[test]
    fn stream_and_crypto_limits() {
        let max = VarInt::MAX;
        // STREAM with OFF|LEN: offset 2^62 - 1 and one byte of data.
        let mut b = vec![0x0e, 0x00];
        max.encode(&mut b);
        b.extend_from_slice(&[1, 0xaa]);
        assert_code(
            &b,
            FrameErrorKind::OffsetOverflow,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        // Zero bytes at the maximum offset is acceptable.
        let mut b = vec![0x0e, 0x00];
        max.encode(&mut b);
        b.push(0);
        assert!(decode_all(&b).is_ok());
        // Without LEN, the data runs to the end of the payload.
        let mut b = vec![0x0c, 0x00];
        max.encode(&mut b);
        b.push(0xaa);
        assert_code(
            &b,
            FrameErrorKind::OffsetOverflow,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        let mut b = vec![0x06];
        max.encode(&mut b);
        b.extend_from_slice(&[1, 0xaa]);
        assert_code(
            &b,
            FrameErrorKind::OffsetOverflow,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        // Length beyond the payload.
        assert_code(
            &[0x0a, 0x00, 5, 1, 2],
            FrameErrorKind::Truncated,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        assert_code(
            &[0x31, 3, 1],
            FrameErrorKind::Truncated,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
        // Empty NEW_TOKEN.
        assert_code(
            &[0x07, 0],
            FrameErrorKind::EmptyToken,
            TransportErrorCode::FRAME_ENCODING_ERROR,
        );
    }

    #[test]
    fn stream_count_limits() {
        for ty in [0x12u8, 0x13, 0x16, 0x17] {
            let mut ok = vec![ty];
            VarInt::from_u64(1 << 60).unwrap().encode(&mut ok);
            assert!(decode_all(&ok).is_ok());
            let mut bad = vec![ty];
            VarInt::from_u64((1 << 60) + 1).unwrap().encode(&mut bad);
            assert_code(
                &bad,
                FrameErrorKind::StreamCountTooLarge,
                TransportErrorCode::FRAME_ENCODING_ERROR,
            );
        }
    }

    #[test]
    fn path_id_limits() {
        let too_big = {
            let mut b = Vec::new();
            VarInt::from_u64(u64::from(u32::MAX) + 1)
                .unwrap()
                .encode(&mut b);
            b
        };
        for ty in [0x3e75u64, 0x3e76, 0x3e77, 0x3e78, 0x3e79, 0x3e7b, 0x3e7c] {
            let mut b = Vec::new();
            VarInt::from_u64(ty).unwrap().encode(&mut b);
            b.extend_from_slice(&too_big);
            b.extend_from_slice(&[0; 40]);
            assert_code(
                &b,
                FrameErrorKind::PathIdTooLarge,
                TransportErrorCode::FRAME_ENCODING_ERROR,
            );
        }
        let mut b = vec![0x7e, 0x7a];
        b.extend_from_slice(&too_big);
        assert_code(
            &b,
            FrameErrorKind::MaxPathIdTooLarge,
            TransportErrorCode::PROTOCOL_VIOLATION,
        );
        let mut b = vec![0x7e, 0x7a];
        VarInt::from_u32(u32::MAX).encode(&mut b);
        assert_eq!(decode_all(&b).unwrap(), [Frame::MaxPathId(PathId::MAX)]);
    }

    #[test]
    fn connection_close_reason_not_utf8() {
        let bytes = [0x1c, 0x0a, 0x08, 3, 0xff, b'o', b'k'];
        let Frame::ConnectionClose(c) = decode_all(&bytes).unwrap().remove(0) else {
            panic!()
        };
        assert_eq!(c.error_code, TransportErrorCode::PROTOCOL_VIOLATION);
        assert_eq!(c.frame_type, Some(FrameType::STREAM));
        assert_eq!(c.reason_lossy(), "\u{fffd}ok");
        let te = TransportError::from(&c);
        assert_eq!(te.frame_type, Some(8));
        // Frame type 0 means unknown.
        let Frame::ConnectionClose(c) = decode_all(&[0x1c, 0, 0, 0]).unwrap().remove(0) else {
            panic!()
        };
        assert_eq!(c.frame_type, None);
        let Frame::ApplicationClose(a) = decode_all(&[0x1d, 7, 2, 0xc3, 0x28]).unwrap().remove(0)
        else {
            panic!()
        };
        assert_eq!(a.reason_lossy(), "\u{fffd}(");
    }

    #[test]
    fn close_truncation() {
        let mut c = ConnectionClose::from(TransportError::protocol_violation("é".repeat(100)));
        c.truncate_to(50);
        let f = Frame::ConnectionClose(c.clone());
        assert!(f.encoded_len() <= 50);
        assert!(std::str::from_utf8(&c.reason).is_ok());
        assert!(c.reason.len() >= 40);
        let mut a = ApplicationClose {
            error_code: VarInt::from_u32(1),
            reason: Bytes::from_static(b"0123456789"),
        };
        a.truncate_to(8);
        assert!(Frame::ApplicationClose(a.clone()).encoded_len() <= 8);
        assert_eq!(a.reason, Bytes::from_static(b"01234"));
    }

    #[test]
    fn stream_without_length_is_last() {
        let s = Stream {
            id: StreamId(4),
            offset: 0,
            fin: true,
            data: Bytes::from_static(b"hello"),
        };
        let mut buf = Vec::new();
        Frame::Ping.encode(&mut buf);
        s.encode(false, &mut buf);
        assert_eq!(buf.len(), 1 + s.encoded_len(false));
        assert_eq!(stream_frame_header_len(s.id, 0, 5, false), 2);
        assert_eq!(buf[1], 0x09);
        assert_eq!(decode_all(&buf).unwrap(), [Frame::Ping, Frame::Stream(s)]);
        let d = Datagram {
            data: Bytes::from_static(b"dgram"),
        };
        let mut buf = Vec::new();
        d.encode(false, &mut buf);
        assert_eq!(buf.len(), d.encoded_len(false));
        assert_eq!(decode_all(&buf).unwrap(), [Frame::Datagram(d)]);
    }

    #[test]
    fn decoded_data_is_zero_copy() {
        let payload = Bytes::from(vec![0x0b, 0x04, 0x03, b'a', b'b', b'c']);
        let base = payload.as_ptr() as usize;
        let Some(Ok(Frame::Stream(s))) = FrameIter::new(payload.clone()).next() else {
            panic!()
        };
        assert_eq!(s.data.as_ptr() as usize, base + 3);
    }

    #[test]
    fn frame_type_properties() {
        use PacketKind::*;
        let t = FrameType::CRYPTO;
        assert!(t.allowed_in(Initial) && t.allowed_in(Handshake) && !t.allowed_in(ZeroRtt));
        assert!(FrameType::CONNECTION_CLOSE.allowed_in(Initial));
        assert!(!FrameType::APPLICATION_CLOSE.allowed_in(Handshake));
        assert!(FrameType::APPLICATION_CLOSE.allowed_in(ZeroRtt));
        assert!(FrameType(0x0f).allowed_in(ZeroRtt));
        assert!(!FrameType(0x0f).allowed_in(Initial));
        assert!(FrameType::DATAGRAM.allowed_in(ZeroRtt));
        for t in [
            FrameType::ACK,
            FrameType::HANDSHAKE_DONE,
            FrameType::NEW_TOKEN,
            FrameType::PATH_RESPONSE,
            FrameType::RETIRE_CONNECTION_ID,
            FrameType::PATH_ACK,
            FrameType::MAX_PATH_ID,
        ] {
            assert!(!t.allowed_in(ZeroRtt), "{t}");
            assert!(t.allowed_in(OneRtt), "{t}");
        }
        assert!(!FrameType::PATH_ABANDON.allowed_in(Handshake));
        assert!(FrameType::PING.allowed_in(Handshake));
        assert!(!FrameType::ACK.is_ack_eliciting());
        assert!(!FrameType::PATH_ACK_ECN.is_ack_eliciting());
        assert!(!FrameType::PADDING.is_ack_eliciting());
        assert!(!FrameType::APPLICATION_CLOSE.is_ack_eliciting());
        assert!(FrameType::PING.is_ack_eliciting());
        assert!(FrameType::DATAGRAM.is_ack_eliciting());
        assert!(FrameType::PATH_ABANDON.is_ack_eliciting());
        assert!(FrameType::NEW_CONNECTION_ID.is_probing());
        assert!(FrameType::PADDING.is_probing());
        assert!(!FrameType::PING.is_probing());
        assert_eq!(format!("{}", FrameType(0x0d)), "STREAM(0xd)");
        assert_eq!(format!("{}", FrameType::PATH_ABANDON), "PATH_ABANDON");
        assert_eq!(format!("{}", FrameType(0x21)), "FrameType(0x21)");
    }

    fn bytes_strategy(max: usize) -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
    }

    fn var() -> impl Strategy<Value = u64> {
        prop_oneof![0u64..64, 0u64..16384, 0u64..(1 << 30), 0u64..(1 << 62)]
    }

    fn path() -> impl Strategy<Value = PathId> {
        any::<u32>().prop_map(PathId)
    }

    fn cid() -> impl Strategy<Value = ConnectionId> {
        proptest::collection::vec(any::<u8>(), 1..=20).prop_map(|v| ConnectionId::new(&v))
    }

    fn dir() -> impl Strategy<Value = Dir> {
        prop_oneof![Just(Dir::Bi), Just(Dir::Uni)]
    }

    fn range_set() -> impl Strategy<Value = RangeSet> {
        proptest::collection::vec((var(), 0u64..1000), 1..20).prop_map(|v| {
            let mut s = RangeSet::new();
            for (start, len) in v {
                let start = start.min((1 << 62) - 1001);
                s.insert(start..start + len + 1);
            }
            s
        })
    }

    fn ecn() -> impl Strategy<Value = Option<EcnCounts>> {
        proptest::option::of(
            (var(), var(), var()).prop_map(|(ect0, ect1, ce)| EcnCounts { ect0, ect1, ce }),
        )
    }

    fn frame() -> impl Strategy<Value = Frame> {
        let a = prop_oneof![
            (1usize..50).prop_map(Frame::Padding),
            Just(Frame::Ping),
            Just(Frame::HandshakeDone),
            (range_set(), proptest::option::of(path()), ecn())
                .prop_map(|(s, p, e)| Frame::Ack(ack_from(&s, p, e))),
            (var(), var(), var()).prop_map(|(id, code, fs)| Frame::ResetStream(ResetStream {
                id: StreamId(id),
                error_code: VarInt::from_u64(code).unwrap(),
                final_size: fs,
            })),
            (var(), var()).prop_map(|(id, code)| Frame::StopSending(StopSending {
                id: StreamId(id),
                error_code: VarInt::from_u64(code).unwrap(),
            })),
            (0u64..(1 << 40), bytes_strategy(64))
                .prop_map(|(offset, data)| Frame::Crypto(Crypto { offset, data })),
            bytes_strategy(64)
                .prop_filter("non-empty", |b| !b.is_empty())
                .prop_map(Frame::NewToken),
            (var(), 0u64..(1 << 61), any::<bool>(), bytes_strategy(64)).prop_map(
                |(id, offset, fin, data)| Frame::Stream(Stream {
                    id: StreamId(id),
                    offset,
                    fin,
                    data
                })
            ),
            var().prop_map(Frame::MaxData),
            (var(), var()).prop_map(|(id, max)| Frame::MaxStreamData {
                id: StreamId(id),
                max
            }),
        ];
        let b = prop_oneof![
            (dir(), 0u64..=(1 << 60)).prop_map(|(dir, count)| Frame::MaxStreams { dir, count }),
            var().prop_map(Frame::DataBlocked),
            (var(), var()).prop_map(|(id, limit)| Frame::StreamDataBlocked {
                id: StreamId(id),
                limit
            }),
            (dir(), 0u64..=(1 << 60)).prop_map(|(dir, limit)| Frame::StreamsBlocked { dir, limit }),
            (
                proptest::option::of(path()),
                var(),
                var(),
                cid(),
                any::<[u8; 16]>()
            )
                .prop_map(|(path_id, a, b, id, token)| Frame::NewConnectionId(
                    NewConnectionId {
                        path_id,
                        sequence: a.max(b),
                        retire_prior_to: a.min(b),
                        id,
                        reset_token: ResetToken(token),
                    }
                )),
            (proptest::option::of(path()), var())
                .prop_map(|(path_id, sequence)| Frame::RetireConnectionId { path_id, sequence }),
            any::<[u8; 8]>().prop_map(Frame::PathChallenge),
            any::<[u8; 8]>().prop_map(Frame::PathResponse),
            (
                var(),
                proptest::option::of(1u64..(1 << 62)),
                bytes_strategy(40)
            )
                .prop_map(|(code, ty, reason)| Frame::ConnectionClose(
                    ConnectionClose {
                        error_code: TransportErrorCode(code),
                        frame_type: ty.map(FrameType),
                        reason,
                    }
                )),
            (var(), bytes_strategy(40)).prop_map(|(code, reason)| Frame::ApplicationClose(
                ApplicationClose {
                    error_code: VarInt::from_u64(code).unwrap(),
                    reason
                }
            )),
            bytes_strategy(64).prop_map(|data| Frame::Datagram(Datagram { data })),
        ];
        let c = prop_oneof![
            (path(), var()).prop_map(|(path_id, code)| Frame::PathAbandon {
                path_id,
                error_code: TransportErrorCode(code)
            }),
            (path(), any::<bool>(), var()).prop_map(|(path_id, avail, sequence)| {
                Frame::PathStatus {
                    path_id,
                    status: if avail {
                        PathStatus::Available
                    } else {
                        PathStatus::Backup
                    },
                    sequence,
                }
            }),
            path().prop_map(Frame::MaxPathId),
            path().prop_map(Frame::PathsBlocked),
            (path(), var()).prop_map(|(path_id, next_sequence)| Frame::PathCidsBlocked {
                path_id,
                next_sequence
            }),
        ];
        prop_oneof![11 => a, 11 => b, 5 => c]
    }

    proptest! {
        #[test]
        fn every_frame_roundtrips(f in frame()) {
            roundtrip(&f);
            prop_assert!(f.ty().is_known());
        }

        #[test]
        fn frame_sequences_roundtrip(frames in proptest::collection::vec(frame(), 1..10)) {
            // Adjacent padding runs merge on decode, so merge them in the model too.
            let mut model: Vec<Frame> = Vec::new();
            for f in frames {
                match (model.last_mut(), &f) {
                    (Some(Frame::Padding(n)), Frame::Padding(m)) => *n += m,
                    _ => model.push(f),
                }
            }
            let mut buf = Vec::new();
            for f in &model {
                f.encode(&mut buf);
            }
            prop_assert_eq!(decode_all(&buf).unwrap(), model);
        }

        #[test]
        fn ack_matches_range_set(set in range_set(), budget in 5usize..200) {
            let mut buf = Vec::new();
            if let Some(info) = encode_ack(&mut buf, Some(PathId(3)), &set, 1, None, budget) {
                prop_assert!(buf.len() <= budget);
                let Some(Ok(Frame::Ack(ack))) = FrameIter::new(Bytes::from(buf)).next() else {
                    panic!()
                };
                let expect: Vec<_> = set.iter().rev().take(info.ranges).map(|r| r.start..=r.end - 1).collect();
                prop_assert_eq!(ack.ranges().collect::<Vec<_>>(), expect);
                prop_assert_eq!(ack.largest, set.max().unwrap());
            }
        }

        #[test]
        fn stream_header_len_matches(id in var(), offset in 0u64..(1 << 61), len in 0usize..20000, with_len in any::<bool>()) {
            let s = Stream { id: StreamId(id), offset, fin: false, data: Bytes::from(vec![0; len]) };
            let mut buf = Vec::new();
            s.encode(with_len, &mut buf);
            prop_assert_eq!(buf.len(), stream_frame_header_len(s.id, offset, len, with_len) + len);
        }

        #[test]
        fn decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            for f in FrameIter::new(Bytes::from(bytes)).flatten() {
                let _ = f.encoded_len();
            }
        }
    }
}
