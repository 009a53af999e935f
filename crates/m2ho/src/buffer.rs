//! Buffer estimation from resource-block bursts (M2HO Sec. 4.3), kept per cell.
//
//= M2HO: Mitigating the Adverse Effects of 5G Handovers on TCP, Section 4.3
//# The beginning of the burst is marked by a time slot when RBs are fully allocated to the
//# user. The burst ends with a time slot with partially allocated RBs followed by one with
//# none.

use crate::predict::is_mmwave;
use polypath_link::{CellId, RadioType};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Thresholds of a burst's slots (M2HO footnote 3, after BurstTracker).
#[derive(Debug, Copy, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct BurstThresholds {
    /// A slot is fully allocated above this share of the carrier's RBs (0.9).
    pub full: f64,
    /// A slot is partially allocated below this share (0.4).
    pub partial: f64,
}

impl Default for BurstThresholds {
    fn default() -> Self {
        //= M2HO: Mitigating the Adverse Effects of 5G Handovers on TCP, Section 4.3
        //# we define a time slot as “fully” assigned if more than 90% of the RBs are
        //# assigned to the UE, and partially assigned if less than 40% of the RBs are
        //# assigned to the UE.
        BurstThresholds {
            full: 0.9,
            partial: 0.4,
        }
    }
}

/// A completed burst.
#[derive(Debug, Copy, Clone, PartialEq, Eq, Serialize)]
pub struct Burst {
    /// The cell.
    pub cell: CellId,
    /// First slot.
    pub first_slot: u64,
    /// Slots in the burst (full to the last partial one).
    pub slots: u32,
    /// Bytes delivered in the burst: a lower bound on what the cell buffered for the UE.
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy)]
struct Open {
    cell: CellId,
    first_slot: u64,
    last_slot: u64,
    slots: u32,
    bytes: u64,
    last_partial: bool,
}

/// Finds bursts in a cell's per-slot allocations to the UE.
#[derive(Debug, Clone, Default)]
pub struct BurstDetector {
    thresholds: BurstThresholds,
    open: Option<Open>,
}

impl BurstDetector {
    /// A detector with these thresholds.
    pub fn new(thresholds: BurstThresholds) -> Self {
        BurstDetector {
            thresholds,
            open: None,
        }
    }

    /// One slot's allocation; returns the burst it completes. Slots not reported between
    /// two reported ones (a jump in slot numbers) had no allocation.
    pub fn slot(
        &mut self,
        cell: CellId,
        slot: u64,
        rbs: u16,
        total_rbs: u16,
        bytes: u32,
    ) -> Option<Burst> {
        let total = f64::from(total_rbs.max(1));
        let share = f64::from(rbs) / total;
        let full = share > self.thresholds.full;
        let partial = rbs > 0 && share < self.thresholds.partial;
        if let Some(o) = self.open {
            let gap = slot > o.last_slot + 1;
            if o.cell != cell || slot <= o.last_slot {
                // Another cell, or time went back: start over.
                self.open = None;
            } else if rbs == 0 || gap {
                self.open = None;
                if o.last_partial {
                    let done = Burst {
                        cell,
                        first_slot: o.first_slot,
                        slots: o.slots,
                        bytes: o.bytes,
                    };
                    // A jump may land on a full slot that starts the next burst.
                    if gap && full {
                        self.start(cell, slot, bytes);
                    }
                    return Some(done);
                }
                // Cut without a partial slot: the buffer was not drained, no estimate.
                if gap && full {
                    self.start(cell, slot, bytes);
                }
                return None;
            } else {
                let o = self.open.as_mut().expect("open");
                o.last_slot = slot;
                o.slots += 1;
                o.bytes += u64::from(bytes);
                o.last_partial = partial;
                return None;
            }
        }
        if full {
            self.start(cell, slot, bytes);
        }
        None
    }

    fn start(&mut self, cell: CellId, slot: u64, bytes: u32) {
        self.open = Some(Open {
            cell,
            first_slot: slot,
            last_slot: slot,
            slots: 1,
            bytes: u64::from(bytes),
            last_partial: false,
        });
    }

    /// Forgets a burst in progress.
    pub fn reset(&mut self) {
        self.open = None;
    }
}

/// Per-cell buffer estimates: the largest burst seen on each cell (ŝ_max, a lower bound on
/// its buffer s_max), and the estimate M2HO uses for a handover target.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BufferEstimates {
    /// Largest burst per cell, bytes.
    pub per_cell: BTreeMap<CellId, u64>,
    /// The type of each cell seen.
    #[serde(skip)]
    pub cell_rat: BTreeMap<CellId, RadioType>,
}

impl BufferEstimates {
    /// Notes a cell's type.
    pub fn learn_rat(&mut self, cell: CellId, rat: RadioType) {
        self.cell_rat.insert(cell, rat);
    }

