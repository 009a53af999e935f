//! Reading a host's link-event feed: the Unix stream socket on which an emulator (or a
//! modem daemon) serves link-layer events as JSON lines, one
//! [`FeedEvent`](polypath_link::feed::FeedEvent) per line (see [`polypath_link::feed`]).
//!
//! [`LinkFeed::connect`] connects to the socket, waiting a little for it to appear (the
//! process may start before the emulator listens), and [`LinkFeed::next_event`] yields the
//! events one by one. Give each to [`crate::Connection::handle_link_event`].
//!
//! A malformed line never stops the feed: it is logged (`tracing::warn!`, with its line
//! number and the offending field) and skipped. The end of the stream ends the feed.
//!
//! ```no_run
//! # async fn demo(conn: polypath_io::Connection) -> Result<(), polypath_io::link_feed::FeedError> {
//! use polypath_io::link_feed::LinkFeed;
//! let mut feed = LinkFeed::connect("/run/polypath/links.sock").await?;
//! while let Some(ev) = feed.next_event().await {
//!     conn.handle_link_event(&ev.event, ev.local);
//! }
//! # Ok(()) }
//! ```

use polypath_link::feed::FeedEvent;
use polypath_link::jsonl::ReadError;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

/// How long [`LinkFeed::connect`] waits for the socket to exist (or to accept) before it
/// gives up.
pub const CONNECT_WAIT: Duration = Duration::from_secs(5);
/// Pause between two connection attempts while waiting for the socket.
const RETRY_INTERVAL: Duration = Duration::from_millis(50);
/// Longest line accepted; longer lines are skipped as malformed.
pub const MAX_LINE_LEN: usize = 1 << 20;

/// Why the feed could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The socket did not appear, or did not accept, within the wait.
    #[error("link-event feed {path}: cannot connect within {waited:?}: {error}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// How long we tried.
        waited: Duration,
        /// The last error.
        error: io::Error,
    },
}

/// A stream of link events read from a feed.
pub struct LinkFeed {
    reader: Pin<Box<dyn AsyncBufRead + Send>>,
    /// What the feed reads from, for logs.
    source: String,
    /// Lines read so far (the number of the last line).
    line: usize,
    /// Malformed lines skipped so far.
    skipped: usize,
    ended: bool,
    buf: Vec<u8>,
}

impl std::fmt::Debug for LinkFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkFeed")
            .field("source", &self.source)
            .field("line", &self.line)
            .field("skipped", &self.skipped)
            .field("ended", &self.ended)
            .finish()
    }
}

impl LinkFeed {
    /// Connects to the feed socket at `path`, retrying for up to [`CONNECT_WAIT`] while it
    /// does not exist yet or refuses connections.
    pub async fn connect(path: impl AsRef<Path>) -> Result<LinkFeed, FeedError> {
        Self::connect_within(path, CONNECT_WAIT).await
    }

