//! Results of the matrix: one row per (client, server, case), as JSON or as a table.

use std::fmt;

use serde::Serialize;

/// A QUIC implementation taking part in the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stack {
    /// polypath-quic driven by polypath-io.
    Polypath,
    /// noq 1.4 (crates.io), the reference peer.
    Noq,
}

impl fmt::Display for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stack::Polypath => "polypath",
            Stack::Noq => "noq",
        })
    }
}

/// The outcome of one case in one direction.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// The stack playing the client.
    pub client: Stack,
    /// The stack playing the server.
    pub server: Stack,
    /// The case name (see [`crate::Case::name`]).
    pub case: &'static str,
    /// Whether every check of the case passed.
    pub ok: bool,
    /// What was measured, or why the case failed.
    pub detail: String,
}

/// All results of one run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// One entry per (client, server, case), in the order they ran.
    pub cases: Vec<CaseResult>,
}

impl Report {
    /// True if every case passed (and there was at least one).
    pub fn all_ok(&self) -> bool {
        !self.cases.is_empty() && self.cases.iter().all(|c| c.ok)
    }

    /// The report as one JSON object `{"cases":[...]}`.
    pub fn to_json(&self) -> String {
        // Serialising plain strings, booleans and enums cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The report as a readable table, one line per case, and a summary line.
    pub fn to_table(&self) -> String {
        let mut out = format!(
            "{:<9} {:<9} {:<18} {:<5} detail\n",
            "client", "server", "case", "ok"
        );
        for c in &self.cases {
            out.push_str(&format!(
                "{:<9} {:<9} {:<18} {:<5} {}\n",
                c.client.to_string(),
                c.server.to_string(),
                c.case,
                if c.ok { "ok" } else { "FAIL" },
                c.detail
            ));
        }
        let passed = self.cases.iter().filter(|c| c.ok).count();
        out.push_str(&format!("{passed}/{} cases passed\n", self.cases.len()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ok: bool) -> CaseResult {
        CaseResult {
            client: Stack::Polypath,
            server: Stack::Noq,
            case: "handshake",
            ok,
            detail: "alpn \"x\"".into(),
        }
    }

    #[test]
    fn json_has_the_documented_shape() {
        let r = Report {
            cases: vec![row(true)],
        };
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        let c = &v["cases"][0];
        assert_eq!(c["client"], "polypath");
        assert_eq!(c["server"], "noq");
        assert_eq!(c["case"], "handshake");
        assert_eq!(c["ok"], true);
        assert_eq!(c["detail"], "alpn \"x\"");
    }

    #[test]
    fn one_failure_fails_the_report() {
        assert!(
            Report {
                cases: vec![row(true)]
            }
            .all_ok()
        );
        assert!(
            !Report {
                cases: vec![row(true), row(false)]
            }
            .all_ok()
        );
        assert!(!Report::default().all_ok());
        assert!(
            Report {
                cases: vec![row(false)]
            }
            .to_table()
            .contains("FAIL")
        );
    }
}
