//! Streams: per-stream send buffers and receive assemblers, stream state machines, stream
//! ID management and flow control for one connection (RFC 9000 sections 2 to 4), and the
//! CRYPTO stream of each encryption level.
//!
//! [`Streams`] is sans-IO and frame-codec agnostic: the connection calls its `on_*` frame
//! handlers with the decoded fields, asks [`Streams::poll_control`] and
//! [`Streams::poll_stream_data`] for frames to put in packets, reports acknowledgements and
//! losses of those frames back, and relays [`StreamEvent`]s and the application calls
//! ([`Streams::open`], [`Streams::write`], [`Streams::read`], ...).
//!
//! Flow control: [`Streams::write`] only accepts bytes that fit in the peer's stream and
//! connection limits (and in a local send window), so everything buffered can be sent at
//! once and the send buffer never holds more than the peer lets in flight. On the receive
//! side, MAX_DATA and MAX_STREAM_DATA are queued whenever the application has consumed a
//! quarter of the window since the last update, so a bulk transfer never stalls on flow
//! control as long as the window covers the bandwidth-delay product.
//!
//! Receive windows start small and grow with need ([`Streams::tune_receive_windows`]): a
//! window that the application drains in less than two round trips doubles, up to its
//! configured maximum, so a connection only reserves what its path and reader can use. The
//! connection windows of all connections of an endpoint can share one cap
//! ([`ReceiveBudget`]), which bounds the bytes an endpoint may have to buffer.

mod crypto;
mod recv;
mod send;
#[cfg(test)]
mod tests;

pub use crypto::{CryptoStream, DEFAULT_CRYPTO_BUFFER, MIN_CRYPTO_BUFFER};
pub use recv::Assembler;
pub use send::{SendBuffer, Transmit};

use crate::error::TransportError;
use crate::frame::FrameType;
use crate::sched::QosClass;
use crate::shared::{Dir, Side, StreamId};
use crate::varint::VarInt;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The largest stream count a MAX_STREAMS frame or transport parameter may carry.
//= https://www.rfc-editor.org/rfc/rfc9000#section-19.11
//# This value cannot exceed
//# 2<sup>60</sup>, as it is not possible to encode stream IDs larger than
//# 2<sup>62</sup>-1.
pub const MAX_STREAM_COUNT: u64 = 1 << 60;

/// Window updates are sent once the application consumed this fraction of the window.
const WINDOW_UPDATE_DIVISOR: u64 = 4;

/// Default local send window: bytes written and not yet acknowledged, across all streams.
pub const DEFAULT_SEND_WINDOW: u64 = 16 * 1024 * 1024;

/// The smallest connection window a [`ReceiveBudget`] gives a new connection when the
/// budget is spent (the window a Linux receiver starts with: half of `tcp_rmem[1]`).
pub const MIN_BUDGETED_WINDOW: u64 = 64 * 1024;

/// A cap on the connection-level receive windows of all connections of one endpoint
/// together: what the peers may have in flight towards us, hence what we may have to
/// buffer. A new connection gets its initial window from the budget (at least
/// [`MIN_BUDGETED_WINDOW`], even when the budget is spent, so that it can make progress);
/// a window grows only while the budget has room; a connection returns its window when it
/// is dropped. Shared between threads, so one budget can serve several endpoints.
#[derive(Debug)]
pub struct ReceiveBudget {
    limit: u64,
    granted: AtomicU64,
}

impl ReceiveBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        ReceiveBudget {
            limit,
            granted: AtomicU64::new(0),
        }
    }

    /// The cap in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes of window currently given out.
    pub fn granted(&self) -> u64 {
        self.granted.load(Ordering::Relaxed)
    }

    /// The initial window of a new connection that wants `want` bytes: `want` if the budget
    /// has room, else what is left, but never less than `MIN_BUDGETED_WINDOW` (or `want`
    /// if smaller). The window returned is counted as granted.
    pub(crate) fn grant_initial(&self, want: u64) -> u64 {
        let floor = want.min(MIN_BUDGETED_WINDOW);
        let mut given = floor;
        let _ = self
            .granted
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |g| {
                given = want.min(self.limit.saturating_sub(g)).max(floor);
                Some(g.saturating_add(given))
            });
        given
    }

    /// Counts `bytes` more as granted if that stays within the limit.
    fn try_grant(&self, bytes: u64) -> bool {
        self.granted
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |g| {
                let after = g.checked_add(bytes)?;
                (after <= self.limit).then_some(after)
            })
            .is_ok()
    }

    /// Returns `bytes` to the budget.
    fn release(&self, bytes: u64) {
        let _ = self
            .granted
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |g| {
                Some(g.saturating_sub(bytes))
            });
    }
}

/// Auto-tuning state of one receive window (a stream's or the connection's): the start of
/// the current measurement epoch, which runs from one window update to the next.
//= https://www.rfc-editor.org/rfc/rfc9000#section-4.2
//# A receiver can use an autotuning mechanism to tune the
//# frequency and amount of advertised additional credit based on a
//# round-trip time estimate and the rate at which the receiving
//# application consumes data, similar to common TCP implementations.
#[derive(Debug, Clone, Copy, Default)]
struct WindowTuning {
    /// When the epoch started; `None` before the first update.
    start: Option<Instant>,
    /// Bytes consumed when the epoch started.
    start_consumed: u64,
    /// An update was queued since the last tuning decision.
    due: bool,
}

impl WindowTuning {
    /// Decides, when a window update is about to go out, whether `window` should double:
    /// yes if at the rate the application consumed data during the epoch just ended, the
    /// window would last less than two round trips (Linux sizes its receive buffer to
    /// twice what the application reads per RTT the same way). Starts a new epoch.
    fn should_grow(&mut self, now: Instant, rtt: Duration, consumed: u64, window: u64) -> bool {
        self.due = false;
        let grow = self.start.is_some_and(|start| {
            let used = u128::from(consumed.saturating_sub(self.start_consumed));
            let elapsed = now.saturating_duration_since(start).as_nanos();
            u128::from(window) * elapsed < 2 * used * rtt.as_nanos()
        });
        self.start = Some(now);
        self.start_consumed = consumed;
        grow
    }
}

/// The largest number of data bytes `n` with `n + VarInt::encoded_size(n) <= avail`, i.e.
/// the payload of a frame whose length field and data must fit in `avail` bytes; `None`
/// if not even a zero length field fits.
pub fn max_data_len(avail: usize) -> Option<usize> {
    let mut best = None;
    for (size, cap) in [
        (1usize, 63u64),
        (2, 16_383),
        (4, (1 << 30) - 1),
        (8, (1 << 62) - 1),
    ] {
        if avail < size {
            break;
        }
        let len = ((avail - size) as u64).min(cap) as usize;
        best = Some(best.map_or(len, |b: usize| b.max(len)));
    }
    best
}

/// Stream flow control and concurrency limits, as carried in transport parameters.
///
/// The same struct describes the local limits (what this endpoint lets its peer send; also
/// the window sizes used when extending them) and the peer's limits.
//= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
//# If the transport parameter is absent, streams of
//# that type start with a flow control limit of 0.
#[derive(Debug, Copy, Clone, Default, Eq, PartialEq)]
pub struct StreamLimits {
    /// initial_max_data: connection-wide byte limit.
    pub max_data: u64,
    /// initial_max_stream_data_bidi_local: limit for bidirectional streams opened by the
    /// endpoint that sends the parameter.
    pub max_stream_data_bidi_local: u64,
    /// initial_max_stream_data_bidi_remote: limit for bidirectional streams opened by the
    /// endpoint that receives the parameter.
    pub max_stream_data_bidi_remote: u64,
    /// initial_max_stream_data_uni: limit for unidirectional streams opened by the
    /// endpoint that receives the parameter.
    pub max_stream_data_uni: u64,
    /// initial_max_streams_bidi: bidirectional streams the receiver of the parameter may open.
    pub max_streams_bidi: u64,
    /// initial_max_streams_uni: unidirectional streams the receiver of the parameter may open.
    pub max_streams_uni: u64,
}

impl StreamLimits {
    /// Generous local defaults for a high bandwidth-delay product: a 16 MiB connection
    /// window, 8 MiB per stream and 100 concurrent streams of each type.
    pub fn default_local() -> Self {
        StreamLimits {
            max_data: 16 * 1024 * 1024,
            max_stream_data_bidi_local: 8 * 1024 * 1024,
            max_stream_data_bidi_remote: 8 * 1024 * 1024,
            max_stream_data_uni: 8 * 1024 * 1024,
            max_streams_bidi: 100,
            max_streams_uni: 100,
        }
    }

    fn max_streams(&self, dir: Dir) -> u64 {
        match dir {
            Dir::Bi => self.max_streams_bidi,
            Dir::Uni => self.max_streams_uni,
        }
    }
}

/// Something the application may want to react to.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub enum StreamEvent {
    /// The peer opened one or more streams of this direction: call [`Streams::accept`].
    Opened {
        /// Direction of the new streams.
        dir: Dir,
    },
    /// Data, the end of the stream or a reset can be read.
    Readable {
        /// The stream.
        id: StreamId,
    },
    /// A stream that refused a write for lack of credit can take more data.
    Writable {
        /// The stream.
        id: StreamId,
    },
    /// Every byte written and the FIN were acknowledged by the peer.
    Finished {
        /// The stream.
        id: StreamId,
    },
    /// The peer asked us to stop sending (STOP_SENDING); the stream was reset in response.
    Stopped {
        /// The stream.
        id: StreamId,
        /// The application error code from the peer.
        error_code: VarInt,
    },
    /// The peer raised our stream limit: [`Streams::open`] may succeed again.
    Available {
        /// Direction of the newly allowed streams.
        dir: Dir,
    },
}

/// A control frame for the packet builder to send.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub enum ControlFrame {
    /// RESET_STREAM (0x04).
    ResetStream {
        /// The stream.
        id: StreamId,
        /// Application error code.
        error_code: VarInt,
        /// Final size of the stream.
        final_size: u64,
    },
    /// STOP_SENDING (0x05).
    StopSending {
        /// The stream.
        id: StreamId,
        /// Application error code.
        error_code: VarInt,
    },
    /// MAX_DATA (0x10).
    MaxData {
        /// Maximum Data.
        max: u64,
    },
    /// MAX_STREAM_DATA (0x11).
    MaxStreamData {
        /// The stream.
        id: StreamId,
        /// Maximum Stream Data.
        max: u64,
    },
    /// MAX_STREAMS (0x12 bidirectional, 0x13 unidirectional).
    MaxStreams {
        /// Stream type.
        dir: Dir,
        /// Maximum Streams.
        count: u64,
    },
    /// DATA_BLOCKED (0x14).
    DataBlocked {
        /// The connection limit at which we are blocked.
        limit: u64,
    },
    /// STREAM_DATA_BLOCKED (0x15).
    StreamDataBlocked {
        /// The stream.
        id: StreamId,
        /// The stream limit at which we are blocked.
        limit: u64,
    },
    /// STREAMS_BLOCKED (0x16 bidirectional, 0x17 unidirectional).
    StreamsBlocked {
        /// Stream type.
        dir: Dir,
        /// The stream limit at which we are blocked.
        limit: u64,
    },
}

