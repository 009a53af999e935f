//! Event-based handover prediction (M2HO Sec. 4.2, Algorithm 1) with its two fallbacks,
//! and HO-Naive, the baseline that takes any measurement report for a handover (Sec. 6.1).

use polypath_link::{CellId, MeasEvent, RadioType};
use serde::Serialize;

/// True for the cell types M2HO calls sub-6 GHz (LTE and NR FR1).
pub fn is_sub6(rat: RadioType) -> bool {
    matches!(rat, RadioType::NrFr1 | RadioType::Lte)
}

/// True for mmWave (NR FR2).
pub fn is_mmwave(rat: RadioType) -> bool {
    rat == RadioType::NrFr2
}

/// Which line of Algorithm 1 predicted a handover.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// A3 with a measured cell of the serving cell's type (horizontal).
    A3SameType,
    /// B1 on a sub-6 GHz serving cell.
    B1FromSub6,
    /// A5 with a mmWave measured cell on a sub-6 GHz serving cell.
    A5ToMmwave,
    /// A2 on a mmWave serving cell.
    A2FromMmwave,
}

/// Algorithm 1 of M2HO (Sec. 4.2): whether a measurement report of `event`, with serving
/// cell type `serving` and measured (neighbour) cell type `measured`, predicts a handover.
///
/// M2HO, "Event-Based Handover Prediction", Algorithm 1:
/// ```text
/// if MR = A3 and s.type = m.type then return HO
/// if s is sub-6GHz then
///   if MR = B1 then return HO
///   else if MR = A5 and m is mmWave then return HO
/// else if s is mmWave and MR = A2 then return HO
/// else Return No HO
/// ```
pub fn algorithm1(
    event: MeasEvent,
    serving: RadioType,
    measured: Option<RadioType>,
) -> Option<Rule> {
    if event == MeasEvent::A3 && measured == Some(serving) {
        return Some(Rule::A3SameType);
    }
    if is_sub6(serving) {
        if event == MeasEvent::B1 {
            return Some(Rule::B1FromSub6);
        } else if event == MeasEvent::A5 && measured.is_some_and(is_mmwave) {
            return Some(Rule::A5ToMmwave);
        }
    } else if is_mmwave(serving) && event == MeasEvent::A2 {
        return Some(Rule::A2FromMmwave);
    }
    None
}

/// How a prediction ended.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A handover command followed while the prediction stood: a correct prediction.
    Handover,
    /// Fallback 1: an A1 report (the serving cell recovered) cancelled it.
    CancelledByA1,
    /// Fallback 2: no handover command within 2·T2.
    Expired,
}

/// One prediction and its outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// When it was made (ns, the controller's clock).
    pub t_ns: u64,
    /// The report's event.
    pub event: MeasEvent,
    /// The rule that fired (`None` for HO-Naive's predictions).
    pub rule: Option<Rule>,
    /// The serving cell.
    pub serving: CellId,
    /// The serving cell's type.
    pub serving_rat: RadioType,
    /// The best measured cell of the report, the likely target.
    pub target_hint: Option<CellId>,
    /// Its type.
    pub target_hint_rat: Option<RadioType>,
    /// How it ended (`None` while it stands).
    pub outcome: Option<Outcome>,
    /// When it ended (ns).
    pub ended_ns: Option<u64>,
}

/// The handover predictor: Algorithm 1, or HO-Naive, with the fallbacks.
#[derive(Debug, Clone)]
pub struct Predictor {
    naive: bool,
    fallback_a1: bool,
    t2_ns: f64,
    t2_samples: u64,
    pending: Option<Prediction>,
}

impl Predictor {
    /// M2HO's predictor (`naive = false`) or HO-Naive (`naive = true`), with T2 starting at
    /// `initial_t2_ns` until handovers teach it. `fallback_a1` enables fallback 1.
    pub fn new(naive: bool, initial_t2_ns: u64, fallback_a1: bool) -> Self {
        Predictor {
            naive,
            fallback_a1,
            t2_ns: initial_t2_ns as f64,
            t2_samples: 0,
            pending: None,
        }
    }

    /// T2: the mean interval between the predicting report and the handover command, as
    /// learned so far (ns).
    pub fn t2_ns(&self) -> u64 {
        self.t2_ns as u64
    }

    /// The standing prediction.
    pub fn pending(&self) -> Option<&Prediction> {
        self.pending.as_ref()
    }

