//! UE mobility: static, straight lines, waypoint routes and GPS track replay (raca5g CSV).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A position in metres on the deployment plane (x east, y north).
pub type Point = [f64; 2];

/// Horizontal distance between two points.
pub fn distance(a: Point, b: Point) -> f64 {
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)).sqrt()
}

/// How a UE moves, as written in a scenario (`mobility = { type = "line", ... }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum MobilityConfig {
    /// Stays at `position`.
    Static {
        /// Position in metres.
        position: Point,
    },
    /// Moves from `from` to `to` at `speed_mps`, starting at `start_s`, then stays at `to`.
    Line {
        /// Start point.
        from: Point,
        /// End point.
        to: Point,
        /// Speed in m/s.
        speed_mps: f64,
        /// When the UE starts moving (seconds); it waits at `from` until then.
        #[serde(default)]
        start_s: f64,
    },
    /// Follows `points` in order at `speed_mps`; with `repeat` it goes back to the first point
    /// and loops forever, otherwise it stops at the last point.
    Waypoints {
        /// Route corners (at least two).
        points: Vec<Point>,
        /// Speed in m/s.
        speed_mps: f64,
        /// Loop the route.
        #[serde(default)]
        repeat: bool,
    },
    /// Replays a GPS track from a raca5g-format CSV (columns `Timestamp`, `Longitude`,
    /// `Latitude`, `Speed`); positions are projected onto the plane around `origin`
    /// (longitude, latitude; default: the first fix), time starts at the first fix.
    GpsTrack {
        /// CSV file (relative paths are resolved by the scenario loader).
        file: PathBuf,
        /// Projection origin `[longitude, latitude]` in degrees, mapped to `[0, 0]`.
        #[serde(default)]
        origin: Option<[f64; 2]>,
    },
}

/// A resolved trajectory: position as a function of time.
#[derive(Debug, Clone, PartialEq)]
pub enum Mobility {
    /// Fixed position.
    Static(Point),
    /// Piecewise-linear path through `(time_s, point)` knots, clamped at both ends;
    /// `period_s` makes it periodic.
    Track {
        /// Knots, in increasing time.
        knots: Vec<(f64, Point)>,
        /// Loop period (seconds), if the track repeats.
        period_s: Option<f64>,
    },
}

/// A problem with a mobility description or a GPS trace file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}: line {line}, field `{field}`: {message}")]
pub struct TraceError {
    /// The file (or `<config>` for inline descriptions).
    pub file: String,
    /// 1-based line (0 when not line-specific).
    pub line: usize,
    /// The offending field or column.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl Mobility {
    /// Resolves a configuration, reading the GPS file if there is one.
    pub fn from_config(cfg: &MobilityConfig) -> Result<Mobility, TraceError> {
        let bad = |field: &str, message: &str| TraceError {
            file: "<config>".into(),
            line: 0,
            field: field.into(),
            message: message.into(),
        };
        let check_speed = |s: f64| {
            if s.is_finite() && s > 0.0 {
                Ok(())
            } else {
                Err(bad("speed_mps", "must be a positive number"))
            }
        };
        match cfg {
            MobilityConfig::Static { position } => Ok(Mobility::Static(*position)),
            MobilityConfig::Line {
                from,
                to,
                speed_mps,
                start_s,
            } => {
                check_speed(*speed_mps)?;
                if !(start_s.is_finite() && *start_s >= 0.0) {
                    return Err(bad("start_s", "must be a non-negative number"));
                }
                let t1 = start_s + distance(*from, *to) / speed_mps;
                Ok(Mobility::Track {
                    knots: vec![(*start_s, *from), (t1, *to)],
                    period_s: None,
                })
            }
            MobilityConfig::Waypoints {
                points,
                speed_mps,
                repeat,
            } => {
                check_speed(*speed_mps)?;
                if points.len() < 2 {
                    return Err(bad("points", "needs at least two points"));
                }
                let mut route = points.clone();
                if *repeat {
                    route.push(points[0]);
                }
                let mut t = 0.0;
                let mut knots = vec![(0.0, route[0])];
                for w in route.windows(2) {
                    t += distance(w[0], w[1]) / speed_mps;
                    knots.push((t, w[1]));
                }
                Ok(Mobility::Track {
                    knots,
                    period_s: (*repeat && t > 0.0).then_some(t),
                })
            }
            MobilityConfig::GpsTrack { file, origin } => {
                let text = std::fs::read_to_string(file).map_err(|e| TraceError {
                    file: file.display().to_string(),
                    line: 0,
                    field: "file".into(),
                    message: e.to_string(),
                })?;
                let track = GpsTrack::parse_raca5g(&text, file)?;
                Ok(track.to_mobility(*origin))
            }
        }
    }

