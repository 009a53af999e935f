//! Compatible version negotiation (RFC 9368) between QUIC versions 1 and 2 (RFC 9369).
//!
//! The client sends its first Initial in its chosen version and lists every version it
//! speaks in the version_information transport parameter. A server that prefers a
//! compatible version the client also lists answers in that version: it reads the client's
//! version_information from the ClientHello in the first Initial ([`client_offer`]) before
//! it creates the connection ([`negotiate`]). The client follows as soon as it receives
//! the server's first Initial in the new version. Once the handshake has authenticated the
//! transport parameters, each side checks the other's version_information
//! ([`check_peer`]) so that an attacker cannot have forced a downgrade.

use crate::error::TransportError;
use crate::frame::{Frame, FrameIter};
use crate::packet::{VERSION_1, VERSION_2, is_compatible};
use crate::shared::Side;
use crate::transport_parameters::{TransportParameters, VersionInformation};
use bytes::Bytes;

/// The version_information an endpoint sends, if any: `chosen` is the version of the
/// handshake packets, `available` the versions it speaks in order of preference.
///
/// An endpoint that speaks only version 1 sends none, as before this extension existed.
//= https://www.rfc-editor.org/rfc/rfc9369#section-4
//# Any QUIC endpoint that supports QUIC version 2 MUST send, process, and
//# validate the version_information transport parameter specified in [QUIC-VN] to
//# prevent version downgrade attacks.
pub fn local_information(chosen: u32, available: &[u32]) -> Option<VersionInformation> {
    let mut available = available.to_vec();
    //= https://www.rfc-editor.org/rfc/rfc9368#section-3
    //# Note that the
    //# version in the Chosen Version field MUST be included in this list to allow the
    //# client to communicate the Chosen Version's preference.
    if !available.contains(&chosen) {
        available.push(chosen);
    }
    (available != [VERSION_1]).then_some(VersionInformation { chosen, available })
}

/// The version a server answers a client Initial of `client_version` in: its most
/// preferred version (`server_versions` in order) that the client lists in `offer` and
/// that is compatible with the client's; the client's own version without an offer.
pub fn negotiate(
    server_versions: &[u32],
    client_version: u32,
    offer: Option<&VersionInformation>,
) -> u32 {
    let Some(offer) = offer else {
        return client_version;
    };
    //= https://www.rfc-editor.org/rfc/rfc9368#section-2.3
    //# In order to perform compatible version negotiation, the server MUST select one
    //# of these versions that it (1) supports and (2) knows the client's Chosen
    //# Version is compatible with.
    server_versions
        .iter()
        .copied()
        .find(|&v| {
            v == client_version
                || (offer.available.contains(&v) && is_compatible(client_version, v))
        })
        .unwrap_or(client_version)
}

/// The version_information in the ClientHello carried by the decrypted payload of a
/// client's first Initial packet. `None` if the payload does not hold the whole ClientHello
/// from offset 0 (the server then stays in the client's version) or the ClientHello
/// carries no valid parameter.
pub fn client_offer(initial_payload: &[u8]) -> Option<VersionInformation> {
    let mut crypto: Vec<(u64, Bytes)> = FrameIter::new(Bytes::copy_from_slice(initial_payload))
        .map_while(Result::ok)
        .filter_map(|frame| match frame {
            Frame::Crypto(c) => Some((c.offset, c.data)),
            _ => None,
        })
        .collect();
    crypto.sort_by_key(|(offset, _)| *offset);
    let mut stream = Vec::new();
    for (offset, data) in crypto {
        if offset != stream.len() as u64 {
            break;
        }
        stream.extend_from_slice(&data);
    }
    let raw = client_hello_transport_parameters(&stream)?;
    TransportParameters::decode(Side::Client, raw)
        .ok()?
        .version_information
}

/// The quic_transport_parameters extension (0x39) of the TLS ClientHello at the start of
/// `crypto` (RFC 8446 section 4.1.2), if the whole message is there.
fn client_hello_transport_parameters(crypto: &[u8]) -> Option<&[u8]> {
    /// Splits `n` bytes off the front of `buf`.
    fn take<'a>(buf: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, tail) = buf.split_at_checked(n)?;
        *buf = tail;
        Some(head)
    }
    /// Splits off a field preceded by a big-endian length of `len_bytes` bytes.
    fn vector<'a>(buf: &mut &'a [u8], len_bytes: usize) -> Option<&'a [u8]> {
        let len = take(buf, len_bytes)?
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        take(buf, len)
    }
    const CLIENT_HELLO: u8 = 1;
    const QUIC_TRANSPORT_PARAMETERS: u16 = 0x39;
    let mut buf = crypto;
    if take(&mut buf, 1)? != [CLIENT_HELLO] {
        return None;
    }
    let mut body = vector(&mut buf, 3)?;
    take(&mut body, 2 + 32)?; // legacy_version, random
    vector(&mut body, 1)?; // legacy_session_id
    vector(&mut body, 2)?; // cipher_suites
    vector(&mut body, 1)?; // legacy_compression_methods
    let mut extensions = vector(&mut body, 2)?;
    while !extensions.is_empty() {
        let ty = take(&mut extensions, 2)?;
        let data = vector(&mut extensions, 2)?;
        if u16::from_be_bytes([ty[0], ty[1]]) == QUIC_TRANSPORT_PARAMETERS {
            return Some(data);
        }
    }
    None
}

