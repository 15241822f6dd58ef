//! RMSNorm as ggml computes it for a checkpoint's layers (the sum of squares in f64), shared by
//! the layer (`layer`), the per-head q/k norms of its attention (`attention`) and the draft head.

/// RMSNorm of each row (`w.len()` values) in place, as ggml computes it: the sum of squares in
/// f64, `scale = 1 / sqrt(mean + eps)` in f32, then `(x · scale) · w`.
/// A prefill window's rows spread over the pool (each row's arithmetic is its own, so the bits do
/// not depend on the split).
pub fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) {
    let n = w.len();
    let one = |row: &mut [f32]| {
        let ss: f64 = row.iter().map(|&v| (v * v) as f64).sum();
        let mean = (ss / n as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for (v, &wi) in row.iter_mut().zip(w) {
            *v = (*v * scale) * wi;
        }
    };
    if x.len() / n.max(1) >= PAR_MIN_ROWS && crate::kernels::threads() > 1 {
        use rayon::prelude::*;
        x.par_chunks_exact_mut(n).for_each(one);
    } else {
        x.chunks_exact_mut(n).for_each(one);
    }
}

/// Rows from which a window's per-row work (norms, routing, rotation, the experts' weighted sum)
/// runs on the pool: with two threads, a pp512 profile of the qwen3moe file on host E found the
/// second thread idle about a quarter of the time while the first did these row by row.
pub const PAR_MIN_ROWS: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_matches_its_definition() {
        let mut x = vec![3.0f32, 4.0];
        rms_norm(&mut x, &[1.0, 2.0], 0.0);
        let r = (12.5f32).sqrt();
        assert!((x[0] - 3.0 / r).abs() < 1e-6 && (x[1] - 8.0 / r).abs() < 1e-6);
    }
}
