//! Tests of [`Streams`](super::Streams).
