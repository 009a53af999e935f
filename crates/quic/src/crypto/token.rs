//! Server-side secrets: stateless reset tokens (RFC 9000 section 10.3.2) and address
//! validation tokens for Retry (RFC 9000 sections 8.1.2 to 8.1.4).

use crate::coding::BufExt;
use crate::shared::{ConnectionId, MAX_CID_SIZE, RESET_TOKEN_SIZE, ResetToken};
use ring::{aead, hkdf, hmac};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// Derives stateless reset tokens from a static key, so an endpoint that lost a
/// connection's state can still produce its token.
//= https://www.rfc-editor.org/rfc/rfc9000#section-10.3.2
//# A single static key can be used across all connections to the same endpoint by
//# generating the proof using a pseudorandom function that takes a static key and
//# the connection ID chosen by the endpoint (see {{connection-id}}) as input.
pub struct ResetKey(hmac::Key);

impl std::fmt::Debug for ResetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResetKey(..)")
    }
}

impl ResetKey {
    /// An HMAC-SHA256 key from `secret`, which the endpoint generates once (at least 32
    /// random bytes) and may share with the instances of a cluster.
    pub fn new(secret: &[u8]) -> Self {
        ResetKey(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// The stateless reset token for a connection ID this endpoint issued.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-10.3.2
    //# An
    //# endpoint could use HMAC {{?RFC2104}} (for example, HMAC(static_key,
    //# connection_id)) or the HMAC-based Key Derivation Function (HKDF) {{?RFC5869}}
    //# (for example, using the static key as input keying material, with the connection
    //# ID as salt).  The output of this function is truncated to 16 bytes to produce
    //# the stateless reset token for that connection.
    pub fn token(&self, cid: &ConnectionId) -> ResetToken {
        let tag = hmac::sign(&self.0, cid);
        let mut token = [0u8; RESET_TOKEN_SIZE];
        token.copy_from_slice(&tag.as_ref()[..RESET_TOKEN_SIZE]);
        ResetToken(token)
    }
}

/// First byte of a Retry token; also authenticated. Tokens of other kinds (such as
/// NEW_TOKEN tokens) must use other values.
//= https://www.rfc-editor.org/rfc/rfc9000#section-8.1.1
//# A token sent in a NEW_TOKEN frame or a Retry packet MUST be constructed in a
//# way that allows the server to identify how it was provided to a client.
const RETRY_TOKEN_KIND: u8 = 0x52;
/// Length of the random nonce that follows the kind byte.
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;

/// What a valid Retry token vouches for.
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct RetryToken {
    /// The Destination Connection ID of the client's first Initial, which the server
    /// echoes in original_destination_connection_id.
    pub original_dcid: ConnectionId,
    /// The Source Connection ID of the Retry packet, echoed in retry_source_connection_id.
    pub retry_scid: ConnectionId,
    /// When the token was issued, on the caller's clock (microsecond precision).
    pub issued: Duration,
}

/// Why a token was rejected. A server receiving an invalid Retry token closes with
/// `INVALID_TOKEN` (RFC 9000 section 8.1.2).
#[derive(Debug, Copy, Clone, Eq, PartialEq, thiserror::Error)]
pub enum TokenError {
    /// Not a Retry token of this server (wrong first byte or too short).
    #[error("not a retry token")]
    NotRetry,
    /// The token failed authentication: forged, corrupted or made with another key.
    #[error("token failed authentication")]
    Invalid,
    /// Authenticated, but its contents do not parse (a key shared with other software).
    #[error("malformed token contents")]
    Malformed,
    /// The token was issued to a different client address or port.
    #[error("token issued to another address")]
    WrongAddress,
    /// The token is older than its lifetime, or issued later than `now`.
    #[error("token expired")]
    Expired,
}

/// Seals and opens address validation tokens for Retry packets (server side).
///
/// A token is `kind (1) || nonce (12) || AEAD(client address, original DCID, Retry SCID,
/// issue time) || tag (16)`, sealed with AES-256-GCM under a key derived from the secret.
/// Only the server needs the key. Times are `Duration`s since an epoch the caller picks and
/// uses consistently: e.g. `SystemTime::now().duration_since(UNIX_EPOCH)` for tokens that
/// must survive restarts or be shared by a cluster, or the simulator's virtual time.
//= https://www.rfc-editor.org/rfc/rfc9000#section-8.1.4
//# For this design to work, the token MUST be covered by
//# integrity protection against modification or falsification by clients.
pub struct TokenKey(aead::LessSafeKey);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

impl TokenKey {
    /// Derives the token key from `secret` (at least 32 random bytes, generated once by the
    /// server, shared by a cluster if tokens must be accepted by every instance).
    pub fn new(secret: &[u8]) -> Self {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"polypath address validation token")
            .extract(secret);
        let key = prk
            .expand(&[b"retry token key"], &aead::AES_256_GCM)
            .map(aead::UnboundKey::from);
        match key {
            Ok(key) => TokenKey(aead::LessSafeKey::new(key)),
            // HKDF-SHA256 can always produce 32 bytes (the limit is 255 * 32).
            Err(_) => unreachable!("HKDF-SHA256 output of 32 bytes is always possible"),
        }
    }

    /// Makes a Retry token for `client` (the address the Initial came from), binding the
    /// Initial's Destination Connection ID, the Retry's Source Connection ID and the issue
    /// time `now`. `rng` supplies the 96-bit nonce (a seeded generator in simulations).
    //= https://www.rfc-editor.org/rfc/rfc9000#section-8.1.4
    //# Tokens sent in Retry packets
    //# SHOULD include information that allows the server to verify that the source IP
    //# address and port in client packets remain constant.
    pub fn seal_retry_token<R: rand::Rng + ?Sized>(
        &self,
        rng: &mut R,
        client: SocketAddr,
        original_dcid: &ConnectionId,
        retry_scid: &ConnectionId,
        now: Duration,
    ) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill_bytes(&mut nonce);
        let mut token = Vec::with_capacity(1 + NONCE_LEN + 2 * MAX_CID_SIZE + 40 + TAG_LEN);
        token.push(RETRY_TOKEN_KIND);
        token.extend_from_slice(&nonce);
        let body_start = token.len();
        let micros = u64::try_from(now.as_micros()).unwrap_or(u64::MAX);
        token.extend_from_slice(&micros.to_be_bytes());
        match client.ip() {
            IpAddr::V4(ip) => {
                token.push(4);
                token.extend_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                token.push(6);
                token.extend_from_slice(&ip.octets());
            }
        }
        token.extend_from_slice(&client.port().to_be_bytes());
        for cid in [original_dcid, retry_scid] {
            token.push(cid.len() as u8);
            token.extend_from_slice(cid);
        }
        let (head, body) = token.split_at_mut(body_start);
        let sealed = self.0.seal_in_place_separate_tag(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::from(&head[..1]),
            body,
        );
        match sealed {
            Ok(tag) => token.extend_from_slice(tag.as_ref()),
            // AES-GCM only refuses inputs of gigabytes; this body is under 100 bytes.
            Err(_) => unreachable!("AES-GCM seal of a short token cannot fail"),
        }
        token
    }

