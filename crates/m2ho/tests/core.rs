//! The sans-IO core against packets from a reference encoder (etherparse): parsing,
//! window-scale-aware rewrites whose checksums verify, malformed and truncated packets
//! passing unmodified, and the controller's states and actions (Sec. 4.1-4.5) driven by
//! link events and packets.

use etherparse::{PacketBuilder, SlicedPacket, TcpHeader, TcpOptionElement, TransportSlice};
use polypath_link::{CellId, CellMeasurement, LinkEventKind, MeasEvent, RadioType};
use polypath_m2ho::controller::{Reason, Verdict};
use polypath_m2ho::packet::{self, ParseError};
use polypath_m2ho::{Config, Controller, Direction, State};
use proptest::prelude::*;

const UE4: [u8; 4] = [10, 0, 0, 2];
const SRV4: [u8; 4] = [10, 0, 0, 1];
const UE6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const SRV6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const MS: u64 = 1_000_000;

/// A TCP segment built by etherparse. `out`: from the UE (port 5000) to the server (80).
#[derive(Clone)]
struct Seg {
    v6: bool,
    out: bool,
    seq: u32,
    ack: Option<u32>,
    syn: bool,
    fin: bool,
    window: u16,
    options: Vec<TcpOptionElement>,
    payload: Vec<u8>,
}

impl Seg {
    fn new(out: bool) -> Seg {
        Seg {
            v6: false,
            out,
            seq: 1000,
            ack: None,
            syn: false,
            fin: false,
            window: 1000,
            options: Vec::new(),
            payload: Vec::new(),
        }
    }
    fn v6(mut self) -> Seg {
        self.v6 = true;
        self
    }
    fn seq(mut self, s: u32) -> Seg {
        self.seq = s;
        self
    }
    fn ack(mut self, a: u32) -> Seg {
        self.ack = Some(a);
        self
    }
    fn syn(mut self) -> Seg {
        self.syn = true;
        self
    }
    fn win(mut self, w: u16) -> Seg {
        self.window = w;
        self
    }
    fn opts(mut self, o: &[TcpOptionElement]) -> Seg {
        self.options = o.to_vec();
        self
    }
    fn data(mut self, n: usize) -> Seg {
        self.payload = (0..n).map(|i| (i % 251) as u8).collect();
        self
    }
    fn ts(self, val: u32, ecr: u32) -> Seg {
        let mut o = self.options.clone();
        o.push(TcpOptionElement::Timestamp(val, ecr));
        self.opts(&o)
    }
    fn build(&self) -> Vec<u8> {
        let (sp, dp) = if self.out { (5000, 80) } else { (80, 5000) };
        let mut h = TcpHeader::new(sp, dp, self.seq, self.window);
        h.syn = self.syn;
        h.fin = self.fin;
        if let Some(a) = self.ack {
            h.ack = true;
            h.acknowledgment_number = a;
        }
        h.set_options(&self.options).unwrap();
        let b = if self.v6 {
            let (s, d) = if self.out { (UE6, SRV6) } else { (SRV6, UE6) };
            PacketBuilder::ipv6(s, d, 64).tcp_header(h)
        } else {
            let (s, d) = if self.out { (UE4, SRV4) } else { (SRV4, UE4) };
            PacketBuilder::ipv4(s, d, 64).tcp_header(h)
        };
        let mut v = Vec::with_capacity(b.size(self.payload.len()));
        b.write(&mut v, &self.payload).unwrap();
        v
    }
}

/// The checksum etherparse computes for the packet, and the one stored in it.
fn reference_checksum(p: &[u8]) -> (u16, u16) {
    let s = SlicedPacket::from_ip(p).unwrap();
    let Some(TransportSlice::Tcp(t)) = s.transport else {
        panic!("not tcp")
    };
    let hdr = t.to_header();
    let payload = t.payload();
    let calc = match s.net.unwrap() {
        etherparse::NetSlice::Ipv4(ip) => hdr
            .calc_checksum_ipv4_raw(ip.header().source(), ip.header().destination(), payload)
            .unwrap(),
        etherparse::NetSlice::Ipv6(ip) => hdr
            .calc_checksum_ipv6_raw(ip.header().source(), ip.header().destination(), payload)
            .unwrap(),
        _ => panic!("arp"),
    };
    (calc, hdr.checksum)
}

fn window_of(p: &[u8]) -> u16 {
    packet::parse(p).unwrap().window
}

#[test]
fn parse_agrees_with_the_reference_encoder() {
    for v6 in [false, true] {
        let mut s = Seg::new(true)
            .seq(0xfffffff0)
            .ack(77)
            .win(4321)
            .opts(&[
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::SelectiveAcknowledgement((1, 2), [Some((3, 4)), None, None]),
            ])
            .ts(11, 22)
            .data(100);
        if v6 {
            s = s.v6();
        }
        let p = s.build();
        let seg = packet::parse(&p).unwrap();
        assert_eq!((seg.src_port, seg.dst_port), (5000, 80));
        assert_eq!((seg.seq, seg.ack, seg.window), (0xfffffff0, 77, 4321));
        assert_eq!(seg.payload_len, 100);
        assert_eq!(seg.options.timestamps, Some((11, 22)));
        assert_eq!(seg.options.sack_blocks, 2);
        assert!(
            packet::tcp_checksum_ok(&p, &seg),
            "our verifier agrees with etherparse"
        );
        let syn = Seg::new(true)
            .syn()
            .opts(&[
                TcpOptionElement::MaximumSegmentSize(1460),
                TcpOptionElement::SelectiveAcknowledgementPermitted,
                TcpOptionElement::WindowScale(7),
            ])
            .build();
        let seg = packet::parse(&syn).unwrap();
        assert_eq!(seg.options.mss, Some(1460));
        assert_eq!(seg.options.window_scale, Some(7));
        assert!(seg.options.sack_permitted);
    }
}

proptest! {
    /// Any window written into any segment (IPv4 or IPv6, any payload and options) leaves
    /// a checksum equal to the reference encoder's recomputation.
    #[test]
    fn rewritten_checksums_verify(
        v6 in any::<bool>(),
        seq in any::<u32>(),
        ack in any::<u32>(),
        old in any::<u16>(),
        new in any::<u16>(),
        len in 0usize..300,
        ts in proptest::option::of((any::<u32>(), any::<u32>())),
    ) {
        let mut s = Seg::new(true).seq(seq).ack(ack).win(old).data(len);
        if let Some((a, b)) = ts {
            s = s.ts(a, b);
        }
        if v6 {
            s = s.v6();
        }
        let mut p = s.build();
        let seg = packet::parse(&p).unwrap();
        prop_assert_eq!(packet::set_window(&mut p, &seg, new), Some(old));
        let (calc, stored) = reference_checksum(&p);
        // Ones' complement has two zeros: 0x0000 and 0xffff verify alike.
        prop_assert!(calc == stored || (calc | stored) == 0xffff && (calc & stored) == 0,
            "calc {:#x} stored {:#x}", calc, stored);
        prop_assert!(packet::tcp_checksum_ok(&p, &packet::parse(&p).unwrap()));
        prop_assert_eq!(window_of(&p), new);
    }
}

