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

/// A `polypath` child process that announced the address it serves on its first line.
#[allow(dead_code)] // not every test binary spawns such a process
pub struct Announced {
    /// The process.
    pub child: std::process::Child,
    /// Its standard output, after the first line.
    pub stdout: std::io::BufReader<std::process::ChildStdout>,
    /// The address from the first line.
    pub addr: std::net::SocketAddr,
}

/// Spawns `cmd` with its standard output piped and reads the address it announces: its
/// first line must be `prefix` then the address (anything after the address, past a space,
/// is ignored: `relaying A -> B`).
#[allow(dead_code)] // not every test binary spawns such a process
pub fn spawn_announced(cmd: &mut std::process::Command, prefix: &str) -> Announced {
    use std::io::BufRead;
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix(prefix)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .parse()
        .unwrap_or_else(|e| panic!("first line {line:?}: {e}"));
    Announced {
        child,
        stdout,
        addr,
    }
}
