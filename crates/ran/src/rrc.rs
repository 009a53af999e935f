//! RRC measurement events A1–A5, B1, B2 (TS 38.331 §5.5.4): entering and leaving
//! conditions, time-to-trigger, the cells-triggered list, and measurement reporting with
//! report interval, report amount and report-on-leave (§5.5.4.1, §5.5.5); plus the layer-3
//! filter of §5.5.3.2.

use crate::config::{EventConfig, Quantity};
use polypath_link::{CellId, CellMeasurement, MeasEvent, RadioType};
use std::collections::{BTreeMap, BTreeSet};

/// One cell's measurement as the event machinery sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// The reported values.
    pub m: CellMeasurement,
    /// Cell individual offset Ocn/Ocp (dB).
    pub cio_db: f64,
    /// Frequency offset Ofn/Ofp (dB).
    pub offset_freq_db: f64,
}

impl Measured {
    fn q(&self, q: Quantity) -> f64 {
        match q {
            Quantity::Rsrp => self.m.rsrp_dbm,
            Quantity::Rsrq => self.m.rsrq_db,
            Quantity::Sinr => self.m.sinr_db,
        }
    }
    /// `M + Of + Oc`.
    fn with_offsets(&self, q: Quantity) -> f64 {
        self.q(q) + self.offset_freq_db + self.cio_db
    }
    /// The cell's radio type.
    pub fn rat(&self) -> RadioType {
        self.m.rat
    }
}

//= 3GPP TS 38.331 V17 §5.5.3.2
//# F_n = (1 − a)·F_(n−1) + a·M_n, where a = 1/2^(ki/4) and ki is the filterCoefficient;
//# F_0 is set to M_1 when the first measurement result is received
/// Layer-3 filter of one quantity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct L3Filter {
    a: f64,
    value: Option<f64>,
}

impl L3Filter {
    /// A filter with coefficient `k` (0 = no filtering).
    pub fn new(k: u8) -> Self {
        L3Filter {
            a: 1.0 / 2f64.powf(k as f64 / 4.0),
            value: None,
        }
    }

    /// Feeds a measurement and returns the filtered value.
    pub fn update(&mut self, m: f64) -> f64 {
        let v = match self.value {
            None => m,
            Some(f) => (1.0 - self.a) * f + self.a * m,
        };
        self.value = Some(v);
        v
    }

    /// Forgets the history (the cell became undetectable).
    pub fn reset(&mut self) {
        self.value = None;
    }
}

/// Something an event evaluation produced.
#[derive(Debug, Clone, PartialEq)]
pub enum EventOutput {
    /// A cell entered the triggered list (`cell` is `None` for A1/A2).
    Entered(Option<CellId>),
    /// A cell left the triggered list.
    Left(Option<CellId>),
    /// A measurement report is sent.
    Report {
        /// Serving-cell results.
        serving: CellMeasurement,
        /// Triggered neighbours, best first by the trigger quantity.
        neighbours: Vec<CellMeasurement>,
        /// Sent because a cell left (reportOnLeave).
        on_leave: bool,
    },
}

/// State of one configured event on one cell group of one UE (a `VarMeasReportList` entry).
#[derive(Debug, Clone)]
pub struct EventMachine {
    cfg: EventConfig,
    entering_since: BTreeMap<u32, u64>,
    leaving_since: BTreeMap<u32, u64>,
    triggered: BTreeSet<u32>,
    reports_sent: u32,
    next_periodic_ns: Option<u64>,
}

impl EventMachine {
    /// A fresh machine for an event configuration.
    pub fn new(cfg: EventConfig) -> Self {
        EventMachine {
            cfg,
            entering_since: BTreeMap::new(),
            leaving_since: BTreeMap::new(),
            triggered: BTreeSet::new(),
            reports_sent: 0,
            next_periodic_ns: None,
        }
    }

    /// The event's configuration.
    pub fn config(&self) -> &EventConfig {
        &self.cfg
    }

