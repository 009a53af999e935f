//! A NAT on loopback that rebinds in the middle of a connection, standing in for the QUIC
//! Interop Runner's network simulator in its `rebind-port` and `rebind-addr` cases.
//!
//! The client sends to the NAT's [`Nat::front`] address as if it were the server; the NAT
//! forwards each datagram to the server from its "outside" socket and sends the server's
//! answers back to the client from the front. A rebinding replaces the outside socket by a
//! new one (a new port, or a new address and port) and closes the old one, as a NAT whose
//! mapping expired does: the server then sees the client's packets come from a new address
//! and must follow it (RFC 9000 section 9.3), validating it with PATH_CHALLENGE; what it
//! still sends to the old address is lost.
//!
//! Rebindings happen after a number of bytes forwarded (both directions together), so that
//! they fall inside the transfer whatever the machine's speed. Like a real NAT's new
//! mapping, a rebinding takes effect at the client's first datagram after that point,
//! which leaves from the new socket: the server always hears the new address. (Rebinding
//! on the datagram that crossed the point instead would, when that was the client's, send
//! it from the old address and lose the server's answers to it; a client that had nothing
//! more to acknowledge would then never speak again, and the connection would idle out.)
//!
//! The NAT can also delay every datagram by a fixed time each way, giving loopback a round
//! trip like the runner network's, so that what depends on the handshake taking time
//! (0-RTT data sent before it completes) does not depend on how fast the machine is.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use polypath_io::relay::DelayLine;
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

/// What a rebinding changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rebinding {
    /// A new port on the same address (`rebind-port`).
    Port,
    /// A new IPv4 loopback address and port (`rebind-addr`): 127.0.0.11, 127.0.0.12, ...
    Address,
}

/// When and how the NAT rebinds.
#[derive(Debug, Clone)]
pub struct RebindPlan {
    /// What each rebinding changes.
    pub kind: Rebinding,
    /// Rebind when the bytes forwarded (both directions) pass each of these, ascending; the
    /// rebinding takes effect at the client's next datagram.
    pub after_bytes: Vec<u64>,
}

/// What the NAT does.
#[derive(Debug, Clone, Default)]
pub struct NatPlan {
    /// Rebind as this says, or never.
    pub rebind: Option<RebindPlan>,
    /// Added to every datagram's trip, in each direction (so the round trip grows by
    /// twice this).
    pub one_way_delay: Duration,
}

/// What the NAT did.
#[derive(Debug, Clone, Default)]
pub struct NatLog {
    /// The outside addresses the server saw the client at, in order (the first is the one
    /// of the handshake; one more per rebinding).
    pub outside: Vec<SocketAddr>,
    /// Datagrams and bytes forwarded from the client to the server.
    pub up: (u64, u64),
    /// Datagrams and bytes forwarded from the server to the client.
    pub down: (u64, u64),
    /// Why forwarding stopped early, if it did (a socket error).
    pub error: Option<String>,
}

/// A running NAT; it stops when dropped.
#[derive(Debug)]
pub struct Nat {
    front: SocketAddr,
    log: Arc<Mutex<NatLog>>,
    tasks: Vec<JoinHandle<()>>,
}

/// The outside address of the `n`-th rebinding (0: the first binding) of `kind`, on the
/// loopback family of `server`.
fn outside_ip(kind: Rebinding, n: usize, server: SocketAddr) -> IpAddr {
    match (kind, server.ip()) {
        (Rebinding::Address, IpAddr::V4(_)) if n > 0 => {
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + n.min(200) as u8))
        }
        (_, ip) => ip,
    }
}

