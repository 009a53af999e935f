//! The cryptographic decoders: Retry tokens, the Retry Integrity Tag, and packet
//! unprotection (header protection removal and AEAD opening) of arbitrary bytes.

use bytes::BytesMut;
use polypath_quic::crypto::{
    TokenError, TokenKey, initial_keys, open_packet, retry_integrity_tag, seal_packet,
    verify_retry_integrity,
};
use polypath_quic::packet::{
    self, LongType, VERSION_1, apply_header_protection, decode_header, decode_packet_number,
    remove_header_protection,
};
use polypath_quic::{ConnectionId, Endpoint, EndpointConfig, PathId, ServerConfig, Side};
use rand::SeedableRng;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Reads fuzzer input front to back; every read past the end yields zeros.
pub(crate) struct Input<'a>(pub(crate) &'a [u8]);

impl<'a> Input<'a> {
    /// The next byte, if any is left.
    pub(crate) fn next(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    /// The next byte, or 0.
    pub(crate) fn byte(&mut self) -> u8 {
        self.next().unwrap_or(0)
    }

    /// The next two bytes as a big-endian number.
    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    /// The next eight bytes as a big-endian number.
    pub(crate) fn u64(&mut self) -> u64 {
        let mut v = 0u64;
        for _ in 0..8 {
            v = v << 8 | u64::from(self.byte());
        }
        v
    }

    /// Up to `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }

    /// A connection ID of 0 to 20 bytes, its length from the input.
    pub(crate) fn cid(&mut self) -> ConnectionId {
        let len = usize::from(self.byte() % 21);
        ConnectionId::new(self.take(len))
    }

    /// Everything left.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        self.take(self.0.len())
    }
}

/// The server secret of the Retry-token target.
pub(crate) fn token_key() -> &'static TokenKey {
    static KEY: OnceLock<TokenKey> = OnceLock::new();
    KEY.get_or_init(|| TokenKey::new(&[0x5a; 32]))
}

/// A client address from the input: IPv4 or IPv6, any port.
fn address(input: &mut Input<'_>) -> SocketAddr {
    let ip = if input.byte() & 1 == 0 {
        IpAddr::V4(Ipv4Addr::from(
            u32::from(input.u16()) << 16 | u32::from(input.u16()),
        ))
    } else {
        IpAddr::V6(Ipv6Addr::from(
            u128::from(input.u64()) << 64 | u128::from(input.u64()),
        ))
    };
    SocketAddr::new(ip, input.u16())
}

/// The server's Retry token decoder (`TokenKey::open_retry_token`) on arbitrary bytes, and
/// a seal/open round trip of a token built from input fields: the round trip must give
/// the fields back, and any changed byte of the token must make it fail. Returns 1 if the
/// arbitrary bytes opened (only possible by finding a valid token).
pub fn retry_token(data: &[u8]) -> usize {
    let key = token_key();
    let mut input = Input(data);
    let client = address(&mut input);
    let now = Duration::from_micros(input.u64() >> 8);
    let lifetime = Duration::from_millis(u64::from(input.u16()));
    let odcid = input.cid();
    let retry_scid = input.cid();
    let flip = input.u16();
    let arbitrary = input.rest();
    let opened = match key.open_retry_token(arbitrary, client, now, lifetime) {
        Ok(t) => {
            assert!(t.issued <= now && now - t.issued <= lifetime);
            1
        }
        Err(_) => 0,
    };

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(u64::from(flip));
    let token = key.seal_retry_token(&mut rng, client, &odcid, &retry_scid, now);
    let t = key
        .open_retry_token(&token, client, now + lifetime, lifetime)
        .expect("a token opens at its own address within its lifetime");
    assert_eq!(
        (t.original_dcid, t.retry_scid, t.issued),
        (odcid, retry_scid, now)
    );
    let late = now + lifetime + Duration::from_micros(1);
    assert_eq!(
        key.open_retry_token(&token, client, late, lifetime),
        Err(TokenError::Expired)
    );
    let other = SocketAddr::new(client.ip(), client.port().wrapping_add(1));
    assert_eq!(
        key.open_retry_token(&token, other, now, lifetime),
        Err(TokenError::WrongAddress)
    );
    let mut bad = token.clone();
    let at = usize::from(flip >> 3) % bad.len();
    bad[at] ^= 1 << (flip & 7);
    assert!(
        key.open_retry_token(&bad, client, now, lifetime).is_err(),
        "a token with byte {at} changed still opened"
    );
    opened
}

