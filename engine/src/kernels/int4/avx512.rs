//! AVX-512 integer kernel (F, BW, VNNI): the AVX2 kernel's arithmetic on four groups at once. One
//! 64-byte load holds four groups of an output row, one per 128-bit lane; unpacking to words
//! within lanes matches the activations' `quads` layout, `vpdpwssd` multiplies and sums word pairs
//! into each lane's i32 (exact, as `vpmaddwd` + add is), and one conversion and one FMA with the
//! four groups' combined scales (each broadcast to its lane) serve the four. A short last four is
//! loaded under a byte mask (absent groups read as zero, with zero activations and zero scales).
//! The zero point enters each group's integer sum exactly (`quad_zero`). Each (row, output) accumulator's sequence does not depend on the batch, so a
//! row's result is bit-identical alone or batched; it differs from the AVX2 kernel's only in the
//! order of the f32 additions across groups.

use std::arch::x86_64::*;

use super::{Int4View, GROUP, GROUP_BYTES};
use crate::kernels::quant::QuantRows;

/// Output rows per block when one input row is multiplied (decode) and the rows are short
/// (`STREAM_COLS` inputs or fewer, as `inkling-mini`'s experts): independent chains. Longer rows
/// stream one at a time, which the hardware prefetcher follows best (side by side at the `inkling`
/// expert shape, 3072 x 6144: about 1.7x the bytes per second of eight interleaved rows).
const OB1: usize = 8;
const STREAM_COLS: usize = 1024;
/// Output rows x input rows per block for batches (prefill, grouped experts).
const OB: usize = 4;
const RB: usize = 4;
/// Bytes ahead of a row's current load to prefetch (measured: 128-1024 all help, 384 best here).
const PREFETCH: usize = 384;

/// Four f16 group scales of output row `o` from group `g`, zero past the last group.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn four_scales(w: &Int4View<'_>, o: usize, g: usize, present: usize) -> __m128 {
    let p = w.scales.as_ptr().add(o * w.s_stride + g);
    if present == 4 {
        _mm_cvtph_ps(_mm_loadl_epi64(p as *const __m128i))
    } else {
        let mut h = [0u16; 4];
        std::ptr::copy_nonoverlapping(p as *const u16, h.as_mut_ptr(), present);
        _mm_cvtph_ps(_mm_loadl_epi64(h.as_ptr() as *const __m128i))
    }
}

/// Four f32 values from `v[g..]`, zero past `present`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn four(v: &[f32], g: usize, present: usize) -> __m128 {
    if present == 4 {
        _mm_loadu_ps(v.as_ptr().add(g))
    } else {
        let mut t = [0.0f32; 4];
        t[..present].copy_from_slice(&v[g..g + present]);
        _mm_loadu_ps(t.as_ptr())
    }
}

