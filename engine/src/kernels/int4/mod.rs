//! INT4 group-32 matrices (FORMAT.md: zero point 8, one f16 scale per 32 inputs, byte j of a group
//! holds column j in its low nibble and column j + 16 in its high nibble) and their products.
//!
//! `matmul` computes `y[r, o] = Σ_c ((q[o, c] − 8) · s[o, c / 32]) · x[r, c]` for a batch of rows
//! that share every weight read. Each (row, output) accumulator runs the same operation sequence
//! whatever the batch size, so a row's result is bit-identical alone or batched.
//!
//! In memory (not in files, which stay row-major) a matrix is stored in **tiles** of `TILE` = 4
//! output rows, so that one sequential stream feeds four outputs: within a tile, the columns go in
//! fours of groups (128 columns; the last four may hold 1-3 groups), and within a four each row's
//! packed groups follow one another (row 0's groups, then row 1's, ...). The scales follow the same
//! order with the rows innermost: four f, group k, row r. A last partial tile is padded with zero
//! weights of scale 0. Side by side at the `inkling` expert shape on one core this layout lets the
//! AVX2 kernel run at about 1.7x the bytes per second of four row-major rows read at once.

use std::cell::Cell;

use half::f16;

use super::quant::QuantRows;
use super::{isa, reference, Isa};

pub const GROUP: usize = 32;
/// Packed bytes of one group.
pub const GROUP_BYTES: usize = GROUP / 2;
/// Output rows per stored tile.
pub const TILE: usize = 4;
/// Groups per four (the column unit of a tile).
pub const FOUR: usize = 4;

/// An owned INT4 group-32 matrix, [rows, cols], stored in tiles (module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Int4Matrix {
    pub rows: usize,
    pub cols: usize,
    /// [rows rounded up to TILE, cols / 2] packed nibbles in tile order.
    q: Vec<u8>,
    /// [rows rounded up to TILE, cols / 32] group scales in tile order.
    scales: Vec<f16>,
}

/// Byte offset of group `g` of row `o` in a tiled matrix of `cols` columns.
#[inline]
fn q_at(cols: usize, o: usize, g: usize) -> usize {
    let groups = cols / GROUP;
    let (f, k) = (g / FOUR, g % FOUR);
    let present = (groups - FOUR * f).min(FOUR);
    (o / TILE) * TILE * cols / 2
        + f * TILE * FOUR * GROUP_BYTES
        + ((o % TILE) * present + k) * GROUP_BYTES
}

/// Index of the scale of group `g` of row `o` in a tiled matrix of `cols` columns.
#[inline]
fn s_at(cols: usize, o: usize, g: usize) -> usize {
    let groups = cols / GROUP;
    (o / TILE) * TILE * groups + (g / FOUR) * TILE * FOUR + (g % FOUR) * TILE + o % TILE
}

/// A borrowed view of a sub-matrix (a row range and a column range on group boundaries).
#[derive(Clone, Copy, Debug)]
pub struct Int4View<'a> {
    pub rows: usize,
    pub cols: usize,
    m: &'a Int4Matrix,
    /// First row and first group of the view in `m`.
    r0: usize,
    g0: usize,
}

impl Int4Matrix {
    /// From row-major packed nibbles ([rows, cols / 2]) and scales ([rows, cols / 32]), as files
    /// hold them; stored in tiles.
    pub fn new(rows: usize, cols: usize, q: Vec<u8>, scales: Vec<f16>) -> Self {
        assert!(
            cols.is_multiple_of(GROUP),
            "INT4 cols must be a multiple of 32"
        );
        assert_eq!(q.len(), rows * cols / 2);
        assert_eq!(scales.len(), rows * cols / GROUP);
        let groups = cols / GROUP;
        let padded = rows.next_multiple_of(TILE);
        // padding rows: nibble 8 (weight 0) with scale 0
        let mut tq = vec![0x88u8; padded * cols / 2];
        let mut ts = vec![f16::ZERO; padded * groups];
        for o in 0..rows {
            for g in 0..groups {
                let src = o * cols / 2 + g * GROUP_BYTES;
                let dst = q_at(cols, o, g);
                tq[dst..dst + GROUP_BYTES].copy_from_slice(&q[src..src + GROUP_BYTES]);
                ts[s_at(cols, o, g)] = scales[o * groups + g];
            }
        }
        Int4Matrix {
            rows,
            cols,
            q: tq,
            scales: ts,
        }
    }

