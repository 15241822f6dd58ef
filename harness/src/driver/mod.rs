//! The driver: the SSE client, the handle on the server under test, and the sweep that replays
//! plans.

pub mod client;
pub mod server;
pub mod sweep;
