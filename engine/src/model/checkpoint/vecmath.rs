//! ggml's CPU vector arithmetic as llama.cpp's build on this kind of host executes it
//! (`-march=native` on a CPU with AVX-512F/DQ and AVX512-FP16, so `__AVX512F__`,
//! `__AVX512DQ__` and `__AVX512FP16__` are defined), written as plain scalar code that gives the
//! same bits lane for lane:
//!
//! - `expf_v` / `silu_v` / `swiglu`: `ggml_v_expf` and `ggml_v_silu` on `__m512`, as
//!   `ggml_vec_swiglu_f32` calls them (not libm's `expf`: a polynomial with `scalef`);
//! - `dot_f16`: `ggml_vec_dot_f16` through the `GGML_F16_DOT_*` macros, which under
//!   AVX512-FP16 accumulate in f32: four `__m512` registers of 16 lanes fed by fused multiply-adds
//!   per 64 values, folded (0+2, 1+3), (0+1), then GCC's `_mm512_reduce_add_ps`; a tail past the
//!   last 64 added in f64.
//!
//! Scalar code only (no SIMD here), so there is no separate reference twin: each function is its
//! own reference, tested against its definition in `tests`.

/// `ggml_v_expf(__m512)` for one lane: `e^x = 2^n · p(b)` with `n = round(x / ln 2)` (by adding
/// and subtracting 1.5·2^23), `b = x − n·ln 2` in two fused steps, a degree-5 polynomial, and
/// `_mm512_scalef_ps`; |n| > 192 gives 0 (n ≤ 0) or +inf.
pub fn expf_v(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // 0x1.715476p+0 = 1/ln 2
    let n = z - r;
    // _mm512_fnmadd_ps(a, b, c) = c − a·b, fused
    let b = (-n).mul_add(
        f32::from_bits(0x35bf_be8e),                  // 0x1.7f7d1cp-20
        (-n).mul_add(f32::from_bits(0x3f31_7200), x), // 0x1.62e4p-1
    );
    let u = b * b;
    let c = |bits: u32| f32::from_bits(bits);
    let j = c(0x3c07_2010) // 0x1.0e4020p-7
        .mul_add(b, c(0x3d2b_9f17)) // 0x1.573e2ep-5
        .mul_add(
            u,
            c(0x3e2a_af33).mul_add(b, c(0x3eff_fedb)), // 0x1.555e66p-3, 0x1.fffdb6p-2
        )
        .mul_add(u, c(0x3f7f_fff6).mul_add(b, 1.0)); // 0x1.ffffecp-1
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    scalef(j, n)
}

/// `_mm512_scalef_ps(j, n)` for an integral n with |n| ≤ 192 and a finite j: `j · 2^n` rounded
/// once to f32 (the f64 product is exact, so converting it is the single rounding).
fn scalef(j: f32, n: f32) -> f32 {
    (j as f64 * 2f64.powi(n as i32)) as f32
}

/// `ggml_v_silu(__m512)` for one lane: `x / (1 + e^(0 − x))` with `expf_v`.
#[inline]
pub fn silu_v(x: f32) -> f32 {
    x / (1.0 + expf_v(0.0 - x))
}

/// `ggml_vec_swiglu_f32`: `y = silu(g) · u` in place of g. The vector loop covers whole groups of
/// 16; a tail past them uses libm's `expf` (`ggml_silu_f32`), as ggml does.
pub fn swiglu(g: &mut [f32], u: &[f32]) {
    let whole = g.len() - g.len() % 16;
    for (gv, &uv) in g[..whole].iter_mut().zip(&u[..whole]) {
        *gv = silu_v(*gv) * uv;
    }
    for (gv, &uv) in g[whole..].iter_mut().zip(&u[whole..]) {
        *gv = *gv / (1.0 + (-*gv).exp()) * uv;
    }
}

