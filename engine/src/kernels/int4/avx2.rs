//! AVX2 integer kernel: nibbles widen to i16 and multiply the i16 activations with `vpmaddwd`
//! (exact in i32); each group's i32 sum converts to f32 once and accumulates with the combined
//! scale `s_w · s_x`. The zero point is applied once per (output, input row) as
//! `−8 · Σ_g s_w s_x Σq_x`, so the inner loop never subtracts it.

use std::arch::x86_64::*;

use super::{Int4View, GROUP, GROUP_BYTES};
use crate::kernels::hsum256;
use crate::kernels::quant::QuantRows;

/// Output rows per block: independent accumulator chains sharing an input row's loads.
const OB: usize = 4;

/// A block of NB output rows x NR input rows; `comb[(bi * NR + ri) * gs + g] = s_w · s_x`.
/// Groups go in pairs: one 32-byte load holds two groups, unpacked to words within 128-bit
/// lanes (group A in the low lane, B in the high one) against the paired activation layout,
/// so one conversion and one FMA serve two groups; an odd last group runs alone.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn block<const NB: usize, const NR: usize>(
    w: &Int4View<'_>,
    xq: &QuantRows,
    comb: &[f32],
    corr: &[f32],
    gs: usize,
    ob: usize,
    r0: usize,
    y: &mut [f32],
    ys: usize,
    y_col: usize,
) {
    let groups = w.cols / GROUP;
    let mask = _mm256_set1_epi16(0x0f);
    let zero = _mm256_setzero_si256();
    let mut acc = [[_mm256_setzero_ps(); NR]; NB];
    let qp = w.q.as_ptr();
    let xp = xq.pairs.as_ptr();
    let mut g = 0;
    while g + 2 <= groups {
        for bi in 0..NB {
            let v = _mm256_loadu_si256(
                qp.add((ob + bi) * w.q_stride + g * GROUP_BYTES) as *const __m256i
            );
            let w0 = _mm256_unpacklo_epi8(v, zero);
            let w1 = _mm256_unpackhi_epi8(v, zero);
            let lo0 = _mm256_and_si256(w0, mask);
            let hi0 = _mm256_srli_epi16(w0, 4);
            let lo1 = _mm256_and_si256(w1, mask);
            let hi1 = _mm256_srli_epi16(w1, 4);
            for ri in 0..NR {
                let x = xp.add((r0 + ri) * w.cols + g * GROUP) as *const __m256i;
                let p = _mm256_add_epi32(
                    _mm256_add_epi32(
                        _mm256_madd_epi16(lo0, _mm256_loadu_si256(x)),
                        _mm256_madd_epi16(hi0, _mm256_loadu_si256(x.add(1))),
                    ),
                    _mm256_add_epi32(
                        _mm256_madd_epi16(lo1, _mm256_loadu_si256(x.add(2))),
                        _mm256_madd_epi16(hi1, _mm256_loadu_si256(x.add(3))),
                    ),
                );
                let c = comb.as_ptr().add((bi * NR + ri) * gs + g);
                let s = _mm256_set_m128(_mm_set1_ps(*c.add(1)), _mm_set1_ps(*c));
                acc[bi][ri] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[bi][ri]);
            }
        }
        g += 2;
    }
    if g < groups {
        for bi in 0..NB {
            let b =
                _mm_loadu_si128(qp.add((ob + bi) * w.q_stride + g * GROUP_BYTES) as *const __m128i);
            let b = _mm256_cvtepu8_epi16(b);
            let lo = _mm256_and_si256(b, mask);
            let hi = _mm256_srli_epi16(b, 4);
            for ri in 0..NR {
                let x = xp.add((r0 + ri) * w.cols + g * GROUP) as *const __m256i;
                let p = _mm256_add_epi32(
                    _mm256_madd_epi16(lo, _mm256_loadu_si256(x)),
                    _mm256_madd_epi16(hi, _mm256_loadu_si256(x.add(1))),
                );
                let s = _mm256_set1_ps(*comb.get_unchecked((bi * NR + ri) * gs + g));
                acc[bi][ri] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[bi][ri]);
            }
        }
    }
    for bi in 0..NB {
        for ri in 0..NR {
            y[(r0 + ri) * ys + y_col + bi] = hsum256(acc[bi][ri]) + corr[bi * NR + ri];
        }
    }
}

