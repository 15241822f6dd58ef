//! AVX2 kernels of the K-quant products: `kquants`' arithmetic with the instructions of ggml's
//! AVX2 `ggml_vec_dot_q{4,5,6}_K_q8_K`. Per super-block the 256 products go through `vpmaddubsw`
//! (unsigned weights 0..63 times int8 activations: pair sums far from saturation) and `vpmaddwd`
//! by the sub-block scales into eight exact i32 lanes, which one conversion and one FMA add to
//! the accumulator; the minimum (Q4_K, Q5_K) and offset (Q6_K) terms come from the activations'
//! bsums as exact integers. Scales are broadcast with `set1` where ggml shuffles them out of a
//! register: the same integers either way.
//!
//! One output and one input row at a time: a super-block is enough independent work to hide the
//! single FMA it ends in. The same bits as `kquants`' portable dots.

use std::arch::x86_64::*;
use std::ops::Range;

use super::acts::QuantizedActs;
use super::format::BlockFormat;
use super::kquants::{scales_mins, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES, QK_K};
use super::stored::BlockMatrix;
use crate::kernels::hsum256;

/// The formats these kernels cover.
pub fn covers(format: BlockFormat) -> bool {
    matches!(
        format,
        BlockFormat::Q4K | BlockFormat::Q5K | BlockFormat::Q6K
    )
}

/// One input row's Q8_K activations: values, scales and bsums.
#[derive(Clone, Copy)]
struct Acts {
    q: *const i8,
    d: *const f32,
    bsums: *const i16,
}

type Dot = unsafe fn(*const u8, Acts, usize) -> f32;

/// As `avx2::rows`, for the K-quants; false for any other format.
///
/// # Safety
/// As `avx2::rows`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rows(
    m: &BlockMatrix,
    xq: &QuantizedActs,
    o: Range<usize>,
    y: &mut [f32],
    ys: usize,
) -> bool {
    let dot: Dot = match m.format {
        BlockFormat::Q4K => dot_q4_k,
        BlockFormat::Q5K => dot_q5_k,
        BlockFormat::Q6K => dot_q6_k,
        _ => return false,
    };
    let all = xq.all_rows();
    let blocks = m.cols / QK_K;
    let rb = m.row_bytes();
    let base = m.weight_bytes().as_ptr();
    for (oi, orow) in o.enumerate() {
        for r in 0..xq.n() {
            let a = Acts {
                q: all.q.as_ptr().add(r * m.cols),
                d: all.d.as_ptr().add(r * blocks),
                bsums: all.bsums.as_ptr().add(r * blocks * 16),
            };
            y[r * ys + oi] = dot(base.add(orow * rb), a, blocks);
        }
    }
    true
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = (p as *const u16).read_unaligned();
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// Σ_s m_s · (bsums_2s + bsums_2s+1) in the four pairs of sub-blocks ggml's `vpmaddwd` forms.
#[inline]
unsafe fn min_pairs(m: &[u8; 8], bs: *const i16) -> [i32; 4] {
    let s = |k: usize| m[k] as i32 * (*bs.add(2 * k) as i32 + *bs.add(2 * k + 1) as i32);
    [s(0) + s(1), s(2) + s(3), s(4) + s(5), s(6) + s(7)]
}

/// The eight lane sums of a Q4_K or Q5_K super-block (`qh` null for Q4_K).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn lanes_q45(qs: *const u8, qh: *const u8, sc: &[u8; 8], q8: *const i8) -> __m256i {
    let m4 = _mm256_set1_epi8(0x0f);
    let hbits = if qh.is_null() {
        _mm256_setzero_si256()
    } else {
        _mm256_loadu_si256(qh as *const __m256i)
    };
    let mut sumi = _mm256_setzero_si256();
    for j in 0..4 {
        let bits = _mm256_loadu_si256(qs.add(32 * j) as *const __m256i);
        let mut lo = _mm256_and_si256(bits, m4);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        if !qh.is_null() {
            // the fifth bit: 16 where bit 2j (low half) / 2j + 1 (high half) of qh[t] is set
            let sixteen = _mm256_set1_epi8(16);
            let bl = _mm256_set1_epi8((1u8 << (2 * j)) as i8);
            let bh = _mm256_set1_epi8((1u8 << (2 * j + 1)) as i8);
            let set = |b: __m256i| _mm256_cmpeq_epi8(_mm256_and_si256(hbits, b), b);
            lo = _mm256_add_epi8(lo, _mm256_and_si256(set(bl), sixteen));
            hi = _mm256_add_epi8(hi, _mm256_and_si256(set(bh), sixteen));
        }
        let ql = _mm256_loadu_si256(q8.add(64 * j) as *const __m256i);
        let qhh = _mm256_loadu_si256(q8.add(64 * j + 32) as *const __m256i);
        let pl = _mm256_madd_epi16(
            _mm256_set1_epi16(sc[2 * j] as i16),
            _mm256_maddubs_epi16(lo, ql),
        );
        let ph = _mm256_madd_epi16(
            _mm256_set1_epi16(sc[2 * j + 1] as i16),
            _mm256_maddubs_epi16(hi, qhh),
        );
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
    }
    sumi
}