    /// The row-major packed nibbles and scales `new` took (for writing files).
    pub fn row_major(&self) -> (Vec<u8>, Vec<f16>) {
        let groups = self.cols / GROUP;
        let mut q = Vec::with_capacity(self.rows * self.cols / 2);
        let mut s = Vec::with_capacity(self.rows * groups);
        for o in 0..self.rows {
            for g in 0..groups {
                let at = q_at(self.cols, o, g);
                q.extend_from_slice(&self.q[at..at + GROUP_BYTES]);
                s.push(self.scales[s_at(self.cols, o, g)]);
            }
        }
        (q, s)
    }

    pub fn view(&self) -> Int4View<'_> {
        self.view_part(0..self.rows, 0..self.cols)
    }

    /// Rows `r` and columns `c` (both ends multiples of 32). The SIMD kernel takes views whose
    /// first row is a multiple of `TILE` and first column a multiple of 128 (`Int4View::tiled`);
    /// others run on the portable kernel with the same quantised activations.
    pub fn view_part(&self, r: std::ops::Range<usize>, c: std::ops::Range<usize>) -> Int4View<'_> {
        assert!(r.start <= r.end && c.start <= c.end);
        assert!(r.end <= self.rows && c.end <= self.cols);
        assert!(
            c.start.is_multiple_of(GROUP) && c.end.is_multiple_of(GROUP),
            "column slices follow groups"
        );
        Int4View {
            rows: r.len(),
            cols: c.len(),
            m: self,
            r0: r.start,
            g0: c.start / GROUP,
        }
    }

    /// Bytes of weights and scales (a last tile's padding rows not counted).
    pub fn bytes(&self) -> usize {
        self.view().bytes()
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
    /// Panics unless every row and group the view names lies inside its matrix (`rows` and `cols`
    /// are public, so a view can be edited after `view_part` made it): the SIMD kernel reads the
    /// packed bytes and scales through raw pointers on the strength of this check.
    pub fn assert_in_bounds(&self) {
        assert!(
            self.cols.is_multiple_of(GROUP),
            "INT4 view cols {} not whole groups",
            self.cols
        );
        assert!(
            self.r0 + self.rows <= self.m.rows && self.g0 * GROUP + self.cols <= self.m.cols,
            "INT4 view of {} x {} reaches outside its matrix",
            self.rows,
            self.cols
        );
    }

    /// The view starts on a tile's first row and a four's first column, as the SIMD kernel needs.
    pub fn tiled(&self) -> bool {
        self.r0.is_multiple_of(TILE) && self.g0.is_multiple_of(FOUR)
    }

    /// Packed bytes of group g of row o.
    #[inline]
    fn group(&self, o: usize, g: usize) -> &'a [u8] {
        let at = q_at(self.m.cols, self.r0 + o, self.g0 + g);
        &self.m.q[at..at + GROUP_BYTES]
    }

    #[inline]
    fn scale(&self, o: usize, g: usize) -> f16 {
        self.m.scales[s_at(self.m.cols, self.r0 + o, self.g0 + g)]
    }

    /// The dequantised weight at (o, c), for reference code.
    pub fn weight(&self, o: usize, c: usize) -> f32 {
        let g = c / GROUP;
        let j = c % GROUP;
        let b = self.group(o, g)[j % GROUP_BYTES];
        let nib = if j < GROUP_BYTES { b & 0x0f } else { b >> 4 };
        (nib as f32 - 8.0) * self.scale(o, g).to_f32()
    }

    /// The view's nibbles in consecutive order ([rows, cols / 2], element 2i in the low nibble of
    /// byte i, as OpenVINO's u4 holds them) and its scales ([rows, cols / 32]).
    pub fn consecutive(&self) -> (Vec<u8>, Vec<f16>) {
        let groups = self.cols / GROUP;
        let mut q = Vec::with_capacity(self.rows * self.cols / 2);
        let mut s = Vec::with_capacity(self.rows * groups);
        for o in 0..self.rows {
            for g in 0..groups {
                let b = self.group(o, g);
                let nib = |j: usize| {
                    let v = b[j % GROUP_BYTES];
                    if j < GROUP_BYTES {
                        v & 0x0f
                    } else {
                        v >> 4
                    }
                };
                q.extend((0..GROUP_BYTES).map(|i| nib(2 * i) | nib(2 * i + 1) << 4));
                s.push(self.scale(o, g));
            }
        }
        (q, s)
    }

    /// Weight bytes this view reads once (nibbles and scales).
    pub fn bytes(&self) -> usize {
        self.rows * self.cols / 2 + 2 * self.rows * self.cols / GROUP
    }
}