    /// Position at `t_s` seconds since the start.
    pub fn position(&self, t_s: f64) -> Point {
        match self {
            Mobility::Static(p) => *p,
            Mobility::Track { knots, period_s } => {
                let Some(first) = knots.first() else {
                    return [0.0, 0.0];
                };
                let mut t = t_s;
                if let Some(p) = period_s {
                    t = t.rem_euclid(*p);
                }
                if t <= first.0 {
                    return first.1;
                }
                // Knots are few for routes, many for GPS tracks: binary search.
                let i = knots.partition_point(|k| k.0 <= t);
                match (knots.get(i.wrapping_sub(1)), knots.get(i)) {
                    (Some(a), Some(b)) if b.0 > a.0 => {
                        let f = (t - a.0) / (b.0 - a.0);
                        [
                            a.1[0] + f * (b.1[0] - a.1[0]),
                            a.1[1] + f * (b.1[1] - a.1[1]),
                        ]
                    }
                    (Some(a), _) => a.1,
                    _ => first.1,
                }
            }
        }
    }
}

/// A GPS track: fixes of (seconds since the first fix, longitude, latitude, speed in m/s).
#[derive(Debug, Clone, PartialEq)]
pub struct GpsTrack {
    /// The fixes, one per distinct timestamp, in time order.
    pub fixes: Vec<GpsFix>,
}

/// One GPS fix.
#[derive(Debug, Copy, Clone, PartialEq)]
pub struct GpsFix {
    /// Seconds since the first fix.
    pub t_s: f64,
    /// Longitude in degrees.
    pub lon: f64,
    /// Latitude in degrees.
    pub lat: f64,
    /// Reported speed in m/s (raca5g reports km/h; converted).
    pub speed_mps: f64,
}

/// Mean Earth radius used for the local equirectangular projection.
const EARTH_RADIUS_M: f64 = 6_371_000.0;

impl GpsTrack {
    /// Parses a raca5g CSV (`Timestamp` as `YYYY.MM.DD_hh.mm.ss`, `Longitude`, `Latitude`,
    /// `Speed` in km/h). Rows sharing a timestamp (the traces log about twice per second with
    /// one-second stamps) keep the first fix. Errors name the file, line and column.
    pub fn parse_raca5g(text: &str, file: &Path) -> Result<GpsTrack, TraceError> {
        let err = |line: usize, field: &str, message: String| TraceError {
            file: file.display().to_string(),
            line,
            field: field.into(),
            message,
        };
        let mut lines = text.lines().enumerate();
        let Some((_, header)) = lines.next() else {
            return Err(err(1, "header", "empty file".into()));
        };
        let cols: Vec<&str> = header.split(',').map(str::trim).collect();
        let col = |name: &str| {
            cols.iter()
                .position(|c| *c == name)
                .ok_or_else(|| err(1, name, "column missing from header".into()))
        };
        let (ct, clon, clat, cspd) = (
            col("Timestamp")?,
            col("Longitude")?,
            col("Latitude")?,
            col("Speed")?,
        );
        let mut fixes: Vec<GpsFix> = Vec::new();
        let mut t0: Option<i64> = None;
        let mut last_stamp: Option<i64> = None;
        for (i, row) in lines {
            let line = i + 1;
            if row.trim().is_empty() {
                continue;
            }
            let f: Vec<&str> = row.split(',').collect();
            let get = |c: usize, name: &str| {
                f.get(c)
                    .map(|s| s.trim())
                    .ok_or_else(|| err(line, name, "missing value".into()))
            };
            let stamp = parse_raca_timestamp(get(ct, "Timestamp")?)
                .ok_or_else(|| err(line, "Timestamp", "expected YYYY.MM.DD_hh.mm.ss".into()))?;
            if last_stamp == Some(stamp) {
                continue;
            }
            if let Some(prev) = last_stamp
                && stamp < prev
            {
                return Err(err(line, "Timestamp", "timestamps go backwards".into()));
            }
            last_stamp = Some(stamp);
            let num = |c: usize, name: &str| -> Result<f64, TraceError> {
                let s = get(c, name)?;
                s.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| err(line, name, format!("not a number: {s:?}")))
            };
            let lon = num(clon, "Longitude")?;
            let lat = num(clat, "Latitude")?;
            if !(-180.0..=180.0).contains(&lon) {
                return Err(err(line, "Longitude", "out of range".into()));
            }
            if !(-90.0..=90.0).contains(&lat) {
                return Err(err(line, "Latitude", "out of range".into()));
            }
            let speed_kmh = num(cspd, "Speed")?;
            let base = *t0.get_or_insert(stamp);
            fixes.push(GpsFix {
                t_s: (stamp - base) as f64,
                lon,
                lat,
                speed_mps: speed_kmh / 3.6,
            });
        }
        if fixes.is_empty() {
            return Err(err(2, "Timestamp", "no GPS fixes".into()));
        }
        Ok(GpsTrack { fixes })
    }

    /// Projects the fixes onto the plane (local equirectangular projection around `origin`,
    /// `[lon, lat]`, or the first fix): `x = R·Δλ·cos φ0`, `y = R·Δφ`.
    pub fn to_mobility(&self, origin: Option<[f64; 2]>) -> Mobility {
        let o = origin.unwrap_or_else(|| {
            self.fixes
                .first()
                .map(|f| [f.lon, f.lat])
                .unwrap_or([0.0, 0.0])
        });
        let cos0 = o[1].to_radians().cos();
        let knots = self
            .fixes
            .iter()
            .map(|f| {
                let x = EARTH_RADIUS_M * (f.lon - o[0]).to_radians() * cos0;
                let y = EARTH_RADIUS_M * (f.lat - o[1]).to_radians();
                (f.t_s, [x, y])
            })
            .collect();
        Mobility::Track {
            knots,
            period_s: None,
        }
    }
}

