//! TLS configuration for QUIC: the ring crypto provider, client and server configs,
//! self-signed certificates and PEM loading.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig,
    SignatureScheme,
};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Errors from building TLS configurations or sessions, or from loading key material.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// rustls rejected the configuration or session parameters.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// The server name is neither a valid DNS name nor an IP address.
    #[error("invalid server name {0:?}")]
    InvalidServerName(String),
    /// A certificate or key file could not be read or parsed.
    #[error("{}: {reason}", path.display())]
    File {
        /// The file concerned.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Generating a self-signed certificate failed.
    #[error("certificate generation: {0}")]
    Certificate(String),
    /// The root certificate store could not be turned into a verifier.
    #[error("certificate verifier: {0}")]
    Verifier(String),
}

/// A certificate chain (end-entity first) with its private key.
pub struct CertificateAndKey {
    /// The certificate chain, end-entity certificate first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The private key of the end-entity certificate.
    pub key: PrivateKeyDer<'static>,
}

impl fmt::Debug for CertificateAndKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAndKey")
            .field("chain_len", &self.chain.len())
            .finish_non_exhaustive()
    }
}

impl Clone for CertificateAndKey {
    fn clone(&self) -> Self {
        CertificateAndKey {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

/// The crypto provider every config here uses: ring, restricted to the TLS 1.3 cipher
/// suites that define QUIC header protection (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305).
///
/// All of them have 12-byte nonces, as the multipath path-ID nonce requires.
//= https://www.rfc-editor.org/rfc/rfc9001#section-5.3
//# A cipher suite MUST NOT be negotiated unless a
//# header protection scheme is defined for the cipher suite.
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.1
//# Cipher suites with a nonce shorter than 12 bytes cannot be used together with
//# the multipath extension.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    crypto_provider_with(CipherSuites::All)
}

/// Which TLS 1.3 cipher suites an endpoint offers (a client) or accepts (a server).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CipherSuites {
    /// AES-128-GCM, AES-256-GCM and ChaCha20-Poly1305, in ring's order of preference.
    #[default]
    All,
    /// ChaCha20-Poly1305 only (as the QUIC Interop Runner's `chacha20` case asks of a
    /// client): a peer without it fails the handshake.
    ChaCha20Only,
}

/// [`crypto_provider`] restricted to `suites`.
pub fn crypto_provider_with(suites: CipherSuites) -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.retain(|suite| {
        suite.tls13().is_some_and(|s| s.quic.is_some())
            && match suites {
                CipherSuites::All => true,
                CipherSuites::ChaCha20Only => {
                    suite.suite() == rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
                }
            }
    });
    Arc::new(provider)
}

/// How a client authenticates the server's certificate.
pub enum ServerVerification {
    /// **Insecure**: accept any certificate for any name. The handshake signature is still
    /// checked against the presented certificate, but nothing ties that certificate to the
    /// server, so an on-path attacker can impersonate it. For labs, simulations and
    /// self-signed test servers only; never for real traffic.
    Insecure,
    /// Verify the chain against these trust anchors and check the server name (WebPKI).
    Roots(RootCertStore),
    /// Accept exactly this end-entity certificate, whatever names it carries (for a known
    /// self-signed server).
    Pinned(CertificateDer<'static>),
}

impl fmt::Debug for ServerVerification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerVerification::Insecure => f.write_str("Insecure"),
            ServerVerification::Roots(roots) => write!(f, "Roots({} anchors)", roots.len()),
            ServerVerification::Pinned(_) => f.write_str("Pinned"),
        }
    }
}

