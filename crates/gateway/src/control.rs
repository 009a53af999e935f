//! The control protocol between the client and the server gateway: session set-up with
//! authentication, the policy, steering decisions and policy reloads.
//!
//! Control messages travel on the first bidirectional stream the client opens on the
//! connection (the control stream). Each message is a JSON object with a `type`, preceded
//! by its length:
//!
//! ```text
//! Control Message {
//!   Length (32),         # big-endian, 1 to MAX_MESSAGE bytes
//!   JSON Object (..),    # UTF-8, {"type": ..., ...}
//! }
//! ```
//!
//! A session runs: the client sends [`Control::Hello`] (its name, its pre-shared token and
//! its interfaces); the server answers [`Control::Welcome`] (the session's tunnel
//! addresses, routes, tunnel MTU and the client's policy) or [`Control::Refused`] and closes
//! the connection. Then either side may send: the server [`Control::Policy`] after a policy
//! reload (on a unidirectional stream of its own), the client [`Control::Steer`] when its
//! QoS manager changes which paths a class uses (the server's scheduler follows it for the
//! downlink). Further bidirectional streams the client opens carry proxied TCP connections
//! ([`crate::proxy`]). A message that does not
//! decode, a message of the wrong type for the moment, or a length beyond
//! [`MAX_MESSAGE`] ends the session, with the reason logged and sent in the
//! CONNECTION_CLOSE (application error [`CLOSE_PROTOCOL`]).
//
//= To Poly or Not to Poly: QoS-Aware Multi-Path Networking, Section III
//# The Gateway can manage multiple concurrent sessions, with each client receiving a specific policy, multipath protocol, and QoS configuration upon connection request. All parameters are negotiated during connection establishment, leading to a tailored user-plane setup.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The protocol version a client announces in [`Control::Hello`].
pub const VERSION: u32 = 1;
/// The largest control message, in bytes (a policy file must fit).
pub const MAX_MESSAGE: usize = 64 * 1024;

/// Application close code: the session ended normally.
pub const CLOSE_OK: u64 = 0;
/// Application close code: the client's credentials were refused.
pub const CLOSE_REFUSED: u64 = 0x101;
/// Application close code: a malformed or unexpected control message.
pub const CLOSE_PROTOCOL: u64 = 0x102;
/// Application close code: no `hello` within the set-up timeout.
pub const CLOSE_TIMEOUT: u64 = 0x103;
/// Application close code: the server is shutting down.
pub const CLOSE_SHUTDOWN: u64 = 0x104;

/// One of the client gateway's interfaces, as it announces them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterfaceInfo {
    /// Interface name (`eth0`, `wlan0`, ...), as the policies name it.
    pub name: String,
    /// Its address, the local address of the path over it.
    pub ip: IpAddr,
    /// The QUIC path over it, once open.
    #[serde(default)]
    pub path_id: Option<u32>,
}

/// A control message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Control {
    /// Client to server, first: who the client is and how it proves it.
    Hello {
        /// Must be [`VERSION`].
        version: u32,
        /// The client's name, as the server's configuration lists it.
        client: String,
        /// The pre-shared token.
        token: String,
        /// The client's interfaces.
        interfaces: Vec<InterfaceInfo>,
    },
    /// Server to client: the session is set up.
    Welcome {
        /// A random session identifier (hex), which the client's measurement probes carry.
        session: String,
        /// The client's address inside the tunnel (from the client's address pool).
        tunnel_ip: IpAddr,
        /// The server's address inside the tunnel.
        gateway_ip: IpAddr,
        /// Prefixes the client routes into the tunnel (`10.99.0.0/24`, ...).
        routes: Vec<String>,
        /// Largest IP packet the tunnel carries.
        mtu: u16,
        /// The server's measurement (PMF) UDP port.
        pmf_port: u16,
        /// The server's kernel MPTCP relay port (0: none), for classes with
        /// `"transport": "mptcp"`.
        #[serde(default)]
        relay_port: u16,
        /// The client's policy file, as text (the client parses it with the same rules).
        policy: String,
        /// The policy file's name, for error messages.
        policy_name: String,
    },
    /// Server to client: the credentials were refused; the connection closes.
    Refused {
        /// Why, in words.
        reason: String,
    },
    /// Server to client: the client's policy was reloaded.
    Policy {
        /// The policy file, as text.
        policy: String,
        /// The policy file's name.
        policy_name: String,
    },
    /// Client to server: the scheduler configuration the client's QoS manager put in force
    /// (a `polypath_quic::sched::QosPolicyConfig` as JSON); the server applies it to the
    /// connection's scheduler for the downlink.
    Steer {
        /// The configuration.
        scheduler: serde_json::Value,
        /// Why (the QoS manager's decision), for the server's log.
        reason: String,
    },
}

