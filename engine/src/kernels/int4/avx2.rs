//! AVX2 integer kernel over the tiled layout (module docs of `int4`) and 8-bit activations
//! (`QuantRows::int4`). One step takes a pair of groups (A, B) of the four rows of a tile: each
//! row's 32 bytes split by nibble masks into A0-15|B0-15 and A16-31|B16-31 (unsigned bytes 0-15),
//! which `vpmaddubsw` multiplies with the activations' paired layout (pair sums of at most
//! 2 · 15 · 127, no saturation; two added stay below 2^15) and `vpmaddwd` by ones widens to i32:
//! exact. A 4 x 4 transpose-and-add of the four rows' i32 vectors leaves, per lane, the four rows'
//! exact sums of that lane's group, to which the zero-point terms −8 · Σq_x are added in i32; one
//! conversion (exact: |sum| ≤ 8 · 32 · 127), one multiply of the weight scales (8 f16 stored in
//! this order) by the activation scales, and one FMA then serve two groups of four rows. An odd
//! last group of a row runs alone, its sums split across the two halves. A row's output is its two
//! lanes' accumulators added.
//!
//! The wider paths (`IntPath`) compute the same exact i32 sums in fewer instructions: AVX-VNNI's
//! `vpdpbusd` does `vpmaddubsw` + `vpmaddwd` in one (a lane's four products summed in i32, exact,
//! the same sum); the AVX-512 paths load a row's whole four (four groups, 64 bytes) at once and
//! transpose-add the four rows in each 128-bit lane alike, leaving groups A B in the low half and
//! C D in the high half, each half then finished as the AVX2 pair step finishes its pair, in the
//! same order. Every path therefore gives the same bits.
//!
//! Per (output, input row) the operation sequence does not depend on the batch, the thread that
//! runs the tile or the path, so a row's result is bit-identical alone or batched.

use std::arch::x86_64::*;

use super::{Int4View, FOUR, GROUP, GROUP_BYTES, TILE};
use crate::kernels::quant::QuantRows;
use crate::kernels::IntPath;

/// `IntPath` as a const generic parameter.
const AVX2: u8 = 0;
const AVX_VNNI: u8 = 1;
const AVX512: u8 = 2;
const AVX512_VNNI: u8 = 3;

/// Bytes ahead of the current step to prefetch (a tile streams through memory in one sequence).
const PREFETCH: usize = 768;

/// The four rows' partial sums r0..r3 (four i32 per 128-bit lane each) reduced to one vector
/// whose lane k holds, for rows 0..3 in order, the sum of lane k's four partials.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn transpose_add(r: &[__m256i; TILE]) -> __m256i {
    let t01 = _mm256_add_epi32(
        _mm256_unpacklo_epi32(r[0], r[1]),
        _mm256_unpackhi_epi32(r[0], r[1]),
    );
    let t23 = _mm256_add_epi32(
        _mm256_unpacklo_epi32(r[2], r[3]),
        _mm256_unpackhi_epi32(r[2], r[3]),
    );
    _mm256_add_epi32(
        _mm256_unpacklo_epi64(t01, t23),
        _mm256_unpackhi_epi64(t01, t23),
    )
}

/// Where one step reads: a tile's rows at `src + r * stride` (32 bytes for a pair, 16 for a lone
/// group), its weight scales at `sw`, and per input row the activations, scales and zero terms.
struct Step<const NR: usize> {
    src: *const u8,
    stride: usize,
    sw: *const u16,
    x: [*const __m256i; NR],
    sx: [*const f32; NR],
    zx: [*const __m256i; NR],
}

/// Two groups of the tile's four rows into `acc`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn pair_step<const NR: usize>(s: &Step<NR>, acc: &mut [__m256; NR]) {
    let mask = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let mut sums = [[_mm256_setzero_si256(); TILE]; NR];
    for r in 0..TILE {
        // bytes: A0-15|B0-15 and A16-31|B16-31 (the `pairs` order)
        let v = _mm256_loadu_si256(s.src.add(r * s.stride) as *const __m256i);
        let lo = _mm256_and_si256(v, mask);
        let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
        for ri in 0..NR {
            let x = s.x[ri];
            let p = _mm256_add_epi16(
                _mm256_maddubs_epi16(lo, _mm256_loadu_si256(x)),
                _mm256_maddubs_epi16(hi, _mm256_loadu_si256(x.add(1))),
            );
            sums[ri][r] = _mm256_madd_epi16(p, ones);
        }
    }
    let sw = _mm256_cvtph_ps(_mm_loadu_si128(s.sw as *const __m128i));
    finish_step(s, &sums, sw, acc);
}