/// A connection whose handshake the controller saw: the UE (outbound) sent its SYN with
/// window scale `ue_ws`, the server answered with `srv_ws`.
fn handshake(m: &mut Controller, v6: bool, ue_ws: Option<u8>, srv_ws: Option<u8>, ts: bool) {
    let v = |s: Seg| if v6 { s.v6() } else { s };
    let mut o = vec![TcpOptionElement::MaximumSegmentSize(1448)];
    if let Some(w) = ue_ws {
        o.push(TcpOptionElement::WindowScale(w));
    }
    let mut syn = v(Seg::new(true).seq(100).syn().win(64240).opts(&o));
    if ts {
        syn = syn.ts(1, 0);
    }
    let mut p = syn.build();
    assert_eq!(m.on_packet(0, Direction::Outbound, &mut p), Verdict::Pass);
    let mut o = vec![TcpOptionElement::MaximumSegmentSize(1448)];
    if let Some(w) = srv_ws {
        o.push(TcpOptionElement::WindowScale(w));
    }
    let mut synack = v(Seg::new(false).seq(5000).ack(101).syn().win(65160).opts(&o));
    if ts {
        synack = synack.ts(1000, 1);
    }
    let mut p = synack.build();
    assert_eq!(m.on_packet(MS, Direction::Inbound, &mut p), Verdict::Pass);
}

fn clamp(bytes: u64) -> Controller {
    Controller::new(Config {
        clamp_rwnd_bytes: Some(bytes),
        ..Config::default()
    })
}

#[test]
fn rewrites_are_window_scale_aware_and_verify() {
    for v6 in [false, true] {
        let v = |s: Seg| if v6 { s.v6() } else { s };
        // Both ends scale: the device's shift (7) applies to the windows it sends.
        let mut m = clamp(64_000);
        handshake(&mut m, v6, Some(7), Some(9), false);
        let mut p = v(Seg::new(true).seq(101).ack(5001).win(3000)).build();
        let orig = p.clone();
        let verdict = m.on_packet(2 * MS, Direction::Outbound, &mut p);
        // ceil(64 000 / 2^7) = 500 (64 000 bytes exactly).
        assert_eq!(
            verdict,
            Verdict::Rewritten {
                old: 3000,
                new: 500
            }
        );
        assert_eq!(window_of(&p), 500);
        let (calc, stored) = reference_checksum(&p);
        assert_eq!(calc, stored);
        // Nothing else changed.
        let diff: Vec<usize> = (0..p.len()).filter(|i| p[*i] != orig[*i]).collect();
        let t = packet::parse(&p).unwrap().tcp_offset;
        assert!(
            diff.iter().all(|i| (t + 14..t + 18).contains(i)),
            "{diff:?}"
        );
        // A window already below the clamp is left alone (M2HO only shrinks).
        let mut p = v(Seg::new(true).seq(101).ack(5001).win(400)).build();
        assert_eq!(
            m.on_packet(3 * MS, Direction::Outbound, &mut p),
            Verdict::Pass
        );
        // The SYN-ACK's window is never scaled: not rewritten even if large.
        let mut m = clamp(1000);
        let mut syn = v(Seg::new(true)
            .syn()
            .win(65000)
            .opts(&[TcpOptionElement::WindowScale(7)]))
        .build();
        assert_eq!(m.on_packet(0, Direction::Outbound, &mut syn), Verdict::Pass);

        // Only the device announced a scale: RFC 7323 says no scaling, shift 0.
        let mut m = clamp(64_000);
        handshake(&mut m, v6, Some(7), None, false);
        let mut p = v(Seg::new(true).seq(101).ack(5001).win(65535)).build();
        assert_eq!(
            m.on_packet(2 * MS, Direction::Outbound, &mut p),
            Verdict::Rewritten {
                old: 65535,
                new: 64_000
            }
        );
        assert_eq!(reference_checksum(&p).0, reference_checksum(&p).1);

        // A shift above 14 counts as 14.
        let mut m = clamp(1 << 20);
        handshake(&mut m, v6, Some(15), Some(2), false);
        let mut p = v(Seg::new(true).seq(101).ack(5001).win(1000)).build();
        assert_eq!(
            m.on_packet(2 * MS, Direction::Outbound, &mut p),
            Verdict::Rewritten { old: 1000, new: 64 }
        );

        // No handshake seen: the scale is unknown and nothing is rewritten.
        let mut m = clamp(1000);
        let mut p = v(Seg::new(true).seq(101).ack(5001).win(3000)).build();
        let orig = p.clone();
        assert_eq!(m.on_packet(0, Direction::Outbound, &mut p), Verdict::Pass);
        assert_eq!(p, orig);
        assert_eq!(m.stats().packets.unknown_scale, 1);
    }
}

/// A change to a packet.
type Corruption = Box<dyn Fn(&mut Vec<u8>)>;

/// Every truncation and a set of corruptions of valid packets: each either parses (and is
/// then a valid segment) or passes unmodified as unparsed; nothing panics.
#[test]
fn truncated_and_malformed_packets_pass_unmodified() {
    let mut m = clamp(1000);
    handshake(&mut m, false, Some(7), Some(7), true);
    handshake(&mut m, true, Some(7), Some(7), true);
    let mut unparsed = 0;
    for v6 in [false, true] {
        let v = |s: Seg| if v6 { s.v6() } else { s };
        let good = v(Seg::new(true)
            .seq(101)
            .ack(5001)
            .win(3000)
            .ts(5, 6)
            .data(40))
        .build();
        for cut in 0..good.len() {
            let mut p = good[..cut].to_vec();
            let orig = p.clone();
            let verdict = m.on_packet(5 * MS, Direction::Outbound, &mut p);
            assert!(
                matches!(verdict, Verdict::Unparsed(_)),
                "cut at {cut}: {verdict:?}"
            );
            assert_eq!(p, orig);
            unparsed += 1;
        }
        let t = packet::parse(&good).unwrap().tcp_offset;
        let corruptions: Vec<(&str, Corruption, ParseError)> = vec![
            (
                "version 5",
                Box::new(|p: &mut Vec<u8>| p[0] = (p[0] & 0x0f) | 0x50),
                ParseError::NotIp,
            ),
            (
                "data offset 3",
                Box::new(move |p: &mut Vec<u8>| p[t + 12] = 0x30),
                ParseError::BadTcpHeader,
            ),
            // The timestamp option (after two NOPs... etherparse pads) claims 40 bytes.
            (
                "option length",
                Box::new(move |p: &mut Vec<u8>| {
                    let o = (t + 20..t + 32).find(|i| p[*i] == 8).unwrap();
                    p[o + 1] = 40;
                }),
                ParseError::BadTcpOptions,
            ),
            (
                "window scale of length 4",
                Box::new(move |p: &mut Vec<u8>| {
                    let o = (t + 20..t + 32).find(|i| p[*i] == 8).unwrap();
                    p[o] = 3;
                }),
                ParseError::BadTcpOptions,
            ),
            (
                "not tcp",
                Box::new(
                    move |p: &mut Vec<u8>| {
                        if p[0] >> 4 == 4 { p[9] = 17 } else { p[6] = 17 }
                    },
                ),
                ParseError::NotTcp,
            ),
        ];
        for (what, f, want) in &corruptions {
            let mut p = good.clone();
            f(&mut p);
            let orig = p.clone();
            assert_eq!(
                m.on_packet(5 * MS, Direction::Outbound, &mut p),
                Verdict::Unparsed(*want),
                "{what} ({})",
                if v6 { "v6" } else { "v4" }
            );
            assert_eq!(p, orig, "{what}");
            unparsed += 1;
        }
    }
    // IPv4: a fragment, a header length below 20, a total length beyond the buffer, a TCP
    // data offset beyond the segment.
    let good = Seg::new(true).seq(101).ack(5001).win(3000).build();
    for (f, want) in [
        (
            (|p: &mut Vec<u8>| p[6] |= 0x20) as fn(&mut Vec<u8>),
            ParseError::Fragment,
        ),
        (|p: &mut Vec<u8>| p[7] = 8, ParseError::Fragment),
        (|p: &mut Vec<u8>| p[0] = 0x44, ParseError::BadIpHeader),
        (
            |p: &mut Vec<u8>| p[3] = p[3].wrapping_add(1),
            ParseError::BadIpHeader,
        ),
        (|p: &mut Vec<u8>| p[32] = 0xf0, ParseError::BadTcpHeader),
    ] {
        let mut p = good.clone();
        f(&mut p);
        let orig = p.clone();
        assert_eq!(
            m.on_packet(5 * MS, Direction::Outbound, &mut p),
            Verdict::Unparsed(want)
        );
        assert_eq!(p, orig);
        unparsed += 1;
    }
    // IPv6: a fragment header, an extension header running past the payload.
    let good6 = Seg::new(true).v6().seq(101).ack(5001).win(3000).build();
    let mut frag = good6.clone();
    frag[6] = 44;
    assert_eq!(
        m.on_packet(5 * MS, Direction::Outbound, &mut frag),
        Verdict::Unparsed(ParseError::Fragment)
    );
    let mut hbh = good6.clone();
    hbh[6] = 0;
    hbh[41] = 200;
    assert_eq!(
        m.on_packet(5 * MS, Direction::Outbound, &mut hbh),
        Verdict::Unparsed(ParseError::BadIpHeader)
    );
    unparsed += 2;
    // A hop-by-hop header before TCP is followed (and the rewrite still verifies).
    let mut ext = good6[..40].to_vec();
    ext[6] = 0; // next: hop-by-hop
    let plen = u16::from_be_bytes([good6[4], good6[5]]) + 8;
    ext[4..6].copy_from_slice(&plen.to_be_bytes());
    ext.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]); // next TCP, PadN
    ext.extend_from_slice(&good6[40..]);
    let seg = packet::parse(&ext).unwrap();
    assert_eq!(seg.tcp_offset, 48);
    // The clamp (1000 bytes) is below the floor of two segments (2896 bytes): 23 units.
    assert_eq!(
        m.on_packet(6 * MS, Direction::Outbound, &mut ext),
        Verdict::Rewritten { old: 3000, new: 23 }
    );
    assert!(packet::tcp_checksum_ok(&ext, &packet::parse(&ext).unwrap()));
    assert_eq!(m.stats().packets.unparsed.values().sum::<u64>(), unparsed);
}

