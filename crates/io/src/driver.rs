//! The driver: one Tokio task per endpoint that moves datagrams between the sockets and the
//! sans-IO endpoint and runs its timers.
//!
//! Each time it is polled the driver, holding the state lock, repeats until nothing moves:
//! receive every datagram the sockets hold (in `recvmmsg` batches, GRO buffers split at
//! their stride), run expired timers, send everything the connections have to send (GSO
//! batches split to what the socket supports), and wake the application tasks whose
//! streams, datagrams or paths changed. It then arms one timer for the endpoint's earliest
//! deadline and sleeps until a socket is ready, the timer fires, or an application call
//! wakes it. A poll does a bounded amount of work and then yields, so one busy endpoint
//! cannot starve the other tasks of the runtime.

use crate::socket::{Socket, is_pending_error};
use crate::state::{Shared, State, wake_all};
use bytes::BytesMut;
use polypath_quic::ConnectionHandle;
use polypath_quic::ecn::EcnCodepoint;
use std::future::Future;
use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Receive-transmit-dispatch rounds per poll before the driver yields to other tasks.
const ROUNDS_PER_POLL: usize = 16;
/// `recvmmsg` batches read from one socket per round.
const RECV_BATCHES_PER_ROUND: usize = 1;
/// Transmits (datagrams or GSO batches) sent per round.
const TRANSMITS_PER_ROUND: usize = 64;
/// When a deadline lies in the past and running timers and sending changed nothing, the
/// timer is re-armed this far ahead instead of spinning.
const STALE_DEADLINE_BACKOFF: Duration = Duration::from_millis(1);

/// A transmit taken from the endpoint and not completely sent yet (the socket was full).
struct PendingTransmit {
    transmit: polypath_quic::Transmit,
    /// Bytes of the transmit's buffer already sent.
    offset: usize,
}

/// Receive buffers: `quinn_udp::BATCH_SIZE` slots, each large enough for a full GRO batch.
struct RecvBuffers {
    slots: Vec<Vec<u8>>,
    meta: Vec<quinn_udp::RecvMeta>,
}

impl RecvBuffers {
    fn new() -> Self {
        RecvBuffers {
            slots: Vec::new(),
            meta: vec![quinn_udp::RecvMeta::default(); quinn_udp::BATCH_SIZE],
        }
    }

    /// Makes every slot at least `slot_len` bytes long.
    fn ensure(&mut self, slot_len: usize) {
        if self.slots.len() != quinn_udp::BATCH_SIZE || self.slots[0].len() < slot_len {
            self.slots = vec![vec![0u8; slot_len]; quinn_udp::BATCH_SIZE];
        }
    }
}

/// The future run as the endpoint's driver task.
pub(crate) struct Driver {
    shared: Arc<Shared>,
    timer: Pin<Box<tokio::time::Sleep>>,
    armed_for: Option<Instant>,
    /// An expired deadline the last round already ran.
    stale: Option<Instant>,
    recv: RecvBuffers,
    /// Largest UDP payload accepted (the size of one receive segment).
    max_udp_payload: usize,
    send_buf: Vec<u8>,
    pending: Option<PendingTransmit>,
}

impl Driver {
    pub fn new(shared: Arc<Shared>, max_udp_payload: usize) -> Self {
        Driver {
            shared,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed_for: None,
            stale: None,
            recv: RecvBuffers::new(),
            max_udp_payload,
            send_buf: Vec::new(),
            pending: None,
        }
    }

