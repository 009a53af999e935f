//! The driver over real loopback UDP: streams, datagrams, paths, close, qlog.

use polypath_io::{Connection, Endpoint};
use polypath_quic::crypto::{
    ServerVerification, client_config, self_signed_certificate, server_config,
};
use polypath_quic::{ClientConfig, EndpointConfig, ServerConfig, TransportConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ALPN: &[u8] = b"polypath-io-test";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn transport(multipath: bool) -> Arc<TransportConfig> {
    Arc::new(TransportConfig {
        initial_max_path_id: multipath.then_some(4),
        scheduler: polypath_quic::sched::scheduler_by_name("rr").unwrap(),
        ..TransportConfig::default()
    })
}

/// A server endpoint on 127.0.0.1 and a client endpoint on `client_locals`.
fn pair(
    client_locals: &[&str],
    multipath: bool,
    qlog: Option<polypath_io::QlogDir>,
) -> (Endpoint, Endpoint, ClientConfig) {
    let cert = self_signed_certificate(&["localhost".into()]).unwrap();
    let server_tls =
        server_config(cert.chain.clone(), cert.key, vec![ALPN.to_vec()], false).unwrap();
    let client_tls = client_config(
        vec![ALPN.to_vec()],
        ServerVerification::Pinned(cert.chain[0].clone()),
        false,
    )
    .unwrap();
    let mut server_config = ServerConfig::new(server_tls);
    server_config.transport = transport(multipath);
    let mut server_ep = EndpointConfig::random();
    server_ep.qlog = qlog.clone().map(|q| Arc::new(q) as _);
    let server = Endpoint::server(addr("127.0.0.1:0"), server_ep, server_config).unwrap();
    let locals: Vec<SocketAddr> = client_locals.iter().map(|s| addr(s)).collect();
    let mut client_ep = EndpointConfig::random();
    client_ep.qlog = qlog.map(|q| Arc::new(q) as _);
    let client = Endpoint::client(&locals, client_ep).unwrap();
    let mut cc = ClientConfig::new(client_tls);
    cc.transport = transport(multipath);
    (server, client, cc)
}

async fn connect(
    server: &Endpoint,
    client: &Endpoint,
    cc: ClientConfig,
) -> (Connection, Connection) {
    let server_addr = server.local_addrs()[0];
    let (c, s) = tokio::join!(client.connect(cc, server_addr, "localhost"), async {
        let s = server.accept().await.unwrap();
        s.handshake().await.unwrap();
        s
    });
    (c.unwrap(), s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_upload_over_one_stream() {
    let (server, client, cc) = pair(&["127.0.0.1:0"], false, None);
    let (c, s) = connect(&server, &client, cc).await;
    let size = 8 * 1024 * 1024;
    let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    let receiver = tokio::spawn(async move {
        let (_, mut recv) = s.accept_bi().await.unwrap();
        recv.read_to_end(usize::MAX).await.unwrap()
    });
    let start = Instant::now();
    let (mut send, _recv) = c.open_bi().await.unwrap();
    send.write_all(&data).await.unwrap();
    send.finish().unwrap();
    let got = receiver.await.unwrap();
    eprintln!("{} bytes in {:?}", got.len(), start.elapsed());
    assert!(got == data, "received data differs");
    send.finished().await.unwrap();
    c.close(0, b"done");
    drop((send, _recv, c));
    tokio::time::timeout(Duration::from_secs(5), client.wait_idle())
        .await
        .unwrap();
}
