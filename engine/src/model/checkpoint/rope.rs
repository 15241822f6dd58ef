//! Rotary position embedding as ggml computes it (facts of `ggml_rope_cache_init` / `rope_yarn`
//! without YaRN extrapolation): θ starts at the position (times the linear frequency scale) and is
//! multiplied by `base^(−2/dims)` in f32 from one pair to the next; each pair rotates by cos θ and
//! sin θ. Llama pairs adjacent values (2i, 2i+1); NeoX-style models (qwen2, qwen3) pair i with
//! i + dims/2. Dimensions past `dims` pass through.

use crate::model::family::Rope;

/// cos and sin of every pair's angle at position `pos` ([dims/2] each).
pub fn angles(r: &Rope, pos: usize) -> (Vec<f32>, Vec<f32>) {
    let theta_scale = r.base.powf(-2.0 / r.dims as f32);
    let mut theta = pos as f32;
    let (mut cos, mut sin) = (
        Vec::with_capacity(r.dims / 2),
        Vec::with_capacity(r.dims / 2),
    );
    for _ in 0..r.dims / 2 {
        let t = r.freq_scale * theta;
        cos.push(t.cos());
        sin.push(t.sin());
        theta *= theta_scale;
    }
    (cos, sin)
}

/// Rotate every head (`head_dim` values each) of one row in place, as ggml's `rotate_pairs`
/// computes it once GCC has contracted its expressions (-O3 contracts by default; checked against
/// llama.cpp's tensors): `x0·cos − x1·sin` is `fma(x0, cos, −(x1·sin))` and `x0·sin + x1·cos` is
/// `fma(x0, sin, x1·cos)`, the second product rounded first in both.
pub fn apply(r: &Rope, head_dim: usize, cos: &[f32], sin: &[f32], row: &mut [f32]) {
    let half = r.dims / 2;
    for head in row.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let (a, b) = if r.neox {
                (i, i + half)
            } else {
                (2 * i, 2 * i + 1)
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0.mul_add(cos[i], -(x1 * sin[i]));
            head[b] = x0.mul_add(sin[i], x1 * cos[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rope(neox: bool) -> Rope {
        Rope {
            base: 10000.0,
            dims: 4,
            neox,
            freq_scale: 1.0,
        }
    }

    #[test]
    fn position_zero_is_the_identity_and_norms_are_kept() {
        let r = rope(false);
        let (c, s) = angles(&r, 0);
        let mut x = vec![1.0, 2.0, 3.0, 4.0];
        apply(&r, 4, &c, &s, &mut x);
        assert_eq!(x, vec![1.0, 2.0, 3.0, 4.0]);
        let (c, s) = angles(&r, 7);
        apply(&r, 4, &c, &s, &mut x);
        let n: f32 = x.iter().map(|v| v * v).sum();
        assert!((n - 30.0).abs() < 1e-4, "{n}");
    }

    #[test]
    fn pairs_follow_the_style() {
        // the first pair turns by θ = pos; the second by pos·base^(−1/2) = pos / 100
        for neox in [false, true] {
            let r = rope(neox);
            let (c, s) = angles(&r, 1);
            let mut x = vec![1.0, 0.0, 0.0, 0.0];
            apply(&r, 4, &c, &s, &mut x);
            let partner = if neox { 2 } else { 1 };
            assert!((x[0] - 1f32.cos()).abs() < 1e-6);
            assert!((x[partner] - 1f32.sin()).abs() < 1e-6, "{neox}: {x:?}");
        }
    }
}
