//! A set of `u64` values stored as disjoint, non-adjacent half-open ranges.
//!
//! Used for received-packet-number tracking (from which ACK and PATH_ACK frames are built)
//! and for tracking which stream bytes have been acknowledged or received. Runs of
//! consecutive values cost one map entry, so the common case of mostly in-order arrival stays
//! small.

use std::collections::BTreeMap;
use std::collections::btree_map;
use std::fmt;
use std::ops::Range;

/// A set of `u64` values, stored as disjoint, non-adjacent half-open ranges.
///
/// Invariants: no stored range is empty, and any two stored ranges are separated by at least
/// one value that is not in the set. The value `u64::MAX` itself cannot be a member (ranges
/// are half-open), which is irrelevant for QUIC where packet numbers and offsets stay below
/// 2^62.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// start -> end (exclusive).
    map: BTreeMap<u64, u64>,
    /// Total number of values in the set.
    elts: u64,
}

impl RangeSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds every value of `range`; returns true if at least one of them was not yet present.
    pub fn insert(&mut self, range: Range<u64>) -> bool {
        if range.is_empty() {
            return false;
        }
        // Most insertions (packet numbers, in-order stream data) reach the last range or
        // lie beyond it: nothing else can touch them.
        if let Some(mut last) = self.map.last_entry()
            && range.start >= *last.key()
        {
            let last_end = *last.get();
            if range.end <= last_end {
                return false;
            }
            if range.start <= last_end {
                *last.get_mut() = range.end;
                self.elts += range.end - last_end;
            } else {
                self.map.insert(range.start, range.end);
                self.elts += range.end - range.start;
            }
            return true;
        }
        let mut start = range.start;
        let mut end = range.end;
        let mut removed = 0u64;

        // A range starting at or before `start` may contain, overlap or touch the new one.
        if let Some((&s, &e)) = self.map.range(..=start).next_back() {
            if e >= end {
                return false;
            }
            if e >= start {
                start = s;
                removed += e - s;
                self.map.remove(&s);
            }
        }
        // Ranges starting inside (or right after) the new one are absorbed. Because stored
        // ranges are separated by gaps, only the last absorbed one can extend past `end`.
        while let Some((&s, &e)) = self.map.range(start..=end).next() {
            removed += e - s;
            end = end.max(e);
            self.map.remove(&s);
        }
        self.map.insert(start, end);
        let added = (end - start) - removed;
        self.elts += added;
        added > 0
    }

    /// Adds one value; returns true if it was not yet present. `u64::MAX` cannot be stored
    /// and is ignored (returns false).
    pub fn insert_one(&mut self, value: u64) -> bool {
        self.insert(value..value.saturating_add(1))
    }

    /// Removes every value of `range` from the set.
    pub fn remove(&mut self, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        // A range starting before `range.start` may overlap it: keep its head, and its tail
        // if it extends past the removed range.
        if let Some((&s, &e)) = self.map.range(..range.start).next_back()
            && e > range.start
        {
            self.map.insert(s, range.start);
            self.elts -= e - range.start;
            if e > range.end {
                self.map.insert(range.end, e);
                self.elts += e - range.end;
            }
        }
        while let Some((&s, &e)) = self.map.range(range.clone()).next() {
            self.map.remove(&s);
            self.elts -= e - s;
            if e > range.end {
                self.map.insert(range.end, e);
                self.elts += e - range.end;
            }
        }
    }

    /// Whether `value` is in the set.
    pub fn contains(&self, value: u64) -> bool {
        self.map
            .range(..=value)
            .next_back()
            .is_some_and(|(_, &e)| value < e)
    }

    /// Whether every value of `range` is in the set (true for an empty range).
    pub fn contains_range(&self, range: Range<u64>) -> bool {
        if range.is_empty() {
            return true;
        }
        // Above every range (new data, the common case): no search needed.
        if self
            .map
            .last_key_value()
            .is_none_or(|(_, &e)| e <= range.start)
        {
            return false;
        }
        self.map
            .range(..=range.start)
            .next_back()
            .is_some_and(|(_, &e)| range.end <= e)
    }

    /// Whether the set holds no values.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of disjoint ranges (not values; see [`RangeSet::elts`]).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Number of values in the set (kept up to date, O(1)).
    pub fn elts(&self) -> u64 {
        self.elts
    }

    /// The smallest value in the set.
    pub fn min(&self) -> Option<u64> {
        self.map.first_key_value().map(|(&s, _)| s)
    }

    /// The largest value in the set.
    pub fn max(&self) -> Option<u64> {
        self.map.last_key_value().map(|(_, &e)| e - 1)
    }

    /// The lowest range, without removing it.
    pub fn first(&self) -> Option<Range<u64>> {
        self.map.first_key_value().map(|(&s, &e)| s..e)
    }

    /// The parts of `range` that are not in the set, in increasing order.
    pub fn gaps_in(&self, range: Range<u64>) -> Vec<Range<u64>> {
        let mut gaps = Vec::new();
        if range.start >= range.end {
            return gaps;
        }
        let mut pos = range.start;
        if let Some((_, &end)) = self.map.range(..=range.start).next_back() {
            pos = pos.max(end);
        }
        for (&s, &e) in self.map.range(range.start..range.end) {
            if s > pos {
                gaps.push(pos..s);
            }
            pos = pos.max(e);
            if pos >= range.end {
                break;
            }
        }
        if pos < range.end {
            gaps.push(pos..range.end);
        }
        gaps
    }

    /// Removes and returns the lowest range.
    pub fn pop_min(&mut self) -> Option<Range<u64>> {
        let (s, e) = self.map.pop_first()?;
        self.elts -= e - s;
        Some(s..e)
    }

    /// The ranges in ascending order; use `.rev()` for descending order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.map.iter())
    }
}

