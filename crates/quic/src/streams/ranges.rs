//! A set of `u64` offsets stored as disjoint half-open ranges.
//!
//! Used by the send buffer to track acknowledged and lost byte ranges. Every operation costs
//! `O(log n)` plus the number of ranges it merges or splits, so a buffer with 100k+ ranges
//! in flight never scans everything.

use std::collections::BTreeMap;
use std::ops::Range;

/// Disjoint, non-adjacent half-open ranges keyed by their start.
#[derive(Debug, Default, Clone, Eq, PartialEq)]
pub struct RangeSet {
    /// start -> end; no two entries overlap or touch.
    map: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// True if the set holds no offsets.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of disjoint ranges.
    #[cfg(test)]
    pub fn range_count(&self) -> usize {
        self.map.len()
    }

    /// The lowest range.
    pub fn first(&self) -> Option<Range<u64>> {
        self.map.first_key_value().map(|(&s, &e)| s..e)
    }

    /// Removes and returns the lowest range.
    pub fn pop_first(&mut self) -> Option<Range<u64>> {
        self.map.pop_first().map(|(s, e)| s..e)
    }

    /// True if `x` is in the set.
    #[cfg(test)]
    pub fn contains(&self, x: u64) -> bool {
        self.map
            .range(..=x)
            .next_back()
            .is_some_and(|(_, &e)| e > x)
    }

    /// Adds every offset of `r`, merging with overlapping or adjacent ranges.
    pub fn insert(&mut self, r: Range<u64>) {
        if r.start >= r.end {
            return;
        }
        let (mut start, mut end) = (r.start, r.end);
        if let Some((&ps, &pe)) = self.map.range(..=start).next_back() {
            if pe >= end {
                return; // already covered
            }
            if pe >= start {
                start = ps;
                self.map.remove(&ps);
            }
        }
        // Every range starting inside [start, end] merges into the new one.
        while let Some((&ns, &ne)) = self.map.range(start..=end).next() {
            self.map.remove(&ns);
            end = end.max(ne);
        }
        self.map.insert(start, end);
    }

    /// Removes every offset of `r`, splitting ranges that straddle its bounds.
    pub fn remove(&mut self, r: Range<u64>) {
        if r.start >= r.end {
            return;
        }
        if let Some((&ps, &pe)) = self.map.range(..r.start).next_back()
            && pe > r.start
        {
            self.map.insert(ps, r.start);
            if pe > r.end {
                self.map.insert(r.end, pe);
                return;
            }
        }
        while let Some((&ns, &ne)) = self.map.range(r.start..r.end).next() {
            self.map.remove(&ns);
            if ne > r.end {
                self.map.insert(r.end, ne);
                break;
            }
        }
    }

    /// The parts of `r` that are not in the set, in increasing order.
    pub fn gaps_in(&self, r: Range<u64>) -> Vec<Range<u64>> {
        let mut gaps = Vec::new();
        if r.start >= r.end {
            return gaps;
        }
        let mut pos = r.start;
        if let Some((_, &pe)) = self.map.range(..=r.start).next_back() {
            pos = pos.max(pe);
        }
        for (&s, &e) in self.map.range(r.start..r.end) {
            if s > pos {
                gaps.push(pos..s);
            }
            pos = pos.max(e);
            if pos >= r.end {
                break;
            }
        }
        if pos < r.end {
            gaps.push(pos..r.end);
        }
        gaps
    }

    /// Iterates over the ranges in increasing order.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.map.iter().map(|(&s, &e)| s..e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn insert_merges_adjacent_and_overlapping() {
        let mut s = RangeSet::new();
        s.insert(10..20);
        s.insert(30..40);
        s.insert(20..30);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![10..40]);
        s.insert(5..12);
        s.insert(39..50);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![5..50]);
        s.insert(15..25);
        assert_eq!(s.range_count(), 1);
    }

    #[test]
    fn remove_splits() {
        let mut s = RangeSet::new();
        s.insert(0..100);
        s.remove(10..20);
        s.remove(50..60);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0..10, 20..50, 60..100]);
        s.remove(5..70);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0..5, 70..100]);
        assert!(s.contains(4) && !s.contains(5) && s.contains(70) && !s.contains(100));
    }

    #[test]
    fn gaps() {
        let mut s = RangeSet::new();
        s.insert(10..20);
        s.insert(30..40);
        assert_eq!(s.gaps_in(0..50), vec![0..10, 20..30, 40..50]);
        assert_eq!(s.gaps_in(15..35), vec![20..30]);
        assert_eq!(s.gaps_in(12..18), Vec::<Range<u64>>::new());
    }

    proptest! {
        #[test]
        fn matches_a_bitmap(ops in prop::collection::vec((any::<bool>(), 0u64..200, 0u64..40), 0..60)) {
            let mut set = RangeSet::new();
            let mut bits = [false; 256];
            for (add, start, len) in ops {
                let r = start..start + len;
                if add { set.insert(r.clone()) } else { set.remove(r.clone()) }
                for b in &mut bits[r.start as usize..r.end as usize] { *b = add; }
            }
            for (i, b) in bits.iter().enumerate() {
                prop_assert_eq!(set.contains(i as u64), *b);
            }
            // Ranges are disjoint and non-adjacent.
            let v: Vec<_> = set.iter().collect();
            for w in v.windows(2) {
                prop_assert!(w[0].end < w[1].start);
            }
            let gaps = set.gaps_in(0..256);
            for g in gaps {
                for i in g { prop_assert!(!bits[i as usize]); }
            }
        }
    }
}
