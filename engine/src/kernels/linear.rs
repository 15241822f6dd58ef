//! Plain f32 matrices `W [rows (outputs), cols (inputs)]` and their batched product
//! `y[r, o] = Σ_c W[o, c] · x[r, c]` (the draft head's original form, and its deployment grids
//! dequantised to f32: ARCHITECTURE.md §1.7, MEASUREMENTS.md §5). The product is a blocked SGEMM
//! (`matrixmultiply`); its plain twin is `reference::linear_matmul`.

use half::f16;

use super::blocks::{BlockFormat, BlockMatrix};
use super::int4::Int4Matrix;
use super::int8::Int8Matrix;

#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    pub rows: usize,
    pub cols: usize,
    /// [rows, cols] row-major.
    pub w: Vec<f32>,
    /// The same matrix in Q8_0 blocks, which a one-row product then reads instead (`with_q8`: a
    /// draft head drafting live, where a token's products are one row each and read the weights
    /// once).
    pub q8: Option<std::sync::Arc<BlockMatrix>>,
}

impl Linear {
    /// Panics if `w.len() != rows * cols` (a construction bug, never input).
    pub fn new(rows: usize, cols: usize, w: Vec<f32>) -> Self {
        assert_eq!(w.len(), rows * cols, "Linear {rows} x {cols}");
        Linear {
            rows,
            cols,
            w,
            q8: None,
        }
    }

    /// This matrix with its Q8_0 blocks for one-row products (unchanged when it is empty or its
    /// columns are not whole blocks of 32).
    pub fn with_q8(mut self) -> crate::error::Result<Self> {
        if self.rows > 0 && self.cols.is_multiple_of(32) {
            let b = BlockMatrix::quantize(BlockFormat::Q8_0, self.rows, self.cols, &self.w)?;
            self.q8 = Some(std::sync::Arc::new(b));
        }
        Ok(self)
    }

    /// Round to INT8 per output row (`q · s`, s an f16 row scale, q in −127..127) and back.
    pub fn int8_grid(&self) -> Linear {
        Linear::new(
            self.rows,
            self.cols,
            dequantize_int8(&Int8Matrix::quantize(self.rows, self.cols, &self.w)),
        )
    }

    /// Round to INT4 groups of 32 along the input (`(q − 8) · s`, f16 group scales) and back.
    /// Panics unless `cols` is a multiple of 32.
    pub fn int4_grid(&self) -> Linear {
        let m = Int4Matrix::quantize(self.rows, self.cols, &self.w);
        let v = m.view();
        let mut w = Vec::with_capacity(self.rows * self.cols);
        for o in 0..self.rows {
            for c in 0..self.cols {
                w.push(v.weight(o, c));
            }
        }
        Linear::new(self.rows, self.cols, w)
    }
}

/// The f32 values of an INT8 per-row matrix.
pub fn dequantize_int8(m: &Int8Matrix) -> Vec<f32> {
    let mut w = Vec::with_capacity(m.rows * m.cols);
    for (row, s) in m.q.chunks_exact(m.cols).zip(&m.scales) {
        let s = f16::to_f32(*s);
        w.extend(row.iter().map(|&q| q as f32 * s));
    }
    w
}

