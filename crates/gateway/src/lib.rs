//! # polypath-gateway
//!
//! A QoS-aware multipath gateway after CHYMP and the MPF-Gateway ("To Poly or Not to Poly:
//! QoS-Aware Multi-Path Networking"): a client gateway and a server gateway
//! that carry unmodified applications' IP traffic over every link between them.
//!
//! ```text
//!  apps ─ TUN ─ client gateway ══ one Multipath QUIC connection, a path per interface ══
//!        server gateway ─ TUN ─ forwarding / NAT ─ destination network
//! ```
//!
//! * **Data plane** ([`framing`]): the client reads IP packets from its TUN device (routes
//!   decide what enters), classifies them ([`policy`], [`classify`]), queues them per class
//!   ([`queue`]: strict or weighted priorities, rate limits) and sends each in a QUIC
//!   DATAGRAM frame with CONNECT-IP's framing (RFC 9484 Context IDs), tagged with its
//!   class's stack [`QosClass`](polypath_quic::sched::QosClass) so the connection's
//!   [`QosPolicy`](polypath_quic::sched::QosPolicy) scheduler applies that class's mode:
//!   path selection, failover, QoS-compliant fallback, duplication or aggregation. The
//!   server writes the packets to its TUN device and routes (and, with `nat`, masquerades)
//!   them; replies come back the same way. Packets too big for the tunnel get an ICMP
//!   "packet too big" ([`icmp`]). TCP classes can instead be terminated at the client and
//!   carried on QUIC streams or kernel MPTCP ([`proxy`]).
//! * **Measurement** ([`pmf`]): probes per interface for one-way delay (timestamps),
//!   round-trip time, loss and a bounded capacity test; passive figures from the stack.
//! * **QoS manager** ([`qos`]): checks each class's requirements against the measurements,
//!   switches with hysteresis, logs every decision with its reason and puts the result in
//!   force on both gateways.
//! * **Control plane** ([`control`]): session set-up with a pre-shared token (an
//!   unauthenticated client gets nothing), many clients per server with their own policies
//!   and address pools, policy reload without a restart.
//! * **Operations** ([`status`]): Prometheus `/metrics`, JSON `/status`, structured logs.
//!
//! [`client::run`] and [`server::run`] are `polypath gw client` and `polypath gw server`.
#![warn(missing_docs)]

pub mod classify;
pub mod client;
pub mod control;
pub mod framing;
pub mod icmp;
pub mod pmf;
pub mod policy;
pub mod proxy;
pub mod qos;
pub mod queue;
pub mod server;
pub mod status;
pub mod tun;

use std::sync::Arc;
use std::time::Duration;

use polypath_quic::TransportConfig;
use polypath_quic::sched::QosPolicyFactory;

/// The ALPN protocol of the gateways' QUIC connection.
pub const ALPN: &[u8] = b"polypath-gw/1";

/// Highest path ID the gateways allow (up to 9 interfaces).
pub const MAX_PATH_ID: u32 = 8;

/// Bytes of datagrams the client lets wait in the connection per stack class before it
/// holds packets in its own sending buffer (where priorities and rate limits apply).
pub const STACK_QUEUE_BYTES: usize = 48 * 1024;

/// The transport both gateways use: Multipath QUIC with the QoS policy scheduler (its
/// per-class configuration comes from the client's QoS manager), CUBIC per path, datagrams
/// on, keep-alives so an idle tunnel stays up.
pub fn transport_config(cc: &str) -> Result<Arc<TransportConfig>, String> {
    let congestion_controller = polypath_quic::cc::factory_by_name(cc).ok_or_else(|| {
        format!("unknown congestion controller {cc:?} (known: cubic, newreno, bbr, lia, olia)")
    })?;
    Ok(Arc::new(TransportConfig {
        scheduler: Arc::new(QosPolicyFactory::default()),
        congestion_controller,
        initial_max_path_id: Some(MAX_PATH_ID),
        keep_alive_interval: Some(Duration::from_secs(1)),
        // An idle path's RTT estimate stays current, so minimum-RTT-first aggregation does
        // not keep avoiding a path for a queueing delay it had long ago.
        idle_path_probe_interval: Some(Duration::from_millis(50)),
        max_idle_timeout: Some(Duration::from_secs(30)),
        datagram_send_buffer: 1024 * 1024,
        datagram_receive_buffer: 4 * 1024 * 1024,
        ..TransportConfig::default()
    }))
}

/// Parses a JSON document of type `T` from `text`; errors name `file`, the line and the
/// field, as policy errors do.
pub fn parse_json<T: serde::de::DeserializeOwned>(
    text: &str,
    file: &str,
) -> Result<T, policy::PolicyError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        policy::PolicyError {
            file: file.to_string(),
            line: (inner.line() > 0).then_some(inner.line()),
            field: (path != "." && !path.is_empty()).then_some(path),
            message: policy::strip_position(&inner.to_string()),
        }
    })?;
    de.end().map_err(|e| policy::PolicyError {
        file: file.to_string(),
        line: Some(e.line()),
        field: None,
        message: policy::strip_position(&e.to_string()),
    })?;
    Ok(value)
}
