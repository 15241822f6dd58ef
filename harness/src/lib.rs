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
//! - `context`: the real-prompt context scan, its `aN + bN²` fit and Figure 7 (MEASUREMENTS.md §3).
//! - `ceilings`, `dense`: kernel-level experiments run in-process against the engine crate
//!   (memory and FMA ceilings; dense blocks as fused slices vs three matrix calls), with `host`
//!   (machine facts).
//! - `stats`: quantiles, means and timing summaries every experiment shares.
//! - `draft`: the captured-state draft replay: capture corpus, fitted head, replay, Table 6 and
//!   Figure 8 (MEASUREMENTS.md §5).
//! - `speculation`: the paper's Table 3, speculation off against on, the first-order model
//!   (MEASUREMENTS.md §6).
//! - `bench_table`: the engine's criterion kernel benchmarks against those ceilings (`kernels.csv`,
//!   `kernels.md`).

pub mod analysis;
pub mod bench_table;
pub mod ceilings;
pub mod claims;
pub mod context;
pub mod csv;
pub mod dense;
pub mod draft;
pub mod driver;
pub mod figures;
pub mod host;
pub mod peer;
pub mod report;
pub mod speculation;
pub mod stats;
pub mod trace;
pub mod workload;
