//! QUIC transport error codes and the error a connection closes with.

use crate::varint::VarInt;
use std::fmt;

/// A QUIC transport error code (RFC 9000 section 20.1, draft-ietf-quic-multipath-21
/// section 4.2.1).
#[derive(Copy, Clone, Eq, PartialEq, Hash)]
pub struct TransportErrorCode(pub u64);

macro_rules! error_codes {
    ($($(#[$doc:meta])* $name:ident = $value:expr,)*) => {
        impl TransportErrorCode {
            $($(#[$doc])* pub const $name: TransportErrorCode = TransportErrorCode($value);)*

            /// The registered name of the code, if it has one.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some(stringify!($name)),)*
                    0x0100..=0x01ff => Some("CRYPTO_ERROR"),
                    _ => None,
                }
            }
        }
    };
}

//= https://www.rfc-editor.org/rfc/rfc9000#section-20.1
error_codes! {
    /// An endpoint uses this with CONNECTION_CLOSE to signal that the connection is being
    /// closed abruptly in the absence of any error.
    NO_ERROR = 0x00,
    /// The endpoint encountered an internal error and cannot continue with the connection.
    INTERNAL_ERROR = 0x01,
    /// The server refused to accept a new connection.
    CONNECTION_REFUSED = 0x02,
    /// An endpoint received more data than it permitted in its advertised data limits.
    FLOW_CONTROL_ERROR = 0x03,
    /// An endpoint received a frame for a stream identifier that exceeded its advertised
    /// stream limit for the corresponding stream type.
    STREAM_LIMIT_ERROR = 0x04,
    /// An endpoint received a frame for a stream that was not in a state that permitted
    /// that frame.
    STREAM_STATE_ERROR = 0x05,
    /// An endpoint received data beyond a stream's final size, or a changed final size.
    FINAL_SIZE_ERROR = 0x06,
    /// An endpoint received a frame that was badly formatted.
    FRAME_ENCODING_ERROR = 0x07,
    /// An endpoint received transport parameters that were badly formatted or invalid.
    TRANSPORT_PARAMETER_ERROR = 0x08,
    /// The number of connection IDs provided by the peer exceeds active_connection_id_limit.
    CONNECTION_ID_LIMIT_ERROR = 0x09,
    /// An endpoint detected an error with protocol compliance not covered by a more
    /// specific code.
    PROTOCOL_VIOLATION = 0x0a,
    /// A server received a client Initial that contained an invalid Token field.
    INVALID_TOKEN = 0x0b,
    /// The application or application protocol caused the connection to be closed.
    APPLICATION_ERROR = 0x0c,
    /// An endpoint has received more data in CRYPTO frames than it can buffer.
    CRYPTO_BUFFER_EXCEEDED = 0x0d,
    /// An endpoint detected errors in performing key updates.
    KEY_UPDATE_ERROR = 0x0e,
    /// An endpoint has reached the confidentiality or integrity limit for its AEAD.
    AEAD_LIMIT_REACHED = 0x0f,
    /// An endpoint has determined that the network path is incapable of supporting QUIC.
    NO_VIABLE_PATH = 0x10,
    /// RFC 9368 section 4: the peer's version_information shows a version downgrade or
    /// does not match the versions in use.
    VERSION_NEGOTIATION_ERROR = 0x11,
    /// draft-ietf-quic-multipath-21 section 4.2.1, for PATH_ABANDON: the path is abandoned at
    /// the request of the application.
    APPLICATION_ABANDON_PATH = 0x3e,
    /// draft-ietf-quic-multipath-21 section 4.2.1: the endpoint cannot allocate sufficient
    /// resources to maintain the path.
    PATH_RESOURCE_LIMIT_REACHED = 0x3e75,
    /// draft-ietf-quic-multipath-21 section 4.2.1: the interface is unstable or the path's
    /// performance is poor (for example frequent handovers or a weak signal).
    PATH_UNSTABLE_OR_POOR = 0x3e76,
    /// draft-ietf-quic-multipath-21 section 4.2.1: no connection ID is available for the path.
    NO_CID_AVAILABLE_FOR_PATH = 0x3e77,
}

impl TransportErrorCode {
    /// The code for a TLS alert, 0x0100 plus the alert value.
    //= https://www.rfc-editor.org/rfc/rfc9001#section-4.8
    //# A TLS alert is converted into a QUIC connection error.  The
    //# AlertDescription value is added to 0x0100 to produce a QUIC error
    //# code from the range reserved for CRYPTO_ERROR
    pub const fn crypto(alert: u8) -> Self {
        TransportErrorCode(0x100 | alert as u64)
    }
}

impl fmt::Debug for TransportErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) if (0x100..0x200).contains(&self.0) => {
                write!(f, "{name}(alert {})", self.0 - 0x100)
            }
            Some(name) => f.write_str(name),
            None => write!(f, "TransportErrorCode({:#x})", self.0),
        }
    }
}