impl fmt::Debug for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a RangeSet {
    type Item = Range<u64>;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Iterator over the ranges of a [`RangeSet`], ascending (or descending with `.rev()`).
#[derive(Clone, Debug)]
pub struct Iter<'a>(btree_map::Iter<'a, u64, u64>);

impl Iterator for Iter<'_> {
    type Item = Range<u64>;
    fn next(&mut self) -> Option<Range<u64>> {
        self.0.next().map(|(&s, &e)| s..e)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Range<u64>> {
        self.0.next_back().map(|(&s, &e)| s..e)
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {

    #[test]
    fn gaps_and_first() {
        let mut set = RangeSet::new();
        set.insert(2..4);
        set.insert(6..8);
        assert_eq!(set.first(), Some(2..4));
        assert_eq!(set.gaps_in(0..10), vec![0..2, 4..6, 8..10]);
        assert_eq!(set.gaps_in(3..7), vec![4..6]);
        assert!(set.gaps_in(2..4).is_empty());
        assert!(set.gaps_in(5..5).is_empty());
    }

    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn ranges(set: &RangeSet) -> Vec<Range<u64>> {
        set.iter().collect()
    }

    #[test]
    fn merge_and_split() {
        let mut s = RangeSet::new();
        assert!(s.insert(5..8));
        assert!(s.insert(10..12));
        assert_eq!(ranges(&s), [5..8, 10..12]);
        // Adjacent on both sides: everything merges.
        assert!(s.insert(8..10));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![5..12]);
        assert!(!s.insert(6..9));
        assert!(!s.insert_one(11));
        assert_eq!(s.elts(), 7);
        s.remove(7..9);
        assert_eq!(ranges(&s), [5..7, 9..12]);
        assert_eq!(s.elts(), 5);
        assert_eq!((s.min(), s.max()), (Some(5), Some(11)));
        assert!(s.contains_range(9..12));
        assert!(!s.contains_range(6..10));
        assert_eq!(s.iter().next_back(), Some(9..12));
        assert_eq!(s.pop_min(), Some(5..7));
        assert_eq!(s.elts(), 3);
        assert!(!s.insert_one(u64::MAX));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Remove(u64, u64),
        PopMin,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..64, 0u64..12).prop_map(|(s, l)| Op::Insert(s, s + l)),
            2 => (0u64..64, 0u64..12).prop_map(|(s, l)| Op::Remove(s, s + l)),
            1 => Just(Op::PopMin),
        ]
    }

    proptest! {
        #[test]
        fn matches_btreeset_model(ops in proptest::collection::vec(op(), 0..60)) {
            let mut set = RangeSet::new();
            let mut model = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Insert(s, e) => {
                        let mut new = false;
                        for x in s..e {
                            new |= model.insert(x);
                        }
                        prop_assert_eq!(set.insert(s..e), new);
                    }
                    Op::Remove(s, e) => {
                        for x in s..e {
                            model.remove(&x);
                        }
                        set.remove(s..e);
                    }
                    Op::PopMin => {
                        let popped = set.pop_min();
                        match model.first().copied() {
                            None => prop_assert_eq!(popped, None),
                            Some(first) => {
                                let r = popped.unwrap();
                                prop_assert_eq!(r.start, first);
                                for x in r {
                                    prop_assert!(model.remove(&x));
                                }
                                // The popped range was maximal.
                                prop_assert!(set.min().is_none_or(|m| m > first));
                            }
                        }
                    }
                }
                // Invariants: non-empty, disjoint, non-adjacent, ascending.
                let rs = ranges(&set);
                for w in rs.windows(2) {
                    prop_assert!(w[0].end < w[1].start);
                }
                for r in &rs {
                    prop_assert!(r.start < r.end);
                }
                let flat: BTreeSet<u64> = rs.iter().flat_map(|r| r.clone()).collect();
                prop_assert_eq!(&flat, &model);
                prop_assert_eq!(set.elts(), model.len() as u64);
                prop_assert_eq!(set.len(), rs.len());
                prop_assert_eq!(set.is_empty(), model.is_empty());
                prop_assert_eq!(set.min(), model.first().copied());
                prop_assert_eq!(set.max(), model.last().copied());
                let rev: Vec<_> = set.iter().rev().collect();
                let mut fwd = rs.clone();
                fwd.reverse();
                prop_assert_eq!(rev, fwd);
                for x in 0..80 {
                    prop_assert_eq!(set.contains(x), model.contains(&x));
                }
                for s in 0..70 {
                    for l in 0..6 {
                        let expect = (s..s + l).all(|x| model.contains(&x));
                        prop_assert_eq!(set.contains_range(s..s + l), expect);
                    }
                }
            }
        }
    }
}
