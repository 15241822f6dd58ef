//! The driver: the SSE client and the sweep that replays plans.

pub mod client;
pub mod sweep;
