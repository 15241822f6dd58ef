//! INT8 per-row matrices (attention projections and the head: `w[o, c] = q[o, c] · s[o]`) and their
//! batched products `y[r, o] = s[o] · Σ_c q[o, c] · x[r, c]`. Like `int4`, each (row, output)
//! accumulator runs a fixed sequence, so batching never changes a row's bits.

use half::f16;
use rayon::prelude::*;

use super::{isa, Isa};

#[derive(Clone, Debug, PartialEq)]
pub struct Int8Matrix {
    pub rows: usize,
    pub cols: usize,
    /// [rows, cols] values in −127..=127.
    pub q: Vec<i8>,
    /// [rows] per-row scales.
    pub scales: Vec<f16>,
}

impl Int8Matrix {
    pub fn new(rows: usize, cols: usize, q: Vec<i8>, scales: Vec<f16>) -> Self {
        assert!(cols % 8 == 0, "INT8 cols must be a multiple of 8");
        assert_eq!(q.len(), rows * cols);
        assert_eq!(scales.len(), rows);
        Int8Matrix {
            rows,
            cols,
            q,
            scales,
        }
    }

    pub fn bytes(&self) -> usize {
        self.q.len() + 2 * self.scales.len()
    }

    /// Quantise an f32 matrix (tests and tools only): scale = max|row| / 127.
    pub fn quantize(rows: usize, cols: usize, w: &[f32]) -> Self {
        let mut q = Vec::with_capacity(rows * cols);
        let mut scales = Vec::with_capacity(rows);
        for r in 0..rows {
            let row = &w[r * cols..(r + 1) * cols];
            let m = row.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let s = f16::from_f32(if m > 0.0 { m / 127.0 } else { 1.0 });
            q.extend(
                row.iter()
                    .map(|v| (v / s.to_f32()).round().clamp(-127.0, 127.0) as i8),
            );
            scales.push(s);
        }
        Int8Matrix::new(rows, cols, q, scales)
    }
}

const PAR_ROWS: usize = 256;
const PAR_MIN_WEIGHTS: usize = 1 << 20;

/// `y = x · wᵀ` for x [n, w.cols] and y [n, w.rows].
pub fn matmul(w: &Int8Matrix, x: &[f32], y: &mut [f32]) {
    let n = x.len() / w.cols;
    assert_eq!(x.len(), n * w.cols);
    assert_eq!(y.len(), n * w.rows);
    if w.rows * w.cols < PAR_MIN_WEIGHTS || rayon::current_num_threads() == 1 {
        rows_into(w, x, n, 0..w.rows, y);
        return;
    }
    let parts: Vec<(usize, Vec<f32>)> = (0..w.rows.div_ceil(PAR_ROWS))
        .into_par_iter()
        .map(|t| {
            let r = t * PAR_ROWS..((t + 1) * PAR_ROWS).min(w.rows);
            let mut part = vec![0.0f32; n * r.len()];
            rows_into(w, x, n, r.clone(), &mut part);
            (r.start, part)
        })
        .collect();
    for (start, part) in parts {
        let len = part.len() / n;
        for r in 0..n {
            y[r * w.rows + start..r * w.rows + start + len]
                .copy_from_slice(&part[r * len..(r + 1) * len]);
        }
    }
}

fn rows_into(w: &Int8Matrix, x: &[f32], n: usize, o: std::ops::Range<usize>, y: &mut [f32]) {
    matmul_on(isa(), w, x, n, o, y)
}

/// Single-threaded product on a chosen instruction set (tests compare the portable and SIMD paths).
pub fn matmul_on(
    isa: Isa,
    w: &Int8Matrix,
    x: &[f32],
    n: usize,
    o: std::ops::Range<usize>,
    y: &mut [f32],
) {
    let ys = y.len() / n;
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2::rows_into(w, x, n, o, y, ys) },
        _ => {
            for (oi, orow) in o.enumerate() {
                let q = &w.q[orow * w.cols..(orow + 1) * w.cols];
                let s = w.scales[orow].to_f32();
                for r in 0..n {
                    let xr = &x[r * w.cols..(r + 1) * w.cols];
                    let acc: f32 = q.iter().zip(xr).map(|(&a, &b)| a as f32 * b).sum();
                    y[r * ys + oi] = acc * s;
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::Int8Matrix;
    use crate::kernels::hsum256;

    const OB: usize = 4;

    /// NB output rows x NR input rows with register accumulators.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn block<const NB: usize, const NR: usize>(
        w: &Int8Matrix,
        x: &[f32],
        ob: usize,
        r0: usize,
        y: &mut [f32],
        ys: usize,
        y_col: usize,
    ) {
        let mut acc = [[_mm256_setzero_ps(); NR]; NB];
        let mut c = 0;
        while c < w.cols {
            for bi in 0..NB {
                let p = w.q.as_ptr().add((ob + bi) * w.cols + c) as *const __m128i;
                let wv = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p)));
                for ri in 0..NR {
                    let xv = _mm256_loadu_ps(x.as_ptr().add((r0 + ri) * w.cols + c));
                    acc[bi][ri] = _mm256_fmadd_ps(wv, xv, acc[bi][ri]);
                }
            }
            c += 8;
        }
        for bi in 0..NB {
            let s = _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(
                w.scales[ob + bi].to_bits() as i16
            )));
            for ri in 0..NR {
                y[(r0 + ri) * ys + y_col + bi] = hsum256(acc[bi][ri]) * s;
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn rows_into(
        w: &Int8Matrix,
        x: &[f32],
        n: usize,
        o: std::ops::Range<usize>,
        y: &mut [f32],
        ys: usize,
    ) {
        let mut ob = o.start;
        while ob < o.end {
            let nb = OB.min(o.end - ob);
            let col = ob - o.start;
            let mut r0 = 0;
            while r0 < n {
                let nr = 2.min(n - r0);
                match (nb, nr) {
                    (4, 2) => block::<4, 2>(w, x, ob, r0, y, ys, col),
                    (4, 1) => block::<4, 1>(w, x, ob, r0, y, ys, col),
                    _ => {
                        for bi in 0..nb {
                            if nr == 2 {
                                block::<1, 2>(w, x, ob + bi, r0, y, ys, col + bi);
                            } else {
                                block::<1, 1>(w, x, ob + bi, r0, y, ys, col + bi);
                            }
                        }
                    }
                }
                r0 += nr;
            }
            ob += nb;
        }
    }
}
