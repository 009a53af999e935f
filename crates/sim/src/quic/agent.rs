//! The simulator agent that runs one polypath endpoint: the connection's timers and
//! datagrams, the paths the client opens, and link events handed to the connection.

use super::*;

/// The client's connection, made at the instance's start.
pub(super) struct PendingConnect {
    pub(super) config: ClientConfig,
    pub(super) local: SocketAddr,
    pub(super) remote: SocketAddr,
}

/// One polypath-quic endpoint with its one connection and the transfer application.
pub(super) struct QuicAgent {
    pub(super) app: Transfer<StreamId>,
    pub(super) endpoint: Endpoint,
    pub(super) conn: Option<ConnectionHandle>,
    pub(super) connect: Option<PendingConnect>,
    /// Client: paths still to open, and the status they get.
    pub(super) extra_paths: Vec<(SocketAddr, SocketAddr)>,
    pub(super) extra_status: PathStatus,
    /// Client: parameters for its path manager, applied when it connects.
    pub(super) path_manager_params: Vec<(String, String)>,
    /// The connection is gone (closed, drained or never made).
    pub(super) gone: bool,
    /// How many of the flow's scheduler changes this endpoint has applied.
    pub(super) changes_applied: usize,
    pub(super) out: VecDeque<Datagram>,
    pub(super) buf: Vec<u8>,
}

impl QuicAgent {
    pub(super) fn new(side: Side, endpoint: Endpoint, c: Common) -> Self {
        QuicAgent {
            app: Transfer::new(side.is_client(), c),
            endpoint,
            conn: None,
            connect: None,
            extra_paths: Vec::new(),
            extra_status: PathStatus::Available,
            path_manager_params: Vec::new(),
            gone: false,
            changes_applied: 0,
            out: VecDeque::new(),
            buf: Vec::new(),
        }
    }

    /// Applies the scheduler changes that are due (once the connection exists).
    fn apply_scheduler_changes(&mut self, now: SimTime, h: ConnectionHandle) {
        let changes = self.app.c.scheduler_changes.clone();
        while let Some(change) = changes.get(self.changes_applied).filter(|c| c.at <= now) {
            if let Some(conn) = self.endpoint.connection_mut(h) {
                for (k, v) in &change.params {
                    // Checked when the flow was built.
                    let _ = conn.configure_scheduler(k, v);
                }
            }
            self.changes_applied += 1;
        }
    }

    /// When the next scheduler change is due.
    fn next_scheduler_change(&self) -> Option<SimTime> {
        self.app
            .c
            .scheduler_changes
            .get(self.changes_applied)
            .map(|c| c.at)
    }

    fn configure_path_manager(&mut self, h: ConnectionHandle) {
        if let Some(conn) = self.endpoint.connection_mut(h) {
            for (k, v) in &self.path_manager_params {
                // Checked when the flow was built.
                let _ = conn.configure_path_manager(k, v);
            }
        }
    }

    fn configure_scheduler(&mut self, h: ConnectionHandle) {
        if let Some(conn) = self.endpoint.connection_mut(h) {
            for (k, v) in &self.app.c.scheduler_params {
                // Checked when the flow was built.
                let _ = conn.configure_scheduler(k, v);
            }
        }
    }

    /// Everything the application does after the endpoint processed input.
    fn service(&mut self, now: SimTime) {
        let t = self.app.c.clock.instant(now);
        if let Some(p) = self.connect.take_if(|_| now >= self.app.c.start) {
            match self
                .endpoint
                .connect(t, p.config, p.local, p.remote, SERVER_NAME)
            {
                Ok(h) => {
                    self.conn = Some(h);
                    self.configure_scheduler(h);
                    self.configure_path_manager(h);
                }
                Err(e) => {
                    self.app.fail(format!("connect: {e}"));
                    self.gone = true;
                }
            }
        }
        if self.conn.is_none() && !self.app.client {
            self.conn = self.endpoint.accept();
            if let Some(h) = self.conn {
                self.configure_scheduler(h);
                self.configure_path_manager(h);
            }
        }
        let Some(h) = self.conn else {
            return;
        };
        self.apply_scheduler_changes(now, h);
        if !self.gone && self.app.stopped(now) {
            if let Some(conn) = self.endpoint.connection_mut(h) {
                conn.close(t, VarInt::from_u32(CLOSE_STOPPED), b"stopped");
            }
            self.app
                .fail("stopped at the flow's stop time before the transfer completed".into());
            self.gone = true;
        }
        while let Some((_, event)) = self.endpoint.poll_event() {
            match event {
                Event::Stream(StreamEvent::Finished { id })
                    if self.app.is_stream(id) && self.app.sends_data() =>
                {
                    if let Some(conn) = self.endpoint.connection_mut(h) {
                        self.app.on_acknowledged(conn, t);
                    }
                }
                Event::ConnectionLost(e) => {
                    self.gone = true;
                    // Once its part is done, whatever ends the connection (the sender's
                    // close, or the receiver's idle timeout when that close was lost) is
                    // no failure.
                    if !self.app.done {
                        self.app.fail(e.to_string());
                    }
                }
                _ => {}
            }
        }
        let Some(conn) = self.endpoint.connection_mut(h) else {
            self.gone = true;
            return;
        };
        if conn.is_closed() {
            self.gone = true;
            return;
        }
        if self.app.client {
            open_paths(conn, t, &mut self.extra_paths, self.extra_status);
            let open = conn.path_count();
            let mut o = self.app.c.outcome.borrow_mut();
            o.client_paths = o.client_paths.max(open);
        }
        {
            let switches = conn.stats().top_path_switches;
            let mut o = self.app.c.outcome.borrow_mut();
            if self.app.client {
                o.client_top_path_switches = switches;
            } else {
                o.server_top_path_switches = switches;
            }
        }
        if !self.app.step(conn, now, t) {
            self.gone = true;
        }
    }
}

