//! The context fit (MEASUREMENTS.md §3.3): least squares through the origin of
//! `T(N) = aN + bN²` (TTFT against prompt tokens), its predictions, and the attention rate the
//! quadratic term implies for a model configuration. Pure functions only.
//!
//! **Attention FLOPs.** Only global-attention layers grow with the whole context (sliding layers
//! see at most `window` keys, and the relative-position bias reaches back a fixed `rel_extent`),
//! so they alone make the N² term. For one query position and one key, one global layer does, per
//! query head, a multiply-add per dimension for the score `q·k` and one per dimension for the
//! weighted value sum `p·v`:
//!
//! `flops_per_key = 2 · 2 · n_q_heads · head_dim`   (inkling: 4 · 64 · 128 = 32,768)
//!
//! A causal prefill of N positions visits `Σ_{p<N} (p+1) ≈ N²/2` keys per layer, so one global
//! layer does `flops_per_key · N²/2` quadratic FLOPs. Fitting `T = aN + bN²` then gives
//!
//! `attn_gflops_per_layer = flops_per_key / (2b) / 1e9`
//!
//! the paper's convention (its `CtxQuadraticGflops`, 11 GFLOP/s): one role owns one global layer,
//! and the whole fitted quadratic time is credited to it, which is right when the roles' prefill
//! overlaps in the pipeline. If instead the global layers run one after another on the critical
//! path, each ran `n_global` times faster than that:
//!
//! `attn_gflops_all_layers = n_global · flops_per_key / (2b) / 1e9`
//!
//! (the whole model's quadratic FLOPs over the fitted time). Both are reported.

use moefleet_engine::model::config::{AttentionKind, ModelConfig};
use serde::{Deserialize, Serialize};

/// Why a fit cannot be made.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum FitError {
    #[error("the fit needs at least two distinct positive prompt sizes (got {0})")]
    TooFewSizes(usize),
    #[error("the points are degenerate (singular normal equations)")]
    Singular,
}

/// `T(N) = aN + bN²`, T in seconds, N in tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuadFit {
    /// Seconds per token (linear part).
    pub a: f64,
    /// Seconds per token² (quadratic part).
    pub b: f64,
}

impl QuadFit {
    pub fn ttft_s(&self, n: f64) -> f64 {
        self.a * n + self.b * n * n
    }

    /// The linear part alone, `aN`.
    pub fn linear_s(&self, n: f64) -> f64 {
        self.a * n
    }

    /// `1/a`: the prefill rate if attention cost nothing, tokens/s.
    pub fn linear_tok_s(&self) -> f64 {
        1.0 / self.a
    }
}

fn distinct_sizes(points: &[(f64, f64)]) -> usize {
    let mut ns: Vec<f64> = points.iter().map(|p| p.0).filter(|n| *n > 0.0).collect();
    ns.sort_by(f64::total_cmp);
    ns.dedup();
    ns.len()
}

/// Least squares through the origin: minimise `Σ (T − aN − bN²)²`. Normal equations
/// `[ΣN² ΣN³; ΣN³ ΣN⁴] [a; b] = [ΣNT; ΣN²T]`, solved by Cramer's rule (N scaled to thousands
/// first so the sums stay well inside f64).
pub fn fit_linear_quadratic(points: &[(f64, f64)]) -> Result<QuadFit, FitError> {
    let sizes = distinct_sizes(points);
    if sizes < 2 {
        return Err(FitError::TooFewSizes(sizes));
    }
    const K: f64 = 1000.0;
    let (mut s11, mut s12, mut s22, mut r1, mut r2) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(n, t) in points {
        let x = n / K;
        s11 += x * x;
        s12 += x * x * x;
        s22 += x * x * x * x;
        r1 += x * t;
        r2 += x * x * t;
    }
    let det = s11 * s22 - s12 * s12;
    if !det.is_finite() || det.abs() <= 1e-12 * s11 * s22 {
        return Err(FitError::Singular);
    }
    let a = (r1 * s22 - r2 * s12) / det;
    let b = (s11 * r2 - s12 * r1) / det;
    Ok(QuadFit {
        a: a / K,
        b: b / (K * K),
    })
}

/// The same fit with both coefficients kept non-negative (for predicting durations): if the free
/// fit makes one negative, the best one-term fit (`aN` or `bN²`) replaces it.
pub fn fit_nonnegative(points: &[(f64, f64)]) -> Result<QuadFit, FitError> {
    let free = fit_linear_quadratic(points)?;
    if free.a >= 0.0 && free.b >= 0.0 {
        return Ok(free);
    }
    let (s2, s4, r1, r2) = points.iter().fold((0.0, 0.0, 0.0, 0.0), |acc, &(n, t)| {
        (
            acc.0 + n * n,
            acc.1 + n.powi(4),
            acc.2 + n * t,
            acc.3 + n * n * t,
        )
    });
    let lin = QuadFit {
        a: (r1 / s2).max(0.0),
        b: 0.0,
    };
    let quad = QuadFit {
        a: 0.0,
        b: (r2 / s4).max(0.0),
    };
    let sse = |f: &QuadFit| -> f64 { points.iter().map(|&(n, t)| (t - f.ttft_s(n)).powi(2)).sum() };
    Ok(if sse(&lin) <= sse(&quad) { lin } else { quad })
}