// ---------------------------------------------------------------- the controller

fn meas(cell: u32, rat: RadioType) -> CellMeasurement {
    CellMeasurement {
        cell: CellId(cell),
        rat,
        rsrp_dbm: -90.0,
        rsrq_db: -10.0,
        sinr_db: 10.0,
    }
}

fn report(
    event: MeasEvent,
    serving: (u32, RadioType),
    neighbour: Option<(u32, RadioType)>,
) -> LinkEventKind {
    LinkEventKind::MeasurementReport {
        meas_id: 1,
        event,
        serving: meas(serving.0, serving.1),
        neighbours: neighbour.map(|n| meas(n.0, n.1)).into_iter().collect(),
        on_leave: false,
    }
}

fn command(source: u32, target: u32, rat: RadioType) -> LinkEventKind {
    LinkEventKind::HandoverCommand {
        source: CellId(source),
        target: CellId(target),
        target_rat: rat,
        direction: polypath_link::HandoverDirection::Horizontal,
        keeps_sn: false,
    }
}

fn rb(cell: u32, slot: u64, rbs: u16, bytes: u32) -> LinkEventKind {
    LinkEventKind::RbAllocation {
        cell: CellId(cell),
        slot,
        rbs,
        total_rbs: 106,
        bytes,
    }
}

/// Teaches the controller a burst of `bytes` on `cell` (sub-6) from slot `slot`.
fn teach_burst(m: &mut Controller, now: u64, cell: u32, slot: u64, bytes: u32) {
    m.on_link_event(
        now,
        &LinkEventKind::Measurement {
            serving: None,
            cells: vec![meas(cell, RadioType::NrFr1)],
        },
    );
    let full = bytes - 1000;
    m.on_link_event(now, &rb(cell, slot, 106, full));
    m.on_link_event(now, &rb(cell, slot + 1, 10, 1000));
    m.on_link_event(now, &rb(cell, slot + 2, 0, 0));
}

/// An outbound ACK of the connection set up by `handshake` (shift 7 on both sides).
fn ack_pkt(ack: u32, win: u16) -> Vec<u8> {
    Seg::new(true).seq(101).ack(ack).win(win).build()
}

fn sub6(c: u32) -> (u32, RadioType) {
    (c, RadioType::NrFr1)
}

fn mmw(c: u32) -> (u32, RadioType) {
    (c, RadioType::NrFr2)
}

#[test]
fn prediction_shrinks_to_the_target_estimate_and_a1_cancels() {
    let mut m = Controller::new(Config::default());
    handshake(&mut m, false, Some(7), Some(7), false);
    teach_burst(&mut m, MS, 2, 100, 256_000);
    teach_burst(&mut m, MS, 3, 200, 128_000);
    // Stable: no rewrite.
    let mut p = ack_pkt(5001, 4000);
    assert_eq!(
        m.on_packet(10 * MS, Direction::Outbound, &mut p),
        Verdict::Pass
    );
    // A3 towards cell 2 (sub-6 to sub-6): predicted; the window becomes cell 2's estimate.
    m.on_link_event(20 * MS, &report(MeasEvent::A3, sub6(1), Some(sub6(2))));
    assert_eq!(m.state(), State::Preparation);
    assert_eq!(m.shrink_bytes(), Some(256_000));
    let mut p = ack_pkt(5001, 4000);
    assert_eq!(
        m.on_packet(30 * MS, Direction::Outbound, &mut p),
        Verdict::Rewritten {
            old: 4000,
            new: 2000
        }
    );
    // A1: the serving cell recovered (fallback 1); back to stable, nothing held: the window
    // widens back to the kernel's with the data (nothing arrived yet, so the edge stays).
    m.on_link_event(40 * MS, &report(MeasEvent::A1, sub6(1), None));
    assert_eq!(m.state(), State::Stable);
    let mut p = ack_pkt(5001, 4000);
    assert_eq!(
        m.on_packet(50 * MS, Direction::Outbound, &mut p),
        Verdict::Rewritten {
            old: 4000,
            new: 2000
        }
    );
    // 128 000 bytes arrive: 256 000 - 128 000 + 256 000 = 384 000 bytes, under the kernel's
    // 512 000; 256 000 more reach it, and the kernel's window passes.
    let seq = data_in(&mut m, 50 * MS, 5001, 128, None);
    let mut p = ack_pkt(seq, 4000);
    assert_eq!(
        m.on_packet(50 * MS, Direction::Outbound, &mut p),
        Verdict::Rewritten {
            old: 4000,
            new: 3000
        }
    );
    let seq = data_in(&mut m, 50 * MS, seq, 256, None);
    let mut p = ack_pkt(seq, 4000);
    assert_eq!(
        m.on_packet(50 * MS, Direction::Outbound, &mut p),
        Verdict::Pass
    );
    let t = m.stats().transitions.last().unwrap();
    assert_eq!(t.reason, Reason::FallbackA1);
    assert_eq!(
        m.stats().predictions.last().unwrap().outcome,
        Some(polypath_m2ho::predict::Outcome::CancelledByA1)
    );
    // An unknown sub-6 target: the smallest sub-6 estimate. A mmWave target (B1): the
    // smallest sub-6 estimate too.
    m.on_link_event(60 * MS, &report(MeasEvent::A3, sub6(1), Some(sub6(9))));
    assert_eq!(m.shrink_bytes(), Some(128_000));
    // The command names the real target: cell 2.
    m.on_link_event(100 * MS, &command(1, 2, RadioType::NrFr1));
    assert_eq!(m.shrink_bytes(), Some(256_000));
}

