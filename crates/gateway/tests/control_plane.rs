//! The server gateway's control plane against hand-made clients, in a network namespace of
//! the test's own (the test thread unshares one: it and the server's TUN device vanish with
//! the thread). Needs root; without it the tests say why and return.
//!
//! * A client with a bad token, or an unknown name, is refused, and nothing it sent before
//!   (tunnel datagrams) reaches the server's network; a client with the right token gets
//!   its address and policy, and the same datagrams arrive.
//! * Malformed control messages (garbage, a message of the wrong type, an over-long length,
//!   a steer with a bad scheduler configuration) end the session, with the reason in the
//!   CONNECTION_CLOSE and the server's counters.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use polypath_gateway::control::{self, Control, Decoder, InterfaceInfo};
use polypath_gateway::framing;
use polypath_gateway::server::{self, ServerOptions};
use polypath_io::{Connection, Endpoint};
use polypath_quic::ConnectionError;
use polypath_quic::crypto::{
    ServerVerification, client_config, self_signed_certificate, server_config,
};

const TOKEN: &str = "correct horse battery staple";

/// Runs `f` on a fresh thread inside a new network namespace with loopback up; `None`
/// (after saying why) when this process may not create one.
fn in_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/dev/net/tun").exists() {
        eprintln!("SKIPPED: needs root and /dev/net/tun (a network namespace and a TUN device)");
        return None;
    }
    let t = std::thread::spawn(move || {
        // SAFETY: unshare on this thread only; the namespace lives while the thread does.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        polypath_gateway::tun::ip(&["link", "set", "lo", "up"]).map_err(|e| e.to_string())?;
        Ok(f())
    });
    match t.join() {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            eprintln!("SKIPPED: cannot make a network namespace: {e}");
            None
        }
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// Writes the server's configuration and c1's policy into `dir`.
fn write_config(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("c1.json"),
        r#"{ "allowed_interfaces": [{ "name": "lo0", "ip": "127.0.0.2" }], "mode": "failover" }"#,
    )
    .unwrap();
    let config = dir.join("server.json");
    std::fs::write(
        &config,
        format!(
            r#"{{
  "listen": "127.0.0.1:4433",
  "pmf_port": 4434,
  "tun": "gwtest0",
  "gateway_ip": "10.200.0.1",
  "routes": ["10.200.0.1/32"],
  "clients": [
    {{ "name": "c1", "token": "{TOKEN}", "policy": "c1.json", "pool": "10.200.1.0/28" }}
  ]
}}"#
        ),
    )
    .unwrap();
    config
}

