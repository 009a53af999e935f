//! Link hints: what the connection remembers of the link-layer events it was given.
//!
//! Link-layer events ([`polypath_link::LinkEvent`]) reach a connection through
//! [`crate::Connection::handle_link_event`] together with the local IP address of the
//! interface they concern. The connection keeps the latest [`LinkHints`] per local address and
//! copies them into every path that sends from that address, so schedulers and path managers
//! read them in [`crate::sched::PathSnapshot::link`]. Predicted throughput is kept apart, in
//! [`crate::sched::PathSnapshot::predicted_throughput`], where the LAMP5G ranking reads it.

use polypath_link::{CellId, CellMeasurement, DownReason, LinkEventKind, MeasEvent};
use std::time::Instant;

/// The latest link-layer hints for the interface a path sends from.
///
/// Every field is `None` until an event supplied it. Signal values are those of the serving
/// cell, from [`LinkEventKind::Measurement`] and [`LinkEventKind::MeasurementReport`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LinkHints {
    /// Reference signal received power of the serving cell, in dBm.
    pub rsrp_dbm: Option<f64>,
    /// Reference signal received quality of the serving cell, in dB.
    pub rsrq_db: Option<f64>,
    /// Signal to interference and noise ratio of the serving cell, in dB.
    pub sinr_db: Option<f64>,
    /// The cell (or access point) serving the interface, as of the latest event naming it.
    pub serving_cell: Option<CellId>,
    /// `Some(true)` after [`LinkEventKind::LinkUp`] or [`LinkEventKind::RandomAccessComplete`],
    /// `Some(false)` after [`LinkEventKind::LinkDown`] or [`LinkEventKind::HandoverExecution`]
    /// (data transfer stops until random access on the target completes); `None` before any
    /// of these.
    pub link_up: Option<bool>,
    /// True from a [`LinkEventKind::LinkDown`] that lost the link for an unknown time (no
    /// coverage, secondary node released) until the next [`LinkEventKind::LinkUp`] or
    /// [`LinkEventKind::RandomAccessComplete`]. A handover or a Wi-Fi / LiFi re-association
    /// (a break the link layer bridges, holding or forwarding the packets) leaves it false.
    /// The connection stops scheduling data on the paths of a lost interface while another
    /// path works, and probes them at once when the interface comes back.
    pub link_lost: bool,
    /// The latest RRC measurement event that entered or left on the interface.
    pub last_rrc_event: Option<RrcEventHint>,
    /// When an event last changed these hints.
    pub updated_at: Option<Instant>,
}

/// An RRC measurement event (TS 38.331 section 5.5.4) seen on an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RrcEventHint {
    /// The event type (A1 to A5, B1, B2).
    pub event: MeasEvent,
    /// True when the entering condition held for time-to-trigger (or a report was sent for
    /// it), false when the leaving condition did.
    pub entered: bool,
    /// The neighbour cell, for events that involve one.
    pub neighbour: Option<CellId>,
    /// When the connection was told.
    pub at: Instant,
}

impl LinkHints {
    /// Folds one event into the hints. Returns true if a field changed. Resource-block
    /// allocations and predicted throughput leave the hints alone (the connection keeps
    /// predicted throughput separately).
    pub fn apply(&mut self, now: Instant, event: &LinkEventKind) -> bool {
        let before = *self;
        match event {
            LinkEventKind::Measurement { serving, cells } => {
                self.serving_cell = *serving;
                match serving.and_then(|s| cells.iter().find(|c| c.cell == s)) {
                    Some(m) => self.set_signal(m),
                    None => {
                        self.rsrp_dbm = None;
                        self.rsrq_db = None;
                        self.sinr_db = None;
                    }
                }
            }
            LinkEventKind::MeasurementReport {
                event,
                serving,
                neighbours,
                on_leave,
                ..
            } => {
                self.serving_cell = Some(serving.cell);
                self.set_signal(serving);
                self.set_rrc_event(now, *event, !on_leave, neighbours.first().map(|n| n.cell));
            }
            LinkEventKind::RrcEventEntered {
                event,
                serving,
                cell,
                ..
            } => {
                self.serving_cell = Some(*serving);
                self.set_rrc_event(now, *event, true, *cell);
            }
            LinkEventKind::RrcEventLeft {
                event,
                serving,
                cell,
                ..
            } => {
                self.serving_cell = Some(*serving);
                self.set_rrc_event(now, *event, false, *cell);
            }
            LinkEventKind::HandoverExecution { .. } => self.link_up = Some(false),
            LinkEventKind::RandomAccessComplete { cell } | LinkEventKind::LinkUp { cell } => {
                self.serving_cell = Some(*cell);
                self.link_up = Some(true);
                self.link_lost = false;
            }
            LinkEventKind::LinkDown { reason, .. } => {
                self.link_up = Some(false);
                self.link_lost |= matches!(reason, DownReason::NoCoverage | DownReason::SnRelease);
            }
            LinkEventKind::HandoverCommand { .. }
            | LinkEventKind::SnAddition { .. }
            | LinkEventKind::SnRelease { .. }
            | LinkEventKind::RbAllocation { .. }
            | LinkEventKind::PredictedThroughput { .. } => {}
        }
        if *self == before {
            return false;
        }
        self.updated_at = Some(now);
        true
    }

