//! HTTP/0.9 over QUIC, ALPN `hq-interop`: the application protocol of the QUIC Interop
//! Runner's endpoints.
//!
//! The client opens one bidirectional stream per file and sends `GET /path\r\n`, then
//! finishes its side; the server answers with the file's bytes and finishes (FIN). A
//! request the server cannot serve (malformed, outside its directory, missing) is answered
//! with RESET_STREAM and an error code ([`ERROR_BAD_REQUEST`], [`ERROR_NOT_FOUND`]).
//! Both sides here run on `polypath-io`: [`serve_connection`] serves a directory to one
//! connection, [`fetch`] downloads a list of paths over parallel streams into a directory.

use polypath_io::{Connection, RecvStream, SendStream};
use sha2::{Digest, Sha256};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

/// The ALPN protocol.
pub const ALPN: &[u8] = b"hq-interop";
/// Longest request line the server reads.
pub const MAX_REQUEST_LEN: usize = 8 * 1024;
/// RESET_STREAM code for a malformed or refused request (a path leaving the directory).
pub const ERROR_BAD_REQUEST: u64 = 0x1;
/// RESET_STREAM code for a file that does not exist (or cannot be read).
pub const ERROR_NOT_FOUND: u64 = 0x2;
/// Bytes read from a file at once.
const CHUNK: usize = 256 * 1024;

/// The path of a request line: `GET /path` followed by `\r\n`, `\n` or nothing (the end
/// of the stream).
pub fn parse_request(line: &[u8]) -> Result<&str, String> {
    let text = std::str::from_utf8(line).map_err(|_| "request is not UTF-8".to_string())?;
    let text = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text);
    let path = text
        .strip_prefix("GET ")
        .ok_or_else(|| format!("not a GET request: {:?}", truncate(text)))?;
    if !path.starts_with('/') || path.contains(char::is_whitespace) {
        return Err(format!("bad request path {:?}", truncate(path)));
    }
    Ok(path)
}

fn truncate(text: &str) -> String {
    text.chars().take(80).collect()
}

/// The relative file path of a request path (`/a/b.txt` → `a/b.txt`), refusing anything
/// that could leave the directory: `..`, a root or a drive, an empty name.
pub fn relative_path(path: &str) -> Result<PathBuf, String> {
    let trimmed = path.trim_start_matches('/');
    let relative = Path::new(trimmed);
    let mut out = PathBuf::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(format!("path {path:?} leaves the directory"));
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(format!("path {path:?} names no file"));
    }
    Ok(out)
}

/// The file under `root` that `path` names, if it is a file inside `root` once symbolic
/// links are followed. `root` must be canonical.
pub fn resolve(root: &Path, path: &str) -> Result<PathBuf, (u64, String)> {
    let relative = relative_path(path).map_err(|e| (ERROR_BAD_REQUEST, e))?;
    let file = root
        .join(relative)
        .canonicalize()
        .map_err(|e| (ERROR_NOT_FOUND, format!("{path}: {e}")))?;
    if !file.starts_with(root) {
        return Err((
            ERROR_BAD_REQUEST,
            format!("{path} leads outside the directory"),
        ));
    }
    if !file.is_file() {
        return Err((ERROR_NOT_FOUND, format!("{path} is not a file")));
    }
    Ok(file)
}

/// What a server did on one connection.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Served {
    /// Requests answered with a file.
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// Requests refused or failed, with why.
    pub refused: Vec<String>,
}

impl Served {
    /// Counts one finished request task: its file's size, or why it was refused.
    pub fn record(&mut self, done: Result<Result<u64, String>, tokio::task::JoinError>) {
        match done {
            Ok(Ok(bytes)) => {
                self.files += 1;
                self.bytes += bytes;
            }
            Ok(Err(e)) => self.refused.push(e),
            Err(e) => self.refused.push(format!("request task failed: {e}")),
        }
    }
}

/// Serves files of `root` to `conn`: one task per request stream, until the connection
/// closes (the client closes it when it has everything). Returns what was served.
pub async fn serve_connection(conn: &Connection, root: &Path) -> Result<Served, String> {
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
                tasks.spawn(async move { serve_stream(send, recv, &root).await });
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => served.record(done),
        }
    }
    while let Some(done) = tasks.join_next().await {
        served.record(done);
    }
    Ok(served)
}

