//! `hq-interop` (HTTP/0.9) on noq: a server serving a directory and a client downloading a
//! list of paths over parallel streams, the noq counterparts of `polypath_cli::hq`. The
//! request syntax and the rules of what may be served (no path outside the directory) are
//! polypath's own ([`parse_request`], [`resolve`], [`relative_path`]), so both sides
//! refuse the same requests.
//!
//! Also [`Site`]: a directory of files with known contents for the matrix and the runner
//! harness, removed when dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use polypath_cli::hq::{
    ALPN as HQ_ALPN, ERROR_BAD_REQUEST, ERROR_NOT_FOUND, MAX_REQUEST_LEN, Served, parse_request,
    relative_path, resolve,
};
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;

use crate::peer::CaseError;

/// The ALPN protocol of HTTP/0.9 over QUIC.
pub const ALPN: &[u8] = HQ_ALPN;

/// Serves the files of `root` (canonical) to a noq connection until it closes.
pub async fn noq_serve(conn: &noq::Connection, root: &Path) -> Result<Served, CaseError> {
    let root = Arc::new(
        root.canonicalize()
            .map_err(|e| format!("{}: {e}", root.display()))?,
    );
    let mut tasks = JoinSet::new();
    let mut served = Served::default();
    loop {
        tokio::select! {
            stream = conn.accept_bi() => {
                let Ok((send, recv)) = stream else { break };
                let root = root.clone();
                tasks.spawn(async move { noq_serve_stream(send, recv, &root).await });
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => served.record(done),
        }
    }
    while let Some(done) = tasks.join_next().await {
        served.record(done);
    }
    Ok(served)
}

async fn noq_serve_stream(
    mut send: noq::SendStream,
    mut recv: noq::RecvStream,
    root: &Path,
) -> Result<u64, String> {
    let mut line = Vec::new();
    while !line.contains(&b'\n') {
        match recv.read_chunk(MAX_REQUEST_LEN + 1 - line.len()).await {
            Ok(Some(chunk)) => line.extend_from_slice(&chunk),
            Ok(None) => break,
            Err(e) => return Err(format!("reading a request: {e}")),
        }
        if line.len() > MAX_REQUEST_LEN {
            let _ = send.reset(code(ERROR_BAD_REQUEST));
            return Err(format!("request longer than {MAX_REQUEST_LEN} bytes"));
        }
    }
    let file = parse_request(&line)
        .map_err(|e| (ERROR_BAD_REQUEST, e))
        .and_then(|path| resolve(root, path));
    let file = match file {
        Ok(f) => f,
        Err((c, why)) => {
            let _ = send.reset(code(c));
            return Err(why);
        }
    };
    let data = match tokio::fs::read(&file).await {
        Ok(d) => d,
        Err(e) => {
            let _ = send.reset(code(ERROR_NOT_FOUND));
            return Err(format!("{}: {e}", file.display()));
        }
    };
    send.write_all(&data)
        .await
        .map_err(|e| format!("sending {}: {e}", file.display()))?;
    send.finish()
        .map_err(|e| format!("finishing {}: {e}", file.display()))?;
    let _ = send.stopped().await;
    Ok(data.len() as u64)
}

fn code(c: u64) -> noq::VarInt {
    noq::VarInt::from_u64(c).unwrap_or(noq::VarInt::from_u32(0))
}

/// One file a client downloaded: its request path, size and SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downloaded {
    /// The request path.
    pub path: String,
    /// Bytes received (and saved).
    pub bytes: u64,
    /// SHA-256 of them.
    pub sha256: [u8; 32],
    /// Reads that waited [`STALL_PROBE`] for data that a new read then found at once (the
    /// reading task was not woken: see [`read_all`]).
    pub stalls: u32,
}

/// How long a read waits before [`read_all`] probes with a new read.
pub const STALL_PROBE: Duration = Duration::from_secs(2);

