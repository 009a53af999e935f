//! Explicit Congestion Notification (RFC 9000 section 13.4, RFC 9002 section 7.1): the
//! codepoints a driver reads from and writes to the IP header, and the per-path validation
//! that decides whether this endpoint marks its packets ECT(0).
//!
//! Receiving: every packet number space counts the ECT(0), ECT(1) and ECN-CE codepoints of
//! the packets it processes and reports them in its ACK / PATH_ACK frames (the connection
//! does this; the driver passes each datagram's codepoint to
//! [`crate::endpoint::Endpoint::handle`]).
//!
//! Sending, per path ([`EcnValidation`]): the first [`TESTING_PACKETS`] packets are marked
//! ECT(0); marking then pauses until an acknowledgment validates the path (it becomes
//! [`EcnState::Capable`] and marks everything) or fails it (it becomes
//! [`EcnState::Failed`] and never marks again). A validated path whose peer reports new
//! ECN-CE marks gets a congestion event, as a loss would give it.

use crate::frame::EcnCounts;

/// The ECN field of an IP header (RFC 3168 section 5), other than Not-ECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EcnCodepoint {
    /// ECN-Capable Transport, codepoint 0 (`0b10`): what this endpoint marks.
    Ect0,
    /// ECN-Capable Transport, codepoint 1 (`0b01`).
    Ect1,
    /// Congestion Experienced (`0b11`): a router marked the packet instead of dropping it.
    Ce,
}

impl EcnCodepoint {
    /// The codepoint of the two ECN bits of an IP header's TOS / traffic class byte (the
    /// byte's two low bits), `None` for Not-ECT.
    pub fn from_bits(tos: u8) -> Option<EcnCodepoint> {
        match tos & 0b11 {
            0b10 => Some(EcnCodepoint::Ect0),
            0b01 => Some(EcnCodepoint::Ect1),
            0b11 => Some(EcnCodepoint::Ce),
            _ => None,
        }
    }

    /// The two ECN bits of this codepoint.
    pub fn bits(self) -> u8 {
        match self {
            EcnCodepoint::Ect0 => 0b10,
            EcnCodepoint::Ect1 => 0b01,
            EcnCodepoint::Ce => 0b11,
        }
    }
}

/// Adds a received packet's codepoint to a packet number space's counts.
//= https://www.rfc-editor.org/rfc/rfc9000#section-13.4.1
//# On receiving an IP packet with an ECT(0), ECT(1), or ECN-CE codepoint, an
//# ECN-enabled endpoint accesses the ECN field and increases the corresponding
//# ECT(0), ECT(1), or ECN-CE count.
pub(crate) fn count(counts: &mut EcnCounts, codepoint: EcnCodepoint) {
    match codepoint {
        EcnCodepoint::Ect0 => counts.ect0 += 1,
        EcnCodepoint::Ect1 => counts.ect1 += 1,
        EcnCodepoint::Ce => counts.ce += 1,
    }
}

/// Packets a new path marks before it waits for validation.
//= https://www.rfc-editor.org/rfc/rfc9000#section-13.4.2
//# If an endpoint has cause to expect that IP packets with an ECT codepoint might
//# be dropped by a faulty network element, the endpoint could set an ECT codepoint
//# for only the first ten outgoing packets on a path, or for a period of three
//# PTOs (see [Section 6.2 of QUIC-RECOVERY]).
pub const TESTING_PACKETS: u64 = 10;

/// Where a path's ECN validation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EcnState {
    /// ECN is off by configuration: nothing is marked (received marks are still reported).
    Disabled,
    /// The first packets of the path are being marked.
    Testing,
    /// The testing packets are out; no more are marked until an acknowledgment decides.
    Unknown,
    /// The counts the peer reported matched what was marked: every packet is marked.
    Capable,
    /// Validation failed (the reason is [`EcnValidation::failure`]): nothing is marked.
    Failed,
}