fn vsize(x: u64) -> usize {
    VarInt::encoded_size(x)
}

impl ControlFrame {
    /// Size of the frame's encoding (type byte included), with minimal varints.
    pub fn encoded_len(&self) -> usize {
        1 + match *self {
            ControlFrame::ResetStream {
                id,
                error_code,
                final_size,
            } => vsize(id.0) + error_code.size() + vsize(final_size),
            ControlFrame::StopSending { id, error_code } => vsize(id.0) + error_code.size(),
            ControlFrame::MaxData { max } => vsize(max),
            ControlFrame::MaxStreamData { id, max } => vsize(id.0) + vsize(max),
            ControlFrame::MaxStreams { count, .. } => vsize(count),
            ControlFrame::DataBlocked { limit } => vsize(limit),
            ControlFrame::StreamDataBlocked { id, limit } => vsize(id.0) + vsize(limit),
            ControlFrame::StreamsBlocked { limit, .. } => vsize(limit),
        }
    }
}

/// Data for one STREAM frame.
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct StreamChunk {
    /// The stream.
    pub id: StreamId,
    /// Offset of the first byte.
    pub offset: u64,
    /// The bytes (possibly empty when only the FIN is carried).
    pub data: Bytes,
    /// FIN bit.
    pub fin: bool,
}

impl StreamChunk {
    /// Splits the chunk so that its first part's STREAM frame fits in `room` bytes: the
    /// part that fits (`None` if not even one byte of data, or the bare FIN, does) and the
    /// rest (`None` if everything fits). The FIN goes with the last byte.
    pub fn split_to_fit(mut self, room: usize) -> (Option<StreamChunk>, Option<StreamChunk>) {
        if self.encoded_len() <= room {
            return (Some(self), None);
        }
        let fits = room
            .checked_sub(stream_header_len(self.id, self.offset))
            .and_then(max_data_len)
            .filter(|n| *n > 0);
        let Some(n) = fits else {
            return (None, Some(self));
        };
        let rest = StreamChunk {
            id: self.id,
            offset: self.offset + n as u64,
            data: self.data.split_off(n),
            fin: self.fin,
        };
        self.fin = false;
        (Some(self), Some(rest))
    }

    /// Size of the STREAM frame encoding with a Length field, and an Offset field when
    /// the offset is not zero.
    pub fn encoded_len(&self) -> usize {
        stream_header_len(self.id, self.offset) + vsize(self.data.len() as u64) + self.data.len()
    }
}

/// Type byte, Stream ID and (if nonzero) Offset of a STREAM frame.
fn stream_header_len(id: StreamId, offset: u64) -> usize {
    1 + vsize(id.0) + if offset > 0 { vsize(offset) } else { 0 }
}

/// Why a write (or finish / reset) failed.
#[derive(Debug, Copy, Clone, Eq, PartialEq, thiserror::Error)]
pub enum WriteError {
    /// No flow control credit or send buffer space now; wait for [`StreamEvent::Writable`].
    #[error("blocked by flow control")]
    Blocked,
    /// The peer sent STOP_SENDING with this code; the stream was reset.
    #[error("stopped by peer with code {0}")]
    Stopped(VarInt),
    /// The sending part was already finished or reset.
    #[error("stream closed for sending")]
    ClosedStream,
    /// No such stream, or it has no sending part.
    #[error("unknown stream")]
    UnknownStream,
}

/// Why a read (or stop) failed. A clean end of stream is `Ok(None)`, not an error.
#[derive(Debug, Copy, Clone, Eq, PartialEq, thiserror::Error)]
pub enum ReadError {
    /// No data available now; wait for [`StreamEvent::Readable`].
    #[error("no data available")]
    Blocked,
    /// The peer reset the stream with this code.
    #[error("reset by peer with code {0}")]
    Reset(VarInt),
    /// Everything was read already, or reading was stopped.
    #[error("stream closed for reading")]
    ClosedStream,
    /// No such stream, or it has no receiving part.
    #[error("unknown stream")]
    UnknownStream,
}

/// States of the sending part of a stream.
//= https://www.rfc-editor.org/rfc/rfc9000#section-3.1
//# {{fig-stream-send-states}} shows the states for the part of a stream that sends
//# data to a peer.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub enum SendState {
    /// Open, nothing sent yet.
    Ready,
    /// Sending data.
    Send,
    /// FIN sent, waiting for acknowledgements.
    DataSent,
    /// RESET_STREAM sent.
    ResetSent,
    /// Everything acknowledged (terminal).
    DataRecvd,
    /// RESET_STREAM acknowledged (terminal).
    ResetRecvd,
}

/// States of the receiving part of a stream.
//= https://www.rfc-editor.org/rfc/rfc9000#section-3.2
//# {{fig-stream-recv-states}} shows the states for the part of a stream that
//# receives data from a peer.
#[derive(Debug, Copy, Clone, Eq, PartialEq)]
pub enum RecvState {
    /// Receiving; final size unknown.
    Recv,
    /// Final size known, data missing.
    SizeKnown,
    /// All data received, not all read.
    DataRecvd,
    /// RESET_STREAM received, not yet reported to the application.
    ResetRecvd,
    /// All data read (terminal).
    DataRead,
    /// Reset reported to the application (terminal).
    ResetRead,
}

#[derive(Debug)]
struct SendHalf {
    state: SendState,
    buf: SendBuffer,
    /// The peer's limit for this stream.
    max_data: u64,
    /// Code and final size of the RESET_STREAM we sent.
    reset: Option<(VarInt, u64)>,
    /// Code of the peer's STOP_SENDING.
    stop_code: Option<VarInt>,
    /// STREAM_DATA_BLOCKED was queued for this limit.
    blocked_at: Option<u64>,
    /// A write was refused for lack of stream credit.
    write_blocked: bool,
}

impl SendHalf {
    fn new(max_data: u64) -> Self {
        SendHalf {
            state: SendState::Ready,
            buf: SendBuffer::new(),
            max_data,
            reset: None,
            stop_code: None,
            blocked_at: None,
            write_blocked: false,
        }
    }
    fn is_sending(&self) -> bool {
        matches!(
            self.state,
            SendState::Ready | SendState::Send | SendState::DataSent
        )
    }
    fn accepts_writes(&self) -> bool {
        matches!(self.state, SendState::Ready | SendState::Send) && !self.buf.is_finished()
    }
    fn write_error(&self) -> WriteError {
        match self.stop_code {
            Some(code) => WriteError::Stopped(code),
            None => WriteError::ClosedStream,
        }
    }
}

#[derive(Debug)]
struct RecvHalf {
    state: RecvState,
    asm: Assembler,
    final_size: Option<u64>,
    /// Highest offset received (or the final size once known).
    max_received: u64,
    /// The limit we advertised.
    advertised: u64,
    /// Window size used for extensions.
    window: u64,
    /// Auto-tuning of `window`.
    tuning: WindowTuning,
    /// Bytes of this stream counted as consumed for connection flow control.
    released: u64,
    reset_code: Option<VarInt>,
    /// The application stopped reading with this code.
    stopped: Option<VarInt>,
}

impl RecvHalf {
    fn new(window: u64) -> Self {
        RecvHalf {
            state: RecvState::Recv,
            asm: Assembler::new(),
            final_size: None,
            max_received: 0,
            advertised: window,
            window,
            tuning: WindowTuning::default(),
            released: 0,
            reset_code: None,
            stopped: None,
        }
    }
    fn receiving(&self) -> bool {
        matches!(self.state, RecvState::Recv | RecvState::SizeKnown)
    }
}

#[derive(Debug, Default)]
struct Stream {
    send: Option<SendHalf>,
    recv: Option<RecvHalf>,
    /// The QoS class of the stream's data ([`Streams::set_class`]).
    class: QosClass,
    want_retx: bool,
    want_new: bool,
    queued_retx: bool,
    queued_new: bool,
    readable_ev: bool,
    writable_ev: bool,
    conn_blocked: bool,
}

/// Stream counts of one direction.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    /// Streams we opened.
    next_local: u64,
    /// The peer's limit on streams we open.
    max_local: u64,
    /// Streams the peer opened (explicitly or implicitly).
    next_remote: u64,
    /// Our limit on streams the peer opens.
    max_remote: u64,
    /// Peer streams handed to the application.
    next_accept: u64,
    /// STREAMS_BLOCKED was queued for this limit.
    blocked_at: Option<u64>,
}

/// Connection-level flow control.
#[derive(Debug, Default)]
struct ConnFlow {
    /// The peer's MAX_DATA.
    peer_max_data: u64,
    /// Sum of write ends (final sizes for reset streams) of our sending parts.
    written: u64,
    /// Local cap on buffered unacknowledged bytes.
    send_window: u64,
    /// Bytes in send buffers.
    send_buffered: u64,
    /// DATA_BLOCKED was queued for this limit.
    blocked_at: Option<u64>,
    /// Our advertised MAX_DATA.
    local_max_data: u64,
    /// Window used for extensions.
    window: u64,
    /// Largest `window` auto-tuning may reach.
    max_window: u64,
    /// Auto-tuning of `window`.
    tuning: WindowTuning,
    /// Sum of the highest received offsets (final sizes) of all peer sending parts.
    received: u64,
    /// Bytes consumed by the application or discarded.
    consumed: u64,
}

/// Round-robin queues of streams with something to send.
#[derive(Debug, Default)]
struct Sched {
    /// Streams with lost data or a lone FIN: no flow control credit needed.
    retx: VecDeque<StreamId>,
    /// Streams with new data.
    new: VecDeque<StreamId>,
    n_retx: usize,
    n_new: usize,
    /// Streams wanting to send (retransmissions or new data) per class ([`QosClass::index`]).
    n_class: [usize; 4],
}

