//! Unreliable datagrams (RFC 9221): the queues between the application and DATAGRAM frames.

use crate::TransportError;
use bytes::Bytes;
use std::collections::VecDeque;

/// Why a datagram could not be queued for sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendDatagramError {
    /// The peer did not advertise max_datagram_frame_size (or the handshake has not
    /// delivered its transport parameters yet).
    //= https://www.rfc-editor.org/rfc/rfc9221#section-3
    //# An endpoint MUST NOT send DATAGRAM frames until it has received the
    //# max_datagram_frame_size transport parameter with a non-zero value during the
    //# handshake
    #[error("the peer does not accept DATAGRAM frames")]
    UnsupportedByPeer,
    /// Datagrams are disabled in the local configuration.
    #[error("datagrams are disabled locally")]
    Disabled,
    /// The datagram is larger than the current maximum (see `max_datagram_size`).
    #[error("datagram of {size} bytes exceeds the current maximum of {max}")]
    TooLarge {
        /// Size of the rejected datagram.
        size: usize,
        /// Current maximum.
        max: usize,
    },
}

/// Queues of outgoing and incoming datagrams of one connection.
#[derive(Debug)]
pub struct DatagramQueues {
    outgoing: VecDeque<Bytes>,
    outgoing_bytes: usize,
    send_buffer: usize,
    incoming: VecDeque<Bytes>,
    incoming_bytes: usize,
    /// None when receiving datagrams is disabled (we advertise no max_datagram_frame_size).
    receive_buffer: Option<usize>,
    /// Datagrams dropped because a queue was full.
    pub dropped_outgoing: u64,
    /// Datagrams received but dropped because the application did not read fast enough.
    pub dropped_incoming: u64,
}

impl DatagramQueues {
    /// Creates the queues: `receive_buffer` bytes of incoming datagrams are kept for the
    /// application (None disables receiving), `send_buffer` bytes of outgoing ones.
    pub fn new(receive_buffer: Option<usize>, send_buffer: usize) -> Self {
        DatagramQueues {
            outgoing: VecDeque::new(),
            outgoing_bytes: 0,
            send_buffer,
            incoming: VecDeque::new(),
            incoming_bytes: 0,
            receive_buffer,
            dropped_outgoing: 0,
            dropped_incoming: 0,
        }
    }

    /// Queues a datagram for sending; `max_size` is the largest payload that currently fits
    /// in one DATAGRAM frame (None if the peer does not accept datagrams). When the send
    /// buffer is full the oldest queued datagrams are dropped to make room.
    pub fn push_outgoing(
        &mut self,
        data: Bytes,
        max_size: Option<usize>,
    ) -> Result<(), SendDatagramError> {
        let max = max_size.ok_or(SendDatagramError::UnsupportedByPeer)?;
        if data.len() > max {
            return Err(SendDatagramError::TooLarge {
                size: data.len(),
                max,
            });
        }
        while self.outgoing_bytes + data.len() > self.send_buffer {
            match self.outgoing.pop_front() {
                Some(old) => {
                    self.outgoing_bytes -= old.len();
                    self.dropped_outgoing += 1;
                }
                None => break,
            }
        }
        self.outgoing_bytes += data.len();
        self.outgoing.push_back(data);
        Ok(())
    }

    /// Takes the next datagram to send if its DATAGRAM frame (with a length field) fits in
    /// `space` bytes.
    pub fn pop_outgoing_if_fits(&mut self, space: usize) -> Option<Bytes> {
        let front = self.outgoing.front()?;
        if datagram_frame_len(front.len()) > space {
            return None;
        }
        let data = self.outgoing.pop_front()?;
        self.outgoing_bytes -= data.len();
        Some(data)
    }

    /// Size of the next queued outgoing datagram.
    pub fn next_outgoing_len(&self) -> Option<usize> {
        self.outgoing.front().map(Bytes::len)
    }

    /// Drops every queued outgoing datagram larger than `max` (after the path MTU shrank),
    /// returning how many were dropped.
    pub fn drop_oversized(&mut self, max: usize) -> usize {
        let before = self.outgoing.len();
        self.outgoing.retain(|d| d.len() <= max);
        self.outgoing_bytes = self.outgoing.iter().map(Bytes::len).sum();
        let dropped = before - self.outgoing.len();
        self.dropped_outgoing += dropped as u64;
        dropped
    }

    /// True if datagrams wait to be sent.
    pub fn has_outgoing(&self) -> bool {
        !self.outgoing.is_empty()
    }