/// `y = x · wᵀ` for x [n, w.cols] and y [n, w.rows]. Panics on shapes that do not fit (the
/// fields are public, so the matrix's own length is checked here too, before the SGEMM reads it).
/// One row (a draft head drafting live) is a product per output (`matvec`): SGEMM would copy the
/// whole matrix into its panels first, which for one row costs more than the product (measured:
/// 6–9 GB/s of weights read), or, when the matrix carries them, its Q8_0 blocks (`with_q8`). Its
/// sums are in another order than SGEMM's, so a row alone and the same row in a frame agree to
/// rounding, not bit for bit.
pub fn matmul(w: &Linear, x: &[f32], y: &mut [f32]) {
    assert_eq!(w.w.len(), w.rows * w.cols, "Linear {} x {}", w.rows, w.cols);
    assert!(
        w.cols > 0 && x.len().is_multiple_of(w.cols),
        "input of {} values is not rows of {}",
        x.len(),
        w.cols
    );
    let n = x.len() / w.cols;
    assert_eq!(y.len(), n * w.rows, "output of {n} rows x {}", w.rows);
    if n == 0 || w.rows == 0 {
        return;
    }
    if n == 1 {
        return match &w.q8 {
            Some(q) => q.matmul(x, y),
            None => matvec(w, x, y),
        };
    }
    // x row-major, wᵀ read through w's row-major layout, y row-major
    sgemm(
        Strided::rows(x, w.cols),
        Strided::columns(&w.w, w.cols),
        (n, w.cols, w.rows),
        y,
        w.rows,
    );
}

/// Rows of the Gram product's block rows (`gram`).
const GRAM_BLOCK: usize = 128;

/// `g = xᵀ · x` for `x` [m, p] row-major (m rows of p features), into `g` [p, p]: each block row
/// of GRAM_BLOCK rows by SGEMM from its diagonal block to the right, the rest mirrored, in about
/// half the work of the full product. Both operands are read k-major (a row of `x` is one k), which
/// the SGEMM packs by contiguous copies where the transposed layout needs a gather per value. The
/// SGEMM sums each output over k in the same order whatever the shape, place and strides of its
/// block, and `x_i·x_j` and `x_j·x_i` are the same products, so `g` has the bits of
/// `matmul(&Linear::new(p, m, xt), xt, g)` with `xt` = xᵀ, for p ≥ 2 (a test checks it). Panics
/// on shapes that do not match (a caller's bug).
pub fn gram(x: &[f32], m: usize, p: usize, g: &mut [f32]) {
    assert_eq!(x.len(), m * p, "Gram input of {m} x {p}");
    assert_eq!(g.len(), p * p, "Gram output of {p} x {p}");
    if p == 0 || m == 0 {
        g.fill(0.0);
        return;
    }
    for i0 in (0..p).step_by(GRAM_BLOCK) {
        let rows = GRAM_BLOCK.min(p - i0);
        // A: columns i0.. of x read as xᵀ; B: the same columns as they are; C: g[i0.., i0..]
        sgemm(
            Strided::columns(&x[i0..], p),
            Strided::rows(&x[i0..], p),
            (rows, m, p - i0),
            &mut g[i0 * p + i0..],
            p,
        );
    }
    for i in 0..p {
        // below the diagonal block of row i: the mirror of what its column's block row computed
        for j in 0..i / GRAM_BLOCK * GRAM_BLOCK {
            g[i * p + j] = g[j * p + i];
        }
    }
}

/// `c = xᵀ · y` for `x` [m, p] and `y` [m, q] row-major (the same m rows), into `c` [p, q]: the
/// cross products of a regression's features and targets, both read k-major like `gram`'s, with
/// the bits of `matmul(&Linear::new(q, m, yt), xt, c)` for the transposes `xt`, `yt` (a test
/// checks it). Panics on shapes that do not match (a caller's bug).
pub fn cross(x: &[f32], y: &[f32], m: usize, p: usize, q: usize, c: &mut [f32]) {
    cross_rows(x, y, m, p, q, 0..p, c);
}