impl Sched {
    fn update(&mut self, id: StreamId, s: &mut Stream) {
        let (r, n) = match &s.send {
            Some(h) if h.is_sending() => (h.buf.has_retransmit(), h.buf.has_new_data()),
            _ => (false, false),
        };
        let wanted = s.want_retx || s.want_new;
        if r != s.want_retx {
            if r {
                self.n_retx += 1;
            } else {
                self.n_retx -= 1;
            }
            s.want_retx = r;
        }
        if n != s.want_new {
            if n {
                self.n_new += 1;
            } else {
                self.n_new -= 1;
            }
            s.want_new = n;
        }
        match (wanted, r || n) {
            (false, true) => self.n_class[s.class.index()] += 1,
            (true, false) => self.n_class[s.class.index()] -= 1,
            _ => {}
        }
        if r && !s.queued_retx {
            self.retx.push_back(id);
            s.queued_retx = true;
        }
        if n && !s.queued_new {
            self.new.push_back(id);
            s.queued_new = true;
        }
    }

    /// Moves stream `s` to `class`, keeping the per-class counts.
    fn set_class(&mut self, s: &mut Stream, class: QosClass) {
        if s.want_retx || s.want_new {
            self.n_class[s.class.index()] -= 1;
            self.n_class[class.index()] += 1;
        }
        s.class = class;
    }
}

/// The position in `queue` of the next stream to serve: the first, or with `class` the
/// first whose stream is of that class (entries of other classes keep their turn).
fn next_turn(
    queue: &VecDeque<StreamId>,
    map: &BTreeMap<StreamId, Stream>,
    class: Option<QosClass>,
) -> Option<usize> {
    match class {
        None => (!queue.is_empty()).then_some(0),
        Some(c) => queue
            .iter()
            .position(|id| map.get(id).is_some_and(|s| s.class == c)),
    }
}

/// Control frames waiting to be sent; checked for relevance when polled.
#[derive(Debug, Default)]
struct Pending {
    reset: BTreeSet<StreamId>,
    stop: BTreeSet<StreamId>,
    max_data: bool,
    max_streams: [bool; 2],
    max_stream_data: BTreeSet<StreamId>,
    data_blocked: Option<u64>,
    stream_data_blocked: BTreeSet<StreamId>,
    streams_blocked: [Option<u64>; 2],
}

#[derive(Debug, Default)]
struct Events {
    queue: VecDeque<StreamEvent>,
    opened: [bool; 2],
    available: [bool; 2],
}

impl Events {
    fn readable(&mut self, id: StreamId, s: &mut Stream) {
        if !s.readable_ev {
            s.readable_ev = true;
            self.queue.push_back(StreamEvent::Readable { id });
        }
    }
    fn writable(&mut self, id: StreamId, s: &mut Stream) {
        if !s.writable_ev {
            s.writable_ev = true;
            self.queue.push_back(StreamEvent::Writable { id });
        }
    }
    fn opened(&mut self, dir: Dir) {
        if !self.opened[di(dir)] {
            self.opened[di(dir)] = true;
            self.queue.push_back(StreamEvent::Opened { dir });
        }
    }
    fn available(&mut self, dir: Dir) {
        if !self.available[di(dir)] {
            self.available[di(dir)] = true;
            self.queue.push_back(StreamEvent::Available { dir });
        }
    }
}

fn di(dir: Dir) -> usize {
    match dir {
        Dir::Bi => 0,
        Dir::Uni => 1,
    }
}

const DIRS: [Dir; 2] = [Dir::Bi, Dir::Uni];

/// Which part of a stream a received frame addresses (on our side).
#[derive(Copy, Clone, Eq, PartialEq)]
enum Part {
    /// STREAM, RESET_STREAM, STREAM_DATA_BLOCKED: sent by the stream's sender.
    Recv,
    /// MAX_STREAM_DATA, STOP_SENDING: sent by the stream's receiver.
    Send,
}

/// The frame type of a frame that has one type per stream direction (MAX_STREAMS,
/// STREAMS_BLOCKED), from its bidirectional type.
fn dir_ty(bidi: FrameType, dir: Dir) -> u64 {
    bidi.0 + di(dir) as u64
}

/// All stream state of one connection.
#[derive(Debug)]
pub struct Streams {
    side: Side,
    local: StreamLimits,
    peer: StreamLimits,
    map: BTreeMap<StreamId, Stream>,
    counts: [Counts; 2],
    fc: ConnFlow,
    sched: Sched,
    pending: Pending,
    events: Events,
    /// Streams refused a write for lack of connection credit or send window.
    conn_blocked: Vec<StreamId>,
    /// Largest window stream auto-tuning may reach.
    max_stream_window: u64,
    /// The endpoint's cap on connection windows, if any; holds `fc.window` of ours.
    budget: Option<Arc<ReceiveBudget>>,
}

impl Drop for Streams {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.release(self.fc.window);
        }
    }
}

impl Streams {
    /// Stream state for the endpoint on `side` that advertises `local` in its transport
    /// parameters. The peer's limits are zero until [`Streams::set_peer_limits`].
    pub fn new(side: Side, local: StreamLimits) -> Self {
        let mut local = local;
        local.max_streams_bidi = local.max_streams_bidi.min(MAX_STREAM_COUNT);
        local.max_streams_uni = local.max_streams_uni.min(MAX_STREAM_COUNT);
        local.max_data = local.max_data.min(VarInt::MAX.into_inner());
        let mut counts = [Counts::default(); 2];
        for dir in DIRS {
            counts[di(dir)].max_remote = local.max_streams(dir);
        }
        Streams {
            side,
            local,
            peer: StreamLimits::default(),
            map: BTreeMap::new(),
            counts,
            fc: ConnFlow {
                send_window: DEFAULT_SEND_WINDOW,
                local_max_data: local.max_data,
                window: local.max_data,
                max_window: local.max_data,
                ..ConnFlow::default()
            },
            sched: Sched::default(),
            pending: Pending::default(),
            events: Events::default(),
            conn_blocked: Vec::new(),
            max_stream_window: 0,
            budget: None,
        }
    }

    /// Lets receive windows grow with need ([`Streams::tune_receive_windows`]) up to
    /// `connection` bytes for the connection and `stream` bytes per stream; windows never
    /// shrink below the limits given to [`Streams::new`].
    pub fn set_receive_window_limits(&mut self, connection: u64, stream: u64) {
        self.fc.max_window = connection.min(VarInt::MAX.into_inner()).max(self.fc.window);
        self.max_stream_window = stream.min(VarInt::MAX.into_inner());
    }

    /// Counts the connection window against `budget`, which must already hold the initial
    /// window given to [`Streams::new`] (see [`ReceiveBudget`]); growth then needs room in
    /// it, and the window is returned when these streams are dropped.
    pub fn set_receive_budget(&mut self, budget: Arc<ReceiveBudget>) {
        self.budget = Some(budget);
    }

    /// The connection-level receive window now (bytes the peer may send beyond what the
    /// application has consumed).
    pub fn receive_window(&self) -> u64 {
        self.fc.window
    }

    /// Grows the receive windows whose updates are about to be sent, as decided by the
    /// auto-tuning rule (a window the application drained in less than two round trips
    /// doubles, up to its maximum and, for the connection, within the budget). `rtt` is
    /// the round trip the peer's data takes to arrive; with several paths, the longest.
    pub fn tune_receive_windows(&mut self, now: Instant, rtt: Duration) {
        let fc = &mut self.fc;
        if self.pending.max_data
            && fc.tuning.due
            && fc.tuning.should_grow(now, rtt, fc.consumed, fc.window)
            && fc.window < fc.max_window
        {
            let grown = fc.window.saturating_mul(2).min(fc.max_window);
            if self
                .budget
                .as_ref()
                .is_none_or(|b| b.try_grant(grown - fc.window))
            {
                fc.window = grown;
                fc.local_max_data = fc.local_max_data.max(
                    fc.consumed
                        .saturating_add(grown)
                        .min(VarInt::MAX.into_inner()),
                );
            }
        }
        for id in &self.pending.max_stream_data {
            let Some(r) = self.map.get_mut(id).and_then(|s| s.recv.as_mut()) else {
                continue;
            };
            let consumed = r.asm.read_offset();
            if r.tuning.due
                && r.tuning.should_grow(now, rtt, consumed, r.window)
                && r.window < self.max_stream_window
            {
                r.window = r.window.saturating_mul(2).min(self.max_stream_window);
                r.advertised = r.advertised.max(
                    consumed
                        .saturating_add(r.window)
                        .min(VarInt::MAX.into_inner()),
                );
            }
        }
    }

    /// Caps the bytes written and not yet acknowledged across all streams (default
    /// [`DEFAULT_SEND_WINDOW`]).
    pub fn set_send_window(&mut self, bytes: u64) {
        self.fc.send_window = bytes;
        self.wake_conn_blocked();
    }

    /// Applies the peer's transport parameters. Limits only ever grow (a smaller value than
    /// one already in force, e.g. remembered for 0-RTT, is ignored).
    pub fn set_peer_limits(&mut self, peer: StreamLimits) -> Result<(), TransportError> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-4.6
        //# If a max_streams transport parameter or a MAX_STREAMS frame is received with a
        //# value greater than 2<sup>60</sup>, this would allow a maximum stream ID that
        //# cannot be expressed as a variable-length integer; see {{integer-encoding}}.  If
        //# either is received, the connection MUST be closed immediately with a connection
        //# error of type TRANSPORT_PARAMETER_ERROR if the offending value was received in a
        //# transport parameter or of type FRAME_ENCODING_ERROR if it was received in a
        //# frame; see {{immediate-close}}.
        if peer.max_streams_bidi > MAX_STREAM_COUNT || peer.max_streams_uni > MAX_STREAM_COUNT {
            return Err(TransportError::transport_parameter(
                "initial_max_streams above 2^60",
            ));
        }
        self.peer = peer;
        self.fc.peer_max_data = self.fc.peer_max_data.max(peer.max_data);
        for dir in DIRS {
            let c = &mut self.counts[di(dir)];
            if peer.max_streams(dir) > c.max_local {
                c.max_local = peer.max_streams(dir);
                self.events.available(dir);
            }
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-18.2
        //# If present, transport parameters that set initial per-stream flow control limits
        //# (initial_max_stream_data_bidi_local, initial_max_stream_data_bidi_remote, and
        //# initial_max_stream_data_uni) are equivalent to sending a MAX_STREAM_DATA frame
        //# ({{frame-max-stream-data}}) on every stream of the corresponding type
        //# immediately after opening.
        let side = self.side;
        for (&id, s) in self.map.iter_mut() {
            if let Some(h) = s.send.as_mut() {
                let limit = peer_send_limit(&peer, side, id);
                if limit > h.max_data {
                    h.max_data = limit;
                    if h.write_blocked && h.accepts_writes() {
                        h.write_blocked = false;
                        self.events.writable(id, s);
                    }
                }
            }
        }
        self.wake_conn_blocked();
        Ok(())
    }

    // ----------------------------------------------------------------------------------
    // Application API
    // ----------------------------------------------------------------------------------

