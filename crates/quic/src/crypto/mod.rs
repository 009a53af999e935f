//! Everything cryptographic a QUIC connection needs (RFC 9001, plus the path-ID nonce of
//! draft-ietf-quic-multipath-21).
//!
//! - [`TlsSession`]: the TLS 1.3 handshake over CRYPTO frames, a thin wrapper around
//!   `rustls::quic::Connection` that maps TLS alerts to QUIC `CRYPTO_ERROR`s and hands out
//!   packet protection keys as [`KeyChange`]s.
//! - [`initial_keys`], [`seal_packet`], [`open_packet`], [`protect_header`],
//!   [`unprotect_header`]: packet and header protection for one packet in a buffer.
//! - [`PacketProtection`]: the AEAD, or for simulations only a stand-in that keeps the
//!   wire format and skips the cryptography.
//! - [`OneRttKeys`]: 1-RTT keys with key updates (RFC 9001 section 6) and AEAD usage limits.
//! - [`retry_integrity_tag`] / [`verify_retry_integrity`]: the Retry Integrity Tag.
//! - [`ResetKey`]: stateless reset tokens; [`TokenKey`]: address validation tokens for Retry.
//! - [`client_config`], [`server_config`], [`self_signed_certificate`],
//!   [`load_certificate_chain`], [`load_private_key`]: TLS configuration helpers.
//!
//! All of it is sans-IO: nothing here reads a clock or a global random generator on the
//! packet path. Callers pass in `Instant`s, durations and seeded random generators.
//! (The TLS handshake itself draws randomness from the ring provider, which cannot be
//! seeded; its messages have fixed sizes for a given configuration, so packet sizes and
//! timing stay reproducible.)

mod config;
mod key_update;
mod protect;
mod retry;
mod simulated;
mod switched;
mod tls;
mod token;

#[cfg(test)]
mod testing;

pub use config::{
    CertificateAndKey, CipherSuites, ConfigError, ServerVerification, client_config,
    client_config_with, crypto_provider, crypto_provider_with, enable_early_data,
    enable_session_tickets, enable_zero_rtt, load_certificate_chain, load_private_key,
    self_signed_certificate, self_signed_certificate_from_seed, server_config, server_config_with,
};
pub use key_update::{KeyPhaseMatch, OneRttKeys, Opened, UpdateSecrets};
pub use protect::{
    QUIC_VERSION_1, initial_keys, open_packet, protect_header, seal_packet, tls_version,
    unprotect_header,
};
pub use retry::{RETRY_INTEGRITY_TAG_LEN, retry_integrity_tag, verify_retry_integrity};
pub use simulated::PacketProtection;
pub use switched::SwitchedSecrets;
pub use tls::{KeyChange, Level, TlsSession};
pub use token::{ResetKey, RetryToken, TokenError, TokenKey};

/// Re-exported from rustls: the key types handed out by [`TlsSession`] and [`initial_keys`].
pub use rustls::quic::{DirectionalKeys, HeaderProtectionKey, Keys, PacketKey, Secrets};

use crate::error::{TransportError, TransportErrorCode};

/// Why protecting or unprotecting a packet failed.
///
/// Most variants mean "drop this packet"; [`CryptoError::is_fatal`] tells the connection
/// when it must close instead, and [`CryptoError::transport_error`] gives the code.
#[derive(Debug, Clone, Copy, Eq, PartialEq, thiserror::Error)]
pub enum CryptoError {
    /// The buffer is too short for the header, the AEAD tag or the header protection sample.
    #[error("packet too short for packet protection")]
    ShortPacket,
    /// The AEAD rejected the packet (wrong key or modified packet): drop it.
    #[error("packet authentication failed")]
    Decrypt,
    /// The AEAD refused to encrypt (payload larger than the AEAD allows).
    #[error("packet encryption failed")]
    Encrypt,
    /// The header protection key rejected the sample or packet number.
    #[error("header protection failed")]
    HeaderProtection,
    /// A confidentiality or integrity limit was reached (RFC 9001 section 6.6): the
    /// connection must stop using these keys and close with `AEAD_LIMIT_REACHED`.
    #[error("AEAD usage limit reached")]
    AeadLimit,
    /// The peer broke the key update rules of RFC 9001 section 6: close with
    /// `KEY_UPDATE_ERROR`.
    #[error("key update error: {0}")]
    KeyUpdate(&'static str),
    /// A local key update was requested before the current key phase was acknowledged
    /// (RFC 9001 section 6.1). Not fatal: try again later.
    #[error("key update not permitted yet")]
    KeyUpdateNotPermitted,
}

impl CryptoError {
    /// True when the connection must close rather than just drop a packet.
    pub fn is_fatal(&self) -> bool {
        matches!(self, CryptoError::AeadLimit | CryptoError::KeyUpdate(_))
    }

    /// The error to close the connection with, for fatal errors.
    pub fn transport_error(&self) -> Option<TransportError> {
        match self {
            CryptoError::AeadLimit => Some(TransportError::new(
                TransportErrorCode::AEAD_LIMIT_REACHED,
                "AEAD confidentiality or integrity limit reached",
            )),
            CryptoError::KeyUpdate(reason) => Some(TransportError::key_update(*reason)),
            _ => None,
        }
    }
}
