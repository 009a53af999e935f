//! # polypath-link
//!
//! Link-layer event and hint types shared by everything in polypath that produces or consumes
//! information from below the transport layer: the 5G radio model (`polypath-ran`, inside the
//! simulator), the emulator's feed, a real modem feed, and the Multipath QUIC connection API,
//! which takes these values as *link hints*.
//!
//! Every event is a [`LinkEvent`]: a timestamp, the UE it concerns, the UE-side interface
//! (radio leg) it concerns, and an [`LinkEventKind`] payload. Interfaces are numbered per UE;
//! a driver maps `(ue, iface)` to a local network interface / address and so to the
//! transport paths that use it. With NR dual connectivity the master cell group (MN) and the
//! secondary cell group (SN) are separate interfaces, so each node's link is a separate path.
//!
//! Events serialise to JSON (one object per line, see [`jsonl`]). Field names are stable
//! snake_case; the payload is externally tagged, e.g.
//!
//! ```json
//! {"t_ns":1200000000,"ue":0,"iface":0,"event":{"handover_command":{"source":1,"target":2,"target_rat":"nr_fr1","direction":"horizontal","keeps_sn":false}}}
//! ```
//!
//! The crate is deliberately small: plain data types, serde, and a JSON-lines reader/writer
//! whose errors name the line and the field.
#![warn(missing_docs)]

pub mod feed;
pub mod jsonl;

use serde::{Deserialize, Serialize};
use std::fmt;

/// Identifier of a cell (or Wi-Fi / LiFi access point) in one radio deployment.
#[derive(Debug, Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CellId(pub u32);

impl fmt::Display for CellId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cell{}", self.0)
    }
}

/// Radio access technology and frequency range of a cell.
#[derive(Debug, Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RadioType {
    /// 5G NR frequency range 1 (sub-6 GHz).
    NrFr1,
    /// 5G NR frequency range 2 (mmWave).
    NrFr2,
    /// 4G LTE (E-UTRA).
    Lte,
    /// IEEE 802.11 Wi-Fi.
    Wifi,
    /// Light fidelity (optical wireless).
    Lifi,
}

impl RadioType {
    /// True for the 3GPP technologies (NR FR1, NR FR2, LTE) that use RRC measurement events
    /// and network-controlled handover.
    pub fn is_3gpp(self) -> bool {
        matches!(self, RadioType::NrFr1 | RadioType::NrFr2 | RadioType::Lte)
    }

    /// True for NR (FR1 or FR2).
    pub fn is_nr(self) -> bool {
        matches!(self, RadioType::NrFr1 | RadioType::NrFr2)
    }

    /// The snake_case name used in JSON and TOML.
    pub fn as_str(self) -> &'static str {
        match self {
            RadioType::NrFr1 => "nr_fr1",
            RadioType::NrFr2 => "nr_fr2",
            RadioType::Lte => "lte",
            RadioType::Wifi => "wifi",
            RadioType::Lifi => "lifi",
        }
    }
}

impl fmt::Display for RadioType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The RRC measurement report triggering events of TS 38.331 section 5.5.4.
#[derive(Debug, Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MeasEvent {
    /// Serving becomes better than threshold.
    A1,
    /// Serving becomes worse than threshold.
    A2,
    /// Neighbour becomes offset better than SpCell.
    A3,
    /// Neighbour becomes better than threshold.
    A4,
    /// SpCell becomes worse than threshold1 and neighbour becomes better than threshold2.
    A5,
    /// Inter-RAT neighbour becomes better than threshold.
    B1,
    /// PCell becomes worse than threshold1 and inter-RAT neighbour becomes better than
    /// threshold2.
    B2,
}

impl MeasEvent {
    /// True when the event's condition involves a neighbour cell.
    pub fn has_neighbour(self) -> bool {
        !matches!(self, MeasEvent::A1 | MeasEvent::A2)
    }
}

impl fmt::Display for MeasEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Layer-3 filtered measurement results of one cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellMeasurement {
    /// The measured cell.
    pub cell: CellId,
    /// Its radio type.
    pub rat: RadioType,
    /// Reference signal received power in dBm (for Wi-Fi/LiFi: received signal power).
    pub rsrp_dbm: f64,
    /// Reference signal received quality in dB.
    pub rsrq_db: f64,
    /// Signal to interference and noise ratio in dB.
    pub sinr_db: f64,
}