/// Reads a noq stream to its end. A read that has waited [`STALL_PROBE`] is replaced by a
/// new one; if that one returns data at once, the first was never woken although data was
/// there, which is counted (the second return value) rather than hidden. Seen in rare runs
/// on a busy machine: noq had acknowledged every packet of a download, yet the reading
/// task waited until the connection's idle timeout.
pub async fn read_all(recv: &mut noq::RecvStream) -> Result<(Vec<u8>, u32), noq::ReadError> {
    let mut data = Vec::new();
    let mut stalls = 0;
    loop {
        let chunk = match tokio::time::timeout(STALL_PROBE, recv.read_chunk(usize::MAX)).await {
            Ok(chunk) => chunk?,
            Err(_) => {
                match tokio::time::timeout(Duration::from_millis(10), recv.read_chunk(usize::MAX))
                    .await
                {
                    Ok(chunk) => {
                        stalls += 1;
                        chunk?
                    }
                    Err(_) => continue,
                }
            }
        };
        match chunk {
            Some(c) => data.extend_from_slice(&c),
            None => return Ok((data, stalls)),
        }
    }
}

/// Downloads `paths` over parallel streams of a noq connection and saves each under
/// `out_dir` at its relative path.
pub async fn noq_fetch(
    conn: &noq::Connection,
    paths: &[String],
    out_dir: &Path,
) -> Result<Vec<Downloaded>, CaseError> {
    noq_fetch_with(conn, paths, out_dir, false).await
}

/// [`noq_fetch`] on a connection in 0-RTT: every request is sent before any answer is
/// read, in this task, so that the requests leave in 0-RTT packets (on loopback the
/// handshake completes within a millisecond, before tasks spawned to send them might
/// run). For a few paths, within the stream limit.
pub async fn noq_fetch_early(
    conn: &noq::Connection,
    paths: &[String],
    out_dir: &Path,
) -> Result<Vec<Downloaded>, CaseError> {
    noq_fetch_with(conn, paths, out_dir, true).await
}

/// Opens a stream and sends `GET path` on it.
async fn noq_request(
    conn: &noq::Connection,
    path: &str,
) -> Result<(noq::SendStream, noq::RecvStream), CaseError> {
    let (mut send, recv) = conn
        .open_bi()
        .await
        .map_err(|e| format!("{path}: open_bi: {e}"))?;
    send.write_all(format!("GET {path}\r\n").as_bytes())
        .await
        .map_err(|e| format!("{path}: request: {e}"))?;
    send.finish().map_err(|e| format!("{path}: finish: {e}"))?;
    Ok((send, recv))
}

/// Reads the answer to `path` from `recv` and saves it at `target`.
async fn noq_save(
    path: String,
    mut recv: noq::RecvStream,
    target: PathBuf,
) -> Result<Downloaded, CaseError> {
    let stream = recv.id();
    let (data, stalls) = read_all(&mut recv)
        .await
        .map_err(|e| format!("{path} ({stream}): {e}"))?;
    let downloaded = Downloaded {
        bytes: data.len() as u64,
        sha256: Sha256::digest(&data).into(),
        path,
        stalls,
    };
    save_file(&target, data).await?;
    Ok(downloaded)
}

/// Writes `data` to the file `target` (creating its directory) and returns once the
/// bytes are in the file. `tokio::fs::File::write_all` alone returns when the bytes are
/// handed to a blocking-pool thread, not when they are written: a file dropped without a
/// flush can still be empty when the caller goes to check it. That was the rare
/// "downloaded 0 bytes" failure of the multiplexing case (noq client) on a busy machine,
/// where the blocking thread had not yet run when the downloads were checked.
pub async fn save_file(target: &Path, data: Vec<u8>) -> Result<(), CaseError> {
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    tokio::fs::write(target, data)
        .await
        .map_err(|e| format!("{}: {e}", target.display()))
}

async fn noq_fetch_with(
    conn: &noq::Connection,
    paths: &[String],
    out_dir: &Path,
    requests_first: bool,
) -> Result<Vec<Downloaded>, CaseError> {
    let mut tasks = JoinSet::new();
    for path in paths {
        let target = out_dir.join(relative_path(path)?);
        let (conn, path) = (conn.clone(), path.clone());
        if requests_first {
            let (_send, recv) = noq_request(&conn, &path).await?;
            tasks.spawn(noq_save(path, recv, target));
        } else {
            tasks.spawn(async move {
                let (_send, recv) = noq_request(&conn, &path).await?;
                noq_save(path, recv, target).await
            });
        }
    }
    let mut done = Vec::new();
    let mut failed = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(d)) => done.push(d),
            Ok(Err(e)) => failed.push(e),
            Err(e) => failed.push(format!("download task failed: {e}")),
        }
    }
    if failed.is_empty() {
        Ok(done)
    } else {
        Err(format!(
            "{} of {} downloads failed: {}",
            failed.len(),
            paths.len(),
            failed.join("; ")
        ))
    }
}

