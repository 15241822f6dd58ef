//! The 256-element super-block formats Q4_K, Q5_K and Q6_K (`ggml-common.h`): dequantisation as
//! `dequantize_row_q{4,5,6}_K` and dot products with Q8_K activations in the arithmetic of ggml's
//! AVX2 `ggml_vec_dot_q{4,5,6}_K_q8_K`:
//!
//! ```text
//! Q4_K: d, dmin (f16) | 12 bytes: eight 6-bit scales sc and mins m | 128 bytes of nibbles
//!       64 elements per 32 bytes: low nibbles first (sub-block 2j), then high (2j + 1)
//!       w = d · sc_s · q − dmin · m_s
//! Q5_K: as Q4_K plus 32 bytes qh: bit 2j (low) / 2j + 1 (high) of qh[t] is the fifth bit
//! Q6_K: 128 bytes ql (low nibbles) | 64 bytes qh (2-bit pairs) | 16 int8 scales | d (f16)
//!       w = d · sc_{e/16} · (q − 32)
//!
//! lane l = 0..8 of a super-block's integer sum takes, from every 32-element sub-block s, the
//! elements 4l..4l+3 times that sub-block's scale (Q6_K: the scale of their 16); then
//!   acc_l = fma(d_a · d_w, sumi_l, acc_l)                       (d_a · d_w rounded in f32)
//! Q4_K: mins per pair k = 0..4: acc_m_k = fma(−d_a · dmin, m_2k·S_2k + m_2k+1·S_2k+1, acc_m_k)
//!       with S_s = Σ q_a over sub-block s (bsums);  y = hsum8(acc) + hsum4(acc_m)
//! Q5_K: summs = fma(−d_a · dmin, Σ_s m_s·S_s, summs);  y = hsum8(acc) + summs
//! Q6_K: the −32 offset as integers: lane l subtracts 32·(sc_2l·B_2l + sc_2l+1·B_2l+1) with B the
//!       16-element bsums;  y = hsum8(acc)
//! ```
//!
//! The `summs` FMA of Q5_K is how GCC contracts ggml's `summs += dmin * sum` (checked in a build's
//! disassembly). On x86 llama.cpp repacks Q4_K matrices whose rows are a multiple of 8
//! (`repack.cpp`, `q4_K_8x8_q8_K`), whose f32 order differs from this one. Owns no data.

use super::acts::ActRow;
use super::lanes::{fma, hsum4, hsum8, to_f32, LANES};
use super::legacy::f16_at;

/// Elements per super-block.
pub const QK_K: usize = 256;
pub const Q4_K_BYTES: usize = 144;
pub const Q5_K_BYTES: usize = 176;
pub const Q6_K_BYTES: usize = 210;

/// The eight 6-bit scales and mins of a Q4_K/Q5_K block's 12 scale bytes (ggml's
/// `get_scale_min_k4`).
pub fn scales_mins(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        if j < 4 {
            sc[j] = s[j] & 63;
            m[j] = s[j + 4] & 63;
        } else {
            sc[j] = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
            m[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
    }
    (sc, m)
}

/// Unsigned 4- or 5-bit value of element `e` (0..256) of a Q4_K/Q5_K block (`qh` empty for Q4_K).
#[inline]
fn q45(qs: &[u8], qh: &[u8], e: usize) -> u8 {
    let (j, half, t) = (e / 64, (e / 32) % 2, e % 32);
    let b = qs[32 * j + t];
    let low = if half == 0 { b & 0xf } else { b >> 4 };
    if qh.is_empty() {
        low
    } else {
        low | (((qh[t] >> (2 * j + half)) & 1) << 4)
    }
}

/// Unsigned 6-bit value (before the −32) of element `e` of a Q6_K block.
#[inline]
fn q6(blk: &[u8], e: usize) -> u8 {
    let (ql, qh) = (&blk[..128], &blk[128..192]);
    let (n, k, t) = (e / 128, (e / 32) % 4, e % 32);
    let lb = ql[64 * n + 32 * (k % 2) + t];
    let low = if k < 2 { lb & 0xf } else { lb >> 4 };
    low | (((qh[32 * n + t] >> (2 * k)) & 3) << 4)
}

fn dequantize_q45(row: &[u8], out: &mut [f32], bytes: usize) {
    for (blk, o) in row.chunks_exact(bytes).zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        let (sc, m) = scales_mins(&blk[4..16]);
        let (qh, qs) = if bytes == Q5_K_BYTES {
            (&blk[16..48], &blk[48..])
        } else {
            (&blk[..0], &blk[16..])
        };
        for (e, v) in o.iter_mut().enumerate() {
            let s = e / 32;
            // d · sc and dmin · m are exact, and so is their product with q: one rounding
            *v = d * sc[s] as f32 * q45(qs, qh, e) as f32 - dmin * m[s] as f32;
        }
    }
}

pub fn dequantize_q4_k(row: &[u8], out: &mut [f32]) {
    dequantize_q45(row, out, Q4_K_BYTES)
}

