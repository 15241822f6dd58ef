//! Activations quantised for the integer kernels (FORMAT.md, "Numeric choices"): per input row and
//! block of columns, `x ≈ q · scale` with `q` in −qmax..=qmax, `scale = max|x| / qmax`, rounded to
//! nearest (ties to even). Two levels: the INT8 products take 16-bit activations (`QMAX` = 32767,
//! blocks of up to 256 columns; an element's error is at most `max|x of its block| / 65534`), and
//! the INT4 products 8-bit ones (`QMAX_INT4` = 127, blocks of 32, the weights' group; error at most
//! `max|x| / 254`, as llama.cpp's Q8_0 activations for its Q4_0 weights and OpenVINO's dynamic
//! quantisation of compressed weights' inputs: the INT4 weights' own rounding, up to 1/14 of
//! their group's largest weight, dominates it). Products then multiply the weights by `q` exactly
//! in i32 and scale once per block.
//!
//! A block holding a non-finite value gets scale NaN and q = 0, so the product is NaN: overflow stays
//! visible, as it would in floating point.

/// Quantised rows, `[n, cols]`, with one scale per `block` columns.
#[derive(Clone, Debug, Default)]
pub struct QuantRows {
    pub cols: usize,
    pub block: usize,
    pub n: usize,
    /// q spans ±qmax (`QMAX` or `QMAX_INT4`).
    pub qmax: f32,
    /// [n, cols]
    pub q: Vec<i16>,
    /// [n, cols / block]
    pub scale: Vec<f32>,
    /// [n, cols / block] Σ q over the block (exact in f32: |Σ| < 2^24 for blocks up to 256).
    pub sum: Vec<f32>,
    /// INT4 activations only (`int4`): each row's q as bytes with every pair of blocks (A, B) in
    /// halves as the kernel's nibble masks produce the weights — A0-15 B0-15, A16-31 B16-31 — and
    /// an odd last block as is. Empty otherwise.
    pub pairs: Vec<i8>,
    /// Beside `pairs`, per row and pair of blocks (A, B), 8 f32: A's scale four times then B's
    /// (the INT4 kernel's reduced lanes: one per output row of a tile and block); for an odd last
    /// block, whose sums the kernel leaves split across both halves, its scale eight times.
    pub pair_scale: Vec<f32>,
    /// Beside `pairs`, per row and pair, 8 i32: the zero-point terms −8 · Σq of A four times then
    /// of B, which the kernel adds to each block's integer sums; for an odd last block, its term
    /// four times then four zeros.
    pub pair_zero: Vec<i32>,
}

/// Largest quantised value of the INT8 products' activations.
pub const QMAX: f32 = 32767.0;
/// Largest quantised value of the INT4 products' activations.
pub const QMAX_INT4: f32 = 127.0;
/// The INT4 activations' block: the weights' group.
const INT4_BLOCK: usize = 32;

impl QuantRows {
    /// 16-bit activations for the INT8 products: `x` ([n, cols]) in blocks of `block` columns
    /// (block divides cols, at most 256).
    pub fn new(x: &[f32], cols: usize, block: usize) -> Self {
        let mut qr = QuantRows::default();
        qr.fill(x, cols, block, QMAX);
        qr
    }

    /// 8-bit activations for the INT4 products: blocks of 32, with the kernel's paired layout.
    pub fn int4(x: &[f32], cols: usize) -> Self {
        let mut qr = QuantRows::default();
        qr.fill(x, cols, INT4_BLOCK, QMAX_INT4);
        qr.lay_out_pairs();
        qr
    }

    /// `int4` into this buffer, reusing its allocations (the same values and layout).
    pub fn refill_int4(&mut self, x: &[f32], cols: usize) {
        self.fill(x, cols, INT4_BLOCK, QMAX_INT4);
        self.lay_out_pairs();
    }