/// A directory of files with known contents (pseudo-random, from a seed per file), and a
/// file next to it, outside, that no request may reach. Removed when dropped.
#[derive(Debug)]
pub struct Site {
    base: PathBuf,
    /// (request path, size, SHA-256) of each file.
    pub files: Vec<(String, u64, [u8; 32])>,
}

/// The name of the file beside the served directory.
pub const SECRET: &str = "secret";

impl Site {
    /// Creates `base/www` with the files `(path, size)`, and `base/secret`.
    pub fn create(base: PathBuf, files: &[(String, usize)]) -> Result<Site, CaseError> {
        let _ = std::fs::remove_dir_all(&base);
        let www = base.join("www");
        let io = |e: std::io::Error| format!("{}: {e}", base.display());
        std::fs::create_dir_all(&www).map_err(io)?;
        std::fs::write(base.join(SECRET), b"not to be served").map_err(io)?;
        let mut listed = Vec::new();
        for (i, (path, size)) in files.iter().enumerate() {
            let target = www.join(relative_path(path)?);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(io)?;
            }
            let data = crate::cases::pattern(*size, 0x4851_0000 + i as u64);
            std::fs::write(&target, &data).map_err(io)?;
            listed.push((path.clone(), *size as u64, Sha256::digest(&data).into()));
        }
        Ok(Site {
            base,
            files: listed,
        })
    }

    /// The served directory.
    pub fn www(&self) -> PathBuf {
        self.base.join("www")
    }

    /// The request paths of the files.
    pub fn paths(&self) -> Vec<String> {
        self.files.iter().map(|f| f.0.clone()).collect()
    }

    /// Checks that `dir` holds every file, byte for byte (by SHA-256); returns the total
    /// size.
    pub fn check_downloads(&self, dir: &Path) -> Result<u64, CaseError> {
        let mut total = 0;
        for (path, size, sha) in &self.files {
            let file = dir.join(relative_path(path)?);
            let data = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let got: [u8; 32] = Sha256::digest(&data).into();
            if data.len() as u64 != *size || got != *sha {
                return Err(format!(
                    "{path}: downloaded {} bytes with SHA-256 {}, served {size} bytes with {}",
                    data.len(),
                    hex::encode(got),
                    hex::encode(sha)
                ));
            }
            total += size;
        }
        Ok(total)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Poll, Wake, Waker};

    /// A waker that unparks the test's thread.
    struct Unpark {
        woken: AtomicBool,
        thread: std::thread::Thread,
    }

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.woken.store(true, Ordering::SeqCst);
            self.thread.unpark();
        }
    }

    /// [`save_file`] returns only once its file holds every byte, however late the blocking
    /// pool gets to run. Each poll of it is made while the pool's only thread is held by a
    /// gate, so whatever that poll handed to the pool has not run when it returns: at the
    /// poll that returns `Ready`, the file must already be complete. (A plain
    /// `File::create` + `write_all` + drop returns `Ready` with the write still queued and
    /// the file empty.)
    #[test]
    fn save_file_returns_once_the_file_holds_the_data() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(1)
            .build()
            .unwrap();
        let _in_runtime = runtime.enter();
        let dir = std::env::temp_dir().join(format!("pp-interop-save-file-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let target = dir.join("downloads/f081");
        let data = crate::cases::pattern(21_919, 81).to_vec();
        let mut save = Box::pin(save_file(&target, data.clone()));
        let unpark = Arc::new(Unpark {
            woken: AtomicBool::new(false),
            thread: std::thread::current(),
        });
        let waker = Waker::from(unpark.clone());
        let mut cx = Context::from_waker(&waker);
        let mut polls = 0;
        loop {
            let (open, gate) = std::sync::mpsc::channel::<()>();
            drop(tokio::task::spawn_blocking(move || {
                let _ = gate.recv();
            }));
            polls += 1;
            let poll = save.as_mut().poll(&mut cx);
            if let Poll::Ready(result) = poll {
                let on_disk = std::fs::read(&target).unwrap_or_default();
                drop(open);
                result.unwrap();
                assert_eq!(
                    on_disk.len(),
                    data.len(),
                    "save_file returned (poll {polls}) before its bytes were in the file"
                );
                assert!(on_disk == data, "the file holds other bytes");
                break;
            }
            drop(open);
            while !unpark.woken.swap(false, Ordering::SeqCst) {
                std::thread::park();
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
