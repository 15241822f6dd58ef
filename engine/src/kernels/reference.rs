//! Plain f32 reference kernels: the slow twins every fast kernel is tested against. Written for
//! clarity, one scalar loop each; never used on a hot path.

use half::f16;

use super::int4::Int4View;
use super::int8::Int8Matrix;
use super::linear::Linear;

/// `y[r, o] = Σ_c ((q[o, c] − 8) · s[o, c / 32]) · x[r, c]`; x [n, cols], y [n, rows].
pub fn int4_matmul(w: &Int4View<'_>, x: &[f32], y: &mut [f32]) {
    let n = x.len() / w.cols;
    for r in 0..n {
        let xr = &x[r * w.cols..(r + 1) * w.cols];
        for o in 0..w.rows {
            let mut acc = 0.0f32;
            for c in 0..w.cols {
                acc += w.weight(o, c) * xr[c];
            }
            y[r * w.rows + o] = acc;
        }
    }
}

/// `y[r, o] = s[o] · Σ_c q[o, c] · x[r, c]`; x [n, cols], y [n, rows].
pub fn int8_matmul(w: &Int8Matrix, x: &[f32], y: &mut [f32]) {
    let n = x.len() / w.cols;
    for r in 0..n {
        for o in 0..w.rows {
            let mut acc = 0.0f32;
            for c in 0..w.cols {
                acc += w.q[o * w.cols + c] as f32 * x[r * w.cols + c];
            }
            y[r * w.rows + o] = acc * w.scales[o].to_f32();
        }
    }
}

/// `y[r, o] = Σ_c w[o, c] · x[r, c]` for a plain f32 matrix; x [n, cols], y [n, rows].
pub fn linear_matmul(w: &Linear, x: &[f32], y: &mut [f32]) {
    let n = x.len() / w.cols;
    for r in 0..n {
        for o in 0..w.rows {
            y[r * w.rows + o] = dot(
                &w.w[o * w.cols..(o + 1) * w.cols],
                &x[r * w.cols..(r + 1) * w.cols],
            );
        }
    }
}

/// Round every value to the nearest f16 (ties to even), overflow to ±inf, and back to f32.
pub fn round_f16(v: &mut [f32]) {
    for x in v {
        *x = f16::from_f32(*x).to_f32();
    }
}

/// `Σ_i a[i] · b[i]` in index order.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = 0.0;
    for i in 0..a.len() {
        acc += a[i] * b[i];
    }
    acc
}

/// `y += a · x`.
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for i in 0..y.len() {
        y[i] += a * x[i];
    }
}

/// Short convolution of one position: `y_c = u_c + Σ_j taps[c, j] · u_{t−j, c}`, where `hist[j−1]`
/// holds `u_{t−j}` (j = 1..K−1) and taps are [channels, K].
pub fn short_conv(u: &[f32], hist: &[&[f32]], taps: &[f32], k: usize, y: &mut [f32]) {
    for c in 0..u.len() {
        let mut acc = u[c] + taps[c * k] * u[c];
        for j in 1..k {
            acc += taps[c * k + j] * hist[j - 1][c];
        }
        y[c] = acc;
    }
}

/// Sigmoid gate scores `σ = sigmoid(W_g x)` for W_g [n, cols] f32.
pub fn gate_sigmoid(wg: &[f32], x: &[f32], out: &mut [f32]) {
    let cols = x.len();
    for (i, o) in out.iter_mut().enumerate() {
        let s = dot(&wg[i * cols..(i + 1) * cols], x);
        *o = 1.0 / (1.0 + (-s).exp());
    }
}

/// Top-k routed experts by `σ + bias`, descending, lower id first on ties (full sort).
pub fn top_k(sigma: &[f32], bias: &[f32], k: usize) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..bias.len()).collect();
    ids.sort_by(|&a, &b| {
        let (sa, sb) = (sigma[a] + bias[a], sigma[b] + bias[b]);
        sb.partial_cmp(&sa)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });
    ids.truncate(k);
    ids
}