/// The client's Retry checks on arbitrary bytes: the Retry Integrity Tag
/// (`verify_retry_integrity`) against an original Destination Connection ID taken from
/// the input, and the header decoder. A tag computed over the bytes must verify, and fail
/// once any bit of the packet changes. Returns 1 if the arbitrary packet verified.
pub fn retry_integrity(data: &[u8]) -> usize {
    let mut input = Input(data);
    let odcid = input.cid();
    let flip = input.u16();
    let retry = input.rest();
    let verified = verify_retry_integrity(VERSION_1, &odcid, retry);
    let _ = decode_header(retry, 8);
    let Some(tag) = retry_integrity_tag(VERSION_1, &odcid, retry) else {
        panic!("version 1 always has a Retry key");
    };
    let mut full = retry.to_vec();
    full.extend_from_slice(&tag);
    assert!(verify_retry_integrity(VERSION_1, &odcid, &full));
    assert!(!verify_retry_integrity(0xff00_001d, &odcid, &full));
    let at = usize::from(flip >> 3) % full.len();
    full[at] ^= 1 << (flip & 7);
    assert!(
        !verify_retry_integrity(VERSION_1, &odcid, &full),
        "a Retry with bit {} of byte {at} flipped verified",
        flip & 7
    );
    usize::from(verified)
}

/// A server endpoint with the test certificate, for the Initials of [`packet_unprotect`].
fn server_config() -> ServerConfig {
    static TLS: OnceLock<std::sync::Arc<rustls::ServerConfig>> = OnceLock::new();
    let tls = TLS.get_or_init(|| polypath_quic::testing::tls_configs().1);
    ServerConfig::new(tls.clone())
}