/// Checks the peer's version_information once the handshake authenticated it.
///
/// `initial_version` is the version of the client's first Initial, `version` the
/// negotiated one (the version of the handshake packets), `local` what this endpoint sent.
pub fn check_peer(
    side: Side,
    initial_version: u32,
    version: u32,
    local: Option<&VersionInformation>,
    peer: Option<&VersionInformation>,
) -> Result<(), TransportError> {
    let Some(peer) = peer else {
        //= https://www.rfc-editor.org/rfc/rfc9369#section-4
        //# Any QUIC endpoint that supports QUIC version 2 MUST send, process, and
        //# validate the version_information transport parameter
        if version != initial_version || (version == VERSION_2 && local.is_some()) {
            return Err(TransportError::version_negotiation(
                "version_information missing after a version switch or in version 2",
            ));
        }
        return Ok(());
    };
    let expected = match side {
        // A server checks the client's chosen version against its first Initial.
        Side::Server => initial_version,
        Side::Client => version,
    };
    // A Chosen Version other than the version in use means the long headers were
    // tampered with.
    if peer.chosen != expected {
        return Err(TransportError::version_negotiation(format!(
            "peer's chosen version {:#010x}, {expected:#010x} in use",
            peer.chosen
        )));
    }
    // A server that could have picked a version both prefer but stayed in the client's
    // version was not the one that answered (or its answer was altered): a client that
    // lists a compatible version the server's own list prefers expects the switch.
    if side == Side::Client
        && let Some(local) = local
    {
        let would_pick = negotiate(&peer.available, initial_version, Some(local));
        if peer.available.contains(&version) && would_pick != version {
            return Err(TransportError::version_negotiation(format!(
                "server prefers {would_pick:#010x}, the connection is in {version:#010x}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(chosen: u32, available: &[u32]) -> VersionInformation {
        VersionInformation {
            chosen,
            available: available.to_vec(),
        }
    }

    #[test]
    fn v1_only_endpoints_send_nothing() {
        assert_eq!(local_information(VERSION_1, &[]), None);
        assert_eq!(local_information(VERSION_1, &[VERSION_1]), None);
        assert_eq!(
            local_information(VERSION_2, &[]),
            Some(info(VERSION_2, &[VERSION_2]))
        );
        assert_eq!(
            local_information(VERSION_1, &[VERSION_2]),
            Some(info(VERSION_1, &[VERSION_2, VERSION_1]))
        );
    }

    #[test]
    fn server_switches_only_to_an_offered_preferred_version() {
        let offer = info(VERSION_1, &[VERSION_2, VERSION_1]);
        assert_eq!(
            negotiate(&[VERSION_2, VERSION_1], VERSION_1, Some(&offer)),
            VERSION_2
        );
        assert_eq!(
            negotiate(&[VERSION_1, VERSION_2], VERSION_1, Some(&offer)),
            VERSION_1
        );
        assert_eq!(
            negotiate(&[VERSION_2, VERSION_1], VERSION_1, None),
            VERSION_1
        );
        let v1_only = info(VERSION_1, &[VERSION_1]);
        assert_eq!(
            negotiate(&[VERSION_2, VERSION_1], VERSION_1, Some(&v1_only)),
            VERSION_1
        );
    }

    #[test]
    fn downgrades_and_mismatches_are_version_negotiation_errors() {
        use crate::error::TransportErrorCode as Code;
        let client = info(VERSION_1, &[VERSION_2, VERSION_1]);
        let server = info(VERSION_2, &[VERSION_2, VERSION_1]);
        // The normal switch, both ways.
        check_peer(
            Side::Client,
            VERSION_1,
            VERSION_2,
            Some(&client),
            Some(&server),
        )
        .unwrap();
        check_peer(
            Side::Server,
            VERSION_1,
            VERSION_2,
            Some(&server),
            Some(&client),
        )
        .unwrap();
        let fails = |r: Result<(), TransportError>| {
            assert_eq!(r.unwrap_err().code, Code::VERSION_NEGOTIATION_ERROR)
        };
        // The server claims a chosen version other than the packets'.
        fails(check_peer(
            Side::Client,
            VERSION_1,
            VERSION_2,
            Some(&client),
            Some(&info(VERSION_1, &[VERSION_2, VERSION_1])),
        ));
        // The client's Initial was rewritten from v2 to v1 (or its parameter from v1).
        fails(check_peer(
            Side::Server,
            VERSION_2,
            VERSION_2,
            Some(&server),
            Some(&client),
        ));
        // A server preferring v2 answered in v1: someone kept the connection in v1.
        let stayed = info(VERSION_1, &[VERSION_2, VERSION_1]);
        fails(check_peer(
            Side::Client,
            VERSION_1,
            VERSION_1,
            Some(&client),
            Some(&stayed),
        ));
        // A switch without the parameter.
        fails(check_peer(
            Side::Client,
            VERSION_1,
            VERSION_2,
            Some(&client),
            None,
        ));
        // A v1-only peer without the parameter is fine.
        check_peer(Side::Client, VERSION_1, VERSION_1, Some(&client), None).unwrap();
    }
}
