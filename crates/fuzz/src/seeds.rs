//! Seed inputs for every target, and the pseudo-random mutations the short test run
//! applies to them. `make fuzz` also writes the seeds into each cargo-fuzz corpus
//! (`cargo run -p polypath-fuzz --example write_corpus`), so coverage-guided runs start
//! from meaningful inputs rather than from nothing.

use polypath_quic::packet::{self, LongType, VERSION_1};
use polypath_quic::testing::tls_configs;
use polypath_quic::transport_parameters::TransportParameters;
use polypath_quic::{ClientConfig, ConnectionId, Endpoint, EndpointConfig, PathId};
use rand::{Rng, SeedableRng};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The seed inputs of the target called `name` (empty for an unknown name).
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        "frames" => frame_seeds(),
        "packet_header" => packet_seeds()
            .into_iter()
            .map(|p| [vec![8], p].concat())
            .collect(),
        "transport_parameters" => vec![transport_parameters_seed()],
        "retry_token" => retry_token_seeds(),
        "retry_integrity" => vec![retry_integrity_seed()],
        "packet_unprotect" => packet_unprotect_seeds(),
        "link_events" => vec![LINK_EVENTS.as_bytes().to_vec()],
        "scenario" => SCENARIOS.iter().map(|s| s.as_bytes().to_vec()).collect(),
        "traces" => trace_seeds(),
        "transfer_request" => vec![
            b"PPT1U\0\0\0\0\0\x10\0\0".to_vec(),
            b"PPT1D\xff\xff\xff\xff\xff\xff\xff\xff".to_vec(),
        ],
        "endpoint_pair" => endpoint_pair_seeds(),
        "gw_control" => gw_control_seeds(),
        "gw_tunnel" => gw_tunnel_seeds(),
        "m2ho_packet" => m2ho_packet_seeds(),
        _ => Vec::new(),
    }
}

/// Applies one to four random mutations: bit flips, interesting bytes, truncation,
/// insertion, deletion, duplication of a slice, random bytes.
pub fn mutate(rng: &mut impl Rng, input: &mut Vec<u8>) {
    for _ in 0..rng.random_range(1..=4) {
        let len = input.len();
        match rng.random_range(0..7) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                input[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.random_range(0..len);
                const INTERESTING: [u8; 8] = [0x00, 0x3f, 0x40, 0x7f, 0x80, 0xbf, 0xc0, 0xff];
                input[i] = INTERESTING[rng.random_range(0..INTERESTING.len())];
            }
            2 if len > 0 => input.truncate(rng.random_range(0..len)),
            3 => {
                let i = rng.random_range(0..=len);
                input.insert(i, rng.random());
            }
            4 if len > 0 => {
                input.remove(rng.random_range(0..len));
            }
            5 if len > 1 => {
                let a = rng.random_range(0..len);
                let b = rng.random_range(a..len);
                let copy = input[a..=b].to_vec();
                let at = rng.random_range(0..=input.len());
                input.splice(at..at, copy);
            }
            _ => {
                let i = rng.random_range(0..=len);
                let mut extra = vec![0u8; rng.random_range(0..8)];
                rng.fill_bytes(&mut extra);
                input.splice(i..i, extra);
            }
        }
    }
}

fn unhex(s: &str) -> Vec<u8> {
    let s: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    s.chunks(2)
        .filter_map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok())
        .collect()
}

/// One payload with a wide mix of frame types, then each frame alone.
fn frame_seeds() -> Vec<Vec<u8>> {
    let hex = [
        "0001",                                                     // PADDING, PING
        "02050001000100",                                           // ACK with ranges
        "033e020000010203",                                         // ACK_ECN
        "04010203",                                                 // RESET_STREAM
        "050102",                                                   // STOP_SENDING
        "060003616263",                                             // CRYPTO
        "070274ff",                                                 // NEW_TOKEN
        "0f0405020268",                                             // STREAM OFF|LEN|FIN
        "100511010212031304140515010216031700",                     // limits and blocked
        "18020108aaaaaaaaaaaaaaaa00000000000000000000000000000000", // NEW_CONNECTION_ID
        "1903",                                                     // RETIRE_CONNECTION_ID
        "1a0102030405060708",                                       // PATH_CHALLENGE
        "1b0102030405060708",                                       // PATH_RESPONSE
        "1c0a0802ff41",                                             // CONNECTION_CLOSE
        "1d070141",                                                 // APPLICATION_CLOSE
        "1e",                                                       // HANDSHAKE_DONE
        "31026869",                                                 // DATAGRAM with length
        "3e0105000000",                                             // PATH_ACK
        "7e750200",                                                 // PATH_ABANDON
        "7e760301",                                                 // PATH_STATUS_BACKUP
        "7e770302",                                                 // PATH_STATUS_AVAILABLE
        "7e7801030104bbbbbbbb00000000000000000000000000000000",     // PATH_NEW_CONNECTION_ID
        "7e790100",                                                 // PATH_RETIRE_CONNECTION_ID
        "7e7a05",                                                   // MAX_PATH_ID
        "7e7b05",                                                   // PATHS_BLOCKED
        "7e7c0102",                                                 // PATH_CIDS_BLOCKED
        "300102",                                                   // DATAGRAM to the end
    ];
    let mut seeds = vec![hex.iter().flat_map(|h| unhex(h)).collect::<Vec<u8>>()];
    seeds.extend(hex.iter().map(|h| unhex(h)));
    seeds
}

