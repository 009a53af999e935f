//! qlog output: structured event logs in the JSON Text Sequences serialization
//! (draft-ietf-quic-qlog-main-schema, section "JSON-SEQ serialization") with the QUIC event
//! schema (draft-ietf-quic-qlog-quic-events), readable by qvis and other qlog tools.
//!
//! Each record starts with the ASCII Record Separator (0x1E) and ends with a line feed
//! (RFC 7464). The first record is the file header; each later record is one event whose
//! `time` is in milliseconds relative to the connection's start. The reference clock is
//! monotonic with an unknown epoch, so a simulated run writes byte-identical logs for the
//! same seed.
//!
//! The stream buffers whole records and hands them to its writer only whole, so a process
//! killed at any moment leaves a file of complete records: the header at once; every event
//! while the connection is being set up (until [`QlogStream::set_eager`] turns that off,
//! when the handshake is confirmed); later, when [`BUFFER_CAPACITY`] bytes are waiting, when
//! [`FLUSH_INTERVAL`] has passed since the last flush, and on explicit
//! [`QlogStream::flush`] calls (the connection flushes after its state changes and when it
//! closes).

use crate::shared::{ConnectionId, Side};
use serde_json::{Value, json};
use std::io::Write;
use std::time::{Duration, Instant};

/// The event schema URI of the QUIC events draft this writer follows.
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-qlog-quic-events#section-2.1
//# Implementations of draft versions of the event schema MUST append the string
//# "-" and the corresponding draft number to the URI.
pub const QUIC_EVENT_SCHEMA: &str = "urn:ietf:params:qlog:events:quic-13";

/// Where qlog output for a connection goes. Implemented by drivers: `polypath-io` writes
/// files into a directory, tests collect into memory.
pub trait QlogFactory: Send + Sync {
    /// Returns a writer for a new connection, or `None` to not log it. `odcid` is the
    /// original destination connection ID, the usual qlog group ID.
    fn create(&self, side: Side, odcid: &ConnectionId) -> Option<Box<dyn Write + Send>>;
}

/// Bytes of records a stream holds before it hands them to its writer.
pub const BUFFER_CAPACITY: usize = 64 * 1024;

/// Longest time (of the events' clock) records wait in the buffer once a newer event comes.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// A qlog JSON-SEQ stream for one connection.
pub struct QlogStream {
    out: Box<dyn Write + Send>,
    start: Instant,
    failed: bool,
    /// Whole records not yet written to `out`.
    buffer: Vec<u8>,
    /// When `buffer` was last written out.
    last_flush: Instant,
    /// Write out after every event.
    eager: bool,
}

impl std::fmt::Debug for QlogStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QlogStream")
            .field("failed", &self.failed)
            .finish()
    }
}

const RECORD_SEPARATOR: u8 = 0x1e;

impl QlogStream {
    /// Starts a stream: writes the file header naming the vantage point and group ID.
    pub fn new(
        out: Box<dyn Write + Send>,
        start: Instant,
        side: Side,
        odcid: &ConnectionId,
    ) -> Self {
        let header = json!({
            "file_schema": "urn:ietf:params:qlog:file:sequential",
            "serialization_format": "application/qlog+json-seq",
            "title": "polypath",
            "trace": {
                "common_fields": {
                    "group_id": odcid.to_string(),
                    "time_format": "relative_to_epoch",
                    "reference_time": { "clock_type": "monotonic", "epoch": "unknown" },
                },
                "vantage_point": {
                    "name": "polypath",
                    "type": if side.is_client() { "client" } else { "server" },
                },
                "event_schemas": [QUIC_EVENT_SCHEMA],
            },
        });
        let mut stream = QlogStream {
            out,
            start,
            failed: false,
            buffer: Vec::with_capacity(BUFFER_CAPACITY),
            last_flush: start,
            eager: true,
        };
        stream.failed = write_record(&mut stream.buffer, &header).is_err();
        stream.flush();
        stream
    }

    /// Whether every event is written out at once (the default, for the handshake: a
    /// process killed during it leaves every event so far), or buffered.
    pub fn set_eager(&mut self, eager: bool) {
        self.eager = eager;
    }

    /// Writes one event; `name` is given without the `quic:` namespace prefix. Write errors
    /// stop further logging silently: a full disk must not break the connection.
    pub fn event(&mut self, now: Instant, name: &str, data: Value) {
        self.event_in(now, "quic", name, data);
    }

