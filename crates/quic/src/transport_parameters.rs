//! QUIC transport parameters (RFC 9000 section 18), plus max_datagram_frame_size (RFC 9221
//! section 3) and initial_max_path_id (draft-ietf-quic-multipath-21 section 2.1).
//!
//! [`TransportParameters::encode`] produces the `quic_transport_parameters` TLS extension
//! body; [`TransportParameters::decode`] parses and validates the peer's.

use crate::coding::{BufExt, BufMutExt};
use crate::error::TransportError;
use crate::shared::{ConnectionId, MAX_CID_SIZE, PathId, RESET_TOKEN_SIZE, ResetToken, Side};
use crate::varint::VarInt;
use bytes::{Buf, BufMut};
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

/// Transport parameter identifiers.
mod id {
    pub const ORIGINAL_DESTINATION_CONNECTION_ID: u64 = 0x00;
    pub const MAX_IDLE_TIMEOUT: u64 = 0x01;
    pub const STATELESS_RESET_TOKEN: u64 = 0x02;
    pub const MAX_UDP_PAYLOAD_SIZE: u64 = 0x03;
    pub const INITIAL_MAX_DATA: u64 = 0x04;
    pub const INITIAL_MAX_STREAM_DATA_BIDI_LOCAL: u64 = 0x05;
    pub const INITIAL_MAX_STREAM_DATA_BIDI_REMOTE: u64 = 0x06;
    pub const INITIAL_MAX_STREAM_DATA_UNI: u64 = 0x07;
    pub const INITIAL_MAX_STREAMS_BIDI: u64 = 0x08;
    pub const INITIAL_MAX_STREAMS_UNI: u64 = 0x09;
    pub const ACK_DELAY_EXPONENT: u64 = 0x0a;
    pub const MAX_ACK_DELAY: u64 = 0x0b;
    pub const DISABLE_ACTIVE_MIGRATION: u64 = 0x0c;
    pub const PREFERRED_ADDRESS: u64 = 0x0d;
    pub const ACTIVE_CONNECTION_ID_LIMIT: u64 = 0x0e;
    pub const INITIAL_SOURCE_CONNECTION_ID: u64 = 0x0f;
    pub const RETRY_SOURCE_CONNECTION_ID: u64 = 0x10;
    /// RFC 9368 section 3.
    pub const VERSION_INFORMATION: u64 = 0x11;
    /// RFC 9221 section 3.
    pub const MAX_DATAGRAM_FRAME_SIZE: u64 = 0x20;
    /// draft-ietf-quic-multipath-21 section 2.1.
    pub const INITIAL_MAX_PATH_ID: u64 = 0x3e;
}

/// Default max_udp_payload_size: the largest UDP payload.
//= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
//# The default for this parameter is the maximum permitted UDP payload of 65527.
//# Values below 1200 are invalid.
pub const DEFAULT_MAX_UDP_PAYLOAD_SIZE: u64 = 65527;
/// Smallest valid max_udp_payload_size.
pub const MIN_MAX_UDP_PAYLOAD_SIZE: u64 = 1200;
/// Default ack_delay_exponent.
//= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
//# If this
//# value is absent, a default value of 3 is assumed (indicating a multiplier of
//# 8). Values above 20 are invalid.
pub const DEFAULT_ACK_DELAY_EXPONENT: u8 = 3;
/// Largest valid ack_delay_exponent.
pub const MAX_ACK_DELAY_EXPONENT: u8 = 20;
/// Default max_ack_delay in milliseconds.
//= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
//# If
//# this value is absent, a default of 25 milliseconds is assumed. Values of
//# 2<sup>14</sup> or greater are invalid.
pub const DEFAULT_MAX_ACK_DELAY_MS: u64 = 25;
/// max_ack_delay values must be below this (2^14 ms).
pub const MAX_ACK_DELAY_LIMIT_MS: u64 = 1 << 14;
/// Default (and minimum) active_connection_id_limit.
//= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
//# If this transport parameter is absent, a default of 2 is assumed.
pub const DEFAULT_ACTIVE_CONNECTION_ID_LIMIT: u64 = 2;
/// Largest valid initial_max_streams_bidi / initial_max_streams_uni.
pub const MAX_STREAMS_LIMIT: u64 = 1 << 60;

/// The server's preferred address (RFC 9000 section 18.2, figure 22).
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub struct PreferredAddress {
    /// IPv4 address and port; `None` is sent as 0.0.0.0:0.
    pub ipv4: Option<SocketAddrV4>,
    /// IPv6 address and port; `None` is sent as \[::\]:0.
    pub ipv6: Option<SocketAddrV6>,
    /// Connection ID with sequence number 1 (1 to 20 bytes).
    pub connection_id: ConnectionId,
    /// Stateless reset token of `connection_id`.
    pub stateless_reset_token: ResetToken,
}

