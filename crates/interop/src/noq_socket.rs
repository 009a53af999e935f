//! A noq socket that owns one UDP socket per local address.
//!
//! noq's own socket is a single `UdpSocket`; a path "from 127.0.0.2" then needs the socket
//! bound to the wildcard address. The matrix must stay on loopback, so instead the noq
//! client gets this [`noq::AsyncUdpSocket`]: one tokio socket per loopback address, a
//! datagram leaves from the socket whose IP is the transmit's source IP (noq's
//! [`noq::FourTuple`] local IP), and each received datagram reports the IP it arrived on
//! (`dst_ip`), which is how noq tells its paths apart. Each socket goes through noq's own
//! UDP layer (`noq::udp::UdpSocketState`), so the ECN codepoints are set and read as with
//! noq's own socket; one received batch per call.

use std::fmt;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use noq::udp::{RecvMeta, Transmit, UdpSocketState};
use noq::{AsyncUdpSocket, UdpSender};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// A bound socket and noq's UDP state for it.
#[derive(Debug)]
struct Bound {
    io: UdpSocket,
    state: UdpSocketState,
}

/// One UDP socket per local address, seen by noq as a single socket.
#[derive(Debug, Clone)]
pub struct MultiAddrSocket {
    sockets: Arc<[Arc<Bound>]>,
    /// Socket polled first on the next receive, so that no socket starves the others.
    next_recv: usize,
    /// QUIC v1 Retry packets received (see [`MultiAddrSocket::retries_received`]).
    retries: Arc<AtomicU64>,
    /// Datagrams received by each socket (see [`MultiAddrSocket::received_by_socket`]).
    received: Arc<[AtomicU64]>,
}

/// True for a QUIC version 1 Retry packet: a long header (form and fixed bits set) of
/// type 3.
//= https://www.rfc-editor.org/rfc/rfc9000#section-17.2.5
//# Header Form (1) = 1,
//# Fixed Bit (1) = 1,
//# Long Packet Type (2) = 3,
fn is_v1_retry(datagram: &[u8]) -> bool {
    datagram.len() >= 5 && datagram[0] & 0xf0 == 0xf0 && datagram[1..5] == [0, 0, 0, 1]
}

impl MultiAddrSocket {
    /// Binds one socket per address (port 0 picks a free port). Must run inside a Tokio
    /// runtime. The first address is the one noq reports as its local address.
    pub fn bind(addrs: &[SocketAddr]) -> io::Result<Self> {
        if addrs.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "at least one local address is needed",
            ));
        }
        let sockets = addrs
            .iter()
            .map(|a| {
                let s = std::net::UdpSocket::bind(a)?;
                let state = UdpSocketState::new((&s).into())?;
                let io = UdpSocket::from_std(s)?;
                Ok(Arc::new(Bound { io, state }))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let received = sockets.iter().map(|_| AtomicU64::new(0)).collect();
        Ok(MultiAddrSocket {
            sockets: sockets.into(),
            next_recv: 0,
            retries: Arc::new(AtomicU64::new(0)),
            received,
        })
    }

    /// A counter of the QUIC v1 Retry packets this socket has received, shared with its
    /// clones (noq does not count them itself).
    pub fn retries_received(&self) -> Arc<AtomicU64> {
        self.retries.clone()
    }

    /// Datagrams each socket received, in the order of [`MultiAddrSocket::local_addrs`],
    /// shared with its clones (which local address a peer sends to).
    pub fn received_by_socket(&self) -> Arc<[AtomicU64]> {
        self.received.clone()
    }

    /// The bound addresses, in the order given to [`MultiAddrSocket::bind`].
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.sockets
            .iter()
            .filter_map(|s| s.io.local_addr().ok())
            .collect()
    }
}

