//! Loaders for public network traces.
//!
//! Two shapes come out of the loaders:
//! * [`RateTrace`]: a rate in bit/s held for a fixed step (one second for
//!   Lumos5G and the raca5g CSVs), piecewise constant;
//! * [`DeliveryTrace`]: Mahimahi packet-delivery opportunities, one 1500-byte
//!   opportunity per line at a millisecond timestamp.
//!
//! Every error names the file, the 1-based line and the field (column).

use std::path::Path;
use std::time::Duration;

use crate::error::Error;

/// Fastest rate a trace may hold, 1 Pbit/s: anything above is a unit mistake, and a bound
/// keeps every rate, and every sum of rates the simulator forms, finite.
pub const MAX_RATE_BPS: f64 = 1e15;

/// The rate `value` (in `unit_bps` bit/s units, already checked finite and not negative)
/// in bit/s, or an error if it exceeds [`MAX_RATE_BPS`].
fn scaled_rate(
    value: f64,
    unit_bps: f64,
    file: &Path,
    line: usize,
    field: &str,
) -> Result<f64, Error> {
    let bps = value * unit_bps;
    if !bps.is_finite() || bps > MAX_RATE_BPS {
        return Err(Error::new(
            file,
            format!("rate {value} is {bps:e} bit/s, above the limit of {MAX_RATE_BPS:e}"),
        )
        .at_line(line)
        .field(field));
    }
    Ok(bps)
}

/// Bytes one Mahimahi delivery opportunity may carry.
pub const MAHIMAHI_OPPORTUNITY_BYTES: u64 = 1500;

/// A piecewise-constant rate: `rates_bps[i]` holds for `[i*step, (i+1)*step)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RateTrace {
    /// How long each sample holds.
    pub step: Duration,
    /// Rates in bits per second, one per step.
    pub rates_bps: Vec<f64>,
}

impl RateTrace {
    /// The trace's length (`step * samples`).
    pub fn duration(&self) -> Duration {
        self.step
            .saturating_mul(u32::try_from(self.rates_bps.len()).unwrap_or(u32::MAX))
    }

    /// The time-weighted mean rate in bits per second (0 for an empty trace).
    pub fn mean_bps(&self) -> f64 {
        if self.rates_bps.is_empty() {
            0.0
        } else {
            self.rates_bps.iter().sum::<f64>() / self.rates_bps.len() as f64
        }
    }
}

/// Mahimahi delivery opportunities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryTrace {
    /// Opportunity timestamps in milliseconds, non-decreasing; a repeated
    /// timestamp is several opportunities in that millisecond.
    pub opportunities_ms: Vec<u64>,
    /// The loop period in milliseconds: the last timestamp, as in Mahimahi's
    /// `mm-link`, which restarts the file offset by the last timestamp.
    pub period_ms: u64,
}

impl DeliveryTrace {
    /// The mean rate in bits per second over one period.
    pub fn mean_bps(&self) -> f64 {
        if self.period_ms == 0 {
            return 0.0;
        }
        let bits = self.opportunities_ms.len() as f64 * MAHIMAHI_OPPORTUNITY_BYTES as f64 * 8.0;
        bits / (self.period_ms as f64 / 1000.0)
    }
}

/// What the CSV loader does with an empty, `-`, `NA` or `nan` cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Missing {
    /// Repeat the previous valid value (0 before the first one). The default.
    #[default]
    Hold,
    /// Use 0 bit/s for the sample.
    Zero,
    /// Drop the row: the next valid sample follows directly.
    Skip,
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| Error::new(path, format!("cannot read trace: {e}")))
}

fn parse_number(cell: &str, file: &Path, line: usize, field: &str) -> Result<f64, Error> {
    let v: f64 = cell.trim().parse().map_err(|_| {
        Error::new(file, format!("`{}` is not a number", cell.trim()))
            .at_line(line)
            .field(field)
    })?;
    if !v.is_finite() {
        return Err(Error::new(file, format!("`{}` is not finite", cell.trim()))
            .at_line(line)
            .field(field));
    }
    Ok(v)
}

/// Loads a Lumos5G per-second throughput file.
///
/// Each non-empty line is `<t seconds>\t<Mbit/s>[\t<Mbit/s> ...]` (the
/// multipath files carry a second rate column). `column` picks the rate column,
/// 1-based after the time column. Each line is one one-second sample in file
/// order; the time column must be a number but is not used for placement (the
/// dataset's stamps are consecutive seconds, and a few 4G files carry stray
/// out-of-order stamps).
pub fn load_lumos5g(path: &Path, column: usize) -> Result<RateTrace, Error> {
    let src = read(path)?;
    parse_lumos5g(&src, path, column)
}