impl PreferredAddress {
    fn encoded_len(&self) -> usize {
        4 + 2 + 16 + 2 + 1 + self.connection_id.len() + RESET_TOKEN_SIZE
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let v4 = self
            .ipv4
            .unwrap_or_else(|| SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
        out.put_slice(&v4.ip().octets());
        out.put_u16(v4.port());
        let v6 = self
            .ipv6
            .unwrap_or_else(|| SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0));
        out.put_slice(&v6.ip().octets());
        out.put_u16(v6.port());
        out.put_u8(self.connection_id.len() as u8);
        out.put_slice(&self.connection_id);
        out.put_slice(&self.stateless_reset_token.0);
    }

    fn decode(mut value: &[u8]) -> Result<Self, TransportError> {
        let bad =
            |what: &str| TransportError::transport_parameter(format!("preferred_address: {what}"));
        let mut v4 = [0u8; 4];
        value.read_exact(&mut v4).map_err(|_| bad("truncated"))?;
        let v4_port = value.read_u16().map_err(|_| bad("truncated"))?;
        let mut v6 = [0u8; 16];
        value.read_exact(&mut v6).map_err(|_| bad("truncated"))?;
        let v6_port = value.read_u16().map_err(|_| bad("truncated"))?;
        let cid_len = value.read_u8().map_err(|_| bad("truncated"))? as usize;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
        //# A server that chooses
        //# a zero-length connection ID MUST NOT provide a preferred address.  Similarly,
        //# a server MUST NOT include a zero-length connection ID in this transport
        //# parameter.  A client MUST treat a violation of these requirements as a
        //# connection error of type TRANSPORT_PARAMETER_ERROR.
        if cid_len == 0 || cid_len > MAX_CID_SIZE {
            return Err(bad("connection ID length outside 1..=20"));
        }
        let (cid, mut rest) = value
            .split_at_checked(cid_len)
            .ok_or_else(|| bad("truncated"))?;
        let mut token = [0u8; RESET_TOKEN_SIZE];
        rest.read_exact(&mut token).map_err(|_| bad("truncated"))?;
        if !rest.is_empty() {
            return Err(bad("trailing bytes"));
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
        //# Servers MAY choose to only send
        //# a preferred address of one address family by sending an all-zero address and
        //# port (0.0.0.0:0 or \[::]:0) for the other family.
        let ipv4 = (v4 != [0; 4] || v4_port != 0).then(|| SocketAddrV4::new(v4.into(), v4_port));
        let ipv6 =
            (v6 != [0; 16] || v6_port != 0).then(|| SocketAddrV6::new(v6.into(), v6_port, 0, 0));
        Ok(PreferredAddress {
            ipv4,
            ipv6,
            connection_id: ConnectionId::new(cid),
            stateless_reset_token: ResetToken(token),
        })
    }
}

/// The transport parameters one endpoint declares. `Default` gives the values that apply
/// when a parameter is absent.
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct TransportParameters {
    /// original_destination_connection_id (server only).
    pub original_destination_connection_id: Option<ConnectionId>,
    /// max_idle_timeout in milliseconds; 0 disables the idle timeout.
    pub max_idle_timeout: u64,
    /// stateless_reset_token (server only).
    pub stateless_reset_token: Option<ResetToken>,
    /// max_udp_payload_size (at least 1200).
    pub max_udp_payload_size: u64,
    /// initial_max_data.
    pub initial_max_data: u64,
    /// initial_max_stream_data_bidi_local.
    pub initial_max_stream_data_bidi_local: u64,
    /// initial_max_stream_data_bidi_remote.
    pub initial_max_stream_data_bidi_remote: u64,
    /// initial_max_stream_data_uni.
    pub initial_max_stream_data_uni: u64,
    /// initial_max_streams_bidi (at most 2^60).
    pub initial_max_streams_bidi: u64,
    /// initial_max_streams_uni (at most 2^60).
    pub initial_max_streams_uni: u64,
    /// ack_delay_exponent (at most 20).
    pub ack_delay_exponent: u8,
    /// max_ack_delay in milliseconds (below 2^14).
    pub max_ack_delay: u64,
    /// disable_active_migration.
    pub disable_active_migration: bool,
    /// preferred_address (server only).
    pub preferred_address: Option<PreferredAddress>,
    /// active_connection_id_limit (at least 2).
    pub active_connection_id_limit: u64,
    /// initial_source_connection_id (required from both sides; checking that it was sent
    /// and matches the packets is the connection's job, RFC 9000 section 7.3).
    pub initial_source_connection_id: Option<ConnectionId>,
    /// retry_source_connection_id (server only).
    pub retry_source_connection_id: Option<ConnectionId>,
    /// max_datagram_frame_size (RFC 9221); `None` or `Some(0)` means DATAGRAM frames are
    /// not accepted.
    pub max_datagram_frame_size: Option<u64>,
    /// initial_max_path_id (draft-ietf-quic-multipath-21); `Some` means the endpoint
    /// supports multipath.
    pub initial_max_path_id: Option<PathId>,
    /// version_information (RFC 9368): sent by endpoints that speak more than one version.
    pub version_information: Option<VersionInformation>,
}

/// The version_information transport parameter (RFC 9368 section 3).
//= https://www.rfc-editor.org/rfc/rfc9368#section-3
//# Version Information {
//#   Chosen Version (32),
//#   Available Versions (32) ...,
//# }
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionInformation {
    /// The version of the packets that carry the handshake: the client's Initial, or
    /// the version the server negotiated.
    pub chosen: u32,
    /// The versions the sender supports, in its order of preference (the client's also
    /// contains the chosen version).
    pub available: Vec<u32>,
}

impl Default for TransportParameters {
    fn default() -> Self {
        TransportParameters {
            original_destination_connection_id: None,
            max_idle_timeout: 0,
            stateless_reset_token: None,
            max_udp_payload_size: DEFAULT_MAX_UDP_PAYLOAD_SIZE,
            initial_max_data: 0,
            initial_max_stream_data_bidi_local: 0,
            initial_max_stream_data_bidi_remote: 0,
            initial_max_stream_data_uni: 0,
            initial_max_streams_bidi: 0,
            initial_max_streams_uni: 0,
            ack_delay_exponent: DEFAULT_ACK_DELAY_EXPONENT,
            max_ack_delay: DEFAULT_MAX_ACK_DELAY_MS,
            disable_active_migration: false,
            preferred_address: None,
            active_connection_id_limit: DEFAULT_ACTIVE_CONNECTION_ID_LIMIT,
            initial_source_connection_id: None,
            retry_source_connection_id: None,
            max_datagram_frame_size: None,
            initial_max_path_id: None,
            version_information: None,
        }
    }
}

fn put_param(out: &mut Vec<u8>, id: u64, value: &[u8]) {
    out.put_var_u64(id);
    out.put_var_u64(value.len() as u64);
    out.put_slice(value);
}

fn put_int_param(out: &mut Vec<u8>, id: u64, value: u64) {
    let v = VarInt::saturating(value);
    out.put_var_u64(id);
    out.put_var_u64(v.size() as u64);
    v.encode(out);
}

/// FNV-1a, used only to vary the GREASE parameter deterministically.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl TransportParameters {
    /// Appends the encoded parameters to `out`: the known ones in ascending identifier
    /// order (integer parameters equal to their default are omitted), then one reserved
    /// GREASE parameter whose identifier and value derive from the
    /// initial_source_connection_id (random per connection), so they vary between
    /// connections without any RNG here and the output stays deterministic.
    ///
    /// Integer values above 2^62 - 1 are clamped. Whether a parameter may be sent by this
    /// side (server-only ones) is the caller's concern.
    pub fn encode(&self, out: &mut Vec<u8>) {
        if let Some(cid) = &self.original_destination_connection_id {
            put_param(out, id::ORIGINAL_DESTINATION_CONNECTION_ID, cid);
        }
        if self.max_idle_timeout != 0 {
            put_int_param(out, id::MAX_IDLE_TIMEOUT, self.max_idle_timeout);
        }
        if let Some(token) = &self.stateless_reset_token {
            put_param(out, id::STATELESS_RESET_TOKEN, &token.0);
        }
        let ints = [
            (
                id::MAX_UDP_PAYLOAD_SIZE,
                self.max_udp_payload_size,
                DEFAULT_MAX_UDP_PAYLOAD_SIZE,
            ),
            (id::INITIAL_MAX_DATA, self.initial_max_data, 0),
            (
                id::INITIAL_MAX_STREAM_DATA_BIDI_LOCAL,
                self.initial_max_stream_data_bidi_local,
                0,
            ),
            (
                id::INITIAL_MAX_STREAM_DATA_BIDI_REMOTE,
                self.initial_max_stream_data_bidi_remote,
                0,
            ),
            (
                id::INITIAL_MAX_STREAM_DATA_UNI,
                self.initial_max_stream_data_uni,
                0,
            ),
            (
                id::INITIAL_MAX_STREAMS_BIDI,
                self.initial_max_streams_bidi,
                0,
            ),
            (id::INITIAL_MAX_STREAMS_UNI, self.initial_max_streams_uni, 0),
            (
                id::ACK_DELAY_EXPONENT,
                self.ack_delay_exponent.into(),
                DEFAULT_ACK_DELAY_EXPONENT.into(),
            ),
            (
                id::MAX_ACK_DELAY,
                self.max_ack_delay,
                DEFAULT_MAX_ACK_DELAY_MS,
            ),
        ];
        for (id, value, default) in ints {
            if value != default {
                put_int_param(out, id, value);
            }
        }
        if self.disable_active_migration {
            put_param(out, id::DISABLE_ACTIVE_MIGRATION, &[]);
        }
        if let Some(pa) = &self.preferred_address {
            let mut value = Vec::with_capacity(pa.encoded_len());
            pa.encode(&mut value);
            put_param(out, id::PREFERRED_ADDRESS, &value);
        }
        if self.active_connection_id_limit != DEFAULT_ACTIVE_CONNECTION_ID_LIMIT {
            put_int_param(
                out,
                id::ACTIVE_CONNECTION_ID_LIMIT,
                self.active_connection_id_limit,
            );
        }
        if let Some(cid) = &self.initial_source_connection_id {
            put_param(out, id::INITIAL_SOURCE_CONNECTION_ID, cid);
        }
        if let Some(cid) = &self.retry_source_connection_id {
            put_param(out, id::RETRY_SOURCE_CONNECTION_ID, cid);
        }
        if let Some(info) = &self.version_information {
            let value: Vec<u8> = std::iter::once(info.chosen)
                .chain(info.available.iter().copied())
                .flat_map(u32::to_be_bytes)
                .collect();
            put_param(out, id::VERSION_INFORMATION, &value);
        }

        if let Some(size) = self.max_datagram_frame_size {
            put_int_param(out, id::MAX_DATAGRAM_FRAME_SIZE, size);
        }
        if let Some(path) = self.initial_max_path_id {
            put_int_param(out, id::INITIAL_MAX_PATH_ID, path.0.into());
        }

        //= https://www.rfc-editor.org/rfc/rfc9000#section-18.1
        //# Transport parameters with an identifier of the form `31 * N + 27` for integer
        //# values of N are reserved to exercise the requirement that unknown transport
        //# parameters be ignored.
        let seed = fnv1a(self.initial_source_connection_id.as_deref().unwrap_or(&[]));
        let grease_id = 31 * (seed & 0xff_ffff) + 27;
        let grease_len = (seed >> 24) as usize % 8;
        put_param(out, grease_id, &seed.to_be_bytes()[..grease_len]);
    }

