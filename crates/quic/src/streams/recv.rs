//! Reassembly of received stream (or CRYPTO) data into an ordered byte stream.

use bytes::Bytes;
use std::collections::BTreeMap;

/// Received pieces shorter than this are copied into their own allocation instead of
/// keeping a slice of the (much larger) packet buffer alive: this bounds how much memory a
/// peer can pin by sending many tiny out-of-order frames to about `datagram size / 256`
/// times the flow control window.
const COPY_BELOW: usize = 256;

/// A copied small piece is appended to the segment that ends where it starts (and the
/// segment that starts where it ends is appended to it) while the result stays under this
/// size, so that a peer sending many small frames in order, with a few holes, leaves
/// about one segment per hole rather than one per frame.
const MERGE_BELOW: usize = 4096;

/// Buffers out-of-order, overlapping and duplicated data and serves it in order.
///
/// Pieces are kept as zero-copy [`Bytes`] slices of what was inserted; overlapping parts
/// are stored once (the copy received first wins, as data at an offset must not change).
#[derive(Debug, Default)]
pub struct Assembler {
    /// Disjoint pieces at or above `read`, keyed by offset.
    segments: BTreeMap<u64, Bytes>,
    /// Bytes below this offset were handed to the reader (or skipped).
    read: u64,
    /// Every byte below this offset has been received.
    contiguous: u64,
    /// Bytes held in `segments`.
    buffered: u64,
}

impl Assembler {
    /// An empty assembler at offset 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Offset of the next byte the reader will get.
    pub fn read_offset(&self) -> u64 {
        self.read
    }

    /// Every byte below this offset has been received.
    pub fn contiguous_end(&self) -> u64 {
        self.contiguous
    }

    /// Bytes readable right now, in order.
    pub fn readable(&self) -> u64 {
        self.contiguous - self.read
    }

    /// Bytes held in memory.
    pub fn buffered(&self) -> u64 {
        self.buffered
    }

    /// Adds `data` received at `offset`. Parts already received or read are dropped.
    pub fn insert(&mut self, offset: u64, data: Bytes) {
        let end = offset + data.len() as u64;
        let mut pos = offset.max(self.contiguous);
        if pos >= end {
            return;
        }
        // Data above everything held (the common case, in order or past a gap): nothing
        // to overlap, and only a piece that starts at `contiguous` extends it.
        if self
            .segments
            .last_key_value()
            .is_none_or(|(&s, b)| s + b.len() as u64 <= pos)
        {
            let piece = if pos == offset {
                data
            } else {
                data.slice((pos - offset) as usize..)
            };
            self.put(pos, piece);
            if pos == self.contiguous {
                self.contiguous = end;
            }
            return;
        }
        if let Some((&s, b)) = self.segments.range(..pos).next_back() {
            pos = pos.max(s + b.len() as u64);
        }
        while pos < end {
            let next = self
                .segments
                .range(pos..end)
                .next()
                .map(|(&s, b)| (s, s + b.len() as u64));
            let piece_end = next.map_or(end, |(s, _)| s);
            if piece_end > pos {
                let piece = data.slice((pos - offset) as usize..(piece_end - offset) as usize);
                self.put(pos, piece);
            }
            match next {
                Some((_, e)) => pos = e,
                None => break,
            }
        }
        // Merged pieces may start below `contiguous`: extend it through the segment that
        // holds it.
        while let Some((&s, b)) = self.segments.range(..=self.contiguous).next_back() {
            let e = s + b.len() as u64;
            if e <= self.contiguous {
                break;
            }
            self.contiguous = e;
        }
    }

    fn put(&mut self, offset: u64, piece: Bytes) {
        self.buffered += piece.len() as u64;
        if piece.len() >= COPY_BELOW {
            self.segments.insert(offset, piece);
            return;
        }
        // What is merged is decided first, so that the copy is allocated once.
        let prev = self
            .segments
            .range(..offset)
            .next_back()
            .filter(|(s, prev)| {
                **s + prev.len() as u64 == offset && prev.len() + piece.len() < MERGE_BELOW
            })
            .map(|(s, prev)| (*s, prev.len()));
        let prev_len = prev.map_or(0, |(_, len)| len);
        let end = offset + piece.len() as u64;
        let next_len = self
            .segments
            .get(&end)
            .map(Bytes::len)
            .filter(|len| prev_len + piece.len() + len < MERGE_BELOW);
        let mut merged = Vec::with_capacity(prev_len + piece.len() + next_len.unwrap_or(0));
        let mut start = offset;
        if let Some((s, _)) = prev
            && let Some(prev) = self.segments.remove(&s)
        {
            merged.extend_from_slice(&prev);
            start = s;
        }
        merged.extend_from_slice(&piece);
        if next_len.is_some()
            && let Some(next) = self.segments.remove(&end)
        {
            merged.extend_from_slice(&next);
        }
        self.segments.insert(start, Bytes::from(merged));
    }

    /// Number of disjoint pieces held (each costs a map entry and an allocation besides
    /// its bytes): a measure of how fragmented the received data is.
    pub fn segments(&self) -> usize {
        self.segments.len()
    }

    /// The next in-order bytes, at most `max_len` (at least 1) of them, without copying.
    pub fn read(&mut self, max_len: usize) -> Option<Bytes> {
        if self.read == self.contiguous {
            return None;
        }
        let mut entry = self.segments.first_entry()?;
        if *entry.key() != self.read {
            return None; // unreachable while the invariants hold
        }
        let max_len = max_len.max(1);
        let b = if entry.get().len() > max_len {
            let rest = entry.get_mut().split_off(max_len);
            let head = entry.remove();
            self.segments.insert(self.read + max_len as u64, rest);
            head
        } else {
            entry.remove()
        };
        self.read += b.len() as u64;
        self.buffered -= b.len() as u64;
        Some(b)
    }

