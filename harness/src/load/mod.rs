//! Open-loop load (docs/MEASUREMENTS.md §9), beside the paired concurrency sweep of `driver`:
//!
//! - `arrivals`: when each request is due (constant, Poisson, gamma; a rate or a ramp), seeded.
//! - `drive`: sending them on schedule, optionally capped in concurrency, into trace records.
//! - `latency`: TTFT, TPOT, per-token ITL (right under multi-token chunks), end to end, the
//!   client's send lag, goodput against objectives.

pub mod arrivals;
pub mod drive;
pub mod latency;
