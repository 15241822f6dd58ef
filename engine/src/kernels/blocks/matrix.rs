//! `BlockMatrix`: a [rows, cols] weight matrix in one of ggml's formats, row-major as GGUF files
//! store it (row r is cols / block blocks), and its products with f32 activations in the
//! arithmetic of llama.cpp's CPU backend on x86 AVX2:
//!
//! ```text
//! y[i, o] = vec_dot(W[o, :], from_float(x[i, :]))     (ggml_compute_forward_mul_mat: one
//!                                                       vec_dot per output over the whole row)
//! ```
//!
//! where `from_float` converts a row to the format's vec_dot type (`acts`) and `vec_dot` is the
//! format's dot (`legacy`, `kquants`, `floats`; SIMD twins in `avx2`, `avx2_k`, `avx2_f`). Each (input row, output)
//! value is one such dot, computed by one thread with the same operation sequence whatever the
//! batch, the tile it falls in or the thread count: a row's result is bit-identical alone or
//! batched, on one thread or many, and (for the formats `avx2` covers) on either instruction set.
//!
//! Both instruction sets quantise the activations: these products exist to agree with llama.cpp,
//! so `kernels::force_portable` changes the speed here, never the numbers.

use std::ops::Range;

use super::acts::QuantizedActs;
use super::format::BlockFormat;
pub use super::stored::BlockMatrix;
use super::{floats, kquants, legacy};
use crate::kernels::{isa, Isa};

