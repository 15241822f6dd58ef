//! The 32-element formats Q4_0, Q4_1 and Q8_0 (`ggml-common.h`): their dequantisation
//! (`dequantize_row_*` in `ggml-quants.c`) and their dot products with quantised activations in
//! the arithmetic of ggml's AVX2 code (`ggml_vec_dot_q4_0_q8_0`, `_q4_1_q8_1`, `_q8_0_q8_0`):
//!
//! ```text
//! Q4_0 block: d (f16) | 16 bytes: element j < 16 in the low nibble of byte j, j + 16 in the high
//!             w_j = d · (nibble_j − 8)
//! Q4_1 block: d (f16) | m (f16) | 16 bytes of nibbles as Q4_0;  w_j = d · nibble_j + m
//! Q8_0 block: d (f16) | 32 int8;  w_j = d · q_j
//!
//! per block b, lane l = 0..8:  acc_l = fma(d_w · d_a, Σ_{j=4l}^{4l+3} q_w,j · q_a,j, acc_l)
//! Q4_0, Q8_0:  y = hsum8(acc)
//! Q4_1:        y = hsum8(acc) + Σ_b m_w · s_a      (s_a = f16(d · Σ q_a), `summs` in f32)
//! ```
//!
//! The integer lane sums are exact (the signed formats take ggml's `vpsignb` route, whose only
//! departure from x · y, an activation of −128 against a negative weight, never comes out of the
//! activation quantiser); `d_w · d_a` and `m_w · s_a` are products of two f16 values, exact in
//! f32. So every rounding is an f32 FMA or add in ggml's order, and these portable dots give the
//! bits of ggml's AVX2 kernels (and of `avx2`). Owns no data.

use half::f16;

use super::acts::ActRow;
use super::lanes::{fma, hsum8, sign_product, to_f32, LANES};

/// Elements per block.
pub const QK: usize = 32;
pub const Q4_0_BYTES: usize = 18;
pub const Q4_1_BYTES: usize = 20;
pub const Q8_0_BYTES: usize = 34;

/// The f16 at byte `i` of a block, as f32.
#[inline]
pub fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// Nibble of element `j` (0..32) of a 16-byte nibble array.
#[inline]
fn nibble(qs: &[u8], j: usize) -> u8 {
    if j < 16 {
        qs[j] & 0x0f
    } else {
        qs[j - 16] >> 4
    }
}

pub fn dequantize_q4_0(row: &[u8], out: &mut [f32]) {
    for (blk, o) in row.chunks_exact(Q4_0_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(blk, 0);
        for (j, v) in o.iter_mut().enumerate() {
            *v = (nibble(&blk[2..], j) as i32 - 8) as f32 * d;
        }
    }
}

pub fn dequantize_q4_1(row: &[u8], out: &mut [f32]) {
    for (blk, o) in row.chunks_exact(Q4_1_BYTES).zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (f16_at(blk, 0), f16_at(blk, 2));
        for (j, v) in o.iter_mut().enumerate() {
            // the product is exact, so a fused multiply-add would give the same bits
            *v = nibble(&blk[4..], j) as f32 * d + m;
        }
    }
}

pub fn dequantize_q8_0(row: &[u8], out: &mut [f32]) {
    for (blk, o) in row.chunks_exact(Q8_0_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(blk, 0);
        for (j, v) in o.iter_mut().enumerate() {
            *v = blk[2 + j] as i8 as f32 * d;
        }
    }
}

/// `ggml_vec_dot_q4_0_q8_0` (AVX2) of one row of Q4_0 blocks with one Q8_0 activation row.
pub fn dot_q4_0(w: &[u8], a: ActRow<'_>) -> f32 {
    let mut acc = [0.0f32; LANES];
    for (b, blk) in w.chunks_exact(Q4_0_BYTES).enumerate() {
        let d = f16_at(blk, 0) * a.d[b];
        let qa = &a.q[b * QK..(b + 1) * QK];
        for (l, acc) in acc.iter_mut().enumerate() {
            let s: i32 = (4 * l..4 * l + 4)
                .map(|j| sign_product(nibble(&blk[2..], j) as i8 - 8, qa[j]))
                .sum();
            *acc = fma(d, to_f32(s), *acc);
        }
    }
    hsum8(&acc)
}

/// `ggml_vec_dot_q4_1_q8_1` (AVX2) of one row of Q4_1 blocks with one Q8_1 activation row.
pub fn dot_q4_1(w: &[u8], a: ActRow<'_>) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut summs = 0.0f32;
    for (b, blk) in w.chunks_exact(Q4_1_BYTES).enumerate() {
        let d = f16_at(blk, 0) * a.d[b];
        summs = fma(f16_at(blk, 2), a.s[b], summs);
        let qa = &a.q[b * QK..(b + 1) * QK];
        for (l, acc) in acc.iter_mut().enumerate() {
            let s: i32 = (4 * l..4 * l + 4)
                .map(|j| nibble(&blk[4..], j) as i32 * qa[j] as i32)
                .sum();
            *acc = fma(d, to_f32(s), *acc);
        }
    }
    hsum8(&acc) + summs
}

/// `ggml_vec_dot_q8_0_q8_0` (AVX2) of one row of Q8_0 blocks with one Q8_0 activation row.
pub fn dot_q8_0(w: &[u8], a: ActRow<'_>) -> f32 {
    let mut acc = [0.0f32; LANES];
    for (b, blk) in w.chunks_exact(Q8_0_BYTES).enumerate() {
        let d = f16_at(blk, 0) * a.d[b];
        let qa = &a.q[b * QK..(b + 1) * QK];
        for (l, acc) in acc.iter_mut().enumerate() {
            let s: i32 = (4 * l..4 * l + 4)
                .map(|j| sign_product(blk[2 + j] as i8, qa[j]))
                .sum();
            *acc = fma(d, to_f32(s), *acc);
        }
    }
    hsum8(&acc)
}