    /// Reads every socket until it has nothing more (or the round's budget is spent);
    /// returns whether anything arrived.
    fn receive(&mut self, cx: &mut Context<'_>, state: &mut State) -> bool {
        let mut progress = false;
        let mut touched: Vec<ConnectionHandle> = Vec::new();
        for index in 0..state.sockets.len() {
            let socket = state.sockets[index].clone();
            for _ in 0..RECV_BATCHES_PER_ROUND {
                self.recv
                    .ensure(socket.gro_segments() * self.max_udp_payload);
                let mut slices: Vec<IoSliceMut<'_>> = self
                    .recv
                    .slots
                    .iter_mut()
                    .map(|s| IoSliceMut::new(s))
                    .collect();
                let count = match socket.poll_recv(cx, &mut slices, &mut self.recv.meta) {
                    Poll::Pending => break,
                    Poll::Ready(Err(e)) => {
                        // ICMP errors and the like: UDP is unreliable anyway, but a closed
                        // port ends a connection attempt.
                        tracing::debug!(local = %socket.local_addr(), error = %e, "receive failed");
                        if is_pending_error(&e) {
                            report_unreachable(state, &socket);
                        }
                        progress = true;
                        continue;
                    }
                    Poll::Ready(Ok(count)) => count,
                };
                drop(slices);
                progress = true;
                let now = Instant::now();
                for (meta, slot) in self.recv.meta.iter().zip(&self.recv.slots).take(count) {
                    let local = local_address(&socket, meta);
                    let stride = if meta.stride == 0 {
                        meta.len
                    } else {
                        meta.stride
                    };
                    for datagram in slot[..meta.len].chunks(stride.max(1)) {
                        let data = BytesMut::from(datagram);
                        let ecn = meta.ecn.and_then(|e| EcnCodepoint::from_bits(e as u8));
                        if let Some(h) = state.quic.handle(now, local, meta.addr, ecn, data)
                            && !touched.contains(&h)
                        {
                            touched.push(h);
                        }
                    }
                }
            }
        }
        for h in touched {
            if let Some(w) = state.conns.get_mut(&h) {
                wake_all(&mut w.progress);
            }
        }
        progress
    }

    /// Sends what the connections have to send until they have nothing, a socket is full,
    /// or the round's budget is spent; returns whether anything was sent.
    fn transmit(&mut self, cx: &mut Context<'_>, state: &mut State) -> bool {
        let mut sent = false;
        for _ in 0..TRANSMITS_PER_ROUND {
            if self.pending.is_none() {
                let Some(transmit) = state.quic.poll_transmit(Instant::now(), &mut self.send_buf)
                else {
                    break;
                };
                self.pending = Some(PendingTransmit {
                    transmit,
                    offset: 0,
                });
            }
            let Some(pending) = self.pending.as_mut() else {
                break;
            };
            let polypath_quic::Transmit {
                destination,
                source,
                size,
                segment_size,
                ecn,
                ..
            } = pending.transmit;
            let Some(socket) = state.socket_for(source).cloned() else {
                tracing::debug!(%source, "no socket for the source address; datagram dropped");
                self.pending = None;
                continue;
            };
            let segment = segment_size.unwrap_or(size).max(1);
            let mut retried = false;
            while pending.offset < size {
                let gso = socket.max_gso_segments();
                let end = (pending.offset + gso * segment).min(size);
                let contents = &self.send_buf[pending.offset..end];
                let out = quinn_udp::Transmit {
                    destination,
                    ecn: ecn.and_then(|e| quinn_udp::EcnCodepoint::from_bits(e.bits())),
                    contents,
                    segment_size: (contents.len() > segment).then_some(segment),
                    src_ip: socket
                        .local_addr()
                        .ip()
                        .is_unspecified()
                        .then_some(source.ip())
                        .filter(|ip| !ip.is_unspecified()),
                };
                match socket.poll_send(cx, &out) {
                    Poll::Pending => return sent,
                    Poll::Ready(Ok(())) => pending.offset = end,
                    Poll::Ready(Err(e)) if is_pending_error(&e) && !retried => {
                        // An ICMP error for an earlier datagram failed this send: hear it,
                        // then send these datagrams again.
                        report_unreachable(state, &socket);
                        retried = true;
                    }
                    Poll::Ready(Err(_)) if socket.max_gso_segments() < gso => {
                        // The kernel refused segmentation offload; quinn-udp switched it off
                        // for the socket. Send the same datagrams again one by one.
                        tracing::debug!(local = %socket.local_addr(), "GSO refused; sending datagrams singly");
                    }
                    Poll::Ready(Err(e)) => {
                        // Loss to the transport: recovery resends what mattered. Oversized
                        // MTU probes end here (EMSGSIZE) and count as lost probes.
                        tracing::debug!(%destination, error = %e, "send failed; datagrams dropped");
                        pending.offset = end;
                    }
                }
            }
            self.pending = None;
            sent = true;
        }
        sent
    }