    /// Opens a stream, or returns `None` if the peer's stream limit is reached (a
    /// STREAMS_BLOCKED frame is then queued, once per limit value).
    pub fn open(&mut self, dir: Dir) -> Option<StreamId> {
        let c = &mut self.counts[di(dir)];
        if c.next_local >= c.max_local {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-4.6
            //# An endpoint that is unable to open a new stream due to the peer's limits SHOULD
            //# send a STREAMS_BLOCKED frame ({{frame-streams-blocked}}).
            if c.blocked_at != Some(c.max_local) {
                c.blocked_at = Some(c.max_local);
                self.pending.streams_blocked[di(dir)] = Some(c.max_local);
            }
            return None;
        }
        let id = StreamId::new(self.side, dir, c.next_local);
        c.next_local += 1;
        let stream = Stream {
            send: Some(SendHalf::new(peer_send_limit(&self.peer, self.side, id))),
            recv: (dir == Dir::Bi).then(|| RecvHalf::new(self.local.max_stream_data_bidi_local)),
            ..Stream::default()
        };
        self.map.insert(id, stream);
        Some(id)
    }

    /// The next stream the peer opened that the application has not accepted yet.
    pub fn accept(&mut self, dir: Dir) -> Option<StreamId> {
        let c = &mut self.counts[di(dir)];
        if c.next_accept >= c.next_remote {
            return None;
        }
        let id = StreamId::new(self.side.peer(), dir, c.next_accept);
        c.next_accept += 1;
        Some(id)
    }

    /// Writes a copy of as much of `data` as flow control and the send window allow;
    /// returns how much. Fails with [`WriteError::Blocked`] if nothing could be written.
    pub fn write(&mut self, id: StreamId, data: &[u8]) -> Result<usize, WriteError> {
        let n = self.write_credit(id, data.len())?;
        if let Some(h) = self.map.get_mut(&id).and_then(|s| s.send.as_mut()) {
            h.buf.write(&data[..n]);
        }
        self.after_write(id, n);
        Ok(n)
    }

    /// Like [`Streams::write`] without copying: takes as much of `data` as allowed off its
    /// front and returns how much.
    pub fn write_bytes(&mut self, id: StreamId, data: &mut Bytes) -> Result<usize, WriteError> {
        let n = self.write_credit(id, data.len())?;
        if let Some(h) = self.map.get_mut(&id).and_then(|s| s.send.as_mut()) {
            h.buf.write_bytes(data.split_to(n));
        }
        self.after_write(id, n);
        Ok(n)
    }

    /// How many bytes a write could take now.
    pub fn writable(&self, id: StreamId) -> u64 {
        match self.map.get(&id).and_then(|s| s.send.as_ref()) {
            Some(h) if h.accepts_writes() => (h.max_data - h.buf.write_end())
                .min(self.fc.peer_max_data.saturating_sub(self.fc.written))
                .min(self.fc.send_window.saturating_sub(self.fc.send_buffered)),
            _ => 0,
        }
    }

    /// Ends the stream cleanly: a FIN follows the written data.
    pub fn finish(&mut self, id: StreamId) -> Result<(), WriteError> {
        let h = self.send_half(id)?;
        if !h.accepts_writes() {
            return Err(h.write_error());
        }
        h.buf.finish();
        if let Some(s) = self.map.get_mut(&id) {
            self.sched.update(id, s);
        }
        Ok(())
    }

    /// Abandons sending: queues RESET_STREAM with `error_code`; unsent and unacknowledged
    /// data is dropped.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-3.1
    //# From any state that is one of "Ready", "Send", or "Data Sent", an application
    //# can signal that it wishes to abandon transmission of stream data.
    pub fn reset(&mut self, id: StreamId, error_code: VarInt) -> Result<(), WriteError> {
        let h = self.send_half(id)?;
        if !h.is_sending() {
            return Err(h.write_error());
        }
        self.reset_send(id, error_code);
        Ok(())
    }

    /// Reads the next in-order bytes (at most `max_len`, at least 1). `Ok(None)` means the
    /// stream ended cleanly and everything was read.
    pub fn read(&mut self, id: StreamId, max_len: usize) -> Result<Option<Bytes>, ReadError> {
        self.read_with(id, |asm| {
            let b = asm.read(max_len)?;
            let n = b.len() as u64;
            Some((b, n))
        })
    }

    /// Copies the next in-order bytes into `buf`. `Ok(None)` means the stream ended cleanly
    /// and everything was read.
    pub fn read_into(&mut self, id: StreamId, buf: &mut [u8]) -> Result<Option<usize>, ReadError> {
        self.read_with(id, |asm| {
            let n = asm.read_into(buf);
            (n > 0).then_some((n, n as u64))
        })
    }

    /// How many bytes can be read now, in order.
    pub fn readable(&self, id: StreamId) -> u64 {
        match self.map.get(&id).and_then(|s| s.recv.as_ref()) {
            Some(r) if r.stopped.is_none() => r.asm.readable(),
            _ => 0,
        }
    }

    /// Abandons reading: buffered data is dropped and, if the peer may still send, a
    /// STOP_SENDING with `error_code` is queued.
    pub fn stop(&mut self, id: StreamId, error_code: VarInt) -> Result<(), ReadError> {
        let existed = self.existed(id);
        let Some(s) = self.map.get_mut(&id) else {
            return Err(if existed {
                ReadError::ClosedStream
            } else {
                ReadError::UnknownStream
            });
        };
        let Some(r) = s.recv.as_mut() else {
            return Err(ReadError::UnknownStream);
        };
        if r.stopped.is_some() {
            return Err(ReadError::ClosedStream);
        }
        match r.state {
            RecvState::DataRead | RecvState::ResetRead => return Err(ReadError::ClosedStream),
            RecvState::Recv | RecvState::SizeKnown => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-3.5
                //# If the stream is in the "Recv" or "Size Known" state, the transport SHOULD
                //# signal this by sending a STOP_SENDING frame to prompt closure of the stream in
                //# the opposite direction.
                r.stopped = Some(error_code);
                self.pending.stop.insert(id);
                r.asm.skip_readable();
                let to = r.max_received;
                release(&mut self.fc, &mut self.pending, r, to);
                if r.final_size == Some(r.asm.contiguous_end()) {
                    r.state = RecvState::DataRead;
                }
            }
            RecvState::DataRecvd | RecvState::ResetRecvd => {
                r.stopped = Some(error_code);
                r.asm.clear();
                r.state = if r.state == RecvState::DataRecvd {
                    RecvState::DataRead
                } else {
                    RecvState::ResetRead
                };
                let to = r.final_size.unwrap_or(r.max_received);
                release(&mut self.fc, &mut self.pending, r, to);
            }
        }
        self.maybe_forget(id);
        Ok(())
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<StreamEvent> {
        while let Some(ev) = self.events.queue.pop_front() {
            match ev {
                StreamEvent::Readable { id } => match self.map.get_mut(&id) {
                    Some(s) => s.readable_ev = false,
                    None => continue,
                },
                StreamEvent::Writable { id } => match self.map.get_mut(&id) {
                    Some(s) => s.writable_ev = false,
                    None => continue,
                },
                StreamEvent::Opened { dir } => self.events.opened[di(dir)] = false,
                StreamEvent::Available { dir } => self.events.available[di(dir)] = false,
                StreamEvent::Finished { .. } | StreamEvent::Stopped { .. } => {}
            }
            return Some(ev);
        }
        None
    }

    /// State of the sending part of a live stream.
    pub fn send_state(&self, id: StreamId) -> Option<SendState> {
        self.map.get(&id)?.send.as_ref().map(|h| h.state)
    }

    /// State of the receiving part of a live stream.
    pub fn recv_state(&self, id: StreamId) -> Option<RecvState> {
        self.map.get(&id)?.recv.as_ref().map(|r| r.state)
    }

    /// How fragmented the received data of a live stream is: the pieces its reassembly
    /// holds and their bytes.
    pub fn recv_fragmentation(&self, id: StreamId) -> Option<(usize, u64)> {
        let r = self.map.get(&id)?.recv.as_ref()?;
        Some((r.asm.segments(), r.asm.buffered()))
    }

    /// Number of streams still tracked (not yet forgotten).
    pub fn stream_count(&self) -> usize {
        self.map.len()
    }

    /// Bytes held in send buffers (written, not yet acknowledged as a prefix).
    pub fn send_buffered(&self) -> u64 {
        self.fc.send_buffered
    }

    /// Bytes held in receive buffers (walks every stream).
    pub fn recv_buffered(&self) -> u64 {
        self.map
            .values()
            .filter_map(|s| s.recv.as_ref())
            .map(|r| r.asm.buffered())
            .sum()
    }

    // ----------------------------------------------------------------------------------
    // Frame handlers
    // ----------------------------------------------------------------------------------

