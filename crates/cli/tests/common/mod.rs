//! What the CLI's integration tests share.

use std::path::PathBuf;

/// The `polypath` binary under test.
pub const POLYPATH: &str = env!("CARGO_BIN_EXE_polypath");

/// A fresh directory for test `name`, named after the test file and this process, and
/// short: Unix socket paths inside it must stay under about 100 bytes.
pub fn scratch(name: &str) -> PathBuf {
    let file = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .and_then(|s| s.split('-').next().map(str::to_string))
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("pp-{file}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
