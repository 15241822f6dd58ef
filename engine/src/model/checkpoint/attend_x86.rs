//! `attention::attend` with AVX2, FMA and F16C: the same arithmetic lane for lane, so the same
//! bits. The plain loop calls `fmaf` and a run-time-dispatched f16 rounding for every element of
//! every cached position (about 270 ns a position for a 64-wide head on host C); here each fused
//! multiply-add is one instruction and eight values round to f16 and back in two
//! (`vcvtps2ph`/`vcvtph2ps`, round to nearest even, as `half::f16::from_f32`).
//!
//! What stays identical, and why:
//! - the score is `vecmath::dot_f16` in its host layout (16 or 8 lanes of f32 per ggml register):
//!   a 16-lane register is two `__m256` here, lanes being independent, and the fold and final
//!   reduction add the same lanes in the same order as the plain code;
//! - the accumulator update `round16(fma(v, vs, acc))` and the rescale `round16(acc · ms)` are
//!   per element, and a vector FMA or multiply rounds each lane exactly as the scalar one;
//! - the softmax bookkeeping (`exp`, the fused sum) is the plain code's, but each chunk's `exp`s
//!   are taken before its walk (`chunk_exps`: a key's maximum is known before any weight is),
//!   sixteen at a time with the C library's bits where AVX-512F is (`expf_x86`).
//!
//! For heads of 32, 64, 96 or 128 values on a CPU with AVX-512F the softmax walk keeps each head's
//! accumulator in two to eight 16-lane registers across a chunk of keys (`walk`), with the same
//! per-lane operations.
//!
//! Used when the head width is a multiple of 8 (one `__m256`). Past the layout's last whole step
//! (64 values for the AVX-512 layout, 32 for AVX2's) the dot product adds its tail in f64, one
//! product at a time, as the plain code does (a 32-wide head is all tail under the AVX-512
//! layout); `attention::tests` holds it to the plain loop bit for bit. The scores' dot products
//! are in `scores_x86`.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::scores_x86::{dot_f16_keys, dot_tails16, dot_whole16, step, tails_f64, CHUNK};
use super::vecmath::Simd;

/// Whether this CPU runs the vector loop, and the head width suits it.
pub fn usable(d: usize) -> bool {
    static HOST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let host = *HOST.get_or_init(|| {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    });
    host && d > 0 && d.is_multiple_of(8)
}