/// Rows `rows` of `cross(x, y, m, p, q, ·)` (from x's columns `rows`) into `c` [rows.len(), q],
/// with those rows' bits: each output sums over the same k in the same order. Panics on shapes
/// that do not match (a caller's bug).
pub fn cross_rows(
    x: &[f32],
    y: &[f32],
    m: usize,
    p: usize,
    q: usize,
    rows: std::ops::Range<usize>,
    c: &mut [f32],
) {
    assert_eq!(x.len(), m * p, "cross-product input of {m} x {p}");
    assert_eq!(y.len(), m * q, "cross-product targets of {m} x {q}");
    assert!(
        rows.start <= rows.end && rows.end <= p,
        "rows {rows:?} of {p}"
    );
    let r = rows.len();
    assert_eq!(c.len(), r * q, "cross-product output of {r} x {q}");
    if m == 0 || r == 0 {
        c.fill(0.0);
        return;
    }
    // A: x's columns `rows` read as xᵀ; B: y row-major
    sgemm(
        Strided::columns(&x[rows.start..], p),
        Strided::rows(y, q),
        (r, m, q),
        c,
        q,
    );
}

/// `y = x · b` for `x` [n, k] and `b` [k, m] row-major, into `y` [n, m]: the product with the
/// right operand stored k-major, which the SGEMM packs by contiguous copies (`matmul`'s `wᵀ`
/// needs a gather per value). The same bits as `matmul(&Linear::new(m, k, bt), x, y)` with `bt` =
/// bᵀ, for n ≥ 2 (a test checks it). Panics on shapes that do not match (a caller's bug).
pub fn product(x: &[f32], b: &[f32], n: usize, k: usize, m: usize, y: &mut [f32]) {
    assert_eq!(x.len(), n * k, "product input of {n} x {k}");
    assert_eq!(b.len(), k * m, "product operand of {k} x {m}");
    assert_eq!(y.len(), n * m, "product output of {n} x {m}");
    sgemm(Strided::rows(x, k), Strided::rows(b, m), (n, k, m), y, m);
}

/// `x` [rows, cols] row-major as its transpose [cols, rows] row-major. Panics if `x` is not
/// rows x cols values (a caller's bug).
pub fn transposed<T: Copy>(x: &[T], rows: usize, cols: usize) -> Vec<T> {
    assert_eq!(x.len(), rows * cols, "transpose of {rows} x {cols}");
    (0..rows * cols)
        .map(|i| x[(i % rows) * cols + i / rows])
        .collect()
}

/// A matrix operand of `sgemm` read through strides: element (i, j) at `v[i·row + j·col]`.
#[derive(Clone, Copy)]
struct Strided<'a> {
    v: &'a [f32],
    row: usize,
    col: usize,
}

impl<'a> Strided<'a> {
    /// Rows of `stride` values each, read as they are (row-major).
    fn rows(v: &'a [f32], stride: usize) -> Self {
        Strided {
            v,
            row: stride,
            col: 1,
        }
    }

    /// Rows of `stride` values each, read transposed (element (i, j) is row j's value i).
    fn columns(v: &'a [f32], stride: usize) -> Self {
        Strided {
            v,
            row: 1,
            col: stride,
        }
    }

    /// Whether an r x c matrix read through these strides stays inside `v`.
    fn holds(&self, r: usize, c: usize) -> bool {
        r == 0 || c == 0 || (r - 1) * self.row + (c - 1) * self.col < self.v.len()
    }
}

/// `c = a · b` for `a` [m, k] and `b` [k, n] read through their strides, into the m x n block of
/// `c` whose rows start `c_row` values apart: the one call of the SGEMM (`matrixmultiply`) every
/// product above makes. Panics if an operand or the block reaches past its slice (a caller's
/// bug), so the unsafe call below reads and writes only inside the three slices.
fn sgemm(a: Strided, b: Strided, (m, k, n): (usize, usize, usize), c: &mut [f32], c_row: usize) {
    assert!(
        a.holds(m, k) && b.holds(k, n),
        "SGEMM operands of {m} x {k} x {n}"
    );
    assert!(
        n <= c_row && (m == 0 || n == 0 || (m - 1) * c_row + n <= c.len()),
        "SGEMM output of {m} x {n} at row stride {c_row} in {} values",
        c.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: every element the SGEMM reads, a[i·a.row + l·a.col] and b[l·b.row + j·b.col] for
    // i < m, l < k, j < n, lies in its slice, and every element it writes, c[i·c_row + j], in
    // `c` (checked above); `c` is borrowed mutably, so it aliases neither operand. With k = 0 it
    // writes zeros and reads nothing.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.v.as_ptr(),
            a.row as isize,
            a.col as isize,
            b.v.as_ptr(),
            b.row as isize,
            b.col as isize,
            0.0,
            c.as_mut_ptr(),
            c_row as isize,
            1,
        );
    }
}

