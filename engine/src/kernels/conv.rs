//! Causal depthwise short convolution of one position (ARCHITECTURE.md §1.1):
//! `y_c = u_c + Σ_{j=0..K−1} w[c, j] · u_{t−j, c}`, the residual inside the module.
//!
//! The fast form keeps the taps transposed ([K, channels]) so each tap is one contiguous, vectorised
//! pass over the channels; it performs the same additions in the same order as the reference, so
//! the two agree bit for bit.

/// Taps of one convolution, both layouts.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvTaps {
    pub channels: usize,
    pub k: usize,
    /// [channels, K] as stored.
    pub taps: Vec<f32>,
    /// [K, channels] for the vectorised pass.
    taps_t: Vec<f32>,
}

impl ConvTaps {
    pub fn new(channels: usize, k: usize, taps: Vec<f32>) -> Self {
        assert_eq!(taps.len(), channels * k);
        let mut taps_t = vec![0.0; channels * k];
        for c in 0..channels {
            for j in 0..k {
                taps_t[j * channels + c] = taps[c * k + j];
            }
        }
        ConvTaps {
            channels,
            k,
            taps,
            taps_t,
        }
    }

    /// `y = conv(u)` given `hist[j − 1] = u_{t−j}` for j = 1..K−1.
    pub fn apply(&self, u: &[f32], hist: &[&[f32]], y: &mut [f32]) {
        let n = self.channels;
        let t0 = &self.taps_t[..n];
        for c in 0..n {
            y[c] = u[c] + t0[c] * u[c];
        }
        for j in 1..self.k {
            let tj = &self.taps_t[j * n..(j + 1) * n];
            let h = hist[j - 1];
            for c in 0..n {
                y[c] += tj[c] * h[c];
            }
        }
    }
}