/// A lone last group of the tile's four rows into `acc` (its sums split across both halves).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn lone_step<const NR: usize>(s: &Step<NR>, acc: &mut [__m256; NR]) {
    let mask = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    // the 16 bytes in both halves, the high half shifted to its high nibbles
    let shift = _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0);
    let mut sums = [[_mm256_setzero_si256(); TILE]; NR];
    for r in 0..TILE {
        // bytes: columns 0-15, then 16-31
        let b =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(s.src.add(r * s.stride) as *const __m128i));
        let v = _mm256_and_si256(_mm256_srlv_epi32(b, shift), mask);
        for ri in 0..NR {
            let p = _mm256_maddubs_epi16(v, _mm256_loadu_si256(s.x[ri]));
            sums[ri][r] = _mm256_madd_epi16(p, ones);
        }
    }
    let four = _mm_loadl_epi64(s.sw as *const __m128i);
    let sw = _mm256_cvtph_ps(_mm_unpacklo_epi64(four, four));
    finish_step(s, &sums, sw, acc);
}

/// `pair_step` with AVX-VNNI's `vpdpbusd` (the same i32 sums).
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
#[inline]
unsafe fn pair_step_vnni<const NR: usize>(s: &Step<NR>, acc: &mut [__m256; NR]) {
    let mask = _mm256_set1_epi8(0x0f);
    let mut sums = [[_mm256_setzero_si256(); TILE]; NR];
    for r in 0..TILE {
        let v = _mm256_loadu_si256(s.src.add(r * s.stride) as *const __m256i);
        let lo = _mm256_and_si256(v, mask);
        let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
        for ri in 0..NR {
            let x = s.x[ri];
            let d = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), lo, _mm256_loadu_si256(x));
            sums[ri][r] = _mm256_dpbusd_avx_epi32(d, hi, _mm256_loadu_si256(x.add(1)));
        }
    }
    let sw = _mm256_cvtph_ps(_mm_loadu_si128(s.sw as *const __m128i));
    finish_step(s, &sums, sw, acc);
}

/// `transpose_add` in each 128-bit lane of a 512-bit vector.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn transpose_add_512(r: &[__m512i; TILE]) -> __m512i {
    let t01 = _mm512_add_epi32(
        _mm512_unpacklo_epi32(r[0], r[1]),
        _mm512_unpackhi_epi32(r[0], r[1]),
    );
    let t23 = _mm512_add_epi32(
        _mm512_unpacklo_epi32(r[2], r[3]),
        _mm512_unpackhi_epi32(r[2], r[3]),
    );
    _mm512_add_epi32(
        _mm512_unpacklo_epi64(t01, t23),
        _mm512_unpackhi_epi64(t01, t23),
    )
}

/// A whole four of the tile's rows (`a`: its groups 0 and 1, `b`: 2 and 3) on 512 bits: each
/// row's 64 bytes at once, the four rows transpose-added, then each pair finished in turn as
/// `pair_step` finishes it (module header). `VNNI`: `vpdpbusd`, else `vpmaddubsw` + `vpmaddwd`.
#[inline(always)]
unsafe fn four_step_512<const VNNI: bool, const NR: usize>(
    a: &Step<NR>,
    b: &Step<NR>,
    acc: &mut [__m256; NR],
) {
    let mask = _mm512_set1_epi8(0x0f);
    let ones = _mm512_set1_epi16(1);
    // the activations of the four groups: A B's low columns then C D's, and the high ones
    let join = |x: *const __m256i, y: *const __m256i| {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_loadu_si256(x)),
            _mm256_loadu_si256(y),
        )
    };
    let mut xs = [[_mm512_setzero_si512(); 2]; NR];
    for ri in 0..NR {
        xs[ri] = [join(a.x[ri], b.x[ri]), join(a.x[ri].add(1), b.x[ri].add(1))];
    }
    let mut sums = [[_mm512_setzero_si512(); TILE]; NR];
    for r in 0..TILE {
        let v = _mm512_loadu_si512(a.src.add(r * a.stride) as *const __m512i);
        let lo = _mm512_and_si512(v, mask);
        let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask);
        for ri in 0..NR {
            sums[ri][r] = if VNNI {
                let d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xs[ri][0]);
                _mm512_dpbusd_epi32(d, hi, xs[ri][1])
            } else {
                let p = _mm512_add_epi16(
                    _mm512_maddubs_epi16(lo, xs[ri][0]),
                    _mm512_maddubs_epi16(hi, xs[ri][1]),
                );
                _mm512_madd_epi16(p, ones)
            };
        }
    }
    let (sa, sb) = (
        _mm256_cvtph_ps(_mm_loadu_si128(a.sw as *const __m128i)),
        _mm256_cvtph_ps(_mm_loadu_si128(b.sw as *const __m128i)),
    );
    for ri in 0..NR {
        let u = transpose_add_512(&sums[ri]);
        for (s, sw, half) in [
            (a, sa, _mm512_castsi512_si256(u)),
            (b, sb, _mm512_extracti64x4_epi64::<1>(u)),
        ] {
            let u = _mm256_add_epi32(half, _mm256_loadu_si256(s.zx[ri]));
            let c = _mm256_mul_ps(sw, _mm256_loadu_ps(s.sx[ri]));
            acc[ri] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), c, acc[ri]);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