    /// Handles a STREAM frame.
    pub fn on_stream(
        &mut self,
        id: StreamId,
        offset: u64,
        data: Bytes,
        fin: bool,
    ) -> Result<(), TransportError> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.8
        //# The largest offset delivered
        //# on a stream -- the sum of the offset and data length -- cannot exceed
        //# 2<sup>62</sup>-1, as it is not possible to provide flow control credit for that
        //# data.  Receipt of a frame that exceeds this limit MUST be treated as a
        //# connection error of type FRAME_ENCODING_ERROR or FLOW_CONTROL_ERROR.
        let Some(end) = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= VarInt::MAX.into_inner())
        else {
            return Err(TransportError::flow_control("STREAM data beyond 2^62 - 1")
                .in_frame(FrameType::STREAM.0));
        };
        if !self.validate(id, Part::Recv, FrameType::STREAM.0)? {
            return Ok(());
        }
        let Some(s) = self.map.get_mut(&id) else {
            return Ok(());
        };
        let Some(r) = s.recv.as_mut() else {
            return Ok(());
        };
        check_final_size(r, end, fin).map_err(|e| e.in_frame(FrameType::STREAM.0))?;
        let delta = check_flow(&self.fc, r, end).map_err(|e| e.in_frame(FrameType::STREAM.0))?;
        self.fc.received += delta;
        r.max_received += delta;
        if fin {
            r.final_size = Some(end);
        }
        if !r.receiving() {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-3.2
            //# After all data has been
            //# received, any STREAM or STREAM_DATA_BLOCKED frames for the stream can be
            //# discarded.
            return Ok(());
        }
        if fin {
            r.state = RecvState::SizeKnown;
        }
        r.asm.insert(offset, data);
        //= https://www.rfc-editor.org/rfc/rfc9000#section-21.7
        //# QUIC deployments SHOULD provide mitigations for stream fragmentation attacks.
        //# Mitigations could consist of avoiding overcommitting memory, limiting the size
        //# of tracking data structures, delaying reassembly of STREAM frames, implementing
        //# heuristics based on the age and duration of reassembly holes, or some
        //# combination of these.
        if r.asm.segments() > max_segments(r.window) {
            return Err(TransportError::protocol_violation(format!(
                "stream {} data in over {} pieces with holes between them",
                id.0,
                max_segments(r.window)
            ))
            .in_frame(FrameType::STREAM.0));
        }
        if r.stopped.is_some() {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-3.5
            //# STREAM frames received after sending a STOP_SENDING frame are still counted
            //# toward connection and stream flow control, even though these frames can be
            //# discarded upon receipt.
            r.asm.skip_readable();
            let to = r.max_received;
            release(&mut self.fc, &mut self.pending, r, to);
            if r.final_size == Some(r.asm.read_offset()) {
                r.state = RecvState::DataRead;
                self.maybe_forget(id);
            }
            return Ok(());
        }
        if r.final_size == Some(r.asm.contiguous_end()) {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-3.2
            //# Once all data for the stream has been received, the receiving part enters the
            //# "Data Recvd" state.
            r.state = RecvState::DataRecvd;
        }
        if r.asm.readable() > 0 || r.state == RecvState::DataRecvd {
            self.events.readable(id, s);
        }
        Ok(())
    }

    /// Handles a RESET_STREAM frame.
    pub fn on_reset_stream(
        &mut self,
        id: StreamId,
        error_code: VarInt,
        final_size: u64,
    ) -> Result<(), TransportError> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.4
        //# An endpoint that receives a RESET_STREAM frame for a send-only stream
        //# MUST terminate the connection with error STREAM_STATE_ERROR.
        if !self.validate(id, Part::Recv, FrameType::RESET_STREAM.0)? {
            return Ok(());
        }
        let Some(s) = self.map.get_mut(&id) else {
            return Ok(());
        };
        let Some(r) = s.recv.as_mut() else {
            return Ok(());
        };
        check_final_size(r, final_size, true).map_err(|e| e.in_frame(FrameType::RESET_STREAM.0))?;
        //= https://www.rfc-editor.org/rfc/rfc9000#section-4.5
        //# The
        //# receiver MUST use the final size of the stream to account for all bytes sent on
        //# the stream in its connection-level flow controller.
        let delta = check_flow(&self.fc, r, final_size)
            .map_err(|e| e.in_frame(FrameType::RESET_STREAM.0))?;
        self.fc.received += delta;
        r.max_received += delta;
        r.final_size = Some(final_size);
        if !r.receiving() {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-3.2
            //# A RESET_STREAM signal might be suppressed or withheld if
            //# stream data is completely received and is buffered to be read by the
            //# application.  If the RESET_STREAM is suppressed, the receiving part of the
            //# stream remains in "Data Recvd".
            return Ok(());
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-3.2
        //# An implementation MAY interrupt delivery of
        //# stream data, discard any data that was not consumed, and signal the receipt of
        //# the RESET_STREAM.
        r.asm.clear();
        r.reset_code = Some(error_code);
        release(&mut self.fc, &mut self.pending, r, final_size);
        if r.stopped.is_some() {
            r.state = RecvState::ResetRead;
            self.maybe_forget(id);
        } else {
            r.state = RecvState::ResetRecvd;
            self.events.readable(id, s);
        }
        Ok(())
    }

    /// Handles a STOP_SENDING frame: the sending part is reset with the peer's code.
    pub fn on_stop_sending(
        &mut self,
        id: StreamId,
        error_code: VarInt,
    ) -> Result<(), TransportError> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.5
        //# Receiving a STOP_SENDING frame for a
        //# locally initiated stream that has not yet been created MUST be treated as a
        //# connection error of type STREAM_STATE_ERROR.  An endpoint that receives a
        //# STOP_SENDING frame for a receive-only stream MUST terminate the connection with
        //# error STREAM_STATE_ERROR.
        if !self.validate(id, Part::Send, FrameType::STOP_SENDING.0)? {
            return Ok(());
        }
        let Some(h) = self.map.get_mut(&id).and_then(|s| s.send.as_mut()) else {
            return Ok(());
        };
        if !h.is_sending() {
            return Ok(());
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-3.5
        //# An endpoint that receives a STOP_SENDING frame MUST send a RESET_STREAM
        //# frame if the stream is in the "Ready" or "Send" state.
        //= https://www.rfc-editor.org/rfc/rfc9000#section-3.5
        //# An endpoint SHOULD copy the error code from the STOP_SENDING frame to the
        //# RESET_STREAM frame it sends, but it can use any application error code.
        h.stop_code = Some(error_code);
        self.reset_send(id, error_code);
        self.events
            .queue
            .push_back(StreamEvent::Stopped { id, error_code });
        Ok(())
    }

    /// Handles a MAX_DATA frame.
    pub fn on_max_data(&mut self, max: u64) {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-4.1
        //# A sender MUST ignore any MAX_STREAM_DATA or MAX_DATA frames that do not increase
        //# flow control limits.
        if max > self.fc.peer_max_data {
            self.fc.peer_max_data = max;
            self.wake_conn_blocked();
        }
    }

    /// Handles a MAX_STREAM_DATA frame.
    pub fn on_max_stream_data(&mut self, id: StreamId, max: u64) -> Result<(), TransportError> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.10
        //# Receiving a MAX_STREAM_DATA frame for a
        //# locally initiated stream that has not yet been created MUST be treated as a
        //# connection error of type STREAM_STATE_ERROR.  An endpoint that receives a
        //# MAX_STREAM_DATA frame for a receive-only stream MUST terminate the connection
        //# with error STREAM_STATE_ERROR.
        if !self.validate(id, Part::Send, FrameType::MAX_STREAM_DATA.0)? {
            return Ok(());
        }
        let Some(s) = self.map.get_mut(&id) else {
            return Ok(());
        };
        let Some(h) = s.send.as_mut() else {
            return Ok(());
        };
        //= https://www.rfc-editor.org/rfc/rfc9000#section-4.1
        //# A sender MUST ignore any MAX_STREAM_DATA or MAX_DATA frames that do not increase
        //# flow control limits.
        if max > h.max_data {
            h.max_data = max;
            if h.write_blocked && h.accepts_writes() {
                h.write_blocked = false;
                self.events.writable(id, s);
            }
        }
        Ok(())
    }

    /// Handles a MAX_STREAMS frame.
    pub fn on_max_streams(&mut self, dir: Dir, count: u64) -> Result<(), TransportError> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.11
        //# Receipt of a frame that permits opening of a stream larger
        //# than this limit MUST be treated as a connection error of type
        //# FRAME_ENCODING_ERROR.
        if count > MAX_STREAM_COUNT {
            return Err(TransportError::frame_encoding("MAX_STREAMS above 2^60")
                .in_frame(dir_ty(FrameType::MAX_STREAMS_BIDI, dir)));
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.11
        //# MAX_STREAMS frames that do not
        //# increase the stream limit MUST be ignored.
        let c = &mut self.counts[di(dir)];
        if count > c.max_local {
            c.max_local = count;
            self.events.available(dir);
        }
        Ok(())
    }

    /// Handles a DATA_BLOCKED frame: re-sends MAX_DATA if the peer missed an update.
    pub fn on_data_blocked(&mut self, limit: u64) {
        if self.fc.local_max_data > limit {
            self.pending.max_data = true;
        }
    }

    /// Handles a STREAM_DATA_BLOCKED frame: re-sends MAX_STREAM_DATA if the peer missed an
    /// update.
    pub fn on_stream_data_blocked(
        &mut self,
        id: StreamId,
        limit: u64,
    ) -> Result<(), TransportError> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.13
        //# An endpoint that receives a STREAM_DATA_BLOCKED frame for a send-only stream
        //# MUST terminate the connection with error STREAM_STATE_ERROR.
        if !self.validate(id, Part::Recv, FrameType::STREAM_DATA_BLOCKED.0)? {
            return Ok(());
        }
        if let Some(r) = self.map.get(&id).and_then(|s| s.recv.as_ref())
            && r.state == RecvState::Recv
            && r.stopped.is_none()
            && r.advertised > limit
        {
            self.pending.max_stream_data.insert(id);
        }
        Ok(())
    }

    /// Handles a STREAMS_BLOCKED frame: re-sends MAX_STREAMS if the peer missed an update.
    pub fn on_streams_blocked(&mut self, dir: Dir, limit: u64) -> Result<(), TransportError> {
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.14
        //# Receipt of
        //# a frame that encodes a larger stream ID MUST be treated as a connection error
        //# of type STREAM_LIMIT_ERROR or FRAME_ENCODING_ERROR.
        if limit > MAX_STREAM_COUNT {
            return Err(TransportError::frame_encoding("STREAMS_BLOCKED above 2^60")
                .in_frame(dir_ty(FrameType::STREAMS_BLOCKED_BIDI, dir)));
        }
        if self.counts[di(dir)].max_remote > limit {
            self.pending.max_streams[di(dir)] = true;
        }
        Ok(())
    }

    // ----------------------------------------------------------------------------------
    // Packet builder
    // ----------------------------------------------------------------------------------

    /// The next control frame whose encoding fits in `max_len` bytes, if any. The frame is
    /// considered sent; report its fate with [`Streams::on_control_acked`] /
    /// [`Streams::on_control_lost`].
    pub fn poll_control(&mut self, max_len: usize) -> Option<ControlFrame> {
        let map = &self.map;
        if let Some(f) = take_from_set(&mut self.pending.reset, max_len, |id| reset_frame(map, id))
        {
            return Some(f);
        }
        if let Some(f) = take_from_set(&mut self.pending.stop, max_len, |id| stop_frame(map, id)) {
            return Some(f);
        }
        if self.pending.max_data {
            let f = ControlFrame::MaxData {
                max: self.fc.local_max_data,
            };
            if f.encoded_len() <= max_len {
                self.pending.max_data = false;
                return Some(f);
            }
        }
        for dir in DIRS {
            if self.pending.max_streams[di(dir)] {
                let f = ControlFrame::MaxStreams {
                    dir,
                    count: self.counts[di(dir)].max_remote,
                };
                if f.encoded_len() <= max_len {
                    self.pending.max_streams[di(dir)] = false;
                    return Some(f);
                }
            }
        }
        if let Some(f) = take_from_set(&mut self.pending.max_stream_data, max_len, |id| {
            max_stream_data_frame(map, id)
        }) {
            return Some(f);
        }
        if let Some(limit) = self.pending.data_blocked {
            match data_blocked_frame(&self.fc, limit) {
                None => self.pending.data_blocked = None,
                Some(f) if f.encoded_len() <= max_len => {
                    self.pending.data_blocked = None;
                    return Some(f);
                }
                Some(_) => {}
            }
        }
        if let Some(f) = take_from_set(&mut self.pending.stream_data_blocked, max_len, |id| {
            stream_data_blocked_frame(map, id)
        }) {
            if let ControlFrame::StreamDataBlocked { id, .. } = f
                && let Some(h) = self.map.get_mut(&id).and_then(|s| s.send.as_mut())
                && h.state == SendState::Ready
            {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-3.1
                //# Sending the first STREAM or STREAM_DATA_BLOCKED frame causes a sending part of a
                //# stream to enter the "Send" state.
                h.state = SendState::Send;
            }
            return Some(f);
        }
        for dir in DIRS {
            if let Some(limit) = self.pending.streams_blocked[di(dir)] {
                match streams_blocked_frame(&self.counts, dir, limit) {
                    None => self.pending.streams_blocked[di(dir)] = None,
                    Some(f) if f.encoded_len() <= max_len => {
                        self.pending.streams_blocked[di(dir)] = None;
                        return Some(f);
                    }
                    Some(_) => {}
                }
            }
        }
        None
    }

    /// True if [`Streams::poll_control`] has a frame to give (with enough room).
    pub fn has_control(&self) -> bool {
        let map = &self.map;
        let p = &self.pending;
        p.max_data
            || p.max_streams.iter().any(|&b| b)
            || p.reset.iter().any(|&id| reset_frame(map, id).is_some())
            || p.stop.iter().any(|&id| stop_frame(map, id).is_some())
            || p.max_stream_data
                .iter()
                .any(|&id| max_stream_data_frame(map, id).is_some())
            || p.data_blocked
                .is_some_and(|l| data_blocked_frame(&self.fc, l).is_some())
            || p.stream_data_blocked
                .iter()
                .any(|&id| stream_data_blocked_frame(map, id).is_some())
            || DIRS.iter().any(|&d| {
                p.streams_blocked[di(d)]
                    .is_some_and(|l| streams_blocked_frame(&self.counts, d, l).is_some())
            })
    }

    /// True if the sending part of stream `id` may still send STREAM frames (it was not
    /// reset).
    pub fn is_sending(&self, id: StreamId) -> bool {
        self.map
            .get(&id)
            .and_then(|s| s.send.as_ref())
            .is_some_and(|h| h.is_sending())
    }

    /// True if `offset..offset + len` of stream `id` (and its FIN if `fin`) is acknowledged,
    /// or the stream's sending part is gone.
    pub fn is_acked(&self, id: StreamId, offset: u64, len: u64, fin: bool) -> bool {
        self.map
            .get(&id)
            .and_then(|s| s.send.as_ref())
            .is_none_or(|h| h.buf.is_acked(offset, len, fin))
    }

    /// True if stream data (new or retransmitted) or a FIN waits to be sent.
    pub fn has_stream_data(&self) -> bool {
        self.sched.n_retx > 0 || self.sched.n_new > 0
    }

    /// True if stream data (new or retransmitted) or a FIN of a stream of `class` waits to
    /// be sent.
    pub fn has_stream_data_of(&self, class: QosClass) -> bool {
        self.sched.n_class[class.index()] > 0
    }

    /// Sets the QoS class of stream `id`'s data (from the next frame on); false if the
    /// stream does not exist or has no sending part.
    pub fn set_class(&mut self, id: StreamId, class: QosClass) -> bool {
        match self.map.get_mut(&id) {
            Some(s) if s.send.is_some() => {
                self.sched.set_class(s, class);
                true
            }
            _ => false,
        }
    }

    /// The QoS class of stream `id`'s data, if the stream exists.
    pub fn class(&self, id: StreamId) -> Option<QosClass> {
        self.map.get(&id).map(|s| s.class)
    }

    /// Connection-level credit left for new stream data: the peer's MAX_DATA minus the
    /// bytes written to our streams so far.
    pub fn send_credit(&self) -> u64 {
        self.fc.peer_max_data.saturating_sub(self.fc.written)
    }

    /// Bytes of stream data waiting to be sent: (never sent, declared lost), of the streams
    /// of `class` (of every stream when `None`). Walks the streams that are sending; used to
    /// brief the packet scheduler.
    pub fn pending_bytes(&self, class: Option<QosClass>) -> (u64, u64) {
        self.map
            .values()
            .filter(|s| class.is_none_or(|c| s.class == c))
            .filter_map(|s| s.send.as_ref())
            .filter(|h| h.is_sending())
            .fold((0, 0), |(new, lost), h| {
                (new + h.buf.unsent_bytes(), lost + h.buf.lost_bytes())
            })
    }

    /// True if control frames or stream data wait to be sent.
    pub fn wants_to_send(&self) -> bool {
        self.has_stream_data() || self.has_control()
    }

    /// The next STREAM frame's data, sized so that the whole frame (type, Stream ID, Offset
    /// if nonzero, Length, data) fits in `max_frame_len` bytes, from a stream of `class`
    /// (any stream when `None`). Lost data goes first; among streams, round robin, one
    /// frame per stream per turn (streams of other classes keep their turns).
    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.3
    //# Endpoints SHOULD prioritize retransmission of data over sending new data, unless
    //# priorities specified by the application indicate otherwise; see
    //# {{stream-prioritization}}.
    pub fn poll_stream_data(
        &mut self,
        max_frame_len: usize,
        class: Option<QosClass>,
    ) -> Option<StreamChunk> {
        for retx in [true, false] {
            loop {
                let queue = if retx {
                    &mut self.sched.retx
                } else {
                    &mut self.sched.new
                };
                let Some(pos) = next_turn(queue, &self.map, class) else {
                    break;
                };
                let Some(id) = queue.remove(pos) else {
                    break;
                };
                let Some(s) = self.map.get_mut(&id) else {
                    continue;
                };
                if retx {
                    s.queued_retx = false;
                    if !s.want_retx {
                        continue;
                    }
                } else {
                    s.queued_new = false;
                    if !s.want_new {
                        continue;
                    }
                }
                let Some(h) = s.send.as_mut() else {
                    continue;
                };
                let fit = |offset: u64| {
                    max_data_len(max_frame_len.checked_sub(stream_header_len(id, offset))?)
                };
                let Some(t) = h.buf.poll_transmit(fit) else {
                    // Not even this stream's frame fits: keep its turn and stop.
                    if retx {
                        s.queued_retx = true;
                        self.sched.retx.insert(pos, id);
                    } else {
                        s.queued_new = true;
                        self.sched.new.insert(pos, id);
                    }
                    return None;
                };
                if t.fin {
                    //= https://www.rfc-editor.org/rfc/rfc9000#section-3.1
                    //# After the application indicates that all stream data has been sent and a STREAM
                    //# frame containing the FIN bit is sent, the sending part of the stream enters the
                    //# "Data Sent" state.
                    h.state = SendState::DataSent;
                } else if h.state == SendState::Ready {
                    h.state = SendState::Send;
                }
                self.sched.update(id, s);
                return Some(StreamChunk {
                    id,
                    offset: t.offset,
                    data: t.data,
                    fin: t.fin,
                });
            }
        }
        None
    }

    // ----------------------------------------------------------------------------------
    // Recovery feedback
    // ----------------------------------------------------------------------------------

    /// A STREAM frame we sent was acknowledged.
    pub fn on_stream_acked(&mut self, id: StreamId, offset: u64, len: u64, fin: bool) {
        let Some(s) = self.map.get_mut(&id) else {
            return;
        };
        let Some(h) = s.send.as_mut() else {
            return;
        };
        if !h.is_sending() {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-13.3
            //# Once an endpoint
            //# sends a RESET_STREAM frame, no further STREAM frames are needed.
            return;
        }
        let freed = h.buf.ack(offset, len, fin);
        self.fc.send_buffered -= freed;
        let finished = h.buf.is_fully_acked();
        if finished {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-3.1
            //# Once all stream data has been successfully acknowledged, the sending part of the
            //# stream enters the "Data Recvd" state, which is a terminal state.
            h.state = SendState::DataRecvd;
            self.events.queue.push_back(StreamEvent::Finished { id });
        }
        self.sched.update(id, s);
        if freed > 0 {
            self.wake_conn_blocked();
        }
        if finished {
            self.maybe_forget(id);
        }
    }

    /// A STREAM frame we sent was declared lost: its unacknowledged bytes (and FIN) are
    /// queued for retransmission, unless the stream was reset.
    pub fn on_stream_lost(&mut self, id: StreamId, offset: u64, len: u64, fin: bool) {
        let Some(s) = self.map.get_mut(&id) else {
            return;
        };
        let Some(h) = s.send.as_mut() else {
            return;
        };
        if !h.is_sending() {
            return;
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-13.3
        //# Application data sent in STREAM frames is retransmitted in new STREAM frames
        //# unless the endpoint has sent a RESET_STREAM for that stream.
        h.buf.lost(offset, len, fin);
        self.sched.update(id, s);
    }

    /// A control frame from [`Streams::poll_control`] was acknowledged.
    pub fn on_control_acked(&mut self, frame: ControlFrame) {
        if let ControlFrame::ResetStream { id, .. } = frame
            && let Some(h) = self.map.get_mut(&id).and_then(|s| s.send.as_mut())
            && h.state == SendState::ResetSent
        {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-3.1
            //# Once a packet containing a RESET_STREAM has been acknowledged, the sending part
            //# of the stream enters the "Reset Recvd" state, which is a terminal state.
            h.state = SendState::ResetRecvd;
            self.maybe_forget(id);
        }
    }

    /// A control frame from [`Streams::poll_control`] was declared lost: it is queued again
    /// if its information is still current.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.3
    //# A new frame is sent if a packet containing
    //# the most recent frame for a scope is lost, but only while the endpoint is
    //# blocked on the corresponding limit.
    pub fn on_control_lost(&mut self, frame: ControlFrame) {
        let map = &self.map;
        match frame {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-13.3
            //# Cancellation of stream transmission, as carried in a RESET_STREAM frame, is
            //# sent until acknowledged or until all stream data is acknowledged by the peer
            ControlFrame::ResetStream { id, .. } => {
                if reset_frame(map, id).is_some() {
                    self.pending.reset.insert(id);
                }
            }
            //= https://www.rfc-editor.org/rfc/rfc9000#section-13.3
            //# Similarly, a request to cancel stream transmission, as encoded in a
            //# STOP_SENDING frame, is sent until the receiving part of the stream enters
            //# either a "Data Recvd" or "Reset Recvd" state
            ControlFrame::StopSending { id, .. } => {
                if stop_frame(map, id).is_some() {
                    self.pending.stop.insert(id);
                }
            }
            //= https://www.rfc-editor.org/rfc/rfc9000#section-13.3
            //# An updated
            //# value is sent in a MAX_DATA frame if the packet containing the most recently
            //# sent MAX_DATA frame is declared lost or when the endpoint decides to update
            //# the limit.
            ControlFrame::MaxData { max } => {
                if max == self.fc.local_max_data {
                    self.pending.max_data = true;
                }
            }
            //= https://www.rfc-editor.org/rfc/rfc9000#section-13.3
            //# An
            //# endpoint SHOULD stop sending MAX_STREAM_DATA frames when the receiving part of
            //# the stream enters a "Size Known" or "Reset Recvd" state.
            ControlFrame::MaxStreamData { id, .. } => {
                if max_stream_data_frame(map, id) == Some(frame) {
                    self.pending.max_stream_data.insert(id);
                }
            }
            ControlFrame::MaxStreams { dir, count } => {
                if count == self.counts[di(dir)].max_remote {
                    self.pending.max_streams[di(dir)] = true;
                }
            }
            ControlFrame::DataBlocked { limit } => {
                if data_blocked_frame(&self.fc, limit).is_some() {
                    self.pending.data_blocked = Some(limit);
                }
            }
            ControlFrame::StreamDataBlocked { id, .. } => {
                if stream_data_blocked_frame(map, id) == Some(frame) {
                    self.pending.stream_data_blocked.insert(id);
                }
            }
            ControlFrame::StreamsBlocked { dir, limit } => {
                if streams_blocked_frame(&self.counts, dir, limit).is_some() {
                    self.pending.streams_blocked[di(dir)] = Some(limit);
                }
            }
        }
    }

    // ----------------------------------------------------------------------------------
    // Internals
    // ----------------------------------------------------------------------------------

    /// True if `id` was opened at some point (it may be forgotten since).
    fn existed(&self, id: StreamId) -> bool {
        let c = &self.counts[di(id.dir())];
        if id.initiator() == self.side {
            id.index() < c.next_local
        } else {
            id.index() < c.next_remote
        }
    }

    fn send_half(&mut self, id: StreamId) -> Result<&mut SendHalf, WriteError> {
        let closed = self.closed_send_part(id);
        lookup_send(&mut self.map, id, closed)
    }

    /// True if `id` had a sending part that is forgotten now.
    fn closed_send_part(&self, id: StreamId) -> bool {
        self.existed(id) && (id.dir() == Dir::Bi || id.initiator() == self.side)
    }

    /// Checks a frame's stream ID against the stream's type and the stream limits, and
    /// opens peer streams implicitly. Returns whether the stream is live (false: it was
    /// closed and forgotten, and the frame is ignored).
    fn validate(&mut self, id: StreamId, part: Part, frame: u64) -> Result<bool, TransportError> {
        let local = id.initiator() == self.side;
        if id.dir() == Dir::Uni {
            match part {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-19.8
                //# An endpoint MUST terminate the connection with error STREAM_STATE_ERROR if it
                //# receives a STREAM frame for a locally initiated stream that has not yet been
                //# created, or for a send-only stream.
                Part::Recv if local => {
                    return Err(TransportError::stream_state(format!(
                        "frame for send-only stream {id}"
                    ))
                    .in_frame(frame));
                }
                Part::Send if !local => {
                    return Err(TransportError::stream_state(format!(
                        "frame for receive-only stream {id}"
                    ))
                    .in_frame(frame));
                }
                _ => {}
            }
        }
        let c = &mut self.counts[di(id.dir())];
        if local {
            // A frame from the peer can only be about a stream it has seen us open.
            if id.index() >= c.next_local {
                return Err(TransportError::stream_state(format!(
                    "frame for locally initiated stream {id} that was not opened"
                ))
                .in_frame(frame));
            }
        } else {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-4.6
            //# An endpoint that
            //# receives a frame with a stream ID exceeding the limit it has sent MUST treat
            //# this as a connection error of type STREAM_LIMIT_ERROR; see {{error-handling}}
            //# for details on error handling.
            if id.index() >= c.max_remote {
                return Err(TransportError::stream_limit(format!(
                    "stream {id} exceeds the limit of {} streams",
                    c.max_remote
                ))
                .in_frame(frame));
            }
            if id.index() >= c.next_remote {
                self.open_remote_up_to(id);
            }
        }
        Ok(self.map.contains_key(&id))
    }

    /// Opens peer stream `id` and every lower-numbered stream of its type.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-3.2
    //# Before a stream is created, all streams of the same type with lower-numbered
    //# stream IDs MUST be created.  This ensures that the creation order for streams is
    //# consistent on both endpoints.
    fn open_remote_up_to(&mut self, id: StreamId) {
        let dir = id.dir();
        let peer_side = self.side.peer();
        let window = match dir {
            Dir::Bi => self.local.max_stream_data_bidi_remote,
            Dir::Uni => self.local.max_stream_data_uni,
        };
        let c = &mut self.counts[di(dir)];
        for index in c.next_remote..=id.index() {
            let sid = StreamId::new(peer_side, dir, index);
            //= https://www.rfc-editor.org/rfc/rfc9000#section-3.1
            //# The sending part of a bidirectional stream initiated by a peer (type 0 for a
            //# server, type 1 for a client) starts in the "Ready" state when the receiving part
            //# is created.
            let stream = Stream {
                send: (dir == Dir::Bi)
                    .then(|| SendHalf::new(peer_send_limit(&self.peer, self.side, sid))),
                recv: Some(RecvHalf::new(window)),
                ..Stream::default()
            };
            self.map.insert(sid, stream);
        }
        c.next_remote = id.index() + 1;
        self.events.opened(dir);
    }

    /// How many of `len` bytes may be written on `id` now; records blocking.
    fn write_credit(&mut self, id: StreamId, len: usize) -> Result<usize, WriteError> {
        let closed = self.closed_send_part(id);
        let h = lookup_send(&mut self.map, id, closed)?;
        if !h.accepts_writes() {
            return Err(h.write_error());
        }
        if len == 0 {
            return Ok(0);
        }
        let stream_credit = h.max_data.saturating_sub(h.buf.write_end());
        let conn_credit = self.fc.peer_max_data.saturating_sub(self.fc.written);
        let space = self.fc.send_window.saturating_sub(self.fc.send_buffered);
        let n = (len as u64).min(stream_credit).min(conn_credit).min(space);
        if n < len as u64 {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-4.1
            //# A sender SHOULD send a STREAM_DATA_BLOCKED or
            //# DATA_BLOCKED frame to indicate to the receiver that it has data to write but is
            //# blocked by flow control limits.
            if n == stream_credit {
                h.write_blocked = true;
                if h.blocked_at != Some(h.max_data) {
                    h.blocked_at = Some(h.max_data);
                    self.pending.stream_data_blocked.insert(id);
                }
            }
            if n == conn_credit && self.fc.blocked_at != Some(self.fc.peer_max_data) {
                self.fc.blocked_at = Some(self.fc.peer_max_data);
                self.pending.data_blocked = Some(self.fc.peer_max_data);
            }
            if (n == conn_credit || n == space)
                && let Some(s) = self.map.get_mut(&id)
                && !s.conn_blocked
            {
                s.conn_blocked = true;
                self.conn_blocked.push(id);
            }
        }
        if n == 0 {
            return Err(WriteError::Blocked);
        }
        Ok(n as usize)
    }

    fn after_write(&mut self, id: StreamId, n: usize) {
        self.fc.written += n as u64;
        self.fc.send_buffered += n as u64;
        if let Some(s) = self.map.get_mut(&id) {
            self.sched.update(id, s);
        }
    }

    /// Resets the sending part of `id`, which must be in Ready, Send or Data Sent.
    fn reset_send(&mut self, id: StreamId, error_code: VarInt) {
        let Some(s) = self.map.get_mut(&id) else {
            return;
        };
        let Some(h) = s.send.as_mut() else {
            return;
        };
        //= https://www.rfc-editor.org/rfc/rfc9000#section-4.5
        //# Assuming that every contiguous byte on the stream was sent once, the
        //# final size is the number of bytes sent.  More generally, this is one higher
        //# than the offset of the byte with the largest offset sent on the stream, or zero
        //# if no bytes were sent.
        let final_size = h.buf.sent_end();
        // Written but never sent bytes no longer count against the peer's MAX_DATA.
        self.fc.written -= h.buf.write_end() - final_size;
        self.fc.send_buffered -= h.buf.clear();
        h.state = SendState::ResetSent;
        h.reset = Some((error_code, final_size));
        self.pending.reset.insert(id);
        self.sched.update(id, s);
        self.wake_conn_blocked();
    }

    /// Tells writers blocked on connection credit or send window that they may retry.
    fn wake_conn_blocked(&mut self) {
        if self.conn_blocked.is_empty()
            || self.fc.written >= self.fc.peer_max_data
            || self.fc.send_buffered >= self.fc.send_window
        {
            return;
        }
        for id in std::mem::take(&mut self.conn_blocked) {
            if let Some(s) = self.map.get_mut(&id) {
                s.conn_blocked = false;
                if s.send.as_ref().is_some_and(SendHalf::accepts_writes) {
                    self.events.writable(id, s);
                }
            }
        }
    }

    fn read_with<T>(
        &mut self,
        id: StreamId,
        f: impl FnOnce(&mut Assembler) -> Option<(T, u64)>,
    ) -> Result<Option<T>, ReadError> {
        let existed = self.existed(id);
        let has_recv_part = id.dir() == Dir::Bi || id.initiator() != self.side;
        let Some(s) = self.map.get_mut(&id) else {
            return Err(if existed && has_recv_part {
                ReadError::ClosedStream
            } else {
                ReadError::UnknownStream
            });
        };
        let Some(r) = s.recv.as_mut() else {
            return Err(ReadError::UnknownStream);
        };
        if r.stopped.is_some() {
            return Err(ReadError::ClosedStream);
        }
        match r.state {
            RecvState::DataRead | RecvState::ResetRead => Err(ReadError::ClosedStream),
            RecvState::ResetRecvd => {
                //= https://www.rfc-editor.org/rfc/rfc9000#section-3.2
                //# Once the application receives the signal indicating that the stream
                //# was reset, the receiving part of the stream transitions to the "Reset Read"
                //# state, which is a terminal state.
                r.state = RecvState::ResetRead;
                let code = r.reset_code.unwrap_or_default();
                self.maybe_forget(id);
                Err(ReadError::Reset(code))
            }
            RecvState::Recv | RecvState::SizeKnown | RecvState::DataRecvd => {
                if let Some((out, _)) = f(&mut r.asm) {
                    let to = r.asm.read_offset();
                    release(&mut self.fc, &mut self.pending, r, to);
                    //= https://www.rfc-editor.org/rfc/rfc9000#section-3.2
                    //# As data is consumed by the application and
                    //# buffer space becomes available, the endpoint sends MAX_STREAM_DATA frames to
                    //# allow the peer to send more data.
                    //= https://www.rfc-editor.org/rfc/rfc9000#section-3.3
                    //# The receiver only sends MAX_STREAM_DATA frames in the "Recv" state.
                    if r.state == RecvState::Recv {
                        let target = (to.saturating_add(r.window)).min(VarInt::MAX.into_inner());
                        if target > r.advertised
                            && target - r.advertised >= r.window / WINDOW_UPDATE_DIVISOR
                        {
                            r.advertised = target;
                            r.tuning.due = true;
                            self.pending.max_stream_data.insert(id);
                        }
                    }
                    return Ok(Some(out));
                }
                if r.state == RecvState::DataRecvd {
                    //= https://www.rfc-editor.org/rfc/rfc9000#section-3.2
                    //# Once stream data has been delivered, the stream enters the "Data
                    //# Read" state, which is a terminal state.
                    r.state = RecvState::DataRead;
                    self.maybe_forget(id);
                    return Ok(None);
                }
                Err(ReadError::Blocked)
            }
        }
    }

    /// Forgets `id` once both parts are in terminal states the application has observed;
    /// gives the peer credit for a new stream if it opened this one.
    fn maybe_forget(&mut self, id: StreamId) {
        let Some(s) = self.map.get(&id) else {
            return;
        };
        let send_done = s
            .send
            .as_ref()
            .is_none_or(|h| matches!(h.state, SendState::DataRecvd | SendState::ResetRecvd));
        let recv_done = s
            .recv
            .as_ref()
            .is_none_or(|r| matches!(r.state, RecvState::DataRead | RecvState::ResetRead));
        if !(send_done && recv_done) {
            return;
        }
        if let Some(s) = self.map.remove(&id) {
            if s.want_retx {
                self.sched.n_retx -= 1;
            }
            if s.want_new {
                self.sched.n_new -= 1;
            }
            if s.conn_blocked {
                self.conn_blocked.retain(|&x| x != id);
            }
        }
        if id.initiator() != self.side {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-4.6
            //# Implementations might choose to increase limits as
            //# streams are closed, to keep the number of streams available to peers roughly
            //# consistent.
            let c = &mut self.counts[di(id.dir())];
            if c.max_remote < MAX_STREAM_COUNT {
                c.max_remote += 1;
                self.pending.max_streams[di(id.dir())] = true;
            }
        }
    }
}