#[test]
fn fallback_two_t2_returns_to_stable() {
    let mut m = Controller::new(Config::default());
    teach_burst(&mut m, 0, 1, 0, 100_000);
    m.on_link_event(MS, &report(MeasEvent::A2, mmw(7), None));
    assert_eq!(m.state(), State::Preparation);
    // A2 from mmWave: the target is sub-6; its estimate is the smallest sub-6 one.
    assert_eq!(m.shrink_bytes(), Some(100_000));
    // 2·T2 = 292.4 ms with the initial T2 of 146.2 ms.
    m.poll(MS + 292 * MS);
    assert_eq!(m.state(), State::Preparation);
    m.poll(MS + 293 * MS);
    assert_eq!(m.state(), State::Stable);
    assert_eq!(
        m.stats().transitions.last().unwrap().reason,
        Reason::FallbackExpired
    );
    assert_eq!(m.shrink_bytes(), None);
}

/// A handover end to end: prediction, command, execution, random access, suppression of
/// duplicate ACKs, and the two ways suppression ends.
#[test]
fn smoothing_suppresses_duplicate_acks_until_either_release() {
    for release in ["ack", "burst", "timeout"] {
        let mut m = Controller::new(Config::default());
        handshake(&mut m, false, Some(7), Some(7), false);
        // Data up to 5001 + 10·1000 received in order, the device acked all of it.
        for k in 0..10u32 {
            let mut d = Seg::new(false)
                .seq(5001 + k * 1000)
                .ack(101)
                .win(500)
                .data(1000)
                .build();
            m.on_packet(2 * MS, Direction::Inbound, &mut d);
        }
        let mut p = ack_pkt(15001, 4000);
        m.on_packet(3 * MS, Direction::Outbound, &mut p);
        m.on_link_event(10 * MS, &report(MeasEvent::A3, sub6(1), Some(sub6(2))));
        m.on_link_event(150 * MS, &command(1, 2, RadioType::NrFr1));
        m.on_link_event(
            180 * MS,
            &LinkEventKind::HandoverExecution {
                source: CellId(1),
                target: CellId(2),
            },
        );
        // Context release: the device got 17001.. but not 15001..17001.
        let mut d = Seg::new(false)
            .seq(17001)
            .ack(101)
            .win(500)
            .data(1000)
            .build();
        m.on_packet(181 * MS, Direction::Inbound, &mut d);
        m.on_link_event(
            207 * MS,
            &LinkEventKind::RandomAccessComplete { cell: CellId(2) },
        );
        assert_eq!(m.state(), State::Smoothing);
        // The first ACK for 15001 after data beyond the hole is a duplicate: dropped.
        let mut p = ack_pkt(15001, 4000);
        assert_eq!(
            m.on_packet(208 * MS, Direction::Outbound, &mut p),
            Verdict::Drop
        );
        let mut p = ack_pkt(15001, 4000);
        assert_eq!(
            m.on_packet(209 * MS, Direction::Outbound, &mut p),
            Verdict::Drop
        );
        match release {
            "ack" => {
                // The target redelivers the gap: the ACK now covers 18001, beyond the
                // highest sequence number before the handover (18001 is its end: seq_gt
                // needs more).
                let mut d = Seg::new(false)
                    .seq(15001)
                    .ack(101)
                    .win(500)
                    .data(2000)
                    .build();
                m.on_packet(210 * MS, Direction::Inbound, &mut d);
                let mut d = Seg::new(false)
                    .seq(18001)
                    .ack(101)
                    .win(500)
                    .data(1000)
                    .build();
                m.on_packet(210 * MS, Direction::Inbound, &mut d);
                let mut p = ack_pkt(19001, 4000);
                assert!(matches!(
                    m.on_packet(211 * MS, Direction::Outbound, &mut p),
                    Verdict::Pass | Verdict::Rewritten { .. }
                ));
                assert_eq!(m.state(), State::Stable);
                assert_eq!(
                    m.stats().transitions.last().unwrap().reason,
                    Reason::AckBeyondPreHandover
                );
                assert_eq!(m.stats().suppression.released_by_ack, 1);
            }
            "burst" => {
                // A burst on another cell changes nothing; the target's first burst ends it.
                m.on_link_event(210 * MS, &rb(1, 1000, 106, 10_000));
                m.on_link_event(210 * MS, &rb(1, 1001, 5, 500));
                m.on_link_event(210 * MS, &rb(1, 1002, 0, 0));
                assert_eq!(m.state(), State::Smoothing);
                m.on_link_event(211 * MS, &rb(2, 2000, 106, 10_000));
                m.on_link_event(211 * MS, &rb(2, 2001, 5, 500));
                assert_eq!(m.state(), State::Smoothing);
                m.on_link_event(211 * MS, &rb(2, 2002, 0, 0));
                assert_eq!(m.state(), State::Stable);
                assert_eq!(
                    m.stats().transitions.last().unwrap().reason,
                    Reason::FirstBurstEnded
                );
                // That burst cleared what cell 1 forwarded: it says nothing of cell 2's
                // buffer. Cell 1's burst and cell 2's next one are learnt.
                let per_cell = &m.stats().buffers.per_cell;
                assert_eq!(per_cell.get(&CellId(1)), Some(&10_500));
                assert_eq!(per_cell.get(&CellId(2)), None);
                m.on_link_event(230 * MS, &rb(2, 2100, 106, 8_000));
                m.on_link_event(230 * MS, &rb(2, 2101, 5, 500));
                m.on_link_event(230 * MS, &rb(2, 2102, 0, 0));
                assert_eq!(m.stats().buffers.per_cell.get(&CellId(2)), Some(&8_500));
                // Duplicates pass again.
                let mut p = ack_pkt(15001, 4000);
                assert_eq!(
                    m.on_packet(212 * MS, Direction::Outbound, &mut p),
                    Verdict::Pass
                );
            }
            _ => {
                m.poll(207 * MS + 200 * MS);
                assert_eq!(m.state(), State::Stable);
                assert_eq!(
                    m.stats().transitions.last().unwrap().reason,
                    Reason::SuppressionTimeout
                );
            }
        }
        let s = m.stats();
        assert_eq!(s.suppression.acks_suppressed, 2);
        let h = s.handovers.last().unwrap();
        assert!(h.predicted && h.commanded);
        assert_eq!(h.earliness_ns, Some(170 * MS));
        assert_eq!(h.command_earliness_ns, Some(30 * MS));
        assert_eq!(s.t2_ns, (146_200_000 + 140 * MS) / 2);
    }
}

/// The first burst after a commanded handover clears the forwarded data: learnt from only
/// when `learn_from_forwarded_burst` asks for it (the paper's "in every burst").
#[test]
fn the_forwarded_burst_teaches_the_buffer_only_on_request() {
    for learn in [false, true] {
        let mut m = Controller::new(Config {
            learn_from_forwarded_burst: learn,
            ..Config::default()
        });
        m.on_link_event(MS, &command(1, 2, RadioType::NrFr1));
        m.on_link_event(
            30 * MS,
            &LinkEventKind::HandoverExecution {
                source: CellId(1),
                target: CellId(2),
            },
        );
        m.on_link_event(
            60 * MS,
            &LinkEventKind::RandomAccessComplete { cell: CellId(2) },
        );
        m.on_link_event(61 * MS, &rb(2, 200, 106, 300_000));
        m.on_link_event(61 * MS, &rb(2, 201, 5, 500));
        m.on_link_event(61 * MS, &rb(2, 202, 0, 0));
        let learnt = m.stats().buffers.per_cell.get(&CellId(2)).copied();
        assert_eq!(learnt, learn.then_some(300_500), "learn {learn}");
    }
}