#[inline]
unsafe fn four_step_512bw<const NR: usize>(a: &Step<NR>, b: &Step<NR>, acc: &mut [__m256; NR]) {
    four_step_512::<false, NR>(a, b, acc)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn four_step_512vnni<const NR: usize>(a: &Step<NR>, b: &Step<NR>, acc: &mut [__m256; NR]) {
    four_step_512::<true, NR>(a, b, acc)
}

/// A pair of groups on path `P` (the 512-bit paths run a lone pair as AVX2 does).
#[inline(always)]
unsafe fn pair<const P: u8, const NR: usize>(s: &Step<NR>, acc: &mut [__m256; NR]) {
    if P == AVX_VNNI {
        pair_step_vnni(s, acc)
    } else {
        pair_step(s, acc)
    }
}

/// A whole four (two pairs) on path `P`.
#[inline(always)]
unsafe fn four<const P: u8, const NR: usize>(a: &Step<NR>, b: &Step<NR>, acc: &mut [__m256; NR]) {
    match P {
        AVX512 => four_step_512bw(a, b, acc),
        AVX512_VNNI => four_step_512vnni(a, b, acc),
        _ => {
            pair::<P, NR>(a, acc);
            pair::<P, NR>(b, acc);
        }
    }
}

/// Rows' sums to exact per-(row, group) integers, zero point added, scaled and accumulated.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn finish_step<const NR: usize>(
    s: &Step<NR>,
    sums: &[[__m256i; TILE]; NR],
    sw: __m256,
    acc: &mut [__m256; NR],
) {
    for ri in 0..NR {
        let u = _mm256_add_epi32(transpose_add(&sums[ri]), _mm256_loadu_si256(s.zx[ri]));
        let c = _mm256_mul_ps(sw, _mm256_loadu_ps(s.sx[ri]));
        acc[ri] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), c, acc[ri]);
    }
}

/// One tile (view rows `t0..t0 + TILE`) against input rows `r0..r0 + NR` on path `P`; writes the
/// first `h` outputs of each input row to `y[(r0 + ri) * ys + col..]`. Inlined into each path's
/// entry point, which enables that path's instructions.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<const P: u8, const NR: usize>(
    w: &Int4View<'_>,
    xq: &QuantRows,
    t0: usize,
    r0: usize,
    h: usize,
    y: &mut [f32],
    ys: usize,
    col: usize,
) {
    let m = w.m;
    let m_groups = m.cols / GROUP;
    let v_groups = w.cols / GROUP;
    let row = w.r0 + t0;
    let qt = m.q.as_ptr().add(row * m.cols / 2);
    let st = m.scales.as_ptr().add(row * m_groups) as *const u16;
    let pstride = xq.pair_stride();
    // the step at view group g (even): its addresses for the four of groups f, stored with
    // `stored` groups per row, at group k inside it
    let step = |g: usize, f: usize, stored: usize, k: usize| -> Step<NR> {
        let mut s = Step {
            src: qt.add(f * TILE * FOUR * GROUP_BYTES + k * GROUP_BYTES),
            stride: stored * GROUP_BYTES,
            sw: st.add(f * TILE * FOUR + k * TILE),
            x: [std::ptr::null(); NR],
            sx: [std::ptr::null(); NR],
            zx: [std::ptr::null(); NR],
        };
        for ri in 0..NR {
            s.x[ri] = xq.pairs.as_ptr().add((r0 + ri) * w.cols + g * GROUP) as *const __m256i;
            let at = (r0 + ri) * pstride + g / 2 * 8;
            s.sx[ri] = xq.pair_scale.as_ptr().add(at);
            s.zx[ri] = xq.pair_zero.as_ptr().add(at) as *const __m256i;
        }
        s
    };
    let mut acc = [_mm256_setzero_ps(); NR];
    // fours the view uses whole (so stored whole): two pair steps each, 256 bytes in sequence
    let whole = v_groups / FOUR;
    let f0 = w.g0 / FOUR;
    for fv in 0..whole {
        let f = f0 + fv;
        let at = qt.add(f * TILE * FOUR * GROUP_BYTES);
        // a hint a few fours ahead in the tile's stream (never faults)
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH + 64) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH + 128) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH + 192) as *const i8);
        let (a, b) = (step(FOUR * fv, f, FOUR, 0), step(FOUR * fv + 2, f, FOUR, 2));
        four::<P, NR>(&a, &b, &mut acc);
    }
    // a last four the view uses in part: a pair and/or a lone group
    let used = v_groups - FOUR * whole;
    if used > 0 {
        let f = f0 + whole;
        let stored = (m_groups - FOUR * f).min(FOUR);
        let g = FOUR * whole;
        if used >= 2 {
            pair::<P, NR>(&step(g, f, stored, 0), &mut acc);
        }
        if used == 3 {
            lone_step(&step(g + 2, f, stored, 2), &mut acc);
        } else if used == 1 {
            lone_step(&step(g, f, stored, 0), &mut acc);
        }
    }
    for (ri, a) in acc.iter().enumerate() {
        let rows = _mm_add_ps(_mm256_castps256_ps128(*a), _mm256_extractf128_ps(*a, 1));
        let at = (r0 + ri) * ys + col;
        let dst = &mut y[at..at + h];
        if h == TILE {
            // a whole tile: one store (a copy of four floats was a library call per tile)
            _mm_storeu_ps(dst.as_mut_ptr(), rows);
        } else {
            let mut out = [0.0f32; TILE];
            _mm_storeu_ps(out.as_mut_ptr(), rows);
            dst.copy_from_slice(&out[..h]);
        }
    }
}