/// Parses Lumos5G text (see [`load_lumos5g`]); `file` is used in errors.
pub fn parse_lumos5g(src: &str, file: &Path, column: usize) -> Result<RateTrace, Error> {
    if column == 0 {
        return Err(
            Error::new(file, "rate column is 1-based; 0 is the time column").field("column"),
        );
    }
    let mut rates = Vec::new();
    for (i, line) in src.lines().enumerate() {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let mut cells = line.split(['\t', ' ']).filter(|c| !c.is_empty());
        let t = cells.next().ok_or_else(|| {
            Error::new(file, "missing time")
                .at_line(lineno)
                .field("time")
        })?;
        parse_number(t, file, lineno, "time")?;
        let field = format!("rate column {column}");
        let cell = cells.nth(column - 1).ok_or_else(|| {
            Error::new(file, format!("line has no rate column {column}"))
                .at_line(lineno)
                .field(field.clone())
        })?;
        let mbps = parse_number(cell, file, lineno, &field)?;
        if mbps < 0.0 {
            return Err(Error::new(file, "negative rate")
                .at_line(lineno)
                .field(field));
        }
        rates.push(scaled_rate(mbps, 1e6, file, lineno, &field)?);
    }
    if rates.is_empty() {
        return Err(Error::new(file, "trace has no samples"));
    }
    Ok(RateTrace {
        step: Duration::from_secs(1),
        rates_bps: rates,
    })
}

/// Loads a Mahimahi delivery-opportunity trace (`.up` / `.down`).
pub fn load_mahimahi(path: &Path) -> Result<DeliveryTrace, Error> {
    let src = read(path)?;
    parse_mahimahi(&src, path)
}

/// Parses Mahimahi text (see [`load_mahimahi`]); `file` is used in errors.
pub fn parse_mahimahi(src: &str, file: &Path) -> Result<DeliveryTrace, Error> {
    let mut ops = Vec::new();
    let mut last = 0u64;
    for (i, line) in src.lines().enumerate() {
        let lineno = i + 1;
        let cell = line.trim();
        if cell.is_empty() {
            continue;
        }
        let t: u64 = cell.parse().map_err(|_| {
            Error::new(file, format!("`{cell}` is not a millisecond timestamp"))
                .at_line(lineno)
                .field("timestamp")
        })?;
        if t < last {
            return Err(Error::new(
                file,
                format!("timestamp {t} goes back in time (after {last})"),
            )
            .at_line(lineno)
            .field("timestamp"));
        }
        last = t;
        ops.push(t);
    }
    if ops.is_empty() {
        return Err(Error::new(file, "trace has no delivery opportunities"));
    }
    if last == 0 {
        return Err(Error::new(
            file,
            "the last timestamp must be positive (it is the loop period)",
        )
        .field("timestamp"));
    }
    Ok(DeliveryTrace {
        opportunities_ms: ops,
        period_ms: last,
    })
}

/// Loads one column of a CSV file with a header row as a rate trace.
///
/// * `column`: the header name (e.g. `DL_bitrate` in the raca5g files);
/// * `unit_bps`: bits per second per unit of the column (1e3 for kbit/s);
/// * `step`: how long each row holds (raca5g logs about one row per second);
/// * `missing`: what to do with empty, `-`, `NA` or `nan` cells.
///
/// Cells are separated by commas; surrounding double quotes are removed.
pub fn load_csv_column(
    path: &Path,
    column: &str,
    unit_bps: f64,
    step: Duration,
    missing: Missing,
) -> Result<RateTrace, Error> {
    let src = read(path)?;
    parse_csv_column(&src, path, column, unit_bps, step, missing)
}

