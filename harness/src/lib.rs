//! moefleet-harness: the measurement lab. It replays the Cascadia experiments against moefleet or
//! any OpenAI-compatible server and derives every table from token traces.
//!
//! - `workload`: prompt families, deterministic prompt keys, sweep plans (data in `workloads/`).
//! - `driver`: the SSE client (request -> trace record) and the sweep (phases, cohorts, audit).
//! - `trace`: record types and their files.
//! - `analysis`: pure functions from records to tables.
//! - `claims`: CLAIMS.md, its machine-readable form, and `verify`.
//! - `figures`: one file per figure; they read tables only.
//! - `report`: REPORT.md of a run.

pub mod analysis;
pub mod claims;
pub mod csv;
pub mod driver;
pub mod figures;
pub mod report;
pub mod trace;
pub mod workload;