/// Answers one request stream; returns the file's size.
async fn serve_stream(
    mut send: SendStream,
    mut recv: RecvStream,
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
            let _ = send.reset(ERROR_BAD_REQUEST);
            return Err(format!("request longer than {MAX_REQUEST_LEN} bytes"));
        }
    }
    let file = match parse_request(&line).map_err(|e| (ERROR_BAD_REQUEST, e)) {
        Ok(path) => resolve(root, path),
        Err(e) => Err(e),
    };
    let file = match file {
        Ok(f) => f,
        Err((code, why)) => {
            let _ = send.reset(code);
            return Err(why);
        }
    };
    let mut input = match tokio::fs::File::open(&file).await {
        Ok(f) => f,
        Err(e) => {
            let _ = send.reset(ERROR_NOT_FOUND);
            return Err(format!("{}: {e}", file.display()));
        }
    };
    let mut sent = 0u64;
    loop {
        let mut chunk = vec![0u8; CHUNK];
        let n = match input.read(&mut chunk).await {
            Ok(n) => n,
            Err(e) => {
                let _ = send.reset(ERROR_NOT_FOUND);
                return Err(format!("{}: {e}", file.display()));
            }
        };
        if n == 0 {
            break;
        }
        chunk.truncate(n);
        sent += n as u64;
        send.write_chunk(chunk.into())
            .await
            .map_err(|e| format!("sending {}: {e}", file.display()))?;
    }
    send.finish()
        .map_err(|e| format!("finishing {}: {e}", file.display()))?;
    // Keep the stream until the peer has everything (dropping it early is harmless for
    // polypath-io, but the wait bounds the task's life by the transfer's).
    let _ = send.finished().await;
    Ok(sent)
}

/// One downloaded file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Fetched {
    /// The request path.
    pub path: String,
    /// Where it was saved.
    pub saved_to: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Seconds from opening the stream to its end.
    pub seconds: f64,
}

/// Downloads `paths` (request paths such as `/file1`) over parallel streams of `conn` and
/// saves each under `out_dir` at its relative path. All run at once; the connection's
/// stream limit queues those beyond it. Fails with every failed path listed.
pub async fn fetch(
    conn: &Connection,
    paths: &[String],
    out_dir: &Path,
) -> Result<Vec<Fetched>, String> {
    fetch_with(conn, paths, out_dir, false).await
}

/// [`fetch`] on a connection sending early data (0-RTT): every request is sent from this
/// task before any answer is read, so that the requests leave in 0-RTT packets before the
/// handshake can complete (a fraction of a millisecond on loopback, possibly before tasks
/// spawned to send them would run). Each answer is still read by a task of its own.
pub async fn fetch_early(
    conn: &Connection,
    paths: &[String],
    out_dir: &Path,
) -> Result<Vec<Fetched>, String> {
    fetch_with(conn, paths, out_dir, true).await
}

async fn fetch_with(
    conn: &Connection,
    paths: &[String],
    out_dir: &Path,
    requests_first: bool,
) -> Result<Vec<Fetched>, String> {
    let mut tasks = JoinSet::new();
    for (index, path) in paths.iter().enumerate() {
        let target = out_dir.join(relative_path(path)?);
        let (conn, path) = (conn.clone(), path.clone());
        if requests_first {
            let started = Instant::now();
            let request = request(&conn, &path).await;
            tasks.spawn(async move {
                let result = match request {
                    Ok(recv) => save(recv, &path, &target, started).await,
                    Err(e) => Err(e),
                };
                (index, result)
            });
        } else {
            tasks.spawn(async move {
                let started = Instant::now();
                let result = match request(&conn, &path).await {
                    Ok(recv) => save(recv, &path, &target, started).await,
                    Err(e) => Err(e),
                };
                (index, result)
            });
        }
    }
    let mut done: Vec<Option<Fetched>> = vec![None; paths.len()];
    let mut failed = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((index, Ok(f))) => done[index] = Some(f),
            Ok((index, Err(e))) => failed.push(format!("{}: {e}", paths[index])),
            Err(e) => failed.push(format!("download task failed: {e}")),
        }
    }
    if !failed.is_empty() {
        return Err(format!(
            "{} of {} downloads failed: {}",
            failed.len(),
            paths.len(),
            failed.join("; ")
        ));
    }
    Ok(done.into_iter().flatten().collect())
}