/// Long-header packets of each type, a coalesced datagram, Version Negotiation, Retry.
fn packet_seeds() -> Vec<Vec<u8>> {
    let dcid = ConnectionId::new(&[0xaa; 8]);
    let scid = ConnectionId::new(&[0xbb; 4]);
    let mut seeds = Vec::new();
    for ty in [LongType::Initial, LongType::ZeroRtt, LongType::Handshake] {
        let mut buf = Vec::new();
        let token: &[u8] = if ty == LongType::Initial { b"tok" } else { &[] };
        let layout = packet::write_long_header(&mut buf, ty, VERSION_1, &dcid, &scid, token, 9, 2);
        buf.resize(buf.len() + 30, 0x11);
        packet::set_long_header_length(&mut buf, &layout, 32);
        seeds.push(buf);
    }
    let mut coalesced = seeds[0].clone();
    coalesced.extend_from_slice(&seeds[2]);
    packet::write_short_header(&mut coalesced, true, false, &dcid, 77, 1);
    coalesced.resize(coalesced.len() + 24, 0x22);
    seeds.push(coalesced);
    let mut vn = Vec::new();
    packet::write_version_negotiation(&mut vn, 0, &scid, &dcid, &[VERSION_1], Some(0x1a2a3a4a));
    seeds.push(vn);
    let mut retry = Vec::new();
    packet::write_retry(&mut retry, 0, VERSION_1, &scid, &dcid, b"retry-token");
    retry.extend_from_slice(&[0x33; 16]);
    seeds.push(retry);
    seeds
}

fn transport_parameters_seed() -> Vec<u8> {
    let mut out = Vec::new();
    TransportParameters {
        initial_source_connection_id: Some(ConnectionId::new(&[1, 2, 3])),
        initial_max_data: 1 << 20,
        max_datagram_frame_size: Some(1200),
        initial_max_path_id: Some(PathId(4)),
        ..Default::default()
    }
    .encode(&mut out);
    out
}

/// Inputs of [`crate::retry_token`] whose arbitrary part is a genuine token, for the
/// address and time the input gives.
fn retry_token_seeds() -> Vec<Vec<u8>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut seeds = Vec::new();
    for (v6, now_us) in [(false, 5_000_000u64), (true, 1)] {
        let mut input = vec![u8::from(v6)];
        let ip = if v6 {
            input.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
            input.extend_from_slice(&[0; 12]);
            std::net::IpAddr::from([0x2001, 0x0db8, 0, 0, 0, 0, 0, 0])
        } else {
            input.extend_from_slice(&[10, 0, 0, 1]);
            std::net::IpAddr::from([10, 0, 0, 1])
        };
        input.extend_from_slice(&5000u16.to_be_bytes());
        // The body takes the time as the next u64 shifted right by 8.
        input.extend_from_slice(&(now_us << 8).to_be_bytes());
        input.extend_from_slice(&30_000u16.to_be_bytes());
        let (odcid, scid) = (ConnectionId::new(&[7; 8]), ConnectionId::new(&[9; 8]));
        for cid in [&odcid, &scid] {
            input.push(cid.len() as u8);
            input.extend_from_slice(cid);
        }
        input.extend_from_slice(&[0x12, 0x34]);
        let token = crate::crypto::token_key().seal_retry_token(
            &mut rng,
            SocketAddr::new(ip, 5000),
            &odcid,
            &scid,
            Duration::from_micros(now_us),
        );
        input.extend_from_slice(&token);
        seeds.push(input);
    }
    seeds
}

