//! ggml's CPU vector arithmetic as llama.cpp's `-march=native` build executes it, written as
//! plain scalar code that gives the same bits lane for lane. Which of ggml's SIMD variants such a
//! build compiles depends on the host, so `Simd::host()` picks by the CPU's features:
//!
//! - **AVX-512** (`__AVX512F__` and `__AVX512DQ__`; checked against llama.cpp on a Sapphire
//!   Rapids host with AVX512-FP16, `tests/gguf_bitexact.rs`): `ggml_v_expf` / `ggml_v_silu` on
//!   `__m512` (a polynomial with `_mm512_scalef_ps`), and `ggml_vec_dot_f16` with four `__m512`
//!   registers of 16 f32 lanes fed by fused multiply-adds per 64 values, folded (0+2, 1+3),
//!   (0+1), then GCC's `_mm512_reduce_add_ps`;
//! - **AVX2** (`__AVX2__` and `__FMA__`, F16C; written from ggml's source, not yet checked against
//!   an AVX2 build): the `__m256` `ggml_v_expf` (exponent built in the integer unit, `k + k·j`),
//!   and the f16 dot with four `__m256` registers of 8 lanes per 32 values, folded (0+2, 1+3),
//!   (0+1), then the 128-bit halves and two horizontal adds.
//!
//! `swiglu` is `ggml_vec_swiglu_f32` (the vector loop over whole registers, libm's `expf` for a
//! tail); `dot_f16` adds a tail past the last whole step in f64, as ggml does. Scalar code only
//! (no SIMD here), so there is no separate reference twin: each function is tested against its
//! definition in `tests`.

/// Which of ggml's x86 vector variants a native build on this host runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Simd {
    Avx512,
    Avx2,
}

impl Simd {
    /// The variant for this CPU (AVX2 also stands for anything older: the engine's kernels need it).
    pub fn host() -> Simd {
        static HOST: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
        *HOST.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512dq")
            {
                return Simd::Avx512;
            }
            Simd::Avx2
        })
    }

    /// f32 lanes of one register.
    fn lanes(self) -> usize {
        match self {
            Simd::Avx512 => 16,
            Simd::Avx2 => 8,
        }
    }
}

/// `ggml_v_expf(__m512)` for one lane: `e^x = 2^n · p(b)` with `n = round(x / ln 2)` (by adding
/// and subtracting 1.5·2^23), `b = x − n·ln 2` in two fused steps, a degree-5 polynomial, and
/// `_mm512_scalef_ps`; |n| > 192 gives 0 (n ≤ 0) or +inf.
#[inline(always)]
pub fn expf_v512(x: f32) -> f32 {
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
/// once to f32 (the f64 product is exact, so converting it is the single rounding). 2^n is built
/// from its exponent bits (exact for |n| ≤ 192, as `powi` is, without its library call).
#[inline(always)]
fn scalef(j: f32, n: f32) -> f32 {
    let two_n = f64::from_bits(((n as i64 + 1023) as u64) << 52);
    (j as f64 * two_n) as f32
}

/// `ggml_v_expf(__m256)` for one lane: the same reduction and polynomial without its constant
/// term, `k = 2^n` built from z's bits, and `k + k·j` fused; |n| > 126 scales in two steps
/// (`s2 · (1 + j) · s1`), |n| > 192 gives `s1²` (0 or +inf).
#[inline(always)]
pub fn expf_v256(x: f32) -> f32 {
    let c = |bits: u32| f32::from_bits(bits);
    let r = c(0x4b40_0000);
    let z = x.mul_add(c(0x3fb8_aa3b), r);
    let n = z - r;
    let b = (-n).mul_add(c(0x35bf_be8e), (-n).mul_add(c(0x3f31_7200), x));
    let e = z.to_bits() << 23;
    let k = f32::from_bits(e.wrapping_add(1.0f32.to_bits()));
    let u = b * b;
    let j = c(0x3c07_2010)
        .mul_add(b, c(0x3d2b_9f17))
        .mul_add(u, c(0x3e2a_af33).mul_add(b, c(0x3eff_fedb)))
        .mul_add(u, c(0x3f7f_fff6) * b);
    if n.abs() <= 126.0 {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

/// ggml's `ggml_v_expf` for one lane on this host's variant.
#[inline(always)]
pub fn expf_v(simd: Simd, x: f32) -> f32 {
    match simd {
        Simd::Avx512 => expf_v512(x),
        Simd::Avx2 => expf_v256(x),
    }
}

/// `ggml_v_silu` for one lane: `x / (1 + e^(0 − x))` with `expf_v`.
#[inline(always)]
pub fn silu_v(simd: Simd, x: f32) -> f32 {
    x / (1.0 + expf_v(simd, 0.0 - x))
}

/// `ggml_vec_swiglu_f32`: `y = silu(g) · u` in place of g. The vector loop covers whole
/// registers; a tail past them uses libm's `expf` (`ggml_silu_f32`), as ggml does.
pub fn swiglu(simd: Simd, g: &mut [f32], u: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::cpu_has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked just now).
        return unsafe { swiglu_fma(simd, g, u) };
    }
    swiglu_body(simd, g, u)
}

/// `swiglu` compiled for FMA: the lane code's `mul_add` is then one instruction, not a library
/// call (the same fused operation either way, so the same bits).
///
/// # Safety
/// The CPU has FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn swiglu_fma(simd: Simd, g: &mut [f32], u: &[f32]) {
    swiglu_body(simd, g, u)
}

