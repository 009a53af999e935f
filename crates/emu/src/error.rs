//! The emulator's errors.

use std::path::Path;

/// Why an emulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    /// The scenario is invalid, or asks for something the emulator cannot honour; the
    /// message names the file, line and field.
    #[error("{0}")]
    Scenario(#[from] polypath_scenario::Error),
    /// The link model refused the run.
    #[error("{0}")]
    Sim(#[from] polypath_sim::SimError),
    /// Setting up namespaces, devices or processes failed.
    #[error("{0}")]
    Setup(String),
    /// A file could not be read or written.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        error: std::io::Error,
    },
}

impl EmuError {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, error: std::io::Error) -> EmuError {
        EmuError::Io {
            path: path.as_ref().display().to_string(),
            error,
        }
    }
}
