//! Captured-state multi-token-prediction draft replay (MEASUREMENTS.md §5; the paper's §6, Table 6,
//! Figure 8).
//!
//! - `corpus`: picking prompts, the corpus layout, its checks, loading it back.
//! - `capture`: building a corpus through a moefleet server's API.
//! - `ridge`, `fit`, `descent`: fitting the head to the model from training captures.
//! - `replay`: the head, an untrained head and two baselines over the evaluation captures.
//! - `anchors`: the per-anchor record a replay writes; `stats`: the statistics of it (pure);
//!   `tables`: mtp.csv, chain.csv, table6.md, chain.md.
//! - `run`: the `fit-draft` and `replay` commands.

pub mod anchors;
pub mod capture;
pub mod corpus;
pub mod descent;
pub mod fit;
pub mod recheck;
pub mod replay;
pub mod ridge;
pub mod run;
pub mod stats;
pub mod steps;
pub mod tables;
pub mod unit;
