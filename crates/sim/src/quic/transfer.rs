//! The transfer both endpoints run over a connection: the bulk or request/response
//! application, its verified byte pattern, rate limits and completion records.

use super::*;

/// What the client and the server of one transfer share.
#[derive(Clone)]
pub(crate) struct Common {
    pub clock: Clock,
    pub direction: TransferDirection,
    pub total: u64,
    /// Request/response transactions instead of the bulk transfer.
    pub transactions: Option<QuicTransactions>,
    pub start: SimTime,
    pub stop: Option<SimTime>,
    pub scheduler_params: Vec<(String, String)>,
    /// Scheduler parameters to apply later, in time order.
    pub scheduler_changes: Rc<Vec<SchedulerChange>>,
    pub outcome: Rc<RefCell<TransferOutcome>>,
    /// The sending application's rate limit (the flow's `rate`).
    pub rate: Option<AppRate>,
}

/// What a transfer application needs from a QUIC connection: one stream, opened or
/// accepted, written and read. Implemented for polypath-quic's and (with the `noq`
/// feature) noq's connections, so both run the same application.
pub(crate) trait TransferConn {
    /// The stack's stream identifier.
    type Stream: Copy + PartialEq;
    /// Opens a stream (bidirectional or not); `None` while the peer's limits forbid it.
    fn open(&mut self, bidi: bool) -> Option<Self::Stream>;
    /// Takes a stream the peer opened.
    fn accept(&mut self, bidi: bool) -> Option<Self::Stream>;
    /// Writes a prefix of `data`: `Ok(n)`, `Ok(0)` when blocked, or why it failed.
    fn write(&mut self, id: Self::Stream, data: Bytes) -> Result<usize, String>;
    /// Ends the stream after the data written.
    fn finish(&mut self, id: Self::Stream) -> Result<(), String>;
    /// Reads what is available in order, up to `max` bytes, into `sink`.
    fn read(&mut self, id: Self::Stream, max: usize, sink: &mut dyn FnMut(Bytes)) -> ReadStep;
    /// Closes the connection with an application error code.
    fn close(&mut self, now: Instant, code: u32, reason: &'static [u8]);
}

/// How far a read got.
pub(crate) enum ReadStep {
    /// Nothing more now.
    Blocked,
    /// The end of the stream was read.
    Finished,
    /// The stream failed.
    Failed(String),
}

impl TransferConn for Connection {
    type Stream = StreamId;

    fn open(&mut self, bidi: bool) -> Option<StreamId> {
        self.open_stream(if bidi { Dir::Bi } else { Dir::Uni })
    }

    fn accept(&mut self, bidi: bool) -> Option<StreamId> {
        self.accept_stream(if bidi { Dir::Bi } else { Dir::Uni })
    }

    fn write(&mut self, id: StreamId, mut data: Bytes) -> Result<usize, String> {
        match self.write_bytes(id, &mut data) {
            Ok(n) => Ok(n),
            Err(polypath_quic::streams::WriteError::Blocked) => Ok(0),
            Err(e) => Err(e.to_string()),
        }
    }

    fn finish(&mut self, id: StreamId) -> Result<(), String> {
        Connection::finish(self, id).map_err(|e| e.to_string())
    }

    fn read(&mut self, id: StreamId, max: usize, sink: &mut dyn FnMut(Bytes)) -> ReadStep {
        let mut left = max;
        while left > 0 {
            match Connection::read(self, id, left) {
                Ok(Some(chunk)) => {
                    left -= chunk.len().min(left);
                    sink(chunk);
                }
                Ok(None) => return ReadStep::Finished,
                Err(ReadError::Blocked) => return ReadStep::Blocked,
                Err(e) => return ReadStep::Failed(e.to_string()),
            }
        }
        ReadStep::Blocked
    }