fn lookup_send(
    map: &mut BTreeMap<StreamId, Stream>,
    id: StreamId,
    closed: bool,
) -> Result<&mut SendHalf, WriteError> {
    match map.get_mut(&id) {
        Some(s) => s.send.as_mut().ok_or(WriteError::UnknownStream),
        None if closed => Err(WriteError::ClosedStream),
        None => Err(WriteError::UnknownStream),
    }
}

/// The peer's initial limit for the sending part of `id`, seen from `side`.
fn peer_send_limit(peer: &StreamLimits, side: Side, id: StreamId) -> u64 {
    match (id.dir(), id.initiator() == side) {
        // We opened it: the peer's limit for streams opened by its peer.
        (Dir::Bi, true) => peer.max_stream_data_bidi_remote,
        // The peer opened it: its limit for streams it opened itself.
        (Dir::Bi, false) => peer.max_stream_data_bidi_local,
        (Dir::Uni, _) => peer.max_stream_data_uni,
    }
}

/// Checks a STREAM (`fin` = FIN bit) or RESET_STREAM (`fin` = true) end offset against the
/// stream's final size.
fn check_final_size(r: &RecvHalf, end: u64, fin: bool) -> Result<(), TransportError> {
    //= https://www.rfc-editor.org/rfc/rfc9000#section-4.5
    //# Once a final size for a stream is known, it cannot change.  If a RESET_STREAM or
    //# STREAM frame is received indicating a change in the final size for the stream,
    //# an endpoint SHOULD respond with an error of type FINAL_SIZE_ERROR; see
    //# {{error-handling}} for details on error handling.  A receiver SHOULD treat
    //# receipt of data at or beyond the final size as an error of type
    //# FINAL_SIZE_ERROR, even after a stream is closed.
    match r.final_size {
        Some(size) if end > size => Err(TransportError::final_size(format!(
            "data up to {end} beyond final size {size}"
        ))),
        Some(size) if fin && end != size => Err(TransportError::final_size(format!(
            "final size changed from {size} to {end}"
        ))),
        None if fin && end < r.max_received => Err(TransportError::final_size(format!(
            "final size {end} below data received up to {}",
            r.max_received
        ))),
        _ => Ok(()),
    }
}