/// Packet unprotection. The first byte picks a mode:
///
/// * even: the input after it is a received datagram. Every coalesced packet has its
///   header protection removed and its payload opened (Initial keys derived from the
///   packet's own Destination Connection ID), as a server does, and the datagram is then
///   handed to a server [`Endpoint`]; frames of anything that opens are decoded.
/// * odd: the input is the payload of a packet that is sealed (Initial keys for an input
///   connection ID, short or long header, an input packet number) and unprotected again:
///   the round trip must give the payload back. The sealed packet, padded to 1 200 bytes,
///   is then given to a server endpoint, so the server processes fuzzer-chosen frames
///   (CRYPTO frames with a fuzzed ClientHello, among others) in a decryptable Initial.
///
/// Returns the number of packets that opened.
pub fn packet_unprotect(data: &[u8]) -> usize {
    let mut input = Input(data);
    let mode = input.byte();
    let now = Instant::now();
    let mut server = Endpoint::new(EndpointConfig::from_seed(3), Some(server_config()));
    let local: SocketAddr = ([10, 0, 0, 2], 4433).into();
    let remote: SocketAddr = ([10, 0, 0, 1], 5000).into();
    if mode & 1 == 0 {
        let datagram = input.rest();
        let opened = open_datagram(datagram);
        server.handle(now, local, remote, None, BytesMut::from(datagram));
        drain(&mut server, now);
        return opened;
    }
    let dcid = input.cid();
    let scid = input.cid();
    let pn = input.u64() >> (2 + mode % 62);
    let long = mode & 2 != 0;
    let payload = input.rest();
    let (Some(client), Some(server_keys)) = (
        initial_keys(VERSION_1, &dcid, Side::Client),
        initial_keys(VERSION_1, &dcid, Side::Server),
    ) else {
        panic!("version 1 has Initial keys");
    };
    let pn_len = packet::packet_number_len(pn, None).clamp(1, 4);
    let mut buf = Vec::new();
    let (pn_offset, layout) = if long {
        let layout = packet::write_long_header(
            &mut buf,
            LongType::Initial,
            VERSION_1,
            &dcid,
            &scid,
            &[],
            pn,
            pn_len,
        );
        (layout.pn_offset, Some(layout))
    } else {
        (
            packet::write_short_header(&mut buf, false, false, &dcid, pn, pn_len),
            None,
        )
    };
    let header_len = buf.len();
    buf.extend_from_slice(payload);
    // Room for the header protection sample, then the AEAD tag.
    let min = pn_offset + 4 + packet::HP_SAMPLE_LEN - 16;
    if buf.len() < min {
        buf.resize(min, 0);
    }
    let padded_payload = buf[header_len..].to_vec();
    buf.resize(buf.len() + 16, 0);
    if let Some(layout) = &layout {
        if buf.len() - pn_offset > packet::MAX_LONG_HEADER_LENGTH {
            return 0;
        }
        let len = buf.len() - pn_offset;
        packet::set_long_header_length(&mut buf, layout, len);
    }
    let header = buf[..header_len].to_vec();
    seal_packet(client.local.packet.as_ref(), None, pn, &mut buf, header_len)
        .expect("sealing a packet under 16 KB");
    apply_header_protection(&mut buf, pn_offset, pn_len, client.local.header.as_ref())
        .expect("the packet holds the sample");
    let sealed = buf.clone();
    let un = remove_header_protection(&mut buf, pn_offset, server_keys.remote.header.as_ref())
        .expect("the packet holds the sample");
    assert_eq!(un.pn_len, pn_len);
    let full = decode_packet_number(pn.checked_sub(1), u64::from(un.truncated_pn), un.pn_nbits());
    assert_eq!(full, pn);
    assert_eq!(&buf[..header_len], &header[..], "header restored");
    let len = open_packet(
        server_keys.remote.packet.as_ref(),
        None,
        pn,
        &mut buf,
        header_len,
    )
    .expect("a sealed packet opens with the peer's keys");
    assert_eq!(&buf[header_len..header_len + len], &padded_payload[..]);
    if long && dcid.len() >= 8 {
        let mut datagram = sealed;
        if datagram.len() < 1200 {
            // Pad the datagram (not the packet) as a client would with a second packet.
            datagram.resize(1200, 0);
        }
        server.handle(now, local, remote, None, BytesMut::from(&datagram[..]));
        drain(&mut server, now);
    }
    1
}

/// Removes header protection from and opens every packet of `datagram` with the Initial
/// keys derived from its Destination Connection ID, and decodes the frames of those that
/// open. Returns how many opened.
fn open_datagram(datagram: &[u8]) -> usize {
    let mut rest = datagram;
    let mut opened = 0;
    while !rest.is_empty() {
        let Ok(hdr) = decode_header(rest, 8) else {
            break;
        };
        let packet_len = hdr.packet_len.min(rest.len());
        if let Some(pn_offset) = hdr.pn_offset()
            && let Some(keys) = initial_keys(VERSION_1, &hdr.dcid, Side::Server)
        {
            let mut packet = rest[..packet_len].to_vec();
            if let Ok(un) =
                remove_header_protection(&mut packet, pn_offset, keys.remote.header.as_ref())
            {
                let pn = decode_packet_number(None, u64::from(un.truncated_pn), un.pn_nbits());
                let header_len = pn_offset + un.pn_len;
                let path = (!hdr.is_long()).then_some(PathId(u32::from(un.first_byte)));
                if let Ok(len) = open_packet(
                    keys.remote.packet.as_ref(),
                    path,
                    pn,
                    &mut packet,
                    header_len,
                ) {
                    assert_eq!(header_len + len + 16, packet.len());
                    crate::frames(&packet[header_len..header_len + len]);
                    opened += 1;
                }
            }
        }
        rest = &rest[packet_len..];
    }
    opened
}

/// Lets a server endpoint answer what it received and run its timers once.
fn drain(server: &mut Endpoint, now: Instant) {
    let mut buf = Vec::new();
    for _ in 0..64 {
        if server.poll_transmit(now, &mut buf).is_none() {
            break;
        }
    }
    for _ in 0..1024 {
        if server.poll_event().is_none() {
            break;
        }
    }
    if let Some(t) = server.poll_timeout() {
        server.handle_timeout(t);
    }
}