/// Table 3's classification: a hole filled by a late original (older TSval) is reordering;
/// one filled by a retransmission (newer TSval) is a loss.
#[test]
fn duplicate_ack_events_are_classified_by_timestamps() {
    for (filler_tsval, reordering) in [(100u32, true), (300, false)] {
        let mut m = Controller::new(Config {
            suppress_dup_acks: false,
            ..Config::default()
        });
        handshake(&mut m, false, Some(7), Some(7), true);
        let mut d = Seg::new(false)
            .seq(5001)
            .ack(101)
            .win(500)
            .data(1000)
            .ts(100, 1)
            .build();
        m.on_packet(2 * MS, Direction::Inbound, &mut d);
        let mut p = Seg::new(true)
            .seq(101)
            .ack(6001)
            .win(4000)
            .ts(2, 100)
            .build();
        m.on_packet(3 * MS, Direction::Outbound, &mut p);
        // 6001..7001 missing; three segments beyond it, three duplicate ACKs.
        for k in 0..3u32 {
            let mut d = Seg::new(false)
                .seq(7001 + k * 1000)
                .ack(101)
                .win(500)
                .data(1000)
                .ts(200, 1)
                .build();
            m.on_packet(4 * MS, Direction::Inbound, &mut d);
            let mut p = Seg::new(true)
                .seq(101)
                .ack(6001)
                .win(4000)
                .ts(3, 200)
                .build();
            m.on_packet(5 * MS, Direction::Outbound, &mut p);
        }
        let mut d = Seg::new(false)
            .seq(6001)
            .ack(101)
            .win(500)
            .data(1000)
            .ts(filler_tsval, 1)
            .build();
        m.on_packet(6 * MS, Direction::Inbound, &mut d);
        let ev = m.stats().dup_ack_events.last().copied().unwrap();
        assert_eq!(ev.dup_acks, 3);
        assert!(ev.is_congestion_event());
        assert_eq!(ev.reordering, reordering);
        assert_eq!(m.stats().packets.dup_acks, 3);
    }
}

/// Sec. 4.5: after mmWave -> sub-6, windows follow Eq. 2 with c_est counted on the new
/// cell (until its first round trip there, with no buffer estimate to hold, the kernel's
/// window stands); back on mmWave, they are free.
#[test]
fn rate_control_follows_eq2_after_mmwave_to_sub6() {
    let mut m = Controller::new(Config {
        suppress_dup_acks: false,
        ..Config::default()
    });
    handshake(&mut m, false, Some(7), Some(7), true);
    let mut seq = 5001u32;
    let mut tsval = 10u32;
    // One round trip: the device sends TSval k at t, the data echoing it arrives 40 ms
    // later (RTT 40 ms) and then 60 ms later (RTT 60 ms, queueing).
    let mut t = 10 * MS;
    for (rtt_ms, segs) in [(40u64, 20u32), (60, 30), (60, 30)] {
        ts_ack(&mut m, t, tsval, seq);
        t += rtt_ms * MS;
        seq = data_in(&mut m, t, seq, segs, Some(tsval));
        tsval += 1;
    }
    // Not yet: no vertical handover to sub-6 happened.
    assert!(!m.rate_control_active());
    assert_eq!(ts_ack(&mut m, t, tsval, seq), Verdict::Pass);
    commanded_handover(&mut m, t, mmw(5), sub6(1));
    assert!(m.rate_control_active());
    t += 100 * MS;
    // The mmWave cell's bytes are forgotten; until a round trip on the sub-6 cell is
    // counted, Eq. 2 has no estimate, and with no budget to hold (no buffer estimate) the
    // kernel's window passes.
    let c = m.connections().iter().next().unwrap().1;
    assert_eq!(c.bytes_last_rtt, None);
    assert_eq!(ts_ack(&mut m, t, tsval, seq), Verdict::Pass);
    for _ in 0..2 {
        ts_ack(&mut m, t, tsval, seq);
        t += 60 * MS;
        seq = data_in(&mut m, t, seq, 30, Some(tsval));
        tsval += 1;
    }
    // c_est: the 30 000 bytes of the first full round trip on the sub-6 cell; RTT 60 ms,
    // minimum 40 ms: 2 · 30 000 · 40/60 = 40 000 bytes = 312.5 -> 313 units of 128.
    let c = m.connections().iter().next().unwrap().1;
    assert_eq!((c.rtt_min_ns, c.rtt_ns), (Some(40 * MS), Some(60 * MS)));
    assert_eq!(c.bytes_last_rtt, Some(30_000));
    assert_eq!(
        ts_ack(&mut m, t, tsval, seq),
        Verdict::Rewritten {
            old: 4000,
            new: 313
        }
    );
    // Horizontal sub-6 handovers keep it on; a handover to mmWave releases it.
    commanded_handover(&mut m, t, sub6(1), sub6(2));
    assert!(m.rate_control_active());
    commanded_handover(&mut m, t + 200 * MS, sub6(2), mmw(6));
    assert!(!m.rate_control_active());
    // Released, the window widens back to the kernel's with the data, as any window M2HO
    // sets does: nothing arrived, so the edge stays where Eq. 2 left it.
    t += 400 * MS;
    assert_eq!(
        ts_ack(&mut m, t, tsval, seq),
        Verdict::Rewritten {
            old: 4000,
            new: 313
        }
    );
    // 20 000 bytes arrive: the edge moves by twice them, 40 064 - 20 000 + 40 000 = 60 064
    // bytes from the new ACK -> 470 units.
    seq = data_in(&mut m, t, seq, 20, Some(tsval));
    assert_eq!(
        ts_ack(&mut m, t, tsval + 1, seq),
        Verdict::Rewritten {
            old: 4000,
            new: 470
        }
    );
    // Once the limit passes the kernel's window, its window passes, and stays passing.
    // (470 units are 60 160 bytes; each arrival adds its size: 500 segments, 560 160 bytes,
    // more than the kernel's 4000 units, 512 000.)
    seq = data_in(&mut m, t, seq, 500, Some(tsval + 1));
    assert_eq!(ts_ack(&mut m, t, tsval + 2, seq), Verdict::Pass);
    assert_eq!(ts_ack(&mut m, t + MS, tsval + 3, seq), Verdict::Pass);
    // Sub-6 to mmWave never turns it on.
    commanded_handover(&mut m, t + 200 * MS, mmw(6), sub6(3));
    assert!(m.rate_control_active());
}

/// Without `limit_widening`, the kernel's window passes as soon as rate control ends.
#[test]
fn without_limit_widening_a_released_window_passes_at_once() {
    let mut m = Controller::new(Config {
        suppress_dup_acks: false,
        limit_widening: false,
        ..Config::default()
    });
    handshake(&mut m, false, Some(7), Some(7), true);
    ts_ack(&mut m, 10 * MS, 10, 5001);
    let seq = data_in(&mut m, 50 * MS, 5001, 1, Some(10));
    commanded_handover(&mut m, 60 * MS, mmw(5), sub6(1));
    let (t, seq) = round_trips(&mut m, 200 * MS, 11..14, seq, 40, 10);
    assert!(matches!(
        ts_ack(&mut m, t, 14, seq),
        Verdict::Rewritten { .. }
    ));
    commanded_handover(&mut m, t, sub6(1), mmw(6));
    assert_eq!(ts_ack(&mut m, t + 200 * MS, 15, seq), Verdict::Pass);
}