/// The socket a transmit leaves from: the one bound to its source IP, or the first if it
/// names none or an IP none of the sockets has, with `false` in that last case: after
/// `Endpoint::rebind_abstract`, noq keeps the old source IP of a connection for a while
/// (until a packet arrives on the new address), and the socket layer would put it on the
/// datagram (IP_PKTINFO) although no socket listens there any more. Such a datagram leaves
/// from the socket's own address instead, as the kernel picks it on a host whose old
/// address is gone.
fn socket_for(sockets: &[Arc<Bound>], transmit: &Transmit<'_>) -> (Arc<Bound>, bool) {
    let by_ip = transmit.src_ip.and_then(|ip| {
        sockets
            .iter()
            .find(|s| s.io.local_addr().is_ok_and(|a| a.ip() == ip))
    });
    match by_ip {
        Some(s) => (s.clone(), true),
        None => (sockets[0].clone(), transmit.src_ip.is_none()),
    }
}

impl AsyncUdpSocket for MultiAddrSocket {
    fn create_sender(&self) -> Pin<Box<dyn UdpSender>> {
        Box::pin(MultiAddrSender {
            sockets: self.sockets.clone(),
            writable: None,
        })
    }

    fn poll_recv(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let n = self.sockets.len();
        for i in 0..n {
            let index = (self.next_recv + i) % n;
            let socket = self.sockets[index].clone();
            // Polling every socket registers this task for each of them.
            while socket.io.poll_recv_ready(cx).is_ready() {
                let received = socket.io.try_io(Interest::READABLE, || {
                    socket.state.recv((&socket.io).into(), bufs, meta)
                });
                match received {
                    Ok(count) => {
                        // A GRO batch holds len / stride datagrams.
                        let datagrams: usize = meta
                            .iter()
                            .take(count)
                            .map(|m| m.len.div_ceil(m.stride.max(1)))
                            .sum();
                        self.received[index].fetch_add(datagrams as u64, Ordering::Relaxed);
                        self.next_recv = (self.next_recv + i + 1) % n;
                        let local = socket.io.local_addr().ok().map(|a| a.ip());
                        for (m, buf) in meta.iter_mut().zip(bufs.iter()).take(count) {
                            if is_v1_retry(&buf[..m.len.min(buf.len())]) {
                                self.retries.fetch_add(1, Ordering::Relaxed);
                            }
                            m.dst_ip = m.dst_ip.or(local);
                        }
                        return Poll::Ready(Ok(count));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        }
        Poll::Pending
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sockets[0].io.local_addr()
    }

    // noq sizes its receive buffers by this: a GRO batch larger than the buffer would be
    // cut short.
    fn max_receive_segments(&self) -> std::num::NonZeroUsize {
        self.sockets
            .iter()
            .map(|s| s.state.gro_segments())
            .max()
            .unwrap_or(std::num::NonZeroUsize::MIN)
    }

    fn may_fragment(&self) -> bool {
        self.sockets.iter().any(|s| s.state.may_fragment())
    }
}

/// Sends for [`MultiAddrSocket`]; each noq task that sends has its own, so each keeps its
/// own writability future (and waker).
struct MultiAddrSender {
    sockets: Arc<[Arc<Bound>]>,
    writable: Option<Pin<Box<dyn Future<Output = io::Result<()>> + Send + Sync>>>,
}

impl fmt::Debug for MultiAddrSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MultiAddrSender")
    }
}

impl UdpSender for MultiAddrSender {
    fn poll_send(
        mut self: Pin<&mut Self>,
        transmit: &Transmit<'_>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        let (socket, source_ok) = socket_for(&self.sockets, transmit);
        let own_source;
        let transmit = if source_ok {
            transmit
        } else {
            own_source = Transmit {
                src_ip: None,
                ..transmit.clone()
            };
            &own_source
        };
        loop {
            if let Some(fut) = self.writable.as_mut() {
                let ready = std::task::ready!(fut.as_mut().poll(cx));
                self.writable = None;
                ready?;
            }
            let sent = socket.io.try_io(Interest::WRITABLE, || {
                socket.state.try_send((&socket.io).into(), transmit)
            });
            match sent {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let s = socket.clone();
                    self.writable = Some(Box::pin(async move { s.io.writable().await }));
                }
                // Like noq's own sockets: a failed send is a lost datagram, which QUIC
                // recovers from; it must not end the endpoint.
                _ => return Poll::Ready(Ok(())),
            }
        }
    }
}