    /// Quantise into this buffer with q spanning ±qmax (reuses its allocations).
    fn fill(&mut self, x: &[f32], cols: usize, block: usize, qmax: f32) {
        assert!(cols > 0 && block > 0 && block <= 256 && cols.is_multiple_of(block));
        assert_eq!(x.len() % cols, 0);
        let n = x.len() / cols;
        let blocks = cols / block;
        self.cols = cols;
        self.block = block;
        self.n = n;
        self.qmax = qmax;
        self.q.resize(n * cols, 0);
        self.scale.resize(n * blocks, 0.0);
        self.sum.resize(n * blocks, 0.0);
        for (b, xs) in x.chunks_exact(block).enumerate() {
            let qs = &mut self.q[b * block..(b + 1) * block];
            let (s, sum) = quantize_block(xs, qs, qmax);
            self.scale[b] = s;
            self.sum[b] = sum;
        }
        self.pairs.clear();
        self.pair_scale.clear();
        self.pair_zero.clear();
    }

    /// Fill `pairs`, `pair_scale` and `pair_zero` from `q`, `scale` and `sum` (8-bit, blocks of 32).
    fn lay_out_pairs(&mut self) {
        assert!(self.block == INT4_BLOCK && self.qmax == QMAX_INT4);
        self.pairs.clear();
        self.pairs.reserve(self.n * self.cols);
        self.pair_scale.clear();
        self.pair_zero.clear();
        let blocks = self.cols / INT4_BLOCK;
        self.pair_scale.reserve(self.n * self.pair_stride());
        self.pair_zero.reserve(self.n * self.pair_stride());
        for (scales, sums) in self.scale.chunks(blocks).zip(self.sum.chunks(blocks)) {
            for (s, z) in scales.chunks(2).zip(sums.chunks(2)) {
                let zero = |k: usize| -8 * z[k] as i32;
                let (sa, sb) = (s[0], *s.get(1).unwrap_or(&s[0]));
                let (za, zb) = (zero(0), if s.len() == 2 { zero(1) } else { 0 });
                self.pair_scale
                    .extend_from_slice(&[sa, sa, sa, sa, sb, sb, sb, sb]);
                self.pair_zero
                    .extend_from_slice(&[za, za, za, za, zb, zb, zb, zb]);
            }
        }
        // |q| <= 127: the casts are exact
        let byte = |v: &i16| *v as i8;
        for row in self.q.chunks_exact(self.cols) {
            let mut groups = row.chunks_exact(2 * INT4_BLOCK);
            for pair in &mut groups {
                let (a, b) = pair.split_at(INT4_BLOCK);
                for half in [0..16, 16..32] {
                    self.pairs.extend(a[half.clone()].iter().map(byte));
                    self.pairs.extend(b[half].iter().map(byte));
                }
            }
            self.pairs.extend(groups.remainder().iter().map(byte));
        }
    }

    /// 8-bit activations with `pairs`, `pair_scale` and `pair_zero` for every row (the AVX2 INT4
    /// kernel may read them).
    pub fn has_pairs(&self) -> bool {
        self.block == INT4_BLOCK
            && self.qmax == QMAX_INT4
            && self.pairs.len() >= self.n * self.cols
            && self.pair_scale.len() >= self.n * self.pair_stride()
            && self.pair_zero.len() >= self.n * self.pair_stride()
    }

    /// Values per row in `pair_scale` and `pair_zero`.
    pub fn pair_stride(&self) -> usize {
        (self.cols / INT4_BLOCK).div_ceil(2) * 8
    }

    /// The quantised values of row r.
    pub fn row(&self, r: usize) -> &[i16] {
        &self.q[r * self.cols..(r + 1) * self.cols]
    }

    /// Panics unless the buffers hold `n` rows of `cols` (the fields are public, and the SIMD
    /// kernels read them through raw pointers on the strength of this; the INT4 kernels' layouts
    /// is checked by `has_pairs` where it is dispatched).
    pub fn assert_consistent(&self) {
        assert!(
            self.block > 0 && self.cols.is_multiple_of(self.block),
            "block {} does not divide cols {}",
            self.block,
            self.cols
        );
        let (values, blocks) = (self.n * self.cols, self.n * self.cols / self.block);
        assert!(
            self.q.len() >= values && self.scale.len() >= blocks && self.sum.len() >= blocks,
            "quantised rows shorter than {} x {}",
            self.n,
            self.cols
        );
    }

