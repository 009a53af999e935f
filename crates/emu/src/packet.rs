//! Just enough IP parsing to route a packet read from a TUN device: its addresses, its
//! transport protocol and ports.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// TCP's protocol number.
pub const TCP: u8 = 6;
/// UDP's protocol number.
pub const UDP: u8 = 17;

/// The header fields of an IP packet the emulator needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Source address and port (0 without TCP or UDP).
    pub src: SocketAddr,
    /// Destination address and port (0 without TCP or UDP).
    pub dst: SocketAddr,
    /// The transport protocol (the last IPv6 next header seen).
    pub protocol: u8,
}

/// Parses the IPv4 or IPv6 header of `packet`; `None` if it is neither or is truncated.
pub fn parse(packet: &[u8]) -> Option<Header> {
    let version = packet.first()? >> 4;
    let (src, dst, protocol, l4) = match version {
        4 => {
            let ihl = usize::from(packet.first()? & 0x0f) * 4;
            if ihl < 20 || packet.len() < ihl {
                return None;
            }
            let src = Ipv4Addr::from(<[u8; 4]>::try_from(packet.get(12..16)?).ok()?);
            let dst = Ipv4Addr::from(<[u8; 4]>::try_from(packet.get(16..20)?).ok()?);
            // Only the first fragment carries ports.
            let frag_offset = u16::from_be_bytes([*packet.get(6)?, *packet.get(7)?]) & 0x1fff;
            let l4 = if frag_offset == 0 {
                packet.get(ihl..)
            } else {
                None
            };
            (IpAddr::V4(src), IpAddr::V4(dst), *packet.get(9)?, l4)
        }
        6 => {
            if packet.len() < 40 {
                return None;
            }
            let src = Ipv6Addr::from(<[u8; 16]>::try_from(packet.get(8..24)?).ok()?);
            let dst = Ipv6Addr::from(<[u8; 16]>::try_from(packet.get(24..40)?).ok()?);
            (
                IpAddr::V6(src),
                IpAddr::V6(dst),
                *packet.get(6)?,
                packet.get(40..),
            )
        }
        _ => return None,
    };
    let (sport, dport) = match (protocol, l4) {
        (TCP | UDP, Some(l4)) if l4.len() >= 4 => (
            u16::from_be_bytes([l4[0], l4[1]]),
            u16::from_be_bytes([l4[2], l4[3]]),
        ),
        _ => (0, 0),
    };
    Some(Header {
        src: SocketAddr::new(src, sport),
        dst: SocketAddr::new(dst, dport),
        protocol,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ipv4_udp_and_tcp() {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[9] = UDP;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&4433u16.to_be_bytes());
        p[22..24].copy_from_slice(&10000u16.to_be_bytes());
        let h = parse(&p).unwrap();
        assert_eq!(h.src, "10.0.0.1:4433".parse().unwrap());
        assert_eq!(h.dst, "10.0.0.2:10000".parse().unwrap());
        assert_eq!(h.protocol, UDP);
        // A later fragment has no ports.
        p[6] = 0x00;
        p[7] = 0x10;
        assert_eq!(parse(&p).unwrap().src.port(), 0);
    }

    #[test]
    fn parses_ipv6_and_refuses_garbage() {
        let mut p = vec![0u8; 48];
        p[0] = 0x60;
        p[6] = TCP;
        p[23] = 1;
        p[39] = 2;
        p[40..42].copy_from_slice(&80u16.to_be_bytes());
        let h = parse(&p).unwrap();
        assert_eq!(h.src, "[::1]:80".parse().unwrap());
        assert_eq!(h.dst.ip(), "::2".parse::<IpAddr>().unwrap());
        assert_eq!(parse(&[]), None);
        assert_eq!(parse(&[0x45, 0, 0]), None);
        assert_eq!(parse(&[0x70; 60]), None);
        assert_eq!(parse(&p[..30]), None);
    }
}