/// Output rows handled per thread task; also the unit of parallel splitting (a multiple of TILE).
const PAR_ROWS: usize = 64;

/// `y = x · wᵀ` for x [n, w.cols] and y [n, w.rows], using the fastest kernel this CPU has.
pub fn matmul(w: &Int4View<'_>, x: &[f32], y: &mut [f32]) {
    match isa() {
        Isa::Avx2 => with_quantised(x, w.cols, |xq| matmul_quant(w, xq, y)),
        Isa::Portable => {
            let n = x.len() / w.cols.max(1);
            split(w, n, y, &|o, part| {
                let ys = part.len() / n;
                portable_rows(w, x, n, o, part, ys)
            })
        }
    }
}

/// `ya = x · aᵀ` and `yb = x · bᵀ` for two matrices sharing their input (gate and up): the input
/// is quantised once. Same bits as two `matmul` calls.
pub fn matmul_pair(a: &Int4View<'_>, b: &Int4View<'_>, x: &[f32], ya: &mut [f32], yb: &mut [f32]) {
    match isa() {
        Isa::Avx2 => {
            assert_eq!(a.cols, b.cols, "shared input width");
            with_quantised(x, a.cols, |xq| {
                matmul_quant(a, xq, ya);
                matmul_quant(b, xq, yb);
            })
        }
        Isa::Portable => {
            matmul(a, x, ya);
            matmul(b, x, yb);
        }
    }
}

thread_local! {
    /// This thread's quantised activations, kept between products (`with_quantised`).
    static QUANTISED: Cell<QuantRows> = Cell::new(QuantRows::default());
}

/// `f` over `QuantRows::int4(x, cols)` quantised into this thread's buffer: an expert's product
/// at `inkling-mini` is a few rows of 256 values, and its activations' six buffers allocated
/// afresh for each of a frame's hundreds of experts showed as allocator time in a role's profile
/// at 176 streams. The buffer is taken while `f` runs, so a product that rayon starts on this
/// thread meanwhile (while `f` waits on its own tasks) quantises into a fresh one.
fn with_quantised<R>(x: &[f32], cols: usize, f: impl FnOnce(&QuantRows) -> R) -> R {
    let mut xq = QUANTISED.take();
    xq.refill_int4(x, cols);
    let r = f(&xq);
    // a full preset's prefill window quantises megabytes: not worth holding per thread
    if xq.q.capacity() <= 1 << 19 {
        QUANTISED.set(xq);
    }
    r
}

/// The product from activations already quantised (`QuantRows::int4`, so that products sharing an
/// input, like gate and up, quantise it once). Uses the integer kernel when the CPU has one.
pub fn matmul_quant(w: &Int4View<'_>, xq: &QuantRows, y: &mut [f32]) {
    quant_on(super::int_path(), w, xq, y)
}

/// `matmul` on one of the integer kernels, on the current pool (to time them side by side);
/// panics if the CPU lacks it. Same bits as `matmul` on any path.
pub fn matmul_path(path: super::IntPath, w: &Int4View<'_>, x: &[f32], y: &mut [f32]) {
    assert!(
        path.on_cpu(),
        "{} asked for on a CPU without it",
        path.name()
    );
    quant_on(Some(path), w, &QuantRows::int4(x, w.cols), y)
}

/// `matmul_quant` on `path` (None: the portable kernel on the quantised values); the caller
/// checked that the CPU has the path.
fn quant_on(path: Option<super::IntPath>, w: &Int4View<'_>, xq: &QuantRows, y: &mut [f32]) {
    assert_eq!((xq.cols, xq.block), (w.cols, GROUP));
    w.assert_in_bounds();
    xq.assert_consistent();
    let n = xq.n;
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: int_path() or matmul_path checked the path's features on this CPU; w and xq
        // were checked above, the paired layout and the view's tile alignment just now, and split
        // hands out ranges inside w's rows starting on multiples of PAR_ROWS or 16 (so of TILE)
        // with part holding n rows of o.len().
        Some(path) if xq.has_pairs() && w.tiled() => split(w, n, y, &|o, part| unsafe {
            let ys = part.len() / n.max(1);
            avx2::matmul_rows(path, w, xq, o, part, ys)
        }),
        _ => dequantised(w, xq, y),
    }
}

/// The portable kernel on the values the quantised activations stand for (views the SIMD kernel
/// does not take, and CPUs without it): same numbers as the SIMD kernel up to f32 order.
fn dequantised(w: &Int4View<'_>, xq: &QuantRows, y: &mut [f32]) {
    let n = xq.n;
    let x = xq.values();
    split(w, n, y, &|o, part| {
        let ys = part.len() / n;
        portable_rows(w, &x, n, o, part, ys)
    })
}

