//! What the CLI's integration tests share.

use std::path::{Path, PathBuf};

/// The `polypath` binary under test.
pub const POLYPATH: &str = env!("CARGO_BIN_EXE_polypath");

/// A test's own directory: removed when the test passes, kept (and named on stderr) when it
/// fails so that its logs can be read.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the failed test's files are kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A fresh directory for test `name`, named after the test file and this process, and
/// short: Unix socket paths inside it must stay under about 100 bytes.
pub fn scratch(name: &str) -> Scratch {
    let file = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .and_then(|s| s.split('-').next().map(str::to_string))
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("pp-{file}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}