    /// Copies in-order bytes into `buf`; returns how many.
    pub fn read_into(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(b) = self.read(buf.len() - n) else {
                break;
            };
            buf[n..n + b.len()].copy_from_slice(&b);
            n += b.len();
        }
        n
    }

    /// Drops the in-order bytes as if read; returns how many.
    pub fn skip_readable(&mut self) -> u64 {
        let n = self.readable();
        while self.read(usize::MAX).is_some() {}
        n
    }

    /// Drops every buffered byte; offsets are kept.
    pub fn clear(&mut self) {
        self.segments.clear();
        self.buffered = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(range: std::ops::Range<u8>) -> Bytes {
        Bytes::from(range.collect::<Vec<u8>>())
    }

    #[test]
    fn out_of_order_and_overlapping() {
        let mut a = Assembler::new();
        a.insert(10, bytes(10..20));
        assert_eq!(a.readable(), 0);
        assert!(a.read(100).is_none());
        a.insert(5, bytes(5..15));
        a.insert(0, bytes(0..3));
        assert_eq!(a.readable(), 3);
        a.insert(0, bytes(0..8));
        assert_eq!(a.readable(), 20);
        let mut out = [0u8; 32];
        assert_eq!(a.read_into(&mut out), 20);
        assert_eq!(&out[..20], &bytes(0..20)[..]);
        assert_eq!(a.buffered(), 0);
        // Duplicates of consumed data are ignored.
        a.insert(0, bytes(0..20));
        assert_eq!(a.readable(), 0);
        assert_eq!(a.buffered(), 0);
    }

    #[test]
    fn first_copy_wins() {
        let mut a = Assembler::new();
        a.insert(0, Bytes::from_static(b"aaaa"));
        a.insert(2, Bytes::from_static(b"bbbb"));
        let mut out = [0u8; 8];
        assert_eq!(a.read_into(&mut out), 6);
        assert_eq!(&out[..6], b"aaaabb");
    }

    #[test]
    fn small_adjacent_pieces_are_merged() {
        let mut a = Assembler::new();
        // A hole at 0, then 1 000 one-byte pieces in order, then every other byte.
        for i in 1..1001u64 {
            a.insert(i, Bytes::from(vec![i as u8]));
        }
        assert_eq!(a.segments(), 1, "in-order tiny pieces become one segment");
        for i in 0..100u64 {
            a.insert(2000 + 2 * i, Bytes::from_static(b"x"));
        }
        assert_eq!(a.segments(), 101, "one segment per hole");
        a.insert(0, Bytes::from_static(b"\0"));
        let mut out = vec![0u8; 1001];
        assert_eq!(a.read_into(&mut out), 1001);
        assert_eq!(out[1000], 1000u64 as u8);
    }

    #[test]
    fn large_pieces_are_not_copied() {
        let mut a = Assembler::new();
        let data = Bytes::from(vec![1u8; 1000]);
        a.insert(0, data.clone());
        let out = a.read(400).unwrap();
        assert_eq!(out.as_ptr(), data.as_ptr());
        let out = a.read(10_000).unwrap();
        assert_eq!(out.len(), 600);
        assert_eq!(out.as_ptr(), data[400..].as_ptr());
    }

    #[test]
    fn data_above_everything_held_extends_the_prefix_only_when_it_continues_it() {
        let data: Bytes = (0..40u8).collect::<Vec<_>>().into();
        let mut a = Assembler::new();
        a.insert(0, data.slice(0..10));
        assert_eq!(a.contiguous_end(), 10);
        a.insert(20, data.slice(20..30));
        assert_eq!(a.contiguous_end(), 10);
        a.insert(30, data.slice(30..40));
        assert_eq!(a.contiguous_end(), 10);
        a.insert(5, data.slice(5..20));
        assert_eq!(a.contiguous_end(), 40);
        let mut out = Vec::new();
        while let Some(b) = a.read(100) {
            out.extend_from_slice(&b);
        }
        assert_eq!(out, data);
    }

    proptest! {
        #[test]
        fn reassembles_any_delivery_order(
            len in 1usize..2000,
            cuts in prop::collection::vec((0usize..2000, 1usize..300), 1..80),
            reads in prop::collection::vec(1usize..500, 1..20),
        ) {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let src = Bytes::from(data.clone());
            let mut a = Assembler::new();
            let mut out = Vec::new();
            let mut r = reads.iter().cycle();
            let mut received = vec![false; len];
            for (start, l) in cuts {
                let s = start % len;
                let e = (s + l).min(len);
                a.insert(s as u64, src.slice(s..e));
                received[s..e].fill(true);
                let prefix = received.iter().position(|r| !r).unwrap_or(len);
                prop_assert_eq!(a.contiguous_end(), prefix as u64);
                if let Some(b) = a.read(*r.next().unwrap()) { out.extend_from_slice(&b); }
            }
            // Fill everything to finish.
            a.insert(0, src.clone());
            while let Some(b) = a.read(*r.next().unwrap()) { out.extend_from_slice(&b); }
            prop_assert_eq!(out, data);
            prop_assert_eq!(a.buffered(), 0);
        }
    }
}
