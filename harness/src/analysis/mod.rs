//! Analysis: pure functions from trace records to tables. The sweep's tables are computed with
//! polars (`frames`), checked against plain loops over the records (`reference`, through
//! `metrics`).

pub mod frames;
pub mod metrics;
pub mod paper;
pub mod recheck;
pub mod reference;
pub mod run;
pub mod tables;
pub mod unit;
