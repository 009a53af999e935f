//! placeholder
#![warn(missing_docs)]
pub mod channel;
pub mod config;
pub mod dist;
pub mod mobility;
pub mod phy;
pub mod rrc;
