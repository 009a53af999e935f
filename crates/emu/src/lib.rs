//! # polypath-emu
//!
//! The real-time network emulator: real sockets and real time, as opposed to the
//! deterministic simulator (`polypath-sim`).
//!
//! For now the crate holds the emulator's traffic tool, [`tcp`]: an iperf3-like TCP bulk
//! sender and receiver that can use kernel MPTCP and a chosen kernel congestion controller
//! and reports goodput, round-trip time, congestion window, retransmissions and MPTCP
//! subflows per interval (Linux only). `polypath tcp send` / `polypath tcp recv` run it from
//! the command line.
#![warn(missing_docs)]

pub mod tcp;
