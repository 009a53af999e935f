//! The link-event feed of each host: a Unix stream socket whose path the processes on the
//! host find in `POLYPATH_LINK_EVENTS` (`polypath_link::feed`). Every connected reader
//! gets each event of its host, as a JSON line, from the moment it connects; a reader that
//! stops reading and falls more than [`MAX_BACKLOG`] bytes behind is disconnected.

use std::io::{self, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use polypath_link::feed::FeedEvent;

use crate::error::EmuError;

/// Bytes a slow reader may fall behind before it is dropped.
pub const MAX_BACKLOG: usize = 4 << 20;

struct Reader {
    stream: UnixStream,
    pending: Vec<u8>,
}

/// One host's feed.
pub(crate) struct Feed {
    /// The socket's path.
    pub path: PathBuf,
    listener: UnixListener,
    readers: Vec<Reader>,
    /// Events written to at least one reader.
    pub delivered: u64,
    /// Events produced while no reader was connected.
    pub unheard: u64,
}

impl Feed {
    /// Listens on `path`.
    pub fn bind(path: &Path) -> Result<Feed, EmuError> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(|e| EmuError::io(path, e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| EmuError::io(path, e))?;
        Ok(Feed {
            path: path.to_path_buf(),
            listener,
            readers: Vec::new(),
            delivered: 0,
            unheard: 0,
        })
    }

    /// Accepts waiting readers and pushes what is pending.
    pub fn poll(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_ok() {
                        self.readers.push(Reader {
                            stream,
                            pending: Vec::new(),
                        });
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => break,
            }
        }
        self.readers.retain_mut(flush);
    }

    /// Sends `event` to every reader.
    pub fn send(&mut self, event: &FeedEvent) {
        self.poll();
        let Ok(line) = event.to_line() else {
            return;
        };
        if self.readers.is_empty() {
            self.unheard += 1;
            return;
        }
        self.delivered += 1;
        for r in &mut self.readers {
            r.pending.extend_from_slice(line.as_bytes());
        }
        self.readers
            .retain_mut(|r| flush(r) && r.pending.len() <= MAX_BACKLOG);
    }
}

/// Writes what `r` has pending; `false` when the reader is gone.
fn flush(r: &mut Reader) -> bool {
    while !r.pending.is_empty() {
        match r.stream.write(&r.pending) {
            Ok(0) => return false,
            Ok(n) => {
                r.pending.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

impl Drop for Feed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
