//! IPv4 / IPv6 + TCP parsing for the shim, and the in-place window rewrite.
//!
//! [`parse`] reads the fields M2HO needs from a packet as the kernel hands it over (an IP
//! packet, no link-layer header) without copying; [`set_window`] rewrites the advertised
//! window in place and updates the TCP checksum incrementally (RFC 1624). Anything that is
//! not a complete, well-formed, unfragmented TCP segment is a [`ParseError`]: the daemon
//! then lets the packet pass unmodified and counts it. Nothing here panics on any input.

use crate::checksum;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IP protocol number of TCP.
const PROTO_TCP: u8 = 6;

/// TCP flag bits (the low byte of the flags field).
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// Why a packet is not a TCP segment M2HO can work on.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParseError {
    /// Empty, or the version nibble is neither 4 nor 6.
    NotIp,
    /// The IP header is shorter than its minimum, claims more bytes than the packet has, or
    /// its lengths contradict each other.
    BadIpHeader,
    /// A fragment (the TCP header may be elsewhere).
    Fragment,
    /// Not TCP (after any IPv6 extension headers).
    NotTcp,
    /// The TCP header is cut short or its data offset is impossible.
    BadTcpHeader,
    /// A TCP option's length runs past the header or is impossible for its kind.
    BadTcpOptions,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseError::NotIp => "not an IPv4 or IPv6 packet",
            ParseError::BadIpHeader => "malformed IP header",
            ParseError::Fragment => "IP fragment",
            ParseError::NotTcp => "not TCP",
            ParseError::BadTcpHeader => "malformed TCP header",
            ParseError::BadTcpOptions => "malformed TCP options",
        })
    }
}

impl std::error::Error for ParseError {}

/// The TCP options M2HO reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpOptions {
    /// Maximum segment size (SYN only).
    pub mss: Option<u16>,
    /// Window scale shift count (SYN only), as sent (RFC 7323 caps its use at 14).
    pub window_scale: Option<u8>,
    /// SACK permitted (SYN only).
    pub sack_permitted: bool,
    /// Number of SACK blocks.
    pub sack_blocks: u8,
    /// Timestamps: (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
}

/// A parsed TCP segment: addresses, ports, header fields and where they sit in the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSegment {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (meaningful with [`flags::ACK`]).
    pub ack: u32,
    /// The low eight flag bits.
    pub flags: u8,
    /// The window field as sent (unscaled).
    pub window: u16,
    /// Bytes of TCP payload.
    pub payload_len: u32,
    /// Options.
    pub options: TcpOptions,
    /// Offset of the TCP header in the packet.
    pub tcp_offset: usize,
    /// Length of the TCP header (with options).
    pub tcp_header_len: usize,
}

impl TcpSegment {
    /// True when a flag is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// Sequence space the segment occupies: payload plus one for SYN and for FIN.
    pub fn seq_len(&self) -> u32 {
        self.payload_len + u32::from(self.has(flags::SYN)) + u32::from(self.has(flags::FIN))
    }

