//! `expf` sixteen lanes at a time with the bits of the C library's scalar `expf`, for the softmax
//! walk of checkpoint attention (`attend_x86::walk`), whose weights must be llama.cpp's: ggml's
//! CPU flash attention calls the C library's `expf` once per key, so the plain code calls
//! `f32::exp`, which is that function. One call a key was the largest single cost of a 512-token
//! prefill of a 32-wide-head file on host E after the expert products.
//!
//! The C library on these hosts (glibc 2.28 and later, its FMA variant where the CPU has FMA)
//! computes `expf` in f64 from a 32-entry table of 2^(i/32) and a cubic:
//!
//! ```text
//! kd = fma(32/ln2, x, 0x1.8p52)         (k = round(32·x/ln2) in kd's low bits)
//! r  = fma(32/ln2, x, −(kd − 0x1.8p52))
//! s  = bits(T[k mod 32] + (k << 47))    (2^(k/32): the table entry with k/32 added to its exponent)
//! y  = fma(fma(r, C0, C1), r², fma(r, C2, 1)) · s,  rounded to f32
//! ```
//!
//! with `T[i]` = 2^(i/32) rounded to f64 less `i << 47`, and C0, C1, C2 the published coefficients
//! of glibc's `__exp2f_data.poly_scaled` (sysdeps/ieee754/flt-32/e_exp2f_data.c, from Arm's
//! optimized-routines), scaled by 32⁻³, 32⁻², 32⁻¹. Here the same operations run on eight f64 lanes
//! at a time. Inputs of magnitude 88 or more (overflow, underflow, infinities, NaN) take the C
//! library's own path, lane by lane.
//!
//! Another C library could compute `expf` otherwise; `libm_agrees` checks a spread of inputs
//! against `f32::exp` once per process, and the caller keeps the scalar calls when it does not
//! agree. `tests::every_f32_below_88_in_magnitude` compares every input the vector path takes
//! (three seconds on two threads).

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

/// 2^(i/32) rounded to f64 (bit patterns), i = 0..31.
const POW2: [u64; 32] = [
    0x3ff0000000000000,
    0x3ff059b0d3158574,
    0x3ff0b5586cf9890f,
    0x3ff11301d0125b51,
    0x3ff172b83c7d517b,
    0x3ff1d4873168b9aa,
    0x3ff2387a6e756238,
    0x3ff29e9df51fdee1,
    0x3ff306fe0a31b715,
    0x3ff371a7373aa9cb,
    0x3ff3dea64c123422,
    0x3ff44e086061892d,
    0x3ff4bfdad5362a27,
    0x3ff5342b569d4f82,
    0x3ff5ab07dd485429,
    0x3ff6247eb03a5585,
    0x3ff6a09e667f3bcd,
    0x3ff71f75e8ec5f74,
    0x3ff7a11473eb0187,
    0x3ff82589994cce13,
    0x3ff8ace5422aa0db,
    0x3ff93737b0cdc5e5,
    0x3ff9c49182a3f090,
    0x3ffa5503b23e255d,
    0x3ffae89f995ad3ad,
    0x3ffb7f76f2fb5e47,
    0x3ffc199bdd85529c,
    0x3ffcb720dcef9069,
    0x3ffd5818dcfba487,
    0x3ffdfc97337b9b5f,
    0x3ffea4afa2a490da,
    0x3fff50765b6e4540,
];

/// 32/ln 2: 32 · log2(e) rounded to f64.
const INV_LN2_32: f64 = 32.0 * std::f64::consts::LOG2_E;
/// Adding it rounds an f64 of magnitude below 2^51 to an integer held in the low mantissa bits.
const SHIFT: f64 = 6755399441055744.0; // 0x1.8p52
/// The cubic's coefficients (glibc's `poly_scaled`).
const C0: f64 = f64::from_bits(0x3ebc6af84b912394);
const C1: f64 = f64::from_bits(0x3f2ebfce50fac4f3);
const C2: f64 = f64::from_bits(0x3f962e42ff0c52d6);
/// f32 bits >> 20 (exponent and top mantissa bits, sign cleared) at and past which the C
/// library's special path runs: |x| >= 88.
const SPECIAL_TOP: u32 = 0x42b;

/// `f32::exp` of sixteen values, into `out`.
///
/// # Safety
/// The CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
pub unsafe fn exp16(x: &[f32; 16], out: &mut [f32; 16]) {
    let v = _mm512_loadu_ps(x.as_ptr());
    let lo = exp8(_mm512_castps512_ps256(v));
    let hi = exp8(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
        _mm512_castps_pd(v),
    )));
    _mm256_storeu_ps(out.as_mut_ptr(), lo);
    _mm256_storeu_ps(out.as_mut_ptr().add(8), hi);
    let bits = _mm512_castps_si512(v);
    let top = _mm512_and_si512(_mm512_srli_epi32::<20>(bits), _mm512_set1_epi32(0x7ff));
    let special = _mm512_cmpge_epu32_mask(top, _mm512_set1_epi32(SPECIAL_TOP as i32));
    if special != 0 {
        for i in 0..16 {
            if special & (1 << i) != 0 {
                out[i] = x[i].exp();
            }
        }
    }
}