impl Control {
    /// The message's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Control::Hello { .. } => "hello",
            Control::Welcome { .. } => "welcome",
            Control::Refused { .. } => "refused",
            Control::Policy { .. } => "policy",
            Control::Steer { .. } => "steer",
        }
    }

    /// The message with its length prefix.
    pub fn encode(&self) -> Bytes {
        // Serialising these types cannot fail (no maps with non-string keys, no floats
        // that JSON cannot carry apart from inside `scheduler`, which came from JSON).
        let json = serde_json::to_vec(self).unwrap_or_default();
        let mut out = BytesMut::with_capacity(4 + json.len());
        out.put_u32(json.len() as u32);
        out.put_slice(&json);
        out.freeze()
    }
}

/// Why the control stream's bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// A length of zero or above [`MAX_MESSAGE`].
    #[error("control message length {0} is not between 1 and {MAX_MESSAGE} bytes")]
    Length(usize),
    /// The JSON did not decode as a control message.
    #[error("malformed control message: {0}")]
    Malformed(String),
    /// The stream ended inside a message.
    #[error("the control stream ended inside a message ({0} bytes buffered)")]
    Truncated(usize),
}

/// Reassembles control messages from the control stream's chunks.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: BytesMut,
}

impl Decoder {
    /// Adds bytes read from the stream.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next whole message, `Ok(None)` if more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<Control>, ControlError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len == 0 || len > MAX_MESSAGE {
            return Err(ControlError::Length(len));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        self.buf.advance(4);
        let body = self.buf.split_to(len);
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| ControlError::Malformed(e.to_string()))
    }

    /// Checks that the stream ended between messages.
    pub fn finish(&self) -> Result<(), ControlError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(ControlError::Truncated(self.buf.len()))
        }
    }
}

/// Compares two secrets in time independent of where they differ.
pub fn secrets_match(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Control {
        Control::Hello {
            version: VERSION,
            client: "train-7".into(),
            token: "s3cret".into(),
            interfaces: vec![InterfaceInfo {
                name: "eth0".into(),
                ip: "10.0.1.1".parse().unwrap(),
                path_id: None,
            }],
        }
    }

    #[test]
    fn messages_round_trip_across_chunk_boundaries() {
        let steer = Control::Steer {
            scheduler: serde_json::json!({"default": {"mode": "failover"}}),
            reason: "delay".into(),
        };
        let mut wire = hello().encode().to_vec();
        wire.extend_from_slice(&steer.encode());
        let mut d = Decoder::default();
        let mut got = Vec::new();
        for chunk in wire.chunks(7) {
            d.push(chunk);
            while let Some(m) = d.next_message().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, vec![hello(), steer]);
        assert_eq!(d.finish(), Ok(()));
    }

    #[test]
    fn malformed_messages_are_errors() {
        let mut d = Decoder::default();
        d.push(&[0, 0, 0, 0]);
        assert_eq!(d.next_message(), Err(ControlError::Length(0)));
        let mut d = Decoder::default();
        d.push(&[0, 1, 0, 1]);
        assert!(matches!(d.next_message(), Err(ControlError::Length(65537))));
        for body in [
            &br#"{"type":"hello"}"#[..],
            br#"{"type":"launch","x":1}"#,
            br#"{"type":"refused","reason":"x","extra":1}"#,
            b"\xff\xfe",
        ] {
            let mut d = Decoder::default();
            d.push(&(body.len() as u32).to_be_bytes());
            d.push(body);
            assert!(
                matches!(d.next_message(), Err(ControlError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
        let mut d = Decoder::default();
        d.push(&hello().encode()[..10]);
        assert_eq!(d.next_message(), Ok(None));
        assert_eq!(d.finish(), Err(ControlError::Truncated(10)));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(secrets_match(b"abc", b"abc"));
        assert!(!secrets_match(b"abc", b"abd"));
        assert!(!secrets_match(b"abc", b"ab"));
    }
}