/// Opens a stream and sends `GET path` on it; returns the stream's receiving side.
async fn request(conn: &Connection, path: &str) -> Result<RecvStream, String> {
    let (mut send, recv) = conn
        .open_bi()
        .await
        .map_err(|e| format!("cannot open a stream: {e}"))?;
    send.write_all(format!("GET {path}\r\n").as_bytes())
        .await
        .map_err(|e| format!("sending the request: {e}"))?;
    send.finish()
        .map_err(|e| format!("finishing the request: {e}"))?;
    Ok(recv)
}

/// Reads the answer to `path` from `recv` and saves it at `target`; `started` is when its
/// stream was opened.
async fn save(
    mut recv: RecvStream,
    path: &str,
    target: &Path,
    started: Instant,
) -> Result<Fetched, String> {
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    let mut out = tokio::fs::File::create(target)
        .await
        .map_err(|e| format!("{}: {e}", target.display()))?;
    let mut hash = Sha256::new();
    let mut bytes = 0u64;
    loop {
        match recv.read_chunk(CHUNK).await {
            Ok(Some(chunk)) => {
                hash.update(&chunk);
                bytes += chunk.len() as u64;
                out.write_all(&chunk)
                    .await
                    .map_err(|e| format!("{}: {e}", target.display()))?;
            }
            Ok(None) => break,
            Err(e) => return Err(format!("after {bytes} bytes: {e}")),
        }
    }
    out.flush()
        .await
        .map_err(|e| format!("{}: {e}", target.display()))?;
    Ok(Fetched {
        path: path.to_string(),
        saved_to: target.to_path_buf(),
        bytes,
        sha256: hex::encode(hash.finalize()),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// A URL of the runner's `REQUESTS`: `https://HOST:PORT/path` split into the authority
/// (`HOST:PORT`, port 443 when absent) and the path.
pub fn split_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| format!("URL {url:?}: expected https://HOST[:PORT]/PATH"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(format!("URL {url:?} has no host"));
    }
    // A port is present if the authority ends in :digits after any IPv6 bracket.
    let has_port = authority.rsplit_once(':').is_some_and(|(host, port)| {
        !host.ends_with(':') && !port.contains(']') && port.parse::<u16>().is_ok()
    });
    let authority = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:443")
    };
    Ok((authority, path.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_traversal_is_refused() {
        assert_eq!(parse_request(b"GET /a/b.txt\r\n"), Ok("/a/b.txt"));
        assert_eq!(parse_request(b"GET /x\n"), Ok("/x"));
        assert_eq!(parse_request(b"GET /x"), Ok("/x"));
        for bad in [
            &b"PUT /x\r\n"[..],
            b"GET x\r\n",
            b"GET /a b\r\n",
            b"\xff\r\n",
            b"",
        ] {
            assert!(parse_request(bad).is_err(), "{bad:?}");
        }
        assert_eq!(relative_path("/a/./b").unwrap(), PathBuf::from("a/b"));
        for bad in ["/../etc/passwd", "/a/../../b", "/", "//", "/a/.."] {
            assert!(relative_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn resolve_stays_inside_the_directory() {
        let base = std::env::temp_dir().join(format!("pp-hq-resolve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("www");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/f"), b"x").unwrap();
        std::fs::write(base.join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(base.join("secret"), root.join("link")).unwrap();
        let root = root.canonicalize().unwrap();
        assert!(resolve(&root, "/sub/f").is_ok());
        assert_eq!(resolve(&root, "/link").unwrap_err().0, ERROR_BAD_REQUEST);
        assert_eq!(
            resolve(&root, "/../secret").unwrap_err().0,
            ERROR_BAD_REQUEST
        );
        assert_eq!(resolve(&root, "/missing").unwrap_err().0, ERROR_NOT_FOUND);
        assert_eq!(resolve(&root, "/sub").unwrap_err().0, ERROR_NOT_FOUND);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn urls_split_into_authority_and_path() {
        let split = |u| split_url(u).unwrap();
        assert_eq!(
            split("https://server4:443/f1"),
            ("server4:443".into(), "/f1".into())
        );
        assert_eq!(
            split("https://server/a/b"),
            ("server:443".into(), "/a/b".into())
        );
        assert_eq!(
            split("https://[::1]:4433/x"),
            ("[::1]:4433".into(), "/x".into())
        );
        assert_eq!(split("https://[::1]/x"), ("[::1]:443".into(), "/x".into()));
        assert!(split_url("http://a/b").is_err());
        assert!(split_url("https:///b").is_err());
    }
}
