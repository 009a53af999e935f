//! polypath-scenario: the TOML scenario schema and network trace loaders shared
//! by the simulator, the emulator and the lab.
//!
//! A scenario describes hosts with interfaces, links (each direction with its
//! own rate, delay, jitter, loss, queue, outages and step changes; rates may
//! come from Lumos5G, Mahimahi or CSV traces, or from an external source such
//! as the 5G radio model), and flows (QUIC transfers for the QUIC adapter, and
//! raw-UDP constant-rate, on/off and request/response traffic). The format is
//! documented in `scenarios/README.md` at the repository root.
//!
//! ```
//! let src = r#"
//! [sim]
//! duration = "10s"
//!
//! [[host]]
//! name = "client"
//! interfaces = [{ name = "eth0", addr = "10.0.0.1", link = "l", side = "a" }]
//!
//! [[host]]
//! name = "server"
//! interfaces = [{ name = "eth0", addr = "10.0.1.1", link = "l", side = "b" }]
//!
//! [[link]]
//! name = "l"
//! rate = "100Mbit/s"
//! delay = "10ms"
//!
//! [[flow]]
//! name = "video"
//! kind = "cbr"
//! from = "client"
//! to = "server"
//! rate = "5Mbit/s"
//! "#;
//! let s = polypath_scenario::Scenario::parse(src, std::path::Path::new("inline.toml")).unwrap();
//! assert_eq!(s.hosts.len(), 2);
//! assert_eq!(s.flows[0].instances[0].paths.len(), 1);
//! ```
#![warn(missing_docs)]

mod error;
mod locate;
mod model;
mod raw;
mod resolve;
pub mod trace;
pub mod units;

use std::path::Path;
use std::sync::Arc;

pub use error::Error;
pub use model::*;

impl Scenario {
    /// Reads and resolves a scenario file. Trace paths in it are relative to
    /// the file's directory.
    pub fn load(path: &Path) -> Result<Scenario, Error> {
        let src = std::fs::read_to_string(path)
            .map_err(|e| Error::new(path, format!("cannot read scenario: {e}")))?;
        Self::parse(&src, path)
    }

    /// Parses and resolves scenario text; `file` names it in errors and
    /// anchors relative trace paths.
    pub fn parse(src: &str, file: &Path) -> Result<Scenario, Error> {
        let raw: raw::RawScenario = toml::from_str(src).map_err(|e| {
            let mut err = Error::new(file, e.message().to_string());
            if let Some(span) = e.span() {
                err.line = Some(error::line_of_offset(src, span.start));
                err.field = locate::path_at_offset(src, span.start);
            }
            err
        })?;
        resolve::resolve(raw, file, Arc::from(src))
    }

    /// An error about the field at `path` (e.g. `flow[0].cc`), carrying the
    /// file and the line where that field (or its nearest written ancestor)
    /// appears. For consumers that validate further, like the QUIC adapter
    /// rejecting an unknown congestion controller name.
    pub fn error_at(&self, path: &str, message: impl Into<String>) -> Error {
        resolve::Ctx {
            file: &self.file,
            src: &self.source,
        }
        .err(path, message)
    }

    /// Index of the host named `name`.
    pub fn host_index(&self, name: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.name == name)
    }

    /// Index of the link named `name`.
    pub fn link_index(&self, name: &str) -> Option<usize> {
        self.links.iter().position(|l| l.name == name)
    }
}

#[cfg(test)]
mod tests;