    /// Parses and validates the parameters `sent_by` the peer. Unknown parameters are
    /// ignored; every violation is a TRANSPORT_PARAMETER_ERROR.
    pub fn decode(sent_by: Side, mut input: &[u8]) -> Result<Self, TransportError> {
        let mut params = TransportParameters::default();
        let mut seen = BTreeSet::new();
        while input.has_remaining() {
            let id = input
                .get_var_u64()
                .map_err(|_| TransportError::transport_parameter("truncated parameter ID"))?;
            let len = input
                .get_var_u64()
                .map_err(|_| TransportError::transport_parameter("truncated parameter length"))?;
            let len = usize::try_from(len)
                .ok()
                .filter(|&l| l <= input.len())
                .ok_or_else(|| {
                    TransportError::transport_parameter(format!(
                        "parameter {id:#x} longer than the extension"
                    ))
                })?;
            let (value, rest) = input.split_at(len);
            input = rest;
            //= https://www.rfc-editor.org/rfc/rfc9000#section-7.4
            //# An endpoint SHOULD treat receipt of duplicate transport
            //# parameters as a connection error of type TRANSPORT_PARAMETER_ERROR.
            if !seen.insert(id) {
                return Err(TransportError::transport_parameter(format!(
                    "duplicate parameter {id:#x}"
                )));
            }
            params.apply(sent_by, id, value)?;
        }
        Ok(params)
    }