    /// Writes one event of another namespace (`polypath` for the project's own events, such
    /// as link-layer events and path-manager decisions; qlog tools show unknown namespaces
    /// as custom events).
    pub fn event_in(&mut self, now: Instant, namespace: &str, name: &str, data: Value) {
        if self.failed {
            return;
        }
        let time = now.saturating_duration_since(self.start).as_secs_f64() * 1000.0;
        let record = json!({ "time": time, "name": format!("{namespace}:{name}"), "data": data });
        if write_record(&mut self.buffer, &record).is_err() {
            self.failed = true;
            return;
        }
        if self.eager
            || self.buffer.len() >= BUFFER_CAPACITY
            || now.saturating_duration_since(self.last_flush) >= FLUSH_INTERVAL
        {
            self.last_flush = now;
            self.flush();
        }
    }

    /// Writes the buffered records out (whole) and flushes the writer.
    pub fn flush(&mut self) {
        if self.failed {
            return;
        }
        let written = self
            .out
            .write_all(&self.buffer)
            .and_then(|()| self.out.flush());
        self.buffer.clear();
        if written.is_err() {
            self.failed = true;
        }
    }
}

impl Drop for QlogStream {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Appends one record to `buffer`; on error `buffer` is left as it was.
fn write_record(buffer: &mut Vec<u8>, value: &Value) -> std::io::Result<()> {
    let start = buffer.len();
    buffer.push(RECORD_SEPARATOR);
    if let Err(e) = serde_json::to_writer(&mut *buffer, value) {
        buffer.truncate(start);
        return Err(e.into());
    }
    buffer.push(b'\n');
    Ok(())
}

/// Parses a JSON-SEQ qlog file into its records (header first), for tests and tools.
pub fn parse_json_seq(bytes: &[u8]) -> Result<Vec<Value>, String> {
    let mut records = Vec::new();
    for (index, chunk) in bytes.split(|b| *b == RECORD_SEPARATOR).enumerate() {
        if index == 0 {
            if !chunk.iter().all(u8::is_ascii_whitespace) {
                return Err("data before the first record separator".into());
            }
            continue;
        }
        let value: Value =
            serde_json::from_slice(chunk).map_err(|e| format!("record {index}: {e}"))?;
        records.push(value);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn writes_parseable_json_seq() {
        let sink = Shared::default();
        let start = Instant::now();
        let mut q = QlogStream::new(
            Box::new(sink.clone()),
            start,
            Side::Client,
            &ConnectionId::new(&[1, 2]),
        );
        q.event(
            start + Duration::from_millis(5),
            "packet_sent",
            json!({"header": {"packet_type": "1RTT"}}),
        );
        drop(q);
        let bytes = sink.0.lock().unwrap().clone();
        let records = parse_json_seq(&bytes).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(
            records[0]["file_schema"],
            "urn:ietf:params:qlog:file:sequential"
        );
        assert_eq!(records[0]["trace"]["common_fields"]["group_id"], "0102");
        assert_eq!(records[1]["name"], "quic:packet_sent");
        assert_eq!(records[1]["time"], 5.0);
    }

    /// Records reach the writer whole: at once while eager, then when the interval has
    /// passed or the buffer is full.
    #[test]
    fn buffers_whole_records_and_flushes_by_time_and_size() {
        let sink = Shared::default();
        let start = Instant::now();
        let mut q = QlogStream::new(
            Box::new(sink.clone()),
            start,
            Side::Server,
            &ConnectionId::new(&[9]),
        );
        let written = || parse_json_seq(&sink.0.lock().unwrap()).unwrap().len();
        assert_eq!(written(), 1, "the header is written at once");
        q.event(start, "connection_started", json!({}));
        assert_eq!(written(), 2, "eager: every event at once");
        q.set_eager(false);
        q.event(start + Duration::from_millis(10), "packet_sent", json!({}));
        assert_eq!(written(), 2, "buffered");
        q.event(start + FLUSH_INTERVAL, "packet_sent", json!({}));
        assert_eq!(written(), 4, "the interval passed: both written");
        let big = "x".repeat(1000);
        let mut events = 4;
        while written() == 4 {
            q.event(start + FLUSH_INTERVAL, "packet_sent", json!({ "pad": big }));
            events += 1;
            assert!(
                events < 4 + BUFFER_CAPACITY / 1000 + 2,
                "the buffer never filled"
            );
        }
        assert!(
            events > 4 + BUFFER_CAPACITY / 1100,
            "flushed early: {events}"
        );
        assert_eq!(written(), events, "everything up to the full buffer, whole");
        q.event(start + FLUSH_INTERVAL, "packet_sent", json!({}));
        drop(q);
        assert_eq!(written(), events + 1, "dropping the stream flushes it");
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_json_seq(b"\x1e{not json}\n").is_err());
        assert!(parse_json_seq(b"junk\x1e{}\n").is_err());
    }
}