/// Combined scales of NB output rows x NR input rows and each pair's zero-point correction.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn scales<const NB: usize, const NR: usize>(
    w: &Int4View<'_>,
    xq: &QuantRows,
    ob: usize,
    r0: usize,
    gs: usize,
    comb: &mut [f32],
    corr: &mut [f32],
) {
    let groups = w.cols / GROUP;
    for bi in 0..NB {
        let sw = &w.scales[(ob + bi) * w.s_stride..(ob + bi) * w.s_stride + groups];
        for ri in 0..NR {
            let (sx, sum) = (xq.scales(r0 + ri), xq.sums(r0 + ri));
            let dst = &mut comb[(bi * NR + ri) * gs..(bi * NR + ri) * gs + groups];
            let mut c8 = _mm256_setzero_ps();
            let mut g = 0;
            while g + 8 <= groups {
                let h = _mm_loadu_si128(sw.as_ptr().add(g) as *const __m128i);
                let v = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_loadu_ps(sx.as_ptr().add(g)));
                _mm256_storeu_ps(dst.as_mut_ptr().add(g), v);
                c8 = _mm256_fmadd_ps(v, _mm256_loadu_ps(sum.as_ptr().add(g)), c8);
                g += 8;
            }
            let mut c = hsum256(c8);
            if g + 4 <= groups {
                // four groups convert in one instruction (exact, as to_f32 is); the sum below
                // keeps the scalar order, so the bits do not change
                let h = _mm_loadl_epi64(sw.as_ptr().add(g) as *const __m128i);
                let v = _mm_mul_ps(_mm_cvtph_ps(h), _mm_loadu_ps(sx.as_ptr().add(g)));
                _mm_storeu_ps(dst.as_mut_ptr().add(g), v);
                for k in g..g + 4 {
                    c += dst[k] * sum[k];
                }
                g += 4;
            }
            for k in g..groups {
                let v = sw[k].to_f32() * sx[k];
                dst[k] = v;
                c += v * sum[k];
            }
            corr[bi * NR + ri] = -8.0 * c;
        }
    }
}

/// Output rows `o` for every input row of `xq` into y ([n, ys], columns from 0).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `w` in bounds (`Int4View::assert_in_bounds`), `xq`
/// consistent with `xq.cols == w.cols`, group 32 and its `pairs` filled (`has_pairs`),
/// `o.end <= w.rows`, and `y` at least `xq.n`
/// rows of `ys >= o.len()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_rows(
    w: &Int4View<'_>,
    xq: &QuantRows,
    o: std::ops::Range<usize>,
    y: &mut [f32],
    ys: usize,
) {
    let n = xq.n;
    let gs = (w.cols / GROUP).next_multiple_of(8);
    let mut comb = vec![0.0f32; OB * 2 * gs];
    let mut corr = [0.0f32; OB * 2];
    let mut ob = o.start;
    while ob < o.end {
        let nb = OB.min(o.end - ob);
        let col = ob - o.start;
        let mut r0 = 0;
        while r0 < n {
            let nr = 2.min(n - r0);
            macro_rules! run {
                ($nb:literal, $nr:literal, $ob:expr, $col:expr) => {{
                    scales::<$nb, $nr>(w, xq, $ob, r0, gs, &mut comb, &mut corr);
                    block::<$nb, $nr>(w, xq, &comb, &corr, gs, $ob, r0, y, ys, $col);
                }};
            }
            match (nb, nr) {
                (4, 2) => run!(4, 2, ob, col),
                (4, 1) => run!(4, 1, ob, col),
                _ => {
                    // tails: one output row at a time, same per-(row, output) sequence
                    for bi in 0..nb {
                        if nr == 2 {
                            run!(1, 2, ob + bi, col + bi);
                        } else {
                            run!(1, 1, ob + bi, col + bi);
                        }
                    }
                }
            }
            r0 += nr;
        }
        ob += nb;
    }
}