/// One row of blocks against one activation row.
type Dot = fn(&[u8], super::acts::ActRow<'_>) -> f32;

/// Output rows per thread task (`kernels::split_rows` shrinks it for small products).
const PAR_ROWS: usize = 64;

/// Input rows a task takes at least when a product is split by input rows: enough that a task's
/// products outweigh its read of the matrix (a few multiply-adds per weight byte keep the integer
/// kernels compute-bound).
const ROW_TASK_MIN: usize = 32;

/// The largest matrix split by input rows: every task reads all of it, so it must stay in a
/// core's cache (2 MiB of L2 on the hosts we measure); larger ones split by output rows.
const ROW_SPLIT_MAX_BYTES: usize = 2 << 20;

impl BlockMatrix {
    /// `y = x · Wᵀ` for x [n, cols] and y [n, rows], with ggml's arithmetic (module docs).
    pub fn matmul(&self, x: &[f32], y: &mut [f32]) {
        self.matmul_quantized(&QuantizedActs::for_weights(self.format, x, self.cols), y)
    }

    /// The product from activations already converted (`QuantizedActs::for_weights`, shared by
    /// the matrices of one vec_dot type), split over the thread pool when it is big enough.
    pub fn matmul_quantized(&self, xq: &QuantizedActs, y: &mut [f32]) {
        self.check(xq, y);
        let isa = self.isa_for(isa());
        let n = xq.n();
        if let Some(per) = self.input_rows_per_task(n) {
            use rayon::prelude::*;
            y.par_chunks_mut(per * self.rows)
                .enumerate()
                .for_each(|(t, part)| {
                    let r = t * per..t * per + part.len() / self.rows;
                    self.rows_on(isa, &xq.rows_range(r), 0..self.rows, part, self.rows);
                });
            return;
        }
        crate::kernels::split_rows(
            self.rows,
            self.rows * self.cols,
            n,
            PAR_ROWS,
            y,
            &|o, part| {
                let ys = part.len() / n;
                self.rows_on(isa, xq, o, part, ys)
            },
        );
    }

    /// Input rows per task when a product is split by its input rows: a batch of at least
    /// `ROW_TASK_MIN` rows per thread against a matrix that stays in a core's cache, in a product
    /// big enough to split at all (`kernels::PAR_MIN_WEIGHTS`). Each task then writes whole rows
    /// of y in place and reads the whole matrix (from cache), where a split by output rows
    /// (`kernels::split_rows`) has every task read every input row and write a private buffer to
    /// be gathered (docs/RESULTS.md, "Host C, prefill split by input rows").
    /// Two to four tasks a thread, a multiple of eight rows each (the AVX-512 tile). None: split
    /// by output rows, or not at all.
    fn input_rows_per_task(&self, n: usize) -> Option<usize> {
        let threads = crate::kernels::threads();
        let fits = self.bytes.len() <= ROW_SPLIT_MAX_BYTES;
        let big = (self.rows * self.cols).saturating_mul(n) >= crate::kernels::PAR_MIN_WEIGHTS;
        if threads < 2 || !fits || !big || n < ROW_TASK_MIN * threads {
            return None;
        }
        let tasks = threads * (n / (ROW_TASK_MIN * threads)).min(4);
        Some(n.div_ceil(tasks).next_multiple_of(8))
    }

    /// The product on the calling thread with a chosen instruction set (tests compare them);
    /// `Isa::Avx2` panics on a CPU without it.
    pub fn matmul_on(&self, isa: Isa, x: &[f32], y: &mut [f32]) {
        if isa == Isa::Avx2 {
            assert!(
                crate::kernels::cpu_has_avx2(),
                "Isa::Avx2 asked for on a CPU without it"
            );
        }
        let xq = QuantizedActs::for_weights(self.format, x, self.cols);
        self.check(&xq, y);
        self.rows_on(self.isa_for(isa), &xq, 0..self.rows, y, self.rows);
    }

    /// The portable kernel, ggml's AVX2 arithmetic in scalar code (the reference twin).
    pub fn matmul_reference(&self, x: &[f32], y: &mut [f32]) {
        self.matmul_on(Isa::Portable, x, y)
    }

    /// Whether this format has a SIMD kernel (`avx2`); the others run the portable one.
    pub fn has_simd(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            super::avx2::covers(self.format)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    fn isa_for(&self, isa: Isa) -> Isa {
        if self.has_simd() {
            isa
        } else {
            Isa::Portable
        }
    }

    fn check(&self, xq: &QuantizedActs, y: &[f32]) {
        // the shape fields are public: what `new` checked must still hold before the SIMD
        // kernels read the bytes through pointers
        assert!(
            self.format.computable()
                && self.cols > 0
                && self.cols.is_multiple_of(self.format.block())
                && self.rows.checked_mul(self.row_bytes()) == Some(self.bytes.len()),
            "{} matrix [{}, {}] does not match its {} bytes",
            self.format,
            self.rows,
            self.cols,
            self.bytes.len()
        );
        assert_eq!(
            Some(xq.format()),
            self.format.vec_dot_type(),
            "{} weights take {:?} activations",
            self.format,
            self.format.vec_dot_type()
        );
        assert_eq!(
            xq.cols(),
            self.cols,
            "activation rows of {} values",
            self.cols
        );
        assert_eq!(
            y.len(),
            xq.n() * self.rows,
            "y must be {} rows of {}",
            xq.n(),
            self.rows
        );
    }

    /// Outputs `o` for every input row into `y[r * ys + (o − o.start)]`.
    fn rows_on(&self, isa: Isa, xq: &QuantizedActs, o: Range<usize>, y: &mut [f32], ys: usize) {
        assert!(
            o.end <= self.rows && ys >= o.len(),
            "outputs {o:?} of {}",
            self.rows
        );
        assert!(
            xq.n() == 0 || y.len() >= (xq.n() - 1) * ys + o.len(),
            "y of {} cannot hold {} rows of stride {ys}",
            y.len(),
            xq.n()
        );
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx2 && crate::kernels::cpu_has_avx2() {
            // SAFETY: the CPU has AVX2, FMA and F16C (checked just now); `new` checked that the
            // bytes hold rows · row_bytes, `check` that xq is this matrix's vec_dot type with its
            // cols, and the assert above that o lies in the rows and y holds n rows of stride ys.
            if unsafe { super::avx2::rows(self, xq, o.clone(), y, ys) } {
                return;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = isa;
        let dot = self.portable_dot();
        for (oi, orow) in o.enumerate() {
            let w = self.row(orow);
            for r in 0..xq.n() {
                y[r * ys + oi] = dot(w, xq.row(r));
            }
        }
    }

    fn portable_dot(&self) -> Dot {
        match self.format {
            BlockFormat::Q4_0 => legacy::dot_q4_0,
            BlockFormat::Q4_1 => legacy::dot_q4_1,
            BlockFormat::Q8_0 => legacy::dot_q8_0,
            BlockFormat::Q4K => kquants::dot_q4_k,
            BlockFormat::Q5K => kquants::dot_q5_k,
            BlockFormat::Q6K => kquants::dot_q6_k,
            BlockFormat::F16 => floats::dot_f16,
            BlockFormat::Bf16 => floats::dot_bf16,
            _ => floats::dot_f32,
        }
    }
}

/// `ys[i] = x · ms[i]ᵀ` for matrices sharing their input (q, k and v projections): the
/// activations are converted once per vec_dot type. Same bits as one `matmul` per matrix.
pub fn matmul_shared(ms: &[&BlockMatrix], x: &[f32], ys: &mut [&mut [f32]]) {
    assert_eq!(ms.len(), ys.len(), "one output per matrix");
    let mut converted: Vec<QuantizedActs> = Vec::new();
    for (m, y) in ms.iter().zip(ys.iter_mut()) {
        let t = m.format.vec_dot_type();
        let at = match converted
            .iter()
            .position(|q| Some(q.format()) == t && q.cols() == m.cols)
        {
            Some(i) => i,
            None => {
                converted.push(QuantizedActs::for_weights(m.format, x, m.cols));
                converted.len() - 1
            }
        };
        m.matmul_quantized(&converted[at], y);
    }
}

#[cfg(test)]
mod tests {
    use super::super::encode::random_matrix;
    use super::super::format::BlockFormat;

    /// The split `tests/block_parity.rs` relies on to cross both paths: on two threads, 71 rows
    /// against its 576 x 1536 matrix go by input rows (40 and 31), 7 rows by output rows, and a
    /// matrix past the cache bound by output rows whatever the batch.
    #[test]
    fn many_rows_against_a_cached_matrix_split_by_input_rows() {
        let m = random_matrix(BlockFormat::Q4_1, 576, 1536, 1).unwrap();
        let big = random_matrix(BlockFormat::Q8_0, 2048, 1536, 2).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| {
            assert_eq!(m.input_rows_per_task(71), Some(40));
            assert_eq!(m.input_rows_per_task(512), Some(64));
            assert_eq!(m.input_rows_per_task(7), None);
            assert_eq!(big.input_rows_per_task(512), None);
        });
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        one.install(|| assert_eq!(m.input_rows_per_task(512), None));
    }
}
