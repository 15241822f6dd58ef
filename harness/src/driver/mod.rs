//! The driver: the SSE client, the handle on the server under test, the sweep that replays plans
//! and its typed run manifest.

pub mod client;
pub mod manifest;
pub mod server;
pub mod sweep;
