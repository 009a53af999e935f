//! JSON-lines encoding of [`LinkEvent`] streams: one JSON object per line, in time order.
//!
//! Reading never panics on malformed input: every problem is a [`ReadError`] naming the
//! 1-based line number and, where serde can tell, the path of the offending field (for
//! example `event.handover_command.target`).

use crate::LinkEvent;
use std::fmt;
use std::io::{self, BufRead, Write};

/// Writes link events as JSON lines.
#[derive(Debug)]
pub struct JsonLinesWriter<W: Write> {
    out: W,
    written: u64,
}

impl<W: Write> JsonLinesWriter<W> {
    /// Wraps a writer.
    pub fn new(out: W) -> Self {
        JsonLinesWriter { out, written: 0 }
    }

    /// Writes one event followed by a newline. Events with a NaN or infinite number are
    /// refused with [`io::ErrorKind::InvalidData`] because JSON cannot represent them.
    pub fn write(&mut self, event: &LinkEvent) -> io::Result<()> {
        if !event.event.is_finite() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "link event {} at t_ns={} has a non-finite number",
                    event.event.name(),
                    event.t_ns
                ),
            ));
        }
        serde_json::to_writer(&mut self.out, event).map_err(io::Error::other)?;
        self.out.write_all(b"\n")?;
        self.written += 1;
        Ok(())
    }

    /// Number of events written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Flushes and returns the inner writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Writes all `events` as JSON lines to `out`.
pub fn write_all<'a, W: Write>(
    out: W,
    events: impl IntoIterator<Item = &'a LinkEvent>,
) -> io::Result<()> {
    let mut w = JsonLinesWriter::new(out);
    for e in events {
        w.write(e)?;
    }
    w.into_inner().map(|_| ())
}

/// Encodes events as a JSON-lines string.
pub fn to_string<'a>(events: impl IntoIterator<Item = &'a LinkEvent>) -> io::Result<String> {
    let mut buf = Vec::new();
    write_all(&mut buf, events)?;
    String::from_utf8(buf).map_err(io::Error::other)
}

/// A problem reading a JSON-lines event stream.
#[derive(Debug)]
pub enum ReadError {
    /// The underlying reader failed.
    Io {
        /// 1-based line number being read.
        line: usize,
        /// The I/O error.
        error: io::Error,
    },
    /// A line is not a valid event.
    Parse {
        /// 1-based line number.
        line: usize,
        /// Path of the offending field (`.` separated), empty if the problem is the line as a
        /// whole (e.g. not JSON at all).
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl ReadError {
    /// The 1-based line number of the problem.
    pub fn line(&self) -> usize {
        match self {
            ReadError::Io { line, .. } | ReadError::Parse { line, .. } => *line,
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io { line, error } => write!(f, "line {line}: read error: {error}"),
            ReadError::Parse {
                line,
                field,
                message,
            } if field.is_empty() || field == "." => write!(f, "line {line}: {message}"),
            ReadError::Parse {
                line,
                field,
                message,
            } => write!(f, "line {line}, field `{field}`: {message}"),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io { error, .. } => Some(error),
            ReadError::Parse { .. } => None,
        }
    }
}

/// Parses one line (without its newline) as an event; `line` is only used for errors.
pub fn parse_line(text: &str, line: usize) -> Result<LinkEvent, ReadError> {
    parse_json_line(text, line, "event")
}

/// Parses one line (without its newline) as a `what`; errors name the line `line` and
/// the offending field.
pub(crate) fn parse_json_line<T: serde::de::DeserializeOwned>(
    text: &str,
    line: usize,
    what: &str,
) -> Result<T, ReadError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| ReadError::Parse {
        line,
        field: e.path().to_string(),
        message: e.inner().to_string(),
    })?;
    de.end().map_err(|e| ReadError::Parse {
        line,
        field: String::new(),
        message: format!("trailing characters after the {what}: {e}"),
    })?;
    Ok(value)
}

/// Reads events from JSON lines, skipping blank lines.
#[derive(Debug)]
pub struct JsonLinesReader<R: BufRead> {
    input: R,
    line: usize,
    buf: String,
    failed: bool,
}

impl<R: BufRead> JsonLinesReader<R> {
    /// Wraps a buffered reader.
    pub fn new(input: R) -> Self {
        JsonLinesReader {
            input,
            line: 0,
            buf: String::new(),
            failed: false,
        }
    }
}

