//! Batches of Q4_0, Q4_1 and Q8_0 products on AVX-512 with VNNI, giving `avx2`'s bits (and so
//! the portable dots' and ggml's) in fewer instructions.
//!
//! `avx2` computes, per weight block b, output row o and input row r, eight i32 lanes (lane l the
//! exact sum of elements 4l..4l+3 of `w · q_x`), converts them, and adds `(d_w · d_x) · lanes` into
//! eight f32 accumulators with one fused multiply-add; a row's output is those eight reduced
//! (`hsum256`). Here a 512-bit register holds the eight lanes of two input rows side by side, so one
//! conversion, one multiply of the scales and one fused multiply-add serve both, and
//! `vpdpbusd` forms the exact lane sums in one instruction:
//!
//! - Q4_1's weights are unsigned nibbles, which `vpdpbusd` (unsigned × signed bytes, four products
//!   summed in i32) takes as they are: the same sums `vpmaddubsw` + `vpmaddwd` give.
//! - Q4_0 (`x = n − 8`) and Q8_0 (`x = u − 128` with `u = x XOR 0x80`) take the unsigned byte and a
//!   correction: `Σ x·q = Σ u·q − K·Σ q` over a lane's four, exact in i32 (K = 8 or 128), where
//!   `Σ q` is itself one `vpdpbusd` of K-filled bytes with the activations. `avx2`'s `vpsignb` form
//!   gives `Σ x·q` too, except for an activation byte of −128 (its negation wraps), which our
//!   quantiser produces only from NaN or infinite input: such batches stay on `avx2`
//!   (`QuantizedActs::has_min_byte`).
//!
//! Each lane sees the same integer sum, the same conversion, the same product of scales (a
//! multiply of two f32, commutative) and the same fused multiply-add in block order; the two
//! halves reduce with `hsum256` in `avx2`'s order. Q4_1's `m_w · s_x` terms are fused in block order
//! per (output, row) as there, with one output's terms for up to eight input rows in the lanes of
//! one register (a lane's fused multiply-add is the scalar one). So a row's result does not depend
//! on this path, the batch or the pairing. A tile reads four output rows against up to eight input
//! rows, so that each weight block is unpacked once for four pairs.

use std::arch::x86_64::*;
use std::ops::Range;

use super::acts::QuantizedActs;
use super::format::BlockFormat;
use super::legacy::{Q4_0_BYTES, Q4_1_BYTES, Q8_0_BYTES, QK};
use super::legacy_x86::{f16_at, Acts};
use super::stored::BlockMatrix;
use crate::kernels::hsum256;

/// Output rows a tile reads together (each weight block unpacked once for every input pair).
const R: usize = 4;

/// Whether this path runs here and takes `xq` against `m`: the CPU has AVX-512 (F, BW, VL) with
/// VNNI and the integer paths are not capped below it, the format is one of the three, and the
/// batch has a pair of rows (and, for the signed formats, no −128 byte).
pub fn takes(m: &BlockMatrix, xq: &QuantizedActs) -> bool {
    let format_ok = match m.format {
        BlockFormat::Q4_1 => true,
        BlockFormat::Q4_0 | BlockFormat::Q8_0 => !xq.has_min_byte(),
        _ => false,
    };
    format_ok && xq.n() >= 2 && vnni512()
}

/// AVX-512 with VNNI and VL on this CPU, and `MOEFLEET_ISA` not capping the integer paths below it.
pub(super) fn vnni512() -> bool {
    static VL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let vl = *VL.get_or_init(|| is_x86_feature_detected!("avx512vl"));
    vl && crate::kernels::int_path() == Some(crate::kernels::IntPath::Avx512Vnni)
}

/// Outputs `o` of `m` for the input rows `0..2·pairs` of `xq` into `y[r * ys + (o − o.start)]`;
/// returns the rows done (2·pairs, with `pairs = xq.n() / 2`).
///
/// # Safety
/// `takes(m, xq)` holds; `o` lies inside `m.rows`; `y` holds `xq.n()` rows of stride `ys ≥
/// o.len()`; `xq` is `m`'s vec_dot type with `m.cols` columns (`BlockMatrix::matmul` checks).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn rows(
    m: &BlockMatrix,
    xq: &QuantizedActs,
    o: Range<usize>,
    y: &mut [f32],
    ys: usize,
) -> usize {
    match m.format {
        BlockFormat::Q4_0 => pairs::<Q40>(m, xq, o, y, ys),
        BlockFormat::Q4_1 => pairs::<Q41>(m, xq, o, y, ys),
        _ => pairs::<Q80>(m, xq, o, y, ys),
    }
}

