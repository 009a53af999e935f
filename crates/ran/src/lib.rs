//! # polypath-ran
//!
//! A 5G radio access model for the polypath simulator (and later the emulator): cells of
//! several technologies, UE mobility, the TR 38.901 UMi-Street Canyon channel, SINR to rate
//! through the TS 38.214 CQI tables, RRC measurement events of TS 38.331, break-before-make
//! handover with the two loss mechanisms measured by M2HO, NR dual connectivity with the
//! inter-MN handover without SN change of TS 37.340, and throughput predictors for LAMP5G.
//!
//! ## Driving the model
//!
//! ```no_run
//! # fn f(cfg: polypath_ran::RadioConfig) -> Result<(), polypath_ran::RadioError> {
//! use polypath_ran::{RadioModel, RadioOutput};
//! let mut model = RadioModel::new(&cfg, 42)?;
//! for p in model.paths() { /* create one simulated link per (p.ue, p.iface) */ }
//! let mut t = 0;
//! while t <= 60_000_000_000 {
//!     for out in model.advance(t) {
//!         match out {
//!             RadioOutput::Link(change) => { /* apply to link (change.ue, change.iface) */ }
//!             RadioOutput::Event(ev) => { /* hand to the UE's transport as a link hint; log */ }
//!         }
//!     }
//!     t = model.next_wakeup_ns();
//! }
//! # Ok(()) }
//! ```
//!
//! Time is virtual: integer nanoseconds since the start of the run. All randomness comes from
//! ChaCha RNGs derived from the seed given to [`RadioModel::new`] (per UE and per purpose, so
//! adding a UE does not change the others' channels). How a link applies
//! [`LinkAction`]s is specified in [`action`]; [`reflink::ReferenceLink`] implements it.
#![warn(missing_docs)]

pub mod action;
pub mod channel;
pub mod config;
pub mod dist;
pub mod mobility;
pub mod model;
pub mod phy;
pub mod predict;
pub mod reflink;
pub mod rrc;

pub use action::{ContextRelease, LinkAction, LinkChange, PacketFate, SlotParams};
pub use config::{ConfigError, RadioConfig};
pub use model::{PathInfo, PathKind, PathState, RadioError, RadioModel, RadioOutput};
