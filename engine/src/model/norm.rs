//! RMSNorm: `y = x / sqrt(mean(x²) + eps) · w` (ARCHITECTURE.md §1.1).

/// Normalise each row of x ([rows, w.len()]) into y.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let n = w.len();
    for (xr, yr) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)) {
        let ss: f32 = xr.iter().map(|v| v * v).sum();
        let inv = 1.0 / (ss / n as f32 + eps).sqrt();
        for i in 0..n {
            yr[i] = xr[i] * inv * w[i];
        }
    }
}

/// In place.
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let n = w.len();
    for xr in x.chunks_exact_mut(n) {
        let ss: f32 = xr.iter().map(|v| v * v).sum();
        let inv = 1.0 / (ss / n as f32 + eps).sqrt();
        for i in 0..n {
            xr[i] = xr[i] * inv * w[i];
        }
    }
}