/// Most disjoint pieces a stream's reassembly may hold: one per 64 bytes of its window, and
/// at least 1 024. Adjacent small pieces are merged, so only holes in the received data add
/// pieces. A multipath sender interleaves the data of its paths, so a hole between every
/// packet is legitimate: a window's worth of single-packet pieces (and packets cut short)
/// stays well below the limit. A peer sending one byte in every other position (each piece
/// costing a map entry and an allocation, about 80 bytes) is stopped once that tracking
/// reaches about 1.25 times the window, instead of growing to 40 times the window.
pub(crate) fn max_segments(window: u64) -> usize {
    usize::try_from(window / 64).unwrap_or(usize::MAX).max(1024)
}

/// Checks that data up to `end` respects the stream and connection limits we advertised;
/// returns by how much it raises the stream's highest received offset.
fn check_flow(fc: &ConnFlow, r: &RecvHalf, end: u64) -> Result<u64, TransportError> {
    //= https://www.rfc-editor.org/rfc/rfc9000#section-4.1
    //# A receiver MUST close the connection with an error of type FLOW_CONTROL_ERROR if
    //# the sender violates the advertised connection or stream data limits; see
    //# {{error-handling}} for details on error handling.
    if end > r.advertised {
        return Err(TransportError::flow_control(format!(
            "data up to {end} beyond the stream limit {}",
            r.advertised
        )));
    }
    let delta = end.saturating_sub(r.max_received);
    //= https://www.rfc-editor.org/rfc/rfc9000#section-19.9
    //# The sum of the final
    //# sizes on all streams -- including streams in terminal states -- MUST NOT exceed
    //# the value advertised by a receiver.
    if fc.received + delta > fc.local_max_data {
        return Err(TransportError::flow_control(format!(
            "connection data {} beyond the limit {}",
            fc.received + delta,
            fc.local_max_data
        )));
    }
    Ok(delta)
}