pub fn dequantize_q5_k(row: &[u8], out: &mut [f32]) {
    dequantize_q45(row, out, Q5_K_BYTES)
}

pub fn dequantize_q6_k(row: &[u8], out: &mut [f32]) {
    for (blk, o) in row.chunks_exact(Q6_K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_at(blk, 208);
        for (e, v) in o.iter_mut().enumerate() {
            let sc = blk[192 + e / 16] as i8;
            *v = d * sc as f32 * (q6(blk, e) as i32 - 32) as f32;
        }
    }
}

/// Lane sums of one Q4_K/Q5_K super-block: lane l = Σ_s sc_s · Σ_{t=4l}^{4l+3} q_w · q_a over the
/// eight sub-blocks s of 32.
fn lanes_q45(qs: &[u8], qh: &[u8], sc: &[u8; 8], qa: &[i8]) -> [i32; LANES] {
    let mut sumi = [0i32; LANES];
    for (l, out) in sumi.iter_mut().enumerate() {
        for s in 0..8 {
            let p: i32 = (32 * s + 4 * l..32 * s + 4 * l + 4)
                .map(|e| q45(qs, qh, e) as i32 * qa[e] as i32)
                .sum();
            *out += sc[s] as i32 * p;
        }
    }
    sumi
}

/// `ggml_vec_dot_q4_K_q8_K` (AVX2) of one row of Q4_K blocks with one Q8_K activation row.
pub fn dot_q4_k(w: &[u8], a: ActRow<'_>) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut acc_m = [0.0f32; 4];
    for (b, blk) in w.chunks_exact(Q4_K_BYTES).enumerate() {
        let d = a.d[b] * f16_at(blk, 0);
        let dmin = -a.d[b] * f16_at(blk, 2);
        let (sc, m) = scales_mins(&blk[4..16]);
        let bs = &a.bsums[16 * b..16 * (b + 1)];
        for (k, am) in acc_m.iter_mut().enumerate() {
            let pair = |s: usize| m[s] as i32 * (bs[2 * s] as i32 + bs[2 * s + 1] as i32);
            *am = fma(dmin, to_f32(pair(2 * k) + pair(2 * k + 1)), *am);
        }
        let sumi = lanes_q45(&blk[16..], &[], &sc, &a.q[QK_K * b..QK_K * (b + 1)]);
        for (acc, s) in acc.iter_mut().zip(sumi) {
            *acc = fma(d, to_f32(s), *acc);
        }
    }
    hsum8(&acc) + hsum4(&acc_m)
}

/// `ggml_vec_dot_q5_K_q8_K` (AVX2) of one row of Q5_K blocks with one Q8_K activation row.
pub fn dot_q5_k(w: &[u8], a: ActRow<'_>) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut summs = 0.0f32;
    for (b, blk) in w.chunks_exact(Q5_K_BYTES).enumerate() {
        let d = a.d[b] * f16_at(blk, 0);
        let dmin = -a.d[b] * f16_at(blk, 2);
        let (sc, m) = scales_mins(&blk[4..16]);
        let bs = &a.bsums[16 * b..16 * (b + 1)];
        let mins: i32 = (0..8)
            .map(|s| m[s] as i32 * (bs[2 * s] as i32 + bs[2 * s + 1] as i32))
            .sum();
        summs = fma(dmin, to_f32(mins), summs);
        let sumi = lanes_q45(
            &blk[48..],
            &blk[16..48],
            &sc,
            &a.q[QK_K * b..QK_K * (b + 1)],
        );
        for (acc, s) in acc.iter_mut().zip(sumi) {
            *acc = fma(d, to_f32(s), *acc);
        }
    }
    hsum8(&acc) + summs
}

/// `ggml_vec_dot_q6_K_q8_K` (AVX2) of one row of Q6_K blocks with one Q8_K activation row.
pub fn dot_q6_k(w: &[u8], a: ActRow<'_>) -> f32 {
    let mut acc = [0.0f32; LANES];
    for (b, blk) in w.chunks_exact(Q6_K_BYTES).enumerate() {
        let d = a.d[b] * f16_at(blk, 208);
        let sc = |i: usize| blk[192 + i] as i8 as i32;
        let qa = &a.q[QK_K * b..QK_K * (b + 1)];
        let bs = &a.bsums[16 * b..16 * (b + 1)];
        for (l, acc) in acc.iter_mut().enumerate() {
            let mut s = 0i32;
            for sub in 0..8 {
                // sub-block of 32: lane l's four elements, under the scale of their 16
                let e0 = 32 * sub + 4 * l;
                let p: i32 = (e0..e0 + 4).map(|e| q6(blk, e) as i32 * qa[e] as i32).sum();
                s += sc(e0 / 16) * p;
            }
            s -= (sc(2 * l) * bs[2 * l] as i32 + sc(2 * l + 1) * bs[2 * l + 1] as i32) << 5;
            *acc = fma(d, to_f32(s), *acc);
        }
    }
    hsum8(&acc)
}
