//! AVX2 kernels of the block products: Q4_0, Q4_1 and Q8_0 (`legacy`'s arithmetic, instruction
//! for instruction what ggml's AVX2 dots issue per block: nibbles spread to 32 bytes, `vpsignb`
//! for the signed formats, `vpmaddubsw` + `vpmaddwd` by ones into eight i32 lanes of four
//! products, one conversion and one FMA by `d_w · d_a`); the K-quants are in `avx2_k`, the float
//! formats in `avx2_f`.
//!
//! Where ggml walks one output at a time, a step here takes a tile of R output rows × NR input
//! rows (4 × 1 for a decode token; 2 × 2, 1 × 3 or 1 × 4 for a batch: at 2 × 4 the eight vector
//! and eight scalar accumulators outgrow the sixteen registers): each weight block is unpacked
//! once for the NR input rows, and the R · NR independent accumulator chains hide the FMA latency
//! that bounds one dot. Per (output, input row) the accumulator sees the same operations in the
//! same order as `legacy`'s portable dot, whatever the tile, so the two give the same bits.

use std::arch::x86_64::*;
use std::ops::Range;

use super::acts::QuantizedActs;
use super::format::BlockFormat;
use super::legacy::{Q4_0_BYTES, Q4_1_BYTES, Q8_0_BYTES, QK};
use super::legacy_x86::{f16_at, nibbles, Acts};
use super::stored::BlockMatrix;
use crate::kernels::hsum256;

/// The formats these kernels cover.
pub fn covers(format: BlockFormat) -> bool {
    use BlockFormat::*;
    matches!(format, Q4_0 | Q4_1 | Q8_0)
        || super::avx2_k::covers(format)
        || super::avx2_f::covers(format)
}

/// Outputs `o` of `m` for every input row of `xq` into `y[r * ys + (o − o.start)]`; false (and
/// nothing written) for a format this module does not cover.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `xq` holds `m.format`'s vec_dot type with `m.cols` columns;
/// `o` lies inside `m.rows`; `y` holds `xq.n()` rows of stride `ys ≥ o.len()` (the last may stop
/// after `o.len()` values). `m`'s bytes hold `rows · row_bytes` (`BlockMatrix::new` checks it).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rows(
    m: &BlockMatrix,
    xq: &QuantizedActs,
    o: Range<usize>,
    y: &mut [f32],
    ys: usize,
) -> bool {
    match m.format {
        BlockFormat::Q4_0 => legacy_rows::<Q40>(m, xq, o, y, ys),
        BlockFormat::Q4_1 => legacy_rows::<Q41>(m, xq, o, y, ys),
        BlockFormat::Q8_0 => legacy_rows::<Q80>(m, xq, o, y, ys),
        _ => {
            return super::avx2_k::rows(m, xq, o.clone(), y, ys)
                || super::avx2_f::rows(m, xq, o, y, ys)
        }
    }
    true
}

/// A weight block unpacked for the integer step: `a` the unsigned bytes `vpmaddubsw` takes
/// (|q| for the signed formats), `x` the signed values whose signs go to the activations.
struct Block {
    a: __m256i,
    x: __m256i,
    d: f32,
    m: f32,
}

trait Legacy {
    const BYTES: usize;
    /// Q4_1's `m_w · s_a` term.
    const MIN: bool;
    unsafe fn unpack(p: *const u8) -> Block;
}

struct Q40;
struct Q41;
struct Q80;

impl Legacy for Q40 {
    const BYTES: usize = Q4_0_BYTES;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> Block {
        let x = _mm256_sub_epi8(nibbles(p.add(2)), _mm256_set1_epi8(8));
        Block {
            a: _mm256_sign_epi8(x, x),
            x,
            d: f16_at(p),
            m: 0.0,
        }
    }
}

impl Legacy for Q41 {
    const BYTES: usize = Q4_1_BYTES;
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> Block {
        // d and m side by side: one conversion
        let dm = _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
        let a = nibbles(p.add(4));
        Block {
            a,
            x: a,
            d: _mm_cvtss_f32(dm),
            m: _mm_cvtss_f32(_mm_movehdup_ps(dm)),
        }
    }
}

