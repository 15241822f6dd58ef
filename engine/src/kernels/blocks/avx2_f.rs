//! AVX2 kernels of the float products (F32, F16, BF16): `floats`' arithmetic with the
//! instructions of ggml's AVX2 build: four 8-lane accumulators over steps of 32 (`vfmadd` for
//! F32 and F16, multiply then add for BF16, whose products are exact anyway), the same reductions
//! and the same scalar tails. One output and one or two input rows at a time, and F32 batches two
//! outputs and four rows a tile on AVX-512 (`f32_pairs512`); the same bits as `floats`.

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
    // F32 batches on 512 bits where the process runs its 512-bit kernels: every pair of rows
    let r512 = if m.format == BlockFormat::F32 && n >= 2 && wide() {
        f32_pairs512(m, v, n, o.clone(), y, ys)
    } else {
        0
    };
    for (oi, orow) in o.enumerate() {
        let w = base.add(orow * rb);
        let mut r = r512;
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

/// Whether the 512-bit float batches run: the CPU has AVX-512F and the integer products' path
/// (which `MOEFLEET_ISA` may cap) is a 512-bit one.
fn wide() -> bool {
    use crate::kernels::IntPath;
    matches!(
        crate::kernels::int_path(),
        Some(IntPath::Avx512 | IntPath::Avx512Vnni)
    )
}

/// F32 weights against the input rows `0..2·⌊n/2⌋` of `v` ([n, cols]), outputs `o`, into
/// `y[r * ys + (o − o.start)]`; returns the rows done. `dot_f32`'s arithmetic for every output
/// and row: four 8-lane accumulators over steps of 32, each lane one fused multiply-add a step in
/// order, then `reduce` and the tail. Here a 512-bit register holds the eight lanes of two input
/// rows (interleaved once per call, eight values of one row then eight of the other) against a
/// weight row's eight values in both halves, and a tile takes two outputs and two pairs: sixteen
/// values a fused multiply-add where `dot_f32_pair` takes eight, and a weight load serves four
/// rows. A lane's operations are the 256-bit ones, so the same bits.
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and FMA; `m` is F32; `v` holds n rows of `m.cols`; `o` and `y` as
/// in `rows`.
#[target_feature(enable = "avx2,fma,avx512f")]
unsafe fn f32_pairs512(
    m: &BlockMatrix,
    v: &[f32],
    n: usize,
    o: Range<usize>,
    y: &mut [f32],
    ys: usize,
) -> usize {
    let cols = m.cols;
    let whole = cols - cols % STEP;
    let chunks = whole / 8;
    let pairs = n / 2;
    // pair p's chunk c (eight values of each row) at p · chunks + c
    let mut xi = Vec::with_capacity(pairs * chunks);
    for p in 0..pairs {
        let (a, b) = (
            v.as_ptr().add(2 * p * cols),
            v.as_ptr().add((2 * p + 1) * cols),
        );
        for c in 0..chunks {
            let lo = _mm256_loadu_ps(a.add(8 * c));
            let hi = _mm256_loadu_ps(b.add(8 * c));
            xi.push(_mm512_castpd_ps(_mm512_insertf64x4::<1>(
                _mm512_castpd256_pd512(_mm256_castps_pd(lo)),
                _mm256_castps_pd(hi),
            )));
        }
    }
    let wf = m.weight_bytes().as_ptr() as *const f32;
    let mut oi = 0;
    while oi < o.len() {
        let no = (o.len() - oi).min(2);
        let mut p = 0;
        while p < pairs {
            let np = (pairs - p).min(2);
            let w = [o.start + oi, o.start + oi + no - 1].map(|r| wf.add(r * cols));
            let x = xi.as_ptr().add(p * chunks);
            let sums = match (no, np) {
                (2, 2) => tile512::<2, 2>(w, x, chunks, chunks),
                (2, _) => tile512::<2, 1>(w, x, chunks, chunks),
                (_, 2) => tile512::<1, 2>(w, x, chunks, chunks),
                _ => tile512::<1, 1>(w, x, chunks, chunks),
            };
            for (i, row_sums) in sums.iter().enumerate().take(no) {
                let wr = w[i];
                for (j, s) in row_sums.iter().enumerate().take(2 * np) {
                    let r = 2 * p + j;
                    y[r * ys + oi + i] = f32_tail(wr, v.as_ptr().add(r * cols), cols, *s);
                }
            }
            p += np;
        }
        oi += no;
    }
    2 * pairs
}

/// One tile of `f32_pairs512`: weight rows `w[..O]` against pairs `x` (chunk c of pair j at
/// `x + j · stride + c`), each (output, row)'s four accumulators reduced: `[output][row]`.
#[target_feature(enable = "avx2,fma,avx512f")]
#[inline]
unsafe fn tile512<const O: usize, const P: usize>(
    w: [*const f32; 2],
    x: *const __m512,
    chunks: usize,
    stride: usize,
) -> [[f32; 4]; 2] {
    let mut acc = [[[_mm512_setzero_ps(); 4]; P]; O];
    for s in (0..chunks).step_by(4) {
        for k in 0..4 {
            let c = s + k;
            let wv: [__m512; O] = std::array::from_fn(|i| {
                _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(
                    w[i].add(8 * c),
                ))))
            });
            for j in 0..P {
                let xv = *x.add(j * stride + c);
                for i in 0..O {
                    acc[i][j][k] = _mm512_fmadd_ps(wv[i], xv, acc[i][j][k]);
                }
            }
        }
    }
    let mut out = [[0.0f32; 4]; 2];
    for i in 0..O {
        for j in 0..P {
            let half = |h: usize| -> [__m256; 4] {
                std::array::from_fn(|k| {
                    let a = _mm512_castps_pd(acc[i][j][k]);
                    _mm256_castpd_ps(if h == 0 {
                        _mm512_castpd512_pd256(a)
                    } else {
                        _mm512_extractf64x4_pd::<1>(a)
                    })
                })
            };
            out[i][2 * j] = reduce(half(0));
            out[i][2 * j + 1] = reduce(half(1));
        }
    }
    out
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
