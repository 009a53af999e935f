//! One UDP socket bound to one local address, with the batching and offloads that
//! quinn-udp finds on the platform: `recvmmsg`, generic receive offload (GRO), generic
//! segmentation offload (GSO) and the packet-info control messages that report the local
//! address a datagram arrived on. Where the kernel lacks an offload, quinn-udp reports one
//! segment and the driver sends and receives datagram by datagram.

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::task::{Context, Poll};
use tokio::io::Interest;

/// Socket buffer size asked of the kernel (it may grant less; that only costs throughput).
const SOCKET_BUFFER_BYTES: usize = 8 * 1024 * 1024;

/// A bound UDP socket registered with the Tokio reactor.
pub(crate) struct Socket {
    io: tokio::net::UdpSocket,
    state: UdpSocketState,
    local: SocketAddr,
}

impl std::fmt::Debug for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Socket")
            .field("local", &self.local)
            .field("gso_segments", &self.state.max_gso_segments())
            .field("gro_segments", &self.state.gro_segments())
            .finish()
    }
}

impl Socket {
    /// Binds `addr` (port 0 picks a free port). With `transport_errors`, the kernel queues
    /// the ICMP errors that come back for the socket's datagrams (`IP_RECVERR`), read with
    /// [`Socket::take_unreachable`]. Must run inside a Tokio runtime.
    pub fn bind(addr: SocketAddr, transport_errors: bool) -> io::Result<Self> {
        let std_socket = std::net::UdpSocket::bind(addr)?;
        let state = UdpSocketState::new((&std_socket).into())?;
        if transport_errors && let Err(e) = state.enable_transport_errors((&std_socket).into()) {
            tracing::debug!(%addr, error = %e, "ICMP errors will not be reported");
        }
        // Larger buffers absorb bursts at high rates; refusal is not an error.
        if let Err(e) = state.set_send_buffer_size((&std_socket).into(), SOCKET_BUFFER_BYTES) {
            tracing::debug!(%addr, error = %e, "could not enlarge the send buffer");
        }
        if let Err(e) = state.set_recv_buffer_size((&std_socket).into(), SOCKET_BUFFER_BYTES) {
            tracing::debug!(%addr, error = %e, "could not enlarge the receive buffer");
        }
        // quinn-udp turns on receive timestamps, which this driver does not use; their
        // control message and a GRO batch's leave no room in quinn-udp's 96-byte control
        // buffer for the IP_TOS one, so every coalesced batch would arrive without its ECN
        // codepoint (Linux truncates the last message: MSG_CTRUNC) and ECN validation
        // would fail (RFC 9000 section 13.4.2.1).
        if let Err(e) = disable_receive_timestamps(&std_socket) {
            tracing::debug!(%addr, error = %e, "receive timestamps stay on: ECN may fail");
        }
        let io = tokio::net::UdpSocket::from_std(std_socket)?;
        let local = io.local_addr()?;
        Ok(Socket { io, state, local })
    }

    /// The address the socket is bound to (with the port the kernel picked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Most datagrams one send may carry (1 without GSO, or after GSO failed once).
    pub fn max_gso_segments(&self) -> usize {
        self.state.max_gso_segments().max(1)
    }

    /// Most datagrams the kernel may coalesce into one receive buffer (1 without GRO).
    pub fn gro_segments(&self) -> usize {
        self.state.gro_segments().max(1)
    }

    /// Waits until the kernel has an ICMP error queued for the socket (sockets bound with
    /// `transport_errors`; others never get there).
    pub async fn error_ready(&self) -> io::Result<()> {
        self.io.ready(Interest::ERROR).await.map(|_| ())
    }

    /// Empties the socket's queue of ICMP errors; returns the addresses that answered a
    /// datagram with "port unreachable" (the host had no socket on that port). With the
    /// error queue enabled, a queued error also fails the next send or receive once: the
    /// caller retries that after emptying the queue.
    pub fn take_unreachable(&self) -> Vec<IpAddr> {
        // Forget the error readiness first: an error queued while the queue is being
        // emptied then raises it again.
        let _ = self.io.try_io(Interest::ERROR, || {
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        });
        let mut refused = Vec::new();
        loop {
            match self.state.recv_transport_error((&self.io).into()) {
                Ok(Some(e)) => {
                    if e.raw_errno == libc::ECONNREFUSED
                        && let Some(addr) = e.addr
                    {
                        refused.push(addr.ip());
                    }
                }
                Ok(None) => return refused,
                Err(e) => {
                    tracing::debug!(local = %self.local, error = %e, "reading the ICMP error queue failed");
                    return refused;
                }
            }
        }
    }

    /// Receives a batch of datagram buffers; returns how many of `bufs` were filled.
    pub fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        loop {
            std::task::ready!(self.io.poll_recv_ready(cx))?;
            match self.io.try_io(Interest::READABLE, || {
                self.state.recv((&self.io).into(), bufs, meta)
            }) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                result => return Poll::Ready(result),
            }
        }
    }

    /// Sends one transmit (one datagram, or a GSO batch of at most
    /// [`Socket::max_gso_segments`] datagrams).
    pub fn poll_send(&self, cx: &mut Context<'_>, transmit: &Transmit<'_>) -> Poll<io::Result<()>> {
        loop {
            std::task::ready!(self.io.poll_send_ready(cx))?;
            match self.io.try_io(Interest::WRITABLE, || {
                self.state.try_send((&self.io).into(), transmit)
            }) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                result => return Poll::Ready(result),
            }
        }
    }
}

/// Whether a send or receive error is an ICMP error the kernel reported for an earlier
/// datagram (queued with `IP_RECVERR`), rather than a failure of this call.
pub(crate) fn is_pending_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH)
    )
}

/// Turns `SO_TIMESTAMPNS` off on `socket` (see [`Socket::bind`]).
fn disable_receive_timestamps(socket: &std::net::UdpSocket) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let off: libc::c_int = 0;
    // SAFETY: a valid descriptor, and an option value of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&off as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