/// Output rows `o` for every input row of `xq` into y ([n, ys], columns from 0), on `path`.
///
/// # Safety
/// The CPU must have what `path` runs on (`IntPath::on_cpu`); `w` in bounds
/// (`Int4View::assert_in_bounds`) and tiled (`Int4View::tiled`), `xq` consistent with
/// `xq.cols == w.cols`, group 32 and its pairs filled (`has_pairs`: 8-bit, from
/// `QuantRows::int4`), and `o.end <= w.rows`. Panics if `o.start` is not a multiple of `TILE` or
/// `y` is shorter than `xq.n` rows of `ys >= o.len()`.
pub unsafe fn matmul_rows(
    path: IntPath,
    w: &Int4View<'_>,
    xq: &QuantRows,
    o: std::ops::Range<usize>,
    y: &mut [f32],
    ys: usize,
) {
    assert!(
        o.start.is_multiple_of(TILE),
        "INT4 output rows must start on a tile"
    );
    match path {
        IntPath::Avx2 => rows_avx2(w, xq, o, y, ys),
        IntPath::AvxVnni => rows_avx_vnni(w, xq, o, y, ys),
        IntPath::Avx512 => rows_avx512(w, xq, o, y, ys),
        IntPath::Avx512Vnni => rows_avx512_vnni(w, xq, o, y, ys),
    }
}

/// The tiles of rows `o`, two input rows at a time, on path `P`.
#[inline(always)]
unsafe fn rows<const P: u8>(
    w: &Int4View<'_>,
    xq: &QuantRows,
    o: std::ops::Range<usize>,
    y: &mut [f32],
    ys: usize,
) {
    let n = xq.n;
    let mut t0 = o.start;
    while t0 < o.end {
        // a tile past the view's last row still holds TILE stored rows (the matrix's own or its
        // padding); only the view's are written
        let h = TILE.min(o.end - t0);
        let col = t0 - o.start;
        let mut r0 = 0;
        while r0 < n {
            if n - r0 >= 2 {
                tile::<P, 2>(w, xq, t0, r0, h, y, ys, col);
                r0 += 2;
            } else {
                tile::<P, 1>(w, xq, t0, r0, h, y, ys, col);
                r0 += 1;
            }
        }
        t0 += TILE;
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_avx2(
    w: &Int4View<'_>,
    xq: &QuantRows,
    o: std::ops::Range<usize>,
    y: &mut [f32],
    ys: usize,
) {
    rows::<AVX2>(w, xq, o, y, ys)
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn rows_avx_vnni(
    w: &Int4View<'_>,
    xq: &QuantRows,
    o: std::ops::Range<usize>,
    y: &mut [f32],
    ys: usize,
) {
    rows::<AVX_VNNI>(w, xq, o, y, ys)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
unsafe fn rows_avx512(
    w: &Int4View<'_>,
    xq: &QuantRows,
    o: std::ops::Range<usize>,
    y: &mut [f32],
    ys: usize,
) {
    rows::<AVX512>(w, xq, o, y, ys)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
unsafe fn rows_avx512_vnni(
    w: &Int4View<'_>,
    xq: &QuantRows,
    o: std::ops::Range<usize>,
    y: &mut [f32],
    ys: usize,
) {
    rows::<AVX512_VNNI>(w, xq, o, y, ys)
}
