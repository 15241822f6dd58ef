//! One concurrency level of a validation, measured and simulated (`Level`), and the relative
//! error between the two (`rel`): what `validate` and `paper` compare and the figure draws.

use serde::{Deserialize, Serialize};

/// One level, measured and simulated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub concurrency: usize,
    pub held_out: bool,
    pub q_decode_measured: Option<f64>,
    pub q_decode_simulated: Option<f64>,
    pub ttft_median_measured: Option<f64>,
    pub ttft_median_simulated: Option<f64>,
}

impl Level {
    pub fn q_decode_error(&self) -> Option<f64> {
        rel(self.q_decode_simulated, self.q_decode_measured)
    }
    pub fn ttft_error(&self) -> Option<f64> {
        rel(self.ttft_median_simulated, self.ttft_median_measured)
    }
}

/// (simulated − measured) / measured.
pub fn rel(sim: Option<f64>, measured: Option<f64>) -> Option<f64> {
    match (sim, measured) {
        (Some(s), Some(m)) if m > 0.0 => Some((s - m) / m),
        _ => None,
    }
}
