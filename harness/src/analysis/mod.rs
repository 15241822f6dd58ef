//! Analysis: pure functions from trace records to tables.

pub mod metrics;
pub mod paper;
pub mod tables;