/// Verifier for [`ServerVerification::Insecure`] (`pinned == None`) and
/// [`ServerVerification::Pinned`].
#[derive(Debug)]
struct AnyOrPinned {
    pinned: Option<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyOrPinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.pinned {
            Some(pinned) if pinned.as_ref() != end_entity.as_ref() => Err(
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
            ),
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A QUIC client configuration: TLS 1.3 only, the [`crypto_provider`], the given ALPN
/// protocols (in preference order), session tickets kept in memory for resumption, no
/// 0-RTT (see [`enable_early_data`]).
///
/// With `keylog`, TLS secrets are appended to the file named by the `SSLKEYLOGFILE`
/// environment variable (NSS key log format, which Wireshark uses to decrypt QUIC).
//= https://www.rfc-editor.org/rfc/rfc9001#section-4.2
//# Clients MUST NOT offer TLS versions older than 1.3.
pub fn client_config(
    alpn: Vec<Vec<u8>>,
    verification: ServerVerification,
    keylog: bool,
) -> Result<Arc<ClientConfig>, ConfigError> {
    client_config_with(alpn, verification, keylog, CipherSuites::All)
}

/// [`client_config`] offering only the cipher suites `suites`.
pub fn client_config_with(
    alpn: Vec<Vec<u8>>,
    verification: ServerVerification,
    keylog: bool,
    suites: CipherSuites,
) -> Result<Arc<ClientConfig>, ConfigError> {
    let provider = crypto_provider_with(suites);
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let mut config =
        match verification {
            ServerVerification::Roots(roots) => builder.with_root_certificates(roots),
            ServerVerification::Insecure => {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyOrPinned {
                        pinned: None,
                        algorithms: provider.signature_verification_algorithms,
                    }))
            }
            ServerVerification::Pinned(cert) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyOrPinned {
                    pinned: Some(cert),
                    algorithms: provider.signature_verification_algorithms,
                })),
        }
        .with_no_client_auth();
    config.alpn_protocols = alpn;
    // Session tickets a server sends are kept (in memory, per server name) and offered by
    // the next connection made with this configuration; 0-RTT only with enable_early_data.
    config.resumption = rustls::client::Resumption::in_memory_sessions(CLIENT_SESSION_CACHE);
    config.enable_early_data = false;
    if keylog {
        config.key_log = Arc::new(rustls::KeyLogFile::new());
    }
    Ok(Arc::new(config))
}

/// Sessions a client configuration remembers for resumption (most recent first).
const CLIENT_SESSION_CACHE: usize = 256;

/// Sessions a server remembers for resumption with [`enable_session_tickets`].
const SERVER_SESSION_CACHE: usize = 4096;

/// Makes a server configuration from [`server_config`] send one session ticket after each
/// handshake, so a client that connects again with the same client configuration resumes
/// the session (RFC 8446 section 2.2: no certificate, one round trip less of TLS work).
/// Tickets are references to sessions kept in the server's memory, so they die with the
/// process; no 0-RTT is offered with them.
//= https://www.rfc-editor.org/rfc/rfc9001#section-4.6.1
//# To indicate that the server does not accept
//# 0-RTT data, the early_data extension is omitted from the NewSessionTicket.
pub fn enable_session_tickets(config: &mut ServerConfig) {
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(SERVER_SESSION_CACHE);
    config.send_tls13_tickets = 1;
    config.max_early_data_size = 0;
}

/// Makes a server configuration send session tickets (as [`enable_session_tickets`]) that
/// allow 0-RTT, and accept the early data of a client that resumes with one: its 0-RTT
/// packets are decrypted and their stream data delivered before the handshake completes.
///
/// Anti-replay (RFC 9001 section 9.2, RFC 8446 section 8): the tickets are references to
/// sessions in the server's memory, and rustls takes a session out of that store when a
/// client resumes it, so each ticket is good for one resumption: a replayed ClientHello
/// finds no session and gets a full handshake, its early data rejected. That holds
/// within one server process (tickets die with it); servers that share no session store
/// do not see each other's tickets at all. Early data can still be replayed by an attacker
/// who races the client to the server with a copy of its first flight, so an application
/// should act in 0-RTT only on requests that are safe to repeat (such as HTTP/0.9 GETs of
/// static files).
//= https://www.rfc-editor.org/rfc/rfc9001#section-4.6.1
//# Servers MUST NOT send
//# the early_data extension with a max_early_data_size field set to any value other
//# than 0xffffffff.
//= https://www.rfc-editor.org/rfc/rfc9001#section-9.2
//# Disabling 0-RTT entirely is the most effective
//# defense against replay attack.
pub fn enable_zero_rtt(config: &mut ServerConfig) {
    enable_session_tickets(config);
    config.max_early_data_size = u32::MAX;
}

/// Makes a client configuration from [`client_config`] send early data (0-RTT) when it
/// resumes a session whose ticket allows it ([`enable_zero_rtt`] on the server).
pub fn enable_early_data(config: &mut ClientConfig) {
    config.enable_early_data = true;
}

