//! The link-event feed: how a driver hands link events to the processes of one host.
//!
//! The emulator (and, later, a real modem daemon) serves each host's link events on a Unix
//! stream socket whose path it puts in the environment variable [`FEED_ENV`] of every
//! process it starts on that host. Each connection receives, from the moment it connects,
//! one JSON object per line: the [`LinkEvent`]'s own fields (as in [`crate::jsonl`]) plus
//! `local`, the host's address on the interface the event concerns, when the driver knows
//! it (a radio path bound to no link, or a host-wide event, has none):
//!
//! ```json
//! {"t_ns":5000000000,"ue":0,"iface":1,"event":{"link_down":{"cell":1,"reason":"no_coverage"}},"local":"10.2.0.2"}
//! ```
//!
//! A consumer applies each event as the simulator applies it to the agents of the host:
//! to the transport paths whose local address is `local`
//! (`polypath_quic::Connection::handle_link_event`).

use std::io;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::LinkEvent;
use crate::jsonl::{ReadError, parse_json_line};

/// The environment variable that names a host's feed socket for the processes on it.
pub const FEED_ENV: &str = "POLYPATH_LINK_EVENTS";

/// One line of the feed: an event and the local address it concerns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeedEvent {
    /// The event.
    #[serde(flatten)]
    pub event: LinkEvent,
    /// The host's address on the interface the event concerns, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<IpAddr>,
}

impl FeedEvent {
    /// Encodes the event as one line of JSON, newline included. Events with a NaN or
    /// infinite number are refused with [`io::ErrorKind::InvalidData`] (JSON has no such
    /// numbers).
    pub fn to_line(&self) -> io::Result<String> {
        if !self.event.event.is_finite() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "link event {} at t_ns={} has a non-finite number",
                    self.event.event.name(),
                    self.event.t_ns
                ),
            ));
        }
        let mut s = serde_json::to_string(self).map_err(io::Error::other)?;
        s.push('\n');
        Ok(s)
    }

    /// Parses one line (without its newline); `line` (1-based) is only used for errors,
    /// which name the offending field.
    pub fn parse(text: &str, line: usize) -> Result<FeedEvent, ReadError> {
        parse_json_line(text, line, "event").map_err(|e| match e {
            ReadError::Parse {
                line, ref field, ..
            } if field.is_empty() || field == "." => match Self::locate_in_event(text) {
                Some((field, message)) => ReadError::Parse {
                    line,
                    field,
                    message,
                },
                None => e,
            },
            e => e,
        })
    }

    /// The offending field of a line whose error lies in the event's own fields: the
    /// flattened [`LinkEvent`] hides their paths from the first attempt, so the object
    /// (without `local`) is read again as a bare event. `None` if that finds nothing.
    fn locate_in_event(text: &str) -> Option<(String, String)> {
        let mut value: serde_json::Value = serde_json::from_str(text).ok()?;
        value.as_object_mut()?.remove("local");
        match serde_path_to_error::deserialize::<_, LinkEvent>(value) {
            Ok(_) => None,
            Err(e) => Some((e.path().to_string(), e.inner().to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CellId, DownReason, LinkEventKind};

    #[test]
    fn round_trips_with_and_without_local() {
        let ev = LinkEvent::new(
            5_000_000_000,
            0,
            1,
            LinkEventKind::LinkDown {
                cell: Some(CellId(1)),
                reason: DownReason::NoCoverage,
            },
        );
        for local in [None, Some("10.2.0.2".parse().unwrap())] {
            let fe = FeedEvent {
                event: ev.clone(),
                local,
            };
            let line = fe.to_line().unwrap();
            assert!(line.ends_with('\n'));
            assert_eq!(line.contains("\"local\""), local.is_some());
            assert_eq!(FeedEvent::parse(line.trim_end(), 1).unwrap(), fe);
        }
    }

    #[test]
    fn bad_lines_name_the_field() {
        let e = FeedEvent::parse(
            r#"{"t_ns":1,"ue":0,"iface":0,"event":{"link_up":{"cell":2}},"local":"not-an-ip"}"#,
            7,
        )
        .unwrap_err();
        assert_eq!(e.line(), 7);
        assert!(e.to_string().contains("local"), "{e}");
        assert!(FeedEvent::parse("{", 1).is_err());
        // Fields of the event itself are named too, despite the flattening.
        for (text, field) in [
            (
                r#"{"t_ns":1,"ue":0,"iface":"zero","event":{"link_up":{"cell":2}}}"#,
                "iface",
            ),
            (
                r#"{"t_ns":1,"ue":0,"iface":0,"event":{"rrc_event_entered":{"meas_id":1,"event":"A9","serving":1,"cell":null}},"local":"10.0.0.1"}"#,
                "event.rrc_event_entered.event",
            ),
        ] {
            match FeedEvent::parse(text, 3).unwrap_err() {
                ReadError::Parse { line, field: f, .. } => {
                    assert_eq!((line, f.as_str()), (3, field), "{text}");
                }
                other => panic!("{other}"),
            }
        }
    }
}