    /// Like [`LinkFeed::connect`] with a wait of one's choice.
    pub async fn connect_within(
        path: impl AsRef<Path>,
        wait: Duration,
    ) -> Result<LinkFeed, FeedError> {
        let path = path.as_ref();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::net::UnixStream::connect(path).await {
                Ok(stream) => {
                    tracing::debug!(path = %path.display(), "link-event feed connected");
                    return Ok(LinkFeed::new(stream, path.display().to_string()));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                    ) && tokio::time::Instant::now() + RETRY_INTERVAL <= deadline =>
                {
                    tokio::time::sleep(RETRY_INTERVAL).await;
                }
                Err(error) => {
                    return Err(FeedError::Connect {
                        path: path.to_path_buf(),
                        waited: wait,
                        error,
                    });
                }
            }
        }
    }

    /// A feed read from any byte stream (a socket, a file, a test's buffer); `source`
    /// names it in logs.
    pub fn new(reader: impl AsyncRead + Send + 'static, source: impl Into<String>) -> Self {
        LinkFeed {
            reader: Box::pin(BufReader::new(reader)),
            source: source.into(),
            line: 0,
            skipped: 0,
            ended: false,
            buf: Vec::new(),
        }
    }

    /// Lines read so far.
    pub fn lines_read(&self) -> usize {
        self.line
    }

    /// Malformed lines skipped so far (by [`LinkFeed::next_event`]).
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// The next event; malformed lines are logged and skipped. `None` at the end of the
    /// stream (or when reading fails, which is logged too).
    pub async fn next_event(&mut self) -> Option<FeedEvent> {
        loop {
            match self.next_line().await? {
                Ok(event) => return Some(event),
                Err(ReadError::Parse {
                    line,
                    field,
                    message,
                }) => {
                    self.skipped += 1;
                    // `.` (or nothing): the line as a whole, e.g. not JSON at all.
                    let field = if field == "." { "" } else { field.as_str() };
                    tracing::warn!(
                        feed = %self.source,
                        line,
                        field = %field,
                        "malformed link-event feed line skipped: {message}"
                    );
                }
                Err(ReadError::Io { line, error }) => {
                    tracing::warn!(feed = %self.source, line, %error, "link-event feed read failed; feed ended");
                    self.ended = true;
                    return None;
                }
            }
        }
    }

    /// The next non-blank line, parsed: `None` at the end of the stream, an error naming
    /// the line (and field) for a malformed one. Reading can go on after a parse error; an
    /// [`ReadError::Io`] ends the feed.
    pub async fn next_line(&mut self) -> Option<Result<FeedEvent, ReadError>> {
        while !self.ended {
            self.buf.clear();
            let read = {
                let mut limited = (&mut self.reader).take(MAX_LINE_LEN as u64 + 1);
                limited.read_until(b'\n', &mut self.buf).await
            };
            match read {
                Ok(0) => {
                    self.ended = true;
                    return None;
                }
                Ok(_) => {}
                Err(error) => {
                    self.ended = true;
                    return Some(Err(ReadError::Io {
                        line: self.line + 1,
                        error,
                    }));
                }
            }
            self.line += 1;
            let line = self.line;
            if !self.buf.ends_with(b"\n") && self.buf.len() > MAX_LINE_LEN {
                // Too long: skip the rest of it.
                if let Err(error) = self.discard_line().await {
                    self.ended = true;
                    return Some(Err(ReadError::Io { line, error }));
                }
                return Some(Err(ReadError::Parse {
                    line,
                    field: String::new(),
                    message: format!("line longer than {MAX_LINE_LEN} bytes"),
                }));
            }
            let Ok(text) = std::str::from_utf8(&self.buf) else {
                return Some(Err(ReadError::Parse {
                    line,
                    field: String::new(),
                    message: "line is not UTF-8".into(),
                }));
            };
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            return Some(FeedEvent::parse(text, line));
        }
        None
    }

    /// Reads and drops bytes up to and including the next newline (or the end).
    async fn discard_line(&mut self) -> io::Result<()> {
        loop {
            let chunk = self.reader.fill_buf().await?;
            if chunk.is_empty() {
                return Ok(());
            }
            match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.reader.as_mut().consume(i + 1);
                    return Ok(());
                }
                None => {
                    let n = chunk.len();
                    self.reader.as_mut().consume(n);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polypath_link::{CellId, LinkEvent, LinkEventKind, MeasEvent};

    fn a4(local: &str) -> FeedEvent {
        FeedEvent {
            event: LinkEvent::new(
                7,
                0,
                1,
                LinkEventKind::RrcEventEntered {
                    meas_id: 1,
                    event: MeasEvent::A4,
                    serving: CellId(1),
                    cell: Some(CellId(2)),
                },
            ),
            local: Some(local.parse().unwrap()),
        }
    }

    #[tokio::test]
    async fn lines_in_events_out_and_bad_lines_are_reported_with_their_number() {
        let good = a4("10.0.0.2");
        let mut text = good.to_line().unwrap();
        text.push('\n'); // a blank line: skipped, but counted
        text.push_str(
            "{\"t_ns\":1,\"ue\":0,\"iface\":\"zero\",\"event\":{\"link_up\":{\"cell\":2}}}\n",
        );
        text.push_str("not json at all\n");
        text.push_str(&good.to_line().unwrap());
        // The last line without its newline still counts.
        text.push_str(good.to_line().unwrap().trim_end());
        let bytes = text.into_bytes();

        let mut raw = LinkFeed::new(std::io::Cursor::new(bytes.clone()), "test");
        assert_eq!(raw.next_line().await.unwrap().unwrap(), good);
        match raw.next_line().await.unwrap() {
            Err(ReadError::Parse { line, field, .. }) => {
                assert_eq!(line, 3);
                assert_eq!(field, "iface");
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
        let e = raw.next_line().await.unwrap().unwrap_err();
        assert_eq!(e.line(), 4);
        assert_eq!(raw.next_line().await.unwrap().unwrap(), good);
        assert_eq!(raw.next_line().await.unwrap().unwrap(), good);
        assert!(raw.next_line().await.is_none());
        assert!(raw.next_line().await.is_none());

        let mut feed = LinkFeed::new(std::io::Cursor::new(bytes), "test");
        let mut events = Vec::new();
        while let Some(e) = feed.next_event().await {
            events.push(e);
        }
        assert_eq!(events, vec![good.clone(), good.clone(), good]);
        assert_eq!(feed.skipped(), 2);
        assert_eq!(feed.lines_read(), 6);
    }

    #[tokio::test]
    async fn overlong_and_non_utf8_lines_are_skipped() {
        let good = a4("10.0.0.2");
        let mut bytes = vec![b'x'; MAX_LINE_LEN + 10];
        bytes.push(b'\n');
        bytes.extend_from_slice(&[0xff, 0xfe, b'\n']);
        bytes.extend_from_slice(good.to_line().unwrap().as_bytes());
        let mut feed = LinkFeed::new(std::io::Cursor::new(bytes), "test");
        assert_eq!(feed.next_event().await, Some(good));
        assert_eq!(feed.skipped(), 2);
        assert_eq!(feed.lines_read(), 3);
        assert_eq!(feed.next_event().await, None);
    }

    #[tokio::test]
    async fn a_missing_socket_is_a_clear_error_after_the_wait() {
        let path =
            std::env::temp_dir().join(format!("polypath-no-such-feed-{}.sock", std::process::id()));
        let e = LinkFeed::connect_within(&path, Duration::from_millis(120))
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
    }

    #[tokio::test]
    async fn connects_to_a_socket_that_appears_later() {
        let dir = std::env::temp_dir().join(format!("polypath-feed-late-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("feed.sock");
        let good = a4("10.0.0.2");
        let line = good.to_line().unwrap();
        let listen_path = path.clone();
        let server = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let listener = tokio::net::UnixListener::bind(&listen_path).unwrap();
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::io::AsyncWriteExt::write_all(&mut stream, line.as_bytes())
                .await
                .unwrap();
        });
        let mut feed = LinkFeed::connect_within(&path, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(feed.next_event().await, Some(good));
        assert_eq!(feed.next_event().await, None);
        server.await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