    fn close(&mut self, now: Instant, code: u32, reason: &'static [u8]) {
        Connection::close(self, now, VarInt::from_u32(code), reason);
    }
}

/// The transfer application of one endpoint.
pub(crate) struct Transfer<S> {
    pub client: bool,
    pub c: Common,
    stream: Option<S>,
    /// Download server: request bytes read so far.
    request: Vec<u8>,
    /// Bytes to send: the transfer on the sending side, the request on a download client.
    to_send: u64,
    pub sent: u64,
    finished_writing: bool,
    pub received: u64,
    /// The sending side's data (and FIN) were acknowledged, or the receiving side read
    /// everything.
    pub done: bool,
    pub records: Vec<Record>,
    /// Client of a transactions flow: when each unanswered request was issued.
    issued_at: VecDeque<SimTime>,
    /// Client of a transactions flow: requests issued, and when the stream opened (the
    /// time of the first request).
    issued: u64,
    opened_at: Option<SimTime>,
    /// Rate-limited sender: when it started handing over the transfer's bytes.
    data_started: Option<SimTime>,
    /// Rate-limited sender: when its next piece is due, while it waits for one.
    next_piece: Option<SimTime>,
}

impl<S: Copy + PartialEq> Transfer<S> {
    pub fn new(client: bool, c: Common) -> Self {
        Transfer {
            client,
            c,
            stream: None,
            request: Vec::new(),
            to_send: 0,
            sent: 0,
            finished_writing: false,
            received: 0,
            done: false,
            records: Vec::new(),
            issued_at: VecDeque::new(),
            issued: 0,
            opened_at: None,
            data_started: None,
            next_piece: None,
        }
    }

    /// Whether this side sends the transfer's bytes (and closes the connection once they
    /// are acknowledged); neither side of a transactions flow does.
    pub fn sends_data(&self) -> bool {
        if self.c.transactions.is_some() {
            return false;
        }
        match self.c.direction {
            TransferDirection::Upload => self.client,
            TransferDirection::Download => !self.client,
        }
    }

    /// Whether `id` is the transfer's stream.
    pub fn is_stream(&self, id: S) -> bool {
        self.stream == Some(id)
    }

    /// Records why this side failed (the first reason only).
    pub fn fail(&self, why: String) {
        let mut o = self.c.outcome.borrow_mut();
        let slot = if self.client {
            &mut o.client_error
        } else {
            &mut o.server_error
        };
        slot.get_or_insert(why);
    }

    /// The sender learnt that everything was acknowledged: it is the last to know the
    /// transfer is complete, so it closes the connection.
    pub fn on_acknowledged<C: TransferConn<Stream = S>>(&mut self, conn: &mut C, t: Instant) {
        self.done = true;
        conn.close(t, CLOSE_DONE, b"done");
    }

    /// Opens, writes and reads the stream. Returns false if the transfer failed (the
    /// connection is then closed).
    pub fn step<C: TransferConn<Stream = S>>(
        &mut self,
        conn: &mut C,
        now: SimTime,
        t: Instant,
    ) -> bool {
        if let Some(txn) = self.c.transactions {
            return self.step_transactions(conn, now, t, txn);
        }
        let upload = self.c.direction == TransferDirection::Upload;
        if self.stream.is_none() {
            self.stream = match (self.client, upload) {
                (true, up) => conn.open(!up),
                (false, up) => conn.accept(!up),
            };
            if self.stream.is_none() {
                return true;
            }
            self.to_send = match (self.client, upload) {
                (true, true) => self.c.total,
                (true, false) => REQUEST_LEN as u64,
                // Upload server: sends nothing; download server: once the request is read.
                (false, _) => 0,
            };
        }
        let Some(id) = self.stream else {
            return true;
        };
        let mut error = None;
        // Download server: read the request first.
        if !self.client && !upload && self.request.len() < REQUEST_LEN {
            let mut got = Vec::new();
            let step = conn.read(id, REQUEST_LEN - self.request.len(), &mut |b| {
                got.extend_from_slice(&b)
            });
            self.request.extend_from_slice(&got);
            if let ReadStep::Failed(e) = step {
                error = Some(format!("reading the request: {e}"));
            } else if self.request.len() == REQUEST_LEN {
                let mut n = [0u8; REQUEST_LEN];
                n.copy_from_slice(&self.request);
                let asked = u64::from_be_bytes(n);
                if asked == self.c.total {
                    self.to_send = asked;
                } else {
                    error = Some(format!(
                        "request for {asked} bytes, the flow moves {}",
                        self.c.total
                    ));
                }
            }
        }
        let data = self.sends_data();
        if error.is_none() {
            let total = self.c.total;
            // A rate-limited sender hands over what its rate allows so far (from the
            // moment it has something to send).
            let mut limit = self.to_send;
            self.next_piece = None;
            if let (true, Some(rate)) = (data && self.to_send > 0, self.c.rate) {
                let started = *self.data_started.get_or_insert(now);
                limit = limit.min(limit_of(rate, started, now));
            }
            error = self.write_due(conn, id, limit, |sent, left| {
                if data {
                    transfer_slice(sent, left)
                } else {
                    Bytes::copy_from_slice(&total.to_be_bytes()[sent as usize..])
                }
            });
        }
        if let (Some(rate), Some(started)) = (self.c.rate, self.data_started)
            && error.is_none()
            && self.sent < self.to_send
            && self.sent >= limit_of(rate, started, now)
        {
            self.next_piece = Some(started + rate.due(self.sent));
        }
        if error.is_none()
            && self.to_send > 0
            && self.sent == self.to_send
            && !self.finished_writing
        {
            match conn.finish(id) {
                Ok(()) => self.finished_writing = true,
                Err(e) => error = Some(format!("finishing: {e}")),
            }
        }
        if error.is_none() && !data && !self.done {
            match self.read_checked(conn, id) {
                ReadStep::Blocked => {}
                ReadStep::Finished if self.received == self.c.total => {
                    self.done = true;
                    self.c.outcome.borrow_mut().completed = Some(now);
                    self.records.push(Record::Completion {
                        label: "transfer".into(),
                        started: self.c.start,
                        finished: now,
                        bytes: self.received,
                    });
                }
                ReadStep::Finished => {
                    error = Some(format!(
                        "the stream ended after {} of {} bytes",
                        self.received, self.c.total
                    ));
                }
                ReadStep::Failed(e) => error = Some(format!("reading: {e}")),
            }
        }
        if let Some(e) = error {
            conn.close(t, CLOSE_FAILED, b"transfer failed");
            self.fail(e);
            return false;
        }
        true
    }