    /// Cells currently in the triggered list (the serving cell's id for A1/A2).
    pub fn triggered(&self) -> impl Iterator<Item = CellId> + '_ {
        self.triggered.iter().map(|c| CellId(*c))
    }

    //= 3GPP TS 38.331 V17 §5.5.6.1
    //# for each measId ... remove the measurement reporting entry within the
    //# VarMeasReportList, stop the periodical reporting timer ... and reset the associated
    //# information (e.g. timeToTrigger)
    /// Forgets all trigger state (on handover / SN change).
    pub fn reset(&mut self) {
        self.entering_since.clear();
        self.leaving_since.clear();
        self.triggered.clear();
        self.reports_sent = 0;
        self.next_periodic_ns = None;
    }

    /// (entering, leaving) conditions for `n` (the neighbour, or the serving cell for A1/A2).
    fn conditions(&self, serving: &Measured, n: &Measured) -> (bool, bool) {
        let c = &self.cfg;
        let q = c.quantity;
        let hys = c.hysteresis_db;
        let th = c.threshold.unwrap_or(f64::NAN);
        let th1 = c.threshold1.unwrap_or(f64::NAN);
        let th2 = c.threshold2.unwrap_or(f64::NAN);
        let ms = serving.q(q);
        let mn = n.with_offsets(q);
        match c.event {
            //= 3GPP TS 38.331 V17 §5.5.4.2
            //# Inequality A1-1 (Entering condition): Ms – Hys > Thresh
            //# Inequality A1-2 (Leaving condition): Ms + Hys < Thresh
            MeasEvent::A1 => (ms - hys > th, ms + hys < th),
            //= 3GPP TS 38.331 V17 §5.5.4.3
            //# Inequality A2-1 (Entering condition): Ms + Hys < Thresh
            //# Inequality A2-2 (Leaving condition): Ms – Hys > Thresh
            MeasEvent::A2 => (ms + hys < th, ms - hys > th),
            //= 3GPP TS 38.331 V17 §5.5.4.4
            //# Inequality A3-1 (Entering condition): Mn + Ofn + Ocn – Hys > Mp + Ofp + Ocp + Off
            //# Inequality A3-2 (Leaving condition): Mn + Ofn + Ocn + Hys < Mp + Ofp + Ocp + Off
            MeasEvent::A3 => {
                let mp = serving.with_offsets(q) + c.offset_db;
                (mn - hys > mp, mn + hys < mp)
            }
            //= 3GPP TS 38.331 V17 §5.5.4.5
            //# Inequality A4-1 (Entering condition): Mn + Ofn + Ocn – Hys > Thresh
            //# Inequality A4-2 (Leaving condition): Mn + Ofn + Ocn + Hys < Thresh
            //= 3GPP TS 38.331 V17 §5.5.4.7
            //# Inequality B1-1 (Entering condition): Mn + Ofn + Ocn – Hys > Thresh
            //# Inequality B1-2 (Leaving condition): Mn + Ofn + Ocn + Hys < Thresh
            MeasEvent::A4 | MeasEvent::B1 => (mn - hys > th, mn + hys < th),
            //= 3GPP TS 38.331 V17 §5.5.4.6
            //# Inequality A5-1 (Entering condition 1): Mp + Hys < Thresh1
            //# Inequality A5-2 (Entering condition 2): Mn + Ofn + Ocn – Hys > Thresh2
            //# Inequality A5-3 (Leaving condition 1): Mp – Hys > Thresh1
            //# Inequality A5-4 (Leaving condition 2): Mn + Ofn + Ocn + Hys < Thresh2
            //= 3GPP TS 38.331 V17 §5.5.4.8
            //# Inequality B2-1 (Entering condition 1): Mp + Hys < Thresh1
            //# Inequality B2-2 (Entering condition 2): Mn + Ofn + Ocn – Hys > Thresh2
            //# Inequality B2-3 (Leaving condition 1): Mp – Hys > Thresh1
            //# Inequality B2-4 (Leaving condition 2): Mn + Ofn + Ocn + Hys < Thresh2
            MeasEvent::A5 | MeasEvent::B2 => (
                ms + hys < th1 && mn - hys > th2,
                ms - hys > th1 || mn + hys < th2,
            ),
        }
    }

    /// Evaluates the event at `now_ns` with the serving cell's and the candidate neighbours'
    /// filtered results (`neighbours` already restricted to the event's target types and
    /// excluding the serving cell).
    pub fn evaluate(
        &mut self,
        now_ns: u64,
        serving: &Measured,
        neighbours: &[Measured],
    ) -> Vec<EventOutput> {
        let ttt = crate::dist::ms_to_ns(self.cfg.time_to_trigger_ms);
        let mut out = Vec::new();
        let candidates: Vec<&Measured> = if self.cfg.event.has_neighbour() {
            neighbours.iter().collect()
        } else {
            vec![serving]
        };
        let present: BTreeSet<u32> = candidates.iter().map(|m| m.m.cell.0).collect();
        let mut added = false;
        let mut left_any = false;
        let key_cell = |k: u32, has_n: bool| has_n.then_some(CellId(k));
        let has_n = self.cfg.event.has_neighbour();
        for n in &candidates {
            let k = n.m.cell.0;
            let (enter, leave) = self.conditions(serving, n);
            if !self.triggered.contains(&k) {
                self.leaving_since.remove(&k);
                if enter {
                    let since = *self.entering_since.entry(k).or_insert(now_ns);
                    if now_ns.saturating_sub(since) >= ttt {
                        self.entering_since.remove(&k);
                        self.triggered.insert(k);
                        out.push(EventOutput::Entered(key_cell(k, has_n)));
                        added = true;
                    }
                } else {
                    self.entering_since.remove(&k);
                }
            } else {
                self.entering_since.remove(&k);
                if leave {
                    let since = *self.leaving_since.entry(k).or_insert(now_ns);
                    if now_ns.saturating_sub(since) >= ttt {
                        self.leaving_since.remove(&k);
                        self.triggered.remove(&k);
                        out.push(EventOutput::Left(key_cell(k, has_n)));
                        left_any = true;
                    }
                } else {
                    self.leaving_since.remove(&k);
                }
            }
        }
        // Cells that are no longer detected leave at once; timers of vanished cells stop.
        let gone: Vec<u32> = self
            .triggered
            .iter()
            .filter(|k| !present.contains(k))
            .copied()
            .collect();
        for k in gone {
            self.triggered.remove(&k);
            out.push(EventOutput::Left(key_cell(k, has_n)));
            left_any = true;
        }
        self.entering_since.retain(|k, _| present.contains(k));
        self.leaving_since.retain(|k, _| present.contains(k));

        let interval = crate::dist::ms_to_ns(self.cfg.report_interval_ms).max(1);
        let amount = self.cfg.report_amount;
        let send = if added {
            self.reports_sent = 1;
            self.next_periodic_ns = Some(now_ns + interval);
            Some(false)
        } else if self.triggered.is_empty() {
            self.reports_sent = 0;
            self.next_periodic_ns = None;
            (left_any && self.cfg.report_on_leave).then_some(true)
        } else if left_any && self.cfg.report_on_leave {
            Some(true)
        } else if self.next_periodic_ns.is_some_and(|t| now_ns >= t)
            && (amount == 0 || self.reports_sent < amount)
        {
            self.reports_sent += 1;
            self.next_periodic_ns = Some(now_ns + interval);
            Some(false)
        } else {
            None
        };
        if let Some(on_leave) = send {
            let q = self.cfg.quantity;
            let mut ns: Vec<&Measured> = neighbours
                .iter()
                .filter(|n| has_n && self.triggered.contains(&n.m.cell.0))
                .collect();
            ns.sort_by(|a, b| b.q(q).total_cmp(&a.q(q)).then(a.m.cell.cmp(&b.m.cell)));
            out.push(EventOutput::Report {
                serving: serving.m.clone(),
                neighbours: ns.into_iter().map(|n| n.m.clone()).collect(),
                on_leave,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EventConfig;

    fn meas(cell: u32, rsrp: f64) -> Measured {
        Measured {
            m: CellMeasurement {
                cell: CellId(cell),
                rat: RadioType::NrFr1,
                rsrp_dbm: rsrp,
                rsrq_db: -11.0,
                sinr_db: 10.0,
            },
            cio_db: 0.0,
            offset_freq_db: 0.0,
        }
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn l3_filter() {
        let mut f = L3Filter::new(4); // a = 1/2
        assert_eq!(f.update(-80.0), -80.0);
        assert_eq!(f.update(-90.0), -85.0);
        let mut g = L3Filter::new(0);
        g.update(1.0);
        assert_eq!(g.update(5.0), 5.0);
    }

    #[test]
    fn a3_needs_time_to_trigger_and_hysteresis() {
        let mut m = EventMachine::new(EventConfig {
            offset_db: 3.0,
            hysteresis_db: 1.0,
            time_to_trigger_ms: 100.0,
            ..EventConfig::base()
        });
        let s = meas(1, -90.0);
        // Neighbour 3.5 dB better: 3.5 - 1 > 3 is false.
        assert!(m.evaluate(0, &s, &[meas(2, -86.5)]).is_empty());
        // 4.5 dB better: entering holds from 40 ms; not yet at 120 ms (80 ms held).
        assert!(m.evaluate(40 * MS, &s, &[meas(2, -85.5)]).is_empty());
        assert!(m.evaluate(120 * MS, &s, &[meas(2, -85.5)]).is_empty());
        let out = m.evaluate(140 * MS, &s, &[meas(2, -85.5)]);
        assert_eq!(out[0], EventOutput::Entered(Some(CellId(2))));
        assert!(
            matches!(&out[1], EventOutput::Report { neighbours, on_leave: false, .. } if neighbours.len() == 1)
        );
        // Report amount 1: no periodic report.
        assert!(m.evaluate(500 * MS, &s, &[meas(2, -85.5)]).is_empty());
        // Leaving: Mn + Hys < Mp + Off  <=> -89 + 1 < -87 -> leaves after TTT.
        assert!(m.evaluate(600 * MS, &s, &[meas(2, -89.0)]).is_empty());
        let out = m.evaluate(700 * MS, &s, &[meas(2, -89.0)]);
        assert_eq!(out, vec![EventOutput::Left(Some(CellId(2)))]);
    }

    #[test]
    fn a2_a1_thresholds_and_periodic_reports() {
        let mut a2 = EventMachine::new(EventConfig {
            event: MeasEvent::A2,
            threshold: Some(-100.0),
            time_to_trigger_ms: 0.0,
            report_amount: 3,
            report_interval_ms: 100.0,
            report_on_leave: true,
            ..EventConfig::base()
        });
        // -99.5 + 1 < -100 false; -101.5 + 1 < -100 true.
        assert!(a2.evaluate(0, &meas(1, -99.5), &[]).is_empty());
        let out = a2.evaluate(10 * MS, &meas(1, -101.5), &[]);
        assert_eq!(out[0], EventOutput::Entered(None));
        let mut reports = 1;
        for t in (20..=1000).step_by(10) {
            for o in a2.evaluate(t * MS, &meas(1, -101.5), &[]) {
                if matches!(o, EventOutput::Report { .. }) {
                    reports += 1;
                }
            }
        }
        assert_eq!(reports, 3, "report amount bounds periodic reports");
        let out = a2.evaluate(1010 * MS, &meas(1, -98.0), &[]);
        assert_eq!(out[0], EventOutput::Left(None));
        assert!(matches!(out[1], EventOutput::Report { on_leave: true, .. }));

        let mut a1 = EventMachine::new(EventConfig {
            event: MeasEvent::A1,
            threshold: Some(-80.0),
            time_to_trigger_ms: 0.0,
            ..EventConfig::base()
        });
        assert!(a1.evaluate(0, &meas(1, -79.5), &[]).is_empty());
        assert_eq!(
            a1.evaluate(1, &meas(1, -78.5), &[])[0],
            EventOutput::Entered(None)
        );
    }

    #[test]
    fn a4_a5_b2_and_offsets() {
        let mut a4 = EventMachine::new(EventConfig {
            event: MeasEvent::A4,
            threshold: Some(-95.0),
            time_to_trigger_ms: 0.0,
            ..EventConfig::base()
        });
        let mut n = meas(2, -94.5);
        assert!(
            a4.evaluate(0, &meas(1, -80.0), std::slice::from_ref(&n))
                .is_empty()
        );
        n.cio_db = 1.0; // -94.5 + 1 - 1 > -95
        assert_eq!(
            a4.evaluate(1, &meas(1, -80.0), std::slice::from_ref(&n))[0],
            EventOutput::Entered(Some(CellId(2)))
        );

        for ev in [MeasEvent::A5, MeasEvent::B2] {
            let mut a5 = EventMachine::new(EventConfig {
                event: ev,
                threshold1: Some(-100.0),
                threshold2: Some(-95.0),
                time_to_trigger_ms: 0.0,
                ..EventConfig::base()
            });
            // Serving not weak enough.
            assert!(
                a5.evaluate(0, &meas(1, -99.5), &[meas(2, -90.0)])
                    .is_empty()
            );
            let out = a5.evaluate(1, &meas(1, -102.0), &[meas(2, -90.0)]);
            assert_eq!(out[0], EventOutput::Entered(Some(CellId(2))));
            // Leaving condition 1 (serving recovered) alone suffices.
            let out = a5.evaluate(2, &meas(1, -98.0), &[meas(2, -90.0)]);
            assert_eq!(out, vec![EventOutput::Left(Some(CellId(2)))]);
        }
    }

    #[test]
    fn undetected_cells_leave_and_reset_clears() {
        let mut a4 = EventMachine::new(EventConfig {
            event: MeasEvent::A4,
            threshold: Some(-95.0),
            time_to_trigger_ms: 0.0,
            ..EventConfig::base()
        });
        a4.evaluate(0, &meas(1, -80.0), &[meas(2, -80.0)]);
        assert_eq!(a4.triggered().count(), 1);
        let out = a4.evaluate(1, &meas(1, -80.0), &[]);
        assert_eq!(out, vec![EventOutput::Left(Some(CellId(2)))]);
        a4.evaluate(2, &meas(1, -80.0), &[meas(2, -80.0)]);
        a4.reset();
        assert_eq!(a4.triggered().count(), 0);
    }
}