/// `kernels::split_rows` over this matrix's output rows.
fn split(
    w: &Int4View<'_>,
    n: usize,
    y: &mut [f32],
    rows: &(dyn Fn(std::ops::Range<usize>, &mut [f32]) + Sync),
) {
    super::split_rows(w.rows, w.rows * w.cols, n, PAR_ROWS, y, rows)
}

/// The preconditions of `matmul_on`; returns y's row stride.
fn check_on(w: &Int4View<'_>, x: &[f32], n: usize, o: &std::ops::Range<usize>, y: &[f32]) -> usize {
    assert!(
        n > 0 && x.len() == n * w.cols,
        "x must be {n} rows of {}",
        w.cols
    );
    assert!(o.end <= w.rows, "output rows {o:?} outside {}", w.rows);
    let y_stride = y.len() / n;
    assert!(
        y_stride >= o.len(),
        "y rows of {y_stride} cannot hold {} outputs",
        o.len()
    );
    w.assert_in_bounds();
    y_stride
}

/// Single-threaded product on a chosen instruction set (tests compare the portable and SIMD paths;
/// `Isa::Avx2` is the AVX2 path, `matmul_on_path` runs the others).
pub fn matmul_on(
    isa: Isa,
    w: &Int4View<'_>,
    x: &[f32],
    n: usize,
    o: std::ops::Range<usize>,
    y: &mut [f32],
) {
    match isa {
        Isa::Avx2 => matmul_on_path(super::IntPath::Avx2, w, x, n, o, y),
        Isa::Portable => {
            let y_stride = check_on(w, x, n, &o, y);
            portable_rows(w, x, n, o, y, y_stride)
        }
    }
}

/// Single-threaded product on one of the INT4 integer kernels; panics if the CPU lacks it.
pub fn matmul_on_path(
    path: super::IntPath,
    w: &Int4View<'_>,
    x: &[f32],
    n: usize,
    o: std::ops::Range<usize>,
    y: &mut [f32],
) {
    let y_stride = check_on(w, x, n, &o, y);
    assert!(
        path.on_cpu(),
        "{} asked for on a CPU without it",
        path.name()
    );
    let xq = QuantRows::int4(x, w.cols);
    assert!(xq.has_pairs());
    #[cfg(target_arch = "x86_64")]
    if w.tiled() && o.start.is_multiple_of(TILE) {
        // SAFETY: the CPU has the path's features (asserted above); the view, x and y were
        // checked by check_on, the pairs and the tile alignment just now.
        unsafe { avx2::matmul_rows(path, w, &xq, o, y, y_stride) };
        return;
    }
    portable_rows(w, &xq.values(), n, o, y, y_stride)
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
mod avx2;

#[cfg(test)]
mod tests {
    use super::*;

    /// The tiled store gives back the row-major bytes it was made from, for every shape class (rows
    /// padding a last tile, a short last four, a lone group).
    #[test]
    fn int4_store_round_trips_row_major() {
        for (rows, cols) in [(37, 96), (32, 64), (64, 32), (24, 1056), (4, 128)] {
            let w = crate::kernels::cases::int4_matrix(rows, cols, 11);
            let (q, s) = w.row_major();
            let again = Int4Matrix::new(rows, cols, q.clone(), s.clone());
            assert_eq!(again, w);
            for o in 0..rows {
                for c in 0..cols {
                    let b = q[o * cols / 2 + c / 32 * 16 + c % 16];
                    let nib = if c % 32 < 16 { b & 15 } else { b >> 4 };
                    let want = (nib as f32 - 8.0) * s[o * cols / 32 + c / 32].to_f32();
                    assert_eq!(w.view().weight(o, c), want, "{rows}x{cols} ({o}, {c})");
                }
            }
        }
    }

    #[test]
    fn consecutive_order_holds_element_2i_in_the_low_nibble_of_byte_i() {
        let w = crate::kernels::cases::int4_matrix(40, 256, 5);
        // a view off the tile grid, as dense slices take
        let v = w.view_part(4..36, 64..192);
        let (q, s) = v.consecutive();
        for o in 0..v.rows {
            for c in 0..v.cols {
                let b = q[(o * v.cols + c) / 2];
                let nib = if c % 2 == 0 { b & 15 } else { b >> 4 };
                let want = (nib as f32 - 8.0) * s[o * v.cols / 32 + c / 32].to_f32();
                assert_eq!(v.weight(o, c), want, "({o}, {c})");
            }
        }
    }
}