/// `ggml_vec_dot_q4_K_q8_K` over `blocks` super-blocks at `w`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_k(w: *const u8, a: Acts, blocks: usize) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = [0.0f32; 4];
    for b in 0..blocks {
        let blk = w.add(b * Q4_K_BYTES);
        let da = *a.d.add(b);
        let d = da * f16_at(blk);
        let dmin = -da * f16_at(blk.add(2));
        let (sc, m) = scales_mins(std::slice::from_raw_parts(blk.add(4), 12));
        for (am, p) in acc_m.iter_mut().zip(min_pairs(&m, a.bsums.add(16 * b))) {
            *am = dmin.mul_add(p as f32, *am);
        }
        let sumi = lanes_q45(blk.add(16), std::ptr::null(), &sc, a.q.add(QK_K * b));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum256(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]))
}

/// `ggml_vec_dot_q5_K_q8_K` over `blocks` super-blocks at `w`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q5_k(w: *const u8, a: Acts, blocks: usize) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0.0f32;
    for b in 0..blocks {
        let blk = w.add(b * Q5_K_BYTES);
        let da = *a.d.add(b);
        let d = da * f16_at(blk);
        let dmin = -da * f16_at(blk.add(2));
        let (sc, m) = scales_mins(std::slice::from_raw_parts(blk.add(4), 12));
        let mins: i32 = min_pairs(&m, a.bsums.add(16 * b)).iter().sum();
        summs = dmin.mul_add(mins as f32, summs);
        let sumi = lanes_q45(blk.add(48), blk.add(16), &sc, a.q.add(QK_K * b));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum256(acc) + summs
}

/// `ggml_vec_dot_q6_K_q8_K` over `blocks` super-blocks at `w`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q6_k(w: *const u8, a: Acts, blocks: usize) -> f32 {
    let m15 = _mm256_set1_epi8(15);
    let mut acc = _mm256_setzero_ps();
    for b in 0..blocks {
        let blk = w.add(b * Q6_K_BYTES);
        let d = *a.d.add(b) * f16_at(blk.add(208));
        let scales = _mm_loadu_si128(blk.add(192) as *const __m128i);
        let sc = |i: usize| *blk.add(192 + i) as i8 as i16;
        let q8 = a.q.add(QK_K * b);
        // the −32 offset: lane l takes 32 · (sc_2l · B_2l + sc_2l+1 · B_2l+1)
        let bsums = _mm256_loadu_si256(a.bsums.add(16 * b) as *const __m256i);
        let offset = _mm256_slli_epi32(_mm256_madd_epi16(bsums, _mm256_cvtepi8_epi16(scales)), 5);
        let mut sumi = _mm256_setzero_si256();
        for j in 0..2 {
            let b1 = _mm256_loadu_si256(blk.add(64 * j) as *const __m256i);
            let b2 = _mm256_loadu_si256(blk.add(64 * j + 32) as *const __m256i);
            let h = _mm256_loadu_si256(blk.add(128 + 32 * j) as *const __m256i);
            let q = [
                _mm256_or_si256(
                    _mm256_and_si256(b1, m15),
                    _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(3)), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(b2, m15),
                    _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(12)), 2),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(b1, 4), m15),
                    _mm256_and_si256(h, _mm256_set1_epi8(48)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(b2, 4), m15),
                    _mm256_srli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(-64)), 2),
                ),
            ];
            let mut p = [_mm256_setzero_si256(); 4];
            for k in 0..4 {
                let y = _mm256_loadu_si256(q8.add(128 * j + 32 * k) as *const __m256i);
                let s = 8 * j + 2 * k;
                // elements 0-15 of the 32 under scale s (low half), 16-31 under s + 1
                let scale = _mm256_set_m128i(_mm_set1_epi16(sc(s + 1)), _mm_set1_epi16(sc(s)));
                p[k] = _mm256_madd_epi16(scale, _mm256_maddubs_epi16(q[k], y));
            }
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[0], p[1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[2], p[3]));
        }
        sumi = _mm256_sub_epi32(sumi, offset);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum256(acc)
}
