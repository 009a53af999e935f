//! Multipath QUIC: negotiation, opening paths, spreading data, abandoning and losing paths.

use super::*;