/// `attention::attend`, vectorised, for one or several query heads over the same keys and values
/// (the heads of one KV group): `qs` and `outs` hold them one after another, `d` values each. Each
/// head's result is the plain loop's for it alone; walking the heads side by side overlaps their accumulators' chains
/// (per key, a fused multiply-add and a round trip through f16 that the next key waits for).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C, `d` is a multiple of 8, and `qs` and `outs` are whole heads of
/// the same count.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn attend_heads(
    simd: Simd,
    d: usize,
    qs: &[f32],
    blocks: &[(usize, &[f32], &[f32])],
    scale: f32,
    outs: &mut [f32],
) {
    debug_assert!(d.is_multiple_of(8) && qs.len() == outs.len() && qs.len().is_multiple_of(d));
    let g = qs.len() / d;
    let mut q16 = vec![0.0f32; g * d];
    for c in (0..g * d).step_by(8) {
        let x = _mm256_loadu_ps(qs.as_ptr().add(c));
        _mm256_storeu_ps(q16.as_mut_ptr().add(c), round16(x));
    }
    let mut acc = vec![0.0f32; g * d];
    let mut sums = vec![0.0f32; g];
    let mut maxs = vec![f32::NEG_INFINITY; g];
    let mut dots = vec![0.0f32; g * CHUNK];
    let avx512 = is_x86_feature_detected!("avx512f");
    let vector_exp = super::expf_x86::libm_agrees();
    let wide = avx512 && WALK_WIDTHS.contains(&d);
    // per head, a chunk's softmax factors (`chunk_exps`; `walk` keeps its own on the stack)
    let mut exps = if wide {
        Vec::new()
    } else {
        vec![([0.0f32; CHUNK], 0u64); g]
    };
    // a tail of f64 chains past the layout's whole steps: sixteen keys at a time where AVX-512 is
    let tails16 = avx512 && !d.is_multiple_of(step(simd));
    let qt = if tails16 {
        tails_f64(simd, d, &q16)
    } else {
        Vec::new()
    };
    // no tail under the AVX-512 layout: sixteen keys' sums reduced side by side
    let whole16 = avx512 && matches!(simd, Simd::Avx512) && d.is_multiple_of(step(simd));
    for (_, keys, values) in blocks {
        let n = (keys.len() / d).min(values.len() / d);
        let mut j0 = 0;
        while j0 < n {
            let m = (n - j0).min(CHUNK);
            // the chunk's dot products first (they do not depend on the softmax), then the walk
            let kc = &keys[j0 * d..(j0 + m) * d];
            let done = if tails16 {
                dot_tails16(simd, d, kc, &q16, &qt, &mut dots)
            } else {
                0
            };
            for (h, dh) in dots.chunks_exact_mut(CHUNK).enumerate() {
                let qh = &q16[h * d..(h + 1) * d];
                let mut from = done;
                if whole16 {
                    from += dot_whole16(d, &kc[from * d..], qh, &mut dh[from..m]);
                }
                dot_f16_keys(simd, &kc[from * d..], qh, &mut dh[from..m]);
            }
            let vs = &values[j0 * d..(j0 + m) * d];
            if wide {
                let at = (&dots[..], vs, scale, vector_exp);
                match d {
                    32 => walk32(at, &mut acc, &mut sums, &mut maxs),
                    64 => walk::<4>(at, &mut acc, &mut sums, &mut maxs),
                    96 => walk::<6>(at, &mut acc, &mut sums, &mut maxs),
                    _ => walk::<8>(at, &mut acc, &mut sums, &mut maxs),
                }
                j0 += m;
                continue;
            }
            for (h, (max, (e, raised))) in maxs.iter_mut().zip(exps.iter_mut()).enumerate() {
                *raised = chunk_exps(&dots[h * CHUNK..h * CHUNK + m], scale, max, vector_exp, e);
            }
            for (j, vj) in vs.chunks_exact(d).enumerate() {
                for ((acc, sum), (e, raised)) in
                    acc.chunks_exact_mut(d).zip(sums.iter_mut()).zip(&exps)
                {
                    step_key(raised >> j & 1 != 0, e[j], vj, acc, sum);
                }
            }
            j0 += m;
        }
    }
    for ((out, acc), &sum) in outs.chunks_exact_mut(d).zip(acc.chunks_exact(d)).zip(&sums) {
        let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
        for (o, a) in out.iter_mut().zip(acc) {
            *o = a * inv;
        }
    }
}

/// Head widths whose softmax walk keeps its accumulators in registers on AVX-512 (`walk`, and
/// `walk32` for 32).
const WALK_WIDTHS: [usize; 4] = [32, 64, 96, 128];

/// The softmax walk of one chunk on AVX-512 for heads of `16 · W` values: `step_key` for every
/// key of `vs` ([m, 16 · W]) and every head of `acc` ([g, 16 · W]), the scores in `dots` (CHUNK
/// per head). Each head's accumulator stays in W registers across the chunk, several heads at a
/// time (as many as leave registers for a key's values), where `step_key` stores it and loads it
/// back at every key (a round trip the next key's update waits for). The same operations per lane
/// in the same order (the FMA or the rescale, then the f16 round trip; the scalar bookkeeping as
/// is), so the same bits.
///
/// # Safety
/// The CPU has AVX-512F, and `acc`, `sums`, `maxs` and `dots` hold the same number of heads.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn walk<const W: usize>(
    at: (&[f32], &[f32], f32, bool),
    acc: &mut [f32],
    sums: &mut [f32],
    maxs: &mut [f32],
) {
    let (dots, vs, scale, vector_exp) = at;
    // heads side by side: their accumulators and one key's values within the 32 registers
    let side = (28 / W - 1).clamp(1, 4);
    let g = sums.len();
    let mut h0 = 0;
    while h0 < g {
        let n = (g - h0).min(side);
        let at = (&dots[h0 * CHUNK..], vs, scale, vector_exp);
        let (a, s, m) = (&mut acc[h0 * 16 * W..], &mut sums[h0..], &mut maxs[h0..]);
        match n {
            1 => walk_heads::<W, 1>(at, a, s, m),
            2 => walk_heads::<W, 2>(at, a, s, m),
            3 => walk_heads::<W, 3>(at, a, s, m),
            _ => walk_heads::<W, 4>(at, a, s, m),
        }
        h0 += n;
    }
}

