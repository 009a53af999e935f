//! What the polypath-io integration tests share.

use std::net::SocketAddr;
use std::sync::Arc;

/// A socket address from its text.
pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// TLS configurations of a server with a self-signed certificate for `localhost` and of a
/// client that pins it (the quic crate's test configurations).
pub fn tls_pair() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let (client, server) = polypath_quic::testing::tls_configs();
    (server, client)
}