/// Handovers without a report or command (radio link failure on mmWave, re-establishment
/// on sub-6) are counted as unpredicted and do not enter smoothing.
#[test]
fn radio_link_failure_is_an_unpredicted_handover() {
    let mut m = Controller::new(Config::default());
    m.on_link_event(0, &LinkEventKind::RandomAccessComplete { cell: CellId(5) });
    assert!(
        m.stats().handovers.is_empty(),
        "the first attach is no handover"
    );
    m.on_link_event(MS, &report(MeasEvent::A2, mmw(5), None));
    assert_eq!(m.state(), State::Preparation);
    m.on_link_event(
        5 * MS,
        &LinkEventKind::LinkDown {
            cell: Some(CellId(5)),
            reason: polypath_link::DownReason::NoCoverage,
        },
    );
    assert_eq!(m.state(), State::Stable);
    m.on_link_event(
        40 * MS,
        &LinkEventKind::RandomAccessComplete { cell: CellId(1) },
    );
    assert_eq!(m.state(), State::Stable);
    let h = m.stats().handovers.last().unwrap();
    assert!(!h.commanded && !h.predicted);
    assert_eq!(h.source, Some(CellId(5)));
}

/// `segs` in-order segments of 1000 bytes from `seq` at `t`, echoing `tsval` (none: no
/// timestamps); returns the next sequence number.
fn data_in(m: &mut Controller, t: u64, seq: u32, segs: u32, tsval: Option<u32>) -> u32 {
    let mut seq = seq;
    for _ in 0..segs {
        let mut d = Seg::new(false).seq(seq).ack(101).win(500).data(1000);
        if let Some(v) = tsval {
            d = d.ts(7, v);
        }
        m.on_packet(t, Direction::Inbound, &mut d.build());
        seq += 1000;
    }
    seq
}

/// An outbound ACK carrying TSval `ts` (the connection of `handshake` with timestamps).
fn ts_ack(m: &mut Controller, t: u64, ts: u32, ack: u32) -> Verdict {
    let mut p = Seg::new(true).seq(101).ack(ack).win(4000).ts(ts, 1).build();
    m.on_packet(t, Direction::Outbound, &mut p)
}

/// Round trips from `t`, one per TSval of `tsvals`: the device acknowledges `seq` with the
/// TSval, and `segs` segments echoing it arrive `rtt_ms` later. Returns the time and the
/// next sequence number after the last.
fn round_trips(
    m: &mut Controller,
    t: u64,
    tsvals: std::ops::Range<u32>,
    seq: u32,
    rtt_ms: u64,
    segs: u32,
) -> (u64, u32) {
    let (mut t, mut seq) = (t, seq);
    for ts in tsvals {
        ts_ack(m, t, ts, seq);
        t += rtt_ms * MS;
        seq = data_in(m, t, seq, segs, Some(ts));
    }
    (t, seq)
}

/// A commanded handover from `from` to `to` at `t`: a measurement naming both cells'
/// types, the command, execution 30 ms later, random access 60 ms later.
fn commanded_handover(m: &mut Controller, t: u64, from: (u32, RadioType), to: (u32, RadioType)) {
    m.on_link_event(
        t,
        &LinkEventKind::Measurement {
            serving: Some(CellId(from.0)),
            cells: vec![meas(from.0, from.1), meas(to.0, to.1)],
        },
    );
    m.on_link_event(t, &command(from.0, to.0, to.1));
    m.on_link_event(
        t + 30 * MS,
        &LinkEventKind::HandoverExecution {
            source: CellId(from.0),
            target: CellId(to.0),
        },
    );
    m.on_link_event(
        t + 60 * MS,
        &LinkEventKind::RandomAccessComplete { cell: CellId(to.0) },
    );
}

/// Sec. 4.3 and 4.5 joined: after a predicted mmWave -> sub-6 handover, the window stays at
/// the target's buffer estimate until Eq. 2 has counted a round trip on the new cell;
/// within rate control, a later handover holds the smaller of the source cell's Eq. 2
/// window and the target's budget.
#[test]
fn rate_control_holds_the_handover_budget_until_its_first_round_trip() {
    let mut m = Controller::new(Config {
        suppress_dup_acks: false,
        ..Config::default()
    });
    handshake(&mut m, false, Some(7), Some(7), true);
    teach_burst(&mut m, MS, 1, 100, 100_000);
    // RTT 40 ms on the mmWave cell.
    assert_eq!(ts_ack(&mut m, 10 * MS, 10, 5001), Verdict::Pass);
    let seq = data_in(&mut m, 50 * MS, 5001, 20, Some(10));
    // A2 on mmWave: predicted, the budget is the sub-6 estimate.
    m.on_link_event(60 * MS, &report(MeasEvent::A2, mmw(5), None));
    assert_eq!(m.shrink_bytes(), Some(100_000));
    commanded_handover(&mut m, 100 * MS, mmw(5), sub6(1));
    assert!(m.rate_control_active());
    assert_eq!(m.state(), State::Stable);
    let c = m.connections().iter().next().unwrap().1;
    assert_eq!((c.bytes_last_rtt, c.held_rwnd), (None, Some(100_000)));
    // 100 000 bytes = 781.25 -> 782 units of 128, not the kernel's 4000.
    assert_eq!(
        ts_ack(&mut m, 200 * MS, 11, seq),
        Verdict::Rewritten {
            old: 4000,
            new: 782
        }
    );
    // Two round trips at 60 ms on the sub-6 cell: Eq. 2 takes over (2 · 30 000 · 40/60).
    let (t, seq) = round_trips(&mut m, 200 * MS, 11..13, seq, 60, 30);
    assert_eq!(
        ts_ack(&mut m, t, 13, seq),
        Verdict::Rewritten {
            old: 4000,
            new: 313
        }
    );
    // An unpredicted sub-6 -> sub-6 handover (the command alone sets the budget: the
    // smallest sub-6 estimate, 100 000): the source's 40 000 is the smaller.
    commanded_handover(&mut m, t, sub6(1), sub6(2));
    let c = m.connections().iter().next().unwrap().1;
    assert_eq!(c.held_rwnd, Some(40_000));
    assert_eq!(
        ts_ack(&mut m, t + 100 * MS, 14, seq),
        Verdict::Rewritten {
            old: 4000,
            new: 313
        }
    );
    // Back on mmWave nothing is held: the window widens back to the kernel's with the data
    // (nothing arrived, so it stays).
    commanded_handover(&mut m, t + 200 * MS, sub6(2), mmw(6));
    assert!(!m.rate_control_active());
    let c = m.connections().iter().next().unwrap().1;
    assert_eq!(c.held_rwnd, None);
    assert_eq!(
        ts_ack(&mut m, t + 300 * MS, 15, seq),
        Verdict::Rewritten {
            old: 4000,
            new: 313
        }
    );
}

