//! Quantities with units, as written in scenario files.
//!
//! * durations: `"10ms"`, `"1.5s"`, `"250us"`, `"2min"`, `"1h"`, `"500ns"`, or `0`;
//! * rates: `"100Mbit/s"`, `"300Mbps"`, `"1.2Gbit/s"`, `"64kbit/s"`, `"12MB/s"`
//!   (decimal prefixes; `bit/s`/`bps` count bits, `B/s` counts bytes);
//! * sizes: `"1500B"`, `"64KB"`, `"64KiB"`, `"1GB"`, `"2GiB"`, or an integer count
//!   of bytes.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// Splits `"12.5ms"` into (12.5, "ms").
fn split_number(s: &str) -> Result<(f64, &str), String> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    // "e" is only part of the number when followed by a digit or sign (1e6); the
    // unit names used here never start with "e".
    let (num, unit) = s.split_at(end);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` does not start with a number"))?;
    if !value.is_finite() {
        return Err(format!("`{s}` is not a finite number"));
    }
    Ok((value, unit.trim()))
}

/// The units [`parse_duration`] accepts, for error messages.
const DURATION_UNITS: &str = "ns, us, ms, s, min or h";

/// Parses a duration such as `"10ms"`, `"1.5s"`, `"2min"` (or `0` without a unit).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (v, unit) = split_number(s)?;
    if v < 0.0 {
        return Err(format!("duration `{s}` is negative"));
    }
    let scale = match unit {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "min" => 60.0,
        "h" => 3600.0,
        "" if v == 0.0 => 0.0,
        "" => {
            return Err(format!(
                "duration `{s}` needs a unit ({DURATION_UNITS}), e.g. `{v}s`"
            ));
        }
        other => {
            return Err(format!(
                "duration `{s}`: `{other}` is not a unit of time; use {DURATION_UNITS}"
            ));
        }
    };
    let nanos = (v * scale * 1e9).round();
    if nanos > u64::MAX as f64 {
        return Err(format!("duration `{s}` is too long"));
    }
    Ok(Duration::from_nanos(nanos as u64))
}

/// Parses a rate such as `"100Mbit/s"` into bits per second.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let (v, unit) = split_number(s)?;
    if v < 0.0 {
        return Err(format!("rate `{s}` is negative"));
    }
    let bits = match unit {
        "bit/s" | "bps" | "b/s" => 1.0,
        "kbit/s" | "kbps" | "Kbit/s" | "Kbps" => 1e3,
        "Mbit/s" | "Mbps" => 1e6,
        "Gbit/s" | "Gbps" => 1e9,
        "B/s" => 8.0,
        "kB/s" | "KB/s" => 8e3,
        "MB/s" => 8e6,
        "GB/s" => 8e9,
        "" if v == 0.0 => 0.0,
        _ => {
            return Err(format!(
                "rate `{s}` needs a unit: bit/s, kbit/s, Mbit/s, Gbit/s (or bps, Mbps, ..., B/s, MB/s)"
            ));
        }
    };
    Ok(v * bits)
}

/// The units [`parse_size`] accepts, for error messages.
const SIZE_UNITS: &str = "B, kB (or K), MB (M), GB (G), TB (T), KiB, MiB, GiB or TiB";

/// Parses a size such as `"64KB"`, `"100MB"`, `"1.5GB"`, `"64KiB"` or `"4096"` into
/// bytes. `kB`/`KB`/`K`, `MB`/`M`, `GB`/`G` and `TB`/`T` are powers of 1000; `KiB`,
/// `MiB`, `GiB` and `TiB` powers of 1024. Units are case-sensitive: `Mb` would be megabits,
/// which is not a size.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (v, unit) = split_number(s)?;
    if v < 0.0 {
        return Err(format!("size `{s}` is negative"));
    }
    let multiplier: u64 = match unit {
        "B" | "" => 1,
        "kB" | "KB" | "K" => 1_000,
        "MB" | "M" => 1_000_000,
        "GB" | "G" => 1_000_000_000,
        "TB" | "T" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        other => {
            return Err(format!(
                "size `{s}`: `{other}` is not a unit of size; use {SIZE_UNITS}"
            ));
        }
    };
    // Whole numbers stay exact beyond 2^53.
    let trimmed = s.trim();
    let number = trimmed[..trimmed.len() - unit.len()].trim();
    if let Ok(n) = number.parse::<u64>() {
        return n
            .checked_mul(multiplier)
            .ok_or_else(|| format!("size `{s}` is too large"));
    }
    let bytes = (v * multiplier as f64).round();
    if bytes > u64::MAX as f64 {
        return Err(format!("size `{s}` is too large"));
    }
    Ok(bytes as u64)
}

/// A duration read from a string with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

/// A rate in bits per second read from a string with a unit.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Rate(pub f64);

/// A byte count read from an integer or a string with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Size(pub u64);

struct UnitVisitor<F> {
    what: &'static str,
    parse: F,
    allow_int: bool,
}

impl<'de, T, F: Fn(&str) -> Result<T, String>> Visitor<'de> for UnitVisitor<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {} as a string with a unit", self.what)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.parse)(v).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        if self.allow_int || v == 0 {
            (self.parse)(&v.to_string()).map_err(E::custom)
        } else {
            Err(E::custom(format!(
                "a bare number is ambiguous for a {}; write it with a unit, e.g. \"{v}ms\" or \"{v}Mbit/s\"",
                self.what
            )))
        }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        let v = i64::try_from(v).map_err(|_| E::custom("number too large"))?;
        self.visit_i64(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        if v == 0.0 {
            (self.parse)("0").map_err(E::custom)
        } else {
            Err(E::custom(format!(
                "a bare number is ambiguous for a {}; write it with a unit",
                self.what
            )))
        }
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UnitVisitor {
            what: "duration",
            parse: parse_duration,
            allow_int: false,
        })
        .map(Dur)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UnitVisitor {
            what: "rate",
            parse: parse_rate,
            allow_int: false,
        })
        .map(Rate)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UnitVisitor {
            what: "size",
            parse: parse_size,
            allow_int: true,
        })
        .map(Size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("1e400s").is_err());
        // The message says what is wrong: a missing unit, or one that is not a unit.
        let e = parse_duration("8 parsecs").unwrap_err();
        assert!(
            e.contains("`parsecs` is not a unit of time") && e.contains("ms"),
            "{e}"
        );
        assert!(!e.contains("needs a unit"), "{e}");
        let e = parse_duration("10").unwrap_err();
        assert!(e.contains("needs a unit") && e.contains("`10s`"), "{e}");
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100Mbit/s"), Ok(100e6));
        assert_eq!(parse_rate("501.74 Mbit/s"), Ok(501.74e6));
        assert_eq!(parse_rate("1Gbps"), Ok(1e9));
        assert_eq!(parse_rate("1MB/s"), Ok(8e6));
        assert_eq!(parse_rate("0"), Ok(0.0));
        assert!(parse_rate("100").is_err());
        assert!(parse_rate("100 furlongs").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1500"), Ok(1500));
        assert_eq!(parse_size("1500B"), Ok(1500));
        assert!(parse_size("1Gb").is_err());
        assert_eq!(parse_size("100 MB"), Ok(100_000_000));
        assert_eq!(parse_size("2M"), Ok(2_000_000));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_size("MB").is_err());
        assert!(parse_size("99999999999999999999TB").is_err());
        let e = parse_size("12 parsecs").unwrap_err();
        assert!(
            e.contains("`parsecs` is not a unit of size") && e.contains("MiB"),
            "{e}"
        );
    }

    #[test]
    fn deserialize_from_toml() {
        #[derive(Deserialize)]
        struct T {
            d: Dur,
            r: Rate,
            s: Size,
            n: Size,
        }
        let t: T = toml::from_str("d = \"5ms\"\nr = \"1Mbit/s\"\ns = \"2KB\"\nn = 10").unwrap();
        assert_eq!(t.d.0, Duration::from_millis(5));
        assert_eq!(t.r.0, 1e6);
        assert_eq!(t.s.0, 2000);
        assert_eq!(t.n.0, 10);
        let e = toml::from_str::<T>("d = 5\nr = \"1Mbit/s\"\ns = 1\nn = 1")
            .err()
            .unwrap();
        assert!(e.message().contains("ambiguous"), "{}", e.message());
    }
}