struct Tls {
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

fn tls() -> Tls {
    let cert = self_signed_certificate(&["localhost".into()]).unwrap();
    let pinned = cert.chain[0].clone();
    Tls {
        server: server_config(
            cert.chain,
            cert.key,
            vec![polypath_gateway::ALPN.to_vec()],
            false,
        )
        .unwrap(),
        client: client_config(
            vec![polypath_gateway::ALPN.to_vec()],
            ServerVerification::Pinned(pinned),
            false,
        )
        .unwrap(),
    }
}

/// A raw client connection from 127.0.0.2 to the server.
async fn connect(tls: &Tls) -> (Endpoint, Connection) {
    let local: SocketAddr = "127.0.0.2:0".parse().unwrap();
    let endpoint = Endpoint::client(&[local], polypath_quic::EndpointConfig::random()).unwrap();
    let mut config = polypath_quic::ClientConfig::new(tls.client.clone());
    config.transport = polypath_gateway::transport_config("cubic").unwrap();
    let mut tries = 0;
    loop {
        match endpoint
            .connect(
                config.clone(),
                "127.0.0.1:4433".parse().unwrap(),
                "localhost",
            )
            .await
        {
            Ok(c) => return (endpoint, c),
            Err(e) if tries < 50 => {
                tries += 1;
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("cannot reach the server: {e}"),
        }
    }
}

fn hello(name: &str, token: &str) -> Control {
    Control::Hello {
        version: control::VERSION,
        client: name.into(),
        token: token.into(),
        interfaces: vec![InterfaceInfo {
            name: "lo0".into(),
            ip: IpAddr::from([127, 0, 0, 2]),
            path_id: Some(0),
        }],
    }
}

/// A UDP packet from `src` to 10.200.0.1:9999 with `payload`.
fn udp_packet(src: [u8; 4], payload: &[u8]) -> Vec<u8> {
    let len = 28 + payload.len();
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&[10, 200, 0, 1]);
    // IPv4 header checksum.
    let mut sum = 0u32;
    for c in p[..20].chunks_exact(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p[20..22].copy_from_slice(&40000u16.to_be_bytes());
    p[22..24].copy_from_slice(&9999u16.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    // UDP checksum 0: none (IPv4).
    p[28..].copy_from_slice(payload);
    p
}

async fn read_reply(recv: &mut polypath_io::RecvStream) -> Option<Control> {
    let mut d = Decoder::default();
    loop {
        if let Ok(Some(m)) = d.next_message() {
            return Some(m);
        }
        match recv.read_chunk(65536).await {
            Ok(Some(c)) => d.push(&c),
            _ => return None,
        }
    }
}

fn close_code(e: &ConnectionError) -> Option<(u64, String)> {
    match e {
        ConnectionError::ApplicationClosed { code, reason } => Some((*code, reason.clone())),
        _ => None,
    }
}

#[test]
fn bad_credentials_get_nothing_and_good_ones_get_through() {
    let dir = std::env::temp_dir().join(format!("ppgw-auth-{}", std::process::id()));
    let config = write_config(&dir);
    let done = in_netns(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let tls = tls();
            let server = tokio::spawn(server::run(ServerOptions {
                config,
                tls: tls.server.clone(),
                status: None,
                cc: "cubic".into(),
            }));
            // The first connection waits for the server to listen.
            let (_e0, probe_conn) = connect(&tls).await;
            drop(probe_conn);
            // The sink in the server's network: 10.200.0.1 is the server's TUN address.
            let sink = tokio::net::UdpSocket::bind("10.200.0.1:9999")
                .await
                .unwrap();
            let mut got = vec![0u8; 2048];
            for (name, token, why) in [
                ("c1", "wrong token", "bad token"),
                ("stranger", TOKEN, "unknown client"),
            ] {
                let (_e, conn) = connect(&tls).await;
                // Tunnel datagrams before any hello: must not reach the sink.
                for k in 0..20u8 {
                    let p = udp_packet([10, 200, 1, 1], &[k; 32]);
                    conn.send_datagram(framing::encode(&p, None)).unwrap();
                }
                let (mut send, mut recv) = conn.open_bi().await.unwrap();
                send.write_all(&hello(name, token).encode()).await.unwrap();
                let reply = read_reply(&mut recv).await;
                assert_eq!(
                    reply,
                    Some(Control::Refused {
                        reason: "invalid credentials".into()
                    }),
                    "{why}"
                );
                let closed = conn.closed().await;
                let (code, reason) = close_code(&closed).unwrap_or_else(|| panic!("{closed}"));
                assert_eq!(code, control::CLOSE_REFUSED, "{why}");
                assert!(reason.contains(why), "{why}: {reason}");
                let r = tokio::time::timeout(Duration::from_millis(300), sink.recv(&mut got)).await;
                assert!(
                    r.is_err(),
                    "{why}: an unauthenticated client's packet got through"
                );
            }
            // The right token: welcome with the policy, and the packets arrive.
            let (_e, conn) = connect(&tls).await;
            let (mut send, mut recv) = conn.open_bi().await.unwrap();
            send.write_all(&hello("c1", TOKEN).encode()).await.unwrap();
            let reply = read_reply(&mut recv).await;
            let Some(Control::Welcome {
                tunnel_ip, policy, ..
            }) = reply
            else {
                panic!("no welcome: {reply:?}, {:?}", conn.close_reason());
            };
            assert_eq!(tunnel_ip, IpAddr::from([10, 200, 1, 1]));
            assert!(policy.contains("failover"));
            for k in 0..5u8 {
                let p = udp_packet([10, 200, 1, 1], &[k; 32]);
                conn.send_datagram(framing::encode(&p, None)).unwrap();
            }
            let n = tokio::time::timeout(Duration::from_secs(2), sink.recv(&mut got))
                .await
                .expect("an authenticated client's packet arrives")
                .unwrap();
            assert_eq!(n, 32);
            // A packet from outside the client's pool is dropped (anti-spoofing).
            let spoofed = udp_packet([10, 200, 9, 9], b"spoofed-spoofed-spoofed-spoofed!");
            conn.send_datagram(framing::encode(&spoofed, None)).unwrap();
            let mut seen_spoof = false;
            while let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(300), sink.recv(&mut got)).await
            {
                seen_spoof |= &got[..n] == b"spoofed-spoofed-spoofed-spoofed!";
            }
            assert!(!seen_spoof);
            server.abort();
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
    let _ = done;
}

#[test]
fn malformed_control_messages_end_the_session_with_a_reason() {
    let dir = std::env::temp_dir().join(format!("ppgw-malformed-{}", std::process::id()));
    let config = write_config(&dir);
    let done = in_netns(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let tls = tls();
            let server = tokio::spawn(server::run(ServerOptions {
                config,
                tls: tls.server.clone(),
                status: None,
                cc: "cubic".into(),
            }));
            let mut garbage_length = vec![0xff, 0xff, 0xff, 0xff];
            garbage_length.extend_from_slice(b"{}");
            let wrong_type = Control::Refused {
                reason: "I refuse you".into(),
            }
            .encode()
            .to_vec();
            let mut not_json = 5u32.to_be_bytes().to_vec();
            not_json.extend_from_slice(b"\x00\x01{{x");
            let bad_steer = Control::Steer {
                scheduler: serde_json::json!({"critical": {"mode": "teleport"}}),
                reason: "x".into(),
            }
            .encode()
            .to_vec();
            for (what, before, bytes, expect) in [
                ("an over-long length", false, garbage_length, "length"),
                (
                    "a message of the wrong type",
                    false,
                    wrong_type,
                    "expected hello, got refused",
                ),
                (
                    "bytes that are not JSON",
                    false,
                    not_json,
                    "malformed control message",
                ),
                ("a steer with an unknown mode", true, bad_steer, "steer"),
            ] {
                let (_e, conn) = connect(&tls).await;
                let (mut send, mut recv) = conn.open_bi().await.unwrap();
                if before {
                    send.write_all(&hello("c1", TOKEN).encode()).await.unwrap();
                    assert!(matches!(
                        read_reply(&mut recv).await,
                        Some(Control::Welcome { .. })
                    ));
                }
                send.write_all(&bytes).await.unwrap();
                let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed())
                    .await
                    .unwrap_or_else(|_| panic!("{what}: the session did not end"));
                let (code, reason) =
                    close_code(&closed).unwrap_or_else(|| panic!("{what}: {closed}"));
                assert_eq!(code, control::CLOSE_PROTOCOL, "{what}: {reason}");
                assert!(reason.contains(expect), "{what}: {reason}");
                eprintln!("{what}: closed with {code:#x} \"{reason}\"");
            }
            let _ = Bytes::new();
            server.abort();
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
    let _ = done;
}
