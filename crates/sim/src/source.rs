//! External drivers of link capacity and availability.
//!
//! A [`LinkSource`] is a time-ordered stream of simple changes (rate, up/down, delay,
//! loss) for named links. The 5G radio model is not one of them: it needs to see the
//! links' queues (context release, target buffers, per-slot scheduling) and to hear
//! what they delivered, so the simulator drives it itself for links with a `radio`
//! key (see `crate::radio`), and refuses sources that touch such links.

use std::time::Duration;

use polypath_scenario::LossModel;

use crate::time::SimTime;

/// Which direction(s) of a link an update touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkDirSel {
    /// Side A to side B.
    Up,
    /// Side B to side A.
    Down,
    /// Both.
    Both,
}

/// A change to apply to a link.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkChange {
    /// New service rate in bit/s (replaces any schedule or trace).
    Rate(f64),
    /// The link comes back up.
    Up,
    /// The link goes down (queue handled by its outage policy).
    Down,
    /// New propagation delay.
    Delay(Duration),
    /// New random-loss model.
    Loss(LossModel),
}

/// One timed change from an external source.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkUpdate {
    /// When it applies.
    pub at: SimTime,
    /// The link's name in the scenario.
    pub link: String,
    /// Which direction(s).
    pub dir: LinkDirSel,
    /// What changes.
    pub change: LinkChange,
}

/// A time-ordered stream of link changes, pulled lazily by the simulator.
///
/// Links whose rate is `{ source = "NAME" }` need a source with that `name`;
/// a source may also change other links (delay, loss, up/down). Updates must
/// come in non-decreasing time order; one earlier than the current simulated
/// time applies at the current time.
pub trait LinkSource {
    /// The name scenario links use to refer to this source.
    fn name(&self) -> &str;
    /// The next update, or `None` when there are no more.
    fn next_update(&mut self) -> Option<LinkUpdate>;
}

/// A [`LinkSource`] over a prepared list of updates (sorted on creation).
#[derive(Debug, Clone)]
pub struct ScheduledSource {
    name: String,
    updates: std::vec::IntoIter<LinkUpdate>,
}

impl ScheduledSource {
    /// A source named `name` replaying `updates` in time order (stable for
    /// equal times).
    pub fn new(name: impl Into<String>, mut updates: Vec<LinkUpdate>) -> Self {
        updates.sort_by_key(|u| u.at);
        Self {
            name: name.into(),
            updates: updates.into_iter(),
        }
    }
}

impl LinkSource for ScheduledSource {
    fn name(&self) -> &str {
        &self.name
    }
    fn next_update(&mut self) -> Option<LinkUpdate> {
        self.updates.next()
    }
}
