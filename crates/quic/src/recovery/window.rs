//! The packets a space still tracks, in a ring indexed by packet number.
//!
//! A space numbers its packets in increasing order and forgets each once it is
//! acknowledged or declared lost, mostly near the oldest end. A ring over the numbers from
//! the oldest tracked one to the newest makes every insertion, lookup and removal O(1),
//! with no node to rebalance and no entry to shift, where a sorted map costs a search
//! and a move of its neighbours per packet.

use std::collections::VecDeque;
use std::ops::RangeInclusive;

/// Entries keyed by packet number. Numbers never used (skipped, or gone since) are empty
/// slots; the slots at both ends are always occupied, so the window spans exactly the
/// oldest to the newest tracked number.
#[derive(Debug, Clone)]
pub(super) struct PacketWindow<E> {
    /// The packet number of `slots[0]`.
    base: u64,
    slots: VecDeque<Option<E>>,
    /// The number of occupied slots.
    len: usize,
}

impl<E> Default for PacketWindow<E> {
    fn default() -> Self {
        PacketWindow {
            base: 0,
            slots: VecDeque::new(),
            len: 0,
        }
    }
}

impl<E> PacketWindow<E> {
    /// The number of tracked packets.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The slot of `pn`, if it lies in the window.
    fn index(&self, pn: u64) -> Option<usize> {
        let i = usize::try_from(pn.checked_sub(self.base)?).ok()?;
        (i < self.slots.len()).then_some(i)
    }

    /// The oldest tracked packet number.
    pub(super) fn first_pn(&self) -> Option<u64> {
        (self.len > 0).then_some(self.base)
    }

    /// The oldest tracked entry.
    pub(super) fn first_mut(&mut self) -> Option<&mut E> {
        self.slots.front_mut()?.as_mut()
    }

    /// Tracks `entry` under `pn`, returning the entry it replaces, if any. Numbers above
    /// the newest leave the ones in between empty.
    pub(super) fn insert(&mut self, pn: u64, entry: E) -> Option<E> {
        if self.len == 0 {
            self.slots.clear();
            self.base = pn;
        }
        while pn < self.base {
            self.slots.push_front(None);
            self.base -= 1;
        }
        let i = usize::try_from(pn - self.base).unwrap_or(usize::MAX);
        while self.slots.len() <= i {
            self.slots.push_back(None);
        }
        let old = self.slots[i].replace(entry);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Forgets `pn`, returning its entry.
    pub(super) fn remove(&mut self, pn: u64) -> Option<E> {
        let i = self.index(pn)?;
        let entry = self.slots[i].take()?;
        self.len -= 1;
        self.trim();
        Some(entry)
    }

    /// Drops the empty slots at both ends.
    fn trim(&mut self) {
        while self.slots.front().is_some_and(Option::is_none) {
            self.slots.pop_front();
            self.base += 1;
        }
        while self.slots.back().is_some_and(Option::is_none) {
            self.slots.pop_back();
        }
    }

    /// Forgets every tracked packet in `range`, handing each to `f` in ascending order.
    pub(super) fn remove_range(&mut self, range: &RangeInclusive<u64>, mut f: impl FnMut(u64, E)) {
        let Some(last) = self.slots.len().checked_sub(1) else {
            return;
        };
        let start = range.start().saturating_sub(self.base);
        let Some(end) = range.end().checked_sub(self.base) else {
            return;
        };
        let end = usize::try_from(end).unwrap_or(usize::MAX).min(last);
        let Ok(start) = usize::try_from(start) else {
            return;
        };
        for i in start..=end {
            if let Some(entry) = self.slots[i].take() {
                self.len -= 1;
                f(self.base + i as u64, entry);
            }
        }
        self.trim();
    }

    /// The first tracked entry numbered `pn` or above.
    pub(super) fn first_from_mut(&mut self, pn: u64) -> Option<&mut E> {
        let start = usize::try_from(pn.saturating_sub(self.base)).ok()?;
        self.slots
            .range_mut(start.min(self.slots.len())..)
            .find_map(Option::as_mut)
    }

    /// The tracked entries in ascending packet-number order.
    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, &E)> {
        let base = self.base;
        self.slots
            .iter()
            .enumerate()
            .filter_map(move |(i, e)| Some((base + i as u64, e.as_ref()?)))
    }

    /// The tracked entries in ascending packet-number order, mutable.
    pub(super) fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = (u64, &mut E)> {
        let base = self.base;
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(move |(i, e)| Some((base + i as u64, e.as_mut()?)))
    }

    /// The tracked entries numbered `last` or below, ascending, mutable.
    pub(super) fn up_to_mut(&mut self, last: u64) -> impl Iterator<Item = (u64, &mut E)> {
        let count = last
            .checked_sub(self.base)
            .and_then(|n| usize::try_from(n).ok())
            .map_or(0, |n| n.saturating_add(1))
            .min(self.slots.len());
        let base = self.base;
        self.slots
            .range_mut(..count)
            .enumerate()
            .filter_map(move |(i, e)| Some((base + i as u64, e.as_mut()?)))
    }

    /// Forgets everything, returning the tracked entries in ascending order.
    pub(super) fn take_all(&mut self) -> Vec<(u64, E)> {
        let base = self.base;
        let slots = std::mem::take(&mut self.slots);
        self.len = 0;
        slots
            .into_iter()
            .enumerate()
            .filter_map(|(i, e)| Some((base + i as u64, e?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Random insertions (increasing numbers with gaps), removals, range removals and
        /// marks give the same entries, in the same order, as a sorted map.
        #[test]
        fn matches_a_sorted_map(ops in proptest::collection::vec((0u8..5, 0u64..6, 0u64..12), 0..120)) {
            let mut window = PacketWindow::default();
            let mut model: BTreeMap<u64, u64> = BTreeMap::new();
            let mut next = 0u64;
            for (op, a, b) in ops {
                match op {
                    0 | 1 => {
                        next += a;
                        prop_assert_eq!(window.insert(next, next * 10), None);
                        model.insert(next, next * 10);
                        next += 1;
                    }
                    2 => {
                        let pn = next.saturating_sub(1 + b);
                        prop_assert_eq!(window.remove(pn), model.remove(&pn));
                    }
                    3 => {
                        let end = next.saturating_sub(1 + a);
                        let range = end.saturating_sub(b)..=end;
                        let mut got = Vec::new();
                        window.remove_range(&range, |pn, e| got.push((pn, e)));
                        let want: Vec<(u64, u64)> = model.range(range.clone()).map(|(k, v)| (*k, *v)).collect();
                        for (pn, _) in &want {
                            model.remove(pn);
                        }
                        prop_assert_eq!(got, want);
                    }
                    _ => {
                        let pn = next.saturating_sub(b);
                        let got = window.first_from_mut(pn).map(|e| *e);
                        prop_assert_eq!(got, model.range(pn..).next().map(|(_, v)| *v));
                        let up: Vec<u64> = window.up_to_mut(pn).map(|(k, _)| k).collect();
                        let want: Vec<u64> = model.range(..=pn).map(|(k, _)| *k).collect();
                        prop_assert_eq!(up, want);
                    }
                }
                prop_assert_eq!(window.len(), model.len());
                prop_assert_eq!(window.first_pn(), model.keys().next().copied());
                let all: Vec<(u64, u64)> = window.iter().map(|(k, v)| (k, *v)).collect();
                let want: Vec<(u64, u64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(all, want);
            }
            let rest = window.take_all();
            prop_assert_eq!(rest, model.into_iter().collect::<Vec<_>>());
            prop_assert_eq!(window.len(), 0);
        }
    }
}