/// `walk` for the first H heads of `dots`, `acc`, `sums` and `maxs`, each head's factors from
/// `chunk_exps` first, then applied key by key as `step_key` applies them.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn walk_heads<const W: usize, const H: usize>(
    (dots, vs, scale, vector_exp): (&[f32], &[f32], f32, bool),
    acc: &mut [f32],
    sums: &mut [f32],
    maxs: &mut [f32],
) {
    let d = 16 * W;
    let m = vs.len() / d;
    let mut e = [[0.0f32; CHUNK]; H];
    let mut raised = [0u64; H];
    for h in 0..H {
        raised[h] = chunk_exps(
            &dots[h * CHUNK..h * CHUNK + m],
            scale,
            &mut maxs[h],
            vector_exp,
            &mut e[h],
        );
    }
    let p = acc.as_mut_ptr();
    let mut a = [[_mm512_setzero_ps(); W]; H];
    for (h, ah) in a.iter_mut().enumerate() {
        for (w, r) in ah.iter_mut().enumerate() {
            *r = _mm512_loadu_ps(p.add(h * d + 16 * w));
        }
    }
    for j in 0..m {
        let vj = vs.as_ptr().add(j * d);
        let mut v = [_mm512_setzero_ps(); W];
        for (w, vw) in v.iter_mut().enumerate() {
            *vw = _mm512_loadu_ps(vj.add(16 * w));
        }
        for h in 0..H {
            let (mut ms, mut wt) = (1.0f32, 1.0f32);
            if raised[h] >> j & 1 != 0 {
                ms = e[h][j];
                let r = _mm512_set1_ps(ms);
                for w in 0..W {
                    a[h][w] = round16x16(_mm512_mul_ps(a[h][w], r));
                }
            } else {
                wt = e[h][j];
            }
            let wv = _mm512_set1_ps(wt);
            for w in 0..W {
                a[h][w] = round16x16(_mm512_fmadd_ps(v[w], wv, a[h][w]));
            }
            sums[h] = sums[h].mul_add(ms, wt);
        }
    }
    for (h, ah) in a.iter().enumerate() {
        for (w, r) in ah.iter().enumerate() {
            _mm512_storeu_ps(p.add(h * d + 16 * w), *r);
        }
    }
}

/// `walk::<2>` as it was written first, for 32-wide heads: the same operations, so the same bits.
/// Kept beside the generic walk because that one, given 32-wide heads, made the qwen3moe file's
/// one-thread prefill slower side by side on host C in each of three ways of writing it (in place
/// through iterators, through indices, and rebuilt as arrays as here: 3 to 6 % in `moefleet bench`
/// runs alternating the binaries, by hand; the cause not found, the expert products, whose code
/// did not change, took more samples too).
///
/// # Safety
/// The CPU has AVX-512F, and `acc`, `sums`, `maxs` and `dots` hold the same number of heads.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn walk32(
    (dots, vs, scale, vector_exp): (&[f32], &[f32], f32, bool),
    acc: &mut [f32],
    sums: &mut [f32],
    maxs: &mut [f32],
) {
    let g = sums.len();
    for h0 in (0..g).step_by(4) {
        let at = (&dots[h0 * CHUNK..], vs, scale, vector_exp);
        let (a, s, m) = (&mut acc[h0 * 32..], &mut sums[h0..], &mut maxs[h0..]);
        match g - h0 {
            1 => walk32_heads::<1>(at, a, s, m),
            2 => walk32_heads::<2>(at, a, s, m),
            3 => walk32_heads::<3>(at, a, s, m),
            _ => walk32_heads::<4>(at, a, s, m),
        }
    }
}

