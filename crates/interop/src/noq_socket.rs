//! A noq socket that owns one UDP socket per local address.
//!
//! noq's own socket is a single `UdpSocket`; a path "from 127.0.0.2" then needs the socket
//! bound to the wildcard address. The matrix must stay on loopback, so instead the noq
//! client gets this [`noq::AsyncUdpSocket`]: one tokio socket per loopback address, a
//! datagram leaves from the socket whose IP is the transmit's source IP (noq's
//! [`noq::FourTuple`] local IP), and each received datagram reports the IP it arrived on
//! (`dst_ip`), which is how noq tells its paths apart. No GSO/GRO: one datagram per call.

use std::fmt;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use noq::udp::{RecvMeta, Transmit};
use noq::{AsyncUdpSocket, UdpSender};
use tokio::io::ReadBuf;
use tokio::net::UdpSocket;

/// One UDP socket per local address, seen by noq as a single socket.
#[derive(Debug, Clone)]
pub struct MultiAddrSocket {
    sockets: Arc<[Arc<UdpSocket>]>,
    /// Socket polled first on the next receive, so that no socket starves the others.
    next_recv: usize,
    /// QUIC v1 Retry packets received (see [`MultiAddrSocket::retries_received`]).
    retries: Arc<AtomicU64>,
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
                s.set_nonblocking(true)?;
                UdpSocket::from_std(s).map(Arc::new)
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(MultiAddrSocket {
            sockets: sockets.into(),
            next_recv: 0,
            retries: Arc::new(AtomicU64::new(0)),
        })
    }

    /// A counter of the QUIC v1 Retry packets this socket has received, shared with its
    /// clones (noq does not count them itself).
    pub fn retries_received(&self) -> Arc<AtomicU64> {
        self.retries.clone()
    }

    /// The bound addresses, in the order given to [`MultiAddrSocket::bind`].
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.sockets
            .iter()
            .filter_map(|s| s.local_addr().ok())
            .collect()
    }
}

/// The socket a transmit leaves from: the one bound to its source IP, else the first.
fn socket_for(sockets: &[Arc<UdpSocket>], transmit: &Transmit<'_>) -> Arc<UdpSocket> {
    let by_ip = transmit.src_ip.and_then(|ip| {
        sockets
            .iter()
            .find(|s| s.local_addr().is_ok_and(|a| a.ip() == ip))
    });
    by_ip.unwrap_or(&sockets[0]).clone()
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
        let (Some(buf), Some(meta)) = (bufs.first_mut(), meta.first_mut()) else {
            return Poll::Ready(Ok(0));
        };
        let n = self.sockets.len();
        for i in 0..n {
            let socket = &self.sockets[(self.next_recv + i) % n];
            let mut read = ReadBuf::new(buf);
            // Polling every socket registers this task for each of them.
            if let Poll::Ready(result) = socket.poll_recv_from(cx, &mut read) {
                self.next_recv = (self.next_recv + i + 1) % n;
                let from = result?;
                let len = read.filled().len();
                if is_v1_retry(read.filled()) {
                    self.retries.fetch_add(1, Ordering::Relaxed);
                }
                let mut m = RecvMeta::default();
                m.addr = from;
                m.len = len;
                m.stride = len;
                m.ecn = None;
                m.dst_ip = socket.local_addr().ok().map(|a| a.ip());
                *meta = m;
                return Poll::Ready(Ok(1));
            }
        }
        Poll::Pending
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sockets[0].local_addr()
    }
}

/// Sends for [`MultiAddrSocket`]; each noq task that sends has its own, so each keeps its
/// own writability future (and waker).
struct MultiAddrSender {
    sockets: Arc<[Arc<UdpSocket>]>,
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
        let socket = socket_for(&self.sockets, transmit);
        // A segmented transmit (noq makes none, as `max_transmit_segments` is 1) goes out
        // datagram by datagram; if one would block, all are sent again once writable, and
        // the receiver drops the duplicates as QUIC does with any duplicate packet.
        let segment = transmit
            .segment_size
            .filter(|&s| s > 0)
            .unwrap_or(transmit.contents.len().max(1));
        loop {
            if let Some(fut) = self.writable.as_mut() {
                let ready = std::task::ready!(fut.as_mut().poll(cx));
                self.writable = None;
                ready?;
            }
            let mut result = Ok(());
            for chunk in transmit.contents.chunks(segment) {
                result = socket.try_send_to(chunk, transmit.destination).map(|_| ());
                if result.is_err() {
                    break;
                }
            }
            match result {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let s = socket.clone();
                    self.writable = Some(Box::pin(async move { s.writable().await }));
                }
                // Like noq's own sockets: a failed send is a lost datagram, which QUIC
                // recovers from; it must not end the endpoint.
                _ => return Poll::Ready(Ok(())),
            }
        }
    }
}
