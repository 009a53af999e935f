//! The gateway's decoders of what arrives from the network: control messages (and the
//! policies they carry), tunnel datagrams, the IP headers inside them and the measurement
//! probes.

use bytes::Bytes;
use polypath_gateway::control::{Control, Decoder};
use polypath_gateway::framing::{self, Tunneled};
use polypath_gateway::pmf::Probe;
use polypath_gateway::policy::Policy;
use polypath_gateway::{classify, icmp};

/// The control stream's decoder ([`Decoder`]) fed the input in chunks whose sizes the
/// first byte picks: every message that decodes must encode to bytes that decode to the
/// same message, and the policy a `welcome` or `policy` message carries goes through the
/// policy parser (which must refuse or accept, never panic). Returns the messages decoded.
pub fn gw_control(data: &[u8]) -> usize {
    let Some((&step, rest)) = data.split_first() else {
        return 0;
    };
    let step = usize::from(step).max(1);
    let mut d = Decoder::default();
    let mut decoded = 0;
    for chunk in rest.chunks(step) {
        d.push(chunk);
        loop {
            match d.next_message() {
                Ok(Some(m)) => {
                    decoded += 1;
                    let mut again = Decoder::default();
                    again.push(&m.encode());
                    assert_eq!(
                        again.next_message(),
                        Ok(Some(m.clone())),
                        "re-encoding changed the message"
                    );
                    if let Control::Welcome { policy, .. } | Control::Policy { policy, .. } = &m {
                        let _ = Policy::parse(policy, "fuzz.json");
                    }
                }
                Ok(None) => break,
                // The session ends at the first error; so does the input.
                Err(e) => {
                    assert!(!e.to_string().is_empty());
                    return decoded;
                }
            }
        }
    }
    let _ = d.finish();
    decoded
}

/// A tunnel datagram as the receiving gateway handles it: [`framing::decode`], then the
/// IP header ([`classify::parse`]), the ICMP "packet too big" a sender would get for it,
/// and, on the input itself, the measurement probe decoder. A packet that decodes must
/// frame back to the same datagram. Returns 1 if the input decoded as an IP packet.
pub fn gw_tunnel(data: &[u8]) -> usize {
    if let Some(p) = Probe::decode(data) {
        assert_eq!(Probe::decode(&p.encode(data.len())), Some(p));
    }
    let datagram = Bytes::copy_from_slice(data);
    match framing::decode(&datagram) {
        Ok(Tunneled::Packet { seq, packet }) => {
            let info = classify::parse(&packet);
            assert!(info.is_some(), "a checked IP packet has a header");
            for from in ["10.200.0.1", "fd00::1"] {
                if let Some(m) = icmp::packet_too_big(
                    &packet,
                    1280,
                    from.parse().unwrap_or(std::net::IpAddr::from([0u8; 4])),
                ) {
                    assert!(
                        framing::check_ip(&m).is_ok(),
                        "the ICMP message is an IP packet"
                    );
                }
            }
            let again = framing::encode(&packet, seq);
            assert_eq!(
                framing::decode(&again),
                Ok(Tunneled::Packet { seq, packet })
            );
            1
        }
        Ok(Tunneled::UnknownContext(_)) | Err(_) => {
            let _ = classify::parse(data);
            0
        }
    }
}