/// A block of NB output rows x NR input rows. Per four groups, each (output, row) pair's integer
/// sums start from the zero-point terms (`quad_zero`), so each group's i32 is exactly
/// Σ (q_w − 8) q_x, and its combined scales `s_w · s_x` are formed in registers.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn block<const NB: usize, const NR: usize>(
    w: &Int4View<'_>,
    xq: &QuantRows,
    ob: usize,
    r0: usize,
    y: &mut [f32],
    ys: usize,
    y_col: usize,
) {
    let groups = w.cols / GROUP;
    let quads = groups.div_ceil(4);
    let qs = xq.quad_stride();
    let nib = _mm512_set1_epi16(0x0f);
    let zero = _mm512_setzero_si512();
    // lane k takes the k-th of four scales
    let spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    let mut acc = [[_mm512_setzero_ps(); NR]; NB];
    let qp = w.q.as_ptr();
    let xp = xq.quads.as_ptr();
    let zp = xq.quad_zero.as_ptr();
    for f in 0..quads {
        let g = 4 * f;
        let present = (groups - g).min(4);
        let mut sx = [_mm_setzero_ps(); NR];
        for ri in 0..NR {
            sx[ri] = four(xq.scales(r0 + ri), g, present);
        }
        for bi in 0..NB {
            let src = qp.add((ob + bi) * w.q_stride + g * GROUP_BYTES);
            // rows stream from memory: ask for the lines a few fours ahead (a hint: never faults)
            _mm_prefetch::<_MM_HINT_T0>(src.wrapping_add(PREFETCH) as *const i8);
            // a plain load for a whole four (masked loads are slow on some cores); a short last
            // four reads only its own bytes
            let v = if present == 4 {
                _mm512_loadu_si512(src as *const __m512i)
            } else {
                _mm512_maskz_loadu_epi8((1u64 << (present * GROUP_BYTES)) - 1, src as *const i8)
            };
            let w0 = _mm512_unpacklo_epi8(v, zero);
            let w1 = _mm512_unpackhi_epi8(v, zero);
            let lo0 = _mm512_and_si512(w0, nib);
            let hi0 = _mm512_srli_epi16(w0, 4);
            let lo1 = _mm512_and_si512(w1, nib);
            let hi1 = _mm512_srli_epi16(w1, 4);
            let sw = four_scales(w, ob + bi, g, present);
            for ri in 0..NR {
                let x = xp.add((r0 + ri) * qs + f * 128) as *const __m512i;
                let z = zp.add(((r0 + ri) * quads + f) * 16) as *const __m512i;
                let a = _mm512_dpwssd_epi32(_mm512_loadu_si512(z), lo0, _mm512_loadu_si512(x));
                let a = _mm512_dpwssd_epi32(a, hi0, _mm512_loadu_si512(x.add(1)));
                let b = _mm512_dpwssd_epi32(zero, lo1, _mm512_loadu_si512(x.add(2)));
                let b = _mm512_dpwssd_epi32(b, hi1, _mm512_loadu_si512(x.add(3)));
                let c = _mm_mul_ps(sw, sx[ri]);
                let s = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(c));
                let p = _mm512_cvtepi32_ps(_mm512_add_epi32(a, b));
                acc[bi][ri] = _mm512_fmadd_ps(p, s, acc[bi][ri]);
            }
        }
    }
    for bi in 0..NB {
        for ri in 0..NR {
            y[(r0 + ri) * ys + y_col + bi] = _mm512_reduce_add_ps(acc[bi][ri]);
        }
    }
}

/// Output rows `o` for every input row of `xq` into y ([n, ys], columns from 0).
///
/// # Safety
/// The CPU must have AVX2, FMA, F16C and AVX-512 F, BW and VNNI; `w` in bounds
/// (`Int4View::assert_in_bounds`), `xq` consistent with `xq.cols == w.cols`, group 32 and its
/// `quads` and `quad_zero` filled (`xq.quads.len() >= xq.n * xq.quad_stride()`,
/// `xq.quad_zero.len() >= xq.n * xq.quad_stride() / 8`), `o.end <= w.rows`, and `y` at
/// least `xq.n` rows of `ys >= o.len()`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
pub unsafe fn matmul_rows(
    w: &Int4View<'_>,
    xq: &QuantRows,
    o: std::ops::Range<usize>,
    y: &mut [f32],
    ys: usize,
) {
    let n = xq.n;
    let mut ob = o.start;
    let wide = match n {
        1 if w.cols > STREAM_COLS => 1,
        1 => OB1,
        _ => OB,
    };
    while ob < o.end {
        let nb = wide.min(o.end - ob);
        let col = ob - o.start;
        let mut r0 = 0;
        while r0 < n {
            let nr = RB.min(n - r0);
            macro_rules! run {
                ($nb:literal, $nr:literal, $ob:expr, $col:expr) => {{
                    block::<$nb, $nr>(w, xq, $ob, r0, y, ys, $col);
                }};
            }
            match (nb, nr) {
                (8, 1) => run!(8, 1, ob, col),
                (4, 4) => run!(4, 4, ob, col),
                (4, 3) => run!(4, 3, ob, col),
                (4, 2) => run!(4, 2, ob, col),
                (4, 1) => run!(4, 1, ob, col),
                _ => {
                    // tails: one output row at a time, same per-(row, output) sequence
                    for bi in 0..nb {
                        match nr {
                            4 => run!(1, 4, ob + bi, col + bi),
                            3 => run!(1, 3, ob + bi, col + bi),
                            2 => run!(1, 2, ob + bi, col + bi),
                            _ => run!(1, 1, ob + bi, col + bi),
                        }
                    }
                }
            }
            r0 += nr;
        }
        ob += nb;
    }
}
