//! The CRYPTO stream of one encryption level.

use super::recv::Assembler;
use super::send::{SendBuffer, Transmit};
use crate::error::TransportError;
use crate::varint::VarInt;
use bytes::Bytes;

/// Out-of-order CRYPTO data a [`CryptoStream`] buffers by default before failing with
/// CRYPTO_BUFFER_EXCEEDED.
pub const DEFAULT_CRYPTO_BUFFER: u64 = 64 * 1024;

/// The smallest buffer limit allowed.
//= https://www.rfc-editor.org/rfc/rfc9000#section-7.5
//# Implementations MUST support buffering at least 4096 bytes of data received in
//# out-of-order CRYPTO frames.
pub const MIN_CRYPTO_BUFFER: u64 = 4096;

/// Handshake bytes of one encryption level in both directions: a send buffer with
/// retransmission tracking and a receive assembler with a buffer limit. CRYPTO data is not
/// flow controlled.
//= https://www.rfc-editor.org/rfc/rfc9000#section-19.6
//# There is a separate flow of cryptographic handshake data in each encryption
//# level, each of which starts at an offset of 0. This implies that each encryption
//# level is treated as a separate CRYPTO stream of data.
#[derive(Debug)]
pub struct CryptoStream {
    send: SendBuffer,
    recv: Assembler,
    limit: u64,
}

impl Default for CryptoStream {
    fn default() -> Self {
        Self::new()
    }
}

impl CryptoStream {
    /// A stream with the [`DEFAULT_CRYPTO_BUFFER`] limit.
    pub fn new() -> Self {
        Self::with_buffer_limit(DEFAULT_CRYPTO_BUFFER)
    }

    /// A stream that buffers at most `limit` bytes beyond the read offset (raised to
    /// [`MIN_CRYPTO_BUFFER`] if lower).
    pub fn with_buffer_limit(limit: u64) -> Self {
        CryptoStream {
            send: SendBuffer::new(),
            recv: Assembler::new(),
            limit: limit.max(MIN_CRYPTO_BUFFER),
        }
    }

    /// Changes the buffer limit (raised to [`MIN_CRYPTO_BUFFER`] if lower).
    //= https://www.rfc-editor.org/rfc/rfc9000#section-7.5
    //# An endpoint's buffer size does
    //# not need to remain constant during the life of the connection.
    pub fn set_buffer_limit(&mut self, limit: u64) {
        self.limit = limit.max(MIN_CRYPTO_BUFFER);
    }

    /// Queues handshake bytes from the TLS stack for sending.
    pub fn write(&mut self, data: &[u8]) {
        self.send.write(data);
    }

    /// Queues handshake bytes without copying them.
    pub fn write_bytes(&mut self, data: Bytes) {
        self.send.write_bytes(data);
    }

    /// Takes the next CRYPTO frame's data, lost data first, sized so that the whole frame
    /// (type, offset, length, data) fits in `max_frame_len` bytes. Returns `(offset, data)`.
    pub fn poll_transmit(&mut self, max_frame_len: usize) -> Option<(u64, Bytes)> {
        self.send
            .poll_transmit(|offset| {
                let header = 1 + VarInt::encoded_size(offset);
                super::max_data_len(max_frame_len.checked_sub(header)?)
            })
            .map(|Transmit { offset, data, .. }| (offset, data))
    }

    /// True if data waits to be sent or retransmitted.
    pub fn has_pending(&self) -> bool {
        self.send.has_retransmit() || self.send.has_new_data()
    }

    /// A CRYPTO frame carrying `offset..offset + len` was acknowledged.
    pub fn on_acked(&mut self, offset: u64, len: u64) {
        self.send.ack(offset, len, false);
    }

    /// A CRYPTO frame carrying `offset..offset + len` was declared lost.
    pub fn on_lost(&mut self, offset: u64, len: u64) {
        self.send.lost(offset, len, false);
    }

    /// Bytes written and not yet acknowledged.
    pub fn unacked(&self) -> u64 {
        self.send.buffered()
    }

    /// Handles a received CRYPTO frame.
    pub fn on_crypto(&mut self, offset: u64, data: Bytes) -> Result<(), TransportError> {
        let end = offset.saturating_add(data.len() as u64);
        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.6
        //# Receipt of a frame that exceeds this
        //# limit MUST be treated as a connection error of type FRAME_ENCODING_ERROR or
        //# CRYPTO_BUFFER_EXCEEDED.
        if end > VarInt::MAX.into_inner() {
            return Err(TransportError::crypto_buffer_exceeded(
                "CRYPTO data beyond 2^62 - 1",
            ));
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-7.5
        //# If an endpoint's buffer is exceeded during the handshake, it
        //# can expand its buffer temporarily to complete the handshake. If an endpoint
        //# does not expand its buffer, it MUST close the connection with a
        //# CRYPTO_BUFFER_EXCEEDED error code.
        if end > self.recv.read_offset().saturating_add(self.limit) {
            return Err(TransportError::crypto_buffer_exceeded(format!(
                "CRYPTO data up to offset {end} exceeds the {}-byte buffer",
                self.limit
            )));
        }
        self.recv.insert(offset, data);
        Ok(())
    }

    /// The next in-order received bytes for the TLS stack, at most `max_len` of them.
    pub fn read(&mut self, max_len: usize) -> Option<Bytes> {
        self.recv.read(max_len)
    }

    /// Offset of the next byte [`CryptoStream::read`] returns.
    pub fn read_offset(&self) -> u64 {
        self.recv.read_offset()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TransportErrorCode;

    #[test]
    fn buffers_4096_out_of_order_bytes_and_rejects_more() {
        let mut c = CryptoStream::with_buffer_limit(0);
        c.on_crypto(100, Bytes::from(vec![1; 3996])).unwrap();
        let err = c.on_crypto(4000, Bytes::from(vec![1; 97])).unwrap_err();
        assert_eq!(err.code, TransportErrorCode::CRYPTO_BUFFER_EXCEEDED);
        c.on_crypto(0, Bytes::from(vec![0; 100])).unwrap();
        assert_eq!(c.read(50).unwrap().len(), 50);
        // The window moves with the read offset.
        c.on_crypto(4096, Bytes::from(vec![2; 50])).unwrap();
        let err = c
            .on_crypto(u64::MAX - 3, Bytes::from(vec![1; 2]))
            .unwrap_err();
        assert_eq!(err.code, TransportErrorCode::CRYPTO_BUFFER_EXCEEDED);
    }

    #[test]
    fn frames_fit_and_retransmit() {
        let mut c = CryptoStream::new();
        c.write(&[9u8; 1000]);
        let (o, d) = c.poll_transmit(100).unwrap();
        assert_eq!(o, 0);
        // type + offset(1) + length(2 for 96) + 96 data bytes = 100
        assert_eq!(d.len(), 96);
        let (o2, d2) = c.poll_transmit(100).unwrap();
        assert_eq!(o2, 96);
        // offset 96 takes 2 bytes: 1 + 2 + 2 + 95 = 100
        assert_eq!(d2.len(), 95);
        c.on_lost(0, 96);
        c.on_acked(96, 95);
        assert_eq!(c.poll_transmit(1200).unwrap(), (0, d));
        assert!(c.has_pending());
        assert_eq!(c.unacked(), 1000);
        assert!(c.poll_transmit(3).is_none());
    }
}
