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

/// Loads a NumPy `.npy` array of rates in Mbit/s as a one-second rate trace (see
/// [`parse_npy`]).
pub fn load_npy(path: &Path, column: usize) -> Result<RateTrace, Error> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::new(path, format!("cannot read file: {e}")))?;
    parse_npy(&bytes, path, column)
}

/// Parses a NumPy `.npy` file (format versions 1 to 3): a little-endian `f8`, `f4`, `i8` or
/// `i4` array in C order, either one-dimensional (one rate per second, `column` 1) or
/// two-dimensional with one row per second (`column` picks the column, 1-based). Values are
/// Mbit/s. Errors name the file and, for a bad value, the element (`row N` as the line,
/// `column C` as the field).
pub fn parse_npy(bytes: &[u8], file: &Path, column: usize) -> Result<RateTrace, Error> {
    let bad = |m: &str| Error::new(file, format!("not a usable .npy file: {m}"));
    let rest = bytes
        .strip_prefix(b"\x93NUMPY")
        .ok_or_else(|| bad("missing the \\x93NUMPY magic"))?;
    let (&major, rest) = rest.split_first().ok_or_else(|| bad("truncated"))?;
    let rest = rest.get(1..).ok_or_else(|| bad("truncated"))?;
    let (len, rest) = match major {
        1 => {
            let b = rest.get(..2).ok_or_else(|| bad("truncated"))?;
            (usize::from(u16::from_le_bytes([b[0], b[1]])), &rest[2..])
        }
        2 | 3 => {
            let b = rest.get(..4).ok_or_else(|| bad("truncated"))?;
            let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            (
                usize::try_from(n).map_err(|_| bad("header too long"))?,
                &rest[4..],
            )
        }
        v => return Err(bad(&format!("format version {v} is unknown"))),
    };
    let header = rest.get(..len).ok_or_else(|| bad("truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad("header is not text"))?;
    let data = &rest[len..];
    // The header is a Python dict literal: {'descr': '<f8', 'fortran_order': False, 'shape': (n,), }
    let value_of = |key: &str| {
        let at = header.find(&format!("'{key}'"))? + key.len() + 2;
        let after = header
            .get(at..)?
            .trim_start()
            .strip_prefix(':')?
            .trim_start();
        Some(after)
    };
    let descr = value_of("descr")
        .and_then(|v| v.strip_prefix('\''))
        .and_then(|v| v.split('\'').next())
        .ok_or_else(|| bad("header has no descr").field("descr"))?;
    let (size, kind) = match descr {
        "<f8" => (8, 'f'),
        "<f4" => (4, 'f'),
        "<i8" => (8, 'i'),
        "<i4" => (4, 'i'),
        d => {
            return Err(bad(&format!(
                "dtype {d:?} is not supported (use little-endian float64, float32, int64 or int32)"
            ))
            .field("descr"));
        }
    };
    if value_of("fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err(bad("Fortran-ordered arrays are not supported").field("fortran_order"));
    }
    let shape_text = value_of("shape")
        .and_then(|v| v.strip_prefix('('))
        .and_then(|v| v.split(')').next())
        .ok_or_else(|| bad("header has no shape").field("shape"))?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| bad(&format!("shape ({shape_text}) is not a list of sizes")).field("shape"))?;
    let (rows, cols) = match shape.as_slice() {
        [n] => (*n, 1),
        [n, k] => (*n, *k),
        _ => {
            return Err(bad(&format!(
                "shape ({shape_text}): one or two dimensions expected"
            ))
            .field("shape"));
        }
    };
    if column == 0 || column > cols {
        return Err(Error::new(
            file,
            format!("column {column} is not in 1..={cols} (the array has {cols} column(s))"),
        )
        .field("column"));
    }
    let need = rows
        .checked_mul(cols)
        .and_then(|n| n.checked_mul(size))
        .ok_or_else(|| bad("shape too large").field("shape"))?;
    if data.len() < need {
        return Err(bad(&format!(
            "{} data bytes for a {rows} x {cols} array of {size}-byte values ({need} needed)",
            data.len()
        )));
    }
    let mut rates = Vec::with_capacity(rows);
    for r in 0..rows {
        let at = (r * cols + column - 1) * size;
        let b = &data[at..at + size];
        let v = match (kind, size) {
            ('f', 8) => f64::from_le_bytes(b.try_into().unwrap_or([0; 8])),
            ('f', _) => f64::from(f32::from_le_bytes(b.try_into().unwrap_or([0; 4]))),
            (_, 8) => i64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as f64,
            _ => f64::from(i32::from_le_bytes(b.try_into().unwrap_or([0; 4]))),
        };
        let field = format!("column {column}");
        if !v.is_finite() || v < 0.0 {
            return Err(Error::new(
                file,
                format!("row {r}: {v} is not a rate (finite, not negative)"),
            )
            .at_line(r + 1)
            .field(field));
        }
        rates.push(scaled_rate(v, 1e6, file, r + 1, &field)?);
    }
    if rates.is_empty() {
        return Err(Error::new(file, "the array has no samples"));
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

    /// Builds a version-1 `.npy` file.
    fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn npy_vectors_and_matrices() {
        let data: Vec<u8> = [10.0f64, 20.0, 30.0, 40.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let t = parse_npy(&npy("<f8", "(4,)", &data), p(), 1).unwrap();
        assert_eq!(t.rates_bps, vec![10e6, 20e6, 30e6, 40e6]);
        let t = parse_npy(&npy("<f8", "(2, 2)", &data), p(), 2).unwrap();
        assert_eq!(t.rates_bps, vec![20e6, 40e6]);
        let f4: Vec<u8> = [1.5f32, 2.5].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(
            parse_npy(&npy("<f4", "(2,)", &f4), p(), 1)
                .unwrap()
                .rates_bps,
            vec![1.5e6, 2.5e6]
        );
        let e = parse_npy(&npy("<f8", "(2, 2)", &data), p(), 3).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("column"));
        let e = parse_npy(&npy(">f8", "(4,)", &data), p(), 1).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("descr"));
        let neg: Vec<u8> = [1.0f64, -1.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let e = parse_npy(&npy("<f8", "(2,)", &neg), p(), 1).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (Some(2), Some("column 1")));
        assert!(
            parse_npy(&npy("<f8", "(5,)", &data), p(), 1).is_err(),
            "short data"
        );
        assert!(parse_npy(b"not numpy", p(), 1).is_err());
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
