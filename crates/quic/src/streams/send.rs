//! The send buffer of one stream (or of one CRYPTO stream).
//!
//! Written bytes sit in a queue of [`Bytes`] chunks; the packet builder takes the next range
//! to send (lost ranges first, then new data), acknowledgements free the acknowledged prefix,
//! and losses requeue ranges that are not yet acknowledged. Small writes are coalesced in a
//! staging [`BytesMut`] that is frozen when the packet builder needs its bytes, so writing
//! 100 MB in small pieces costs one copy per byte.

use crate::range_set::RangeSet;
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;

/// Smallest allocation the staging buffer grows by, so small writes share allocations.
const STAGING_BLOCK: usize = 16 * 1024;

/// A chunk of data to put into one STREAM or CRYPTO frame.
#[derive(Debug, Clone, Eq, PartialEq)]
pub struct Transmit {
    /// Offset of the first byte of `data` in the stream.
    pub offset: u64,
    /// The bytes to send.
    pub data: Bytes,
    /// Whether the frame carries the end of the stream.
    pub fin: bool,
}

/// Outgoing data of one stream: written, in flight, lost and acknowledged byte ranges plus
/// the FIN flag.
#[derive(Debug, Default)]
pub struct SendBuffer {
    /// Frozen data, `(offset, bytes)`, contiguous, ending at `frozen_end`. The first chunk
    /// may start below `acked_prefix` (partly acknowledged).
    chunks: VecDeque<(u64, Bytes)>,
    /// Written bytes not yet frozen, from `frozen_end` to `write_end`.
    staging: BytesMut,
    frozen_end: u64,
    /// Every byte below this offset is acknowledged and freed.
    acked_prefix: u64,
    /// End of the written data.
    write_end: u64,
    /// The next byte never sent before.
    unsent: u64,
    /// Acknowledged ranges above `acked_prefix`.
    acked: RangeSet,
    /// Ranges declared lost and not acknowledged since: to retransmit.
    lost: RangeSet,
    /// The application ended the stream.
    fin_written: bool,
    /// The FIN is in flight or acknowledged (false again once declared lost).
    fin_sent: bool,
    /// The FIN was acknowledged.
    fin_acked: bool,
}