#[inline(always)]
fn swiglu_body(simd: Simd, g: &mut [f32], u: &[f32]) {
    let whole = g.len() - g.len() % simd.lanes();
    #[cfg(target_arch = "x86_64")]
    if simd == Simd::Avx512 && std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked just now); `whole` is a multiple of sixteen
        unsafe { swiglu512(&mut g[..whole], &u[..whole]) };
    } else {
        for (gv, &uv) in g[..whole].iter_mut().zip(&u[..whole]) {
            *gv = silu_v(simd, *gv) * uv;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    for (gv, &uv) in g[..whole].iter_mut().zip(&u[..whole]) {
        *gv = silu_v(simd, *gv) * uv;
    }
    for (gv, &uv) in g[whole..].iter_mut().zip(&u[whole..]) {
        *gv = *gv / (1.0 + (-*gv).exp()) * uv;
    }
}

/// `swiglu`'s whole registers on AVX-512, sixteen lanes at a time in the instructions of ggml's
/// `ggml_v_silu` and `ggml_v_expf(__m512)`, which `silu_v` and `expf_v512` follow lane by lane
/// (`_mm512_scalef_ps` where `expf_v512` scales in f64, one rounding either way): the same bits
/// (`tests::the_vector_swiglu_gives_the_lane_codes_bits`), in a few instructions a lane rather than
/// the lane code's scalar steps.
///
/// # Safety
/// The CPU has AVX-512F; `g` and `u` hold the same whole number of sixteens.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn swiglu512(g: &mut [f32], u: &[f32]) {
    use std::arch::x86_64::*;
    let c = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
    let r = c(0x4b40_0000);
    for (gv, uv) in g.chunks_exact_mut(16).zip(u.chunks_exact(16)) {
        let x = _mm512_loadu_ps(gv.as_ptr());
        // silu: x / (1 + e^(0 − x))
        let y = _mm512_sub_ps(_mm512_setzero_ps(), x);
        let z = _mm512_fmadd_ps(y, c(0x3fb8_aa3b), r);
        let n = _mm512_sub_ps(z, r);
        let b = _mm512_fnmadd_ps(n, c(0x35bf_be8e), _mm512_fnmadd_ps(n, c(0x3f31_7200), y));
        let big = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
        let w = _mm512_mul_ps(b, b);
        let j = _mm512_fmadd_ps(
            _mm512_fmadd_ps(
                _mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
                w,
                _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
            ),
            w,
            _mm512_fmadd_ps(c(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
        );
        let mut e = _mm512_scalef_ps(j, n);
        if big != 0 {
            let low = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, _mm512_setzero_ps());
            let alt = _mm512_mask_blend_ps(low, _mm512_set1_ps(f32::INFINITY), _mm512_setzero_ps());
            e = _mm512_mask_blend_ps(big, e, alt);
        }
        let silu = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e));
        _mm512_storeu_ps(
            gv.as_mut_ptr(),
            _mm512_mul_ps(silu, _mm512_loadu_ps(uv.as_ptr())),
        );
    }
}

