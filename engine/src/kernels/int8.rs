//! INT8 per-row matrices (attention projections and the head: `w[o, c] = q[o, c] · s[o]`) and their
//! batched products `y[r, o] = s[o] · Σ_c q[o, c] · x[r, c]`. Like `int4`, each (row, output)
//! accumulator runs a fixed sequence, so batching never changes a row's bits.

use half::f16;

use super::quant::QuantRows;
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
        assert!(cols.is_multiple_of(8), "INT8 cols must be a multiple of 8");
        assert_eq!(q.len(), rows * cols);
        assert_eq!(scales.len(), rows);
        Int8Matrix {
            rows,
            cols,
            q,
            scales,
        }
    }

    /// Panics unless `q` and `scales` hold `rows x cols` and `rows` values (the fields are
    /// public; the SIMD kernel reads them through raw pointers on the strength of this check).
    pub fn assert_consistent(&self) {
        assert!(
            self.cols.is_multiple_of(8)
                && self.q.len() == self.rows * self.cols
                && self.scales.len() == self.rows,
            "INT8 matrix of {} x {} with {} values and {} scales",
            self.rows,
            self.cols,
            self.q.len(),
            self.scales.len()
        );
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

/// Output rows per parallel task (`kernels::split_rows`).
const PAR_ROWS: usize = 256;

/// Columns per activation scale of the integer kernel: the largest of 256..16 dividing `cols`
/// (None: no integer kernel for this width). 256 keeps every i32 lane sum below 2^31.
pub fn act_block(cols: usize) -> Option<usize> {
    [256, 128, 64, 32, 16]
        .into_iter()
        .find(|b| cols.is_multiple_of(*b))
}

/// `y = x · wᵀ` for x [n, w.cols] and y [n, w.rows].
pub fn matmul(w: &Int8Matrix, x: &[f32], y: &mut [f32]) {
    matmul_with(w, x, quantise(x, w.cols).as_ref(), y, super::int_path())
}

/// `matmul` on one of the integer kernels, on the current pool (to time them side by side);
/// panics if the CPU lacks it. Same bits as `matmul` on any path.
pub fn matmul_path(path: super::IntPath, w: &Int8Matrix, x: &[f32], y: &mut [f32]) {
    assert!(
        path.on_cpu(),
        "{} asked for on a CPU without it",
        path.name()
    );
    let xq = act_block(w.cols)
        .filter(|_| !x.is_empty())
        .map(|b| QuantRows::new(x, w.cols, b));
    matmul_with(w, x, xq.as_ref(), y, Some(path))
}

/// `ys[i] = x · ws[i]ᵀ` for matrices of the same input width (the q, k, v and r projections):
/// the input is quantised once for all of them.
pub fn matmul_shared(ws: &[&Int8Matrix], x: &[f32], ys: &mut [&mut [f32]]) {
    assert_eq!(ws.len(), ys.len());
    let Some(first) = ws.first() else { return };
    assert!(
        ws.iter().all(|w| w.cols == first.cols),
        "shared input width"
    );
    let xq = quantise(x, first.cols);
    let weights: usize = ws.iter().map(|w| w.rows * w.cols).sum();
    if x.len() == first.cols && super::threads() > 1 && weights >= super::PAR_MIN_WEIGHTS_ONE_ROW {
        return shared_one_row(ws, x, xq.as_ref(), ys);
    }
    for (w, y) in ws.iter().zip(ys.iter_mut()) {
        matmul_with(w, x, xq.as_ref(), y, super::int_path());
    }
}

/// One row through several matrices as one product: their output rows end to end, cut into one
/// piece per thread (at multiples of 16 rows), each piece a task. A decode token's k, v and r
/// projections are too small to split alone; with q they balance.
fn shared_one_row(ws: &[&Int8Matrix], x: &[f32], xq: Option<&QuantRows>, ys: &mut [&mut [f32]]) {
    use rayon::prelude::*;
    for (w, y) in ws.iter().zip(ys.iter()) {
        w.assert_consistent();
        assert_eq!(y.len(), w.rows, "one output row of {}", w.rows);
    }
    if let Some(xq) = xq {
        xq.assert_consistent();
        assert_eq!(xq.cols, ws[0].cols, "quantised input width");
    }
    let threads = super::threads();
    let total: usize = ws.iter().map(|w| w.rows).sum();
    let piece = total.div_ceil(threads).next_multiple_of(16);
    type Part<'a> = (usize, std::ops::Range<usize>, &'a mut [f32]);
    let mut tasks: Vec<Vec<Part<'_>>> = (0..total.div_ceil(piece)).map(|_| Vec::new()).collect();
    let mut at = 0; // output rows handed out so far, over all matrices
    for (i, y) in ys.iter_mut().enumerate() {
        let mut rest: &mut [f32] = y;
        let mut r0 = 0;
        while r0 < ws[i].rows {
            let t = at / piece;
            let end = (r0 + (t + 1) * piece - at).min(ws[i].rows);
            let (part, tail) = std::mem::take(&mut rest).split_at_mut(end - r0);
            tasks[t].push((i, r0..end, part));
            rest = tail;
            at += end - r0;
            r0 = end;
        }
    }
    tasks.into_par_iter().for_each(|task| {
        for (i, o, part) in task {
            rows_of(ws[i], x, xq, 1, o, part, super::int_path());
        }
    });
}