    /// Decodes one parameter into `self`.
    fn apply(&mut self, sent_by: Side, id: u64, value: &[u8]) -> Result<(), TransportError> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
        //# A client MUST NOT include any server-only transport parameter:
        //# original_destination_connection_id, preferred_address,
        //# retry_source_connection_id, or stateless_reset_token. A server MUST treat
        //# receipt of any of these transport parameters as a connection error of type
        //# TRANSPORT_PARAMETER_ERROR.
        let server_only = matches!(
            id,
            id::ORIGINAL_DESTINATION_CONNECTION_ID
                | id::PREFERRED_ADDRESS
                | id::RETRY_SOURCE_CONNECTION_ID
                | id::STATELESS_RESET_TOKEN
        );
        if server_only && sent_by == Side::Client {
            return Err(TransportError::transport_parameter(format!(
                "server-only parameter {id:#x} sent by a client"
            )));
        }
        let int = || decode_int(id, value);
        let cid = || decode_cid(id, value);
        match id {
            id::ORIGINAL_DESTINATION_CONNECTION_ID => {
                self.original_destination_connection_id = Some(cid()?)
            }
            id::MAX_IDLE_TIMEOUT => self.max_idle_timeout = int()?,
            id::STATELESS_RESET_TOKEN => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
                //# This parameter is a sequence of 16 bytes.
                let token: [u8; RESET_TOKEN_SIZE] = value.try_into().map_err(|_| {
                    TransportError::transport_parameter("stateless_reset_token is not 16 bytes")
                })?;
                self.stateless_reset_token = Some(ResetToken(token));
            }
            id::MAX_UDP_PAYLOAD_SIZE => {
                let v = int()?;
                if v < MIN_MAX_UDP_PAYLOAD_SIZE {
                    return Err(TransportError::transport_parameter(format!(
                        "max_udp_payload_size {v} below 1200"
                    )));
                }
                self.max_udp_payload_size = v;
            }
            id::INITIAL_MAX_DATA => self.initial_max_data = int()?,
            id::INITIAL_MAX_STREAM_DATA_BIDI_LOCAL => {
                self.initial_max_stream_data_bidi_local = int()?
            }
            id::INITIAL_MAX_STREAM_DATA_BIDI_REMOTE => {
                self.initial_max_stream_data_bidi_remote = int()?
            }
            id::INITIAL_MAX_STREAM_DATA_UNI => self.initial_max_stream_data_uni = int()?,
            id::INITIAL_MAX_STREAMS_BIDI | id::INITIAL_MAX_STREAMS_UNI => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-4.6
                //# If
                //# either is received, the connection MUST be closed immediately with a connection
                //# error of type TRANSPORT_PARAMETER_ERROR if the offending value was received in a
                //# transport parameter or of type FRAME_ENCODING_ERROR if it was received in a
                //# frame; see {{immediate-close}}.
                let v = int()?;
                if v > MAX_STREAMS_LIMIT {
                    return Err(TransportError::transport_parameter(format!(
                        "initial_max_streams {v} above 2^60"
                    )));
                }
                if id == id::INITIAL_MAX_STREAMS_BIDI {
                    self.initial_max_streams_bidi = v;
                } else {
                    self.initial_max_streams_uni = v;
                }
            }
            id::ACK_DELAY_EXPONENT => {
                let v = int()?;
                if v > u64::from(MAX_ACK_DELAY_EXPONENT) {
                    return Err(TransportError::transport_parameter(format!(
                        "ack_delay_exponent {v} above 20"
                    )));
                }
                self.ack_delay_exponent = v as u8;
            }
            id::MAX_ACK_DELAY => {
                let v = int()?;
                if v >= MAX_ACK_DELAY_LIMIT_MS {
                    return Err(TransportError::transport_parameter(format!(
                        "max_ack_delay {v} not below 2^14"
                    )));
                }
                self.max_ack_delay = v;
            }
            id::DISABLE_ACTIVE_MIGRATION => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
                //# This parameter is a zero-length value.
                if !value.is_empty() {
                    return Err(TransportError::transport_parameter(
                        "disable_active_migration has a value",
                    ));
                }
                self.disable_active_migration = true;
            }
            id::PREFERRED_ADDRESS => {
                self.preferred_address = Some(PreferredAddress::decode(value)?)
            }
            id::ACTIVE_CONNECTION_ID_LIMIT => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
                //# The value of the active_connection_id_limit parameter MUST be at least 2.
                //# An endpoint that receives a value less than 2 MUST close the connection
                //# with an error of type TRANSPORT_PARAMETER_ERROR.
                let v = int()?;
                if v < DEFAULT_ACTIVE_CONNECTION_ID_LIMIT {
                    return Err(TransportError::transport_parameter(format!(
                        "active_connection_id_limit {v} below 2"
                    )));
                }
                self.active_connection_id_limit = v;
            }
            id::INITIAL_SOURCE_CONNECTION_ID => self.initial_source_connection_id = Some(cid()?),
            id::RETRY_SOURCE_CONNECTION_ID => self.retry_source_connection_id = Some(cid()?),
            id::MAX_DATAGRAM_FRAME_SIZE => self.max_datagram_frame_size = Some(int()?),
            id::VERSION_INFORMATION => {
                self.version_information = Some(decode_version_information(value)?)
            }
            id::INITIAL_MAX_PATH_ID => {
                //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-2.1
                //# If an initial_max_path_id transport parameter value higher than 2<sup>32</sup>-1
                //# is received, the receiver MUST close the connection with an error of type
                //# TRANSPORT_PARAMETER_ERROR.
                let v = int()?;
                let path = u32::try_from(v).map_err(|_| {
                    TransportError::transport_parameter(format!(
                        "initial_max_path_id {v} above 2^32 - 1"
                    ))
                })?;
                self.initial_max_path_id = Some(PathId(path));
            }
            //= https://www.rfc-editor.org/rfc/rfc9000#section-7.4.2
            //# An
            //# endpoint MUST ignore transport parameters that it does not support.
            _ => {}
        }
        Ok(())
    }
}