/// The Retry of RFC 9001 appendix A.4, with its original Destination Connection ID.
fn retry_integrity_seed() -> Vec<u8> {
    let mut input = vec![8];
    input.extend_from_slice(&unhex("8394c8f03e515708"));
    input.extend_from_slice(&[0, 0]);
    input.extend_from_slice(&unhex(
        "ff000000010008f067a5502a4262b5746f6b656e04a265ba2eff4d829058fb3f0f2496ba",
    ));
    input
}

/// The first datagram of a real client (a decryptable Initial with a ClientHello), and
/// payloads to seal: the ClientHello CRYPTO frame of RFC 9001 appendix A.2, and frames.
fn packet_unprotect_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    let (client_tls, _) = tls_configs();
    let mut client = Endpoint::new(EndpointConfig::from_seed(9), None);
    let now = Instant::now();
    let server: SocketAddr = ([10, 0, 0, 2], 4433).into();
    if client
        .connect(
            now,
            ClientConfig::new(client_tls),
            ([10, 0, 0, 1], 5000).into(),
            server,
            "localhost",
        )
        .is_ok()
    {
        let mut buf = Vec::new();
        if let Some(t) = client.poll_transmit(now, &mut buf) {
            buf.truncate(t.size);
            seeds.push([vec![0], buf].concat());
        }
    }
    let crypto_frame = unhex(
        "060040f1010000ed0303ebf8fa56f12939b9584a3896472ec40bb863cfd3e86804fe3a47f06a2b69484c
         00000413011302010000c000000010000e00000b6578616d706c652e636f6dff01000100000a000800
         06001d0017001800100007000504616c706e000500050100000000003300260024001d00209370b2c9
         caa47fbabaf4559fedba753de171fa71f50f1ce15d43e994ec74d748002b0003020304000d0010000e
         0403050306030203080408050806002d00020101001c00024001003900320408ffffffffffffffff05
         048000ffff07048000ffff0801100104800075300901100f088394c8f03e51570806048000ffff",
    );
    for (mode, payload) in [(3u8, crypto_frame), (1, frame_seeds().swap_remove(0))] {
        let mut input = vec![mode, 8];
        input.extend_from_slice(&unhex("8394c8f03e515708"));
        input.push(0);
        input.extend_from_slice(&(2u64 << 8).to_be_bytes());
        input.extend_from_slice(&payload);
        seeds.push(input);
    }
    seeds
}

/// One line of every kind of link event, a feed line with `local`, and a bad line.
const LINK_EVENTS: &str = r#"{"t_ns":0,"ue":0,"iface":0,"event":{"measurement":{"serving":1,"cells":[{"cell":1,"rat":"nr_fr1","rsrp_dbm":-85.25,"rsrq_db":-10.8,"sinr_db":12.5}]}}}
{"t_ns":1,"ue":0,"iface":0,"event":{"rrc_event_entered":{"meas_id":1,"event":"A3","serving":1,"cell":2}},"local":"10.0.0.1"}
{"t_ns":2,"ue":0,"iface":0,"event":{"rrc_event_left":{"meas_id":1,"event":"A3","serving":1,"cell":null}}}
{"t_ns":1200000000,"ue":0,"iface":0,"event":{"handover_command":{"source":1,"target":2,"target_rat":"nr_fr1","direction":"horizontal","keeps_sn":false}}}
{"t_ns":3,"ue":0,"iface":1,"event":{"handover_execution":{"source":1,"target":2}}}
{"t_ns":4,"ue":0,"iface":1,"event":{"random_access_complete":{"cell":2}}}
{"t_ns":5,"ue":0,"iface":1,"event":{"rb_allocation":{"cell":2,"slot":9,"rbs":4,"total_rbs":273,"bytes":1500}}}
{"t_ns":6,"ue":0,"iface":1,"event":{"predicted_throughput":{"bps":1.5e8,"predictor":"lumos","horizon_ms":1000}}}

{"t_ns":7,"ue":0,"iface":1,"event":{"link_up":{"cell":2}},"local":"fd00::2"}
{"t_ns":5000000000,"ue":0,"iface":1,"event":{"link_down":{"cell":1,"reason":"no_coverage"}},"local":"10.2.0.2"}
{"t_ns":1,"ue":0,"iface":"zero","event":{"link_up":{"cell":2}}}
"#;

/// The bundled scenarios (their traces do not resolve from the fuzz target's directory).
const SCENARIOS: &[&str] = &[
    include_str!("../../../scenarios/backhaul-3000.toml"),
    include_str!("../../../scenarios/clarity-static.toml"),
    include_str!("../../../scenarios/coexistence-mixed.toml"),
    include_str!("../../../scenarios/driving-m2ho.toml"),
    include_str!("../../../scenarios/handover-two-gnb.toml"),
    include_str!("../../../scenarios/indoor-wifi-lifi.toml"),
    include_str!("../../../scenarios/mahimahi-lte.toml"),
    include_str!("../../../scenarios/nrdc-two-path.toml"),
    include_str!("../../../scenarios/two-hop-router.toml"),
];