/// `walk32` for the first H heads of `dots`, `acc`, `sums` and `maxs`, each head's factors from
/// `chunk_exps` first, then applied key by key as `step_key` applies them.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn walk32_heads<const H: usize>(
    (dots, vs, scale, vector_exp): (&[f32], &[f32], f32, bool),
    acc: &mut [f32],
    sums: &mut [f32],
    maxs: &mut [f32],
) {
    let m = vs.len() / 32;
    let mut e = [[0.0f32; CHUNK]; H];
    let mut raised = [0u64; H];
    for h in 0..H {
        raised[h] = chunk_exps(
            &dots[h * CHUNK..h * CHUNK + m],
            scale,
            &mut maxs[h],
            vector_exp,
            &mut e[h],
        );
    }
    let p = acc.as_mut_ptr();
    let mut a = [[_mm512_setzero_ps(); 2]; H];
    for (h, ah) in a.iter_mut().enumerate() {
        *ah = [
            _mm512_loadu_ps(p.add(h * 32)),
            _mm512_loadu_ps(p.add(h * 32 + 16)),
        ];
    }
    for (j, vj) in vs.chunks_exact(32).enumerate() {
        let v = [
            _mm512_loadu_ps(vj.as_ptr()),
            _mm512_loadu_ps(vj.as_ptr().add(16)),
        ];
        for (h, ah) in a.iter_mut().enumerate() {
            let (mut ms, mut w) = (1.0f32, 1.0f32);
            if raised[h] >> j & 1 != 0 {
                ms = e[h][j];
                let r = _mm512_set1_ps(ms);
                *ah = [
                    round16x16(_mm512_mul_ps(ah[0], r)),
                    round16x16(_mm512_mul_ps(ah[1], r)),
                ];
            } else {
                w = e[h][j];
            }
            let wv = _mm512_set1_ps(w);
            *ah = [
                round16x16(_mm512_fmadd_ps(v[0], wv, ah[0])),
                round16x16(_mm512_fmadd_ps(v[1], wv, ah[1])),
            ];
            sums[h] = sums[h].mul_add(ms, w);
        }
    }
    for (h, ah) in a.iter().enumerate() {
        _mm512_storeu_ps(p.add(h * 32), ah[0]);
        _mm512_storeu_ps(p.add(h * 32 + 16), ah[1]);
    }
}

/// `x`'s lanes moved up by `16 − N` (lane l takes lane l − 16 + N), `fill`'s top lanes below them.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn lanes_up<const N: i32>(x: __m512, fill: __m512) -> __m512 {
    _mm512_castsi512_ps(_mm512_alignr_epi32::<N>(
        _mm512_castps_si512(x),
        _mm512_castps_si512(fill),
    ))
}

/// `round16` on sixteen lanes.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn round16x16(x: __m512) -> __m512 {
    _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x))
}

/// A chunk's softmax factors for one head, from its scores `dots` (times `scale`) and running
/// maximum `max` (updated to the chunk's): `e[j]` is `exp(old − s)` where key j raises the maximum
/// (bit j of the result set) and `exp(s − max)` where it does not, as the key-by-key walk computes
/// them, since each key's maximum is known before any weight is. The `exp`s are the C library's,
/// sixteen at a time when `vector` (`expf_x86::exp16`, same bits), else one call each.
///
/// # Safety
/// `vector` only where `expf_x86::libm_agrees` (the CPU has AVX-512F); `dots` holds at most CHUNK.
#[inline]
unsafe fn chunk_exps(
    dots: &[f32],
    scale: f32,
    max: &mut f32,
    vector: bool,
    e: &mut [f32; CHUNK],
) -> u64 {
    let m = dots.len();
    if vector {
        return chunk_exps16(dots, scale, max, e);
    }
    let mut args = [0.0f32; CHUNK];
    let mut raised = 0u64;
    for (j, (a, &dot)) in args.iter_mut().zip(dots).enumerate() {
        let s = dot * scale;
        if s > *max {
            *a = *max - s;
            raised |= 1 << j;
            *max = s;
        } else {
            *a = s - *max;
        }
    }
    for (x, y) in args[..m].iter().zip(e.iter_mut()) {
        *y = x.exp();
    }
    raised
}