/// Output rows `o` of `y = x · wᵀ` for n rows of x into `part` ([n, o.len()]), on `path`.
fn rows_of(
    w: &Int8Matrix,
    x: &[f32],
    xq: Option<&QuantRows>,
    n: usize,
    o: std::ops::Range<usize>,
    part: &mut [f32],
    path: Option<super::IntPath>,
) {
    let ys = part.len() / n;
    match (xq, path) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: xq exists only when isa() found AVX2, FMA and F16C (or matmul_path was asked
        // for a path the CPU has, which implies them), and int_path() or matmul_path checked the
        // path's features on this CPU; callers checked w and xq consistent, o inside w's rows and
        // part holding n rows of o.len().
        (Some(xq), Some(path)) => unsafe { avx2::rows_into(path, w, xq, o, part, ys) },
        _ => portable_rows(w, x, n, o, part, ys),
    }
}

/// The integer kernel's view of x, when this CPU and width have one.
fn quantise(x: &[f32], cols: usize) -> Option<QuantRows> {
    match (isa(), act_block(cols)) {
        (Isa::Avx2, Some(b)) if !x.is_empty() => Some(QuantRows::new(x, cols, b)),
        _ => None,
    }
}

fn matmul_with(
    w: &Int8Matrix,
    x: &[f32],
    xq: Option<&QuantRows>,
    y: &mut [f32],
    path: Option<super::IntPath>,
) {
    w.assert_consistent();
    if let Some(xq) = xq {
        xq.assert_consistent();
        assert_eq!(xq.cols, w.cols, "quantised input width");
    }
    let n = x.len() / w.cols;
    assert_eq!(x.len(), n * w.cols);
    assert_eq!(y.len(), n * w.rows);
    if n == 0 || w.rows == 0 {
        return;
    }
    let rows = |o: std::ops::Range<usize>, part: &mut [f32]| rows_of(w, x, xq, n, o, part, path);
    super::split_rows(w.rows, w.rows * w.cols, n, PAR_ROWS, y, &rows);
}

/// Single-threaded product on a chosen instruction set (tests compare the portable and SIMD paths;
/// `Isa::Avx2` is the AVX2 path, `matmul_on_path` runs the others).
pub fn matmul_on(
    isa: Isa,
    w: &Int8Matrix,
    x: &[f32],
    n: usize,
    o: std::ops::Range<usize>,
    y: &mut [f32],
) {
    match isa {
        Isa::Avx2 => matmul_on_path(super::IntPath::Avx2, w, x, n, o, y),
        Isa::Portable => {
            let ys = check_on(w, x, n, &o, y);
            portable_rows(w, x, n, o, y, ys)
        }
    }
}

