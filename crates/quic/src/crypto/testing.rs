//! Test helpers: configs with a fixed self-signed certificate and an in-memory handshake
//! driver that exchanges CRYPTO bytes level by level, as a connection would.

use super::{
    KeyChange, Keys, Level, OneRttKeys, ServerVerification, TlsSession, client_config,
    self_signed_certificate_from_seed, server_config,
};
use crate::error::TransportError;
use rustls::{ClientConfig, ServerConfig};
use std::collections::VecDeque;
use std::sync::Arc;

/// ALPN protocol list from strings.
pub(crate) fn alpn(protocols: &[&str]) -> Vec<Vec<u8>> {
    protocols.iter().map(|p| p.as_bytes().to_vec()).collect()
}

/// A client trusting the test certificate (as a root) and a server presenting it.
pub(crate) fn configs(
    client_alpn: Vec<Vec<u8>>,
    server_alpn: Vec<Vec<u8>>,
) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
    let cert = self_signed_certificate_from_seed(&["localhost".into()], &[7; 32]).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.chain[0].clone()).unwrap();
    let client = client_config(client_alpn, ServerVerification::Roots(roots), false).unwrap();
    let server = server_config(cert.chain, cert.key, server_alpn, false).unwrap();
    (client, server)
}

/// What an in-memory handshake produced.
pub(crate) struct HandshakeOutput {
    /// Levels at which the client sent CRYPTO data, in order, without repeats.
    pub client_levels: Vec<Level>,
    /// Levels at which the server sent CRYPTO data, in order, without repeats.
    pub server_levels: Vec<Level>,
    pub client_handshake: Keys,
    pub server_handshake: Keys,
    pub client_one_rtt: OneRttKeys,
    pub server_one_rtt: OneRttKeys,
}

#[derive(Default)]
struct Side {
    levels: Vec<Level>,
    handshake: Option<Keys>,
    one_rtt: Option<OneRttKeys>,
}

/// Drains everything `session` wants to send, recording levels and keys.
fn pump(session: &mut TlsSession, side: &mut Side) -> Vec<(Level, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let level = session.write_level();
        let mut buf = Vec::new();
        let change = session.write_handshake(&mut buf);
        let wrote = !buf.is_empty();
        if wrote {
            if side.levels.last() != Some(&level) {
                side.levels.push(level);
            }
            out.push((level, buf));
        }
        match change {
            Some(KeyChange::Handshake(keys)) => side.handshake = Some(keys),
            Some(KeyChange::OneRtt(keys)) => side.one_rtt = Some(*keys),
            None if !wrote => return out,
            None => {}
        }
    }
}

/// Runs a handshake to completion, or returns the first error either side reports.
pub(crate) fn handshake(
    client: &mut TlsSession,
    server: &mut TlsSession,
) -> Result<HandshakeOutput, TransportError> {
    handshake_chunked(client, server, usize::MAX)
}

/// Like [`handshake`], but delivers CRYPTO data in pieces of at most `chunk` bytes.
pub(crate) fn handshake_chunked(
    client: &mut TlsSession,
    server: &mut TlsSession,
    chunk: usize,
) -> Result<HandshakeOutput, TransportError> {
    let (mut cs, mut ss) = (Side::default(), Side::default());
    let mut to_server: VecDeque<_> = pump(client, &mut cs).into();
    let mut to_client = VecDeque::new();
    for _ in 0..100_000 {
        if let Some((level, data)) = to_server.pop_front() {
            for piece in data.chunks(chunk) {
                server.read_handshake(level, piece)?;
                to_client.extend(pump(server, &mut ss));
            }
        } else if let Some((level, data)) = to_client.pop_front() {
            for piece in data.chunks(chunk) {
                client.read_handshake(level, piece)?;
                to_server.extend(pump(client, &mut cs));
            }
        } else {
            break;
        }
    }
    let missing = || TransportError::internal("handshake did not produce all keys");
    Ok(HandshakeOutput {
        client_levels: cs.levels,
        server_levels: ss.levels,
        client_handshake: cs.handshake.ok_or_else(missing)?,
        server_handshake: ss.handshake.ok_or_else(missing)?,
        client_one_rtt: cs.one_rtt.ok_or_else(missing)?,
        server_one_rtt: ss.one_rtt.ok_or_else(missing)?,
    })
}

/// Runs a handshake that must fail, returning the error.
pub(crate) fn handshake_err(
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
) -> TransportError {
    let mut client = TlsSession::client(client, "localhost", vec![1]).unwrap();
    let mut server = TlsSession::server(server, vec![2]).unwrap();
    match handshake(&mut client, &mut server) {
        Ok(_) => panic!("handshake unexpectedly succeeded"),
        Err(e) => e,
    }
}

/// A pair of matching 1-RTT key sets from a real handshake: (client, server).
pub(crate) fn one_rtt_pair() -> (OneRttKeys, OneRttKeys) {
    let (client_cfg, server_cfg) = configs(alpn(&["t"]), alpn(&["t"]));
    let mut client = TlsSession::client(client_cfg, "localhost", vec![1]).unwrap();
    let mut server = TlsSession::server(server_cfg, vec![2]).unwrap();
    let out = handshake(&mut client, &mut server).unwrap();
    (out.client_one_rtt, out.server_one_rtt)
}