/// `ggml_vec_dot_f16` of f16 values held in f32 (module docs for the order): four registers of
/// `simd.lanes()` f32 lanes per step.
pub fn dot_f16(simd: Simd, a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of unequal lengths");
    let (n, w) = (a.len(), simd.lanes());
    let whole = n - n % (4 * w);
    let mut sum = [[0.0f32; 16]; 4];
    for i in (0..whole).step_by(4 * w) {
        for (j, s) in sum.iter_mut().enumerate() {
            for (l, acc) in s[..w].iter_mut().enumerate() {
                let k = i + w * j + l;
                *acc = a[k].mul_add(b[k], *acc);
            }
        }
    }
    // GGML_F32x16_REDUCE / GGML_F32Cx8_REDUCE: x0 += x2, x1 += x3; x0 += x1
    let x: [f32; 16] = std::array::from_fn(|l| (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]));
    let folded = match simd {
        Simd::Avx512 => reduce_add_16(&x),
        Simd::Avx2 => {
            // 256 → 128 bits, then two _mm_hadd_ps
            let t: [f32; 4] = std::array::from_fn(|l| x[l] + x[l + 4]);
            (t[0] + t[1]) + (t[2] + t[3])
        }
    };
    let mut s = folded as f64;
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

    const BOTH: [Simd; 2] = [Simd::Avx512, Simd::Avx2];

    #[test]
    fn expf_v_is_within_two_ulps_of_exp_and_saturates() {
        for simd in BOTH {
            let mut x = -87.0f32;
            while x < 88.0 {
                let want = (x as f64).exp();
                let got = expf_v(simd, x) as f64;
                assert!(
                    ((got - want) / want).abs() < 2.5e-7,
                    "{simd:?} {x}: {got} vs {want}"
                );
                x += 0.0137;
            }
            assert_eq!(expf_v(simd, 0.0), 1.0, "{simd:?}");
            assert_eq!(expf_v(simd, -200.0), 0.0, "{simd:?}");
            assert_eq!(expf_v(simd, 200.0), f32::INFINITY, "{simd:?}");
            assert_eq!(expf_v(simd, f32::NEG_INFINITY), 0.0, "{simd:?}");
        }
        // past |n| = 126 the AVX2 variant scales in two steps: still e^x, into the subnormals
        // (e^−88.5 ≈ 3.6e−39 keeps 21 significant bits)
        let (x, want) = (-88.5f32, (-88.5f64).exp());
        let got = expf_v256(x) as f64;
        assert!(((got - want) / want).abs() < 1e-6, "{got} vs {want}");
    }

    #[test]
    fn silu_and_swiglu_follow_their_definitions() {
        for simd in BOTH {
            for &x in &[-20.0f32, -1.0, -0.0, 0.0, 0.5, 3.0, 40.0] {
                let want = x as f64 / (1.0 + (-(x as f64)).exp());
                let got = silu_v(simd, x) as f64;
                assert!(
                    (got - want).abs() <= 1e-6 * want.abs().max(1e-30),
                    "{simd:?} {x}"
                );
            }
            let mut g: Vec<f32> = (0..37).map(|i| i as f32 * 0.25 - 4.0).collect();
            let u: Vec<f32> = (0..37).map(|i| 1.0 + i as f32).collect();
            let want: Vec<f32> = g
                .iter()
                .zip(&u)
                .map(|(&a, &b)| silu_v(simd, a) * b)
                .collect();
            swiglu(simd, &mut g, &u);
            let whole = 32;
            for i in whole..37 {
                assert!((g[i] - want[i]).abs() <= 2e-6 * want[i].abs(), "tail {i}");
            }
            assert_eq!(&g[..whole], &want[..whole], "{simd:?}");
        }
    }

    /// The AVX-512 swiglu against the lane code it stands in for, over f32's range (every
    /// 65,537th bit pattern: subnormals, the cut-offs at |n| = 192, infinities and NaNs).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_vector_swiglu_gives_the_lane_codes_bits() {
        if !std::arch::is_x86_feature_detected!("avx512f") {
            eprintln!("no AVX-512F here: the vector swiglu is not run");
            return;
        }
        let g: Vec<f32> = (0..=u32::MAX / 65_537)
            .map(|i| f32::from_bits(i * 65_537))
            .chain([-88.0, -87.5, 87.5, 88.8, -133.0, 133.0, -200.0, 200.0])
            .collect();
        let whole = g.len() - g.len() % 16;
        let g = &g[..whole];
        let u: Vec<f32> = (0..whole).map(|i| [1.0, -0.5, 3.25, 1e-3][i % 4]).collect();
        let want: Vec<u32> = g
            .iter()
            .zip(&u)
            .map(|(&a, &b)| (silu_v(Simd::Avx512, a) * b).to_bits())
            .collect();
        let mut got = g.to_vec();
        // SAFETY: the CPU has AVX-512F; whole sixteens
        unsafe { swiglu512(&mut got, &u) };
        for (i, (&w, x)) in want.iter().zip(&got).enumerate() {
            let both_nan = f32::from_bits(w).is_nan() && x.is_nan();
            assert!(
                w == x.to_bits() || both_nan,
                "g = {:e}: {:e} vs {:e}",
                g[i],
                f32::from_bits(w),
                x
            );
        }
    }

    #[test]
    fn dot_f16_folds_in_the_stated_order() {
        let ones = vec![1.0f32; 64];
        // AVX-512: 1e8 in lane 0 of register 0 and −1e8 in lane 0 of register 2 cancel before
        // anything small is added to them; a plain left-to-right sum would lose the ones
        let mut a = vec![1.0f32; 64];
        a[0] = 1e8;
        a[32] = -1e8;
        assert_eq!(dot_f16(Simd::Avx512, &a, &ones), 62.0);
        // AVX2 steps by 32: the two meet lane 0's second multiply-add, after a[0]'s first
        assert_eq!(dot_f16(Simd::Avx2, &a, &ones), 62.0);
        // AVX-512: lanes 0 and 8 of the folded register meet first (256-bit halves)
        let mut a = vec![0.0f32; 64];
        a[0] = 1e8;
        a[8] = -1e8;
        a[1] = 1.0;
        assert_eq!(dot_f16(Simd::Avx512, &a, &ones), 1.0);
        // AVX2: lanes 0 and 8 are registers 0 and 1, folded before the lanes; lanes 0 and 4 meet
        // at the 128-bit fold
        let mut a = vec![0.0f32; 64];
        a[0] = 1e8;
        a[4] = -1e8;
        a[1] = 1.0;
        assert_eq!(dot_f16(Simd::Avx2, &a, &ones), 1.0);
        // the tail past the last whole step is added in f64 after the fold
        let a: Vec<f32> = (0..70).map(|i| (i % 7) as f32 - 3.0).collect();
        let c: Vec<f32> = (0..70).map(|i| (i % 5) as f32 * 0.5).collect();
        let exact: f64 = a.iter().zip(&c).map(|(x, y)| *x as f64 * *y as f64).sum();
        for simd in BOTH {
            assert_eq!(dot_f16(simd, &a, &c) as f64, exact, "{simd:?}");
        }
    }
}