impl Nat {
    /// Starts a NAT in front of `server` (a loopback address) that does what `plan` says.
    /// Must be called inside a Tokio runtime. Address rebinding needs an IPv4 server (IPv6
    /// loopback has one address).
    pub async fn start(server: SocketAddr, plan: NatPlan) -> std::io::Result<Nat> {
        let kind = plan.rebind.as_ref().map_or(Rebinding::Port, |r| r.kind);
        if kind == Rebinding::Address && server.is_ipv6() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "address rebinding needs an IPv4 loopback server",
            ));
        }
        let front = Arc::new(UdpSocket::bind(SocketAddr::new(server.ip(), 0)).await?);
        let outside = UdpSocket::bind(SocketAddr::new(outside_ip(kind, 0, server), 0)).await?;
        let log = Arc::new(Mutex::new(NatLog {
            outside: vec![outside.local_addr()?],
            ..NatLog::default()
        }));
        let front_addr = front.local_addr()?;
        let tasks = vec![tokio::spawn(forward(
            front,
            Arc::new(outside),
            server,
            plan,
            log.clone(),
        ))];
        Ok(Nat {
            front: front_addr,
            log,
            tasks,
        })
    }

    /// The address clients send to.
    pub fn front(&self) -> SocketAddr {
        self.front
    }

    /// What the NAT has done so far.
    pub fn log(&self) -> NatLog {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The rebindings done so far.
    pub fn rebindings(&self) -> usize {
        self.log().outside.len().saturating_sub(1)
    }
}