/// Parses CSV text (see [`load_csv_column`]); `file` is used in errors.
pub fn parse_csv_column(
    src: &str,
    file: &Path,
    column: &str,
    unit_bps: f64,
    step: Duration,
    missing: Missing,
) -> Result<RateTrace, Error> {
    let unquote = |c: &str| c.trim().trim_matches('"').to_string();
    let mut lines = src
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines
        .next()
        .ok_or_else(|| Error::new(file, "CSV file is empty (no header row)"))?;
    let idx = header
        .split(',')
        .map(unquote)
        .position(|h| h == column)
        .ok_or_else(|| {
            Error::new(file, format!("no column named `{column}` in the header"))
                .at_line(1)
                .field(column)
        })?;
    if step.is_zero() {
        return Err(
            Error::new(file, "the step between samples must be positive").field("interval"),
        );
    }
    let mut rates = Vec::new();
    let mut prev = 0.0;
    for (i, line) in lines {
        let lineno = i + 1;
        let cell = line.split(',').nth(idx).map(unquote).ok_or_else(|| {
            Error::new(file, format!("row has no column {} (`{column}`)", idx + 1))
                .at_line(lineno)
                .field(column)
        })?;
        let is_missing = matches!(cell.as_str(), "" | "-" | "NA" | "N/A" | "nan" | "NaN");
        if is_missing {
            match missing {
                Missing::Hold => rates.push(prev),
                Missing::Zero => rates.push(0.0),
                Missing::Skip => {}
            }
            continue;
        }
        let v = parse_number(&cell, file, lineno, column)?;
        if v < 0.0 {
            return Err(Error::new(file, "negative rate")
                .at_line(lineno)
                .field(column));
        }
        prev = scaled_rate(v, unit_bps, file, lineno, column)?;
        rates.push(prev);
    }
    if rates.is_empty() {
        return Err(Error::new(file, format!("column `{column}` has no samples")).field(column));
    }
    Ok(RateTrace {
        step,
        rates_bps: rates,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("t")
    }

    #[test]
    fn lumos5g_single_and_multipath() {
        let t = parse_lumos5g("1.0\t10.0\n2.0\t20.0\n", p(), 1).unwrap();
        assert_eq!(t.rates_bps, vec![10e6, 20e6]);
        assert_eq!(t.mean_bps(), 15e6);
        assert_eq!(t.duration(), Duration::from_secs(2));
        let t = parse_lumos5g("1.0\t10\t30.0\n2.0\t20\t40.0\n", p(), 2).unwrap();
        assert_eq!(t.rates_bps, vec![30e6, 40e6]);
    }

    #[test]
    fn lumos5g_errors_name_line_and_field() {
        let e = parse_lumos5g("1.0\t10.0\n2.0\tabc\n", p(), 1).unwrap_err();
        assert_eq!(e.line, Some(2));
        assert_eq!(e.field.as_deref(), Some("rate column 1"));
        let e = parse_lumos5g("1.0\t10.0\n", p(), 2).unwrap_err();
        assert_eq!(e.line, Some(1));
        let e = parse_lumos5g("x\t10.0\n", p(), 1).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("time"));
        assert!(parse_lumos5g("", p(), 1).is_err());
        assert!(parse_lumos5g("1\t-3\n", p(), 1).is_err());
    }

    #[test]
    fn mahimahi() {
        let t = parse_mahimahi("0\n0\n5\n10\n", p()).unwrap();
        assert_eq!(t.opportunities_ms, vec![0, 0, 5, 10]);
        assert_eq!(t.period_ms, 10);
        // 4 packets of 1500 B per 10 ms = 4.8 Mbit/s
        assert!((t.mean_bps() - 4.8e6).abs() < 1.0);
        let e = parse_mahimahi("5\n3\n", p()).unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(parse_mahimahi("0\n", p()).is_err());
        assert_eq!(parse_mahimahi("1\nx\n", p()).unwrap_err().line, Some(2));
    }

    /// Found by the `traces` fuzz target: `2e306` Mbit/s became an infinite rate.
    #[test]
    fn rates_that_overflow_or_exceed_the_limit_are_errors() {
        let e = parse_csv_column(
            "rate\n-\n2e306\n",
            p(),
            "rate",
            1e6,
            Duration::from_secs(1),
            Missing::Hold,
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(3), Some("rate")));
        assert!(e.message.contains("above the limit"), "{}", e.message);
        let e = parse_lumos5g("1\t2e9\n", p(), 1).unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(
            parse_lumos5g("1\t1e9\n", p(), 1).is_ok(),
            "1 Pbit/s itself is allowed"
        );
    }

    #[test]
    fn csv_missing_rules() {
        let src = "T,DL_bitrate,UL\n1,100,1\n2,-,1\n3,,1\n4,300,1\n";
        let s = Duration::from_secs(1);
        let hold = parse_csv_column(src, p(), "DL_bitrate", 1e3, s, Missing::Hold).unwrap();
        assert_eq!(hold.rates_bps, vec![1e5, 1e5, 1e5, 3e5]);
        let zero = parse_csv_column(src, p(), "DL_bitrate", 1e3, s, Missing::Zero).unwrap();
        assert_eq!(zero.rates_bps, vec![1e5, 0.0, 0.0, 3e5]);
        let skip = parse_csv_column(src, p(), "DL_bitrate", 1e3, s, Missing::Skip).unwrap();
        assert_eq!(skip.rates_bps, vec![1e5, 3e5]);
        let e = parse_csv_column(src, p(), "Nope", 1e3, s, Missing::Hold).unwrap_err();
        assert_eq!(e.line, Some(1));
        let e = parse_csv_column("a,b\n1,x\n", p(), "b", 1.0, s, Missing::Hold).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(2), Some("b")));
        let e = parse_csv_column("a,b\n1\n", p(), "b", 1.0, s, Missing::Hold).unwrap_err();
        assert_eq!(e.line, Some(2));
    }
}
