//! The default path manager: paths change only when the application asks.

use super::{PathManager, PathManagerFactory};

/// Does nothing: paths are opened, abandoned and given a status only by the application
/// ([`crate::Connection::open_path`], [`crate::Connection::abandon_path`],
/// [`crate::Connection::set_path_status`]) and by the protocol itself (failed validation,
/// the peer's PATH_ABANDON).
#[derive(Debug, Default, Clone, Copy)]
pub struct Manual;

impl PathManager for Manual {
    fn name(&self) -> &str {
        "none"
    }
}

/// Builds [`Manual`] path managers.
#[derive(Debug, Default, Clone, Copy)]
pub struct ManualFactory;

impl PathManagerFactory for ManualFactory {
    fn build(&self) -> Box<dyn PathManager> {
        Box::new(Manual)
    }
}