impl Legacy for Q80 {
    const BYTES: usize = Q8_0_BYTES;
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> Block {
        let x = _mm256_loadu_si256(p.add(2) as *const __m256i);
        Block {
            a: _mm256_sign_epi8(x, x),
            x,
            d: f16_at(p),
            m: 0.0,
        }
    }
}

/// The outputs of tile rows `w + i · row_bytes` (i < R) for input rows `r0..r0 + NR`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tile<F: Legacy, const R: usize, const NR: usize>(
    w: *const u8,
    row_bytes: usize,
    acts: Acts,
    r0: usize,
) -> [[f32; NR]; R] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); NR]; R];
    let mut summs = [[0.0f32; NR]; R];
    // the same place `AHEAD_TILES` tiles on
    let ahead = super::AHEAD_TILES * R * row_bytes;
    for b in 0..acts.blocks {
        for i in 0..R {
            let at = w.add(i * row_bytes + b * F::BYTES);
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(ahead) as *const i8);
            let blk = F::unpack(at);
            for ri in 0..NR {
                let r = r0 + ri;
                let qy = _mm256_loadu_si256(acts.q.add(r * acts.cols + b * QK) as *const __m256i);
                let sy = if F::MIN {
                    qy
                } else {
                    _mm256_sign_epi8(qy, blk.x)
                };
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(blk.a, sy), ones);
                let at = r * acts.blocks + b;
                let d = _mm256_set1_ps(blk.d * *acts.d.add(at));
                acc[i][ri] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[i][ri]);
                if F::MIN {
                    summs[i][ri] = blk.m.mul_add(*acts.s.add(at), summs[i][ri]);
                }
            }
        }
    }
    let mut out = [[0.0f32; NR]; R];
    for i in 0..R {
        for ri in 0..NR {
            let h = hsum256(acc[i][ri]);
            // Q4_0 and Q8_0 return the sum itself (adding 0.0 would turn −0.0 into +0.0)
            out[i][ri] = if F::MIN { h + summs[i][ri] } else { h };
        }
    }
    out
}

/// The input rows `r0..r0 + NR` against outputs `o`, in tiles of R rows and a rest of single rows.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tiles<F: Legacy, const R: usize, const NR: usize>(
    m: &BlockMatrix,
    acts: Acts,
    r0: usize,
    o: Range<usize>,
    y: &mut [f32],
    ys: usize,
) {
    let rb = m.row_bytes();
    let base = m.weight_bytes().as_ptr();
    let mut oi = 0;
    while oi < o.len() {
        let w = base.add((o.start + oi) * rb);
        if o.len() - oi >= R {
            let v = tile::<F, R, NR>(w, rb, acts, r0);
            for (i, v) in v.iter().enumerate() {
                for (ri, v) in v.iter().enumerate() {
                    y[(r0 + ri) * ys + oi + i] = *v;
                }
            }
            oi += R;
        } else {
            let v = tile::<F, 1, NR>(w, rb, acts, r0);
            for (ri, v) in v[0].iter().enumerate() {
                y[(r0 + ri) * ys + oi] = *v;
            }
            oi += 1;
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn legacy_rows<F: Legacy>(
    m: &BlockMatrix,
    xq: &QuantizedActs,
    o: Range<usize>,
    y: &mut [f32],
    ys: usize,
) {
    let acts = Acts::of(m, xq);
    let mut r0 = 0;
    if super::avx512::takes(m, xq) {
        // SAFETY: `takes` checked the CPU and the batch; this function's contract gives the rest
        r0 = super::avx512::rows(m, xq, o.clone(), y, ys);
    }
    while r0 < xq.n() {
        let nr = (xq.n() - r0).min(4);
        match nr {
            1 => tiles::<F, 4, 1>(m, acts, r0, o.clone(), y, ys),
            2 => tiles::<F, 2, 2>(m, acts, r0, o.clone(), y, ys),
            3 => tiles::<F, 1, 3>(m, acts, r0, o.clone(), y, ys),
            _ => tiles::<F, 1, 4>(m, acts, r0, o.clone(), y, ys),
        }
        r0 += nr;
    }
}