impl EcnState {
    /// The state's name in statistics and qlog.
    pub fn name(self) -> &'static str {
        match self {
            EcnState::Disabled => "disabled",
            EcnState::Testing => "testing",
            EcnState::Unknown => "unknown",
            EcnState::Capable => "capable",
            EcnState::Failed => "failed",
        }
    }
}

/// ECN on one path, as [`crate::Connection::paths`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EcnPathInfo {
    /// Where validation of this endpoint's marks stands.
    pub state: EcnState,
    /// Why validation failed, if it did.
    pub failure: Option<&'static str>,
    /// Packets this endpoint sent marked ECT(0).
    pub marked_sent: u64,
    /// The peer's ECT(0) and ECN-CE counts in its last validated acknowledgment.
    pub peer_reported_ect0: u64,
    /// See `peer_reported_ect0`.
    pub peer_reported_ce: u64,
    /// Packets received on the path marked ECT(0), ECT(1) and ECN-CE (reported to the peer).
    pub received_ect0: u64,
    /// See `received_ect0`.
    pub received_ect1: u64,
    /// See `received_ect0`.
    pub received_ce: u64,
}

/// One path's ECN validation (RFC 9000 section 13.4.2) and the ECN-CE count its peer last
/// reported.
#[derive(Debug, Clone)]
pub(crate) struct EcnValidation {
    state: EcnState,
    /// Packets sent marked ECT(0).
    marked: u64,
    /// `marked` when the current testing period began.
    testing_from: u64,
    /// Marked packets acknowledged, and declared lost, since testing began.
    marked_acked: u64,
    marked_lost: u64,
    /// The counts of the last ACK frame that passed validation.
    reported: EcnCounts,
    /// Why validation failed.
    failure: Option<&'static str>,
}

/// What an acknowledgment's ECN counts mean for the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EcnVerdict {
    /// Nothing to do.
    None,
    /// The peer reports this many new ECN-CE marks on a validated path: a congestion event.
    Congestion(u64),
}

impl EcnValidation {
    /// A new path's validation: testing when `enabled`, otherwise off for good.
    pub fn new(enabled: bool) -> EcnValidation {
        EcnValidation {
            state: if enabled {
                EcnState::Testing
            } else {
                EcnState::Disabled
            },
            marked: 0,
            testing_from: 0,
            marked_acked: 0,
            marked_lost: 0,
            reported: EcnCounts::default(),
            failure: None,
        }
    }

    /// Where validation stands.
    pub fn state(&self) -> EcnState {
        self.state
    }

