//! Captured states (ARCHITECTURE.md §3.4): the last role's record of each stream's residual before
//! the final norm, with positions and token ids, for the offline draft replay (MEASUREMENTS.md §5).
//!
//! - `format`: the file layout, its encoder and its checked reader.
//! - `writer`: the last role's per-slot buffers and the background thread that writes finished
//!   captures, so a slow or full disk never holds up decoding.

pub mod format;
pub mod writer;

pub use format::{Capture, Header, NOT_SAMPLED};