impl CellMeasurement {
    fn is_finite(&self) -> bool {
        self.rsrp_dbm.is_finite() && self.rsrq_db.is_finite() && self.sinr_db.is_finite()
    }
}

/// Whether a handover stays within one kind of cell or changes between mmWave and sub-6 GHz
/// (or between RATs).
#[derive(Debug, Copy, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandoverDirection {
    /// Source and target are of the same radio type (e.g. sub-6 to sub-6).
    Horizontal,
    /// Source and target differ (mmWave to sub-6, sub-6 to mmWave, NR to LTE, ...).
    Vertical,
}

impl HandoverDirection {
    /// The direction of a handover from a cell of type `source` to one of type `target`.
    pub fn between(source: RadioType, target: RadioType) -> Self {
        if source == target {
            HandoverDirection::Horizontal
        } else {
            HandoverDirection::Vertical
        }
    }
}

/// Why a link went down.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DownReason {
    /// Handover execution: the UE left the source cell and has not yet completed random
    /// access on the target (break-before-make interruption).
    Handover,
    /// No usable cell or access point in range.
    NoCoverage,
    /// The secondary node was released (NR-DC).
    SnRelease,
    /// Wi-Fi / LiFi re-association to another access point.
    Reassociation,
}

/// The payload of a link-layer event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkEventKind {
    /// Periodic layer-3 filtered measurements of the serving and detected cells.
    Measurement {
        /// The serving cell of this interface, if any.
        serving: Option<CellId>,
        /// Measured cells, serving cell first when there is one.
        cells: Vec<CellMeasurement>,
    },
    /// A measurement event's entering condition held for time-to-trigger (TS 38.331
    /// 5.5.4.1: the cell is added to the cells-triggered list).
    RrcEventEntered {
        /// The measurement identity of the configured event.
        meas_id: u32,
        /// The event type.
        event: MeasEvent,
        /// The serving cell the event is evaluated against.
        serving: CellId,
        /// The neighbour cell, for events that involve one.
        cell: Option<CellId>,
    },
    /// A measurement event's leaving condition held for time-to-trigger (the cell is removed
    /// from the cells-triggered list).
    RrcEventLeft {
        /// The measurement identity of the configured event.
        meas_id: u32,
        /// The event type.
        event: MeasEvent,
        /// The serving cell the event is evaluated against.
        serving: CellId,
        /// The neighbour cell, for events that involve one.
        cell: Option<CellId>,
    },
    /// A measurement report sent by the UE (TS 38.331 5.5.5).
    MeasurementReport {
        /// The measurement identity of the event that triggered the report.
        meas_id: u32,
        /// The event type.
        event: MeasEvent,
        /// Serving cell results.
        serving: CellMeasurement,
        /// Results of the triggered neighbour cells, best first.
        neighbours: Vec<CellMeasurement>,
        /// True when the report is sent because a cell left the triggered list
        /// (reportOnLeave).
        on_leave: bool,
    },
    /// RRC reconfiguration with sync received: the network commands a handover.
    HandoverCommand {
        /// The cell the UE leaves.
        source: CellId,
        /// The cell the UE goes to.
        target: CellId,
        /// The target cell's radio type (M2HO reads it from the command).
        target_rat: RadioType,
        /// Horizontal or vertical.
        direction: HandoverDirection,
        /// True for an inter-MN handover without SN change (TS 37.340 10.7.2): only the master
        /// cell group moves, the secondary node keeps serving its interface.
        keeps_sn: bool,
    },
    /// The UE detaches from the source cell; data transfer on this interface stops until
    /// [`LinkEventKind::RandomAccessComplete`].
    HandoverExecution {
        /// The cell the UE left.
        source: CellId,
        /// The cell the UE is synchronising to.
        target: CellId,
    },
    /// Random access on a (target) cell completed; data transfer resumes.
    RandomAccessComplete {
        /// The cell the UE is now attached to.
        cell: CellId,
    },
    /// A secondary node was added (NR-DC); its interface comes up after random access.
    SnAddition {
        /// The primary secondary cell (PSCell) of the new secondary node.
        cell: CellId,
        /// Its radio type.
        rat: RadioType,
    },
    /// The secondary node was released.
    SnRelease {
        /// The released PSCell.
        cell: CellId,
    },
    /// Downlink resource-block allocation to this UE in one slot.
    RbAllocation {
        /// The scheduling cell.
        cell: CellId,
        /// Slot number since the start of the run.
        slot: u64,
        /// Resource blocks allocated to this UE.
        rbs: u16,
        /// Resource blocks in the carrier.
        total_rbs: u16,
        /// Bytes delivered to this UE in the slot.
        bytes: u32,
    },
    /// A throughput prediction for this interface.
    PredictedThroughput {
        /// Predicted downlink rate in bit/s.
        bps: f64,
        /// Name of the predictor (e.g. `oracle`, `ewma`, `gbt`).
        predictor: String,
        /// The horizon the prediction is for, in milliseconds.
        horizon_ms: u32,
    },
    /// The interface can carry data again (or for the first time).
    LinkUp {
        /// The cell or access point now serving it.
        cell: CellId,
    },
    /// The interface cannot carry data.
    LinkDown {
        /// The cell or access point that served it, if any.
        cell: Option<CellId>,
        /// Why.
        reason: DownReason,
    },
}