    /// A pure acknowledgment: ACK set, no payload, no SYN, FIN or RST.
    pub fn is_pure_ack(&self) -> bool {
        self.has(flags::ACK)
            && self.payload_len == 0
            && self.flags & (flags::SYN | flags::FIN | flags::RST) == 0
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Where the transport header starts and ends in an IP packet.
struct IpPart {
    src: IpAddr,
    dst: IpAddr,
    l4_offset: usize,
    l4_end: usize,
}

fn parse_ipv4(p: &[u8], wire_len: usize) -> Result<IpPart, ParseError> {
    if p.len() < 20 {
        return Err(ParseError::BadIpHeader);
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    if ihl < 20 || total < ihl || total > wire_len || ihl > p.len() {
        return Err(ParseError::BadIpHeader);
    }
    let frag = u16::from_be_bytes([p[6], p[7]]);
    // More fragments, or a non-zero offset.
    if frag & 0x3fff != 0 {
        return Err(ParseError::Fragment);
    }
    if p[9] != PROTO_TCP {
        return Err(ParseError::NotTcp);
    }
    Ok(IpPart {
        src: IpAddr::V4(Ipv4Addr::new(p[12], p[13], p[14], p[15])),
        dst: IpAddr::V4(Ipv4Addr::new(p[16], p[17], p[18], p[19])),
        l4_offset: ihl,
        l4_end: total,
    })
}

fn parse_ipv6(p: &[u8], wire_len: usize) -> Result<IpPart, ParseError> {
    if p.len() < 40 {
        return Err(ParseError::BadIpHeader);
    }
    let payload = usize::from(u16::from_be_bytes([p[4], p[5]]));
    // A zero payload length means a jumbogram (RFC 2675), which no TCP M2HO sees uses.
    let end = 40 + payload;
    if payload == 0 || end > wire_len {
        return Err(ParseError::BadIpHeader);
    }
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&p[8..24]);
    dst.copy_from_slice(&p[24..40]);
    let mut next = p[6];
    let mut at = 40;
    // Hop-by-hop, routing and destination options headers may precede TCP (RFC 8200 4.1).
    loop {
        match next {
            PROTO_TCP => break,
            0 | 43 | 60 => {
                let (Some(&nh), Some(&len)) = (p.get(at), p.get(at + 1)) else {
                    return Err(ParseError::BadIpHeader);
                };
                let ext = (usize::from(len) + 1) * 8;
                if at + ext > end {
                    return Err(ParseError::BadIpHeader);
                }
                next = nh;
                at += ext;
            }
            44 => return Err(ParseError::Fragment),
            _ => return Err(ParseError::NotTcp),
        }
    }
    Ok(IpPart {
        src: IpAddr::V6(Ipv6Addr::from(src)),
        dst: IpAddr::V6(Ipv6Addr::from(dst)),
        l4_offset: at,
        l4_end: end,
    })
}

fn parse_options(opts: &[u8]) -> Result<TcpOptions, ParseError> {
    let mut o = TcpOptions::default();
    let mut i = 0;
    while i < opts.len() {
        let kind = opts[i];
        match kind {
            0 => break,
            1 => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let len = usize::from(*opts.get(i + 1).ok_or(ParseError::BadTcpOptions)?);
        if len < 2 || i + len > opts.len() {
            return Err(ParseError::BadTcpOptions);
        }
        let body = &opts[i + 2..i + len];
        match (kind, len) {
            (2, 4) => o.mss = Some(u16::from_be_bytes([body[0], body[1]])),
            (3, 3) => o.window_scale = Some(body[0]),
            (4, 2) => o.sack_permitted = true,
            (5, _) if (len - 2) % 8 == 0 => o.sack_blocks = ((len - 2) / 8) as u8,
            (8, 10) => {
                let val = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                let ecr = u32::from_be_bytes([body[4], body[5], body[6], body[7]]);
                o.timestamps = Some((val, ecr));
            }
            (2..=5 | 8, _) => return Err(ParseError::BadTcpOptions),
            _ => {}
        }
        i += len;
    }
    Ok(o)
}

/// Parses an IP packet carrying a TCP segment.
pub fn parse(packet: &[u8]) -> Result<TcpSegment, ParseError> {
    parse_captured(packet, packet.len())
}

/// Parses the first bytes of a packet of `wire_len` bytes (a capture cut after the
/// headers, as an NFQUEUE copy range gives): the IP and TCP headers must be complete in
/// `captured`; the payload length comes from the IP header. A segment parsed from a cut
/// capture must not be rewritten.
pub fn parse_captured(captured: &[u8], wire_len: usize) -> Result<TcpSegment, ParseError> {
    let wire_len = wire_len.max(captured.len());
    let ip = match captured.first().map(|b| b >> 4) {
        Some(4) => parse_ipv4(captured, wire_len)?,
        Some(6) => parse_ipv6(captured, wire_len)?,
        _ => return Err(ParseError::NotIp),
    };
    let t = ip.l4_offset;
    if t > ip.l4_end {
        return Err(ParseError::BadIpHeader);
    }
    let seg_len = ip.l4_end - t;
    let seg = captured
        .get(t..ip.l4_end.min(captured.len()))
        .ok_or(ParseError::BadIpHeader)?;
    if seg_len < 20 || seg.len() < 20 {
        return Err(ParseError::BadTcpHeader);
    }
    let hlen = usize::from(seg[12] >> 4) * 4;
    if hlen < 20 || hlen > seg.len() {
        return Err(ParseError::BadTcpHeader);
    }
    let options = parse_options(&seg[20..hlen])?;
    let field = |at| be16(seg, at).ok_or(ParseError::BadTcpHeader);
    let field32 = |at| be32(seg, at).ok_or(ParseError::BadTcpHeader);
    Ok(TcpSegment {
        src: ip.src,
        dst: ip.dst,
        src_port: field(0)?,
        dst_port: field(2)?,
        seq: field32(4)?,
        ack: field32(8)?,
        flags: seg[13],
        window: field(14)?,
        payload_len: (seg_len - hlen) as u32,
        options,
        tcp_offset: t,
        tcp_header_len: hlen,
    })
}

/// Rewrites the window field of the segment `seg` (parsed from `packet`) to `window` and
/// updates the TCP checksum incrementally (RFC 1624). Returns the old field. Does nothing
/// (and returns `None`) if `packet` is shorter than `seg` says, which cannot happen for the
/// packet it was parsed from.
pub fn set_window(packet: &mut [u8], seg: &TcpSegment, window: u16) -> Option<u16> {
    let w = seg.tcp_offset + 14;
    let c = seg.tcp_offset + 16;
    let old = be16(packet, w)?;
    let check = be16(packet, c)?;
    let new_check = checksum::update16(check, old, window);
    packet[w..w + 2].copy_from_slice(&window.to_be_bytes());
    packet[c..c + 2].copy_from_slice(&new_check.to_be_bytes());
    Some(old)
}

/// The TCP checksum of `packet` computed from scratch (pseudo-header of RFC 9293 3.1 /
/// RFC 8200 8.1 and the segment with its checksum field as stored): zero (or 0xffff) when
/// the stored checksum is correct. For tests and diagnostics, not the fast path.
pub fn tcp_checksum_residue(packet: &[u8], seg: &TcpSegment) -> Option<u16> {
    let len = seg.tcp_header_len + seg.payload_len as usize;
    let body = packet.get(seg.tcp_offset..seg.tcp_offset + len)?;
    let mut sum = 0u64;
    match (seg.src, seg.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            sum = checksum::accumulate(sum, &s.octets());
            sum = checksum::accumulate(sum, &d.octets());
            sum += u64::from(PROTO_TCP) + len as u64;
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            sum = checksum::accumulate(sum, &s.octets());
            sum = checksum::accumulate(sum, &d.octets());
            sum += (len as u64 >> 16) + (len as u64 & 0xffff) + u64::from(PROTO_TCP);
        }
        _ => return None,
    }
    Some(checksum::finish(checksum::accumulate(sum, body)))
}

/// True when the TCP checksum of `packet` verifies.
pub fn tcp_checksum_ok(packet: &[u8], seg: &TcpSegment) -> bool {
    matches!(tcp_checksum_residue(packet, seg), Some(0) | Some(0xffff))
}