    /// Opens a Retry token received from `client` at time `now` and checks that it was
    /// issued to that address and port no longer than `lifetime` ago.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-8.1.3
    //# Thus, a token SHOULD have an expiration time, which could
    //# be either an explicit expiration time or an issued timestamp that can be
    //# used to dynamically calculate the expiration time.
    pub fn open_retry_token(
        &self,
        token: &[u8],
        client: SocketAddr,
        now: Duration,
        lifetime: Duration,
    ) -> Result<RetryToken, TokenError> {
        if token.first() != Some(&RETRY_TOKEN_KIND) || token.len() < 1 + NONCE_LEN + TAG_LEN {
            return Err(TokenError::NotRetry);
        }
        let (kind, rest) = token.split_at(1);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| TokenError::NotRetry)?;
        let mut sealed = sealed.to_vec();
        let plain = self
            .0
            .open_in_place(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(kind),
                &mut sealed,
            )
            .map_err(|_| TokenError::Invalid)?;
        let (issued, address, original_dcid, retry_scid) =
            parse_body(plain).ok_or(TokenError::Malformed)?;
        if address != client {
            return Err(TokenError::WrongAddress);
        }
        let expired = issued > now || now - issued > lifetime;
        if expired {
            return Err(TokenError::Expired);
        }
        Ok(RetryToken {
            original_dcid,
            retry_scid,
            issued,
        })
    }
}

