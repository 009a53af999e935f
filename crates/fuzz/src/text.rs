//! The text decoders: link-event JSON lines, scenario files, network traces, and the
//! transfer protocol's request.

use polypath_cli::request::{Direction, REQUEST_LEN, Request};
use polypath_link::feed::FeedEvent;
use polypath_link::jsonl::{self, JsonLinesReader};
use polypath_scenario::Scenario;
use polypath_scenario::trace::{self, Missing, RateTrace};
use std::path::Path;
use std::time::Duration;

/// Most lines of one input that are parsed (a bound on work per input).
const MAX_LINES: usize = 512;

/// The link-event readers: the JSON-lines reader ([`JsonLinesReader`], which the
/// simulator's and the CLI's event files use) over the raw bytes, and the feed's line
/// parser ([`FeedEvent::parse`], what a process reads from the link-event socket) on every
/// line. Errors must name the line they are about; events that parse and have only finite
/// numbers must survive a write/read round trip unchanged. Returns the number of events
/// parsed.
pub fn link_events(data: &[u8]) -> usize {
    let mut parsed = 0;
    for (i, result) in JsonLinesReader::new(data).take(MAX_LINES).enumerate() {
        match result {
            Ok(event) => {
                parsed += 1;
                if event.event.is_finite() {
                    let line = jsonl::to_string([&event]).expect("finite events encode");
                    let again =
                        jsonl::parse_line(line.trim_end(), 1).expect("encoded event parses");
                    assert_eq!(again, event);
                }
            }
            Err(e) => {
                assert!(e.line() > i, "error line {} for item {i}", e.line());
                let _ = e.to_string();
            }
        }
    }
    let text = String::from_utf8_lossy(data);
    for (i, line) in text.lines().take(MAX_LINES).enumerate() {
        match FeedEvent::parse(line, i + 1) {
            Ok(fe) => {
                parsed += 1;
                if let Ok(encoded) = fe.to_line() {
                    let again =
                        FeedEvent::parse(encoded.trim_end(), 1).expect("encoded line parses");
                    assert_eq!(again, fe);
                } else {
                    assert!(
                        !fe.event.event.is_finite(),
                        "a finite event failed to encode"
                    );
                }
            }
            Err(e) => {
                assert_eq!(e.line(), i + 1);
                let _ = e.to_string();
            }
        }
    }
    parsed
}

/// Where fuzzed scenarios pretend to live: a directory that does not exist, so the trace
/// files they name (relative to it) cannot be read.
const SCENARIO_FILE: &str = "/nonexistent-polypath-fuzz/scenario.toml";

/// The scenario parser ([`Scenario::parse`]) on arbitrary text. Relative trace paths
/// resolve to a directory that does not exist; inputs that could name a device or a
/// kernel file by an absolute path (`dev`, `proc`, `sys` or a Unicode escape anywhere) are
/// skipped, so the target never blocks reading `/dev/zero`. Returns 1 if the scenario
/// parsed.
pub fn scenario(data: &[u8]) -> usize {
    let Ok(text) = std::str::from_utf8(data) else {
        return 0;
    };
    if ["dev", "proc", "sys", "\\u", "\\U"]
        .iter()
        .any(|s| text.contains(s))
    {
        return 0;
    }
    match Scenario::parse(text, Path::new(SCENARIO_FILE)) {
        Ok(s) => {
            let _ = format!("{s:?}");
            1
        }
        Err(e) => {
            if let Some(line) = e.line {
                assert!(line >= 1 && line <= text.lines().count().max(1) + 1);
            }
            let _ = e.to_string();
            0
        }
    }
}

/// Rates must be usable by the simulator: finite and not negative.
fn check_rates(t: &RateTrace) {
    assert!(
        t.rates_bps.iter().all(|r| r.is_finite() && *r >= 0.0),
        "a rate trace with an unusable rate: {:?}",
        t.rates_bps.iter().find(|r| !(r.is_finite() && **r >= 0.0))
    );
    let _ = t.duration();
    assert!(t.mean_bps().is_finite());
}

/// The network trace parsers of `polypath-scenario` on arbitrary text. The first byte
/// picks the format (Mahimahi, Lumos5G with a column from the second byte, or CSV with a
/// column named by the first line's first cell, a unit, a step and a missing-value rule
/// from the next bytes). Parsed traces must hold only finite, non-negative rates and
/// non-decreasing delivery opportunities. Returns 1 if the trace parsed.
pub fn traces(data: &[u8]) -> usize {
    let [format, a, b, rest @ ..] = data else {
        return 0;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return 0;
    };
    let file = Path::new("trace");
    match format % 3 {
        0 => match trace::parse_mahimahi(text, file) {
            Ok(t) => {
                assert!(t.opportunities_ms.windows(2).all(|w| w[0] <= w[1]));
                assert_eq!(t.opportunities_ms.last(), Some(&t.period_ms));
                assert!(t.mean_bps().is_finite());
                1
            }
            Err(_) => 0,
        },
        1 => match trace::parse_lumos5g(text, file, usize::from(*a % 4)) {
            Ok(t) => {
                check_rates(&t);
                1
            }
            Err(_) => 0,
        },
        _ => {
            let column = text
                .lines()
                .next()
                .and_then(|l| l.split(',').next())
                .unwrap_or("")
                .trim()
                .trim_matches('"');
            let unit = [1.0, 1e3, 1e6, 8.0][usize::from(*a % 4)];
            let step = Duration::from_millis(u64::from(*b >> 2));
            let missing = [Missing::Hold, Missing::Zero, Missing::Skip][usize::from(*b % 3)];
            match trace::parse_csv_column(text, file, column, unit, step, missing) {
                Ok(t) => {
                    assert!(!t.step.is_zero());
                    check_rates(&t);
                    1
                }
                Err(_) => 0,
            }
        }
    }
}

/// The server's decoder of the `polypath-transfer/1` request ([`Request::decode`]): what
/// decodes must be exactly the encoding of the request it gives, and anything of another
/// length, magic or operation must be refused. Returns 1 if the input decoded.
pub fn transfer_request(data: &[u8]) -> usize {
    match Request::decode(data) {
        Ok(r) => {
            assert_eq!(&r.encode()[..], data);
            1
        }
        Err(e) => {
            assert!(!e.is_empty());
            let well_formed = data.len() == REQUEST_LEN
                && data.starts_with(b"PPT1")
                && matches!(data.get(4), Some(b'U' | b'D'));
            assert!(!well_formed, "a well-formed request was refused: {e}");
            if data.len() >= REQUEST_LEN {
                let size = data
                    .iter()
                    .fold(0u64, |a, &b| a.rotate_left(8) ^ u64::from(b));
                for direction in [Direction::Upload, Direction::Download] {
                    let r = Request { direction, size };
                    assert_eq!(Request::decode(&r.encode()), Ok(r));
                }
            }
            0
        }
    }
}