/// `chunk_exps` sixteen keys at a time: each key's maximum before it (the running maximum, then
/// the chunk's scores so far) by a prefix scan, where the key-by-key loop carries it. A key
/// raises the maximum where its score is greater (strictly, as there: an equal score, or a NaN,
/// leaves it); the scan takes the later of two values only where it is greater too, so each
/// key sees the value the loop holds before it (a NaN score enters the scan as −∞, which changes
/// no maximum either). Each factor's argument is then the same subtraction of the same two f32,
/// and its `exp` `expf_x86::exp16`'s: the same bits.
///
/// # Safety
/// The CPU has AVX-512F; `dots` holds at most CHUNK.
#[target_feature(enable = "avx512f")]
unsafe fn chunk_exps16(dots: &[f32], scale: f32, max: &mut f32, e: &mut [f32; CHUNK]) -> u64 {
    let m = dots.len();
    let mut args = [0.0f32; CHUNK];
    let mut raised = 0u64;
    let low = _mm512_set1_ps(f32::NEG_INFINITY);
    let sc = _mm512_set1_ps(scale);
    for g in 0..m.div_ceil(16) {
        let live = (m - 16 * g).min(16);
        let k = if live == 16 {
            0xffff
        } else {
            ((1u32 << live) - 1) as __mmask16
        };
        // lanes past the chunk: −∞ (they raise nothing; their factors are not read)
        let s = _mm512_mask_mul_ps(
            low,
            k,
            _mm512_maskz_loadu_ps(k, dots.as_ptr().add(16 * g)),
            sc,
        );
        // `_mm512_max_ps(later, earlier)` is `later > earlier ? later : earlier`
        let mut p = _mm512_mask_mov_ps(low, _mm512_cmp_ps_mask::<_CMP_ORD_Q>(s, s), s);
        p = _mm512_max_ps(p, lanes_up::<15>(p, low));
        p = _mm512_max_ps(p, lanes_up::<14>(p, low));
        p = _mm512_max_ps(p, lanes_up::<12>(p, low));
        p = _mm512_max_ps(p, lanes_up::<8>(p, low));
        let before = _mm512_set1_ps(*max);
        let through = _mm512_max_ps(p, before);
        // each key's maximum before it: `through` one lane up, the running maximum in lane 0
        let excl = lanes_up::<15>(through, before);
        let up = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(s, excl) & k;
        let arg = _mm512_mask_blend_ps(up, _mm512_sub_ps(s, excl), _mm512_sub_ps(excl, s));
        // past the chunk: 0, as the key-by-key loop leaves them
        _mm512_storeu_ps(args.as_mut_ptr().add(16 * g), _mm512_maskz_mov_ps(k, arg));
        raised |= (up as u64) << (16 * g);
        *max = _mm512_cvtss_f32(_mm512_permutexvar_ps(_mm512_set1_epi32(15), through));
    }
    for (x, y) in args
        .chunks_exact(16)
        .zip(e.chunks_exact_mut(16))
        .take(m.div_ceil(16))
    {
        // SAFETY: `chunks_exact(16)` gives slices of sixteen; the caller vouches for AVX-512F
        super::expf_x86::exp16(
            x.try_into().unwrap_unchecked(),
            y.try_into().unwrap_unchecked(),
        );
    }
    raised
}

/// One key of the online softmax, its factor `e` from `chunk_exps` (`raised`: the key raised the
/// maximum, so `e` rescales the accumulator and the key's weight is 1; else `e` is its weight):
/// its value row `vj` into `acc` and `sum`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn step_key(raised: bool, e: f32, vj: &[f32], acc: &mut [f32], sum: &mut f32) {
    let d = acc.len();
    let (mut ms, mut vs) = (1.0f32, 1.0f32);
    if raised {
        ms = e;
        let m = _mm256_set1_ps(ms);
        for c in (0..d).step_by(8) {
            let p = acc.as_mut_ptr().add(c);
            _mm256_storeu_ps(p, round16(_mm256_mul_ps(_mm256_loadu_ps(p), m)));
        }
    } else {
        vs = e;
    }
    let w = _mm256_set1_ps(vs);
    for c in (0..d).step_by(8) {
        let p = acc.as_mut_ptr().add(c);
        let x = _mm256_loadu_ps(vj.as_ptr().add(c));
        _mm256_storeu_ps(p, round16(_mm256_fmadd_ps(x, w, _mm256_loadu_ps(p))));
    }
    *sum = sum.mul_add(ms, vs);
}

/// Round each lane to f16 and back (nearest, ties to even).
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn round16(x: __m256) -> __m256 {
    _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x))
}