/// Parses the decrypted token body; `None` if it is malformed.
fn parse_body(mut body: &[u8]) -> Option<(Duration, SocketAddr, ConnectionId, ConnectionId)> {
    let buf = &mut body;
    let mut micros = [0u8; 8];
    buf.read_exact(&mut micros).ok()?;
    let issued = Duration::from_micros(u64::from_be_bytes(micros));
    let ip = match buf.read_u8().ok()? {
        4 => {
            let mut octets = [0u8; 4];
            buf.read_exact(&mut octets).ok()?;
            IpAddr::V4(Ipv4Addr::from(octets))
        }
        6 => {
            let mut octets = [0u8; 16];
            buf.read_exact(&mut octets).ok()?;
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    let port = buf.read_u16().ok()?;
    let mut cids = [ConnectionId::default(); 2];
    for cid in &mut cids {
        let len = usize::from(buf.read_u8().ok()?);
        if len > MAX_CID_SIZE {
            return None;
        }
        let mut bytes = [0u8; MAX_CID_SIZE];
        buf.read_exact(&mut bytes[..len]).ok()?;
        *cid = ConnectionId::try_new(&bytes[..len])?;
    }
    if !buf.is_empty() {
        return None;
    }
    let [original_dcid, retry_scid] = cids;
    Some((issued, SocketAddr::new(ip, port), original_dcid, retry_scid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    fn rng() -> rand_chacha::ChaCha8Rng {
        rand_chacha::ChaCha8Rng::seed_from_u64(1)
    }

    #[test]
    fn reset_tokens_are_deterministic_per_key_and_cid() {
        let key = ResetKey::new(&[5; 32]);
        let a = ConnectionId::new(&[1, 2, 3, 4]);
        let b = ConnectionId::new(&[1, 2, 3, 5]);
        assert_eq!(key.token(&a), key.token(&a));
        assert_ne!(key.token(&a), key.token(&b));
        assert_ne!(key.token(&a), ResetKey::new(&[6; 32]).token(&a));
        // HMAC-SHA256(key, cid) truncated to 16 bytes.
        let full = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &[5; 32]), &a);
        assert_eq!(&key.token(&a).0[..], &full.as_ref()[..16]);
    }

    #[test]
    fn retry_token_round_trip_and_rejections() {
        let key = TokenKey::new(b"0123456789abcdef0123456789abcdef");
        let client: SocketAddr = "192.0.2.7:4433".parse().unwrap();
        let odcid = ConnectionId::new(&[0xaa; 8]);
        let scid = ConnectionId::new(&[0xbb; 20]);
        let issued = Duration::from_secs(1000);
        let life = Duration::from_secs(10);
        let token = key.seal_retry_token(&mut rng(), client, &odcid, &scid, issued);

        let ok = key
            .open_retry_token(&token, client, issued + Duration::from_secs(3), life)
            .unwrap();
        assert_eq!(ok.original_dcid, odcid);
        assert_eq!(ok.retry_scid, scid);
        assert_eq!(ok.issued, issued);

        let open =
            |t: &[u8], addr: SocketAddr, now: Duration| key.open_retry_token(t, addr, now, life);
        assert_eq!(
            open(&token, "192.0.2.7:4434".parse().unwrap(), issued),
            Err(TokenError::WrongAddress)
        );
        assert_eq!(
            open(&token, "192.0.2.8:4433".parse().unwrap(), issued),
            Err(TokenError::WrongAddress)
        );
        assert_eq!(
            open(&token, client, issued + life + Duration::from_micros(1)),
            Err(TokenError::Expired)
        );
        assert!(open(&token, client, issued + life).is_ok());
        assert_eq!(
            open(&token, client, issued - Duration::from_secs(1)),
            Err(TokenError::Expired)
        );
        let other_key = TokenKey::new(&[1; 32]);
        assert_eq!(
            other_key.open_retry_token(&token, client, issued, life),
            Err(TokenError::Invalid)
        );
        for i in 1..token.len() {
            let mut bad = token.clone();
            bad[i] ^= 0x80;
            assert_eq!(
                open(&bad, client, issued),
                Err(TokenError::Invalid),
                "byte {i}"
            );
        }
        let mut bad = token.clone();
        bad[0] = 0x4e;
        assert_eq!(open(&bad, client, issued), Err(TokenError::NotRetry));
        for len in 0..token.len() {
            assert!(open(&token[..len], client, issued).is_err());
        }
    }

    #[test]
    fn ipv6_and_empty_cids() {
        let key = TokenKey::new(&[9; 32]);
        let client: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
        let empty = ConnectionId::new(&[]);
        let token = key.seal_retry_token(&mut rng(), client, &empty, &empty, Duration::ZERO);
        let ok = key
            .open_retry_token(&token, client, Duration::ZERO, Duration::ZERO)
            .unwrap();
        assert!(ok.original_dcid.is_empty() && ok.retry_scid.is_empty());
        // Two tokens for the same inputs differ (fresh nonce).
        let mut r = rng();
        let t1 = key.seal_retry_token(&mut r, client, &empty, &empty, Duration::ZERO);
        let t2 = key.seal_retry_token(&mut r, client, &empty, &empty, Duration::ZERO);
        assert_ne!(t1, t2);
    }

    #[test]
    fn authenticated_garbage_body_is_malformed() {
        // A body sealed with the right key but not in our format.
        let key = TokenKey::new(&[3; 32]);
        let nonce = [7u8; NONCE_LEN];
        let mut body = vec![0u8; 8];
        body.push(5); // bad address family
        let tag = key
            .0
            .seal_in_place_separate_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(&[RETRY_TOKEN_KIND]),
                &mut body,
            )
            .unwrap();
        let mut token = vec![RETRY_TOKEN_KIND];
        token.extend_from_slice(&nonce);
        token.extend_from_slice(&body);
        token.extend_from_slice(tag.as_ref());
        let client: SocketAddr = "10.0.0.1:1".parse().unwrap();
        assert_eq!(
            key.open_retry_token(&token, client, Duration::ZERO, Duration::MAX),
            Err(TokenError::Malformed)
        );
    }

    proptest! {
        #[test]
        fn arbitrary_tokens_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let key = TokenKey::new(&[4; 32]);
            let client: SocketAddr = "10.0.0.1:1".parse().unwrap();
            prop_assert!(key.open_retry_token(&bytes, client, Duration::ZERO, Duration::MAX).is_err());
        }

        #[test]
        fn parse_body_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = parse_body(&bytes);
        }

        #[test]
        fn round_trip(
            v6 in any::<bool>(), ip in any::<[u8; 16]>(), port in any::<u16>(),
            odcid in proptest::collection::vec(any::<u8>(), 0..=20),
            scid in proptest::collection::vec(any::<u8>(), 0..=20),
            micros in 0u64..(1 << 50),
        ) {
            let key = TokenKey::new(&[8; 32]);
            let addr = if v6 {
                SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port)
            } else {
                SocketAddr::new(IpAddr::V4(Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3])), port)
            };
            let (odcid, scid) = (ConnectionId::new(&odcid), ConnectionId::new(&scid));
            let now = Duration::from_micros(micros);
            let token = key.seal_retry_token(&mut rng(), addr, &odcid, &scid, now);
            let ok = key.open_retry_token(&token, addr, now, Duration::ZERO).unwrap();
            prop_assert_eq!(ok, RetryToken { original_dcid: odcid, retry_scid: scid, issued: now });
        }
    }
}