    /// Why validation failed, if it did.
    pub fn failure(&self) -> Option<&'static str> {
        self.failure
    }

    /// Packets sent marked ECT(0).
    pub fn marked(&self) -> u64 {
        self.marked
    }

    /// The ECN counts the peer last reported (validated).
    pub fn reported(&self) -> EcnCounts {
        self.reported
    }

    /// Whether the next packet on the path is marked ECT(0).
    pub fn marking(&self) -> bool {
        matches!(self.state, EcnState::Testing | EcnState::Capable)
    }

    /// A packet left marked ECT(0).
    pub fn on_marked_sent(&mut self) {
        self.marked += 1;
        if self.state == EcnState::Testing && self.marked - self.testing_from >= TESTING_PACKETS {
            self.state = EcnState::Unknown;
        }
    }

    /// `n` marked packets were declared lost.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.4.2
    //# If all packets marked with non-zero
    //# ECN codepoints are subsequently lost, it can disable marking on the assumption
    //# that the marking caused the loss.
    pub fn on_marked_lost(&mut self, n: u64) {
        self.marked_lost += n;
        if matches!(self.state, EcnState::Testing | EcnState::Unknown)
            && self.marked_acked == 0
            && self.marked_lost >= TESTING_PACKETS.min(self.marked - self.testing_from)
        {
            self.fail("every packet marked ECT(0) was lost");
        }
    }

    /// An ACK frame of the path's space that raised the largest acknowledged packet number
    /// newly acknowledged `newly_marked` packets sent with ECT(0), and carried `counts`.
    /// (An ACK frame that does not raise the largest acknowledged is not validated.)
    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.4.2.1
    //# An endpoint MUST NOT fail ECN validation as a result of processing an ACK frame
    //# that does not increase the largest acknowledged packet number.
    pub fn on_ack(&mut self, newly_marked: u64, counts: Option<EcnCounts>) -> EcnVerdict {
        if matches!(self.state, EcnState::Disabled | EcnState::Failed) {
            return EcnVerdict::None;
        }
        let Some(c) = counts else {
            //= https://www.rfc-editor.org/rfc/rfc9000#section-13.4.2.1
            //# If an ACK frame newly acknowledges a packet that the endpoint sent with either
            //# the ECT(0) or ECT(1) codepoint set, ECN validation fails if the corresponding
            //# ECN counts are not present in the ACK frame.
            if newly_marked > 0 {
                self.fail("an acknowledgment of marked packets carried no ECN counts");
            }
            return EcnVerdict::None;
        };
        let old = self.reported;
        if c.ect0 < old.ect0 || c.ect1 < old.ect1 || c.ce < old.ce {
            self.fail("the peer's ECN counts decreased");
            return EcnVerdict::None;
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-13.4.2.1
        //# ECN validation also fails if the sum of the increase in ECT(0) and ECN-CE counts
        //# is less than the number of newly acknowledged packets that were originally sent
        //# with an ECT(0) marking.
        if (c.ect0 - old.ect0) + (c.ce - old.ce) < newly_marked {
            self.fail("fewer ECT(0) and ECN-CE marks reported than marked packets acknowledged");
            return EcnVerdict::None;
        }
        //= https://www.rfc-editor.org/rfc/rfc9000#section-13.4.2.1
        //# In particular, validation will fail when an endpoint receives a non-zero ECN
        //# count corresponding to an ECT codepoint that it never applied.
        if c.ect1 > 0 || c.ect0 > self.marked {
            self.fail("the peer reports ECT marks this endpoint never applied");
            return EcnVerdict::None;
        }
        self.reported = c;
        self.marked_acked += newly_marked;
        if newly_marked > 0 && matches!(self.state, EcnState::Testing | EcnState::Unknown) {
            self.state = EcnState::Capable;
        }
        //= https://www.rfc-editor.org/rfc/rfc9002#section-7.1
        //# If a path has been validated to support Explicit Congestion Notification (ECN)
        //# [RFC3168] [RFC8311], QUIC treats a Congestion Experienced (CE) codepoint
        //# in the IP header as a signal of congestion.
        if self.state == EcnState::Capable && c.ce > old.ce {
            EcnVerdict::Congestion(c.ce - old.ce)
        } else {
            EcnVerdict::None
        }
    }

    /// The path now leads elsewhere (the peer's address changed): validate ECN again, as
    /// for a new path. The counts reported so far stay the reference for the next ones.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.4.2
    //# An endpoint thus attempts to use ECN and validates this for each new connection,
    //# when switching to a server's preferred address, and on active connection
    //# migration to a new path.
    pub fn revalidate(&mut self) {
        if self.state != EcnState::Disabled {
            self.state = EcnState::Testing;
            self.failure = None;
            self.testing_from = self.marked;
            self.marked_acked = 0;
            self.marked_lost = 0;
        }
    }

    //= https://www.rfc-editor.org/rfc/rfc9000#section-13.4.2.2
    //# If validation fails, then the endpoint MUST disable ECN. It stops setting the
    //# ECT codepoint in IP packets that it sends, assuming that either the network path
    //# or the peer does not support ECN.
    fn fail(&mut self, why: &'static str) {
        self.state = EcnState::Failed;
        self.failure = Some(why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(ect0: u64, ect1: u64, ce: u64) -> Option<EcnCounts> {
        Some(EcnCounts { ect0, ect1, ce })
    }

    fn tested(n: u64) -> EcnValidation {
        let mut v = EcnValidation::new(true);
        for _ in 0..n {
            assert!(v.marking());
            v.on_marked_sent();
        }
        v
    }

    #[test]
    fn codepoints_round_trip_through_the_tos_byte() {
        for cp in [EcnCodepoint::Ect0, EcnCodepoint::Ect1, EcnCodepoint::Ce] {
            assert_eq!(EcnCodepoint::from_bits(0xb8 | cp.bits()), Some(cp));
        }
        assert_eq!(EcnCodepoint::from_bits(0xb8), None);
    }

    #[test]
    fn ten_packets_are_marked_then_marking_waits_for_validation() {
        let mut v = tested(TESTING_PACKETS);
        assert_eq!(v.state(), EcnState::Unknown);
        assert!(!v.marking());
        assert_eq!(v.on_ack(4, counts(4, 0, 0)), EcnVerdict::None);
        assert_eq!(v.state(), EcnState::Capable);
        assert!(v.marking());
    }

    #[test]
    fn a_validated_path_gets_a_congestion_event_per_new_ce_report() {
        let mut v = tested(3);
        // The acknowledgment that validates the path already counts its CE report.
        assert_eq!(v.on_ack(2, counts(1, 0, 1)), EcnVerdict::Congestion(1));
        assert_eq!(v.state(), EcnState::Capable);
        v.on_marked_sent();
        assert_eq!(v.on_ack(1, counts(1, 0, 3)), EcnVerdict::Congestion(2));
        assert_eq!(v.on_ack(0, counts(1, 0, 3)), EcnVerdict::None);
    }

    #[test]
    fn validation_fails_on_each_rule_of_the_rfc() {
        let mut v = tested(3);
        v.on_ack(2, None);
        assert_eq!(v.state(), EcnState::Failed);
        assert!(!v.marking());
        // An acknowledgment of unmarked packets without counts says nothing.
        let mut v = tested(3);
        v.on_ack(0, None);
        assert_eq!(v.state(), EcnState::Testing);
        // Bleached marks: counts below what was acknowledged.
        let mut v = tested(3);
        v.on_ack(3, counts(1, 0, 0));
        assert_eq!(v.state(), EcnState::Failed);
        // Remarked to ECT(1), or more ECT(0) than ever sent.
        let mut v = tested(3);
        v.on_ack(1, counts(0, 1, 1));
        assert_eq!(v.state(), EcnState::Failed);
        let mut v = tested(3);
        v.on_ack(1, counts(4, 0, 0));
        assert_eq!(v.state(), EcnState::Failed);
        // Counts going down.
        let mut v = tested(3);
        v.on_ack(2, counts(2, 0, 0));
        v.on_ack(0, counts(1, 0, 0));
        assert_eq!(v.state(), EcnState::Failed);
        assert!(v.failure().is_some());
    }

    #[test]
    fn losing_every_testing_packet_fails_but_losing_some_does_not() {
        let mut v = tested(TESTING_PACKETS);
        v.on_marked_lost(9);
        assert_eq!(v.state(), EcnState::Unknown);
        v.on_marked_lost(1);
        assert_eq!(v.state(), EcnState::Failed);
        let mut v = tested(TESTING_PACKETS);
        v.on_ack(1, counts(1, 0, 0));
        v.on_marked_lost(9);
        assert_eq!(v.state(), EcnState::Capable);
    }

    #[test]
    fn a_new_peer_address_starts_a_new_testing_period() {
        let mut v = tested(TESTING_PACKETS);
        v.on_ack(TESTING_PACKETS, counts(TESTING_PACKETS, 0, 0));
        v.on_marked_sent();
        v.revalidate();
        assert_eq!(v.state(), EcnState::Testing);
        for _ in 0..TESTING_PACKETS {
            v.on_marked_sent();
        }
        assert_eq!(v.state(), EcnState::Unknown);
        // Cumulative counts from before the change still validate.
        v.on_ack(3, counts(TESTING_PACKETS + 4, 0, 0));
        assert_eq!(v.state(), EcnState::Capable);
    }

    #[test]
    fn a_disabled_path_never_marks() {
        let mut v = EcnValidation::new(false);
        assert!(!v.marking());
        assert_eq!(v.on_ack(0, counts(0, 0, 5)), EcnVerdict::None);
        assert_eq!(v.state(), EcnState::Disabled);
    }
}