    /// Writes what is due of `self.to_send`: `piece(sent, left)` gives the bytes from offset
    /// `sent` (any prefix of the `left` still due). Returns why writing failed, if it did.
    fn write_due<C: TransferConn<Stream = S>>(
        &mut self,
        conn: &mut C,
        id: S,
        limit: u64,
        piece: impl Fn(u64, u64) -> Bytes,
    ) -> Option<String> {
        let end = self.to_send.min(limit);
        while self.sent < end {
            let chunk = piece(self.sent, end - self.sent);
            let len = chunk.len();
            match conn.write(id, chunk) {
                Ok(n) => {
                    self.sent += n as u64;
                    if n < len {
                        break;
                    }
                }
                Err(e) => return Some(format!("writing: {e}")),
            }
        }
        None
    }

    /// Reads what arrived (transfer data from offset `self.received`), checking it; the
    /// outcome's `received` counts the transfer's bytes, or a transactions client's
    /// responses.
    fn read_checked<C: TransferConn<Stream = S>>(&mut self, conn: &mut C, id: S) -> ReadStep {
        let mut received = self.received;
        let mut outcome = self.c.outcome.borrow_mut();
        let step = conn.read(id, usize::MAX, &mut |chunk| {
            outcome.corrupt += mismatches(received, &chunk);
            received += chunk.len() as u64;
            if let Some(d) = outcome.data.as_mut() {
                d.extend_from_slice(&chunk);
            }
        });
        if self.client || self.c.transactions.is_none() {
            outcome.received = received;
        }
        drop(outcome);
        self.received = received;
        step
    }

    /// The request/response application, in the style of netperf's TCP_RR test: the
    /// client writes `request` bytes on one bidirectional stream, the server answers each
    /// whole request with `response` bytes, and the client records a `transaction`
    /// completion (from the request's issue to the last byte of its response) and issues
    /// the next request at once, or every `interval` when one is set. The client closes
    /// the connection after `count` transactions or at the flow's stop time.
    fn step_transactions<C: TransferConn<Stream = S>>(
        &mut self,
        conn: &mut C,
        now: SimTime,
        t: Instant,
        txn: QuicTransactions,
    ) -> bool {
        if self.done && self.client {
            return true;
        }
        if self.stream.is_none() {
            self.stream = if self.client {
                conn.open(true)
            } else {
                conn.accept(true)
            };
            if self.stream.is_some() {
                self.opened_at = Some(now);
            }
        }
        let Some(id) = self.stream else {
            return true;
        };
        let stopping = self.c.stop.is_some_and(|s| now >= s);
        let error = if self.client {
            self.run_client_transactions(conn, id, stopping, now, txn)
        } else {
            self.run_server_transactions(conn, id, stopping, txn)
        };
        if let Some(e) = error {
            conn.close(t, CLOSE_FAILED, b"transactions failed");
            self.fail(e);
            return false;
        }
        let limit = txn.count.unwrap_or(u64::MAX);
        if self.client && (self.issued == limit && self.issued_at.is_empty() || stopping) {
            self.done = true;
            self.c.outcome.borrow_mut().completed = Some(now);
            conn.close(t, CLOSE_DONE, b"done");
        }
        true
    }