fn trace_seeds() -> Vec<Vec<u8>> {
    [
        (0u8, 0u8, 0u8, "0\n0\n12\n12\n13\n40\n"),
        (1, 1, 0, "1.0\t10.0\t3.5\n2.0\t20.0\t4\n3 0.5 1e2\n"),
        (1, 2, 0, "1.0\t10.0\t3.5\n2.0\t20.0\t4\n"),
        (2, 1, 0x41, "DL_bitrate,UL\n\"100\",2\n,3\nNA,4\n12.5,1\n"),
        (2, 2, 0x42, "rate\n1\n-\n2e3\n"),
        // The crash `traces` found: 2e306 Mbit/s, an infinite rate before the limit.
        (2, 2, 0x62, "r)te\n-\n2e306\n\n-"),
    ]
    .iter()
    .map(|(f, a, b, t)| [vec![*f, *a, *b], t.as_bytes().to_vec()].concat())
    .collect()
}

/// A configuration byte, then operations: a plain run, a run with frames sent inside
/// protected packets, and runs with loss, reordering, spoofed sources and paths.
fn endpoint_pair_seeds() -> Vec<Vec<u8>> {
    let deliver_all = 31u8;
    let mut seeds = Vec::new();
    for flags in [0u8, 0x01, 0x03, 0x05, 0x13, 0x21, 0x23, 0x2b, 0xe1] {
        let mut s = vec![flags];
        s.extend_from_slice(&[
            deliver_all,
            15,
            deliver_all,
            15,
            deliver_all,
            15,
            deliver_all,
        ]);
        // Write on a stream, lose, reorder and corrupt some datagrams.
        s.extend_from_slice(&[20, 0x10, 0x00, 1, 0, 8, 10, 0, 11, 0, 0, 3, 0x44, 0]);
        s.extend_from_slice(&[deliver_all, 14, 50, deliver_all]);
        // A protected client packet with a PING and a PATH_CHALLENGE, from a new address.
        let payload = unhex("011a0102030405060708");
        s.extend_from_slice(&[18, 3]);
        s.extend_from_slice(&payload);
        s.extend_from_slice(&[0, 0, 3, 0]);
        // Open a path, send a datagram, update keys, close.
        s.extend_from_slice(&[24, 1, 0, deliver_all, 15, deliver_all, 23, 0, 200, 0]);
        s.extend_from_slice(&[26, 0, deliver_all, 25, 3, 0, deliver_all, 27, 0, 15, 15]);
        seeds.push(s);
    }
    let frames = frame_seeds().swap_remove(0);
    let mut s = vec![0x21, 18, (frames.len() / 4) as u8];
    s.extend_from_slice(&frames[..frames.len() / 4 * 4]);
    s.extend_from_slice(&[0, 0, 0, deliver_all, 15]);
    seeds.push(s);
    seeds
}

/// Control streams: a hello and a welcome carrying a policy with classes, fed in 7-byte
/// chunks (the first byte), and a steer message.
fn gw_control_seeds() -> Vec<Vec<u8>> {
    use polypath_gateway::control::{Control, InterfaceInfo, VERSION};
    let hello = Control::Hello {
        version: VERSION,
        client: "train-7".into(),
        token: "s3cret".into(),
        interfaces: vec![InterfaceInfo {
            name: "eth0".into(),
            ip: std::net::IpAddr::from([10, 0, 1, 1]),
            path_id: Some(0),
        }],
    };
    let welcome = Control::Welcome {
        session: "00000000deadbeef".into(),
        tunnel_ip: std::net::IpAddr::from([10, 200, 1, 1]),
        gateway_ip: std::net::IpAddr::from([10, 200, 0, 1]),
        routes: vec!["10.99.0.0/24".into()],
        mtu: 1380,
        pmf_port: 4434,
        relay_port: 4435,
        policy: r#"{"policy_num":"UC03","allowed_interfaces":[{"name":"eth0","priority":2},{"name":"wlan0","priority":1}],"traffic_requirements":{"delay":1},"classes":[{"name":"voice","match":{"protocol":["udp"],"dst_ports":["5000-5010"],"dscp":[46]},"mode":"duplicate"}]}"#.into(),
        policy_name: "c.json".into(),
    };
    let steer = Control::Steer {
        scheduler: serde_json::json!({"low_latency": {"mode": "failover", "allowed_paths": [{"path_id": 1, "priority": 1}]}}),
        reason: "delay".into(),
    };
    let stream = |msgs: &[&Control]| {
        let mut v = vec![7u8];
        for m in msgs {
            v.extend_from_slice(&m.encode());
        }
        v
    };
    vec![stream(&[&hello, &steer]), stream(&[&welcome])]
}