/// A window budget never puts the right edge below data the device already holds beyond a
/// hole: the sender could not retransmit into the hole.
#[test]
fn a_budget_never_ends_the_window_below_data_held_beyond_a_hole() {
    let mut m = clamp(10_000);
    handshake(&mut m, false, Some(7), Some(7), false);
    let next = data_in(&mut m, 10 * MS, 5001, 1, None);
    assert_eq!(next, 6001);
    // 6001..7001 lost; 20 segments beyond it arrive: the device holds up to 27 001.
    data_in(&mut m, 20 * MS, 7001, 20, None);
    // 21 000 bytes held beyond the ACK point + the 2896-byte floor = 23 896 -> 187 units.
    let mut p = ack_pkt(6001, 4000);
    assert_eq!(
        m.on_packet(30 * MS, Direction::Outbound, &mut p),
        Verdict::Rewritten {
            old: 4000,
            new: 187
        }
    );
    // The hole filled: the budget alone, 10 000, reached as data arrives. The last edge
    // was 6001 + 187 · 128 = 29 937; one segment arrived since, so the edge may move 2000
    // beyond it: 29 937 + 2000 - 27 001 = 4936 -> 39 units.
    data_in(&mut m, 40 * MS, 6001, 1, None);
    let mut p = ack_pkt(27_001, 4000);
    assert_eq!(
        m.on_packet(50 * MS, Direction::Outbound, &mut p),
        Verdict::Rewritten { old: 4000, new: 39 }
    );
    // Three segments: (27 001 + 39 · 128) - 30 001 + 6000 = 7992 -> 63 units.
    data_in(&mut m, 60 * MS, 27_001, 3, None);
    let mut p = ack_pkt(30_001, 4000);
    assert_eq!(
        m.on_packet(70 * MS, Direction::Outbound, &mut p),
        Verdict::Rewritten { old: 4000, new: 63 }
    );
    // Three more: (30 001 + 63 · 128) - 33 001 + 6000 = 11 064, beyond the budget: 79.
    data_in(&mut m, 80 * MS, 30_001, 3, None);
    let mut p = ack_pkt(33_001, 4000);
    assert_eq!(
        m.on_packet(90 * MS, Direction::Outbound, &mut p),
        Verdict::Rewritten { old: 4000, new: 79 }
    );
}

/// c_est (Sec. 4.5) counts the bytes of the round trip that ends at each arrival, sliding:
/// not the bytes of consecutive round trips, which step once a round trip and with them
/// Eq. 2's window.
#[test]
fn c_est_is_the_round_trip_up_to_each_arrival() {
    let mut m = clamp(10_000_000);
    handshake(&mut m, false, Some(7), Some(7), true);
    // RTT 60 ms.
    ts_ack(&mut m, 0, 10, 5001);
    let mut seq = data_in(&mut m, 60 * MS, 5001, 1, Some(10));
    let est = |m: &Controller| m.connections().iter().next().unwrap().1.bytes_last_rtt;
    // A segment every 10 ms: none counted until a whole round trip has passed since the
    // first (at 60 ms), then the six of the 60 ms up to each arrival.
    for k in 1..=5u64 {
        seq = data_in(&mut m, (60 + 10 * k) * MS, seq, 1, None);
        assert_eq!(est(&m), None, "{k}");
    }
    for k in 6..=12u64 {
        seq = data_in(&mut m, (60 + 10 * k) * MS, seq, 1, None);
        assert_eq!(est(&m), Some(6000), "{k}");
    }
    // After a 40 ms pause, the round trip up to 220 ms holds the arrivals at 170, 180 and
    // 220 ms.
    seq = data_in(&mut m, 220 * MS, seq, 1, None);
    assert_eq!(est(&m), Some(3000));
    // A burst of ten at 230 ms counts whole; 60 ms later it has left the round trip.
    seq = data_in(&mut m, 230 * MS, seq, 10, None);
    assert_eq!(est(&m), Some(12_000));
    data_in(&mut m, 290 * MS, seq, 1, None);
    assert_eq!(est(&m), Some(1000));
}

/// Under Eq. 2 the window widens by at most the bytes that arrived since the last ACK
/// (its edge by twice those): the sender gets two segments for each one delivered, even
/// when c_est, which counts the whole last round trip, would offer more at once.
#[test]
fn eq2_widens_the_window_with_the_arrivals() {
    // limit_widening off, the window is Eq. 2's at once: 24 000 -> 188 units.
    for (limit_widening, widened) in [(true, 173), (false, 188)] {
        let mut m = Controller::new(Config {
            suppress_dup_acks: false,
            limit_widening,
            ..Config::default()
        });
        handshake(&mut m, false, Some(7), Some(7), true);
        // RTT 40 ms on mmWave, then a vertical handover to sub-6 (rate control, no budget).
        ts_ack(&mut m, 10 * MS, 10, 5001);
        let seq = data_in(&mut m, 50 * MS, 5001, 1, Some(10));
        commanded_handover(&mut m, 60 * MS, mmw(5), sub6(1));
        assert!(m.rate_control_active());
        // Ten segments every 40 ms: c_est 10 000 at the minimum RTT, Eq. 2's 20 000 -> 157.
        let (t, mut seq) = round_trips(&mut m, 200 * MS, 11..14, seq, 40, 10);
        assert_eq!(
            ts_ack(&mut m, t, 14, seq),
            Verdict::Rewritten {
                old: 4000,
                new: 157
            }
        );
        // Two segments 5 ms later: the round trip up to them holds 12 000 bytes, so Eq. 2
        // asks for 24 000. The window may grow by the 2000 that arrived: 20 096 - 2000 +
        // 4000 = 22 096 -> 173 units.
        seq = data_in(&mut m, t + 5 * MS, seq, 2, None);
        let expected = Verdict::Rewritten {
            old: 4000,
            new: widened,
        };
        assert_eq!(ts_ack(&mut m, t + 5 * MS, 15, seq), expected);
        // A duplicate ACK (nothing arrived) moves the edge nowhere: the same window.
        assert_eq!(ts_ack(&mut m, t + 6 * MS, 16, seq), expected);
    }
}

/// Only new data gives the device an RTT sample (Karn's rule): a segment filling a hole
/// echoes the TSval of the last ACK the sender had, as old as the stall before it.
#[test]
fn segments_filling_a_hole_give_no_rtt_sample() {
    let mut m = clamp(1_000_000);
    handshake(&mut m, false, Some(7), Some(7), true);
    ts_ack(&mut m, 10 * MS, 10, 5001);
    data_in(&mut m, 50 * MS, 5001, 1, Some(10));
    // 6001..7001 lost, the next segment arrives: a duplicate ACK with TSval 11.
    data_in(&mut m, 55 * MS, 7001, 1, Some(10));
    ts_ack(&mut m, 60 * MS, 11, 6001);
    // The retransmission fills the hole a second later, echoing 11: no 1000 ms sample.
    data_in(&mut m, 1060 * MS, 6001, 1, Some(11));
    let c = m.connections().iter().next().unwrap().1;
    assert_eq!((c.rtt_ns, c.rtt_min_ns), (Some(40 * MS), Some(40 * MS)));
    // New data echoing a fresh TSval does.
    ts_ack(&mut m, 1070 * MS, 12, 8001);
    data_in(&mut m, 1120 * MS, 8001, 1, Some(12));
    let c = m.connections().iter().next().unwrap().1;
    assert_eq!(c.rtt_ns, Some(50 * MS));
}