/// `rows` for one format: eight input rows at a time while eight remain, then four, then pairs.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn pairs<F: Unsigned>(
    m: &BlockMatrix,
    xq: &QuantizedActs,
    o: Range<usize>,
    y: &mut [f32],
    ys: usize,
) -> usize {
    let acts = Acts::of(m, xq);
    let n = xq.n();
    // Q4_1's `s_x` block-major, so that a tile loads its rows' values for a block at once (a
    // transpose, done once per call: each task of a split product makes its own)
    let st = if F::K == 0 {
        let v = std::slice::from_raw_parts(acts.s, n * acts.blocks);
        let mut t = Vec::with_capacity(n * acts.blocks);
        for b in 0..acts.blocks {
            t.extend(v.iter().skip(b).step_by(acts.blocks));
        }
        t
    } else {
        Vec::new()
    };
    let st = Terms { s: st.as_ptr(), n };
    let pb = PairBlocks::of::<F>(acts, n);
    let mut r0 = 0;
    while r0 + 2 <= n {
        let left = n - r0;
        if left >= 8 {
            outputs::<F, 4>(m, &pb, st, r0, o.clone(), y, ys);
            r0 += 8;
        } else if left >= 4 {
            outputs::<F, 2>(m, &pb, st, r0, o.clone(), y, ys);
            r0 += 4;
        } else {
            outputs::<F, 1>(m, &pb, st, r0, o.clone(), y, ys);
            r0 += 2;
        }
    }
    r0
}

/// What every tile takes from a pair of input rows (2p, 2p + 1) and a weight block b, made once
/// per call rather than once per tile of output rows: at `p · blocks + b`, both rows' activation
/// bytes (row 2p in the low 256 bits), the correction `−K·Σq` per lane (zero for Q4_1), and each
/// row's block scale filling its half.
struct PairBlocks {
    q: Vec<__m512i>,
    corr: Vec<__m512i>,
    dx: Vec<__m512>,
    blocks: usize,
}

impl PairBlocks {
    /// The pairs of rows `0..n` (n rounded down to even) of `acts`.
    ///
    /// # Safety
    /// As `rows`: the CPU has AVX-512 with VNNI, and `acts` holds `n` rows of `acts.cols` bytes
    /// and `acts.blocks` scales each.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn of<F: Unsigned>(acts: Acts, n: usize) -> PairBlocks {
        let (pairs, blocks) = (n / 2, acts.blocks);
        let mut pb = PairBlocks {
            q: Vec::with_capacity(pairs * blocks),
            corr: Vec::with_capacity(pairs * blocks),
            dx: Vec::with_capacity(pairs * blocks),
            blocks,
        };
        let kb = _mm512_set1_epi8(F::K);
        for p in 0..pairs {
            let (ra, rb) = (2 * p, 2 * p + 1);
            for b in 0..blocks {
                let lo = _mm256_loadu_si256(acts.q.add(ra * acts.cols + b * QK) as *const __m256i);
                let hi = _mm256_loadu_si256(acts.q.add(rb * acts.cols + b * QK) as *const __m256i);
                let q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
                pb.q.push(q);
                pb.corr.push(if F::K != 0 {
                    let kq = _mm512_dpbusd_epi32(_mm512_setzero_si512(), kb, q);
                    _mm512_sub_epi32(_mm512_setzero_si512(), kq)
                } else {
                    _mm512_setzero_si512()
                });
                let (da, db) = (*acts.d.add(ra * blocks + b), *acts.d.add(rb * blocks + b));
                let halves = _mm512_insertf64x4::<1>(
                    _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_set1_ps(da))),
                    _mm256_castps_pd(_mm256_set1_ps(db)),
                );
                pb.dx.push(_mm512_castpd_ps(halves));
            }
        }
        pb
    }
}

/// Q4_1's `s_x` block-major: block b's value for row r at `s + b · n + r` (empty for the other
/// formats).
#[derive(Clone, Copy)]
struct Terms {
    s: *const f32,
    n: usize,
}

/// One weight block as this path takes it.
struct Block {
    /// the unsigned bytes `vpdpbusd` multiplies, in both 256-bit halves (one for each input row
    /// of a pair)
    u: __m512i,
    d: f32,
    m: f32,
}

/// A nibble block's 16 bytes as `legacy_x86::nibbles`' 32 bytes 0..15 (low nibbles, then high) in
/// both halves of a register: the 16 bytes broadcast to the four 128-bit lanes (a load), the
/// odd lanes' dwords shifted right by four, then each byte masked to its low nibble (a dword shift
/// moves the next byte's low bits into a byte's high nibble, which the mask clears). Two
/// operations where unpacking to 256 bits and broadcasting took four.
///
/// # Safety
/// The CPU has AVX-512F and BW; `p` points at 16 readable bytes.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn nibbles512(p: *const u8) -> __m512i {
    let t = _mm512_broadcast_i32x4(_mm_loadu_si128(p as *const __m128i));
    let shifts = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
    _mm512_and_si512(_mm512_srlv_epi32(t, shifts), _mm512_set1_epi8(0x0f))
}

trait Unsigned {
    const BYTES: usize;
    /// The correction factor K of `Σ x·q = Σ u·q − K·Σ q` (0: none, the weights are unsigned).
    const K: i8;
    unsafe fn unpack(p: *const u8) -> Block;
}