impl SendBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a copy of `data`.
    pub fn write(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.staging.capacity() - self.staging.len() < data.len() {
            self.staging.reserve(data.len().max(STAGING_BLOCK));
        }
        self.staging.extend_from_slice(data);
        self.write_end += data.len() as u64;
    }

    /// Appends `data` without copying it.
    pub fn write_bytes(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        self.freeze();
        let len = data.len() as u64;
        self.chunks.push_back((self.frozen_end, data));
        self.frozen_end += len;
        self.write_end += len;
    }

    /// Marks the end of the stream; it is sent with (or after) the last byte.
    pub fn finish(&mut self) {
        self.fin_written = true;
    }

    /// Whether [`SendBuffer::finish`] was called.
    pub fn is_finished(&self) -> bool {
        self.fin_written
    }

    /// Offset one past the last written byte (the final size once finished).
    pub fn write_end(&self) -> u64 {
        self.write_end
    }

    /// Offset of the next byte never sent before; the highest offset sent so far.
    pub fn sent_end(&self) -> u64 {
        self.unsent
    }

    /// Bytes held in memory: written and not yet acknowledged as a prefix.
    pub fn buffered(&self) -> u64 {
        self.write_end - self.acked_prefix
    }

    /// True if lost data, or a FIN that must be (re)sent without new data, waits. None of
    /// this needs flow control credit.
    pub fn has_retransmit(&self) -> bool {
        !self.lost.is_empty() || self.fin_only_pending()
    }

    /// Bytes written but never sent.
    pub fn unsent_bytes(&self) -> u64 {
        self.write_end - self.unsent
    }

    /// Bytes declared lost and waiting to be sent again.
    pub fn lost_bytes(&self) -> u64 {
        self.lost.elts()
    }

    /// True if written bytes were never sent.
    pub fn has_new_data(&self) -> bool {
        self.unsent < self.write_end
    }

    /// True if every written byte and the FIN are acknowledged.
    pub fn is_fully_acked(&self) -> bool {
        self.fin_written && self.fin_acked && self.acked_prefix == self.write_end
    }

    fn fin_only_pending(&self) -> bool {
        self.fin_written
            && !self.fin_sent
            && !self.fin_acked
            && self.unsent == self.write_end
            && self.lost.is_empty()
    }

    /// The next frame's worth of data: lost ranges first, then new data, then a lone FIN.
    ///
    /// `fit(offset)` gives the most data bytes a frame starting at `offset` can carry, or
    /// `None` if not even an empty frame fits. Returns `None` when nothing fits or nothing
    /// waits.
    pub fn poll_transmit(&mut self, fit: impl Fn(u64) -> Option<usize>) -> Option<Transmit> {
        if let Some(r) = self.lost.first() {
            let max = fit(r.start)? as u64;
            let end = r.end.min(r.start + max);
            if end == r.start {
                return None;
            }
            self.lost.remove(r.start..end);
            let data = self.slice(r.start, end);
            let fin =
                self.fin_written && !self.fin_sent && !self.fin_acked && end == self.write_end;
            if fin {
                self.fin_sent = true;
            }
            return Some(Transmit {
                offset: r.start,
                data,
                fin,
            });
        }
        if self.unsent < self.write_end {
            let start = self.unsent;
            let max = fit(start)? as u64;
            let end = self.write_end.min(start + max);
            if end == start {
                return None;
            }
            self.unsent = end;
            let data = self.slice(start, end);
            let fin = self.fin_written && end == self.write_end;
            if fin {
                self.fin_sent = true;
            }
            return Some(Transmit {
                offset: start,
                data,
                fin,
            });
        }
        if self.fin_only_pending() {
            fit(self.write_end)?;
            self.fin_sent = true;
            return Some(Transmit {
                offset: self.write_end,
                data: Bytes::new(),
                fin: true,
            });
        }
        None
    }

    /// Records the acknowledgement of `offset..offset + len` (and of the FIN if `fin`).
    /// Returns how many bytes were freed from memory.
    pub fn ack(&mut self, offset: u64, len: u64, fin: bool) -> u64 {
        if fin && self.fin_written {
            self.fin_acked = true;
        }
        let start = offset.max(self.acked_prefix);
        let end = offset.saturating_add(len).min(self.unsent);
        if start >= end {
            return 0;
        }
        self.lost.remove(start..end);
        self.acked.insert(start..end);
        let before = self.acked_prefix;
        if let Some(first) = self.acked.first()
            && first.start <= self.acked_prefix
        {
            self.acked.pop_min();
            self.acked_prefix = first.end;
        }
        while let Some((off, b)) = self.chunks.front() {
            if off + b.len() as u64 <= self.acked_prefix {
                self.chunks.pop_front();
            } else {
                break;
            }
        }
        self.acked_prefix - before
    }

    /// True if `offset..offset + len` (and the FIN if `fin`) is acknowledged.
    pub fn is_acked(&self, offset: u64, len: u64, fin: bool) -> bool {
        let start = offset.max(self.acked_prefix);
        let end = offset.saturating_add(len);
        let data = self.acked.contains_range(start..end);
        data && (!fin || self.fin_acked)
    }

    /// Records the loss of `offset..offset + len` (and of the FIN if `fin`): the parts not
    /// acknowledged since are queued for retransmission.
    pub fn lost(&mut self, offset: u64, len: u64, fin: bool) {
        if fin && !self.fin_acked {
            self.fin_sent = false;
        }
        let start = offset.max(self.acked_prefix);
        let end = offset.saturating_add(len).min(self.unsent);
        if start >= end {
            return;
        }
        for gap in self.acked.gaps_in(start..end) {
            self.lost.insert(gap);
        }
    }

    /// Drops all data, pending retransmissions and the FIN (after a reset): nothing is sent
    /// from this buffer afterwards. Returns the bytes freed.
    pub fn clear(&mut self) -> u64 {
        let freed = self.buffered();
        self.chunks.clear();
        self.staging = BytesMut::new();
        self.acked = RangeSet::new();
        self.lost = RangeSet::new();
        self.acked_prefix = self.write_end;
        self.frozen_end = self.write_end;
        self.unsent = self.write_end;
        self.fin_written = false;
        freed
    }

    /// Moves staged bytes into the chunk queue.
    fn freeze(&mut self) {
        if !self.staging.is_empty() {
            let b = self.staging.split().freeze();
            let len = b.len() as u64;
            self.chunks.push_back((self.frozen_end, b));
            self.frozen_end += len;
        }
    }

    /// The bytes `start..end`, which the caller knows are written and not freed: a zero-copy
    /// slice when they lie in one chunk, a copy otherwise.
    fn slice(&mut self, start: u64, end: u64) -> Bytes {
        if end > self.frozen_end {
            self.freeze();
        }
        let idx = self
            .chunks
            .partition_point(|(off, b)| off + b.len() as u64 <= start);
        let mut out: Option<BytesMut> = None;
        let mut pos = start;
        for (off, b) in self.chunks.range(idx..) {
            if pos >= end {
                break;
            }
            let from = (pos - off) as usize;
            let to = ((end - off) as usize).min(b.len());
            if out.is_none() && off + b.len() as u64 >= end {
                return b.slice(from..to);
            }
            out.get_or_insert_with(|| BytesMut::with_capacity((end - start) as usize))
                .extend_from_slice(&b[from..to]);
            pos = off + to as u64;
        }
        out.map(BytesMut::freeze).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit(n: usize) -> impl Fn(u64) -> Option<usize> {
        move |_| Some(n)
    }

    #[test]
    fn sends_new_data_in_order_and_coalesces_writes() {
        let mut b = SendBuffer::new();
        for i in 0..10u8 {
            b.write(&[i; 10]);
        }
        let t = b.poll_transmit(fit(35)).unwrap();
        assert_eq!((t.offset, t.data.len(), t.fin), (0, 35, false));
        assert_eq!(&t.data[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1]);
        let t = b.poll_transmit(fit(1000)).unwrap();
        assert_eq!((t.offset, t.data.len()), (35, 65));
        assert!(b.poll_transmit(fit(1000)).is_none());
        b.finish();
        let t = b.poll_transmit(fit(1000)).unwrap();
        assert_eq!((t.offset, t.data.len(), t.fin), (100, 0, true));
        assert!(b.poll_transmit(fit(1000)).is_none());
    }

    #[test]
    fn lost_ranges_go_first_and_acked_parts_are_skipped() {
        let mut b = SendBuffer::new();
        b.write(&(0..=255u8).collect::<Vec<_>>());
        b.finish();
        let mut sent = Vec::new();
        while let Some(t) = b.poll_transmit(fit(64)) {
            sent.push(t);
        }
        assert_eq!(sent.len(), 4);
        assert!(sent[3].fin);
        // Lose everything, then ack 64..100 before retransmission.
        b.lost(0, 256, true);
        b.ack(64, 36, false);
        let t = b.poll_transmit(fit(1000)).unwrap();
        assert_eq!((t.offset, t.data.len()), (0, 64));
        let t = b.poll_transmit(fit(1000)).unwrap();
        assert_eq!((t.offset, t.data.len(), t.fin), (100, 156, true));
        assert_eq!(t.data[0], 100);
        assert!(b.poll_transmit(fit(1000)).is_none());
        b.ack(0, 64, false);
        assert_eq!(b.buffered(), 156);
        b.ack(100, 156, true);
        assert!(b.is_fully_acked());
        assert_eq!(b.buffered(), 0);
    }

    #[test]
    fn slices_across_chunks_copy_and_within_chunks_do_not() {
        let mut b = SendBuffer::new();
        b.write_bytes(Bytes::from_static(b"hello "));
        b.write_bytes(Bytes::from_static(b"world"));
        let t = b.poll_transmit(fit(4)).unwrap();
        assert_eq!(&t.data[..], b"hell");
        let t = b.poll_transmit(fit(4)).unwrap();
        assert_eq!(&t.data[..], b"o wo");
        let t = b.poll_transmit(fit(4)).unwrap();
        assert_eq!(&t.data[..], b"rld");
    }

    #[test]
    fn ack_of_lost_fin_stops_its_retransmission() {
        let mut b = SendBuffer::new();
        b.write(b"abc");
        b.finish();
        let t = b.poll_transmit(fit(10)).unwrap();
        assert!(t.fin);
        b.lost(0, 3, true);
        b.ack(0, 3, true);
        assert!(!b.has_retransmit());
        assert!(b.poll_transmit(fit(10)).is_none());
        assert!(b.is_fully_acked());
    }

    #[test]
    fn frame_too_small_sends_nothing() {
        let mut b = SendBuffer::new();
        b.write(b"abc");
        assert!(b.poll_transmit(|_| None).is_none());
        assert!(b.poll_transmit(fit(0)).is_none());
        b.finish();
        assert!(b.poll_transmit(fit(0)).is_none());
        assert!(b.has_new_data());
    }

    #[test]
    fn memory_is_freed_as_prefix_is_acked() {
        let mut b = SendBuffer::new();
        let block = vec![7u8; 1000];
        for _ in 0..1000 {
            b.write(&block);
        }
        let mut ranges = Vec::new();
        while let Some(t) = b.poll_transmit(fit(1200)) {
            ranges.push((t.offset, t.data.len() as u64));
        }
        // Ack out of order: the second half first frees nothing.
        let half = ranges.len() / 2;
        for &(o, l) in &ranges[half..] {
            assert_eq!(b.ack(o, l, false), 0);
        }
        assert_eq!(b.buffered(), 1_000_000);
        let mut freed = 0;
        for &(o, l) in &ranges[..half] {
            freed += b.ack(o, l, false);
        }
        assert_eq!(freed, 1_000_000);
        assert_eq!(b.buffered(), 0);
        assert!(b.chunks.is_empty());
    }
}