/// The preconditions of the single-threaded products; returns y's row stride.
fn check_on(w: &Int8Matrix, x: &[f32], n: usize, o: &std::ops::Range<usize>, y: &[f32]) -> usize {
    assert!(
        n > 0 && x.len() == n * w.cols,
        "x must be {n} rows of {}",
        w.cols
    );
    assert!(o.end <= w.rows, "output rows {o:?} outside {}", w.rows);
    let ys = y.len() / n;
    assert!(
        ys >= o.len(),
        "y rows of {ys} cannot hold {} outputs",
        o.len()
    );
    w.assert_consistent();
    ys
}

/// Single-threaded product on one of the integer kernels (the portable one for widths without an
/// activation block); panics if the CPU lacks it.
pub fn matmul_on_path(
    path: super::IntPath,
    w: &Int8Matrix,
    x: &[f32],
    n: usize,
    o: std::ops::Range<usize>,
    y: &mut [f32],
) {
    let ys = check_on(w, x, n, &o, y);
    assert!(
        path.on_cpu(),
        "{} asked for on a CPU without it",
        path.name()
    );
    match act_block(w.cols) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has the path's features (asserted above); the matrix, x and y were
        // checked by check_on, and QuantRows::new makes n consistent rows of w.cols.
        Some(b) => unsafe { avx2::rows_into(path, w, &QuantRows::new(x, w.cols, b), o, y, ys) },
        _ => portable_rows(w, x, n, o, y, ys),
    }
}