/// A sender stuck behind a retracted window gets a window update (`reopen_stalled`, not
/// from the paper): the shrink before a handover moved the right edge below what the
/// sender had been offered, data stopped (the tail beyond the new edge lost), and no ACK
/// would ever widen the window again. Not in the preparation state; once per stall; the
/// update is the last ACK with the kernel's window, its checksum verifies, and it passes
/// the controller unmodified when the daemon sees it leave.
#[test]
fn a_sender_stalled_behind_a_retracted_window_gets_a_window_update() {
    let mut m = Controller::new(Config {
        suppress_dup_acks: false,
        ..Config::default()
    });
    handshake(&mut m, false, Some(7), Some(7), true);
    teach_burst(&mut m, MS, 2, 100, 100_000);
    // RTT 40 ms; the kernel offers 4000 units of 128 bytes beyond 25 001.
    assert_eq!(ts_ack(&mut m, 10 * MS, 10, 5001), Verdict::Pass);
    let seq = data_in(&mut m, 50 * MS, 5001, 20, Some(10));
    assert_eq!(ts_ack(&mut m, 51 * MS, 11, seq), Verdict::Pass);
    // A3 towards cell 2: the window shrinks to its 100 000 bytes (782 units), below the
    // edge offered before.
    m.on_link_event(60 * MS, &report(MeasEvent::A3, sub6(1), Some(sub6(2))));
    assert_eq!(m.state(), State::Preparation);
    assert_eq!(
        ts_ack(&mut m, 70 * MS, 12, seq),
        Verdict::Rewritten {
            old: 4000,
            new: 782
        }
    );
    // No data for 250 ms, but the preparation state's shrink is meant to stop it.
    m.poll(300 * MS);
    assert_eq!(m.state(), State::Preparation);
    assert!(m.take_window_updates().is_empty());
    // The handover completes (stable: no budget; random access at 380 ms), and still no
    // data: 150 ms later (three minimum round trips are 120 ms, reopen_min_ms 150 ms) the
    // window reopens.
    commanded_handover(&mut m, 320 * MS, sub6(1), sub6(2));
    assert_eq!(m.state(), State::Stable);
    m.poll(529 * MS);
    assert!(m.take_window_updates().is_empty());
    m.poll(530 * MS);
    let updates = m.take_window_updates();
    assert_eq!(updates.len(), 1);
    let p = &updates[0];
    let seg = packet::parse(p).unwrap();
    assert_eq!((seg.ack, seg.window), (seq, 4000));
    assert!(packet::tcp_checksum_ok(p, &seg));
    assert_eq!(reference_checksum(p).0, reference_checksum(p).1);
    // Once per stall.
    m.poll(700 * MS);
    assert!(m.take_window_updates().is_empty());
    assert_eq!(m.stats().packets.windows_reopened, 1);
    // The update leaves through the daemon's queue: passed as it is.
    let mut out = p.clone();
    assert_eq!(
        m.on_packet(701 * MS, Direction::Outbound, &mut out),
        Verdict::Pass
    );
    // Data again, ACKed with the kernel's window: nothing retracted, no update however
    // long the next silence.
    let seq = data_in(&mut m, 750 * MS, seq, 5, Some(12));
    assert_eq!(ts_ack(&mut m, 751 * MS, 13, seq), Verdict::Pass);
    m.poll(3000 * MS);
    assert!(m.take_window_updates().is_empty());
}

/// Within a window budget (here the smoothing state's, below a clamp), the first update
/// reaches just beyond where the sender's flight likely ended (a round trip's bytes beyond
/// the data held), the second, a stall later, beyond the highest edge ever offered; none
/// after that, and the budget rules the ACKs that follow.
#[test]
fn window_updates_reach_the_flight_then_the_old_edge() {
    let mut m = Controller::new(Config {
        clamp_rwnd_bytes: Some(64_000),
        ..Config::default()
    });
    handshake(&mut m, false, Some(7), Some(7), true);
    teach_burst(&mut m, MS, 2, 100, 20_000);
    // 64 000 bytes = 500 units; RTT 40 ms; 20 000 bytes a round trip.
    let clamped = Verdict::Rewritten {
        old: 4000,
        new: 500,
    };
    assert_eq!(ts_ack(&mut m, 10 * MS, 10, 5001), clamped);
    let seq = data_in(&mut m, 50 * MS, 5001, 20, Some(10));
    let seq = data_in(&mut m, 95 * MS, seq, 20, Some(10));
    assert_eq!(seq, 45_001);
    assert_eq!(ts_ack(&mut m, 96 * MS, 11, seq), clamped);
    // Predicted, then commanded: the budget (20 000, 157 units) retracts the edge from
    // 109 001 to 65 097; the handover leaves the smoothing state with the budget standing.
    m.on_link_event(100 * MS, &report(MeasEvent::A3, sub6(1), Some(sub6(2))));
    assert_eq!(
        ts_ack(&mut m, 105 * MS, 12, seq),
        Verdict::Rewritten {
            old: 4000,
            new: 157
        }
    );
    commanded_handover(&mut m, 110 * MS, sub6(1), sub6(2));
    assert_eq!(m.state(), State::Smoothing);
    // 150 ms without data since the random access at 170 ms (three round trips are 120
    // ms; reopen_min_ms is 150).
    m.poll(319 * MS);
    assert!(m.take_window_updates().is_empty());
    m.poll(320 * MS);
    let updates = m.take_window_updates();
    assert_eq!(updates.len(), 1);
    let seg = packet::parse(&updates[0]).unwrap();
    // A round trip's 20 000 bytes + the 2896-byte floor = 22 896 -> 178.9 -> 179 units.
    assert_eq!((seg.ack, seg.window), (seq, 179));
    assert!(packet::tcp_checksum_ok(&updates[0], &seg));
    // Still nothing 150 ms later: up to the old edge, 64 000 + 2896 -> 523 units.
    m.poll(469 * MS);
    assert!(m.take_window_updates().is_empty());
    m.poll(470 * MS);
    let updates = m.take_window_updates();
    assert_eq!(updates.len(), 1);
    assert_eq!(packet::parse(&updates[0]).unwrap().window, 523);
    // No third.
    m.poll(1000 * MS);
    assert!(m.take_window_updates().is_empty());
    assert_eq!(m.stats().packets.windows_reopened, 2);
    // Data again: the clamp rules (stable since the suppression's limit).
    let seq = data_in(&mut m, 1010 * MS, seq, 5, Some(12));
    assert_eq!(ts_ack(&mut m, 1011 * MS, 13, seq), clamped);
}

/// A window update that repeats the kernel's last window over a hole looks like a duplicate
/// ACK to the controller's own bookkeeping; leaving through the daemon's queue in the
/// smoothing state, it is not taken for one and suppressed.
#[test]
fn a_window_update_is_never_suppressed_as_a_duplicate_ack() {
    let mut m = Controller::new(Config::default());
    handshake(&mut m, false, Some(7), Some(7), true);
    teach_burst(&mut m, MS, 2, 100, 100_000);
    assert_eq!(ts_ack(&mut m, 10 * MS, 10, 5001), Verdict::Pass);
    let seq = data_in(&mut m, 50 * MS, 5001, 20, Some(10));
    assert_eq!(ts_ack(&mut m, 51 * MS, 11, seq), Verdict::Pass);
    // 25 001..26 001 lost; 20 segments beyond it held.
    data_in(&mut m, 60 * MS, seq + 1000, 20, Some(11));
    m.on_link_event(70 * MS, &report(MeasEvent::A3, sub6(1), Some(sub6(2))));
    assert_eq!(
        ts_ack(&mut m, 75 * MS, 12, seq),
        Verdict::Rewritten {
            old: 4000,
            new: 782
        }
    );
    commanded_handover(&mut m, 80 * MS, sub6(1), sub6(2));
    assert_eq!(m.state(), State::Smoothing);
    // 150 ms after the random access (140 ms): back to the kernel's 4000 units.
    m.poll(290 * MS);
    let updates = m.take_window_updates();
    assert_eq!(updates.len(), 1);
    let mut p = updates[0].clone();
    assert_eq!(packet::parse(&p).unwrap().window, 4000);
    assert_eq!(m.state(), State::Smoothing);
    assert_eq!(
        m.on_packet(291 * MS, Direction::Outbound, &mut p),
        Verdict::Pass
    );
    assert_eq!(m.stats().suppression.acks_suppressed, 0);
    // The kernel's own repeat of it is a duplicate ACK, suppressed as before.
    assert_eq!(ts_ack(&mut m, 292 * MS, 12, seq), Verdict::Drop);
}