/// What one global-attention layer of a model costs per key (see the module doc).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttentionCost {
    pub preset: String,
    pub n_q_heads: usize,
    pub head_dim: usize,
    pub n_global_layers: usize,
    /// `4 · n_q_heads · head_dim`.
    pub flops_per_key: f64,
}

impl AttentionCost {
    pub fn of(c: &ModelConfig) -> AttentionCost {
        let n_global_layers = (0..c.n_layers)
            .filter(|&l| c.attention_kind(l) == AttentionKind::Global)
            .count();
        AttentionCost {
            preset: c.name.clone(),
            n_q_heads: c.n_q_heads,
            head_dim: c.head_dim,
            n_global_layers,
            flops_per_key: (2 * 2 * c.n_q_heads * c.head_dim) as f64,
        }
    }

    /// GFLOP/s of one global layer if the whole quadratic time `bN²` was spent on its
    /// `flops_per_key · N²/2` FLOPs (the paper's convention).
    pub fn gflops_per_layer(&self, b: f64) -> f64 {
        self.flops_per_key / (2.0 * b) / 1e9
    }

    /// GFLOP/s of all global layers' quadratic FLOPs over the quadratic time.
    pub fn gflops_all_layers(&self, b: f64) -> f64 {
        self.n_global_layers as f64 * self.gflops_per_layer(b)
    }

    /// The formula, written out for the outputs.
    pub fn formula(&self) -> String {
        format!(
            "flops_per_key = 2*2*n_q_heads*head_dim = 4*{}*{} = {}; one global layer does flops_per_key*N^2/2 in a causal prefill; attn_gflops_per_layer = flops_per_key/(2b)/1e9; attn_gflops_all_layers = n_global ({}) * that",
            self.n_q_heads, self.head_dim, self.flops_per_key, self.n_global_layers
        )
    }
}

/// Ordinary least-squares slope of y on x (None if x does not vary).
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_exact_coefficients() {
        let (a, b) = (1.0 / 200.0, 1.5e-6);
        let pts: Vec<(f64, f64)> = [1000.0, 2000.0, 4000.0, 8000.0, 64000.0]
            .iter()
            .map(|&n| (n, a * n + b * n * n))
            .collect();
        let f = fit_linear_quadratic(&pts).unwrap();
        assert!((f.a - a).abs() / a < 1e-9, "{f:?}");
        assert!((f.b - b).abs() / b < 1e-9, "{f:?}");
        assert!((f.linear_tok_s() - 200.0).abs() < 1e-6);
        assert!((f.ttft_s(1000.0) - f.linear_s(1000.0) - 1.5).abs() < 1e-9);
    }

    #[test]
    fn hand_solved_two_points() {
        // T(1) = 3, T(2) = 10  =>  a + b = 3, 2a + 4b = 10  =>  a = 1, b = 2 (exact fit)
        let f = fit_linear_quadratic(&[(1.0, 3.0), (2.0, 10.0)]).unwrap();
        assert!(
            (f.a - 1.0).abs() < 1e-9 && (f.b - 2.0).abs() < 1e-9,
            "{f:?}"
        );
    }

    #[test]
    fn too_few_sizes_is_an_error() {
        assert_eq!(fit_linear_quadratic(&[]), Err(FitError::TooFewSizes(0)));
        assert_eq!(
            fit_linear_quadratic(&[(5.0, 1.0), (5.0, 1.1)]),
            Err(FitError::TooFewSizes(1))
        );
    }

    #[test]
    fn nonnegative_fit_drops_a_negative_term() {
        // concave data: the free fit has b < 0; the linear one-term fit replaces it
        let pts = [(1.0, 1.0), (2.0, 1.9), (4.0, 3.5)];
        assert!(fit_linear_quadratic(&pts).unwrap().b < 0.0);
        let f = fit_nonnegative(&pts).unwrap();
        assert_eq!(f.b, 0.0);
        assert!(f.a > 0.0);
    }

    #[test]
    fn attention_cost_of_the_presets() {
        let full = AttentionCost::of(&ModelConfig::preset("inkling").unwrap());
        assert_eq!(full.flops_per_key, 32768.0);
        assert_eq!(full.n_global_layers, 11);
        // b = flops_per_key / 2 / 1e9  gives exactly 1 GFLOP/s per layer
        let b = 32768.0 / 2.0 / 1e9;
        assert!((full.gflops_per_layer(b) - 1.0).abs() < 1e-12);
        assert!((full.gflops_all_layers(b) - 11.0).abs() < 1e-12);
        let nano = AttentionCost::of(&ModelConfig::preset("inkling-nano").unwrap());
        assert_eq!(nano.flops_per_key, (4 * 4 * 16) as f64);
        assert_eq!(nano.n_global_layers, 2);
    }

    #[test]
    fn slope_of_a_line() {
        assert!((slope(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]).unwrap() - 2.0).abs() < 1e-12);
        assert_eq!(slope(&[(1.0, 1.0), (1.0, 2.0)]), None);
        assert_eq!(slope(&[(1.0, 1.0)]), None);
    }
}
