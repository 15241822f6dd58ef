//! moefleet-harness: the measurement lab. It replays the Cascadia experiments against moefleet or
//! any OpenAI-compatible server and derives every table from token traces.
//!
//! - `workload`: prompt families, deterministic prompt keys, sweep plans (data in `workloads/`).
//! - `driver`: the SSE client (request -> trace record), the handle on the server under test
//!   (stats, profile, idle gate) and the sweep (phases, cohorts, audit).
//! - `trace`: record types and their files; `csv`: the CSV tables and their Parquet twins.
//! - `load`: open-loop load (constant, Poisson, gamma arrivals; a ramp; a cap) and per-token latency,
//!   goodput (`moefleet-harness run`).
//! - `analysis`: records to tables (polars, with a plain-loop reference).
//! - `stats`: quantiles, means and timing summaries every experiment shares; `host`: machine facts;
//!   `json`: the JSON records' writer;
//!   `memo`: results remembered by the digest of their inputs (verify's refits and parses).
//! - `experiments`: one folder per experiment beyond the sweep (context, dense, ceilings, kernel
//!   benchmarks, draft replay, speculation, the side-by-side with llama.cpp).
//! - `figures`: one file per figure and their shared style; they read tables only.
//! - `report`: REPORT.md of a run.
//! - `reliability`: faults under load, the soak, and the reliability table from their records.
//! - `claims`: CLAIMS.md, its machine-readable form, and `verify`.

/// What `moefleet-harness --version` prints after its name: the package version and the commit
/// this harness was built from (`-dirty` with uncommitted changes; `engine/build.rs`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("MOEFLEET_BUILD_COMMIT"),
    ")"
);

/// The commit this harness was built from, for records.
pub const BUILD_COMMIT: &str = env!("MOEFLEET_BUILD_COMMIT");

pub mod analysis;
pub mod claims;
pub mod csv;
pub mod driver;
pub mod experiments;
pub mod figures;
pub mod host;
pub mod json;
pub mod load;
pub mod memo;
pub mod recheck;
pub mod reliability;
pub mod report;
pub mod simulate;
pub mod stats;
pub mod trace;
pub mod workload;