impl LinkEventKind {
    /// The snake_case name of the variant, as used in JSON.
    pub fn name(&self) -> &'static str {
        match self {
            LinkEventKind::Measurement { .. } => "measurement",
            LinkEventKind::RrcEventEntered { .. } => "rrc_event_entered",
            LinkEventKind::RrcEventLeft { .. } => "rrc_event_left",
            LinkEventKind::MeasurementReport { .. } => "measurement_report",
            LinkEventKind::HandoverCommand { .. } => "handover_command",
            LinkEventKind::HandoverExecution { .. } => "handover_execution",
            LinkEventKind::RandomAccessComplete { .. } => "random_access_complete",
            LinkEventKind::SnAddition { .. } => "sn_addition",
            LinkEventKind::SnRelease { .. } => "sn_release",
            LinkEventKind::RbAllocation { .. } => "rb_allocation",
            LinkEventKind::PredictedThroughput { .. } => "predicted_throughput",
            LinkEventKind::LinkUp { .. } => "link_up",
            LinkEventKind::LinkDown { .. } => "link_down",
        }
    }

    /// False if any floating-point field is NaN or infinite (JSON cannot carry those).
    pub fn is_finite(&self) -> bool {
        match self {
            LinkEventKind::Measurement { cells, .. } => cells.iter().all(|c| c.is_finite()),
            LinkEventKind::MeasurementReport {
                serving,
                neighbours,
                ..
            } => serving.is_finite() && neighbours.iter().all(|c| c.is_finite()),
            LinkEventKind::PredictedThroughput { bps, .. } => bps.is_finite(),
            _ => true,
        }
    }
}

/// One link-layer event: when, for which UE and interface, and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkEvent {
    /// Time of the event in nanoseconds since the start of the run (virtual time in the
    /// simulator; a feed's own epoch otherwise).
    pub t_ns: u64,
    /// The UE.
    pub ue: u32,
    /// The UE-side interface (radio leg) the event concerns.
    pub iface: u16,
    /// The payload.
    pub event: LinkEventKind,
}

impl LinkEvent {
    /// Builds an event.
    pub fn new(t_ns: u64, ue: u32, iface: u16, event: LinkEventKind) -> Self {
        LinkEvent {
            t_ns,
            ue,
            iface,
            event,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direction_between_types() {
        assert_eq!(
            HandoverDirection::between(RadioType::NrFr2, RadioType::NrFr1),
            HandoverDirection::Vertical
        );
        assert_eq!(
            HandoverDirection::between(RadioType::NrFr1, RadioType::NrFr1),
            HandoverDirection::Horizontal
        );
    }

    #[test]
    fn json_shape_is_stable() {
        let ev = LinkEvent::new(
            5,
            1,
            0,
            LinkEventKind::HandoverCommand {
                source: CellId(1),
                target: CellId(2),
                target_rat: RadioType::NrFr1,
                direction: HandoverDirection::Horizontal,
                keeps_sn: false,
            },
        );
        let s = serde_json::to_string(&ev).unwrap();
        assert_eq!(
            s,
            r#"{"t_ns":5,"ue":1,"iface":0,"event":{"handover_command":{"source":1,"target":2,"target_rat":"nr_fr1","direction":"horizontal","keeps_sn":false}}}"#
        );
        assert_eq!(LinkEventKind::LinkUp { cell: CellId(3) }.name(), "link_up");
    }

    #[test]
    fn non_finite_is_detected() {
        let k = LinkEventKind::PredictedThroughput {
            bps: f64::NAN,
            predictor: "x".into(),
            horizon_ms: 1,
        };
        assert!(!k.is_finite());
    }
}