/// The fast path on eight lanes (inputs below 88 in magnitude).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn exp8(x: __m256) -> __m256 {
    let xd = _mm512_cvtps_pd(x);
    let inv = _mm512_set1_pd(INV_LN2_32);
    let shift = _mm512_set1_pd(SHIFT);
    let kd = _mm512_fmadd_pd(inv, xd, shift);
    let ki = _mm512_castpd_si512(kd);
    let kd = _mm512_sub_pd(kd, shift);
    let r = _mm512_fmsub_pd(inv, xd, kd);
    // T[k mod 32]: two sixteen-entry lookups, chosen by bit 4 of k
    let idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    let t = |i: usize| _mm512_loadu_si512(TABLE.as_ptr().add(i).cast());
    let low = _mm512_permutex2var_epi64(t(0), idx, t(8));
    let high = _mm512_permutex2var_epi64(t(16), idx, t(24));
    let upper = _mm512_test_epi64_mask(idx, _mm512_set1_epi64(16));
    let entry = _mm512_mask_blend_epi64(upper, low, high);
    let s = _mm512_castsi512_pd(_mm512_add_epi64(entry, _mm512_slli_epi64::<47>(ki)));
    let z = _mm512_fmadd_pd(r, _mm512_set1_pd(C0), _mm512_set1_pd(C1));
    let r2 = _mm512_mul_pd(r, r);
    let y = _mm512_fmadd_pd(r, _mm512_set1_pd(C2), _mm512_set1_pd(1.0));
    let y = _mm512_mul_pd(_mm512_fmadd_pd(z, r2, y), s);
    _mm512_cvtpd_ps(y)
}

/// `T[i]` = 2^(i/32) less `i << 47` (wrapping), so that adding `k << 47` for k ≡ i (mod 32) puts
/// k/32's integer part into the exponent.
const TABLE: [u64; 32] = {
    let mut t = [0u64; 32];
    let mut i = 0;
    while i < 32 {
        t[i] = POW2[i].wrapping_sub((i as u64) << 47);
        i += 1;
    }
    t
};

/// Whether the vector path can stand in for `f32::exp` in this process: the CPU has AVX-512F and
/// the C library's `expf` agrees with it on a spread of inputs (every 4099th f32 below 88 in
/// magnitude, and the softmax's usual range, −30 to 0, densely). Checked once.
pub fn libm_agrees() -> bool {
    static AGREES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AGREES.get_or_init(|| {
        if !is_x86_feature_detected!("avx512f") {
            return false;
        }
        let spread = (0..u32::MAX).step_by(4099).map(f32::from_bits);
        let dense = (0..30_000).map(|i| -(i as f32) / 1000.0);
        let xs: Vec<f32> = spread.chain(dense).collect();
        // SAFETY: AVX-512F was detected above
        xs.chunks(16).all(|c| unsafe { same_as_libm(c) })
    })
}

/// Whether `exp16` gives `f32::exp`'s bits for every value of `c` (at most 16; padded with 0).
///
/// # Safety
/// The CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn same_as_libm(c: &[f32]) -> bool {
    let mut x = [0.0f32; 16];
    x[..c.len()].copy_from_slice(c);
    let mut y = [0.0f32; 16];
    exp16(&x, &mut y);
    x.iter()
        .zip(&y)
        .all(|(a, b)| a.exp().to_bits() == b.to_bits() || (a.exp().is_nan() && b.is_nan()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avx512() -> bool {
        is_x86_feature_detected!("avx512f")
    }

    /// The table's entries are 2^(i/32) to within rounding (a typo in a bit pattern would be off
    /// by far more).
    #[test]
    fn the_table_is_powers_of_two() {
        for (i, &b) in POW2.iter().enumerate() {
            let want = (i as f64 / 32.0).exp2();
            let got = f64::from_bits(b);
            assert!((got - want).abs() <= want * f64::EPSILON, "entry {i}");
        }
        assert_eq!(INV_LN2_32.to_bits(), 0x40471547652b82fe);
    }

    /// Every f32 the vector path computes (those below 88 in magnitude, both signs), and the
    /// special lanes it hands back, against the C library, in blocks of sixteen: about 2.2 billion
    /// inputs, three seconds on host E's two threads. It sees what a sample misses: computing
    /// `r` as a product then a difference instead of one fused step (tried) changes a few results.
    #[test]
    fn every_f32_below_88_in_magnitude() {
        if !avx512() {
            eprintln!("skipped: no AVX-512F here");
            return;
        }
        use rayon::prelude::*;
        let end = (SPECIAL_TOP << 20) + (1 << 20); // a little past 88: special lanes too
        let bad: u64 = (0..end / 16)
            .into_par_iter()
            .map(|b| {
                let mut n = 0;
                for sign in [0u32, 0x8000_0000] {
                    let x: [f32; 16] =
                        std::array::from_fn(|i| f32::from_bits(sign | (b * 16 + i as u32)));
                    // SAFETY: AVX-512F was detected above
                    if !unsafe { same_as_libm(&x) } {
                        n += 1;
                    }
                }
                n
            })
            .sum();
        assert_eq!(
            bad, 0,
            "blocks of sixteen with a value unlike the C library's"
        );
    }

    /// A sample of every region: each 257th f32 of either sign up to the overflow threshold,
    /// the special values, and the softmax's range densely.
    #[test]
    fn agrees_with_the_c_library() {
        if !avx512() {
            eprintln!("skipped: no AVX-512F here");
            return;
        }
        let specials = [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            88.0,
            88.72,
            88.73,
            -88.0,
            -103.0,
            -103.3,
            -103.9,
            -104.0,
            -150.0,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            f32::MAX,
            f32::MIN,
            1e-30,
            -1e-30,
        ];
        let xs: Vec<f32> = (0..0x42c0_0000u32)
            .step_by(257)
            .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)])
            .chain(specials)
            .chain((0..200_000).map(|i| -(i as f32) * 1e-4))
            .collect();
        for c in xs.chunks(16) {
            // SAFETY: AVX-512F was detected above
            assert!(unsafe { same_as_libm(c) }, "{c:?}");
        }
        assert!(libm_agrees());
    }
}