/// The earlier of two optional deadlines.
pub(super) fn earliest(a: Option<SimTime>, b: Option<SimTime>) -> Option<SimTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Opens the client's remaining paths once the handshake is confirmed; paths that cannot
/// be opened yet (the peer has not issued connection IDs for them) are tried again later.
pub(super) fn open_paths(
    conn: &mut Connection,
    now: Instant,
    pending: &mut Vec<(SocketAddr, SocketAddr)>,
    status: PathStatus,
) {
    use polypath_quic::connection::OpenPathError;
    if pending.is_empty() || !conn.is_handshake_confirmed() {
        return;
    }
    while let Some(&(local, remote)) = pending.first() {
        match conn.open_path(now, local, remote, status) {
            Ok(_) => {
                pending.remove(0);
            }
            Err(OpenPathError::NoPathId) => return,
            Err(_) => {
                // Not negotiated or closed: the other paths will not open either.
                pending.clear();
                return;
            }
        }
    }
}

/// Splits a (GSO) batch of `size` bytes in `buf` into datagrams.
pub(crate) fn queue_datagrams(
    out: &mut VecDeque<Datagram>,
    buf: &[u8],
    size: usize,
    segment: Option<usize>,
    src: SocketAddr,
    dst: SocketAddr,
) {
    let size = size.min(buf.len());
    let segment = segment.unwrap_or(size).max(1);
    for chunk in buf[..size].chunks(segment) {
        out.push_back(Datagram {
            src,
            dst,
            payload: Bytes::copy_from_slice(chunk),
        });
    }
}

impl Agent for QuicAgent {
    fn handle_datagram(&mut self, now: SimTime, datagram: Datagram) {
        let t = self.app.c.clock.instant(now);
        self.endpoint.handle(
            t,
            datagram.dst,
            datagram.src,
            None,
            BytesMut::from(datagram.payload),
        );
        self.service(now);
    }

    fn handle_timeout(&mut self, now: SimTime) {
        self.endpoint.handle_timeout(self.app.c.clock.instant(now));
        self.service(now);
    }

    fn poll_transmit(&mut self, now: SimTime) -> Option<Datagram> {
        if let Some(d) = self.out.pop_front() {
            return Some(d);
        }
        let t = self
            .endpoint
            .poll_transmit(self.app.c.clock.instant(now), &mut self.buf)?;
        queue_datagrams(
            &mut self.out,
            &self.buf,
            t.size,
            t.segment_size,
            t.source,
            t.destination,
        );
        self.out.pop_front()
    }

    fn poll_timeout(&mut self) -> Option<SimTime> {
        let stack = self
            .endpoint
            .poll_timeout()
            .map(|i| self.app.c.clock.sim(i));
        let change = self
            .next_scheduler_change()
            .filter(|_| self.conn.is_some() && !self.gone);
        let stack = earliest(stack, change);
        self.app
            .next_deadline(stack, self.connect.is_some(), self.gone)
    }

    fn is_done(&self) -> bool {
        self.app.done || self.gone
    }

    fn stats(&self, stats: &mut AgentStats) {
        self.app.app_stats(stats);
        let Some(conn) = self.conn.and_then(|h| self.endpoint.connection(h)) else {
            return;
        };
        for p in conn.paths() {
            let s = &p.snapshot;
            stats.paths.push(PathStats {
                id: u64::from(s.id.0),
                local: s.local,
                remote: s.remote,
                srtt: s.has_rtt_sample.then_some(s.srtt),
                cwnd: Some(s.cwnd),
                bytes_in_flight: Some(s.bytes_in_flight),
                lost_packets: p.stats.packets_lost,
                sent_packets: p.stats.packets_sent,
            });
        }
    }

    fn drain_records(&mut self, out: &mut Vec<Record>) {
        out.append(&mut self.app.records);
    }

    fn handle_link_event(&mut self, now: SimTime, event: &LinkEvent, local: Option<IpAddr>) {
        let t = self.app.c.clock.instant(now);
        if let Some(conn) = self.conn.and_then(|h| self.endpoint.connection_mut(h)) {
            conn.handle_link_event(t, event, local);
        }
    }
}
