//! AVX2 kernels of the float products (F32, F16, BF16): `floats`' arithmetic with the
//! instructions of ggml's AVX2 build: four 8-lane accumulators over steps of 32 (`vfmadd` for
//! F32 and F16, multiply then add for BF16, whose products are exact anyway), the same reductions
//! and the same scalar tails. One output and one input row at a time; the same bits as `floats`.

use std::arch::x86_64::*;
use std::ops::Range;

use super::acts::QuantizedActs;
use super::floats::STEP;
use super::format::BlockFormat;
use super::stored::BlockMatrix;

/// The formats these kernels cover.
pub fn covers(format: BlockFormat) -> bool {
    matches!(
        format,
        BlockFormat::F32 | BlockFormat::F16 | BlockFormat::Bf16
    )
}

/// As `avx2::rows`, for the float formats; false for any other format.
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
    let dot: unsafe fn(*const u8, *const f32, usize) -> f32 = match m.format {
        BlockFormat::F32 => dot_f32,
        BlockFormat::F16 => dot_f16,
        BlockFormat::Bf16 => dot_bf16,
        _ => return false,
    };
    let v = xq.all_rows().v;
    let rb = m.row_bytes();
    let base = m.weight_bytes().as_ptr();
    let n = xq.n();
    for (oi, orow) in o.enumerate() {
        let w = base.add(orow * rb);
        let mut r = 0;
        if m.format == BlockFormat::F32 {
            // two input rows against each weight row: twice the independent chains, one weight
            // load for both, each row's sums as `dot_f32`'s
            while r + 2 <= n {
                let (a, b) = (v.as_ptr().add(r * m.cols), v.as_ptr().add((r + 1) * m.cols));
                let (ya, yb) = dot_f32_pair(w, a, b, m.cols);
                y[r * ys + oi] = ya;
                y[(r + 1) * ys + oi] = yb;
                r += 2;
            }
        }
        for r in r..n {
            y[r * ys + oi] = dot(w, v.as_ptr().add(r * m.cols), m.cols);
        }
    }
    true
}

/// `GGML_F32x8_REDUCE` of four accumulators: (s0 + s2) + (s1 + s3), high half onto low, two hadds.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn reduce(s: [__m256; 4]) -> f32 {
    let v = _mm256_add_ps(_mm256_add_ps(s[0], s[2]), _mm256_add_ps(s[1], s[3]));
    let t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let t = _mm_hadd_ps(t, t);
    _mm_cvtss_f32(_mm_hadd_ps(t, t))
}

/// The 4 × 8-lane FMA loop over the first `n − n mod 32` elements, weights loaded by `load`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn fma_4x8(n: usize, a: *const f32, load: impl Fn(usize) -> __m256) -> f32 {
    let mut s = [_mm256_setzero_ps(); 4];
    for i in (0..n - n % STEP).step_by(STEP) {
        for (k, s) in s.iter_mut().enumerate() {
            let e = i + 8 * k;
            *s = _mm256_fmadd_ps(load(e), _mm256_loadu_ps(a.add(e)), *s);
        }
    }
    reduce(s)
}

#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f32(w: *const u8, a: *const f32, n: usize) -> f32 {
    let wf = w as *const f32;
    let sumf = fma_4x8(n, a, |e| _mm256_loadu_ps(wf.add(e)));
    f32_tail(wf, a, n, sumf)
}

/// `dot_f32` of one weight row with two input rows: the same chains per row, side by side.
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f32_pair(w: *const u8, a: *const f32, b: *const f32, n: usize) -> (f32, f32) {
    let wf = w as *const f32;
    let (mut sa, mut sb) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
    for i in (0..n - n % STEP).step_by(STEP) {
        for k in 0..4 {
            let e = i + 8 * k;
            let wv = _mm256_loadu_ps(wf.add(e));
            sa[k] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(a.add(e)), sa[k]);
            sb[k] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(b.add(e)), sb[k]);
        }
    }
    (
        f32_tail(wf, a, n, reduce(sa)),
        f32_tail(wf, b, n, reduce(sb)),
    )
}

/// `dot_f32`'s tail past the last whole step, onto the reduced sum.
#[target_feature(enable = "fma")]
#[inline]
unsafe fn f32_tail(wf: *const f32, a: *const f32, n: usize, mut sumf: f32) -> f32 {
    // multiply then add up to a multiple of 4, fused after (`floats::dot_f32`)
    let (np, fused) = (n - n % STEP, n - n % 4);
    for e in np..fused {
        sumf += wf.add(e).read_unaligned() * *a.add(e);
    }
    for e in fused.max(np)..n {
        sumf = wf.add(e).read_unaligned().mul_add(*a.add(e), sumf);
    }
    sumf
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_f16(w: *const u8, a: *const f32, n: usize) -> f32 {
    let h = w as *const u16;
    let mut sumf = fma_4x8(n, a, |e| {
        _mm256_cvtph_ps(_mm_loadu_si128(h.add(e) as *const __m128i))
    }) as f64;
    for e in n - n % STEP..n {
        let wv = half::f16::from_bits(h.add(e).read_unaligned()).to_f32();
        sumf += (wv * *a.add(e)) as f64;
    }
    sumf as f32
}

#[target_feature(enable = "avx2,fma")]
unsafe fn dot_bf16(w: *const u8, a: *const f32, n: usize) -> f32 {
    let h = w as *const u16;
    let load = |e: usize| {
        let x = _mm256_cvtepu16_epi32(_mm_loadu_si128(h.add(e) as *const __m128i));
        _mm256_castsi256_ps(_mm256_slli_epi32(x, 16))
    };
    let mut c = [_mm256_setzero_ps(); 4];
    for i in (0..n - n % STEP).step_by(STEP) {
        for (k, c) in c.iter_mut().enumerate() {
            let e = i + 8 * k;
            *c = _mm256_add_ps(_mm256_mul_ps(load(e), _mm256_loadu_ps(a.add(e))), *c);
        }
    }
    let v = _mm256_add_ps(_mm256_add_ps(c[0], c[2]), _mm256_add_ps(c[1], c[3]));
    let mut sumf = crate::kernels::hsum256(v) as f64;
    for e in n - n % STEP..n {
        let wv = f32::from_bits((h.add(e).read_unaligned() as u32) << 16);
        sumf += (wv * *a.add(e)) as f64;
    }
    sumf as f32
}