    /// Block scales of row r.
    pub fn scales(&self, r: usize) -> &[f32] {
        let b = self.cols / self.block;
        &self.scale[r * b..(r + 1) * b]
    }

    /// Block sums of row r.
    pub fn sums(&self, r: usize) -> &[f32] {
        let b = self.cols / self.block;
        &self.sum[r * b..(r + 1) * b]
    }

    /// The value an element stands for (tests).
    pub fn value(&self, r: usize, c: usize) -> f32 {
        self.row(r)[c] as f32 * self.scales(r)[c / self.block]
    }

    /// Every element's value, [n, cols] (the portable fallbacks and tests).
    pub fn values(&self) -> Vec<f32> {
        (0..self.n * self.cols)
            .map(|i| self.value(i / self.cols, i % self.cols))
            .collect()
    }
}

/// Quantise one block to ±qmax; returns (scale, Σ q).
fn quantize_block(x: &[f32], q: &mut [i16], qmax: f32) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    if x.len().is_multiple_of(8) && super::isa() == super::Isa::Avx2 {
        // SAFETY: the CPU has AVX2 (checked by isa()); slices are equal-length multiples of 8.
        return unsafe { avx2::quantize_block(x, q, qmax) };
    }
    quantize_block_portable(x, q, qmax)
}