    fn set_signal(&mut self, m: &CellMeasurement) {
        self.rsrp_dbm = Some(m.rsrp_dbm);
        self.rsrq_db = Some(m.rsrq_db);
        self.sinr_db = Some(m.sinr_db);
    }

    fn set_rrc_event(
        &mut self,
        now: Instant,
        event: MeasEvent,
        entered: bool,
        neighbour: Option<CellId>,
    ) {
        self.last_rrc_event = Some(RrcEventHint {
            event,
            entered,
            neighbour,
            at: now,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polypath_link::RadioType;
    use std::time::Duration;

    fn cell(id: u32, rsrp: f64) -> CellMeasurement {
        CellMeasurement {
            cell: CellId(id),
            rat: RadioType::NrFr1,
            rsrp_dbm: rsrp,
            rsrq_db: -10.0,
            sinr_db: 12.5,
        }
    }

    #[test]
    fn measurements_events_and_link_state_are_kept() {
        let t0 = Instant::now();
        let mut h = LinkHints::default();
        assert!(h.apply(
            t0,
            &LinkEventKind::Measurement {
                serving: Some(CellId(1)),
                cells: vec![cell(1, -80.0), cell(2, -95.0)],
            }
        ));
        assert_eq!(h.rsrp_dbm, Some(-80.0));
        assert_eq!(h.sinr_db, Some(12.5));
        assert_eq!(h.serving_cell, Some(CellId(1)));
        assert_eq!(h.updated_at, Some(t0));
        // The same measurement again changes nothing.
        let t1 = t0 + Duration::from_millis(10);
        assert!(!h.apply(
            t1,
            &LinkEventKind::Measurement {
                serving: Some(CellId(1)),
                cells: vec![cell(1, -80.0)],
            }
        ));
        assert_eq!(h.updated_at, Some(t0));
        assert!(h.apply(
            t1,
            &LinkEventKind::RrcEventEntered {
                meas_id: 4,
                event: MeasEvent::A4,
                serving: CellId(1),
                cell: Some(CellId(2)),
            }
        ));
        let rrc = h.last_rrc_event.unwrap();
        assert_eq!(
            (rrc.event, rrc.entered, rrc.neighbour),
            (MeasEvent::A4, true, Some(CellId(2)))
        );
        assert!(h.apply(
            t1,
            &LinkEventKind::LinkDown {
                cell: Some(CellId(1)),
                reason: DownReason::Handover,
            }
        ));
        assert_eq!(h.link_up, Some(false));
        assert!(!h.link_lost, "a handover is bridged by the link layer");
        assert!(h.apply(t1, &LinkEventKind::LinkUp { cell: CellId(2) }));
        assert_eq!((h.link_up, h.serving_cell), (Some(true), Some(CellId(2))));
        assert!(h.apply(
            t1,
            &LinkEventKind::LinkDown {
                cell: Some(CellId(2)),
                reason: DownReason::NoCoverage,
            }
        ));
        assert!(h.link_lost);
        assert!(h.apply(t1, &LinkEventKind::RandomAccessComplete { cell: CellId(3) }));
        assert!(!h.link_lost);
        // Predicted throughput is not a hint field.
        assert!(!h.apply(
            t1,
            &LinkEventKind::PredictedThroughput {
                bps: 1e6,
                predictor: "oracle".into(),
                horizon_ms: 100,
            }
        ));
    }
}
