//! What the polypath-io integration tests share.

use polypath_quic::crypto::{
    ServerVerification, client_config, self_signed_certificate, server_config,
};
use std::net::SocketAddr;
use std::sync::Arc;

/// The tests' application protocol.
const ALPN: &[u8] = b"polypath-io-test";

/// A socket address from its text.
pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// TLS configurations of a server with a fresh self-signed certificate for `localhost`
/// and of a client that pins it.
pub fn tls_pair() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let cert = self_signed_certificate(&["localhost".into()]).unwrap();
    let server = server_config(cert.chain.clone(), cert.key, vec![ALPN.to_vec()], false).unwrap();
    let client = client_config(
        vec![ALPN.to_vec()],
        ServerVerification::Pinned(cert.chain[0].clone()),
        false,
    )
    .unwrap();
    (server, client)
}
