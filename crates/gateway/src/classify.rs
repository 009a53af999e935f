//! What the gateways read of an IP packet to classify it: addresses, protocol, ports and
//! DSCP. Nothing else of the packet is interpreted; a packet too short for its own header
//! yields `None` and goes to the default class.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IP protocol numbers the policies name.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// The fields of an IP packet classes match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketInfo {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// The transport protocol (IPv4 protocol, or the IPv6 Next Header of the fixed header).
    pub protocol: u8,
    /// Differentiated Services Code Point (the upper six bits of the TOS / traffic class).
    pub dscp: u8,
    /// Source and destination port of a TCP or UDP packet (the first fragment's).
    pub ports: Option<(u16, u16)>,
    /// Total length of the packet, from its header.
    pub len: usize,
}

/// Parses the header of an IPv4 or IPv6 packet.
pub fn parse(p: &[u8]) -> Option<PacketInfo> {
    let version = p.first()? >> 4;
    let (src, dst, protocol, dscp, l4, first_fragment, len): (
        IpAddr,
        IpAddr,
        u8,
        u8,
        usize,
        bool,
        usize,
    ) = match version {
        4 => {
            let ihl = usize::from(p.first()? & 0x0f) * 4;
            if ihl < 20 || p.len() < ihl {
                return None;
            }
            let src = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
            let dst = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
            let frag_offset = u16::from_be_bytes([p[6], p[7]]) & 0x1fff;
            let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
            (
                src.into(),
                dst.into(),
                p[9],
                p[1] >> 2,
                ihl,
                frag_offset == 0,
                total,
            )
        }
        6 => {
            if p.len() < 40 {
                return None;
            }
            let mut s = [0u8; 16];
            s.copy_from_slice(&p[8..24]);
            let mut d = [0u8; 16];
            d.copy_from_slice(&p[24..40]);
            let tc = ((p[0] & 0x0f) << 4) | (p[1] >> 4);
            let payload = usize::from(u16::from_be_bytes([p[4], p[5]]));
            (
                Ipv6Addr::from(s).into(),
                Ipv6Addr::from(d).into(),
                p[6],
                tc >> 2,
                40,
                true,
                40 + payload,
            )
        }
        _ => return None,
    };
    let ports = match protocol {
        proto::TCP | proto::UDP if first_fragment => p.get(l4..l4 + 4).map(|b| {
            (
                u16::from_be_bytes([b[0], b[1]]),
                u16::from_be_bytes([b[2], b[3]]),
            )
        }),
        _ => None,
    };
    Some(PacketInfo {
        src,
        dst,
        protocol,
        dscp,
        ports,
        len,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An IPv4 packet of `len` bytes (at least 28) from `src` to `dst` with the given
    /// protocol, ports and DSCP.
    pub(crate) fn ipv4(
        src: [u8; 4],
        dst: [u8; 4],
        protocol: u8,
        ports: (u16, u16),
        dscp: u8,
        len: usize,
    ) -> Vec<u8> {
        let mut p = vec![0u8; len.max(28)];
        p[0] = 0x45;
        p[1] = dscp << 2;
        let total = p.len() as u16;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[8] = 64;
        p[9] = protocol;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&ports.0.to_be_bytes());
        p[22..24].copy_from_slice(&ports.1.to_be_bytes());
        p
    }

    #[test]
    fn ipv4_headers() {
        let p = ipv4(
            [10, 0, 0, 1],
            [10, 99, 0, 2],
            proto::UDP,
            (4000, 5004),
            46,
            100,
        );
        let i = parse(&p).unwrap();
        assert_eq!(i.src, IpAddr::from([10, 0, 0, 1]));
        assert_eq!(i.dst, IpAddr::from([10, 99, 0, 2]));
        assert_eq!(i.protocol, proto::UDP);
        assert_eq!(i.dscp, 46);
        assert_eq!(i.ports, Some((4000, 5004)));
        assert_eq!(i.len, 100);
        // A later fragment has no ports.
        let mut frag = p.clone();
        frag[7] = 10;
        assert_eq!(parse(&frag).unwrap().ports, None);
        assert_eq!(parse(&p[..10]), None);
        assert_eq!(parse(&[]), None);
    }

    #[test]
    fn ipv6_headers() {
        let mut p = vec![0u8; 48];
        p[0] = 0x6b; // version 6, traffic class 0xb8 (DSCP 46)
        p[1] = 0x80;
        p[4..6].copy_from_slice(&8u16.to_be_bytes());
        p[6] = proto::TCP;
        p[23] = 1;
        p[39] = 2;
        p[40..42].copy_from_slice(&80u16.to_be_bytes());
        p[42..44].copy_from_slice(&5555u16.to_be_bytes());
        let i = parse(&p).unwrap();
        assert_eq!(i.dscp, 46);
        assert_eq!(i.protocol, proto::TCP);
        assert_eq!(i.ports, Some((80, 5555)));
        assert_eq!(i.dst, "::2".parse::<IpAddr>().unwrap());
        assert_eq!(i.len, 48);
    }
}
