//! A userspace UDP relay that loses datagrams on purpose: the lab tool for loss and path
//! failure on loopback, where no netem is at hand.
//!
//! The relay listens on one address and forwards every datagram from a client to one
//! upstream address, like a NAT: each client source address gets its own upstream socket,
//! so the upstream peer sees one distinct 4-tuple per client path, and answers go back to
//! the client address they belong to. Each datagram, in either direction, is dropped with a
//! configured probability drawn from a seeded generator, and all traffic of a client IP
//! address can be blackholed at any time ([`Relay::blackhole`]), which kills the paths
//! from that address as an unplugged interface would.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

/// Largest datagram the relay forwards.
const MAX_DATAGRAM: usize = 65_535;

/// How a [`Relay`] forwards.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Address the clients send to.
    pub listen: SocketAddr,
    /// Where their datagrams go.
    pub upstream: SocketAddr,
    /// Probability (0 to 1) that a datagram, in either direction, is dropped.
    pub loss: f64,
    /// Seed of the drop decisions.
    pub seed: u64,
}

/// What a relay did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Datagrams forwarded (both directions).
    pub forwarded: u64,
    /// Datagrams dropped at random.
    pub dropped: u64,
    /// Datagrams dropped because their client IP is blackholed.
    pub blackholed: u64,
}

#[derive(Debug)]
struct Shared {
    loss: f64,
    rng: Mutex<ChaCha8Rng>,
    blackholed: Mutex<HashSet<IpAddr>>,
    forwarded: AtomicU64,
    dropped: AtomicU64,
    blackholed_count: AtomicU64,
}

impl Shared {
    /// Whether a datagram from or to `client` goes through, counting the verdict.
    fn pass(&self, client: SocketAddr) -> bool {
        let blackholed = self
            .blackholed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&client.ip());
        if blackholed {
            self.blackholed_count.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let lost = self.loss > 0.0
            && self
                .rng
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .random_bool(self.loss.min(1.0));
        if lost {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.forwarded.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// A running relay; dropping it stops it.
#[derive(Debug)]
pub struct Relay {
    local: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Relay {
    /// Binds the listening socket and starts forwarding (on the current Tokio runtime).
    pub async fn start(config: RelayConfig) -> std::io::Result<Relay> {
        if !(0.0..=1.0).contains(&config.loss) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("loss {} is not a probability", config.loss),
            ));
        }
        let socket = Arc::new(UdpSocket::bind(config.listen).await?);
        let local = socket.local_addr()?;
        let shared = Arc::new(Shared {
            loss: config.loss,
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(config.seed)),
            blackholed: Mutex::new(HashSet::new()),
            forwarded: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            blackholed_count: AtomicU64::new(0),
        });
        let task = tokio::spawn(forward_from_clients(
            socket,
            config.upstream,
            shared.clone(),
        ));
        Ok(Relay {
            local,
            shared,
            task,
        })
    }

    /// The address clients send to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Drops, from now on, every datagram from or to clients with IP address `ip`.
    pub fn blackhole(&self, ip: IpAddr) {
        self.shared
            .blackholed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(ip);
    }

    /// Forwards the traffic of `ip` again.
    pub fn restore(&self, ip: IpAddr) {
        self.shared
            .blackholed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&ip);
    }

    /// What the relay did so far.
    pub fn stats(&self) -> RelayStats {
        RelayStats {
            forwarded: self.shared.forwarded.load(Ordering::Relaxed),
            dropped: self.shared.dropped.load(Ordering::Relaxed),
            blackholed: self.shared.blackholed_count.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One client address's upstream socket and the task that forwards its answers.
struct Flow {
    out: Arc<UdpSocket>,
    answers: JoinHandle<()>,
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.answers.abort();
    }
}

/// Reads from clients, creating one upstream socket (and answer task) per client address.
async fn forward_from_clients(socket: Arc<UdpSocket>, upstream: SocketAddr, shared: Arc<Shared>) {
    let mut flows: HashMap<SocketAddr, Flow> = HashMap::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let unspecified: SocketAddr = if upstream.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    loop {
        let Ok((len, client)) = socket.recv_from(&mut buf).await else {
            // ICMP errors from earlier sends surface here on some systems; keep going.
            tokio::task::yield_now().await;
            continue;
        };
        let out = match flows.get(&client) {
            Some(flow) => flow.out.clone(),
            None => {
                let Ok(out) = UdpSocket::bind(unspecified).await else {
                    continue;
                };
                let out = Arc::new(out);
                let answers = tokio::spawn(forward_answers(
                    out.clone(),
                    socket.clone(),
                    client,
                    shared.clone(),
                ));
                flows.insert(
                    client,
                    Flow {
                        out: out.clone(),
                        answers,
                    },
                );
                out
            }
        };
        if shared.pass(client) {
            // A full socket buffer loses the datagram, as a congested link would.
            let _ = out.send_to(&buf[..len], upstream).await;
        }
    }
}

/// Sends what the upstream peer answers on one flow back to its client.
async fn forward_answers(
    upstream: Arc<UdpSocket>,
    listen: Arc<UdpSocket>,
    client: SocketAddr,
    shared: Arc<Shared>,
) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let Ok(len) = upstream.recv(&mut buf).await else {
            tokio::task::yield_now().await;
            continue;
        };
        if shared.pass(client) {
            let _ = listen.send_to(&buf[..len], client).await;
        }
    }
}
