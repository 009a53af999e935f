//! qlog files on disk: one JSON-SEQ file (`.sqlog`) per connection in a directory.

use polypath_quic::qlog::QlogFactory;
use polypath_quic::{ConnectionId, Side};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes each connection's qlog to `DIR/<odcid>-<client|server>.sqlog`, the original
/// destination connection ID (the qlog group ID) in hex. The directory is created when
/// missing. A file that cannot be created is reported in the log and the connection runs
/// without qlog.
#[derive(Debug, Clone)]
pub struct QlogDir {
    dir: PathBuf,
}

impl QlogDir {
    /// Creates `dir` if needed; fails if it cannot.
    pub fn new(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        Ok(QlogDir { dir })
    }

    /// The directory the files go to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file a connection's qlog goes to.
    pub fn path_for(&self, side: Side, odcid: &ConnectionId) -> PathBuf {
        let side = if side.is_client() { "client" } else { "server" };
        self.dir.join(format!("{odcid}-{side}.sqlog"))
    }
}

impl QlogFactory for QlogDir {
    fn create(&self, side: Side, odcid: &ConnectionId) -> Option<Box<dyn Write + Send>> {
        let path = self.path_for(side, odcid);
        match std::fs::File::create(&path) {
            // The qlog stream buffers whole records itself (and writes them out whole).
            Ok(file) => Some(Box::new(file)),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot create qlog file");
                None
            }
        }
    }
}