    /// Handles a received DATAGRAM frame.
    //= https://www.rfc-editor.org/rfc/rfc9221#section-3
    //# An endpoint that receives a DATAGRAM frame when
    //# it has not indicated support via the transport parameter MUST terminate the
    //# connection with an error of type PROTOCOL_VIOLATION. Similarly, an endpoint that
    //# receives a DATAGRAM frame that is larger than the value it sent in its
    //# max_datagram_frame_size transport parameter MUST terminate the connection with
    //# an error of type PROTOCOL_VIOLATION.
    ///
    /// `frame_len` is the encoded size of the whole frame, which the limit applies to.
    /// Returns true if the datagram was queued for the application.
    pub fn on_datagram_frame(
        &mut self,
        data: Bytes,
        frame_len: usize,
        local_max_frame_size: Option<u64>,
    ) -> Result<bool, TransportError> {
        let Some(limit) = local_max_frame_size.filter(|l| *l > 0) else {
            return Err(TransportError::protocol_violation(
                "DATAGRAM frame received but not negotiated",
            ));
        };
        if frame_len as u64 > limit {
            return Err(TransportError::protocol_violation(format!(
                "DATAGRAM frame of {frame_len} bytes exceeds our max_datagram_frame_size {limit}"
            )));
        }
        let Some(buffer) = self.receive_buffer else {
            return Ok(false);
        };
        if data.len() > buffer {
            self.dropped_incoming += 1;
            return Ok(false);
        }
        //= https://www.rfc-editor.org/rfc/rfc9221#section-5
        //# When a QUIC endpoint receives a valid DATAGRAM frame, it SHOULD deliver the data
        //# to the application immediately, as long as it is able to process the frame and
        //# can store the contents in memory.
        while self.incoming_bytes + data.len() > buffer {
            match self.incoming.pop_front() {
                Some(old) => {
                    self.incoming_bytes -= old.len();
                    self.dropped_incoming += 1;
                }
                None => break,
            }
        }
        self.incoming_bytes += data.len();
        self.incoming.push_back(data);
        Ok(true)
    }

    /// Takes the oldest received datagram.
    pub fn recv(&mut self) -> Option<Bytes> {
        let d = self.incoming.pop_front()?;
        self.incoming_bytes -= d.len();
        Some(d)
    }
}

/// Encoded size of a DATAGRAM frame with a length field (type 0x31) carrying `len` bytes.
//= https://www.rfc-editor.org/rfc/rfc9221#section-4
//# DATAGRAM Frame {
//#   Type (i) = 0x30..0x31,
//#   [Length (i)],
//#   Datagram Data (..),
//# }
pub fn datagram_frame_len(len: usize) -> usize {
    1 + crate::VarInt::encoded_size(len as u64) + len
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TransportErrorCode;

    #[test]
    fn unsolicited_and_oversized_frames_are_violations() {
        let mut q = DatagramQueues::new(Some(1000), 1000);
        let err = q
            .on_datagram_frame(Bytes::from_static(b"x"), 3, None)
            .unwrap_err();
        assert_eq!(err.code, TransportErrorCode::PROTOCOL_VIOLATION);
        let err = q
            .on_datagram_frame(Bytes::from_static(b"xyz"), 5, Some(4))
            .unwrap_err();
        assert_eq!(err.code, TransportErrorCode::PROTOCOL_VIOLATION);
        assert!(
            q.on_datagram_frame(Bytes::from_static(b"xy"), 4, Some(4))
                .unwrap()
        );
        assert_eq!(q.recv().unwrap(), Bytes::from_static(b"xy"));
    }

    #[test]
    fn full_queues_drop_oldest() {
        let mut q = DatagramQueues::new(Some(4), 4);
        q.push_outgoing(Bytes::from_static(b"ab"), Some(100))
            .unwrap();
        q.push_outgoing(Bytes::from_static(b"cd"), Some(100))
            .unwrap();
        q.push_outgoing(Bytes::from_static(b"ef"), Some(100))
            .unwrap();
        assert_eq!(q.dropped_outgoing, 1);
        assert_eq!(
            q.pop_outgoing_if_fits(100).unwrap(),
            Bytes::from_static(b"cd")
        );
        assert!(matches!(
            q.push_outgoing(Bytes::from_static(b"toolong"), Some(3)),
            Err(SendDatagramError::TooLarge { size: 7, max: 3 })
        ));
        assert_eq!(
            q.push_outgoing(Bytes::new(), None),
            Err(SendDatagramError::UnsupportedByPeer)
        );
    }
}
