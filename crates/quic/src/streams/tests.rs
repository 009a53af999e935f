//! Tests of [`Streams`](super::Streams): error codes, state machines, flow control, a
//! lossy multi-stream simulation (proptest) and a 100 MB transfer.

use super::*;
use crate::error::TransportErrorCode as Code;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn limits(max_data: u64, stream: u64, streams: u64) -> StreamLimits {
    StreamLimits {
        max_data,
        max_stream_data_bidi_local: stream,
        max_stream_data_bidi_remote: stream,
        max_stream_data_uni: stream,
        max_streams_bidi: streams,
        max_streams_uni: streams,
    }
}

/// A client and a server that exchanged transport parameters.
fn pair(l: StreamLimits) -> (Streams, Streams) {
    let mut c = Streams::new(Side::Client, l);
    let mut s = Streams::new(Side::Server, l);
    c.set_peer_limits(l).unwrap();
    s.set_peer_limits(l).unwrap();
    // The peer's parameters make streams available.
    for x in [&mut c, &mut s] {
        assert_eq!(
            events(x),
            vec![
                StreamEvent::Available { dir: Dir::Bi },
                StreamEvent::Available { dir: Dir::Uni }
            ]
        );
    }
    (c, s)
}

fn default_pair() -> (Streams, Streams) {
    pair(limits(10_000, 4_000, 4))
}

fn code<T: std::fmt::Debug>(r: Result<T, TransportError>) -> Code {
    r.unwrap_err().code
}

fn cid(dir: Dir, i: u64) -> StreamId {
    StreamId::new(Side::Client, dir, i)
}

fn sid(dir: Dir, i: u64) -> StreamId {
    StreamId::new(Side::Server, dir, i)
}

fn v(x: u32) -> VarInt {
    VarInt::from_u32(x)
}

fn data(n: usize) -> Bytes {
    Bytes::from((0..n).map(|i| (i % 251) as u8).collect::<Vec<_>>())
}

fn deliver(to: &mut Streams, f: ControlFrame) -> Result<(), TransportError> {
    match f {
        ControlFrame::ResetStream {
            id,
            error_code,
            final_size,
        } => to.on_reset_stream(id, error_code, final_size),
        ControlFrame::StopSending { id, error_code } => to.on_stop_sending(id, error_code),
        ControlFrame::MaxData { max } => {
            to.on_max_data(max);
            Ok(())
        }
        ControlFrame::MaxStreamData { id, max } => to.on_max_stream_data(id, max),
        ControlFrame::MaxStreams { dir, count } => to.on_max_streams(dir, count),
        ControlFrame::DataBlocked { limit } => {
            to.on_data_blocked(limit);
            Ok(())
        }
        ControlFrame::StreamDataBlocked { id, limit } => to.on_stream_data_blocked(id, limit),
        ControlFrame::StreamsBlocked { dir, limit } => to.on_streams_blocked(dir, limit),
    }
}

/// Moves every pending frame from `from` to `to` without loss and acknowledges it.
fn flush(from: &mut Streams, to: &mut Streams) {
    loop {
        let mut progress = false;
        while let Some(f) = from.poll_control(1200) {
            deliver(to, f).unwrap();
            from.on_control_acked(f);
            progress = true;
        }
        while let Some(c) = from.poll_stream_data(1200, None) {
            to.on_stream(c.id, c.offset, c.data.clone(), c.fin).unwrap();
            from.on_stream_acked(c.id, c.offset, c.data.len() as u64, c.fin);
            progress = true;
        }
        if !progress {
            break;
        }
    }
}

fn exchange(a: &mut Streams, b: &mut Streams) {
    while a.wants_to_send() || b.wants_to_send() {
        flush(a, b);
        flush(b, a);
    }
}

fn events(s: &mut Streams) -> Vec<StreamEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn controls(s: &mut Streams) -> Vec<ControlFrame> {
    std::iter::from_fn(|| s.poll_control(1200)).collect()
}

