//! A connection's paths, in path ID order.
//!
//! A connection has a handful of paths at most (the peers' `initial_max_path_id` bounds
//! them), and the send and receive paths look them up and walk them several times per
//! packet. A vector sorted by path ID does both with no tree to descend: a lookup scans a
//! few adjacent entries, and a walk is a slice iteration.

use super::paths::Path;
use crate::shared::PathId;

/// The open (and abandoned, until discarded) paths of a connection, keyed by path ID.
#[derive(Default)]
pub(super) struct PathMap {
    /// Sorted by [`Path::id`], each ID once.
    paths: Vec<Path>,
}

impl PathMap {
    /// The position of path `id`, or where it would go.
    fn position(&self, id: PathId) -> Result<usize, usize> {
        self.paths.binary_search_by_key(&id, |p| p.id)
    }

    /// Path `id`.
    pub(super) fn get(&self, id: &PathId) -> Option<&Path> {
        self.position(*id).ok().map(|i| &self.paths[i])
    }

    /// Path `id`, to change.
    pub(super) fn get_mut(&mut self, id: &PathId) -> Option<&mut Path> {
        self.position(*id).ok().map(|i| &mut self.paths[i])
    }

    /// Whether path `id` is here.
    pub(super) fn contains_key(&self, id: &PathId) -> bool {
        self.position(*id).is_ok()
    }

    /// Adds `path` under its ID, returning the path it replaces.
    pub(super) fn insert(&mut self, path: Path) -> Option<Path> {
        match self.position(path.id) {
            Ok(i) => Some(std::mem::replace(&mut self.paths[i], path)),
            Err(i) => {
                self.paths.insert(i, path);
                None
            }
        }
    }

    /// Takes path `id` out.
    pub(super) fn remove(&mut self, id: &PathId) -> Option<Path> {
        self.position(*id).ok().map(|i| self.paths.remove(i))
    }

    /// How many paths there are.
    pub(super) fn len(&self) -> usize {
        self.paths.len()
    }

    /// The paths in ID order.
    pub(super) fn values(&self) -> std::slice::Iter<'_, Path> {
        self.paths.iter()
    }

    /// The paths in ID order, to change.
    pub(super) fn values_mut(&mut self) -> std::slice::IterMut<'_, Path> {
        self.paths.iter_mut()
    }

    /// The path IDs in order.
    pub(super) fn keys(&self) -> impl Iterator<Item = &PathId> + '_ {
        self.paths.iter().map(|p| &p.id)
    }
}

/// Tests read a path as `paths[&id]`.
#[cfg(test)]
impl std::ops::Index<&PathId> for PathMap {
    type Output = Path;

    /// Path `id`; panics when there is none.
    fn index(&self, id: &PathId) -> &Path {
        self.get(id).expect("no path with this ID")
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::TransportConfig;

    /// A path with ID `id` and the default configuration.
    fn test_path(id: PathId) -> Path {
        let config = TransportConfig::default();
        let now = std::time::Instant::now();
        let cc = config
            .congestion_controller
            .build(now, id, config.initial_mtu);
        let addr = "127.0.0.1:4433".parse().expect("a socket address");
        Path::new(id, addr, addr, &config, cc, true)
    }

    proptest! {
        /// Inserts, replacements and removals in any order leave the same paths, in the
        /// same order, as a sorted map.
        #[test]
        fn a_path_map_holds_what_a_sorted_map_holds(
            ops in prop::collection::vec((any::<bool>(), 0u32..12), 0..60)
        ) {
            let mut map = PathMap::default();
            let mut model = BTreeMap::new();
            for (i, (insert, id)) in ops.into_iter().enumerate() {
                let id = PathId(id);
                if insert {
                    let mut path = test_path(id);
                    path.queued_bytes = i as u64;
                    let replaced = map.insert(path).map(|p| p.queued_bytes);
                    prop_assert_eq!(replaced, model.insert(id, i as u64));
                } else {
                    prop_assert_eq!(map.remove(&id).map(|p| p.queued_bytes), model.remove(&id));
                }
                prop_assert_eq!(map.len(), model.len());
                let ours: Vec<_> = map.values().map(|p| (p.id, p.queued_bytes)).collect();
                let theirs: Vec<_> = model.iter().map(|(id, b)| (*id, *b)).collect();
                prop_assert_eq!(ours, theirs);
                for probe in 0..12 {
                    let probe = PathId(probe);
                    prop_assert_eq!(map.contains_key(&probe), model.contains_key(&probe));
                    prop_assert_eq!(map.get(&probe).map(|p| p.queued_bytes), model.get(&probe).copied());
                }
            }
        }
    }
}
