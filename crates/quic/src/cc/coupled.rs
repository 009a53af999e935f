//! Building blocks shared by the coupled multipath controllers ([`super::Lia`] and
//! [`super::Olia`]): the per-connection registry of subflows that their factories share
//! between the controllers of one connection. Their per-path state machine (slow start,
//! recovery periods, halving, persistent congestion, undo) is NewReno's own
//! ([`super::new_reno::RenoCore`]); only the congestion-avoidance increase differs.

use crate::shared::PathId;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The smallest RTT used in the coupled formulas, so that a zero RTT (possible in
/// simulations) cannot divide by zero.
const MIN_RTT_SECS: f64 = 1e-6;

/// A path's RTT in seconds as used by the coupled formulas: the smoothed RTT, at least
/// one microsecond.
pub(super) fn rtt_secs(smoothed: Duration) -> f64 {
    smoothed.as_secs_f64().max(MIN_RTT_SECS)
}

/// The subflows of one connection, keyed by path and by a per-registration serial number
/// (so that a path whose controller is rebuilt, or two live controllers for one path ID,
/// never remove each other's entry). A `BTreeMap` keeps every iteration in path order, so
/// floating-point sums are computed in the same order on every run.
#[derive(Debug)]
pub(super) struct Registry<E> {
    entries: BTreeMap<(PathId, u64), E>,
    next_serial: u64,
}

impl<E> Default for Registry<E> {
    fn default() -> Self {
        Registry {
            entries: BTreeMap::new(),
            next_serial: 0,
        }
    }
}

impl<E> Registry<E> {
    /// Adds a subflow; returns its key.
    pub(super) fn register(&mut self, path: PathId, entry: E) -> (PathId, u64) {
        let key = (path, self.next_serial);
        self.next_serial += 1;
        self.entries.insert(key, entry);
        key
    }

    /// Removes a subflow (its path was closed).
    pub(super) fn remove(&mut self, key: (PathId, u64)) {
        self.entries.remove(&key);
    }

    /// The entry of a subflow.
    pub(super) fn get_mut(&mut self, key: (PathId, u64)) -> Option<&mut E> {
        self.entries.get_mut(&key)
    }

    /// All subflows in path order.
    pub(super) fn values(&self) -> impl Iterator<Item = &E> {
        self.entries.values()
    }

    /// All subflows in path order, with their keys.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&(PathId, u64), &E)> {
        self.entries.iter()
    }

    /// The number of subflows.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Locks shared coupled state. A poisoned lock (a panic in another thread while it held
/// the lock) is recovered: the registry holds plain numbers that are valid at any point.
pub(super) fn lock<T>(shared: &Arc<Mutex<T>>) -> MutexGuard<'_, T> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
