//! ICMP "packet too big" for packets the tunnel cannot carry: Destination Unreachable /
//! Fragmentation Needed (ICMPv4 type 3 code 4, with the next-hop MTU, RFC 1191) and
//! Packet Too Big (ICMPv6 type 2, RFC 8201), written back to the application's side so its
//! path MTU discovery shrinks its packets.

use std::net::IpAddr;

use crate::classify;

/// The Internet checksum (RFC 1071) of `data`, starting from `sum`.
fn checksum(mut sum: u32, data: &[u8]) -> u16 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The ICMP message telling the sender of `packet` (too big for the tunnel) to use at most
/// `mtu` bytes, from `from` (the gateway's tunnel address of the same family); `None` when
/// no message is due (an IPv4 packet without Don't Fragment, an ICMP error, a packet that
/// does not parse, or a family mismatch).
pub fn packet_too_big(packet: &[u8], mtu: u16, from: IpAddr) -> Option<Vec<u8>> {
    let info = classify::parse(packet)?;
    match (info.src, from) {
        (IpAddr::V4(src), IpAddr::V4(me)) => {
            let df = packet.get(6).is_some_and(|b| b & 0x40 != 0);
            // Never answer an ICMP error with another.
            let icmp_error = info.protocol == classify::proto::ICMP
                && packet
                    .get(usize::from(packet[0] & 0x0f) * 4)
                    .is_some_and(|t| matches!(t, 3 | 4 | 5 | 11 | 12));
            if !df || icmp_error {
                return None;
            }
            // The original header and the first 8 bytes of its payload (RFC 792).
            let ihl = usize::from(packet[0] & 0x0f) * 4;
            let quoted = &packet[..(ihl + 8).min(packet.len())];
            let mut icmp = vec![3u8, 4, 0, 0, 0, 0];
            icmp.extend_from_slice(&mtu.to_be_bytes());
            icmp.extend_from_slice(quoted);
            let c = checksum(0, &icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            let total = 20 + icmp.len();
            let mut ip = vec![0u8; 20];
            ip[0] = 0x45;
            ip[1] = 0xc0;
            ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            ip[8] = 64;
            ip[9] = classify::proto::ICMP;
            ip[12..16].copy_from_slice(&me.octets());
            ip[16..20].copy_from_slice(&src.octets());
            let c = checksum(0, &ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            ip.extend_from_slice(&icmp);
            Some(ip)
        }
        (IpAddr::V6(src), IpAddr::V6(me)) => {
            let icmp_error = info.protocol == classify::proto::ICMPV6
                && packet.get(40).is_some_and(|t| *t < 128);
            if icmp_error {
                return None;
            }
            // As much of the packet as fits in the minimum MTU (RFC 4443).
            let quoted = &packet[..packet.len().min(1280 - 48)];
            let mut icmp = vec![2u8, 0, 0, 0];
            icmp.extend_from_slice(&u32::from(mtu).to_be_bytes());
            icmp.extend_from_slice(quoted);
            // Pseudo-header: source, destination, length, next header.
            let mut sum = 0u32;
            for a in [me.octets(), src.octets()] {
                for c in a.chunks_exact(2) {
                    sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
                }
            }
            sum += icmp.len() as u32;
            sum += u32::from(classify::proto::ICMPV6);
            let c = checksum(sum, &icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            let mut ip = vec![0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&(icmp.len() as u16).to_be_bytes());
            ip[6] = classify::proto::ICMPV6;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&me.octets());
            ip[24..40].copy_from_slice(&src.octets());
            ip.extend_from_slice(&icmp);
            Some(ip)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::tests::ipv4;

    #[test]
    fn ipv4_fragmentation_needed() {
        let mut p = ipv4(
            [10, 200, 1, 2],
            [10, 99, 0, 1],
            classify::proto::TCP,
            (1, 2),
            0,
            1500,
        );
        assert_eq!(
            packet_too_big(&p, 1380, "10.200.0.1".parse().unwrap()),
            None,
            "no DF"
        );
        p[6] = 0x40;
        let m = packet_too_big(&p, 1380, "10.200.0.1".parse().unwrap()).unwrap();
        assert_eq!(checksum(0, &m[..20]), 0, "IP header checksum");
        assert_eq!(checksum(0, &m[20..]), 0, "ICMP checksum");
        assert_eq!((m[20], m[21]), (3, 4));
        assert_eq!(u16::from_be_bytes([m[26], m[27]]), 1380);
        let info = classify::parse(&m).unwrap();
        assert_eq!(info.dst, IpAddr::from([10, 200, 1, 2]));
        assert_eq!(info.len, m.len());
        // Not for an ICMP error.
        assert_eq!(
            packet_too_big(&m, 1000, "10.200.0.1".parse().unwrap()),
            None
        );
    }

    #[test]
    fn ipv6_packet_too_big() {
        let mut p = vec![0u8; 1500];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&1460u16.to_be_bytes());
        p[6] = classify::proto::UDP;
        p[23] = 2;
        p[39] = 3;
        let m = packet_too_big(&p, 1380, "fd00::1".parse().unwrap()).unwrap();
        assert_eq!(m.len(), 1280);
        assert_eq!(m[40], 2);
        assert_eq!(u32::from_be_bytes([m[44], m[45], m[46], m[47]]), 1380);
        crate::framing::check_ip(&m).unwrap();
    }
}
