//! Simulator errors.

use std::path::{Path, PathBuf};

/// Why a run could not be built or completed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The scenario (or a trace it names) is invalid; names file, line, field.
    #[error("{0}")]
    Scenario(#[from] polypath_scenario::Error),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The topology or agent set cannot be built (port clash, unknown link in
    /// an external update, ...).
    #[error("{0}")]
    Build(String),
}

impl SimError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        SimError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
