//! INT4 group-32 matrices (FORMAT.md: zero point 8, one f16 scale per 32 inputs, byte j of a group
//! holds column j in its low nibble and column j + 16 in its high nibble) and their products.
//!
//! `matmul` computes `y[r, o] = Σ_c ((q[o, c] − 8) · s[o, c / 32]) · x[r, c]` for a batch of rows
//! that share every weight read. Each (row, output) accumulator runs the same operation sequence
//! whatever the batch size, so a row's result is bit-identical alone or batched.

use half::f16;
use rayon::prelude::*;

use super::{isa, reference, Isa};

pub const GROUP: usize = 32;
/// Packed bytes of one group.
pub const GROUP_BYTES: usize = GROUP / 2;

/// An owned INT4 group-32 matrix, [rows, cols], row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Int4Matrix {
    pub rows: usize,
    pub cols: usize,
    /// [rows, cols / 2] packed nibbles.
    pub q: Vec<u8>,
    /// [rows, cols / 32] group scales.
    pub scales: Vec<f16>,
}

/// A borrowed view of a sub-matrix (a row range and a column range on group boundaries).
#[derive(Clone, Copy, Debug)]
pub struct Int4View<'a> {
    pub rows: usize,
    pub cols: usize,
    q: &'a [u8],
    q_stride: usize,
    scales: &'a [f16],
    s_stride: usize,
}

impl Int4Matrix {
    pub fn new(rows: usize, cols: usize, q: Vec<u8>, scales: Vec<f16>) -> Self {
        assert!(cols % GROUP == 0, "INT4 cols must be a multiple of 32");
        assert_eq!(q.len(), rows * cols / 2);
        assert_eq!(scales.len(), rows * cols / GROUP);
        Int4Matrix {
            rows,
            cols,
            q,
            scales,
        }
    }

    pub fn view(&self) -> Int4View<'_> {
        self.view_part(0..self.rows, 0..self.cols)
    }

    /// Rows `r` and columns `c` (both ends multiples of 32).
    pub fn view_part(&self, r: std::ops::Range<usize>, c: std::ops::Range<usize>) -> Int4View<'_> {
        assert!(r.end <= self.rows && c.end <= self.cols);
        assert!(
            c.start % GROUP == 0 && c.end % GROUP == 0,
            "column slices follow groups"
        );
        let q_stride = self.cols / 2;
        let s_stride = self.cols / GROUP;
        Int4View {
            rows: r.len(),
            cols: c.len(),
            q: &self.q[r.start * q_stride + c.start / 2..],
            q_stride,
            scales: &self.scales[r.start * s_stride + c.start / GROUP..],
            s_stride,
        }
    }

    /// Bytes of weights and scales as stored.
    pub fn bytes(&self) -> usize {
        self.q.len() + 2 * self.scales.len()
    }

    /// Quantise an f32 matrix (tests and tools only): per group, scale = max|w| / 7.
    pub fn quantize(rows: usize, cols: usize, w: &[f32]) -> Self {
        let mut q = vec![0u8; rows * cols / 2];
        let mut scales = Vec::with_capacity(rows * cols / GROUP);
        for r in 0..rows {
            for g in 0..cols / GROUP {
                let vals = &w[r * cols + g * GROUP..r * cols + (g + 1) * GROUP];
                let m = vals.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                let s = f16::from_f32(if m > 0.0 { m / 7.0 } else { 1.0 });
                let sf = s.to_f32();
                for j in 0..GROUP_BYTES {
                    let enc = |v: f32| ((v / sf).round().clamp(-8.0, 7.0) as i32 + 8) as u8;
                    q[r * cols / 2 + g * GROUP_BYTES + j] = enc(vals[j]) | (enc(vals[j + 16]) << 4);
                }
                scales.push(s);
            }
        }
        Int4Matrix::new(rows, cols, q, scales)
    }
}