/// `ggml_vec_dot_f16` of f16 values held in f32 (module docs for the order).
pub fn dot_f16(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of unequal lengths");
    let n = a.len();
    let whole = n - n % 64;
    let mut sum = [[0.0f32; 16]; 4];
    for i in (0..whole).step_by(64) {
        for (j, s) in sum.iter_mut().enumerate() {
            for (l, acc) in s.iter_mut().enumerate() {
                let k = i + 16 * j + l;
                *acc = a[k].mul_add(b[k], *acc);
            }
        }
    }
    // GGML_F32x16_REDUCE: x0 += x2, x1 += x3; x0 += x1
    let x: [f32; 16] = std::array::from_fn(|l| (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]));
    let mut s = reduce_add_16(&x) as f64;
    for i in whole..n {
        s += (a[i] * b[i]) as f64;
    }
    s as f32
}

/// GCC's `_mm512_reduce_add_ps`: 256-bit halves, then 128-bit halves, then lanes (0+2, 1+3),
/// then the two.
fn reduce_add_16(x: &[f32; 16]) -> f32 {
    let t8: [f32; 8] = std::array::from_fn(|l| x[l + 8] + x[l]);
    let t4: [f32; 4] = std::array::from_fn(|l| t8[l + 4] + t8[l]);
    (t4[0] + t4[2]) + (t4[1] + t4[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expf_v_is_within_two_ulps_of_exp_and_saturates() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = (x as f64).exp();
            let got = expf_v(x) as f64;
            assert!(((got - want) / want).abs() < 2.5e-7, "{x}: {got} vs {want}");
            x += 0.0137;
        }
        assert_eq!(expf_v(0.0), 1.0);
        assert_eq!(expf_v(-200.0), 0.0);
        assert_eq!(expf_v(200.0), f32::INFINITY);
        assert_eq!(expf_v(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn silu_and_swiglu_follow_their_definitions() {
        for &x in &[-20.0f32, -1.0, -0.0, 0.0, 0.5, 3.0, 40.0] {
            let want = x as f64 / (1.0 + (-(x as f64)).exp());
            assert!(
                (silu_v(x) as f64 - want).abs() <= 1e-6 * want.abs().max(1e-30),
                "{x}"
            );
        }
        let mut g: Vec<f32> = (0..37).map(|i| i as f32 * 0.25 - 4.0).collect();
        let u: Vec<f32> = (0..37).map(|i| 1.0 + i as f32).collect();
        let want: Vec<f32> = g.iter().zip(&u).map(|(&a, &b)| silu_v(a) * b).collect();
        swiglu(&mut g, &u);
        for i in 32..37 {
            assert!((g[i] - want[i]).abs() <= 2e-6 * want[i].abs(), "tail {i}");
        }
        assert_eq!(&g[..32], &want[..32]);
    }

    #[test]
    fn dot_f16_folds_in_the_stated_order() {
        // 1e8 in lane 0 of register 0 and −1e8 in lane 0 of register 2 cancel before anything
        // small is added to them; a plain left-to-right sum would lose the ones
        let mut a = vec![1.0f32; 64];
        a[0] = 1e8;
        a[32] = -1e8;
        let b = vec![1.0f32; 64];
        assert_eq!(dot_f16(&a, &b), 62.0);
        // lanes 0 and 8 of the folded register meet first (256-bit halves)
        let mut a = vec![0.0f32; 64];
        a[0] = 1e8;
        a[8] = -1e8;
        a[1] = 1.0;
        assert_eq!(dot_f16(&a, &b[..64]), 1.0);
        // the tail past 64 is added in f64 after the fold
        let a: Vec<f32> = (0..70).map(|i| (i % 7) as f32 - 3.0).collect();
        let c: Vec<f32> = (0..70).map(|i| (i % 5) as f32 * 0.5).collect();
        let exact: f64 = a.iter().zip(&c).map(|(x, y)| *x as f64 * *y as f64).sum();
        assert_eq!(dot_f16(&a, &c) as f64, exact);
    }
}