/// A QUIC server configuration presenting `chain` and `key`: TLS 1.3 only, the
/// [`crypto_provider`], the given ALPN protocols (in preference order), no client
/// authentication, no 0-RTT and no session tickets (see [`enable_session_tickets`]).
/// `keylog` as for [`client_config`].
///
/// With a non-empty `alpn`, a client that offers no matching protocol (or none at all) fails
/// the handshake with no_application_protocol (QUIC error 0x178).
//= https://www.rfc-editor.org/rfc/rfc9001#section-8.1
//# The server MUST treat the inability to select a
//# compatible application protocol as a connection error of type 0x0178
//# (no_application_protocol).
pub fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    alpn: Vec<Vec<u8>>,
    keylog: bool,
) -> Result<Arc<ServerConfig>, ConfigError> {
    server_config_with(chain, key, alpn, keylog, CipherSuites::All)
}

/// [`server_config`] accepting only the cipher suites `suites`.
pub fn server_config_with(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    alpn: Vec<Vec<u8>>,
    keylog: bool,
    suites: CipherSuites,
) -> Result<Arc<ServerConfig>, ConfigError> {
    let mut config = ServerConfig::builder_with_provider(crypto_provider_with(suites))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = alpn;
    //= https://www.rfc-editor.org/rfc/rfc9001#section-4.6.1
    //# To indicate that the server does not accept
    //# 0-RTT data, the early_data extension is omitted from the NewSessionTicket.
    config.max_early_data_size = 0;
    config.send_tls13_tickets = 0;
    if keylog {
        config.key_log = Arc::new(rustls::KeyLogFile::new());
    }
    Ok(Arc::new(config))
}

/// PKCS#8 v2 (RFC 5958) prefix of an Ed25519 private key, up to the 32-byte seed.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x51, 0x02, 0x01, 0x01, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];
/// Tag of the `[1] publicKey` field that follows the seed, with its length (33: one byte
/// of unused bits, then the 32-byte key).
const ED25519_PKCS8_PUBLIC_TAG: [u8; 3] = [0x81, 0x21, 0x00];

/// A self-signed ECDSA P-256 (SHA-256) certificate for `subject_alt_names` (DNS names or
/// IP addresses) with a fresh random key. ECDSA P-256 is the signature scheme every TLS 1.3
/// stack supports (RFC 8446 section 9.1: `ecdsa_secp256r1_sha256` is mandatory to
/// implement); Ed25519 is not, and a peer without it aborts the handshake.
//= https://www.rfc-editor.org/rfc/rfc8446#section-9.1
//# A TLS-compliant application MUST support digital signatures with
//# rsa_pkcs1_sha256 (for certificates), rsa_pss_rsae_sha256 (for
//# CertificateVerify and certificates), and ecdsa_secp256r1_sha256.
pub fn self_signed_certificate(
    subject_alt_names: &[String],
) -> Result<CertificateAndKey, ConfigError> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| ConfigError::Certificate(e.to_string()))?;
    certify(subject_alt_names, key)
}

/// A self-signed Ed25519 certificate whose key is derived from `seed`, so the same seed and
/// names always give byte-identical certificates and handshakes (for the deterministic
/// simulator: Ed25519 signatures are deterministic, ECDSA ones are not).
pub fn self_signed_certificate_from_seed(
    subject_alt_names: &[String],
    seed: &[u8; 32],
) -> Result<CertificateAndKey, ConfigError> {
    use ring::signature::KeyPair as _;
    let ring_key = ring::signature::Ed25519KeyPair::from_seed_unchecked(seed)
        .map_err(|e| ConfigError::Certificate(e.to_string()))?;
    let mut pkcs8 = Vec::with_capacity(83);
    pkcs8.extend_from_slice(&ED25519_PKCS8_PREFIX);
    pkcs8.extend_from_slice(seed);
    pkcs8.extend_from_slice(&ED25519_PKCS8_PUBLIC_TAG);
    pkcs8.extend_from_slice(ring_key.public_key().as_ref());
    let key = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(
        &PrivatePkcs8KeyDer::from(pkcs8),
        &rcgen::PKCS_ED25519,
    )
    .map_err(|e| ConfigError::Certificate(e.to_string()))?;
    certify(subject_alt_names, key)
}

