//! The paper's network as the simulator models it: gigabit Ethernet (`hardware.json`: 1000 Mb/s
//! NICs) and the one-way latency assumed for it, which the paper does not publish. Used by `paper`
//! and by the scenarios of `predict` that put a fleet on the same network.

/// Gigabit Ethernet, and the one-way latency assumed for it through one switch.
pub const RATE_BPS: f64 = 1e9;
pub const LATENCY_S: f64 = 0.0002;