/// An integer parameter: exactly one varint filling the value.
fn decode_int(id: u64, mut value: &[u8]) -> Result<u64, TransportError> {
    let v = value.get_var_u64();
    match v {
        Ok(v) if value.is_empty() => Ok(v),
        _ => Err(TransportError::transport_parameter(format!(
            "parameter {id:#x} is not a single variable-length integer"
        ))),
    }
}

/// The version_information parameter.
fn decode_version_information(value: &[u8]) -> Result<VersionInformation, TransportError> {
    //= https://www.rfc-editor.org/rfc/rfc9368#section-4
    //# If that leads to a parsing failure (for example, if it is too short or if
    //# its length is not divisible by four), then the endpoint MUST close the
    //# connection; if the connection was using QUIC version 1, that connection closure
    //# MUST use a transport error of type TRANSPORT_PARAMETER_ERROR.
    if value.is_empty() || !value.len().is_multiple_of(4) {
        return Err(TransportError::transport_parameter(
            "version_information is not a non-empty list of 4-byte versions",
        ));
    }
    let mut versions = value
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    let chosen = versions.next().unwrap_or(0);
    let available: Vec<u32> = versions.collect();
    //= https://www.rfc-editor.org/rfc/rfc9368#section-4
    //# If an endpoint receives a Chosen Version equal to zero, or any Available Version
    //# equal to zero, it MUST treat it as a parsing failure.
    if chosen == 0 || available.contains(&0) {
        return Err(TransportError::transport_parameter(
            "version_information lists version 0",
        ));
    }
    Ok(VersionInformation { chosen, available })
}