struct Q40;
struct Q41;
struct Q80;

impl Unsigned for Q40 {
    const BYTES: usize = Q4_0_BYTES;
    const K: i8 = 8;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> Block {
        Block {
            u: nibbles512(p.add(2)),
            d: f16_at(p),
            m: 0.0,
        }
    }
}

impl Unsigned for Q41 {
    const BYTES: usize = Q4_1_BYTES;
    const K: i8 = 0;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> Block {
        let dm = _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
        Block {
            u: nibbles512(p.add(4)),
            d: _mm_cvtss_f32(dm),
            m: _mm_cvtss_f32(_mm_movehdup_ps(dm)),
        }
    }
}

impl Unsigned for Q80 {
    const BYTES: usize = Q8_0_BYTES;
    // −128 as a byte: `vpdpbusd` reads the K operand unsigned (128)
    const K: i8 = i8::MIN;
    #[inline(always)]
    unsafe fn unpack(p: *const u8) -> Block {
        let x = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(2) as *const __m256i));
        Block {
            u: _mm512_xor_si512(x, _mm512_set1_epi8(i8::MIN)),
            d: f16_at(p),
            m: 0.0,
        }
    }
}

/// Every output of `o` for the input rows `r0..r0 + 2·NP`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn outputs<F: Unsigned, const NP: usize>(
    m: &BlockMatrix,
    pb: &PairBlocks,
    st: Terms,
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
        let rows = if o.len() - oi >= R { R } else { 1 };
        let mut out = [[0.0f32; 8]; R];
        if rows == R {
            tile::<F, R, NP>(w, rb, pb, st, r0, &mut out);
        } else {
            tile::<F, 1, NP>(w, rb, pb, st, r0, &mut out);
        }
        for (i, v) in out[..rows].iter().enumerate() {
            for (ri, v) in v[..2 * NP].iter().enumerate() {
                y[(r0 + ri) * ys + oi + i] = *v;
            }
        }
        oi += rows;
    }
}

/// Output rows `w + i · row_bytes` (i < RT) for input rows `r0..r0 + 2·NP` into `out[i][ri]`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn tile<F: Unsigned, const RT: usize, const NP: usize>(
    w: *const u8,
    row_bytes: usize,
    pb: &PairBlocks,
    st: Terms,
    r0: usize,
    out: &mut [[f32; 8]; R],
) {
    let mut acc = [[_mm512_setzero_ps(); NP]; RT];
    // Q4_1: lane j of `summs[i]` is output i's Σ m_w · s_x for input row r0 + j, one fused
    // multiply-add a block in block order as `avx2`'s scalar sum
    let mut summs = [_mm256_setzero_ps(); RT];
    let smask = ((1u32 << (2 * NP)) - 1) as __mmask8;
    let ahead = super::AHEAD_TILES * RT * row_bytes;
    let p0 = r0 / 2;
    for b in 0..pb.blocks {
        // per pair: both rows' activation bytes, the correction −K·Σq per lane, and their scales
        // each filling its half (`PairBlocks`)
        let at = |p: usize| (p0 + p) * pb.blocks + b;
        let q: [__m512i; NP] = std::array::from_fn(|p| *pb.q.get_unchecked(at(p)));
        let corr: [__m512i; NP] = std::array::from_fn(|p| *pb.corr.get_unchecked(at(p)));
        let dx: [__m512; NP] = std::array::from_fn(|p| *pb.dx.get_unchecked(at(p)));
        let sx = if F::K == 0 {
            _mm256_maskz_loadu_ps(smask, st.s.add(b * st.n + r0))
        } else {
            _mm256_setzero_ps()
        };
        for i in 0..RT {
            let at = w.add(i * row_bytes + b * F::BYTES);
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(ahead) as *const i8);
            let blk = F::unpack(at);
            let u = blk.u;
            let dw = _mm512_set1_ps(blk.d);
            for p in 0..NP {
                let sums = _mm512_dpbusd_epi32(corr[p], u, q[p]);
                let d = _mm512_mul_ps(dw, dx[p]);
                acc[i][p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sums), acc[i][p]);
            }
            if F::K == 0 {
                summs[i] = _mm256_fmadd_ps(_mm256_set1_ps(blk.m), sx, summs[i]);
            }
        }
    }
    for i in 0..RT {
        let mut sm = [0.0f32; 8];
        _mm256_storeu_ps(sm.as_mut_ptr(), summs[i]);
        for p in 0..NP {
            let lo = _mm512_castps512_ps256(acc[i][p]);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc[i][p])));
            for (h, half) in [lo, hi].into_iter().enumerate() {
                let s = hsum256(half);
                // Q4_0 and Q8_0 return the sum itself (adding 0.0 would turn −0.0 into +0.0)
                out[i][2 * p + h] = if F::K == 0 { s + sm[2 * p + h] } else { s };
            }
        }
    }
}