impl Drop for Nat {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn forward(
    front: Arc<UdpSocket>,
    mut outside: Arc<UdpSocket>,
    server: SocketAddr,
    plan: NatPlan,
    log: Arc<Mutex<NatLog>>,
) {
    let mut client: Option<SocketAddr> = None;
    let mut up = vec![0u8; 65_536];
    let mut down = vec![0u8; 65_536];
    let mut forwarded = 0u64;
    let (kind, after) = match &plan.rebind {
        Some(r) => (r.kind, r.after_bytes.clone()),
        None => (Rebinding::Port, Vec::new()),
    };
    let mut next = after.into_iter().peekable();
    let (up_line, down_line) = (
        DelayLine::new(plan.one_way_delay),
        DelayLine::new(plan.one_way_delay),
    );
    let fail = |e: std::io::Error| {
        if let Ok(mut l) = log.lock() {
            l.error = Some(e.to_string());
        }
    };
    loop {
        tokio::select! {
            r = front.recv_from(&mut up) => {
                let (n, from) = match r {
                    Ok(x) => x,
                    Err(e) => return fail(e),
                };
                client = Some(from);
                if next.next_if(|&at| forwarded >= at).is_some() {
                    outside = match rebind(kind, server, &log).await {
                        Ok(fresh) => fresh,
                        Err(e) => return fail(e),
                    };
                }
                up_line.send(outside.clone(), &up[..n], server);
                forwarded += n as u64;
                if let Ok(mut l) = log.lock() {
                    l.up.0 += 1;
                    l.up.1 += n as u64;
                }
            }
            r = outside.recv_from(&mut down) => {
                let (n, from) = match r {
                    Ok(x) => x,
                    Err(e) => return fail(e),
                };
                let Some(to) = client.filter(|_| from == server) else { continue };
                down_line.send(front.clone(), &down[..n], to);
                forwarded += n as u64;
                if let Ok(mut l) = log.lock() {
                    l.down.0 += 1;
                    l.down.1 += n as u64;
                }
            }
        }
    }
}

/// A new outside socket for the next rebinding of `kind`, logged. It is bound while the
/// old one is still open, so the port differs.
async fn rebind(
    kind: Rebinding,
    server: SocketAddr,
    log: &Mutex<NatLog>,
) -> std::io::Result<Arc<UdpSocket>> {
    let n = log.lock().map(|l| l.outside.len()).unwrap_or(1);
    let fresh = UdpSocket::bind(SocketAddr::new(outside_ip(kind, n, server), 0)).await?;
    let addr = fresh.local_addr()?;
    if let Ok(mut l) = log.lock() {
        l.outside.push(addr);
    }
    Ok(Arc::new(fresh))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    /// An echo server behind a NAT that rebinds as `kind` after `after_bytes`; a client
    /// sends `datagrams` of 1000 bytes through it, each after the echo of the one before.
    /// Returns the NAT and the source addresses the server saw, in order (each once).
    async fn echo_through_nat(
        kind: Rebinding,
        after_bytes: u64,
        datagrams: u8,
    ) -> (Nat, Vec<SocketAddr>) {
        let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let server_addr = server.local_addr().unwrap();
        let seen = tokio::spawn(async move {
            let mut sources = Vec::new();
            let mut buf = [0u8; 2000];
            for _ in 0..datagrams {
                let (n, from) = server.recv_from(&mut buf).await.unwrap();
                if sources.last() != Some(&from) {
                    sources.push(from);
                }
                server.send_to(&buf[..n], from).await.unwrap();
            }
            sources
        });
        let plan = NatPlan {
            rebind: Some(RebindPlan {
                kind,
                after_bytes: vec![after_bytes],
            }),
            one_way_delay: Duration::ZERO,
        };
        let nat = Nat::start(server_addr, plan).await.unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let mut buf = [0u8; 2000];
        for i in 0..datagrams {
            client.send_to(&[i; 1000], nat.front()).await.unwrap();
            let (n, from) =
                tokio::time::timeout(Duration::from_secs(5), client.recv_from(&mut buf))
                    .await
                    .unwrap_or_else(|_| panic!("no echo of datagram {i}"))
                    .unwrap();
            assert_eq!((n, from, buf[0]), (1000, nat.front(), i));
        }
        let sources = seen.await.unwrap();
        (nat, sources)
    }

    /// The NAT rebinds after 2000 bytes (at the second request): the server sees a second
    /// source address, of a new port (or a new address), and the echoes still come back.
    async fn rebinds(kind: Rebinding) {
        let (nat, sources) = echo_through_nat(kind, 2000, 6).await;
        let log = nat.log();
        assert_eq!(sources, log.outside);
        assert_eq!(nat.rebindings(), 1);
        assert_eq!(log.up, (6, 6000));
        assert_eq!(log.down, (6, 6000));
        assert_ne!(sources[0].port(), sources[1].port());
        match kind {
            Rebinding::Port => assert_eq!(sources[0].ip(), sources[1].ip()),
            Rebinding::Address => assert_ne!(sources[0].ip(), sources[1].ip()),
        }
    }

    /// With a one-way delay, each echo takes at least two delays, and datagrams keep
    /// their order.
    #[tokio::test]
    async fn delay_lengthens_the_round_trip_and_keeps_the_order() {
        let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let server_addr = server.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 2000];
            while let Ok((n, from)) = server.recv_from(&mut buf).await {
                let _ = server.send_to(&buf[..n], from).await;
            }
        });
        let delay = Duration::from_millis(20);
        let plan = NatPlan {
            rebind: None,
            one_way_delay: delay,
        };
        let nat = Nat::start(server_addr, plan).await.unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let sent = Instant::now();
        for i in 0..50u8 {
            client.send_to(&[i; 100], nat.front()).await.unwrap();
        }
        let mut buf = [0u8; 2000];
        for i in 0..50u8 {
            let (n, _) = client.recv_from(&mut buf).await.unwrap();
            assert_eq!((n, buf[0]), (100, i), "out of order");
        }
        assert!(sent.elapsed() >= 2 * delay, "{:?}", sent.elapsed());
        assert_eq!(nat.rebindings(), 0);
    }

    /// The point is crossed by a client's datagram (1000 bytes of 1000): its answer still
    /// comes back, through the old mapping, and the client's next datagram leaves from the
    /// new one. Rebinding at once would lose the answer, and this client, which waits for
    /// it, would never send again.
    #[tokio::test]
    async fn the_answer_to_the_datagram_that_crosses_the_point_comes_back() {
        let (nat, sources) = echo_through_nat(Rebinding::Port, 1000, 2).await;
        assert_eq!(sources, nat.log().outside);
        assert_eq!(nat.rebindings(), 1);
    }

    #[tokio::test]
    async fn port_rebinding_changes_the_port_only() {
        rebinds(Rebinding::Port).await;
    }

    #[tokio::test]
    async fn address_rebinding_changes_the_address() {
        rebinds(Rebinding::Address).await;
    }
}
