//! Unreliable datagrams (RFC 9221): the queues between the application and DATAGRAM frames.

use crate::TransportError;
use crate::sched::QosClass;
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
///
/// Outgoing datagrams wait in one first-in first-out queue per [`QosClass`] (the class the
/// application gave each one); the queues share one send buffer.
#[derive(Debug)]
pub struct DatagramQueues {
    outgoing: [VecDeque<Bytes>; 4],
    outgoing_bytes: usize,
    send_buffer: usize,
    incoming: VecDeque<Bytes>,
    incoming_bytes: usize,
    /// None when receiving datagrams is disabled (we advertise no max_datagram_frame_size).
    receive_buffer: Option<usize>,
    /// Datagrams dropped because a queue was full (or, for a copy queued on a path, because
    /// the path stopped taking data).
    pub dropped_outgoing: u64,
    /// Per [`QosClass`] (by [`QosClass::index`]): copies of duplicated datagrams queued on
    /// paths beyond the first of each (a scheduler's `Decision::Duplicate`). A copy whose
    /// path then stopped taking data is also in `dropped_outgoing`.
    pub copies_queued: [u64; 4],
    /// Datagrams received but dropped because the application did not read fast enough.
    pub dropped_incoming: u64,
}

impl DatagramQueues {
    /// Creates the queues: `receive_buffer` bytes of incoming datagrams are kept for the
    /// application (None disables receiving), `send_buffer` bytes of outgoing ones.
    pub fn new(receive_buffer: Option<usize>, send_buffer: usize) -> Self {
        DatagramQueues {
            outgoing: Default::default(),
            outgoing_bytes: 0,
            send_buffer,
            incoming: VecDeque::new(),
            incoming_bytes: 0,
            receive_buffer,
            dropped_outgoing: 0,
            copies_queued: [0; 4],
            dropped_incoming: 0,
        }
    }

    /// Queues a datagram of class [`QosClass::BestEffort`] for sending (see
    /// [`DatagramQueues::push_outgoing_class`]).
    pub fn push_outgoing(
        &mut self,
        data: Bytes,
        max_size: Option<usize>,
    ) -> Result<(), SendDatagramError> {
        self.push_outgoing_class(data, QosClass::BestEffort, max_size)
    }

    /// Queues a datagram of `class` for sending; `max_size` is the largest payload that
    /// currently fits in one DATAGRAM frame (None if the peer does not accept datagrams).
    /// When the send buffer is full, the oldest queued datagrams of the least demanding
    /// class that has any (last in [`QosClass::BY_DEMAND`]) are dropped to make room.
    pub fn push_outgoing_class(
        &mut self,
        data: Bytes,
        class: QosClass,
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
            let victim = QosClass::BY_DEMAND
                .iter()
                .rev()
                .find_map(|c| self.outgoing[c.index()].pop_front());
            match victim {
                Some(old) => {
                    self.outgoing_bytes -= old.len();
                    self.dropped_outgoing += 1;
                }
                None => break,
            }
        }
        self.outgoing_bytes += data.len();
        self.outgoing[class.index()].push_back(data);
        Ok(())
    }

    /// Takes the next datagram to send if its DATAGRAM frame (with a length field) fits in
    /// `space` bytes: the oldest of `class`, or with `None` the oldest of the most demanding
    /// class that has one.
    pub fn pop_outgoing_if_fits(&mut self, space: usize, class: Option<QosClass>) -> Option<Bytes> {
        let queue = match class {
            Some(c) => &mut self.outgoing[c.index()],
            None => {
                let c = self.next_class()?;
                &mut self.outgoing[c.index()]
            }
        };
        let front = queue.front()?;
        if datagram_frame_len(front.len()) > space {
            return None;
        }
        let data = queue.pop_front()?;
        self.outgoing_bytes -= data.len();
        Some(data)
    }

    /// The most demanding class with a datagram waiting.
    pub fn next_class(&self) -> Option<QosClass> {
        QosClass::BY_DEMAND
            .into_iter()
            .find(|c| !self.outgoing[c.index()].is_empty())
    }

    /// Size of the next queued outgoing datagram of `class` (of the most demanding class
    /// with one when `None`).
    pub fn next_outgoing_len(&self, class: Option<QosClass>) -> Option<usize> {
        let c = class.or_else(|| self.next_class())?;
        self.outgoing[c.index()].front().map(Bytes::len)
    }

    /// Number of queued outgoing datagrams of `class`.
    pub fn queued(&self, class: QosClass) -> usize {
        self.outgoing[class.index()].len()
    }

    /// Bytes of the queued outgoing datagrams of `class`.
    pub fn queued_bytes_of(&self, class: QosClass) -> usize {
        self.outgoing[class.index()].iter().map(Bytes::len).sum()
    }

    /// Bytes of every queued outgoing datagram.
    pub fn queued_bytes(&self) -> usize {
        self.outgoing_bytes
    }

    /// Drops every queued outgoing datagram larger than `max` (after the path MTU shrank),
    /// returning how many were dropped.
    pub fn drop_oversized(&mut self, max: usize) -> usize {
        let mut dropped = 0;
        for queue in &mut self.outgoing {
            let before = queue.len();
            queue.retain(|d| d.len() <= max);
            dropped += before - queue.len();
        }
        self.outgoing_bytes = self.outgoing.iter().flatten().map(Bytes::len).sum();
        self.dropped_outgoing += dropped as u64;
        dropped
    }

    /// True if datagrams wait to be sent.
    pub fn has_outgoing(&self) -> bool {
        self.outgoing_bytes > 0 || self.outgoing.iter().any(|q| !q.is_empty())
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
            q.pop_outgoing_if_fits(100, None).unwrap(),
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

    #[test]
    fn classes_queue_apart_and_the_least_demanding_make_room() {
        let mut q = DatagramQueues::new(Some(100), 6);
        let push = |q: &mut DatagramQueues, d: &'static [u8], c| {
            q.push_outgoing_class(Bytes::from_static(d), c, Some(100))
                .unwrap()
        };
        push(&mut q, b"b1", QosClass::Bulk);
        push(&mut q, b"e1", QosClass::BestEffort);
        push(&mut q, b"c1", QosClass::Critical);
        assert_eq!(q.next_class(), Some(QosClass::Critical));
        // Full: the bulk datagram goes first, whatever its age.
        push(&mut q, b"c2", QosClass::Critical);
        assert_eq!(q.dropped_outgoing, 1);
        assert_eq!(q.queued(QosClass::Bulk), 0);
        assert_eq!(q.queued_bytes(), 6);
        assert_eq!(
            q.pop_outgoing_if_fits(100, Some(QosClass::BestEffort)),
            Some(Bytes::from_static(b"e1"))
        );
        assert_eq!(
            q.pop_outgoing_if_fits(100, None),
            Some(Bytes::from_static(b"c1"))
        );
        assert_eq!(q.next_outgoing_len(None), Some(2));
        assert_eq!(
            q.pop_outgoing_if_fits(3, None),
            None,
            "a 2-byte datagram's frame is 4 bytes"
        );
        assert!(q.has_outgoing());
    }
}