/// Lanes of `dot`'s partial sums.
const LANES: usize = 32;

/// `Σ a_i·b_i` over the shorter length, as `LANES` partial sums (lane l over the indices ≡ l mod
/// `LANES`, in index order), then added pairwise (lane l += lane l + w for w = 16, 8, …, 1). Each
/// lane is an independent chain, so the compiler keeps them in vector registers, and the tree is
/// five adds deep where a sum in lane order is 31; without fused multiply-adds the bits are the
/// same whatever vector width it picks. Any order of a sum of n rounded products is within
/// γ_n·Σ|a_i·b_i| of the exact dot product (γ_n = n·u/(1 − n·u), u = 2⁻²⁴), which the test holds
/// it to. The one-row product (`matvec`) and the draft head's attention scores are this.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [0.0f32; LANES];
    let (ca, cb) = (a[..n].chunks_exact(LANES), b[..n].chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    for (l, (x, y)) in ra.iter().zip(rb).enumerate() {
        acc[l] += x * y;
    }
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for l in 0..w {
            acc[l] += acc[l + w];
        }
    }
    acc[0]
}

/// `y = w · x` for one row x [w.cols]: a `dot` per output.
fn matvec(w: &Linear, x: &[f32], y: &mut [f32]) {
    for (row, out) in w.w.chunks_exact(w.cols).zip(y.iter_mut()) {
        *out = dot(row, x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|a| a.to_bits()).collect()
    }

    /// `gram`, `cross` (whole and by rows) and `product` against the full products through
    /// `matmul` of the transposes, bit for bit, at shapes around the block size and the SGEMM's
    /// own blocking (k past 256, ragged tiles).
    #[test]
    fn gram_cross_and_product_have_matmuls_bits() {
        for (p, m) in [(2, 3), (37, 5), (128, 64), (129, 300), (300, 513), (260, 1)] {
            let x: Vec<f32> = (0..m * p)
                .map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 97.0)
                .collect();
            let xt = transposed(&x, m, p);
            let mut full = vec![0.0f32; p * p];
            matmul(&Linear::new(p, m, xt.clone()), &xt, &mut full);
            let mut g = vec![f32::NAN; p * p];
            gram(&x, m, p, &mut g);
            assert_eq!(bits(&g), bits(&full), "gram p={p} m={m}");
            let q = p % 7 + 3;
            let y: Vec<f32> = (0..m * q)
                .map(|i| ((i * 104_729 % 997) as f32 - 498.0) / 250.0)
                .collect();
            let mut full = vec![0.0f32; p * q];
            matmul(&Linear::new(q, m, transposed(&y, m, q)), &xt, &mut full);
            let mut c = vec![f32::NAN; p * q];
            cross(&x, &y, m, p, q, &mut c);
            assert_eq!(bits(&c), bits(&full), "cross p={p} m={m} q={q}");
            let cut = p / 3;
            let mut parts = vec![f32::NAN; p * q];
            let (top, bottom) = parts.split_at_mut(cut * q);
            cross_rows(&x, &y, m, p, q, 0..cut, top);
            cross_rows(&x, &y, m, p, q, cut..p, bottom);
            assert_eq!(bits(&parts), bits(&full), "cross by rows p={p} m={m} q={q}");
            if m >= 2 {
                // x [m, p] times c [p, q] against matmul with cᵀ as the Linear
                let mut full = vec![0.0f32; m * q];
                matmul(&Linear::new(q, p, transposed(&c, p, q)), &x, &mut full);
                let mut y = vec![f32::NAN; m * q];
                product(&x, &c, m, p, q, &mut y);
                assert_eq!(bits(&y), bits(&full), "product n={m} k={p} m={q}");
            }
        }
    }

    /// The SGEMM's checks: an operand or an output block one value short of what its shape and
    /// strides address is refused before the unsafe call; exactly enough is accepted.
    #[test]
    fn sgemm_refuses_views_past_their_slices() {
        let run = |a: usize, b: usize, c: usize, c_row: usize| {
            std::panic::catch_unwind(move || {
                let (x, y, mut z) = (vec![1.0f32; a], vec![1.0f32; b], vec![0.0f32; c]);
                // [2, 3] read as columns of rows of 2 (a needs 1 + 2·2 + 1 = 6), [3, 4] row-major
                sgemm(
                    Strided::columns(&x, 2),
                    Strided::rows(&y, 4),
                    (2, 3, 4),
                    &mut z,
                    c_row,
                );
                z
            })
        };
        assert_eq!(run(6, 12, 8, 4).unwrap(), vec![3.0; 8]);
        assert!(run(5, 12, 8, 4).is_err());
        assert!(run(6, 11, 8, 4).is_err());
        assert!(run(6, 12, 7, 4).is_err());
        // rows of the output overlapping
        assert!(run(6, 12, 8, 3).is_err());
        // a wider row stride: the block's last row ends at 5 + 4 = 9 values
        assert_eq!(run(6, 12, 9, 5).unwrap()[5..], [3.0; 4]);
    }

    /// A one-row product through the Q8_0 twin (`with_q8`) against the exact f64 product: weights
    /// and activations are each rounded to 8 bits per block of 32 (scale = block max / 127, so
    /// each value moves by at most half a step), so |error| ≤ Σ_c (|δw|·|x| + |w|·|δx| + |δw|·|δx|)
    /// with |δw| ≤ max|w_block| / 254 and |δx| ≤ max|x_block| / 254, plus f16 rounding of the
    /// scales (2⁻¹¹ relative, counted as 1 %). The first rows of the blocks give the first outputs'
    /// bits (`BlockMatrix::first_rows`).
    #[test]
    fn one_row_through_q8_blocks_is_within_the_grid_and_first_rows_agree() {
        let (rows, cols) = (9, 96);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 300.0)
            .collect();
        let l = Linear::new(rows, cols, w).with_q8().unwrap();
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 104_729 % 997) as f32 - 498.0) / 250.0)
            .collect();
        let mut y = vec![0.0f32; rows];
        matmul(&l, &x, &mut y);
        let bmax = |v: &[f32], c: usize| {
            v[c / 32 * 32..c / 32 * 32 + 32]
                .iter()
                .fold(0.0f32, |m, a| m.max(a.abs())) as f64
        };
        for r in 0..rows {
            let row = &l.w[r * cols..(r + 1) * cols];
            let exact: f64 = row.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
            let bound: f64 = (0..cols)
                .map(|c| {
                    let (dw, dx) = (bmax(row, c) / 254.0, bmax(&x, c) / 254.0);
                    dw * (x[c] as f64).abs() + (row[c] as f64).abs() * dx + dw * dx
                })
                .sum::<f64>()
                * 1.01;
            assert!(
                (y[r] as f64 - exact).abs() <= bound,
                "row {r}: {} vs {exact} (bound {bound})",
                y[r]
            );
        }
        let q = l.q8.as_ref().unwrap();
        let first = q.first_rows(4).unwrap();
        let mut y4 = vec![0.0f32; 4];
        first.matmul(&x, &mut y4);
        assert_eq!(y4, y[..4]);
        assert!(q.first_rows(rows + 1).is_none());
    }

    /// Against the exact (f64) dot product, within γ_n·Σ|a_i·b_i| at every length, a multiple of
    /// the lanes or not; and the order is the stated one (a sum the plain loop rounds differently).
    #[test]
    fn dot_is_within_the_summation_bound_in_its_order() {
        let mut rng = crate::rng::Rng::new(5);
        let u = f64::powi(2.0, -24);
        for n in [1, 7, 16, 31, 32, 33, 64, 100, 576, 1000] {
            for _ in 0..50 {
                let a: Vec<f32> = (0..n).map(|_| rng.sym()).collect();
                let b: Vec<f32> = (0..n).map(|_| rng.sym()).collect();
                let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
                let mag: f64 = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| (*x as f64 * *y as f64).abs())
                    .sum();
                let gamma = n as f64 * u / (1.0 - n as f64 * u);
                let got = dot(&a, &b) as f64;
                assert!(
                    (got - exact).abs() <= gamma * mag,
                    "n {n}: {got} vs {exact}, bound {}",
                    gamma * mag
                );
            }
        }
        // lane 0 holds indices 0 and 32 (1 + 1e-8 rounds to 1); the tree adds lane 1 to it last,
        // where the plain loop would be left with the 1e-8
        let mut a = vec![0.0f32; 33];
        a[0] = 1.0;
        a[32] = 1e-8;
        a[1] = -1.0;
        assert_eq!(dot(&a, &[1.0; 33]), 0.0);
        assert_ne!(a.iter().sum::<f32>(), 0.0);
    }

    /// One row (`matvec`) against the f64 sum: each output's error is at most the f32 rounding
    /// of a sum of `cols` products, `cols · ε · Σ|a·b|` with ε = 2⁻²⁴ (a loose bound: the lane
    /// sums and the tree are shorter); and a frame's rows (SGEMM) agree with it within the same bound.
    #[test]
    fn one_row_is_within_rounding_of_the_exact_product_and_of_a_frame() {
        for cols in [1, 31, 32, 33, 576, 1000] {
            let rows = 7;
            let w: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 300.0)
                .collect();
            let l = Linear::new(rows, cols, w);
            let x: Vec<f32> = (0..2 * cols)
                .map(|i| ((i * 104_729 % 997) as f32 - 498.0) / 250.0)
                .collect();
            let mut one = vec![0.0f32; rows];
            matmul(&l, &x[..cols], &mut one);
            let mut frame = vec![0.0f32; 2 * rows];
            matmul(&l, &x, &mut frame);
            for r in 0..rows {
                let row = &l.w[r * cols..(r + 1) * cols];
                let exact: f64 = row
                    .iter()
                    .zip(&x[..cols])
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum();
                let mag: f64 = row
                    .iter()
                    .zip(&x[..cols])
                    .map(|(a, b)| (*a as f64 * *b as f64).abs())
                    .sum();
                let bound = cols as f64 * f32::EPSILON as f64 / 2.0 * mag + 1e-30;
                assert!(
                    (one[r] as f64 - exact).abs() <= bound,
                    "cols {cols} row {r}"
                );
                assert!(
                    (frame[r] as f64 - one[r] as f64).abs() <= 2.0 * bound,
                    "cols {cols} row {r}"
                );
            }
        }
    }

    #[test]
    fn grids_round_to_their_formats() {
        let w: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let l = Linear::new(2, 32, w.clone());
        let g8 = l.int8_grid();
        let g4 = l.int4_grid();
        for r in 0..2 {
            let row = &w[r * 32..(r + 1) * 32];
            let m = row.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            for c in 0..32 {
                // half a step of each grid (plus the f16 scale's rounding)
                assert!((g8.w[r * 32 + c] - row[c]).abs() <= m / 127.0 * 0.5 * 1.01);
                assert!((g4.w[r * 32 + c] - row[c]).abs() <= m / 7.0 * 0.5 * 1.01);
            }
        }
        assert_eq!(
            g8.int8_grid(),
            g8,
            "a grid is a fixed point of its rounding"
        );
    }
}