fn portable_rows(
    w: &Int8Matrix,
    x: &[f32],
    n: usize,
    o: std::ops::Range<usize>,
    y: &mut [f32],
    ys: usize,
) {
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

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! Integer kernel: weights widen to i16 and multiply the i16 activations with `vpmaddwd`,
    //! summed exactly in i32 over a block of columns (|lane sum| ≤ 32 · 127 · 32767 < 2^31 for
    //! 256 columns), converted once per block and scaled by the block's activation scale; the
    //! row scale applies at the end.
    //!
    //! The wider paths (`IntPath`) give the same bits. Lane j of the 256-bit sum holds columns
    //! 2j and 2j + 1 of every 16; the 512-bit paths take 32 columns a step, lane j + 8 holding
    //! columns 16 + 2j and 16 + 2j + 1, so adding the high half to the low half at the block's
    //! end leaves every lane the same exact i32 as the 256-bit sum (a block of 16 columns runs on
    //! 256 bits; every longer block is a multiple of 32). VNNI's `vpdpwssd` is `vpmaddwd` and the
    //! add in one, exactly.

    use std::arch::x86_64::*;

    use super::Int8Matrix;
    use crate::kernels::hsum256;
    use crate::kernels::quant::QuantRows;
    use crate::kernels::IntPath;

    /// `IntPath` as a const generic parameter.
    const AVX2: u8 = 0;
    const AVX_VNNI: u8 = 1;
    const AVX512: u8 = 2;
    const AVX512_VNNI: u8 = 3;

    /// `acc + w · x` over 16 columns on 256 bits (pairs of i16 products summed in i32).
    #[inline(always)]
    unsafe fn dot16<const P: u8>(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
        if P == AVX_VNNI {
            _mm256_dpwssd_avx_epi32(acc, w, x)
        } else {
            _mm256_add_epi32(acc, _mm256_madd_epi16(w, x))
        }
    }

    /// `acc + w · x` over 32 columns on 512 bits.
    #[inline(always)]
    unsafe fn dot32<const P: u8>(acc: __m512i, w: __m512i, x: __m512i) -> __m512i {
        if P == AVX512_VNNI {
            _mm512_dpwssd_epi32(acc, w, x)
        } else {
            _mm512_add_epi32(acc, _mm512_madd_epi16(w, x))
        }
    }

    /// NB output rows x NR input rows with register accumulators, on path `P` (inlined into the
    /// path's entry point, which enables its instructions).
    #[inline(always)]
    unsafe fn block<const P: u8, const NB: usize, const NR: usize>(
        w: &Int8Matrix,
        xq: &QuantRows,
        ob: usize,
        r0: usize,
        y: &mut [f32],
        ys: usize,
        y_col: usize,
    ) {
        let mut acc = [[_mm256_setzero_ps(); NR]; NB];
        let bs = xq.block;
        let (wp, xp) = (w.q.as_ptr(), xq.q.as_ptr());
        let wide = P == AVX512 || P == AVX512_VNNI;
        for blk in 0..w.cols / bs {
            let mut ia = [[_mm256_setzero_si256(); NR]; NB];
            let mut c = blk * bs;
            let end = (blk + 1) * bs;
            if wide && c + 32 <= end {
                let mut iw = [[_mm512_setzero_si512(); NR]; NB];
                while c + 32 <= end {
                    for bi in 0..NB {
                        let p = wp.add((ob + bi) * w.cols + c) as *const __m256i;
                        let wv = _mm512_cvtepi8_epi16(_mm256_loadu_si256(p));
                        for ri in 0..NR {
                            let xv = _mm512_loadu_si512(
                                xp.add((r0 + ri) * w.cols + c) as *const __m512i
                            );
                            iw[bi][ri] = dot32::<P>(iw[bi][ri], wv, xv);
                        }
                    }
                    c += 32;
                }
                for bi in 0..NB {
                    for ri in 0..NR {
                        let v = iw[bi][ri];
                        ia[bi][ri] = _mm256_add_epi32(
                            _mm512_castsi512_si256(v),
                            _mm512_extracti64x4_epi64::<1>(v),
                        );
                    }
                }
            }
            while c < end {
                for bi in 0..NB {
                    let p = wp.add((ob + bi) * w.cols + c) as *const __m128i;
                    let wv = _mm256_cvtepi8_epi16(_mm_loadu_si128(p));
                    for ri in 0..NR {
                        let xv =
                            _mm256_loadu_si256(xp.add((r0 + ri) * w.cols + c) as *const __m256i);
                        ia[bi][ri] = dot16::<P>(ia[bi][ri], wv, xv);
                    }
                }
                c += 16;
            }
            for ri in 0..NR {
                let sx = _mm256_set1_ps(*xq.scales(r0 + ri).get_unchecked(blk));
                for bi in 0..NB {
                    acc[bi][ri] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[bi][ri]), sx, acc[bi][ri]);
                }
            }
        }
        for bi in 0..NB {
            let s = w.scales[ob + bi].to_f32();
            for ri in 0..NR {
                y[(r0 + ri) * ys + y_col + bi] = hsum256(acc[bi][ri]) * s;
            }
        }
    }

    /// Output rows `o` for every input row of `xq` into y, on `path`.
    ///
    /// # Safety
    /// The CPU must have what `path` runs on (`IntPath::on_cpu`); `w` consistent
    /// (`Int8Matrix::assert_consistent`), `xq` consistent with `xq.cols == w.cols`,
    /// `o.end <= w.rows`, and `y` at least `xq.n` rows of `ys >= o.len()`.
    pub unsafe fn rows_into(
        path: IntPath,
        w: &Int8Matrix,
        xq: &QuantRows,
        o: std::ops::Range<usize>,
        y: &mut [f32],
        ys: usize,
    ) {
        match path {
            IntPath::Avx2 => rows_avx2(w, xq, o, y, ys),
            IntPath::AvxVnni => rows_avx_vnni(w, xq, o, y, ys),
            IntPath::Avx512 => rows_avx512(w, xq, o, y, ys),
            IntPath::Avx512Vnni => rows_avx512_vnni(w, xq, o, y, ys),
        }
    }

    /// Tiles of four output rows against the input rows two at a time, on path `P`.
    #[inline(always)]
    unsafe fn rows<const P: u8>(
        w: &Int8Matrix,
        xq: &QuantRows,
        o: std::ops::Range<usize>,
        y: &mut [f32],
        ys: usize,
    ) {
        let n = xq.n;
        let mut ob = o.start;
        while ob < o.end {
            // tiles of four output rows; a row pair uses two 2 x 2 blocks (registers)
            let nb = 4.min(o.end - ob);
            let col = ob - o.start;
            let mut r0 = 0;
            while r0 < n {
                let nr = 2.min(n - r0);
                match (nb, nr) {
                    (4, 1) => block::<P, 4, 1>(w, xq, ob, r0, y, ys, col),
                    (4, 2) => {
                        block::<P, 2, 2>(w, xq, ob, r0, y, ys, col);
                        block::<P, 2, 2>(w, xq, ob + 2, r0, y, ys, col + 2);
                    }
                    _ => {
                        for bi in 0..nb {
                            if nr == 2 {
                                block::<P, 1, 2>(w, xq, ob + bi, r0, y, ys, col + bi);
                            } else {
                                block::<P, 1, 1>(w, xq, ob + bi, r0, y, ys, col + bi);
                            }
                        }
                    }
                }
                r0 += nr;
            }
            ob += nb;
        }
    }

    type Rows = unsafe fn(&Int8Matrix, &QuantRows, std::ops::Range<usize>, &mut [f32], usize);

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows_avx2(
        w: &Int8Matrix,
        xq: &QuantRows,
        o: std::ops::Range<usize>,
        y: &mut [f32],
        ys: usize,
    ) {
        rows::<AVX2>(w, xq, o, y, ys)
    }

    #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
    unsafe fn rows_avx_vnni(
        w: &Int8Matrix,
        xq: &QuantRows,
        o: std::ops::Range<usize>,
        y: &mut [f32],
        ys: usize,
    ) {
        rows::<AVX_VNNI>(w, xq, o, y, ys)
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
    unsafe fn rows_avx512(
        w: &Int8Matrix,
        xq: &QuantRows,
        o: std::ops::Range<usize>,
        y: &mut [f32],
        ys: usize,
    ) {
        rows::<AVX512>(w, xq, o, y, ys)
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
    unsafe fn rows_avx512_vnni(
        w: &Int8Matrix,
        xq: &QuantRows,
        o: std::ops::Range<usize>,
        y: &mut [f32],
        ys: usize,
    ) {
        rows::<AVX512_VNNI>(w, xq, o, y, ys)
    }

    // every entry point has the one signature
    const _: [Rows; 4] = [rows_avx2, rows_avx_vnni, rows_avx512, rows_avx512_vnni];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cases;

    fn on_pool<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads);
        pool.build().unwrap().install(f)
    }

    #[test]
    fn one_row_through_shared_matrices_is_split_across_threads_without_changing_bits() {
        // decode's q, k, v, r shapes, then shapes whose pieces cut matrices at odd offsets
        for (shapes, cols) in [(&[256, 64, 64, 128][..], 256), (&[200, 40, 300][..], 256)] {
            let ws: Vec<Int8Matrix> = shapes
                .iter()
                .enumerate()
                .map(|(i, &r)| cases::int8_matrix(r, cols, 70 + i as u64))
                .collect();
            let refs: Vec<&Int8Matrix> = ws.iter().collect();
            let x = cases::activations(cols, 1.0, 80);
            let run = |threads: usize| {
                let mut ys: Vec<Vec<f32>> = shapes.iter().map(|&r| vec![0.0; r]).collect();
                on_pool(threads, || {
                    let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| &mut y[..]).collect();
                    matmul_shared(&refs, &x, &mut outs);
                });
                ys
            };
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            for threads in [1, 2, 3] {
                let ys = run(threads);
                for (i, w) in ws.iter().enumerate() {
                    let mut alone = vec![0.0; w.rows];
                    matmul(w, &x, &mut alone);
                    assert_eq!(
                        bits(&ys[i]),
                        bits(&alone),
                        "{shapes:?} matrix {i}, {threads} threads"
                    );
                }
            }
        }
    }
}
