//! The M2HO shim's packet path: the IPv4 / IPv6 + TCP parser and the window rewrite, as
//! the NFQUEUE daemon meets them on every packet.

use polypath_m2ho::controller::Verdict;
use polypath_m2ho::packet;
use polypath_m2ho::{Config, Controller, Direction};

/// Parses the input as an IP packet. A packet that parses must have a consistent view (the
/// TCP header and payload inside it), and rewriting its window must change only the window
/// and checksum fields and keep a verifying checksum verifying. The controller (clamping
/// every window, so that any parsed ACK is rewritten) must pass unparsed packets through
/// unmodified, in both directions. Returns 1 when the input parsed as TCP.
pub fn m2ho_packet(data: &[u8]) -> usize {
    let mut controller = Controller::new(Config {
        clamp_rwnd_bytes: Some(1),
        ..Config::default()
    });
    let parsed = packet::parse(data);
    for dir in [Direction::Inbound, Direction::Outbound] {
        let mut copy = data.to_vec();
        match controller.on_packet(0, dir, &mut copy) {
            Verdict::Unparsed(e) => {
                assert_eq!(Err(e), parsed.map(|_| ()));
                assert_eq!(copy, data, "an unparsed packet passes unmodified");
            }
            Verdict::Pass | Verdict::Drop => assert_eq!(copy, data),
            Verdict::Rewritten { .. } => unreachable!("no handshake was seen"),
        }
    }
    let Ok(seg) = parsed else {
        return 0;
    };
    let end = seg.tcp_offset + seg.tcp_header_len + seg.payload_len as usize;
    assert!(end <= data.len(), "segment within the packet");
    let verified = packet::tcp_checksum_ok(data, &seg);
    for window in [0u16, 1, seg.window.wrapping_add(1), 0xffff] {
        let mut copy = data.to_vec();
        assert_eq!(
            packet::set_window(&mut copy, &seg, window),
            Some(seg.window)
        );
        let again = packet::parse(&copy).expect("a rewritten segment parses");
        assert_eq!(again.window, window);
        assert_eq!(packet::tcp_checksum_ok(&copy, &again), verified);
        let changed = (0..data.len()).filter(|i| copy[*i] != data[*i]);
        let fields = seg.tcp_offset + 14..seg.tcp_offset + 18;
        assert!(changed.into_iter().all(|i| fields.contains(&i)));
    }
    1
}