impl fmt::Display for TransportErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl From<TransportErrorCode> for VarInt {
    fn from(code: TransportErrorCode) -> VarInt {
        VarInt::saturating(code.0)
    }
}

/// A transport-level error: what a connection closes with when the peer breaks the
/// protocol, or what it reports when the peer closed with one.
#[derive(Debug, Clone, Eq, PartialEq, thiserror::Error)]
#[error("{code}{}: {reason}", frame_type.map(|t| format!(" in frame {t:#x}")).unwrap_or_default())]
pub struct TransportError {
    /// The error code carried in CONNECTION_CLOSE.
    pub code: TransportErrorCode,
    /// The type of the frame that triggered the error, if one did.
    pub frame_type: Option<u64>,
    /// A human-readable reason phrase.
    pub reason: String,
}

impl TransportError {
    /// An error with `code` and a reason phrase.
    pub fn new(code: TransportErrorCode, reason: impl Into<String>) -> Self {
        TransportError {
            code,
            frame_type: None,
            reason: reason.into(),
        }
    }
    /// Records which frame type triggered the error.
    pub fn in_frame(mut self, frame_type: u64) -> Self {
        self.frame_type = Some(frame_type);
        self
    }
}

macro_rules! shorthand {
    ($($fn_name:ident => $code:ident,)*) => {
        impl TransportError {
            $(
                #[doc = concat!("A `", stringify!($code), "` error with the given reason.")]
                pub fn $fn_name(reason: impl Into<String>) -> Self {
                    Self::new(TransportErrorCode::$code, reason)
                }
            )*
        }
    };
}

shorthand! {
    internal => INTERNAL_ERROR,
    flow_control => FLOW_CONTROL_ERROR,
    stream_limit => STREAM_LIMIT_ERROR,
    stream_state => STREAM_STATE_ERROR,
    final_size => FINAL_SIZE_ERROR,
    frame_encoding => FRAME_ENCODING_ERROR,
    transport_parameter => TRANSPORT_PARAMETER_ERROR,
    connection_id_limit => CONNECTION_ID_LIMIT_ERROR,
    protocol_violation => PROTOCOL_VIOLATION,
    crypto_buffer_exceeded => CRYPTO_BUFFER_EXCEEDED,
    key_update => KEY_UPDATE_ERROR,
    aead_limit => AEAD_LIMIT_REACHED,
    version_negotiation => VERSION_NEGOTIATION_ERROR,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_crypto_range() {
        assert_eq!(
            TransportErrorCode::FLOW_CONTROL_ERROR.name(),
            Some("FLOW_CONTROL_ERROR")
        );
        assert_eq!(TransportErrorCode::crypto(40).0, 0x128);
        assert_eq!(
            format!("{}", TransportErrorCode::crypto(40)),
            "CRYPTO_ERROR(alert 40)"
        );
        let e = TransportError::frame_encoding("bad").in_frame(0x08);
        assert_eq!(e.to_string(), "FRAME_ENCODING_ERROR in frame 0x8: bad");
    }
}