fn quantize_block_portable(x: &[f32], q: &mut [i16], qmax: f32) -> (f32, f32) {
    let mut m = 0.0f32;
    let mut finite = true;
    for &v in x {
        finite &= v.is_finite();
        m = m.max(v.abs());
    }
    if !finite {
        q.iter_mut().for_each(|v| *v = 0);
        return (f32::NAN, 0.0);
    }
    if m == 0.0 {
        q.iter_mut().for_each(|v| *v = 0);
        return (0.0, 0.0);
    }
    let inv = qmax / m;
    let mut sum = 0i32;
    for (d, &v) in q.iter_mut().zip(x) {
        let r = (v * inv).round_ties_even().clamp(-qmax, qmax) as i16;
        *d = r;
        sum += r as i32;
    }
    (m / qmax, sum as f32)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Same values as the portable version: cvtps2dq rounds to nearest even (default MXCSR).
    ///
    /// # Safety
    /// The CPU must have AVX2; `x` and `q` of equal length, a multiple of 8.
    #[target_feature(enable = "avx2")]
    pub unsafe fn quantize_block(x: &[f32], q: &mut [i16], qmax: f32) -> (f32, f32) {
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let mut mx = _mm256_setzero_ps();
        let mut bad = _mm256_setzero_ps();
        for c in x.chunks_exact(8) {
            let v = _mm256_loadu_ps(c.as_ptr());
            // v − v is NaN exactly for ±inf and NaN
            bad = _mm256_or_ps(
                bad,
                _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_sub_ps(v, v), _CMP_UNORD_Q),
            );
            mx = _mm256_max_ps(mx, _mm256_and_ps(v, abs_mask));
        }
        if _mm256_movemask_ps(bad) != 0 {
            q.iter_mut().for_each(|v| *v = 0);
            return (f32::NAN, 0.0);
        }
        let mut lanes = [0.0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), mx);
        let m = lanes.iter().fold(0.0f32, |a, &b| a.max(b));
        if m == 0.0 {
            q.iter_mut().for_each(|v| *v = 0);
            return (0.0, 0.0);
        }
        let inv = _mm256_set1_ps(qmax / m);
        let (lo, hi) = (_mm256_set1_ps(-qmax), _mm256_set1_ps(qmax));
        let mut sum = _mm256_setzero_si256();
        for (c, d) in x.chunks_exact(8).zip(q.chunks_exact_mut(8)) {
            let v = _mm256_mul_ps(_mm256_loadu_ps(c.as_ptr()), inv);
            let r = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
            sum = _mm256_add_epi32(sum, r);
            let packed = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
            _mm_storeu_si128(d.as_mut_ptr() as *mut __m128i, packed);
        }
        let mut s = [0i32; 8];
        _mm256_storeu_si256(s.as_mut_ptr() as *mut __m256i, sum);
        (m / qmax, s.iter().sum::<i32>() as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_within_half_a_step_of_the_block_maximum() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.173)
            .collect();
        let q = QuantRows::new(&x, 64, 32);
        for (c, &v) in x.iter().enumerate() {
            let m = x[c / 32 * 32..c / 32 * 32 + 32]
                .iter()
                .fold(0.0f32, |a, v| a.max(v.abs()));
            assert!((q.value(0, c) - v).abs() <= m / 65534.0 * 1.001, "{c}");
        }
        let s: i32 = q.row(0)[..32].iter().map(|&v| v as i32).sum();
        let mut portable = vec![0i16; 64];
        for b in 0..2 {
            quantize_block_portable(
                &x[b * 32..(b + 1) * 32],
                &mut portable[b * 32..(b + 1) * 32],
                QMAX,
            );
        }
        assert_eq!(portable, q.row(0), "SIMD and portable quantisers agree");
        assert_eq!(q.sums(0)[0], s as f32);
        // the block maximum is exact
        assert!(q.row(0).iter().any(|&v| v.unsigned_abs() == 32767));
    }

    #[test]
    fn int4_activations_are_bytes_within_half_a_step_laid_out_in_pairs() {
        // three blocks: one pair and a lone last block
        let x: Vec<f32> = (0..96)
            .map(|i| ((i * 41 % 29) as f32 - 14.0) * 0.071)
            .collect();
        let q = QuantRows::int4(&x, 96);
        assert!(q.has_pairs());
        for (c, &v) in x.iter().enumerate() {
            let m = x[c / 32 * 32..c / 32 * 32 + 32]
                .iter()
                .fold(0.0f32, |a, v| a.max(v.abs()));
            assert!((q.value(0, c) - v).abs() <= m / 254.0 * 1.001, "{c}");
            assert!(q.row(0)[c].abs() <= 127);
        }
        let mut portable = vec![0i16; 96];
        for b in 0..3 {
            let r = b * 32..(b + 1) * 32;
            quantize_block_portable(&x[r.clone()], &mut portable[r], QMAX_INT4);
        }
        assert_eq!(portable, q.row(0), "SIMD and portable quantisers agree");
        let r = q.row(0);
        let at = |c: usize| r[c] as i8;
        assert_eq!(q.pairs[0], at(0));
        assert_eq!(q.pairs[16], at(32));
        assert_eq!(q.pairs[32], at(16));
        assert_eq!(q.pairs[48], at(48));
        assert_eq!(
            q.pairs[64..96],
            r[64..96].iter().map(|&v| v as i8).collect::<Vec<_>>()[..]
        );
        let z = |b: usize| {
            -8 * r[b * 32..b * 32 + 32]
                .iter()
                .map(|&v| v as i32)
                .sum::<i32>()
        };
        assert_eq!(
            q.pair_zero[..8],
            [z(0), z(0), z(0), z(0), z(1), z(1), z(1), z(1)]
        );
        assert_eq!(q.pair_zero[8..], [z(2), z(2), z(2), z(2), 0, 0, 0, 0]);
        assert_eq!(q.pair_scale[8..], [q.scales(0)[2]; 8]);
    }

    #[test]
    fn zero_and_non_finite_blocks() {
        let mut x = vec![0.0f32; 64];
        x[40] = f32::INFINITY;
        let q = QuantRows::new(&x, 32, 32);
        assert_eq!(q.scales(0)[0], 0.0);
        assert!(q.scales(1)[0].is_nan());
        assert!(q.row(1).iter().all(|&v| v == 0));
    }
}