/// `YYYY.MM.DD_hh.mm.ss` to seconds since 1970 (proleptic Gregorian, UTC assumed).
fn parse_raca_timestamp(s: &str) -> Option<i64> {
    let (date, time) = s.split_once('_')?;
    let d: Vec<i64> = date
        .split('.')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let t: Vec<i64> = time
        .split('.')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (&[y, mo, da], &[h, mi, se]) = (d.as_slice(), t.as_slice()) else {
        return None;
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + da - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + se)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_waypoints() {
        let m = Mobility::from_config(&MobilityConfig::Line {
            from: [0.0, 0.0],
            to: [400.0, 0.0],
            speed_mps: 8.3,
            start_s: 0.0,
        })
        .unwrap();
        let p = m.position(10.0);
        assert!((p[0] - 83.0).abs() < 1e-9 && p[1] == 0.0);
        assert_eq!(m.position(1000.0), [400.0, 0.0]);
        let w = Mobility::from_config(&MobilityConfig::Waypoints {
            points: vec![[0.0, 0.0], [10.0, 0.0], [10.0, 10.0]],
            speed_mps: 1.0,
            repeat: true,
        })
        .unwrap();
        assert_eq!(w.position(15.0), [10.0, 5.0]);
        // Route length 10 + 10 + 14.142 back to start; period wraps.
        let per = 20.0 + 200f64.sqrt();
        let p = w.position(per + 5.0);
        assert!((p[0] - 5.0).abs() < 1e-9);
        assert!(
            Mobility::from_config(&MobilityConfig::Waypoints {
                points: vec![[0.0, 0.0]],
                speed_mps: 1.0,
                repeat: false
            })
            .is_err()
        );
    }

    #[test]
    fn raca_timestamp() {
        // 2019-12-16 14:23:32 UTC = 1576506212.
        assert_eq!(
            parse_raca_timestamp("2019.12.16_14.23.32"),
            Some(1_576_506_212)
        );
        assert_eq!(parse_raca_timestamp("2019.13.16_14.23.32"), None);
        assert_eq!(parse_raca_timestamp("garbage"), None);
    }

    #[test]
    fn gps_parse_and_project() {
        let text = "Timestamp,Longitude,Latitude,Speed,CellID\n\
                    2019.12.16_14.23.32,-8.395234,51.886583,0,11\n\
                    2019.12.16_14.23.32,-8.395234,51.886583,0,11\n\
                    2019.12.16_14.23.33,-8.396001,51.886805,36,11\n";
        let tr = GpsTrack::parse_raca5g(text, Path::new("x.csv")).unwrap();
        assert_eq!(tr.fixes.len(), 2);
        assert!((tr.fixes[1].speed_mps - 10.0).abs() < 1e-9);
        let m = tr.to_mobility(None);
        let p = m.position(1.0);
        // Δλ = -0.000767° -> x = R·Δλ·cos(51.8866°) ≈ -52.7 m; Δφ = 0.000222° -> y ≈ 24.7 m.
        assert!((p[0] + 52.68).abs() < 0.1, "{p:?}");
        assert!((p[1] - 24.69).abs() < 0.1, "{p:?}");
        let half = m.position(0.5);
        assert!((half[0] - p[0] / 2.0).abs() < 1e-9);
    }

    #[test]
    fn gps_errors_name_line_and_field() {
        let text = "Timestamp,Longitude,Latitude,Speed\n2019.12.16_14.23.32,x,51.8,0\n";
        let e = GpsTrack::parse_raca5g(text, Path::new("t.csv")).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "Longitude"));
        let e = GpsTrack::parse_raca5g("A,B\n", Path::new("t.csv")).unwrap_err();
        assert_eq!(e.field, "Timestamp");
        let text = "Timestamp,Longitude,Latitude,Speed\n2019.12.16_14.23.32,1,2\n";
        let e = GpsTrack::parse_raca5g(text, Path::new("t.csv")).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "Speed"));
    }
}