impl<'a> Int4View<'a> {
    /// Packed bytes of group g of row o.
    #[inline]
    fn group(&self, o: usize, g: usize) -> &'a [u8] {
        let at = o * self.q_stride + g * GROUP_BYTES;
        &self.q[at..at + GROUP_BYTES]
    }

    #[inline]
    fn scale(&self, o: usize, g: usize) -> f16 {
        self.scales[o * self.s_stride + g]
    }

    /// The dequantised weight at (o, c), for reference code.
    pub fn weight(&self, o: usize, c: usize) -> f32 {
        let g = c / GROUP;
        let j = c % GROUP;
        let b = self.group(o, g)[j % GROUP_BYTES];
        let nib = if j < GROUP_BYTES { b & 0x0f } else { b >> 4 };
        (nib as f32 - 8.0) * self.scale(o, g).to_f32()
    }

    /// Weight bytes this view reads once (nibbles and scales).
    pub fn bytes(&self) -> usize {
        self.rows * self.cols / 2 + 2 * self.rows * self.cols / GROUP
    }
}

/// Output rows handled per thread task; also the unit of parallel splitting.
const PAR_ROWS: usize = 64;
/// Products smaller than this many weights stay on the calling thread.
const PAR_MIN_WEIGHTS: usize = 1 << 20;