    /// Arms the timer for the endpoint's next deadline; returns true if it expired already
    /// and the driver should run another round.
    fn arm_timer(&mut self, cx: &mut Context<'_>, state: &State) -> bool {
        let Some(mut deadline) = state.quic.poll_timeout() else {
            self.armed_for = None;
            return false;
        };
        let now = Instant::now();
        if deadline <= now {
            if self.stale != Some(deadline) {
                self.stale = Some(deadline);
                return true;
            }
            // The last round ran this expired deadline and it did not move: do not spin.
            deadline = now + STALE_DEADLINE_BACKOFF;
        }
        if self.armed_for != Some(deadline) {
            self.timer.as_mut().reset(deadline.into());
            self.armed_for = Some(deadline);
        }
        self.timer.as_mut().poll(cx).is_ready()
    }
}

/// Watches `socket` for ICMP errors the kernel queues (the driver's own wake-ups come from
/// data and timers only, and a refused handshake should not wait for its next timer); lives
/// until the driver stops it.
pub(crate) fn watch_errors(shared: &Arc<Shared>, socket: Arc<Socket>) -> tokio::task::AbortHandle {
    let shared = Arc::downgrade(shared);
    tokio::spawn(async move {
        while socket.error_ready().await.is_ok() {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let mut state = shared.lock();
            report_unreachable(&mut state, &socket);
            state.dispatch_events();
            state.wake_driver();
        }
    })
    .abort_handle()
}

/// Tells the endpoint which hosts answered the socket's datagrams with "port unreachable".
fn report_unreachable(state: &mut State, socket: &Socket) {
    let now = Instant::now();
    for remote in socket.take_unreachable() {
        tracing::debug!(local = %socket.local_addr(), %remote, "ICMP port unreachable");
        state.quic.handle_port_unreachable(now, remote);
    }
}

/// The local address a datagram arrived on: the socket's, or for a wildcard socket the
/// destination address the kernel reported.
fn local_address(socket: &Socket, meta: &quinn_udp::RecvMeta) -> SocketAddr {
    let bound = socket.local_addr();
    match meta.dst_ip {
        Some(ip) if bound.ip().is_unspecified() => SocketAddr::new(ip, bound.port()),
        _ => bound,
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let shared = this.shared.clone();
        let mut state = shared.lock();
        if !state
            .driver_waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            state.driver_waker = Some(cx.waker().clone());
        }
        for _ in 0..ROUNDS_PER_POLL {
            let mut progress = this.receive(cx, &mut state);
            let now = Instant::now();
            if state.quic.poll_timeout().is_some_and(|t| t <= now) {
                state.quic.handle_timeout(now);
            }
            progress |= this.transmit(cx, &mut state);
            state.dispatch_events();
            if state.is_finished() {
                state.driver_gone = true;
                wake_all(&mut state.idle_wakers);
                return Poll::Ready(());
            }
            if !progress && !this.arm_timer(cx, &state) {
                return Poll::Pending;
            }
        }
        // Budget spent with work left: come back after the other tasks had a turn.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Drop for Driver {
    /// The task ends normally once the endpoint is finished; if the runtime drops it early,
    /// tasks still waiting on the endpoint are told the connections are gone.
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.driver_gone = true;
        state.driver_waker = None;
        for watcher in state.error_watchers.drain(..) {
            watcher.abort();
        }
        let handles: Vec<ConnectionHandle> = state.conns.keys().copied().collect();
        for h in handles {
            state.close_connection(h, 0, b"driver stopped");
        }
        wake_all(&mut state.accept_wakers);
        wake_all(&mut state.idle_wakers);
    }
}