fn read_all(s: &mut Streams, id: StreamId) -> (Vec<u8>, Result<(), ReadError>) {
    let mut out = Vec::new();
    loop {
        match s.read(id, 1000) {
            Ok(Some(b)) => out.extend_from_slice(&b),
            Ok(None) => return (out, Ok(())),
            Err(e) => return (out, Err(e)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Stream ID validation
// ---------------------------------------------------------------------------------------

#[test]
fn frames_for_send_only_streams_are_stream_state_errors() {
    let (mut c, _) = default_pair();
    let id = c.open(Dir::Uni).unwrap();
    assert_eq!(
        code(c.on_stream(id, 0, data(3), false)),
        Code::STREAM_STATE_ERROR
    );
    assert_eq!(
        code(c.on_reset_stream(id, v(1), 0)),
        Code::STREAM_STATE_ERROR
    );
    assert_eq!(
        code(c.on_stream_data_blocked(id, 0)),
        Code::STREAM_STATE_ERROR
    );
    // The receiver of a uni stream may send these.
    c.on_max_stream_data(id, 10_000).unwrap();
    c.on_stop_sending(id, v(1)).unwrap();
}

#[test]
fn frames_for_receive_only_streams_are_stream_state_errors() {
    let (mut c, _) = default_pair();
    let id = sid(Dir::Uni, 0);
    assert_eq!(
        code(c.on_max_stream_data(id, 100)),
        Code::STREAM_STATE_ERROR
    );
    assert_eq!(code(c.on_stop_sending(id, v(0))), Code::STREAM_STATE_ERROR);
    // While STREAM opens it.
    c.on_stream(id, 0, data(5), false).unwrap();
    assert_eq!(c.accept(Dir::Uni), Some(id));
}

#[test]
fn frames_for_unopened_local_streams_are_stream_state_errors() {
    let (mut c, _) = default_pair();
    let bi = cid(Dir::Bi, 0);
    assert_eq!(
        code(c.on_stream(bi, 0, data(1), false)),
        Code::STREAM_STATE_ERROR
    );
    assert_eq!(code(c.on_max_stream_data(bi, 9)), Code::STREAM_STATE_ERROR);
    assert_eq!(code(c.on_stop_sending(bi, v(0))), Code::STREAM_STATE_ERROR);
    assert_eq!(
        code(c.on_reset_stream(bi, v(0), 0)),
        Code::STREAM_STATE_ERROR
    );
    assert_eq!(
        code(c.on_stream_data_blocked(bi, 0)),
        Code::STREAM_STATE_ERROR
    );
    assert_eq!(
        code(c.on_max_stream_data(cid(Dir::Uni, 0), 9)),
        Code::STREAM_STATE_ERROR
    );
    assert_eq!(c.open(Dir::Bi), Some(bi));
    c.on_stream(bi, 0, data(1), false).unwrap();
    assert_eq!(
        code(c.on_stream(cid(Dir::Bi, 1), 0, data(1), false)),
        Code::STREAM_STATE_ERROR
    );
}

#[test]
fn peer_streams_above_the_limit_are_stream_limit_errors() {
    let (_, mut s) = pair(limits(10_000, 1_000, 2));
    type Handler = fn(&mut Streams, StreamId) -> Result<(), TransportError>;
    let frames: [Handler; 5] = [
        |s: &mut Streams, id| s.on_stream(id, 0, data(1), false),
        |s: &mut Streams, id| s.on_reset_stream(id, v(0), 0),
        |s: &mut Streams, id| s.on_stream_data_blocked(id, 0),
        |s: &mut Streams, id| s.on_max_stream_data(id, 5),
        |s: &mut Streams, id| s.on_stop_sending(id, v(0)),
    ];
    for f in frames {
        assert_eq!(code(f(&mut s, cid(Dir::Bi, 2))), Code::STREAM_LIMIT_ERROR);
    }
    assert_eq!(
        code(s.on_stream(cid(Dir::Uni, 2), 0, data(1), false)),
        Code::STREAM_LIMIT_ERROR
    );
    assert_eq!(s.stream_count(), 0);
}

#[test]
fn peer_stream_opens_all_lower_streams_of_its_type() {
    let (_, mut s) = pair(limits(10_000, 1_000, 10));
    s.on_stream(cid(Dir::Bi, 3), 0, data(4), false).unwrap();
    assert_eq!(s.stream_count(), 4);
    assert_eq!(
        events(&mut s),
        vec![
            StreamEvent::Opened { dir: Dir::Bi },
            StreamEvent::Readable {
                id: cid(Dir::Bi, 3)
            },
        ]
    );
    for i in 0..4 {
        assert_eq!(s.accept(Dir::Bi), Some(cid(Dir::Bi, i)));
    }
    assert_eq!(s.accept(Dir::Bi), None);
    assert_eq!(s.accept(Dir::Uni), None);
    assert_eq!(s.read(cid(Dir::Bi, 0), 10), Err(ReadError::Blocked));
    // MAX_STREAM_DATA and STOP_SENDING open peer bidirectional streams too.
    s.on_max_stream_data(cid(Dir::Bi, 5), 50).unwrap();
    assert_eq!(s.stream_count(), 6);
    s.on_stop_sending(cid(Dir::Bi, 6), v(3)).unwrap();
    assert_eq!(s.stream_count(), 7);
    assert_eq!(s.send_state(cid(Dir::Bi, 6)), Some(SendState::ResetSent));
}

#[test]
fn invalid_counts_are_encoding_or_parameter_errors() {
    let (mut c, _) = default_pair();
    assert_eq!(
        code(c.on_max_streams(Dir::Bi, MAX_STREAM_COUNT + 1)),
        Code::FRAME_ENCODING_ERROR
    );
    c.on_max_streams(Dir::Bi, MAX_STREAM_COUNT).unwrap();
    assert_eq!(
        code(c.on_streams_blocked(Dir::Uni, MAX_STREAM_COUNT + 1)),
        Code::FRAME_ENCODING_ERROR
    );
    let mut l = limits(0, 0, 0);
    l.max_streams_uni = MAX_STREAM_COUNT + 1;
    assert_eq!(code(c.set_peer_limits(l)), Code::TRANSPORT_PARAMETER_ERROR);
}

// ---------------------------------------------------------------------------------------
// Final size and flow control errors
// ---------------------------------------------------------------------------------------

#[test]
fn final_size_errors() {
    let (_, mut s) = default_pair();
    let id = cid(Dir::Uni, 0);
    s.on_stream(id, 0, data(10), true).unwrap();
    // Duplicates are fine.
    s.on_stream(id, 0, data(10), true).unwrap();
    s.on_stream(id, 5, data(5), false).unwrap();
    assert_eq!(
        code(s.on_stream(id, 8, data(5), false)),
        Code::FINAL_SIZE_ERROR
    );
    assert_eq!(
        code(s.on_stream(id, 0, data(9), true)),
        Code::FINAL_SIZE_ERROR
    );
    assert_eq!(
        code(s.on_stream(id, 10, data(1), true)),
        Code::FINAL_SIZE_ERROR
    );
    assert_eq!(
        code(s.on_reset_stream(id, v(0), 11)),
        Code::FINAL_SIZE_ERROR
    );
    assert_eq!(code(s.on_reset_stream(id, v(0), 9)), Code::FINAL_SIZE_ERROR);
    s.on_reset_stream(id, v(0), 10).unwrap();

    // A FIN below data already received.
    let id = cid(Dir::Uni, 1);
    s.on_stream(id, 100, data(10), false).unwrap();
    assert_eq!(
        code(s.on_stream(id, 0, data(50), true)),
        Code::FINAL_SIZE_ERROR
    );
    assert_eq!(
        code(s.on_reset_stream(id, v(0), 109)),
        Code::FINAL_SIZE_ERROR
    );
    // A reset fixes the final size too.
    s.on_reset_stream(id, v(0), 200).unwrap();
    assert_eq!(
        code(s.on_stream(id, 195, data(10), false)),
        Code::FINAL_SIZE_ERROR
    );
    assert_eq!(
        code(s.on_stream(id, 0, data(10), true)),
        Code::FINAL_SIZE_ERROR
    );
    s.on_stream(id, 190, data(10), true).unwrap();
}

#[test]
fn stream_flow_control_violation() {
    let (_, mut s) = pair(limits(10_000, 1_000, 4));
    let id = cid(Dir::Bi, 0);
    s.on_stream(id, 0, data(1000), false).unwrap();
    assert_eq!(
        code(s.on_stream(id, 1000, data(1), false)),
        Code::FLOW_CONTROL_ERROR
    );
    assert_eq!(
        code(s.on_reset_stream(id, v(0), 1001)),
        Code::FLOW_CONTROL_ERROR
    );
    assert_eq!(
        code(s.on_stream(id, (1 << 62) - 1, data(2), false)),
        Code::FLOW_CONTROL_ERROR
    );
    assert_eq!(
        code(s.on_stream(id, u64::MAX, data(2), false)),
        Code::FLOW_CONTROL_ERROR
    );
}

#[test]
fn connection_flow_control_counts_final_sizes_of_resets() {
    let (_, mut s) = pair(limits(2_500, 1_000, 4));
    s.on_stream(cid(Dir::Bi, 0), 0, data(1000), false).unwrap();
    // Out-of-order data counts by its highest offset.
    s.on_stream(cid(Dir::Bi, 1), 900, data(100), false).unwrap();
    // A reset's final size counts even though no data came.
    s.on_reset_stream(cid(Dir::Uni, 0), v(7), 400).unwrap();
    s.on_stream(cid(Dir::Uni, 1), 0, data(100), false).unwrap();
    assert_eq!(
        code(s.on_stream(cid(Dir::Uni, 1), 100, data(1), false)),
        Code::FLOW_CONTROL_ERROR
    );
    assert_eq!(
        code(s.on_reset_stream(cid(Dir::Uni, 2), v(0), 1)),
        Code::FLOW_CONTROL_ERROR
    );
    // Retransmissions below the highest offset are not counted twice.
    s.on_stream(cid(Dir::Bi, 0), 0, data(1000), false).unwrap();
}

// ---------------------------------------------------------------------------------------
// Flow control: sending side
// ---------------------------------------------------------------------------------------

#[test]
fn writes_respect_peer_limits_and_signal_blocking_once() {
    let (mut c, mut s) = pair(limits(1_500, 1_000, 4));
    let a = c.open(Dir::Uni).unwrap();
    let b = c.open(Dir::Uni).unwrap();
    assert_eq!(c.writable(a), 1_000);
    assert_eq!(c.write(a, &[1; 1200]), Ok(1_000));
    assert_eq!(c.write(a, &[1; 10]), Err(WriteError::Blocked));
    assert_eq!(c.writable(b), 500);
    assert_eq!(c.write(b, &[2; 800]), Ok(500));
    assert_eq!(c.write(b, &[2; 800]), Err(WriteError::Blocked));
    let ctl = controls(&mut c);
    assert_eq!(
        ctl,
        vec![
            ControlFrame::DataBlocked { limit: 1_500 },
            ControlFrame::StreamDataBlocked {
                id: a,
                limit: 1_000
            },
        ]
    );
    assert_eq!(c.send_state(a), Some(SendState::Send));
    // Blocked again at the same limits: nothing new.
    assert_eq!(c.write(a, &[1; 10]), Err(WriteError::Blocked));
    assert!(!c.has_control());

    // The receiver reads, which extends the windows; the writers are woken.
    flush(&mut c, &mut s);
    assert_eq!(s.read(a, 2000).unwrap().unwrap().len(), 1000);
    assert_eq!(s.read(b, 2000).unwrap().unwrap().len(), 500);
    let ctl = controls(&mut s);
    assert_eq!(
        ctl,
        vec![
            ControlFrame::MaxData { max: 3_000 },
            ControlFrame::MaxStreamData { id: a, max: 2_000 },
            ControlFrame::MaxStreamData { id: b, max: 1_500 },
        ]
    );
    for f in ctl {
        deliver(&mut c, f).unwrap();
    }
    // b was blocked by the connection limit, a by its stream limit.
    assert_eq!(
        events(&mut c),
        vec![
            StreamEvent::Writable { id: b },
            StreamEvent::Writable { id: a },
        ]
    );
    assert_eq!(c.write(a, &[1; 2000]), Ok(1_000));
    assert_eq!(c.write(b, &[2; 2000]), Ok(500));
}

#[test]
fn send_window_bounds_buffered_bytes() {
    let (mut c, mut s) = pair(limits(1 << 30, 1 << 30, 4));
    c.set_send_window(5_000);
    let a = c.open(Dir::Uni).unwrap();
    assert_eq!(c.write(a, &[0; 8_000]), Ok(5_000));
    assert_eq!(c.write(a, &[0; 1]), Err(WriteError::Blocked));
    assert!(
        !c.has_control(),
        "a local limit is not signalled to the peer"
    );
    flush(&mut c, &mut s);
    assert_eq!(c.send_buffered(), 0);
    assert_eq!(events(&mut c), vec![StreamEvent::Writable { id: a }]);
}

#[test]
fn ignores_limits_that_do_not_increase() {
    let (mut c, _) = pair(limits(1_000, 1_000, 1));
    let a = c.open(Dir::Bi).unwrap();
    c.on_max_data(500);
    c.on_max_stream_data(a, 10).unwrap();
    c.on_max_streams(Dir::Bi, 0).unwrap();
    assert_eq!(c.writable(a), 1_000);
    assert_eq!(c.open(Dir::Bi), None);
}

// ---------------------------------------------------------------------------------------
// Flow control: receiving side
// ---------------------------------------------------------------------------------------

#[test]
fn windows_are_extended_as_the_application_reads() {
    let (_, mut s) = pair(limits(8_000, 4_000, 4));
    let id = cid(Dir::Uni, 0);
    s.on_stream(id, 0, data(4_000), false).unwrap();
    assert!(!s.has_control());
    assert_eq!(s.read(id, 999).unwrap().unwrap().len(), 999);
    assert!(!s.has_control(), "less than a quarter consumed");
    assert_eq!(s.read(id, 1).unwrap().unwrap().len(), 1);
    assert_eq!(
        controls(&mut s),
        vec![ControlFrame::MaxStreamData { id, max: 5_000 }]
    );
    assert_eq!(s.read(id, 1_000).unwrap().unwrap().len(), 1_000);
    assert_eq!(
        controls(&mut s),
        vec![
            ControlFrame::MaxData { max: 10_000 },
            ControlFrame::MaxStreamData { id, max: 6_000 },
        ]
    );
    // The new limits are enforced.
    s.on_stream(id, 4_000, data(2_000), false).unwrap();
    assert_eq!(
        code(s.on_stream(id, 6_000, data(1), false)),
        Code::FLOW_CONTROL_ERROR
    );
    // After the FIN, no MAX_STREAM_DATA is sent any more, but MAX_DATA still is.
    s.on_stream(id, 6_000, Bytes::new(), true).unwrap();
    let (got, end) = read_all(&mut s, id);
    assert_eq!((got.len(), end), (4_000, Ok(())));
    assert_eq!(
        controls(&mut s),
        vec![
            ControlFrame::MaxData { max: 14_000 },
            ControlFrame::MaxStreams {
                dir: Dir::Uni,
                count: 5
            },
        ]
    );
}

/// Feeds `chunk` bytes at a time to stream `id` of `s` and reads them at once, one chunk
/// every `every`, tuning before each update as the connection does; returns the MAX_DATA
/// and MAX_STREAM_DATA limits sent, in order.
fn stream_at_rate(
    s: &mut Streams,
    id: StreamId,
    chunks: usize,
    chunk: usize,
    every: Duration,
    rtt: Duration,
) -> (Vec<u64>, Vec<u64>) {
    let start = Instant::now();
    let (mut max_data, mut max_stream_data) = (Vec::new(), Vec::new());
    let mut offset = 0u64;
    for i in 0..chunks {
        s.on_stream(id, offset, data(chunk), false).unwrap();
        offset += chunk as u64;
        let (read, end) = read_all(s, id);
        assert_eq!((read.len(), end), (chunk, Err(ReadError::Blocked)));
        s.tune_receive_windows(start + every * (i as u32 + 1), rtt);
        for f in controls(s) {
            match f {
                ControlFrame::MaxData { max } => max_data.push(max),
                ControlFrame::MaxStreamData { max, .. } => max_stream_data.push(max),
                _ => {}
            }
        }
    }
    (max_data, max_stream_data)
}

#[test]
fn receive_windows_double_when_drained_within_two_round_trips() {
    // A reader draining 1 MB/s with a 100 ms RTT needs 2 x 1 MB/s x 100 ms = 200 kB of
    // window: 64 kB windows double at each update (a window lasts less than two round
    // trips) and stop at 256 kB, the first size past it.
    let id = cid(Dir::Uni, 0);
    let rtt = Duration::from_millis(100);
    let every = Duration::from_millis(10);
    let reader = |max_conn: u64, max_stream: u64, rtt: Duration| {
        let mut s = Streams::new(Side::Server, limits(64_000, 64_000, 4));
        s.set_peer_limits(limits(64_000, 64_000, 4)).unwrap();
        s.set_receive_window_limits(max_conn, max_stream);
        let (max_data, max_stream_data) = stream_at_rate(&mut s, id, 200, 10_000, every, rtt);
        // Limits only ever grow.
        assert!(max_data.windows(2).all(|w| w[0] < w[1]), "{max_data:?}");
        // The window in use at the end: the last limit sent is the bytes consumed then
        // (less than a quarter window before the 2 MB read) plus the window.
        let window = |limits: &[u64]| {
            let last = limits.last().copied().unwrap_or(0);
            [1, 2, 4, 8, 16, 32]
                .map(|k| 64_000 * k)
                .into_iter()
                .chain([max_conn, max_stream])
                .find(|w| last <= 2_000_000 + w && last > 2_000_000 + w - w / 4)
        };
        (
            s.receive_window(),
            window(&max_data),
            window(&max_stream_data),
        )
    };
    let both = |w: u64, stream: u64| (w, Some(w), Some(stream));
    assert_eq!(reader(1_000_000, 512_000, rtt), both(256_000, 256_000));
    // The maxima cap the growth.
    assert_eq!(reader(150_000, 100_000, rtt), both(150_000, 100_000));
    // The same reader with a 5 ms RTT: a 64 kB window lasts 64 ms, far more than two
    // round trips, so the windows stay as they are.
    let short = Duration::from_millis(5);
    assert_eq!(reader(1_000_000, 512_000, short), both(64_000, 64_000));
}

#[test]
fn receive_budget_caps_the_windows_of_all_connections() {
    let budget = Arc::new(ReceiveBudget::new(300_000));
    let open = |budget: &Arc<ReceiveBudget>| {
        let window = budget.grant_initial(100_000);
        let mut s = Streams::new(Side::Server, limits(window, 64_000, 4));
        s.set_peer_limits(limits(64_000, 64_000, 4)).unwrap();
        s.set_receive_budget(budget.clone());
        s.set_receive_window_limits(1_000_000, 512_000);
        s
    };
    let mut a = open(&budget);
    let b = open(&budget);
    assert_eq!(budget.granted(), 200_000);
    // A fast reader doubles its window while the budget has room, then stops.
    let id = cid(Dir::Uni, 0);
    stream_at_rate(
        &mut a,
        id,
        100,
        10_000,
        Duration::from_millis(10),
        Duration::from_millis(100),
    );
    assert_eq!(a.receive_window(), 200_000);
    assert_eq!(budget.granted(), 300_000);
    // A new connection still gets the smallest window, beyond the budget.
    let c = open(&budget);
    assert_eq!(c.receive_window(), MIN_BUDGETED_WINDOW);
    assert_eq!(budget.granted(), 300_000 + MIN_BUDGETED_WINDOW);
    // Dropped connections return their windows.
    drop((a, b, c));
    assert_eq!(budget.granted(), 0);
}

#[test]
fn blocked_frames_from_the_peer_resend_missed_updates() {
    let (_, mut s) = pair(limits(4_000, 4_000, 4));
    let id = cid(Dir::Bi, 0);
    s.on_stream(id, 0, data(4_000), false).unwrap();
    assert_eq!(read_all(&mut s, id).1, Err(ReadError::Blocked));
    let ctl = controls(&mut s);
    assert_eq!(ctl.len(), 2);
    // The peer says it is blocked at old limits: resend the current ones.
    s.on_data_blocked(4_000);
    s.on_stream_data_blocked(id, 4_000).unwrap();
    assert_eq!(controls(&mut s), ctl);
    // Blocked at the current limits: nothing to add.
    s.on_data_blocked(8_000);
    s.on_stream_data_blocked(id, 8_000).unwrap();
    s.on_streams_blocked(Dir::Bi, 4).unwrap();
    assert!(controls(&mut s).is_empty());
    s.on_streams_blocked(Dir::Bi, 3).unwrap();
    assert_eq!(
        controls(&mut s),
        vec![ControlFrame::MaxStreams {
            dir: Dir::Bi,
            count: 4
        }]
    );
}

// ---------------------------------------------------------------------------------------
// State machines
// ---------------------------------------------------------------------------------------

#[test]
fn send_states_through_data_recvd() {
    let (mut c, mut s) = default_pair();
    let id = c.open(Dir::Uni).unwrap();
    assert_eq!(c.send_state(id), Some(SendState::Ready));
    assert_eq!(c.recv_state(id), None);
    c.write(id, b"hello").unwrap();
    let ch = c.poll_stream_data(8, None).unwrap();
    // type + id + length + 5 bytes = 8
    assert_eq!((ch.offset, &ch.data[..], ch.fin), (0, &b"hello"[..], false));
    assert_eq!(ch.encoded_len(), 8);
    assert_eq!(c.send_state(id), Some(SendState::Send));
    c.finish(id).unwrap();
    assert_eq!(c.finish(id), Err(WriteError::ClosedStream));
    assert_eq!(c.write(id, b"x"), Err(WriteError::ClosedStream));
    let fin = c.poll_stream_data(100, None).unwrap();
    assert_eq!((fin.offset, fin.data.len(), fin.fin), (5, 0, true));
    assert_eq!(c.send_state(id), Some(SendState::DataSent));
    // FIN lost, data acked: still Data Sent, FIN retransmitted.
    c.on_stream_acked(id, 0, 5, false);
    c.on_stream_lost(id, 5, 0, true);
    assert_eq!(c.send_state(id), Some(SendState::DataSent));
    assert!(c.has_stream_data());
    let again = c.poll_stream_data(100, None).unwrap();
    assert_eq!(again, fin);
    c.on_stream_acked(id, 5, 0, true);
    assert_eq!(events(&mut c), vec![StreamEvent::Finished { id }]);
    // Both parts are terminal (a uni stream has one): forgotten.
    assert_eq!(c.send_state(id), None);
    assert_eq!(c.stream_count(), 0);
    assert_eq!(c.write(id, b"x"), Err(WriteError::ClosedStream));
    assert_eq!(
        c.write(cid(Dir::Uni, 7), b"x"),
        Err(WriteError::UnknownStream)
    );
    // A late acknowledgement or loss report is ignored.
    c.on_stream_lost(id, 0, 5, true);
    assert!(!c.has_stream_data());

    s.on_stream(id, 0, ch.data, false).unwrap();
    s.on_stream(id, 5, Bytes::new(), true).unwrap();
    assert_eq!(s.recv_state(id), Some(RecvState::DataRecvd));
}

#[test]
fn recv_states_through_data_read() {
    let (_, mut s) = default_pair();
    let id = cid(Dir::Uni, 0);
    s.on_stream(id, 3, data(7).slice(3..), false).unwrap();
    assert_eq!(s.recv_state(id), Some(RecvState::Recv));
    assert_eq!(s.readable(id), 0);
    s.on_stream(id, 7, Bytes::new(), true).unwrap();
    assert_eq!(s.recv_state(id), Some(RecvState::SizeKnown));
    s.on_stream(id, 0, data(3), false).unwrap();
    assert_eq!(s.recv_state(id), Some(RecvState::DataRecvd));
    assert_eq!(s.readable(id), 7);
    let mut buf = [0u8; 4];
    assert_eq!(s.read_into(id, &mut buf), Ok(Some(4)));
    assert_eq!(s.read_into(id, &mut buf), Ok(Some(3)));
    assert_eq!(&buf[..3], &data(7)[4..]);
    // A reset after all data arrived is suppressed.
    s.on_reset_stream(id, v(9), 7).unwrap();
    assert_eq!(s.read_into(id, &mut buf), Ok(None));
    assert_eq!(s.recv_state(id), None, "forgotten after Data Read");
    assert_eq!(s.read(id, 10), Err(ReadError::ClosedStream));
    assert_eq!(s.read(cid(Dir::Uni, 3), 10), Err(ReadError::UnknownStream));
    assert_eq!(s.read(sid(Dir::Uni, 0), 10), Err(ReadError::UnknownStream));
    // Late frames for a closed stream are ignored.
    s.on_stream(id, 0, data(7), true).unwrap();
    s.on_reset_stream(id, v(1), 7).unwrap();
    assert_eq!(s.stream_count(), 0);
    // Closing a peer stream returns its credit.
    assert_eq!(
        controls(&mut s),
        vec![ControlFrame::MaxStreams {
            dir: Dir::Uni,
            count: 5
        }]
    );
}

#[test]
fn reset_received_is_reported_once_then_forgotten() {
    let (_, mut s) = default_pair();
    let id = cid(Dir::Uni, 0);
    s.on_stream(id, 0, data(100), false).unwrap();
    s.on_reset_stream(id, v(42), 3_000).unwrap();
    assert_eq!(s.recv_state(id), Some(RecvState::ResetRecvd));
    assert_eq!(s.recv_buffered(), 0, "unread data is discarded");
    assert_eq!(
        events(&mut s),
        vec![
            StreamEvent::Opened { dir: Dir::Uni },
            StreamEvent::Readable { id }
        ]
    );
    assert_eq!(s.read(id, 10), Err(ReadError::Reset(v(42))));
    assert_eq!(s.read(id, 10), Err(ReadError::ClosedStream));
    // The whole final size was returned to the connection window.
    assert_eq!(
        controls(&mut s),
        vec![
            ControlFrame::MaxData { max: 13_000 },
            ControlFrame::MaxStreams {
                dir: Dir::Uni,
                count: 5
            },
        ]
    );
}

#[test]
fn app_reset_moves_through_reset_sent_and_reset_recvd() {
    let (mut c, mut s) = pair(limits(1_000, 1_000, 4));
    let id = c.open(Dir::Bi).unwrap();
    c.write(id, &[5; 1_000]).unwrap();
    let ch = c.poll_stream_data(500, None).unwrap();
    c.reset(id, v(77)).unwrap();
    assert_eq!(c.reset(id, v(77)), Err(WriteError::ClosedStream));
    assert_eq!(c.write(id, b"x"), Err(WriteError::ClosedStream));
    assert_eq!(c.send_state(id), Some(SendState::ResetSent));
    assert_eq!(c.send_buffered(), 0);
    assert!(!c.has_stream_data(), "no STREAM frames after RESET_STREAM");
    let reset = ControlFrame::ResetStream {
        id,
        error_code: v(77),
        final_size: ch.data.len() as u64,
    };
    assert_eq!(controls(&mut c), vec![reset]);
    // Lost: sent again, identical.
    c.on_control_lost(reset);
    assert_eq!(controls(&mut c), vec![reset]);
    // Unsent bytes gave back connection credit: a new stream can use it.
    let other = c.open(Dir::Bi).unwrap();
    assert_eq!(c.writable(other), 1_000 - ch.data.len() as u64);
    c.on_control_acked(reset);
    assert_eq!(c.send_state(id), Some(SendState::ResetRecvd));
    // Not lost any more once acknowledged.
    c.on_control_lost(reset);
    assert!(controls(&mut c).is_empty());
    // The receiving part is still open.
    deliver(&mut s, reset).unwrap();
    s.on_stream(id, 0, ch.data.clone(), false).unwrap();
    assert_eq!(s.accept(Dir::Bi), Some(id));
    s.write(id, b"reply").unwrap();
    s.finish(id).unwrap();
    exchange(&mut c, &mut s);
    assert_eq!(read_all(&mut c, id), (b"reply".to_vec(), Ok(())));
    assert_eq!(c.send_state(id), None, "forgotten");
    assert_eq!(s.send_state(id), Some(SendState::DataRecvd));
    assert_eq!(s.recv_state(id), Some(RecvState::ResetRecvd));
    assert_eq!(read_all(&mut s, id).1, Err(ReadError::Reset(v(77))));
    assert_eq!(s.send_state(id), None, "forgotten");
}

#[test]
fn stop_sending_triggers_reset_with_the_same_code() {
    let (mut c, mut s) = default_pair();
    let id = c.open(Dir::Bi).unwrap();
    c.write(id, &[1; 3000]).unwrap();
    flush(&mut c, &mut s);
    assert_eq!(s.accept(Dir::Bi), Some(id));
    events(&mut s);
    s.stop(id, v(5)).unwrap();
    assert_eq!(s.stop(id, v(5)), Err(ReadError::ClosedStream));
    assert_eq!(s.read(id, 10), Err(ReadError::ClosedStream));
    assert_eq!(s.recv_buffered(), 0);
    let stop = ControlFrame::StopSending {
        id,
        error_code: v(5),
    };
    assert_eq!(
        controls(&mut s),
        vec![stop, ControlFrame::MaxData { max: 13_000 },]
    );
    // More data after STOP_SENDING still counts toward flow control.
    c.write(id, &[1; 1000]).unwrap();
    let ch = c.poll_stream_data(2000, None).unwrap();
    s.on_stream(id, ch.offset, ch.data.clone(), false).unwrap();
    assert_eq!(s.recv_buffered(), 0, "discarded");
    // STOP_SENDING arrives: the peer resets with the same code.
    deliver(&mut c, stop).unwrap();
    assert_eq!(
        events(&mut c),
        vec![StreamEvent::Stopped {
            id,
            error_code: v(5)
        }]
    );
    assert_eq!(c.write(id, b"x"), Err(WriteError::Stopped(v(5))));
    assert_eq!(c.finish(id), Err(WriteError::Stopped(v(5))));
    assert_eq!(c.reset(id, v(1)), Err(WriteError::Stopped(v(5))));
    let reset = controls(&mut c);
    assert_eq!(
        reset,
        vec![ControlFrame::ResetStream {
            id,
            error_code: v(5),
            final_size: 4000
        }]
    );
    // A duplicate STOP_SENDING changes nothing.
    deliver(&mut c, stop).unwrap();
    assert!(controls(&mut c).is_empty());
    // The reset reaches the stopped receiver: its receiving part is done.
    deliver(&mut s, reset[0]).unwrap();
    assert_eq!(s.recv_state(id), Some(RecvState::ResetRead));
    // Lost STOP_SENDING is not repeated once the reset arrived.
    s.on_control_lost(stop);
    assert!(!s.has_control());
    c.on_control_acked(reset[0]);
    // Finish the other direction and everything is forgotten on both sides.
    s.finish(id).unwrap();
    exchange(&mut c, &mut s);
    assert_eq!(read_all(&mut c, id), (vec![], Ok(())));
    exchange(&mut c, &mut s);
    assert_eq!(c.stream_count(), 0);
    assert_eq!(s.stream_count(), 0);
}

#[test]
fn stop_after_all_data_received_needs_no_frame() {
    let (_, mut s) = default_pair();
    let id = cid(Dir::Uni, 0);
    s.on_stream(id, 0, data(50), true).unwrap();
    s.stop(id, v(1)).unwrap();
    assert_eq!(s.stream_count(), 0);
    assert_eq!(
        controls(&mut s),
        vec![ControlFrame::MaxStreams {
            dir: Dir::Uni,
            count: 5
        }]
    );
}

#[test]
fn stopped_stream_completes_when_all_data_arrives() {
    let (_, mut s) = default_pair();
    let id = cid(Dir::Uni, 0);
    s.on_stream(id, 0, data(10), false).unwrap();
    s.stop(id, v(1)).unwrap();
    s.on_stream(id, 20, data(10), true).unwrap();
    assert_eq!(s.recv_state(id), Some(RecvState::SizeKnown));
    s.on_stream(id, 10, data(10), false).unwrap();
    assert_eq!(s.stream_count(), 0);
}

#[test]
fn streams_blocked_and_credit_return() {
    let (mut c, mut s) = pair(limits(10_000, 1_000, 1));
    let a = c.open(Dir::Uni).unwrap();
    assert_eq!(c.open(Dir::Uni), None);
    assert_eq!(c.open(Dir::Uni), None);
    assert_eq!(
        controls(&mut c),
        vec![ControlFrame::StreamsBlocked {
            dir: Dir::Uni,
            limit: 1
        }]
    );
    c.write(a, b"abc").unwrap();
    c.finish(a).unwrap();
    flush(&mut c, &mut s);
    assert_eq!(s.accept(Dir::Uni), Some(a));
    assert_eq!(read_all(&mut s, a), (b"abc".to_vec(), Ok(())));
    let ctl = controls(&mut s);
    assert_eq!(
        ctl,
        vec![ControlFrame::MaxStreams {
            dir: Dir::Uni,
            count: 2
        }]
    );
    events(&mut c);
    deliver(&mut c, ctl[0]).unwrap();
    assert_eq!(
        events(&mut c),
        vec![StreamEvent::Available { dir: Dir::Uni }]
    );
    assert_eq!(c.open(Dir::Uni), Some(cid(Dir::Uni, 1)));
    // STREAMS_BLOCKED lost while no longer blocked: dropped.
    c.on_control_lost(ControlFrame::StreamsBlocked {
        dir: Dir::Uni,
        limit: 1,
    });
    assert!(!c.has_control());
}

#[test]
fn stale_control_frames_are_not_resent() {
    let (_, mut s) = pair(limits(4_000, 4_000, 4));
    let id = cid(Dir::Uni, 0);
    s.on_stream(id, 0, data(2_000), false).unwrap();
    s.read(id, 1_000).unwrap();
    let first = controls(&mut s);
    assert_eq!(
        first,
        vec![
            ControlFrame::MaxData { max: 5_000 },
            ControlFrame::MaxStreamData { id, max: 5_000 }
        ]
    );
    s.read(id, 1_000).unwrap();
    let second = controls(&mut s);
    assert_eq!(second.len(), 2);
    // The first ones are stale.
    for f in first {
        s.on_control_lost(f);
    }
    assert!(!s.has_control());
    // The current ones are resent.
    for f in second.iter().copied() {
        s.on_control_lost(f);
    }
    assert_eq!(controls(&mut s), second);
    // No MAX_STREAM_DATA once the final size is known.
    s.on_stream(id, 2_000, Bytes::new(), true).unwrap();
    s.on_control_lost(second[1]);
    assert!(!s.has_control());
}

#[test]
fn poll_control_respects_max_len() {
    let (mut c, _) = default_pair();
    let id = c.open(Dir::Bi).unwrap();
    c.reset(id, VarInt::from_u64(1 << 40).unwrap()).unwrap();
    c.stop(id, v(1)).unwrap();
    let reset_len = 1 + 1 + 8 + 1;
    assert_eq!(
        c.poll_control(3).unwrap(),
        ControlFrame::StopSending {
            id,
            error_code: v(1)
        }
    );
    assert!(c.poll_control(reset_len - 1).is_none());
    assert!(c.has_control());
    let f = c.poll_control(reset_len).unwrap();
    assert_eq!(f.encoded_len(), reset_len);
}

// ---------------------------------------------------------------------------------------
// Packetisation
// ---------------------------------------------------------------------------------------

#[test]
fn round_robin_between_streams_and_lost_data_first() {
    let (mut c, _) = pair(limits(1 << 20, 1 << 20, 10));
    let ids: Vec<_> = (0..3).map(|_| c.open(Dir::Uni).unwrap()).collect();
    for &id in &ids {
        c.write(id, &[0; 1000]).unwrap();
    }
    let order: Vec<_> = (0..6)
        .map(|_| c.poll_stream_data(300, None).unwrap().id)
        .collect();
    assert_eq!(order, [ids[0], ids[1], ids[2], ids[0], ids[1], ids[2]]);
    c.on_stream_lost(ids[2], 0, 200, false);
    let ch = c.poll_stream_data(1200, None).unwrap();
    assert_eq!((ch.id, ch.offset, ch.data.len()), (ids[2], 0, 200));
    let next = c.poll_stream_data(1200, None).unwrap();
    assert_eq!(next.id, ids[0]);
}

#[test]
fn stream_frames_fit_exactly() {
    let (mut c, _) = pair(limits(1 << 20, 1 << 20, 100));
    for _ in 0..20 {
        c.open(Dir::Bi).unwrap();
    }
    let id = c.open(Dir::Bi).unwrap();
    assert_eq!(VarInt::encoded_size(id.0), 2);
    c.write(id, &[0; 100_000]).unwrap();
    // Offset 0 is omitted: 1 + 2 + 2 + 95 = 100.
    let ch = c.poll_stream_data(100, None).unwrap();
    assert_eq!((ch.data.len(), ch.encoded_len()), (95, 100));
    // 1 + 2 + 2 (offset 95) + 1 + 60 = 66: len 60 has a one-byte length.
    let ch = c.poll_stream_data(66, None).unwrap();
    assert_eq!((ch.data.len(), ch.encoded_len()), (60, 66));
    // Too small for any data.
    assert!(c.poll_stream_data(6, None).is_none());
    assert!(c.has_stream_data());
    for max in [7usize, 8, 64, 65, 66, 67, 1200, 16_390, 20_000] {
        let ch = c.poll_stream_data(max, None).unwrap();
        assert!(ch.encoded_len() <= max);
        assert!(ch.encoded_len() + 1 >= max, "{max}: {}", ch.encoded_len());
    }
}

#[test]
fn max_data_len_is_tight() {
    for avail in 0..20_000usize {
        match max_data_len(avail) {
            None => assert_eq!(avail, 0),
            Some(n) => {
                assert!(n + VarInt::encoded_size(n as u64) <= avail);
                let m = n + 1;
                assert!(m + VarInt::encoded_size(m as u64) > avail);
            }
        }
    }
}

#[test]
fn zero_length_stream_with_fin() {
    let (mut c, mut s) = default_pair();
    let id = c.open(Dir::Uni).unwrap();
    c.finish(id).unwrap();
    let ch = c.poll_stream_data(3, None).unwrap();
    assert_eq!(
        (ch.offset, ch.data.len(), ch.fin, ch.encoded_len()),
        (0, 0, true, 3)
    );
    s.on_stream(id, 0, Bytes::new(), true).unwrap();
    assert_eq!(s.accept(Dir::Uni), Some(id));
    assert_eq!(s.read(id, 10), Ok(None));
}

#[test]
fn write_bytes_takes_what_fits_without_copying() {
    let (mut c, _) = pair(limits(1_000, 600, 4));
    let id = c.open(Dir::Uni).unwrap();
    let src = Bytes::from(vec![3u8; 1000]);
    let mut rest = src.clone();
    assert_eq!(c.write_bytes(id, &mut rest), Ok(600));
    assert_eq!(rest.len(), 400);
    let ch = c.poll_stream_data(2000, None).unwrap();
    assert_eq!(ch.data.as_ptr(), src.as_ptr());
    assert_eq!(ch.data.len(), 600);
}

// ---------------------------------------------------------------------------------------
// Lossy multi-stream simulation
// ---------------------------------------------------------------------------------------

enum Frame {
    Ctl(ControlFrame),
    Data(StreamChunk),
}

/// What the sending application does with a planned stream once written.
#[derive(Debug, Clone, Copy)]
enum Act {
    Finish,
    /// Reset after writing this many permille of the data.
    Reset(u32),
}

/// One endpoint's application: opens its planned streams, writes them, reads everything
/// (stopping some peer streams at random).
struct App {
    plan: Vec<(Dir, Vec<u8>, Act)>,
    stop_chance: f64,
    next: usize,
    /// Streams being written: id, plan index, bytes written.
    writing: Vec<(StreamId, usize, usize)>,
    sent: BTreeMap<StreamId, usize>,
    reset_sent: BTreeSet<StreamId>,
    reading: BTreeSet<StreamId>,
    received: BTreeMap<StreamId, Vec<u8>>,
    ended: BTreeSet<StreamId>,
    reset_seen: BTreeMap<StreamId, VarInt>,
    stopped: BTreeSet<StreamId>,
    finished: BTreeSet<StreamId>,
}

impl App {
    fn new(plan: Vec<(Dir, Vec<u8>, Act)>, stop_chance: f64) -> Self {
        App {
            plan,
            stop_chance,
            next: 0,
            writing: Vec::new(),
            sent: BTreeMap::new(),
            reset_sent: BTreeSet::new(),
            reading: BTreeSet::new(),
            received: BTreeMap::new(),
            ended: BTreeSet::new(),
            reset_seen: BTreeMap::new(),
            stopped: BTreeSet::new(),
            finished: BTreeSet::new(),
        }
    }

    fn step(&mut self, s: &mut Streams, rng: &mut ChaCha8Rng) {
        while self.next < self.plan.len() {
            let dir = self.plan[self.next].0;
            let Some(id) = s.open(dir) else { break };
            self.sent.insert(id, self.next);
            self.writing.push((id, self.next, 0));
            if dir == Dir::Bi {
                self.reading.insert(id);
            }
            self.next += 1;
        }
        for dir in DIRS {
            while let Some(id) = s.accept(dir) {
                if dir == Dir::Bi {
                    // Answer with an empty stream.
                    s.finish(id).unwrap();
                }
                if rng.random_bool(self.stop_chance) {
                    s.stop(id, VarInt::from_u64(id.0).unwrap()).unwrap();
                    self.stopped.insert(id);
                } else {
                    self.reading.insert(id);
                }
            }
        }
        let plan = &self.plan;
        let reset_sent = &mut self.reset_sent;
        self.writing.retain_mut(|(id, idx, written)| {
            let (_, d, act) = &plan[*idx];
            let target = match *act {
                Act::Finish => d.len(),
                Act::Reset(permille) => d.len() * permille as usize / 1000,
            };
            while *written < target {
                let end = (*written + rng.random_range(1..3000)).min(target);
                match s.write(*id, &d[*written..end]) {
                    Ok(n) => *written += n,
                    Err(WriteError::Blocked) => return true,
                    Err(WriteError::Stopped(code)) => {
                        assert_eq!(code.into_inner(), id.0);
                        return false;
                    }
                    Err(e) => panic!("write on {id:?}: {e}"),
                }
            }
            let r = match act {
                Act::Finish => s.finish(*id),
                Act::Reset(_) => {
                    reset_sent.insert(*id);
                    s.reset(*id, VarInt::from_u64(1000 + id.0).unwrap())
                }
            };
            match r {
                Ok(()) => {}
                Err(WriteError::Stopped(code)) => assert_eq!(code.into_inner(), id.0),
                Err(e) => panic!("finish/reset on {id:?}: {e}"),
            }
            false
        });
        let mut done = Vec::new();
        for &id in &self.reading {
            loop {
                match s.read(id, rng.random_range(1..2000)) {
                    Ok(Some(b)) => self.received.entry(id).or_default().extend_from_slice(&b),
                    Ok(None) => {
                        assert!(self.ended.insert(id), "end reported twice");
                        done.push(id);
                        break;
                    }
                    Err(ReadError::Blocked) => break,
                    Err(ReadError::Reset(code)) => {
                        self.reset_seen.insert(id, code);
                        done.push(id);
                        break;
                    }
                    Err(e) => panic!("read on {id:?}: {e}"),
                }
            }
        }
        for id in done {
            self.reading.remove(&id);
        }
        while let Some(ev) = s.poll_event() {
            match ev {
                StreamEvent::Finished { id } => {
                    assert!(self.finished.insert(id), "Finished twice");
                }
                StreamEvent::Stopped { id, error_code } => {
                    assert_eq!(error_code.into_inner(), id.0);
                }
                _ => {}
            }
        }
    }

    fn done(&self, s: &Streams) -> bool {
        self.next == self.plan.len() && self.writing.is_empty() && s.stream_count() == 0
    }
}

struct Net {
    rng: ChaCha8Rng,
    loss: f64,
    dup: f64,
    /// (from a, frame, fate to report)
    flight: Vec<(bool, Frame, bool)>,
}

impl Net {
    fn send(&mut self, from_a: bool, s: &mut Streams) {
        for _ in 0..self.rng.random_range(1..6) {
            let max = self.rng.random_range(10..700);
            if let Some(f) = s.poll_control(max) {
                assert!(f.encoded_len() <= max);
                self.flight.push((from_a, Frame::Ctl(f), true));
            } else if let Some(c) = s.poll_stream_data(max, None) {
                assert!(c.encoded_len() <= max);
                self.flight.push((from_a, Frame::Data(c), true));
            }
        }
    }

    fn deliver(&mut self, a: &mut Streams, b: &mut Streams) {
        for _ in 0..self.rng.random_range(0..7) {
            if self.flight.is_empty() {
                return;
            }
            let i = self.rng.random_range(0..self.flight.len());
            let (from_a, frame, report) = self.flight.swap_remove(i);
            let (tx, rx) = if from_a {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            let lost = self.rng.random_bool(self.loss);
            // A "lost" frame sometimes arrives anyway (spurious loss, acked later).
            let arrives = !lost || self.rng.random_bool(0.2);
            if arrives {
                match &frame {
                    Frame::Ctl(f) => deliver(rx, *f).unwrap(),
                    Frame::Data(c) => rx.on_stream(c.id, c.offset, c.data.clone(), c.fin).unwrap(),
                }
            }
            if report {
                match &frame {
                    Frame::Ctl(f) if lost => tx.on_control_lost(*f),
                    Frame::Ctl(f) => tx.on_control_acked(*f),
                    Frame::Data(c) => {
                        let len = c.data.len() as u64;
                        if lost {
                            tx.on_stream_lost(c.id, c.offset, len, c.fin);
                        }
                        if arrives {
                            tx.on_stream_acked(c.id, c.offset, len, c.fin);
                        }
                    }
                }
            }
            if arrives && self.rng.random_bool(self.dup) {
                self.flight.push((from_a, frame, false));
            }
        }
    }
}

struct SimCase {
    seed: u64,
    plan_a: Vec<(Dir, Vec<u8>, Act)>,
    plan_b: Vec<(Dir, Vec<u8>, Act)>,
    loss: f64,
    dup: f64,
    stop_chance: f64,
}

fn simulate(case: SimCase) -> Result<(), TestCaseError> {
    let l = StreamLimits {
        max_data: 6_000,
        max_stream_data_bidi_local: 2_500,
        max_stream_data_bidi_remote: 3_000,
        max_stream_data_uni: 2_000,
        max_streams_bidi: 2,
        max_streams_uni: 1,
    };
    let (mut a, mut b) = pair(l);
    let mut app_a = App::new(case.plan_a, case.stop_chance);
    let mut app_b = App::new(case.plan_b, case.stop_chance);
    let mut net = Net {
        rng: ChaCha8Rng::seed_from_u64(case.seed),
        loss: case.loss,
        dup: case.dup,
        flight: Vec::new(),
    };
    let mut app_rng = ChaCha8Rng::seed_from_u64(case.seed ^ 0x5eed);
    let mut steps = 0;
    while !(app_a.done(&a) && app_b.done(&b)) {
        steps += 1;
        prop_assert!(steps < 200_000, "no progress");
        app_a.step(&mut a, &mut app_rng);
        app_b.step(&mut b, &mut app_rng);
        net.send(true, &mut a);
        net.send(false, &mut b);
        net.deliver(&mut a, &mut b);
    }
    for (tx, rx) in [(&app_a, &app_b), (&app_b, &app_a)] {
        for (id, &idx) in &tx.sent {
            let sent = &tx.plan[idx].1[..];
            let got = rx.received.get(id).map(Vec::as_slice).unwrap_or(&[]);
            if rx.stopped.contains(id) {
                prop_assert!(sent.starts_with(got));
            } else if tx.reset_sent.contains(id) {
                prop_assert!(sent.starts_with(got));
                prop_assert_eq!(
                    rx.reset_seen.get(id).map(|c| c.into_inner()),
                    Some(1000 + id.0)
                );
            } else {
                // Every byte once, in order, then the end of the stream.
                prop_assert_eq!(got, sent, "stream {:?}", id);
                prop_assert!(rx.ended.contains(id));
                prop_assert!(tx.finished.contains(id));
            }
        }
        // The empty answers on the peer's bidirectional streams end cleanly too.
        for id in rx.sent.keys().filter(|id| id.dir() == Dir::Bi) {
            prop_assert!(rx.ended.contains(id));
            prop_assert!(tx.finished.contains(id));
        }
    }
    prop_assert_eq!(a.send_buffered(), 0);
    prop_assert_eq!(b.send_buffered(), 0);
    prop_assert_eq!(a.recv_buffered(), 0);
    prop_assert_eq!(b.recv_buffered(), 0);
    Ok(())
}

fn plan_strategy() -> impl Strategy<Value = Vec<(Dir, Vec<u8>, Act)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(Dir::Bi), Just(Dir::Uni)],
            prop::collection::vec(any::<u8>(), 0..12_000),
            prop_oneof![4 => Just(Act::Finish), 1 => (0u32..=1000).prop_map(Act::Reset)],
        ),
        0..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn lossy_reordering_duplicating_network_delivers_every_byte_once_in_order(
        seed in any::<u64>(),
        plan_a in plan_strategy(),
        plan_b in plan_strategy(),
        loss in 0.0f64..0.3,
        dup in 0.0f64..0.2,
        stop_chance in prop_oneof![Just(0.0), 0.0f64..0.3],
    ) {
        simulate(SimCase { seed, plan_a, plan_b, loss, dup, stop_chance })?;
    }
}

// ---------------------------------------------------------------------------------------
// Bulk transfer
// ---------------------------------------------------------------------------------------

#[test]
fn hundred_megabytes_with_bounded_memory() {
    const TOTAL: u64 = 100 * 1024 * 1024;
    const STREAM_WINDOW: u64 = 1024 * 1024;
    const CONN_WINDOW: u64 = 2 * 1024 * 1024;
    let l = limits(CONN_WINDOW, STREAM_WINDOW, 4);
    let (mut c, mut s) = pair(l);
    let id = c.open(Dir::Uni).unwrap();
    let pattern: Vec<u8> = (0..64 * 1024 + 251).map(|i| (i % 251) as u8).collect();
    let (mut written, mut read, mut frames) = (0u64, 0u64, 0u64);
    let (mut max_send_buf, mut max_recv_buf) = (0u64, 0u64);
    let mut finished = false;
    let mut ended = false;
    let mut accepted = false;
    let mut in_flight: VecDeque<StreamChunk> = VecDeque::new();
    while !finished {
        // Application writes as much as it may.
        while written < TOTAL {
            let start = (written % 251) as usize;
            let len = (TOTAL - written).min(64 * 1024) as usize;
            match c.write(id, &pattern[start..start + len]) {
                Ok(n) => written += n as u64,
                Err(WriteError::Blocked) => break,
                Err(e) => panic!("{e}"),
            }
            if written == TOTAL {
                c.finish(id).unwrap();
            }
        }
        // A window of frames in flight; every 97th frame is lost once.
        while let Some(ch) = c.poll_stream_data(1400, None) {
            in_flight.push_back(ch);
            if in_flight.len() >= 64 {
                break;
            }
        }
        while let Some(ch) = in_flight.pop_front() {
            frames += 1;
            let len = ch.data.len() as u64;
            if frames % 97 == 0 {
                c.on_stream_lost(ch.id, ch.offset, len, ch.fin);
                continue;
            }
            s.on_stream(ch.id, ch.offset, ch.data, ch.fin).unwrap();
            c.on_stream_acked(ch.id, ch.offset, len, ch.fin);
        }
        max_send_buf = max_send_buf.max(c.send_buffered());
        max_recv_buf = max_recv_buf.max(s.recv_buffered());
        // Receiver application reads everything and checks the pattern.
        if !accepted {
            accepted = s.accept(Dir::Uni) == Some(id);
        }
        while accepted && !ended {
            match s.read(id, usize::MAX) {
                Ok(Some(b)) => {
                    let start = (read % 251) as usize;
                    assert_eq!(&b[..], &pattern[start..start + b.len()]);
                    read += b.len() as u64;
                }
                Ok(None) => ended = true,
                Err(ReadError::Blocked) => break,
                Err(e) => panic!("{e}"),
            }
        }
        // Flow control updates go back without loss.
        while let Some(f) = s.poll_control(1200) {
            deliver(&mut c, f).unwrap();
            s.on_control_acked(f);
        }
        while let Some(f) = c.poll_control(1200) {
            deliver(&mut s, f).unwrap();
            c.on_control_acked(f);
        }
        while let Some(ev) = c.poll_event() {
            finished |= ev == StreamEvent::Finished { id };
        }
    }
    assert_eq!(read, TOTAL);
    assert!(ended);
    assert!(frames > TOTAL / 1400);
    // Memory stays bounded by the flow control windows, not by the transfer size.
    assert!(max_send_buf <= CONN_WINDOW, "{max_send_buf}");
    assert!(max_recv_buf <= STREAM_WINDOW, "{max_recv_buf}");
    assert_eq!(c.send_buffered(), 0);
    assert_eq!(c.stream_count(), 0);
    assert_eq!(s.read(id, 10), Err(ReadError::ClosedStream));
    assert_eq!(s.stream_count(), 0);
}
