//! The records moefleet's engine writes and its harness reads back, declared once. A field that
//! records written before it existed lack is `#[serde(default)]` (or an `Option` where a reader
//! must tell "absent" from zero); the writer always writes every field, in this order.
//!
//! - `frame`: a role's frame records and role 0's reply records (the engine writes them).
//! - `trace`: the harness's records of a drive: one trace per request, cohorts, phases and
//!   `/api/stats` polls.

pub mod frame;
pub mod trace;

pub use frame::{FrameRecord, ReplyOutcome, ReplyRecord};
pub use trace::{ClientCount, CohortRecord, PhaseRecord, StatsPoll, TraceRecord};