    /// Ends a prediction standing at `now` whose 2·T2 ran out (fallback 2).
    ///
    /// M2HO Sec. 4.2: "A handover command is not received within 2·T2 after prediction,
    /// where T2 is the average interval between the measurement event and handover
    /// command as recorded by M2HO. This indicates a mis-prediction and a handover is
    /// unlikely to happen."
    pub fn expire(&mut self, now: u64) -> Option<Prediction> {
        let p = self.pending.as_ref()?;
        if now < p.t_ns.saturating_add(2 * self.t2_ns()) {
            return None;
        }
        let deadline = p.t_ns.saturating_add(2 * self.t2_ns());
        self.end(Outcome::Expired, deadline)
    }

    /// When the standing prediction expires, if one stands.
    pub fn deadline_ns(&self) -> Option<u64> {
        self.pending
            .as_ref()
            .map(|p| p.t_ns.saturating_add(2 * self.t2_ns()))
    }

    fn end(&mut self, outcome: Outcome, at: u64) -> Option<Prediction> {
        let mut p = self.pending.take()?;
        p.outcome = Some(outcome);
        p.ended_ns = Some(at);
        Some(p)
    }

    /// A measurement report at `now`. Returns `(new, ended)`: a prediction it makes, and
    /// one it ends (fallback 1: an A1 report cancels the standing prediction).
    #[allow(clippy::too_many_arguments)]
    pub fn on_report(
        &mut self,
        now: u64,
        event: MeasEvent,
        serving: CellId,
        serving_rat: RadioType,
        measured: Option<(CellId, RadioType)>,
    ) -> (Option<Prediction>, Option<Prediction>) {
        let mut ended = self.expire(now);
        //= M2HO: Mitigating the Adverse Effects of 5G Handovers on TCP, Section 4.2
        //# 1) An A1 event is generated after prediction, since A1 indicates a good signal
        //# quality from the serving cell.
        if self.fallback_a1 && !self.naive && event == MeasEvent::A1 && self.pending.is_some() {
            ended = self.end(Outcome::CancelledByA1, now);
            return (None, ended);
        }
        if self.pending.is_some() {
            return (None, ended);
        }
        let rule = algorithm1(event, serving_rat, measured.map(|m| m.1));
        if rule.is_none() && !self.naive {
            return (None, ended);
        }
        let p = Prediction {
            t_ns: now,
            event,
            rule,
            serving,
            serving_rat,
            target_hint: measured.map(|m| m.0),
            target_hint_rat: measured.map(|m| m.1),
            outcome: None,
            ended_ns: None,
        };
        self.pending = Some(p.clone());
        (Some(p), ended)
    }

    /// A handover command at `now`: returns the prediction it confirms (if one stood) and
    /// learns T2 from it, or `None` for an unpredicted handover. An expired prediction is
    /// returned as the second value.
    pub fn on_command(&mut self, now: u64) -> (Option<Prediction>, Option<Prediction>) {
        let expired = self.expire(now);
        let Some(p) = self.pending.as_ref() else {
            return (None, expired);
        };
        let sample = now.saturating_sub(p.t_ns) as f64;
        self.t2_samples += 1;
        // The running mean of the recorded intervals; the initial value counts as one.
        self.t2_ns += (sample - self.t2_ns) / (self.t2_samples + 1) as f64;
        (self.end(Outcome::Handover, now), expired)
    }