fn certify(
    subject_alt_names: &[String],
    key: rcgen::KeyPair,
) -> Result<CertificateAndKey, ConfigError> {
    let mut params = rcgen::CertificateParams::new(subject_alt_names.to_vec())
        .map_err(|e| ConfigError::Certificate(e.to_string()))?;
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, "polypath self-signed");
    params.distinguished_name = dn;
    // A 16-byte serial derived from the public key, with the top bits fixed to 01 so its
    // DER encoding never gains a leading zero byte or loses one: the length is constant.
    let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key_raw());
    let mut serial = digest.as_ref()[..16].to_vec();
    serial[0] = (serial[0] & 0x3f) | 0x40;
    params.serial_number = Some(rcgen::SerialNumber::from(serial));
    let cert = params
        .self_signed(&key)
        .map_err(|e| ConfigError::Certificate(e.to_string()))?;
    Ok(CertificateAndKey {
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    })
}

fn file_error(path: &Path, reason: impl fmt::Display) -> ConfigError {
    ConfigError::File {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// Loads every `CERTIFICATE` section of a PEM file, in file order (end-entity first).
/// Fails, naming the file, if it cannot be read, is malformed, or holds no certificate.
pub fn load_certificate_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let pem = std::fs::read(path).map_err(|e| file_error(path, e))?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .enumerate()
        .map(|(i, cert)| cert.map_err(|e| file_error(path, format!("certificate {}: {e}", i + 1))))
        .collect::<Result<Vec<_>, _>>()?;
    if chain.is_empty() {
        return Err(file_error(path, "no CERTIFICATE section found"));
    }
    Ok(chain)
}

/// Loads the first private key (PKCS#8, PKCS#1 RSA or SEC1 EC) of a PEM file and checks
/// that the crypto provider can sign with it. Fails, naming the file, otherwise.
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, ConfigError> {
    let pem = std::fs::read(path).map_err(|e| file_error(path, e))?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            file_error(path, "no PRIVATE KEY section found")
        }
        e => file_error(path, e),
    })?;
    crypto_provider()
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| file_error(path, format!("unusable private key: {e}")))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::TlsSession;
    use crate::crypto::testing::{alpn, handshake};

    fn connect(client: Arc<ClientConfig>, server: Arc<ServerConfig>) -> Result<(), String> {
        let mut c = TlsSession::client(client, "localhost", vec![]).map_err(|e| e.to_string())?;
        let mut s = TlsSession::server(server, vec![]).map_err(|e| e.to_string())?;
        handshake(&mut c, &mut s)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn generated_certs_are_ecdsa_p256_and_seeded_certs_are_identical() {
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let cert = self_signed_certificate(&names).unwrap();
        let key = rustls::crypto::ring::sign::any_supported_type(&cert.key).unwrap();
        assert_eq!(key.algorithm(), rustls::SignatureAlgorithm::ECDSA);
        assert!(
            key.choose_scheme(&[SignatureScheme::ECDSA_NISTP256_SHA256])
                .is_some(),
            "a peer that offers only ecdsa_secp256r1_sha256 can verify it"
        );
        assert!(
            key.choose_scheme(&[SignatureScheme::ED25519]).is_none(),
            "not an Ed25519 key"
        );
        let a = self_signed_certificate_from_seed(&names, &[1; 32]).unwrap();
        let b = self_signed_certificate_from_seed(&names, &[1; 32]).unwrap();
        let c = self_signed_certificate_from_seed(&names, &[2; 32]).unwrap();
        assert_eq!(a.chain, b.chain);
        assert_ne!(a.chain, c.chain);
        assert_eq!(a.key.secret_der(), b.key.secret_der());
    }

    #[test]
    fn invalid_subject_alt_name_is_an_error() {
        assert!(matches!(
            self_signed_certificate(&["caf\u{e9}.example".into()]),
            Err(ConfigError::Certificate(_))
        ));
    }

    #[test]
    fn verification_modes() {
        let cert = self_signed_certificate(&["localhost".into()]).unwrap();
        let server = server_config(
            cert.chain.clone(),
            cert.key.clone_key(),
            alpn(&["a"]),
            false,
        )
        .unwrap();
        let mk = |v| client_config(alpn(&["a"]), v, false).unwrap();

        connect(mk(ServerVerification::Insecure), server.clone()).unwrap();
        connect(
            mk(ServerVerification::Pinned(cert.chain[0].clone())),
            server.clone(),
        )
        .unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(cert.chain[0].clone()).unwrap();
        connect(mk(ServerVerification::Roots(roots)), server.clone()).unwrap();

        // An unrelated root or an empty store rejects the server.
        let other = self_signed_certificate(&["localhost".into()]).unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(other.chain[0].clone()).unwrap();
        let err = connect(mk(ServerVerification::Roots(roots)), server.clone()).unwrap_err();
        assert!(err.contains("CRYPTO_ERROR"), "{err}");
        let err = connect(
            mk(ServerVerification::Roots(RootCertStore::empty())),
            server.clone(),
        )
        .unwrap_err();
        assert!(err.contains("CRYPTO_ERROR"), "{err}");

        // The right root but the wrong name.
        let mut roots = RootCertStore::empty();
        roots.add(cert.chain[0].clone()).unwrap();
        let mut c = TlsSession::client(mk(ServerVerification::Roots(roots)), "example.com", vec![])
            .unwrap();
        let mut s = TlsSession::server(server, vec![]).unwrap();
        assert!(handshake(&mut c, &mut s).is_err());
    }

    #[test]
    fn keylog_configs_build() {
        let cert = self_signed_certificate_from_seed(&["localhost".into()], &[3; 32]).unwrap();
        let server = server_config(cert.chain, cert.key, alpn(&["a"]), true).unwrap();
        let client = client_config(alpn(&["a"]), ServerVerification::Insecure, true).unwrap();
        connect(client, server).unwrap();
    }

    #[test]
    fn pem_round_trip_and_file_errors() {
        let dir = std::env::temp_dir().join(format!("polypath-crypto-pem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = self_signed_certificate_from_seed(&["localhost".into()], &[9; 32]).unwrap();
        let cert_path = dir.join("cert.pem");
        let key_path = dir.join("key.pem");
        let pem = |label: &str, der: &[u8]| {
            use std::fmt::Write;
            let b64 = base64_encode(der);
            let mut s = format!("-----BEGIN {label}-----\n");
            for chunk in b64.as_bytes().chunks(64) {
                writeln!(s, "{}", std::str::from_utf8(chunk).unwrap()).unwrap();
            }
            writeln!(s, "-----END {label}-----").unwrap();
            s
        };
        std::fs::write(&cert_path, pem("CERTIFICATE", &cert.chain[0])).unwrap();
        std::fs::write(&key_path, pem("PRIVATE KEY", cert.key.secret_der())).unwrap();

        assert_eq!(load_certificate_chain(&cert_path).unwrap(), cert.chain);
        assert_eq!(
            load_private_key(&key_path).unwrap().secret_der(),
            cert.key.secret_der()
        );

        // Missing file, a key file read as certificates and vice versa, garbage keys.
        let missing = dir.join("missing.pem");
        let err = load_certificate_chain(&missing).unwrap_err().to_string();
        assert!(err.contains("missing.pem"), "{err}");
        let err = load_certificate_chain(&key_path).unwrap_err().to_string();
        assert!(
            err.contains("key.pem") && err.contains("no CERTIFICATE"),
            "{err}"
        );
        let err = load_private_key(&cert_path).unwrap_err().to_string();
        assert!(
            err.contains("cert.pem") && err.contains("no PRIVATE KEY"),
            "{err}"
        );
        let bad_key = dir.join("bad.pem");
        std::fs::write(
            &bad_key,
            pem("PRIVATE KEY", &[0x30, 0x03, 0x02, 0x01, 0x00]),
        )
        .unwrap();
        let err = load_private_key(&bad_key).unwrap_err().to_string();
        assert!(err.contains("bad.pem") && err.contains("unusable"), "{err}");
        let truncated = dir.join("truncated.pem");
        std::fs::write(&truncated, "-----BEGIN CERTIFICATE-----\nAAAA\n").unwrap();
        let err = load_certificate_chain(&truncated).unwrap_err().to_string();
        assert!(err.contains("truncated.pem"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Minimal standard base64 with padding, for writing PEM test files.
    fn base64_encode(data: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in data.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}