/// Counts this stream's bytes up to `to` as consumed for connection flow control and
/// queues MAX_DATA when a quarter of the window was consumed since the last update.
fn release(fc: &mut ConnFlow, pending: &mut Pending, r: &mut RecvHalf, to: u64) {
    if to <= r.released {
        return;
    }
    fc.consumed += to - r.released;
    r.released = to;
    //= https://www.rfc-editor.org/rfc/rfc9000#section-4.1
    //# A receiver could determine the maximum data limit to be
    //# advertised based on the sum of bytes consumed on all streams.
    let target = fc
        .consumed
        .saturating_add(fc.window)
        .min(VarInt::MAX.into_inner());
    if target > fc.local_max_data && target - fc.local_max_data >= fc.window / WINDOW_UPDATE_DIVISOR
    {
        fc.local_max_data = target;
        fc.tuning.due = true;
        pending.max_data = true;
    }
}

fn take_from_set(
    set: &mut BTreeSet<StreamId>,
    max_len: usize,
    frame: impl Fn(StreamId) -> Option<ControlFrame>,
) -> Option<ControlFrame> {
    let mut stale = Vec::new();
    let mut found = None;
    for &id in set.iter() {
        match frame(id) {
            None => stale.push(id),
            Some(f) if f.encoded_len() <= max_len => {
                found = Some((id, f));
                break;
            }
            Some(_) => {}
        }
    }
    for id in stale {
        set.remove(&id);
    }
    let (id, f) = found?;
    set.remove(&id);
    Some(f)
}

fn reset_frame(map: &BTreeMap<StreamId, Stream>, id: StreamId) -> Option<ControlFrame> {
    let h = map.get(&id)?.send.as_ref()?;
    let (error_code, final_size) = h.reset?;
    (h.state == SendState::ResetSent).then_some(ControlFrame::ResetStream {
        id,
        error_code,
        final_size,
    })
}

fn stop_frame(map: &BTreeMap<StreamId, Stream>, id: StreamId) -> Option<ControlFrame> {
    let r = map.get(&id)?.recv.as_ref()?;
    //= https://www.rfc-editor.org/rfc/rfc9000#section-3.5
    //# However, once either all stream data or a RESET_STREAM frame has been received for
    //# the stream -- that is, the stream is in any state other than "Recv" or "Size
    //# Known" -- sending a STOP_SENDING frame is unnecessary.
    let error_code = r.stopped?;
    (r.reset_code.is_none() && r.final_size.is_none_or(|f| r.asm.contiguous_end() < f))
        .then_some(ControlFrame::StopSending { id, error_code })
}

fn max_stream_data_frame(map: &BTreeMap<StreamId, Stream>, id: StreamId) -> Option<ControlFrame> {
    let r = map.get(&id)?.recv.as_ref()?;
    (r.state == RecvState::Recv && r.stopped.is_none()).then_some(ControlFrame::MaxStreamData {
        id,
        max: r.advertised,
    })
}

fn data_blocked_frame(fc: &ConnFlow, limit: u64) -> Option<ControlFrame> {
    (limit == fc.peer_max_data && fc.written >= limit)
        .then_some(ControlFrame::DataBlocked { limit })
}

fn stream_data_blocked_frame(
    map: &BTreeMap<StreamId, Stream>,
    id: StreamId,
) -> Option<ControlFrame> {
    let h = map.get(&id)?.send.as_ref()?;
    //= https://www.rfc-editor.org/rfc/rfc9000#section-3.1
    //# The endpoint does not need to check flow control limits or send
    //# STREAM_DATA_BLOCKED frames for a stream in this state.
    (h.accepts_writes() && h.write_blocked && h.buf.write_end() >= h.max_data).then_some(
        ControlFrame::StreamDataBlocked {
            id,
            limit: h.max_data,
        },
    )
}

fn streams_blocked_frame(counts: &[Counts; 2], dir: Dir, limit: u64) -> Option<ControlFrame> {
    let c = &counts[di(dir)];
    (limit == c.max_local && c.next_local >= limit)
        .then_some(ControlFrame::StreamsBlocked { dir, limit })
}