/// A connection ID parameter of at most 20 bytes.
fn decode_cid(id: u64, value: &[u8]) -> Result<ConnectionId, TransportError> {
    ConnectionId::try_new(value).ok_or_else(|| {
        TransportError::transport_parameter(format!(
            "connection ID parameter {id:#x} longer than 20 bytes"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TransportErrorCode;
    use proptest::prelude::*;

    fn param(id: u64, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_param(&mut out, id, value);
        out
    }

    fn int_param(id: u64, v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_int_param(&mut out, id, v);
        out
    }

    fn rejects(side: Side, bytes: &[u8]) {
        let err = TransportParameters::decode(side, bytes).unwrap_err();
        assert_eq!(
            err.code,
            TransportErrorCode::TRANSPORT_PARAMETER_ERROR,
            "{err}"
        );
    }

    fn full_server_params() -> TransportParameters {
        TransportParameters {
            original_destination_connection_id: Some(ConnectionId::new(&[1; 8])),
            max_idle_timeout: 30_000,
            stateless_reset_token: Some(ResetToken([9; 16])),
            max_udp_payload_size: 1452,
            initial_max_data: 1 << 20,
            initial_max_stream_data_bidi_local: 1 << 16,
            initial_max_stream_data_bidi_remote: 1 << 17,
            initial_max_stream_data_uni: 1 << 18,
            initial_max_streams_bidi: 100,
            initial_max_streams_uni: 1 << 60,
            ack_delay_exponent: 20,
            max_ack_delay: (1 << 14) - 1,
            disable_active_migration: true,
            preferred_address: Some(PreferredAddress {
                ipv4: Some(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 443)),
                ipv6: None,
                connection_id: ConnectionId::new(&[2; 20]),
                stateless_reset_token: ResetToken([3; 16]),
            }),
            active_connection_id_limit: 8,
            initial_source_connection_id: Some(ConnectionId::new(&[4; 8])),
            retry_source_connection_id: Some(ConnectionId::new(&[])),
            max_datagram_frame_size: Some(65535),
            initial_max_path_id: Some(PathId(u32::MAX)),
            version_information: Some(VersionInformation {
                chosen: crate::packet::VERSION_2,
                available: vec![crate::packet::VERSION_2, crate::packet::VERSION_1],
            }),
        }
    }

    #[test]
    fn version_information_must_be_whole_nonzero_versions() {
        for bad in [
            &[][..],
            &[0, 0, 0, 1, 0][..],
            &[0, 0, 0, 0][..],
            &[0, 0, 0, 1, 0, 0, 0, 0][..],
        ] {
            let err = TransportParameters::decode(Side::Client, &param(0x11, bad)).unwrap_err();
            assert_eq!(
                err.code,
                TransportErrorCode::TRANSPORT_PARAMETER_ERROR,
                "{bad:?}"
            );
        }
        let p = TransportParameters::decode(Side::Client, &param(0x11, &[0, 0, 0, 1])).unwrap();
        assert_eq!(
            p.version_information,
            Some(VersionInformation {
                chosen: 1,
                available: vec![]
            })
        );
    }

    #[test]
    fn full_roundtrip_and_defaults() {
        let p = full_server_params();
        let mut out = Vec::new();
        p.encode(&mut out);
        assert_eq!(TransportParameters::decode(Side::Server, &out).unwrap(), p);
        // Empty input gives the RFC defaults.
        let d = TransportParameters::decode(Side::Client, &[]).unwrap();
        assert_eq!(d, TransportParameters::default());
        assert_eq!(d.max_udp_payload_size, 65527);
        assert_eq!(d.ack_delay_exponent, 3);
        assert_eq!(d.max_ack_delay, 25);
        assert_eq!(d.active_connection_id_limit, 2);
        // A default client set still carries GREASE and decodes to itself.
        let c = TransportParameters {
            initial_source_connection_id: Some(ConnectionId::new(&[5; 4])),
            ..Default::default()
        };
        let mut out = Vec::new();
        c.encode(&mut out);
        assert_eq!(TransportParameters::decode(Side::Client, &out).unwrap(), c);
    }

    #[test]
    fn grease_is_reserved_and_ignored() {
        let mut out = Vec::new();
        TransportParameters::default().encode(&mut out);
        let mut b = &out[..];
        let id = b.get_var_u64().unwrap();
        assert_eq!(id % 31, 27);
        // Unknown parameters with any content are ignored.
        let mut unknown = param(0x1234, &[1, 2, 3]);
        unknown.extend(param(31 * 5 + 27, &[]));
        assert_eq!(
            TransportParameters::decode(Side::Server, &unknown).unwrap(),
            TransportParameters::default()
        );
    }

    #[test]
    fn duplicates_rejected() {
        let mut b = int_param(id::INITIAL_MAX_DATA, 5);
        b.extend(int_param(id::INITIAL_MAX_DATA, 6));
        rejects(Side::Server, &b);
        let mut b = param(0x1234, &[]);
        b.extend(param(0x1234, &[]));
        rejects(Side::Server, &b);
    }

    #[test]
    fn server_only_parameters_from_client() {
        for (id, value) in [
            (id::ORIGINAL_DESTINATION_CONNECTION_ID, vec![1; 8]),
            (id::STATELESS_RESET_TOKEN, vec![0; 16]),
            (id::RETRY_SOURCE_CONNECTION_ID, vec![1; 8]),
            (id::PREFERRED_ADDRESS, {
                let mut v = Vec::new();
                full_server_params()
                    .preferred_address
                    .unwrap()
                    .encode(&mut v);
                v
            }),
        ] {
            let b = param(id, &value);
            rejects(Side::Client, &b);
            assert!(TransportParameters::decode(Side::Server, &b).is_ok());
        }
    }

    #[test]
    fn value_limits() {
        let cases: &[(u64, u64, bool)] = &[
            (id::MAX_UDP_PAYLOAD_SIZE, 1199, false),
            (id::MAX_UDP_PAYLOAD_SIZE, 1200, true),
            (id::ACK_DELAY_EXPONENT, 21, false),
            (id::ACK_DELAY_EXPONENT, 20, true),
            (id::MAX_ACK_DELAY, 1 << 14, false),
            (id::MAX_ACK_DELAY, (1 << 14) - 1, true),
            (id::ACTIVE_CONNECTION_ID_LIMIT, 1, false),
            (id::ACTIVE_CONNECTION_ID_LIMIT, 0, false),
            (id::ACTIVE_CONNECTION_ID_LIMIT, 2, true),
            (id::INITIAL_MAX_STREAMS_BIDI, (1 << 60) + 1, false),
            (id::INITIAL_MAX_STREAMS_UNI, (1 << 60) + 1, false),
            (id::INITIAL_MAX_STREAMS_UNI, 1 << 60, true),
            (id::INITIAL_MAX_PATH_ID, 1 << 32, false),
            (id::INITIAL_MAX_PATH_ID, (1 << 32) - 1, true),
        ];
        for &(id, v, ok) in cases {
            let b = int_param(id, v);
            let r = TransportParameters::decode(Side::Server, &b);
            assert_eq!(r.is_ok(), ok, "param {id:#x} = {v}: {r:?}");
            if !ok {
                rejects(Side::Server, &b);
            }
        }
    }

    #[test]
    fn malformed_lengths() {
        // Integer parameter with trailing bytes, or empty.
        rejects(Side::Server, &param(id::INITIAL_MAX_DATA, &[0x05, 0x00]));
        rejects(Side::Server, &param(id::INITIAL_MAX_DATA, &[]));
        // Varint claiming more bytes than the value holds.
        rejects(Side::Server, &param(id::INITIAL_MAX_DATA, &[0x80, 0x01]));
        // Length beyond the extension.
        rejects(Side::Server, &[0x04, 0x05, 0x01]);
        // Truncated ID / length.
        rejects(Side::Server, &[0x40]);
        rejects(Side::Server, &[0x04]);
        // Reset token of the wrong size, non-empty disable_active_migration, long CIDs.
        rejects(Side::Server, &param(id::STATELESS_RESET_TOKEN, &[0; 15]));
        rejects(Side::Server, &param(id::DISABLE_ACTIVE_MIGRATION, &[0]));
        rejects(
            Side::Server,
            &param(id::INITIAL_SOURCE_CONNECTION_ID, &[0; 21]),
        );
        // Preferred address: zero-length CID, truncated, trailing bytes.
        let mut pa = Vec::new();
        full_server_params()
            .preferred_address
            .unwrap()
            .encode(&mut pa);
        rejects(
            Side::Server,
            &param(id::PREFERRED_ADDRESS, &pa[..pa.len() - 1]),
        );
        let mut long = pa.clone();
        long.push(0);
        rejects(Side::Server, &param(id::PREFERRED_ADDRESS, &long));
        let mut zero_cid = pa[..24].to_vec();
        zero_cid.push(0);
        zero_cid.extend_from_slice(&[0; 16]);
        rejects(Side::Server, &param(id::PREFERRED_ADDRESS, &zero_cid));
    }

    #[test]
    fn every_error_is_transport_parameter_error() {
        // Any prefix of a valid encoding either decodes or fails with the right code.
        let mut out = Vec::new();
        full_server_params().encode(&mut out);
        for n in 0..out.len() {
            if let Err(e) = TransportParameters::decode(Side::Server, &out[..n]) {
                assert_eq!(e.code, TransportErrorCode::TRANSPORT_PARAMETER_ERROR);
            }
        }
    }

    proptest! {
        #[test]
        fn roundtrip(
            idle in 0u64..(1 << 62),
            data in 0u64..(1 << 62),
            streams in 0u64..=(1 << 60),
            exp in 0u8..=20,
            delay in 0u64..(1 << 14),
            limit in 2u64..(1 << 62),
            udp in 1200u64..(1 << 62),
            dgram in proptest::option::of(0u64..(1 << 62)),
            path in proptest::option::of(any::<u32>()),
            scid in proptest::collection::vec(any::<u8>(), 0..=20),
            migration in any::<bool>(),
        ) {
            let p = TransportParameters {
                max_idle_timeout: idle,
                initial_max_data: data,
                initial_max_streams_bidi: streams,
                ack_delay_exponent: exp,
                max_ack_delay: delay,
                active_connection_id_limit: limit,
                max_udp_payload_size: udp,
                max_datagram_frame_size: dgram,
                initial_max_path_id: path.map(PathId),
                initial_source_connection_id: Some(ConnectionId::new(&scid)),
                disable_active_migration: migration,
                ..Default::default()
            };
            let mut out = Vec::new();
            p.encode(&mut out);
            prop_assert_eq!(TransportParameters::decode(Side::Client, &out).unwrap(), p);
        }

        #[test]
        fn arbitrary_input_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            for side in [Side::Client, Side::Server] {
                if let Err(e) = TransportParameters::decode(side, &bytes) {
                    prop_assert_eq!(e.code, TransportErrorCode::TRANSPORT_PARAMETER_ERROR);
                }
            }
        }
    }
}
