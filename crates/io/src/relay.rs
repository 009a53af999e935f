//! A userspace UDP relay that loses and delays datagrams on purpose: the lab tool for loss,
//! delay and path failure on loopback, where no netem is at hand.
//!
//! The relay listens on one address and forwards every datagram from a client to one
//! upstream address, like a NAT: each client source address gets its own upstream socket,
//! so the upstream peer sees one distinct 4-tuple per client path, and answers go back to
//! the client address they belong to. Each datagram, in either direction, is dropped with a
//! configured probability drawn from a seeded generator, and all traffic of a client IP
//! address can be blackholed at any time ([`Relay::blackhole`]), which kills the paths
//! from that address as an unplugged interface would. A fixed one-way delay, the same in
//! both directions, holds each datagram that passes before it is sent on ([`DelayLine`]).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

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
    /// How long each datagram that is not dropped waits before it is sent on, in either
    /// direction (the round-trip time grows by twice this).
    pub one_way_delay: Duration,
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
            config.one_way_delay,
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
async fn forward_from_clients(
    socket: Arc<UdpSocket>,
    upstream: SocketAddr,
    delay: Duration,
    shared: Arc<Shared>,
) {
    let mut flows: HashMap<SocketAddr, Flow> = HashMap::new();
    let outgoing = DelayLine::new(delay);
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
                    DelayLine::new(delay),
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
            outgoing.send(out, &buf[..len], upstream);
        }
    }
}

/// Sends what the upstream peer answers on one flow back to its client.
async fn forward_answers(
    upstream: Arc<UdpSocket>,
    listen: Arc<UdpSocket>,
    client: SocketAddr,
    answers: DelayLine,
    shared: Arc<Shared>,
) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let Ok(len) = upstream.recv(&mut buf).await else {
            tokio::task::yield_now().await;
            continue;
        };
        if shared.pass(client) {
            answers.send(listen.clone(), &buf[..len], client);
        }
    }
}

/// A datagram on its way: when it leaves, from which socket, to where.
type InFlight = (Instant, Arc<UdpSocket>, Vec<u8>, SocketAddr);

/// One direction of a link with a fixed delay: each datagram handed to it is sent, from
/// the socket it names, once the delay has passed since it was handed over. The delay is
/// the same for all, so datagrams leave in the order they came (first in, first out).
/// Dropping the line drops what it still holds.
#[derive(Debug)]
pub struct DelayLine {
    delay: Duration,
    queue: mpsc::UnboundedSender<InFlight>,
    task: JoinHandle<()>,
}

impl DelayLine {
    /// Starts a line with this delay (on the current Tokio runtime).
    pub fn new(delay: Duration) -> DelayLine {
        let (queue, pending) = mpsc::unbounded_channel();
        DelayLine {
            delay,
            queue,
            task: tokio::spawn(deliver(pending)),
        }
    }

    /// Sends `data` from `socket` to `to` after the line's delay.
    pub fn send(&self, socket: Arc<UdpSocket>, data: &[u8], to: SocketAddr) {
        let at = Instant::now() + self.delay;
        // The receiver lives as long as the task, which only stops when the line is dropped.
        let _ = self.queue.send((at, socket, data.to_vec(), to));
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends each queued datagram at its time. A send that fails (the peer gone, the socket
/// closed) loses the datagram, and a full socket buffer makes it wait, as a congested link
/// would.
async fn deliver(mut pending: mpsc::UnboundedReceiver<InFlight>) {
    while let Some((at, socket, data, to)) = pending.recv().await {
        tokio::time::sleep_until(at).await;
        let _ = socket.send_to(&data, to).await;
    }
}