/// `y = x · wᵀ` for x [n, w.cols] and y [n, w.rows], using the fastest kernel this CPU has.
pub fn matmul(w: &Int4View<'_>, x: &[f32], y: &mut [f32]) {
    let n = x.len() / w.cols;
    assert_eq!(x.len(), n * w.cols);
    assert_eq!(y.len(), n * w.rows);
    if w.rows * w.cols < PAR_MIN_WEIGHTS || rayon::current_num_threads() == 1 {
        matmul_rows(w, x, n, 0..w.rows, y);
        return;
    }
    // Each task writes its own output rows into a private buffer, then rows are scattered.
    let parts: Vec<(usize, Vec<f32>)> = (0..w.rows.div_ceil(PAR_ROWS))
        .into_par_iter()
        .map(|t| {
            let r = t * PAR_ROWS..((t + 1) * PAR_ROWS).min(w.rows);
            let mut part = vec![0.0f32; n * r.len()];
            matmul_rows(w, x, n, r.clone(), &mut part);
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

/// Output rows `o` of the product into `y` laid out [n, o.len()] (or [n, w.rows] when o is all).
fn matmul_rows(w: &Int4View<'_>, x: &[f32], n: usize, o: std::ops::Range<usize>, y: &mut [f32]) {
    matmul_on(isa(), w, x, n, o, y)
}

/// Single-threaded product on a chosen instruction set (tests compare the portable and SIMD paths).
pub fn matmul_on(
    isa: Isa,
    w: &Int4View<'_>,
    x: &[f32],
    n: usize,
    o: std::ops::Range<usize>,
    y: &mut [f32],
) {
    let y_stride = y.len() / n;
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2::matmul_rows(w, x, n, o, y, y_stride) },
        _ => portable_rows(w, x, n, o, y, y_stride),
    }
}

/// Portable kernel: dequantise a group once, apply it to every row.
fn portable_rows(
    w: &Int4View<'_>,
    x: &[f32],
    n: usize,
    o: std::ops::Range<usize>,
    y: &mut [f32],
    ys: usize,
) {
    let mut wg = [0.0f32; GROUP];
    let mut acc = vec![0.0f32; n];
    for (oi, orow) in o.clone().enumerate() {
        acc.iter_mut().for_each(|a| *a = 0.0);
        for g in 0..w.cols / GROUP {
            let s = w.scale(orow, g).to_f32();
            for (j, &b) in w.group(orow, g).iter().enumerate() {
                wg[j] = ((b & 0x0f) as f32 - 8.0) * s;
                wg[j + 16] = ((b >> 4) as f32 - 8.0) * s;
            }
            for (r, a) in acc.iter_mut().enumerate() {
                let xr = &x[r * w.cols + g * GROUP..r * w.cols + (g + 1) * GROUP];
                let mut part = 0.0f32;
                for j in 0..GROUP {
                    part += wg[j] * xr[j];
                }
                *a += part;
            }
        }
        for r in 0..n {
            y[r * ys + oi] = acc[r];
        }
    }
}

/// Plain reference over a view (re-exported for the parity tests).
pub fn matmul_reference(w: &Int4View<'_>, x: &[f32], y: &mut [f32]) {
    reference::int4_matmul(w, x, y)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Int4View, GROUP};
    use crate::kernels::hsum256;

    /// Output rows per block: independent accumulator chains for one input row.
    const OB: usize = 4;

    /// Dequantise group g of output row o (scale `scale`) into four vectors of eight weights.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn dequant(w: &Int4View<'_>, o: usize, g: usize, scale: f32) -> [__m256; 4] {
        let b = _mm_loadu_si128(w.group(o, g).as_ptr() as *const __m128i);
        let mask = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(b, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
        let s = _mm256_set1_ps(scale);
        let m8s = _mm256_mul_ps(s, _mm256_set1_ps(-8.0));
        let cvt = |v: __m128i| _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), s, m8s);
        [
            cvt(lo),
            cvt(_mm_srli_si128(lo, 8)),
            cvt(hi),
            cvt(_mm_srli_si128(hi, 8)),
        ]
    }

    /// One (output row, input row) accumulator step over a group: the fixed per-row sequence.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn step(acc: __m256, wv: &[__m256; 4], xg: *const f32) -> __m256 {
        let mut t = _mm256_mul_ps(wv[0], _mm256_loadu_ps(xg));
        t = _mm256_fmadd_ps(wv[1], _mm256_loadu_ps(xg.add(8)), t);
        t = _mm256_fmadd_ps(wv[2], _mm256_loadu_ps(xg.add(16)), t);
        t = _mm256_fmadd_ps(wv[3], _mm256_loadu_ps(xg.add(24)), t);
        _mm256_add_ps(acc, t)
    }

    /// A block of NB output rows x NR input rows; constant sizes keep the accumulators in registers.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn block<const NB: usize, const NR: usize>(
        w: &Int4View<'_>,
        x: &[f32],
        sc: &[f32],
        gs: usize,
        ob: usize,
        r0: usize,
        y: &mut [f32],
        ys: usize,
        y_col: usize,
    ) {
        let groups = w.cols / GROUP;
        let mut acc = [[_mm256_setzero_ps(); NR]; NB];
        for g in 0..groups {
            for bi in 0..NB {
                let wv = dequant(w, ob + bi, g, *sc.get_unchecked(bi * gs + g));
                for ri in 0..NR {
                    let xg = x.as_ptr().add((r0 + ri) * w.cols + g * GROUP);
                    acc[bi][ri] = step(acc[bi][ri], &wv, xg);
                }
            }
        }
        for bi in 0..NB {
            for ri in 0..NR {
                y[(r0 + ri) * ys + y_col + bi] = hsum256(acc[bi][ri]);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn matmul_rows(
        w: &Int4View<'_>,
        x: &[f32],
        n: usize,
        o: std::ops::Range<usize>,
        y: &mut [f32],
        ys: usize,
    ) {
        let groups = w.cols / GROUP;
        // f32 scales of the current block of output rows, converted eight at a time with F16C
        let gs = groups.next_multiple_of(8);
        let mut sc = vec![0.0f32; OB * gs];
        let mut ob = o.start;
        while ob < o.end {
            let nb = OB.min(o.end - ob);
            for bi in 0..nb {
                let row = &w.scales[(ob + bi) * w.s_stride..(ob + bi) * w.s_stride + groups];
                let dst = &mut sc[bi * gs..bi * gs + groups];
                let mut g = 0;
                while g + 8 <= groups {
                    let h = _mm_loadu_si128(row.as_ptr().add(g) as *const __m128i);
                    _mm256_storeu_ps(dst.as_mut_ptr().add(g), _mm256_cvtph_ps(h));
                    g += 8;
                }
                for (d, s) in dst[g..].iter_mut().zip(&row[g..]) {
                    *d = s.to_f32();
                }
            }
            let col = ob - o.start;
            let mut r0 = 0;
            while r0 < n {
                let nr = 2.min(n - r0);
                match (nb, nr) {
                    (4, 2) => block::<4, 2>(w, x, &sc, gs, ob, r0, y, ys, col),
                    (4, 1) => block::<4, 1>(w, x, &sc, gs, ob, r0, y, ys, col),
                    (_, _) => {
                        // tails: one output row at a time, same per-(row, output) sequence
                        for bi in 0..nb {
                            let s1 = &sc[bi * gs..];
                            if nr == 2 {
                                block::<1, 2>(w, x, s1, gs, ob + bi, r0, y, ys, col + bi);
                            } else {
                                block::<1, 1>(w, x, s1, gs, ob + bi, r0, y, ys, col + bi);
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