/// Tunnel datagrams: an IPv4 UDP packet in context 0 and 2, an IPv6 one, and a probe.
fn gw_tunnel_seeds() -> Vec<Vec<u8>> {
    use polypath_gateway::framing;
    use polypath_gateway::pmf::{Kind, Probe};
    let mut v4 = vec![0u8; 48];
    v4[0] = 0x45;
    v4[2..4].copy_from_slice(&48u16.to_be_bytes());
    v4[6] = 0x40;
    v4[8] = 64;
    v4[9] = 17;
    v4[12..16].copy_from_slice(&[10, 200, 1, 2]);
    v4[16..20].copy_from_slice(&[10, 99, 0, 10]);
    let mut v6 = vec![0u8; 60];
    v6[0] = 0x60;
    v6[4..6].copy_from_slice(&20u16.to_be_bytes());
    v6[6] = 6;
    let probe = Probe {
        kind: Kind::Answer,
        session: 0xdead_beef,
        iface: 1,
        seq: 9,
        t1: 1,
        t2: 2,
        t3: 3,
        extra: 0,
    };
    vec![
        framing::encode(&v4, None).to_vec(),
        framing::encode(&v4, Some(300)).to_vec(),
        framing::encode(&v6, None).to_vec(),
        probe.encode(0),
    ]
}

/// TCP segments as the M2HO shim sees them: an IPv4 SYN with MSS, SACK-permitted, window
/// scale and timestamps; an IPv4 ACK with timestamps and a SACK block; an IPv6 data segment
/// after a hop-by-hop header. Checksums are correct.
fn m2ho_packet_seeds() -> Vec<Vec<u8>> {
    use polypath_m2ho::checksum::{accumulate, finish};
    fn tcp(flags: u8, window: u16, options: &[u8], payload: usize) -> Vec<u8> {
        let hlen = 20 + options.len();
        let mut t = vec![0x13, 0x88, 0x00, 0x50, 0, 0, 0x03, 0xe8, 0, 0, 0x13, 0x89];
        t.push(((hlen / 4) as u8) << 4);
        t.push(flags);
        t.extend_from_slice(&window.to_be_bytes());
        t.extend_from_slice(&[0, 0, 0, 0]);
        t.extend_from_slice(options);
        t.extend((0..payload).map(|i| (i % 251) as u8));
        t
    }
    fn v4(mut t: Vec<u8>) -> Vec<u8> {
        let (src, dst) = ([10u8, 0, 0, 2], [10u8, 0, 0, 1]);
        let sum = accumulate(accumulate(accumulate(0, &src), &dst), &t) + 6 + t.len() as u64;
        t[16..18].copy_from_slice(&finish(sum).to_be_bytes());
        let total = (20 + t.len()) as u16;
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0];
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        let hsum = finish(accumulate(0, &p));
        p[10..12].copy_from_slice(&hsum.to_be_bytes());
        p.extend_from_slice(&t);
        p
    }
    fn v6_hop_by_hop(mut t: Vec<u8>) -> Vec<u8> {
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src[..2].copy_from_slice(&[0x20, 0x01]);
        dst[..2].copy_from_slice(&[0x20, 0x01]);
        src[15] = 2;
        dst[15] = 1;
        let sum = accumulate(accumulate(accumulate(0, &src), &dst), &t) + 6 + t.len() as u64;
        t[16..18].copy_from_slice(&finish(sum).to_be_bytes());
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&((8 + t.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 64]);
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(&[6, 0, 1, 4, 0, 0, 0, 0]);
        p.extend_from_slice(&t);
        p
    }
    let syn_opts = [
        2, 4, 0x05, 0xa8, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
    ];
    let ack_opts = [
        1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 7, 1, 1, 5, 10, 0, 0, 0x13, 0x89, 0, 0, 0x17, 0x71,
    ];
    vec![
        v4(tcp(0x02, 64240, &syn_opts, 0)),
        v4(tcp(0x10, 501, &ack_opts, 0)),
        v6_hop_by_hop(tcp(0x18, 501, &ack_opts[..12], 100)),
    ]
}
