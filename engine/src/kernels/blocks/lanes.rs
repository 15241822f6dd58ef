//! The f32 side of ggml's x86 AVX2 dot products, in scalar form: the eight-lane accumulators, the
//! orders in which they are reduced, and the byte arithmetic of `vpsignb` + `vpmaddubsw`. Every
//! portable dot in `blocks` is built from these so that it runs, per output, the very operation
//! sequence of ggml's AVX2 code (facts read from `ggml-cpu/arch/x86/quants.c`, `vec.cpp` and
//! `simd-mappings.h`; the code is ours). The AVX2 kernels use the instructions themselves.
//!
//! Owns no data; must not depend on the block layouts.

/// Lanes of an AVX2 f32 accumulator.
pub const LANES: usize = 8;

/// ggml's `hsum_float_8`: the high half added to the low, then `movehl`, then `movehdup`, i.e.
/// `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))` (the engine's `kernels::hsum256` is the same).
#[inline]
pub fn hsum8(a: &[f32; LANES]) -> f32 {
    let t = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (t[0] + t[2]) + (t[1] + t[3])
}

/// The reduction of a 4-lane `__m128` accumulator by `movehl` then `movehdup`:
/// `(a0 + a2) + (a1 + a3)` (Q4_K's minimum terms).
#[inline]
pub fn hsum4(a: &[f32; 4]) -> f32 {
    (a[0] + a[2]) + (a[1] + a[3])
}

/// `GGML_F32x8_REDUCE` over the four accumulators of `ggml_vec_dot_f32` / `_f16`: lane-wise
/// `(s0 + s2) + (s1 + s3)`, then the high half added to the low and two `hadd`s:
/// `(t0 + t1) + (t2 + t3)` with `t_i = v_i + v_{i+4}` (not `hsum8`'s order).
#[inline]
pub fn reduce4x8(s: &[[f32; LANES]; 4]) -> f32 {
    let v: [f32; LANES] = std::array::from_fn(|l| (s[0][l] + s[2][l]) + (s[1][l] + s[3][l]));
    let t = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (t[0] + t[1]) + (t[2] + t[3])
}

/// `acc = a · b + acc` rounded once, as `vfmadd` does.
#[inline]
pub fn fma(a: f32, b: f32, acc: f32) -> f32 {
    a.mul_add(b, acc)
}

/// The product `vpmaddubsw(vpsignb(x, x), vpsignb(y, x))` forms for one byte pair (ggml's
/// `mul_sum_i8_pairs`): |x| as an unsigned byte times y with x's sign. It is x · y except when
/// y = −128 and x < 0, where the negation wraps and the product keeps y's sign.
#[inline]
pub fn sign_product(x: i8, y: i8) -> i32 {
    let sy = match x {
        0 => 0,
        x if x < 0 => y.wrapping_neg(),
        _ => y,
    };
    x.unsigned_abs() as i32 * sy as i32
}

/// `_mm256_cvtepi32_ps` of an integer lane sum: round to nearest, ties to even (Rust's `as`).
#[inline]
pub fn to_f32(v: i32) -> f32 {
    v as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_follow_the_stated_orders() {
        // values whose sum depends on the order: a big one cancels, the small ones survive only
        // when added to each other first
        let a = [1e8, 1.0, 1.0, 1.0, -1e8, 1.0, 1.0, 1.0];
        assert_eq!(hsum8(&a), 6.0, "(a0 + a4) first");
        let mut s = [[0.0; LANES]; 4];
        s[0][0] = 1e8;
        s[2][0] = -1e8;
        s[1][0] = 3.0;
        assert_eq!(reduce4x8(&s), 3.0);
        assert_eq!(hsum4(&[1e8, 1.0, -1e8, 1.0]), 2.0);
    }

    #[test]
    fn sign_product_wraps_only_at_minus_128() {
        assert_eq!(sign_product(-3, 5), -15);
        assert_eq!(sign_product(-128, 127), -128 * 127);
        assert_eq!(sign_product(0, -128), 0);
        assert_eq!(sign_product(4, -128), -512);
        // −(−128) wraps to −128: |−2| · −128
        assert_eq!(sign_product(-2, -128), -256);
    }
}