    /// The client's side of [`Self::step_transactions`]: issues the requests that are
    /// due, writes them, reads the responses and records each completed transaction.
    fn run_client_transactions<C: TransferConn<Stream = S>>(
        &mut self,
        conn: &mut C,
        id: S,
        stopping: bool,
        now: SimTime,
        txn: QuicTransactions,
    ) -> Option<String> {
        let limit = txn.count.unwrap_or(u64::MAX);
        loop {
            while !stopping && self.issued < limit {
                let due = match txn.interval {
                    None if self.issued_at.is_empty() => now,
                    None => break,
                    Some(_) => match self.next_request() {
                        Some(due) => due,
                        None => break,
                    },
                };
                if due > now {
                    break;
                }
                self.issued_at.push_back(due);
                self.issued += 1;
                self.to_send += txn.request;
            }
            if let Some(e) = self.write_due(conn, id, u64::MAX, transfer_slice) {
                return Some(e);
            }
            match self.read_checked(conn, id) {
                ReadStep::Blocked => {}
                ReadStep::Finished => return Some("the server ended the stream".into()),
                ReadStep::Failed(e) => return Some(format!("reading: {e}")),
            }
            let answered = self.received / txn.response;
            let completed = self.issued - self.issued_at.len() as u64;
            if answered == completed {
                return None;
            }
            for _ in completed..answered {
                let Some(started) = self.issued_at.pop_front() else {
                    return Some("more response bytes than requests".into());
                };
                self.records.push(Record::Completion {
                    label: "transaction".into(),
                    started,
                    finished: now,
                    bytes: txn.response,
                });
            }
        }
    }

    /// The server's side of [`Self::step_transactions`]: reads requests and answers each
    /// whole one. Its part is done once it answered the last of `count` requests, or, in
    /// flows without a count (which end with the client's close at the stop time),
    /// whenever it answered every request read so far.
    fn run_server_transactions<C: TransferConn<Stream = S>>(
        &mut self,
        conn: &mut C,
        id: S,
        stopping: bool,
        txn: QuicTransactions,
    ) -> Option<String> {
        match self.read_checked(conn, id) {
            ReadStep::Blocked | ReadStep::Finished => {}
            ReadStep::Failed(e) => return Some(format!("reading: {e}")),
        }
        self.to_send = self.received / txn.request * txn.response;
        let error = self.write_due(conn, id, u64::MAX, transfer_slice);
        self.done = stopping
            || match txn.count {
                Some(n) => self.sent == n.saturating_mul(txn.response),
                None => self.sent == self.to_send,
            };
        error
    }

    /// Whether the instance's stop time has come with the transfer unfinished (the stop
    /// time is the normal end of a transactions flow without a count).
    pub fn stopped(&self, now: SimTime) -> bool {
        let open_ended = self.c.transactions.is_some_and(|t| t.count.is_none());
        !self.done && !open_ended && self.c.stop.is_some_and(|s| now >= s)
    }

    /// When the client of a transactions flow issues its next request on a timer.
    fn next_request(&self) -> Option<SimTime> {
        let txn = self.c.transactions?;
        let interval = txn.interval?;
        let opened = self.opened_at?;
        let issued = u32::try_from(self.issued).unwrap_or(u32::MAX);
        (self.client && !self.done && self.issued < txn.count.unwrap_or(u64::MAX))
            .then(|| opened + interval.saturating_mul(issued))
    }

    /// The agent's next deadline given the stack's (`stack`): also the start (before the
    /// client connected) and the stop time.
    pub fn next_deadline(
        &self,
        stack: Option<SimTime>,
        connecting: bool,
        gone: bool,
    ) -> Option<SimTime> {
        let own = if connecting {
            Some(self.c.start)
        } else {
            let stop = self.c.stop.filter(|_| !gone && !self.done);
            let app = earliest(self.next_request(), self.next_piece);
            earliest(stop, app.filter(|_| !gone))
        };
        earliest(stack, own)
    }

    /// Application bytes for the recorder.
    pub fn app_stats(&self, stats: &mut AgentStats) {
        if self.c.transactions.is_some() {
            stats.app_bytes_sent = self.sent;
            stats.app_bytes_received = self.received;
        } else if self.sends_data() {
            stats.app_bytes_sent = self.sent;
        } else {
            stats.app_bytes_received = self.received;
        }
    }
}

/// Bytes a rate-limited sender that started at `started` may have handed over at `now`.
pub(super) fn limit_of(rate: AppRate, started: SimTime, now: SimTime) -> u64 {
    rate.allowed(Duration::from_nanos(now.0.saturating_sub(started.0)))
}