    /// Forgets a standing prediction without an outcome (the link went down).
    pub fn abandon(&mut self, now: u64) -> Option<Prediction> {
        self.end(Outcome::Expired, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MeasEvent::*;
    use RadioType::{Lte, NrFr1 as Sub6, NrFr2 as Mmw};

    /// Every branch of Algorithm 1.
    #[test]
    fn algorithm1_branches() {
        // Line 3: A3 with a measured cell of the serving type, both kinds.
        assert_eq!(algorithm1(A3, Sub6, Some(Sub6)), Some(Rule::A3SameType));
        assert_eq!(algorithm1(A3, Mmw, Some(Mmw)), Some(Rule::A3SameType));
        // A3 across types is not line 3, and no other line takes it.
        assert_eq!(algorithm1(A3, Sub6, Some(Mmw)), None);
        assert_eq!(algorithm1(A3, Mmw, Some(Sub6)), None);
        assert_eq!(algorithm1(A3, Sub6, None), None);
        // Lines 4-6: sub-6 serving: B1 (any measured cell), A5 only towards mmWave.
        assert_eq!(algorithm1(B1, Sub6, Some(Mmw)), Some(Rule::B1FromSub6));
        assert_eq!(algorithm1(B1, Lte, Some(Sub6)), Some(Rule::B1FromSub6));
        assert_eq!(algorithm1(A5, Sub6, Some(Mmw)), Some(Rule::A5ToMmwave));
        assert_eq!(algorithm1(A5, Sub6, Some(Sub6)), None);
        assert_eq!(algorithm1(A5, Sub6, None), None);
        // Line 7: mmWave serving: A2 only.
        assert_eq!(algorithm1(A2, Mmw, None), Some(Rule::A2FromMmwave));
        assert_eq!(algorithm1(B1, Mmw, Some(Sub6)), None);
        assert_eq!(algorithm1(A5, Mmw, Some(Mmw)), None);
        // Line 8: everything else.
        assert_eq!(algorithm1(A2, Sub6, None), None);
        for e in [A1, A4, B2] {
            for s in [Sub6, Mmw, Lte] {
                for m in [None, Some(Sub6), Some(Mmw)] {
                    assert_eq!(algorithm1(e, s, m), None, "{e:?} {s:?} {m:?}");
                }
            }
        }
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn confirmed_prediction_teaches_t2() {
        let mut p = Predictor::new(false, 100 * MS, true);
        let (new, _) = p.on_report(0, A3, CellId(1), Sub6, Some((CellId(2), Sub6)));
        assert!(new.is_some());
        // A second report while one stands is no new prediction.
        assert!(
            p.on_report(10 * MS, A3, CellId(1), Sub6, Some((CellId(2), Sub6)))
                .0
                .is_none()
        );
        let (hit, _) = p.on_command(160 * MS);
        let hit = hit.unwrap();
        assert_eq!(hit.outcome, Some(Outcome::Handover));
        assert_eq!(hit.target_hint, Some(CellId(2)));
        // Running mean of the initial 100 ms and the 160 ms sample.
        assert_eq!(p.t2_ns(), 130 * MS);
        assert!(p.pending().is_none());
    }

    #[test]
    fn fallback_a1_cancels() {
        let mut p = Predictor::new(false, 100 * MS, true);
        p.on_report(0, A2, CellId(9), Mmw, None);
        let (new, ended) = p.on_report(50 * MS, A1, CellId(9), Mmw, None);
        assert!(new.is_none());
        assert_eq!(ended.unwrap().outcome, Some(Outcome::CancelledByA1));
        // A command now is an unpredicted handover.
        assert!(p.on_command(60 * MS).0.is_none());
        // Without fallback 1 the A1 changes nothing.
        let mut p = Predictor::new(false, 100 * MS, false);
        p.on_report(0, A2, CellId(9), Mmw, None);
        assert_eq!(p.on_report(50 * MS, A1, CellId(9), Mmw, None), (None, None));
        assert!(p.pending().is_some());
    }

    #[test]
    fn fallback_two_t2_expires() {
        let mut p = Predictor::new(false, 100 * MS, true);
        p.on_report(0, B1, CellId(1), Sub6, Some((CellId(7), Mmw)));
        assert_eq!(p.deadline_ns(), Some(200 * MS));
        assert!(p.expire(199 * MS).is_none());
        let e = p.expire(200 * MS).unwrap();
        assert_eq!(e.outcome, Some(Outcome::Expired));
        assert_eq!(e.ended_ns, Some(200 * MS));
        // A late command is not credited to it, and T2 is unchanged.
        assert!(p.on_command(250 * MS).0.is_none());
        assert_eq!(p.t2_ns(), 100 * MS);
        // A command after the deadline, with no call in between, still finds it expired.
        p.on_report(300 * MS, B1, CellId(1), Sub6, Some((CellId(7), Mmw)));
        let (hit, expired) = p.on_command(600 * MS);
        assert!(hit.is_none());
        assert_eq!(expired.unwrap().outcome, Some(Outcome::Expired));
    }

    #[test]
    fn naive_takes_any_report() {
        let mut p = Predictor::new(true, 100 * MS, true);
        let (new, _) = p.on_report(0, A4, CellId(1), Sub6, Some((CellId(2), Sub6)));
        assert_eq!(new.unwrap().rule, None);
        // HO-Naive has no A1 fallback: an A1 is just another report.
        let (new, ended) = p.on_report(10 * MS, A1, CellId(1), Sub6, None);
        assert!(new.is_none() && ended.is_none());
    }
}