impl<R: BufRead> Iterator for JsonLinesReader<R> {
    type Item = Result<LinkEvent, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            self.buf.clear();
            self.line += 1;
            match self.input.read_line(&mut self.buf) {
                Ok(0) => return None,
                Ok(_) => {
                    let text = self.buf.trim();
                    if text.is_empty() {
                        continue;
                    }
                    return Some(parse_line(text, self.line));
                }
                Err(error) => {
                    self.failed = true;
                    return Some(Err(ReadError::Io {
                        line: self.line,
                        error,
                    }));
                }
            }
        }
    }
}

/// Reads a whole JSON-lines string, stopping at the first error.
pub fn from_str(text: &str) -> Result<Vec<LinkEvent>, ReadError> {
    JsonLinesReader::new(text.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::*;
    use proptest::prelude::*;

    fn sample() -> Vec<LinkEvent> {
        let m = CellMeasurement {
            cell: CellId(1),
            rat: RadioType::NrFr1,
            rsrp_dbm: -85.25,
            rsrq_db: -10.8,
            sinr_db: 12.3456789,
        };
        vec![
            LinkEvent::new(
                0,
                0,
                0,
                LinkEventKind::Measurement {
                    serving: Some(CellId(1)),
                    cells: vec![m.clone()],
                },
            ),
            LinkEvent::new(
                1,
                0,
                0,
                LinkEventKind::MeasurementReport {
                    meas_id: 3,
                    event: MeasEvent::A3,
                    serving: m.clone(),
                    neighbours: vec![m],
                    on_leave: false,
                },
            ),
            LinkEvent::new(
                2,
                0,
                1,
                LinkEventKind::LinkDown {
                    cell: None,
                    reason: DownReason::SnRelease,
                },
            ),
            LinkEvent::new(
                3,
                7,
                0,
                LinkEventKind::RbAllocation {
                    cell: CellId(9),
                    slot: 12,
                    rbs: 106,
                    total_rbs: 106,
                    bytes: 9000,
                },
            ),
        ]
    }

    #[test]
    fn round_trip() {
        let events = sample();
        let text = to_string(&events).unwrap();
        assert_eq!(text.lines().count(), events.len());
        assert_eq!(from_str(&text).unwrap(), events);
    }

    #[test]
    fn errors_name_line_and_field() {
        let mut text = to_string(&sample()).unwrap();
        text.push_str(
            "\n{\"t_ns\":9,\"ue\":0,\"iface\":0,\"event\":{\"link_up\":{\"cell\":\"x\"}}}\n",
        );
        let err = from_str(&text).unwrap_err();
        assert_eq!(err.line(), 6);
        let msg = err.to_string();
        assert!(msg.contains("event.link_up.cell"), "{msg}");

        let err =
            from_str("{\"t_ns\":1,\"ue\":0,\"event\":{\"link_up\":{\"cell\":1}}}").unwrap_err();
        assert!(err.to_string().contains("iface"), "{err}");

        let err = from_str("not json").unwrap_err();
        assert_eq!(err.line(), 1);

        let err =
            from_str("{\"t_ns\":1,\"ue\":0,\"iface\":0,\"event\":{\"link_up\":{\"cell\":1}}} x")
                .unwrap_err();
        assert!(err.to_string().contains("trailing"), "{err}");
    }

    #[test]
    fn writer_refuses_nan() {
        let ev = LinkEvent::new(
            0,
            0,
            0,
            LinkEventKind::PredictedThroughput {
                bps: f64::INFINITY,
                predictor: "oracle".into(),
                horizon_ms: 1000,
            },
        );
        assert!(to_string([&ev]).is_err());
    }

    proptest! {
        #[test]
        fn measurement_round_trips(rsrp in -200.0f64..0.0, rsrq in -40.0f64..0.0,
                                   sinr in -30.0f64..60.0, t in any::<u64>(), ue in any::<u32>(),
                                   iface in any::<u16>(), cell in any::<u32>()) {
            let ev = LinkEvent::new(t, ue, iface, LinkEventKind::Measurement {
                serving: Some(CellId(cell)),
                cells: vec![CellMeasurement { cell: CellId(cell), rat: RadioType::NrFr2,
                    rsrp_dbm: rsrp, rsrq_db: rsrq, sinr_db: sinr }],
            });
            let text = to_string([&ev]).unwrap();
            prop_assert_eq!(from_str(&text).unwrap(), vec![ev]);
        }

        #[test]
        fn garbage_never_panics(s in "\\PC{0,200}") {
            let _ = from_str(&s);
        }
    }
}
