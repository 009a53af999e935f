//! Connection tests: a client and a server endpoint exchanging datagrams over an in-memory
//! network with a virtual clock, optional loss and per-path delays (the harness is
//! [`crate::testing`]).

mod attacks;
mod basic;
mod ecn;
mod initial_flood;
mod multipath;
mod path_manager;
mod preferred_address;
mod versions;
mod violations;

use super::*;
use crate::endpoint::Endpoint;
use crate::{ClientConfig, EndpointConfig, ServerConfig};
use bytes::BytesMut;
use rand::{Rng, SeedableRng};

pub(crate) use crate::testing::*;
