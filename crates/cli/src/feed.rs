//! `--link-events SOCKET`: the host's link-event feed, applied to the connections of
//! `polypath client` and `polypath server`.
//!
//! The feed (see [`polypath_link::feed`]) is read in a task of its own from the moment the
//! command starts. Each event goes to every connection attached at that moment
//! ([`LinkEvents::attach`]) through [`polypath_io::Connection::handle_link_event`], as the
//! simulator applies its radio model's events: link hints, scheduler and path manager.
//! Events that arrive while no connection is attached are dropped, except the latest
//! predicted throughput of each local address, which a connection gets when it is attached.

use clap::Args;
use polypath_io::Connection;
use polypath_io::link_feed::LinkFeed;
use polypath_link::LinkEventKind;
use polypath_link::feed::{FEED_ENV, FeedEvent};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The `--link-events` option.
#[derive(Debug, Args, Clone)]
pub struct FeedArgs {
    /// Unix stream socket serving this host's link-layer events as JSON lines (RRC events,
    /// handover, link up/down, predicted throughput, ...), applied to the connection(s) as
    /// the simulator applies them (link hints, scheduler, path manager). Default: the
    /// socket named by the environment variable POLYPATH_LINK_EVENTS, if set and not
    /// empty. Events arriving while there is no connection are dropped (the latest
    /// predicted throughput per local address is kept for the next connection).
    #[arg(long = "link-events", value_name = "SOCKET")]
    pub link_events: Option<PathBuf>,
}

impl FeedArgs {
    /// The socket to read: `--link-events`, else `POLYPATH_LINK_EVENTS`.
    pub fn socket(&self) -> Option<PathBuf> {
        self.link_events.clone().or_else(|| {
            std::env::var_os(FEED_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
    }
}

/// What the feed did, for summaries.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct FeedCounts {
    /// Events read from the feed.
    pub events: u64,
    /// Events given to at least one connection.
    pub applied: u64,
    /// Events that found no connection (dropped).
    pub dropped: u64,
    /// Malformed lines skipped.
    pub skipped_lines: u64,
}

#[derive(Debug, Default)]
struct Hub {
    next_id: u64,
    conns: Vec<(u64, Connection)>,
    /// The latest predicted-throughput event per local address.
    predictions: BTreeMap<Option<IpAddr>, FeedEvent>,
    counts: FeedCounts,
}

fn lock(hub: &Mutex<Hub>) -> MutexGuard<'_, Hub> {
    hub.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running feed: the reader task and the connections it feeds. Dropping it stops the
/// task.
#[derive(Debug)]
pub struct LinkEvents {
    hub: Arc<Mutex<Hub>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LinkEvents {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A connection attached to the feed; detached when dropped (keep it no longer than the
/// connection, since it holds a handle on it).
#[derive(Debug)]
pub struct Attached {
    hub: Arc<Mutex<Hub>>,
    id: u64,
}

impl Drop for Attached {
    fn drop(&mut self) {
        let conn = {
            let mut hub = lock(&self.hub);
            let pos = hub.conns.iter().position(|(id, _)| *id == self.id);
            pos.map(|i| hub.conns.remove(i))
        };
        // Dropped outside the hub's lock: the last handle closes the connection.
        drop(conn);
    }
}

impl LinkEvents {
    /// Connects to the feed of `args` (waiting up to
    /// [`polypath_io::link_feed::CONNECT_WAIT`] for the socket) and starts reading it;
    /// `None` when no feed is configured. Call within the Tokio runtime.
    pub async fn start(args: &FeedArgs) -> Result<Option<LinkEvents>, String> {
        let Some(path) = args.socket() else {
            return Ok(None);
        };
        let feed = LinkFeed::connect(&path)
            .await
            .map_err(|e| format!("--link-events: {e}"))?;
        let hub = Arc::new(Mutex::new(Hub::default()));
        let task = tokio::spawn(read_feed(feed, hub.clone()));
        Ok(Some(LinkEvents { hub, task }))
    }

    /// Applies the feed's events to `conn` from now on (first the latest throughput
    /// predictions, if any arrived before).
    pub fn attach(&self, conn: &Connection) -> Attached {
        let (id, predictions) = {
            let mut hub = lock(&self.hub);
            let id = hub.next_id;
            hub.next_id += 1;
            hub.conns.push((id, conn.clone()));
            let predictions: Vec<FeedEvent> = hub.predictions.values().cloned().collect();
            (id, predictions)
        };
        for ev in predictions {
            let _ = conn.handle_link_event(&ev.event, ev.local);
        }
        Attached {
            hub: self.hub.clone(),
            id,
        }
    }

    /// What the feed did so far.
    pub fn counts(&self) -> FeedCounts {
        lock(&self.hub).counts
    }
}

/// Reads the feed to its end, handing each event to the attached connections.
async fn read_feed(mut feed: LinkFeed, hub: Arc<Mutex<Hub>>) {
    while let Some(ev) = feed.next_event().await {
        let conns: Vec<Connection> = {
            let mut hub = lock(&hub);
            hub.counts.events += 1;
            hub.counts.skipped_lines = feed.skipped() as u64;
            if matches!(ev.event.event, LinkEventKind::PredictedThroughput { .. }) {
                hub.predictions.insert(ev.local, ev.clone());
            }
            if hub.conns.is_empty() {
                hub.counts.dropped += 1;
            } else {
                hub.counts.applied += 1;
            }
            hub.conns.iter().map(|(_, c)| c.clone()).collect()
        };
        if conns.is_empty() {
            tracing::debug!(event = ev.event.event.name(), local = ?ev.local,
                            "link event before any connection: dropped");
        }
        for conn in conns {
            if let Err(e) = conn.handle_link_event(&ev.event, ev.local) {
                tracing::debug!(error = %e, "link event for a closed connection");
            }
        }
    }
    let mut hub = lock(&hub);
    hub.counts.skipped_lines = feed.skipped() as u64;
    tracing::info!(lines = feed.lines_read(), "link-event feed ended");
}