    /// Records a burst; returns true when it raised the cell's estimate.
    ///
    /// M2HO Sec. 4.3: "M2HO keeps counting the data in each burst period, and updates the
    /// lower bound on the buffer if the new estimate is larger than the previous estimate".
    pub fn record(&mut self, burst: &Burst) -> bool {
        let e = self.per_cell.entry(burst.cell).or_insert(0);
        if burst.bytes > *e {
            *e = burst.bytes;
            true
        } else {
            false
        }
    }

    /// The estimates as a database (cells in ID order).
    pub fn to_db(&self) -> BufferDb {
        BufferDb {
            cells: self
                .per_cell
                .iter()
                .map(|(cell, bytes)| BufferDbCell {
                    cell: *cell,
                    rat: self.cell_rat.get(cell).copied(),
                    bytes: *bytes,
                })
                .collect(),
        }
    }

    /// Takes what a database remembers: each cell's estimate rises to the database's when
    /// that is larger (an estimate is a lower bound: the largest burst ever seen), and cells
    /// of known type keep the type this run has seen, if any.
    pub fn remember(&mut self, db: &BufferDb) {
        for c in &db.cells {
            let e = self.per_cell.entry(c.cell).or_insert(0);
            *e = (*e).max(c.bytes);
            if let Some(rat) = c.rat {
                self.cell_rat.entry(c.cell).or_insert(rat);
            }
        }
    }

    /// Smallest estimate among cells of type `rat`.
    fn min_of_type(&self, rat: RadioType) -> Option<u64> {
        self.per_cell
            .iter()
            .filter(|(c, _)| self.cell_rat.get(c) == Some(&rat))
            .map(|(_, b)| *b)
            .min()
    }

    /// Smallest estimate among sub-6 GHz cells (NR FR1 and LTE).
    fn min_sub6(&self) -> Option<u64> {
        self.per_cell
            .iter()
            .filter(|(c, _)| {
                self.cell_rat
                    .get(c)
                    .is_some_and(|r| crate::predict::is_sub6(*r))
            })
            .map(|(_, b)| *b)
            .min()
    }

    /// The buffer estimate for a handover to `target` (if known) of type `target_rat` (if
    /// known), `None` when nothing applies.
    ///
    /// * A mmWave target: the smallest sub-6 GHz estimate. M2HO Sec. 4.3: "M2HO assumes
    ///   mmWave cell’s buffer is no smaller than a sub-6GHz’s buffer" and "uses the minimum
    ///   buffer size of the sub-6GHz cells as a safe estimate" (bursts cannot be told apart
    ///   in mmWave cells, whose beams are not shared).
    /// * A cell with an estimate: its estimate.
    /// * Otherwise: the smallest estimate of cells of the same type ("uses the minimum
    ///   buffer size of the same cell type in the history as a conservative estimate").
    pub fn estimate(&self, target: Option<CellId>, target_rat: Option<RadioType>) -> Option<u64> {
        let rat = target_rat.or_else(|| target.and_then(|c| self.cell_rat.get(&c).copied()));
        if rat.is_some_and(is_mmwave) {
            return self.min_sub6();
        }
        if let Some(e) = target.and_then(|c| self.per_cell.get(&c)) {
            return Some(*e);
        }
        rat.and_then(|r| self.min_of_type(r))
    }
}

//= M2HO: Mitigating the Adverse Effects of 5G Handovers on TCP, Section 4.3
//# M2HO also records the cell ID and stores its buffer size in the local database. When a
//# handover happens, M2HO reads the target cell ID and gets the buffer size estimate from
//# the history.
/// The local database of buffer estimates as a file, so that the history outlives one run
/// of the daemon: `{"cells": [{"cell": 10, "rat": "nr_fr1", "bytes": 150000}, ...]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferDb {
    /// One entry per cell.
    pub cells: Vec<BufferDbCell>,
}

/// One cell of a [`BufferDb`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferDbCell {
    /// The cell.
    pub cell: CellId,
    /// Its type, when known (the estimate for an unknown cell takes the smallest of its
    /// type, and a mmWave target the smallest sub-6 GHz one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rat: Option<RadioType>,
    /// The largest burst seen on it, bytes.
    pub bytes: u64,
}

impl BufferDb {
    /// Reads a database file; a missing file is an empty database. Errors name the file,
    /// and the line, column and field (or cell) at fault.
    pub fn load(path: &Path) -> Result<BufferDb, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BufferDb::default()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let db: BufferDb = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{}: line {} column {}: {e}",
                path.display(),
                e.line(),
                e.column()
            )
        })?;
        let mut seen = std::collections::BTreeSet::new();
        for c in &db.cells {
            if !seen.insert(c.cell) {
                return Err(format!(
                    "{}: cell {}: listed twice",
                    path.display(),
                    c.cell.0
                ));
            }
            if c.bytes == 0 {
                return Err(format!(
                    "{}: cell {}: bytes must be positive",
                    path.display(),
                    c.cell.0
                ));
            }
        }
        Ok(db)
    }

    /// Writes the database atomically (a temporary file renamed over `path`).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        crate::write_json_atomically(path, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: CellId = CellId(3);

    /// Feeds `(rbs, bytes)` per consecutive slot from slot 100; returns completed bursts.
    fn feed(d: &mut BurstDetector, slots: &[(u16, u32)]) -> Vec<Burst> {
        slots
            .iter()
            .enumerate()
            .filter_map(|(i, (rbs, b))| d.slot(C, 100 + i as u64, *rbs, 106, *b))
            .collect()
    }

    #[test]
    fn full_then_partial_then_empty_is_a_burst() {
        let mut d = BurstDetector::default();
        let b = feed(
            &mut d,
            &[
                (106, 10_000),
                (100, 9_500),
                (60, 5_000),
                (20, 1_000),
                (0, 0),
            ],
        );
        assert_eq!(
            b,
            vec![Burst {
                cell: C,
                first_slot: 100,
                slots: 4,
                bytes: 25_500
            }]
        );
    }

    #[test]
    fn thresholds_are_strict() {
        // 96/106 = 0.906 is full, 95/106 = 0.896 is not; 42/106 = 0.396 is partial,
        // 43/106 = 0.406 is not.
        let mut d = BurstDetector::default();
        assert!(
            feed(&mut d, &[(95, 1), (42, 1), (0, 0)]).is_empty(),
            "no full start"
        );
        let mut d = BurstDetector::default();
        assert!(
            feed(&mut d, &[(96, 1), (43, 1), (0, 0)]).is_empty(),
            "no partial end"
        );
        let mut d = BurstDetector::default();
        assert_eq!(feed(&mut d, &[(96, 1), (42, 1), (0, 0)]).len(), 1);
    }

    #[test]
    fn cut_bursts_and_partial_starts_give_nothing() {
        let mut d = BurstDetector::default();
        // Full slots then nothing (the cell turned to other UEs): not drained.
        assert!(feed(&mut d, &[(106, 10), (106, 10), (0, 0)]).is_empty());
        // A burst that starts partial (the UE's data trickled in) is not a burst.
        assert!(feed(&mut d, &[(20, 10), (10, 10), (0, 0)]).is_empty());
        // A partial slot in the middle does not end it: only partial then empty does.
        let b = feed(&mut d, &[(106, 10), (20, 5), (106, 10), (10, 2), (0, 0)]);
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].slots, b[0].bytes), (4, 27));
    }

    #[test]
    fn slot_jump_counts_as_empty() {
        let mut d = BurstDetector::default();
        assert!(d.slot(C, 10, 106, 106, 100).is_none());
        assert!(d.slot(C, 11, 30, 106, 30).is_none());
        // Slot 12 not reported; 20 starts the next burst.
        let b = d.slot(C, 20, 106, 106, 100).unwrap();
        assert_eq!(b.bytes, 130);
        assert!(d.slot(C, 21, 5, 106, 5).is_none());
        assert_eq!(d.slot(C, 22, 0, 106, 0).unwrap().bytes, 105);
        // Another cell's slot breaks a burst in progress.
        d.slot(C, 30, 106, 106, 100);
        assert!(d.slot(CellId(4), 31, 5, 106, 5).is_none());
        assert!(d.slot(CellId(4), 32, 0, 106, 0).is_none());
    }

    /// A synthetic RB sequence from a burst-clearing scheduler: the buffer holds `q` bytes
    /// when the burst starts; full slots carry 10 600 bytes (100 per RB), the last slot
    /// the rest. A burst whose last slot is not partial (30 000 bytes end with 88 RBs) is
    /// not recognised; the others measure exactly `q`.
    #[test]
    fn synthetic_scheduler_bursts_measure_the_queue() {
        let mut d = BurstDetector::default();
        let mut est = BufferEstimates::default();
        est.learn_rat(C, RadioType::NrFr1);
        let mut slot = 0u64;
        let mut seen = Vec::new();
        for q in [25_000u64, 110_000, 30_000, 45_000, 75_000] {
            let mut left = q;
            while left > 0 {
                let b = left.min(10_600);
                let rbs = ((b as f64 / 100.0).ceil() as u16).min(106);
                if let Some(burst) = d.slot(C, slot, rbs, 106, b as u32) {
                    est.record(&burst);
                }
                left -= b;
                slot += 1;
            }
            if let Some(burst) = d.slot(C, slot, 0, 106, 0) {
                seen.push(burst.bytes);
                est.record(&burst);
            }
            slot += 7;
        }
        assert_eq!(seen, vec![25_000, 110_000, 45_000, 75_000]);
        assert_eq!(est.per_cell[&C], 110_000, "the largest burst");
    }

    #[test]
    fn estimate_rules() {
        let mut e = BufferEstimates::default();
        for (c, rat, b) in [
            (1, RadioType::NrFr1, 300_000),
            (2, RadioType::NrFr1, 200_000),
            (3, RadioType::NrFr2, 900_000),
        ] {
            e.learn_rat(CellId(c), rat);
            e.record(&Burst {
                cell: CellId(c),
                first_slot: 0,
                slots: 1,
                bytes: b,
            });
        }
        // A known sub-6 cell: its own estimate.
        assert_eq!(
            e.estimate(Some(CellId(1)), Some(RadioType::NrFr1)),
            Some(300_000)
        );
        // An unknown sub-6 cell: the smallest sub-6 estimate.
        assert_eq!(
            e.estimate(Some(CellId(8)), Some(RadioType::NrFr1)),
            Some(200_000)
        );
        // Any mmWave cell, even one with bursts of its own: the smallest sub-6 estimate.
        assert_eq!(
            e.estimate(Some(CellId(3)), Some(RadioType::NrFr2)),
            Some(200_000)
        );
        assert_eq!(e.estimate(None, Some(RadioType::NrFr2)), Some(200_000));
        // The type learnt earlier is used when the caller does not know it.
        assert_eq!(e.estimate(Some(CellId(3)), None), Some(200_000));
        // Nothing known of a type.
        assert_eq!(e.estimate(None, Some(RadioType::Lte)), None);
        assert_eq!(e.estimate(None, None), None);
        // Smaller bursts do not lower an estimate.
        assert!(!e.record(&Burst {
            cell: CellId(1),
            first_slot: 5,
            slots: 1,
            bytes: 1
        }));
    }

    /// A scratch path of this test process.
    fn scratch(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("m2ho-buffer-db-{}-{name}", std::process::id()))
    }

    #[test]
    fn the_database_carries_estimates_to_the_next_run() {
        let path = scratch("carry.json");
        let _ = std::fs::remove_file(&path);
        // A missing file is an empty history.
        assert_eq!(BufferDb::load(&path).unwrap(), BufferDb::default());
        let mut first = BufferEstimates::default();
        first.learn_rat(CellId(1), RadioType::NrFr1);
        first.learn_rat(CellId(2), RadioType::NrFr2);
        for (cell, bytes) in [(1, 150_000), (2, 900_000), (7, 40_000)] {
            first.record(&Burst {
                cell: CellId(cell),
                first_slot: 0,
                slots: 10,
                bytes,
            });
        }
        first.to_db().save(&path).unwrap();
        let db = BufferDb::load(&path).unwrap();
        assert_eq!(db, first.to_db());
        assert_eq!(db.cells[2].rat, None, "cell 7's type was never seen");

        // The next run has seen cell 1 with a smaller burst: the database's larger one wins,
        // and a handover to cell 1 or to an unseen mmWave cell finds the history.
        let mut next = BufferEstimates::default();
        next.record(&Burst {
            cell: CellId(1),
            first_slot: 0,
            slots: 10,
            bytes: 90_000,
        });
        assert_eq!(
            next.estimate(Some(CellId(1)), Some(RadioType::NrFr1)),
            Some(90_000)
        );
        next.remember(&db);
        assert_eq!(next.estimate(Some(CellId(1)), None), Some(150_000));
        assert_eq!(
            next.estimate(Some(CellId(9)), Some(RadioType::NrFr2)),
            Some(150_000)
        );
        assert_eq!(next.to_db(), db);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_bad_database_names_the_file_and_the_fault() {
        let cases = [
            (
                "{\"cells\": [{\"cell\": 1, \"bytes\": 5}],\n \"extra\": 1}",
                "line 2",
            ),
            (
                "{\"cells\": [{\"cell\": 1, \"rat\": \"nr_fr9\", \"bytes\": 5}]}",
                "nr_fr9",
            ),
            (
                "{\"cells\": [{\"cell\": 1, \"bytes\": 0}]}",
                "cell 1: bytes must be positive",
            ),
            (
                "{\"cells\": [{\"cell\": 4, \"bytes\": 5}, {\"cell\": 4, \"bytes\": 6}]}",
                "cell 4: listed twice",
            ),
            ("{\"cells\": [{\"cell\": 1}]}", "missing field `bytes`"),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let path = scratch(&format!("bad-{i}.json"));
            std::fs::write(&path, text).unwrap();
            let err = BufferDb::load(&path).unwrap_err();
            let _ = std::fs::remove_file(&path);
            assert!(err.starts_with(&path.display().to_string()), "{err}");
            assert!(err.contains(want), "{err} lacks {want}");
        }
    }
}
