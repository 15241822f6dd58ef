//! Activations as ggml's CPU backend hands them to a dot product: each input row converted to the
//! weight format's vec_dot type (`BlockFormat::vec_dot_type`) by that type's `from_float` on x86
//! (`ggml-cpu/arch/x86/quants.c`, `ggml-cpu.c`), value for value:
//!
//! - **Q8_0** (`quantize_row_q8_0`, AVX path), per 32: `amax = max |x|`, `d = amax / 127` in f32,
//!   stored as f16 (round to nearest even); `id = 127 / amax` (0 when amax is 0), **not** 1 / d;
//!   `q = x · id` rounded to nearest, ties to even (`_mm256_round_ps`), converted and packed with
//!   saturation (a NaN or huge product becomes −128).
//! - **Q8_1** (`quantize_row_q8_1`): as Q8_0, plus `s = d · Σq` with the f32 d, stored as f16.
//! - **Q8_K** (`quantize_row_q8_K`, the reference code on x86), per 256: `max` the first element of
//!   largest |x|, `iscale = −127 / max`, `q = min(127, nearest(iscale · x))` (ties to even),
//!   `d = 1 / iscale` in f32 (all zero when max is 0), and `bsums`: the sums of each 16 q.
//! - **F16**: each value rounded to f16 (F16C, ties to even); **BF16**: ggml's
//!   `GGML_FP32_TO_BF16` (ties to even, NaN made quiet); **F32**: as is.
//!
//! The scales are kept as the f32 values of their stored f16 (exact), the float types as the f32
//! values of the rounded numbers. Owns the quantised buffers; knows nothing of weights.

use half::f16;

use super::format::BlockFormat;

/// Input rows quantised for one vec_dot type, reusable by every matrix of that type.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedActs {
    /// The vec_dot type: Q8_0, Q8_1, Q8_K, F16, BF16 or F32.
    format: BlockFormat,
    n: usize,
    cols: usize,
    /// [n, cols] quantised values (Q8_*).
    q: Vec<i8>,
    /// [n, cols / block] scales: the f16 value (Q8_0, Q8_1) or the f32 d (Q8_K).
    d: Vec<f32>,
    /// [n, cols / 32] Q8_1's `d · Σq` as stored (f16 value).
    s: Vec<f32>,
    /// [n, cols / 16] Q8_K's sums of each 16 quantised values.
    bsums: Vec<i16>,
    /// [n, cols] the rounded values (F16, BF16, F32).
    v: Vec<f32>,
    /// Some 8-bit value is −128 (only NaN or infinite input gives one).
    min_byte: bool,
}

/// One input row of a `QuantizedActs`, as the dot products read it.
#[derive(Clone, Copy, Debug)]
pub struct ActRow<'a> {
    pub q: &'a [i8],
    pub d: &'a [f32],
    pub s: &'a [f32],
    pub bsums: &'a [i16],
    pub v: &'a [f32],
}

impl QuantizedActs {
    /// `x` ([n, cols] row-major) converted to the vec_dot type `format`. Panics unless `format` is
    /// one, `cols` a whole number of its blocks and `x` whole rows.
    pub fn new(format: BlockFormat, x: &[f32], cols: usize) -> Self {
        use BlockFormat::*;
        assert!(
            matches!(format, Q8_0 | Q8_1 | Q8K | F16 | Bf16 | F32),
            "{format} is not a vec_dot type"
        );
        let block = format.block();
        assert!(
            cols > 0 && cols.is_multiple_of(block),
            "{cols} columns are not whole {format} blocks of {block}"
        );
        assert!(
            x.len().is_multiple_of(cols),
            "x of {} values is not rows of {cols}",
            x.len()
        );
        let n = x.len() / cols;
        let mut a = QuantizedActs {
            format,
            n,
            cols,
            q: Vec::new(),
            d: Vec::new(),
            s: Vec::new(),
            bsums: Vec::new(),
            v: Vec::new(),
            min_byte: false,
        };
        match format {
            Q8_0 | Q8_1 | Q8K => quantize(&mut a, x),
            F16 => a.v = x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
            Bf16 => a.v = x.iter().map(|&v| bf16_value(round_bf16(v))).collect(),
            _ => a.v = x.to_vec(),
        }
        a
    }

    /// The activations for weights of `weights` format (its vec_dot type); panics when the engine
    /// does not compute with that format.
    pub fn for_weights(weights: BlockFormat, x: &[f32], cols: usize) -> Self {
        match weights.vec_dot_type() {
            Some(t) => QuantizedActs::new(t, x, cols),
            None => panic!("{weights} has no vec_dot type the engine computes with"),
        }
    }

    /// The vec_dot type (Q8_0, Q8_1, Q8_K, F16, BF16 or F32).
    /// Whether some 8-bit value is −128, which the quantisers give only for NaN or infinite input
    /// (`avx512`'s products leave such batches to `avx2`).
    pub fn has_min_byte(&self) -> bool {
        self.min_byte
    }

    pub fn format(&self) -> BlockFormat {
        self.format
    }

    /// Input rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Values per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Input row `r`.
    pub fn row(&self, r: usize) -> ActRow<'_> {
        let blocks = self.cols / self.format.block();
        let r = r..r + 1;
        ActRow {
            q: rows_of(&self.q, &r, self.cols),
            d: rows_of(&self.d, &r, blocks),
            s: rows_of(&self.s, &r, blocks),
            bsums: rows_of(&self.bsums, &r, self.cols / 16),
            v: rows_of(&self.v, &r, self.cols),
        }
    }

    /// Rows `r` as activations of their own (copied), for a product split by input rows. Keeps
    /// the whole batch's `has_min_byte`: true sends the rows to the path that takes any byte.
    pub fn rows_range(&self, r: std::ops::Range<usize>) -> QuantizedActs {
        assert!(r.end <= self.n, "rows {r:?} of {}", self.n);
        let blocks = self.cols / self.format.block();
        QuantizedActs {
            format: self.format,
            n: r.len(),
            cols: self.cols,
            q: rows_of(&self.q, &r, self.cols).to_vec(),
            d: rows_of(&self.d, &r, blocks).to_vec(),
            s: rows_of(&self.s, &r, blocks).to_vec(),
            bsums: rows_of(&self.bsums, &r, self.cols / 16).to_vec(),
            v: rows_of(&self.v, &r, self.cols).to_vec(),
            min_byte: self.min_byte,
        }
    }

    /// The rows `rows` (in that order, repeats allowed) as activations of their own (copied): what
    /// converting those rows of the input would give, since every type converts a row on its own.
    /// Keeps the whole batch's `has_min_byte`, as `rows_range` does.
    pub fn gather(&self, rows: &[usize]) -> QuantizedActs {
        let blocks = self.cols / self.format.block();
        QuantizedActs {
            format: self.format,
            n: rows.len(),
            cols: self.cols,
            q: pick_rows(&self.q, rows, self.cols),
            d: pick_rows(&self.d, rows, blocks),
            s: pick_rows(&self.s, rows, blocks),
            bsums: pick_rows(&self.bsums, rows, self.cols / 16),
            v: pick_rows(&self.v, rows, self.cols),
            min_byte: self.min_byte,
        }
    }

    /// The whole buffers of all rows (each empty when the type has none), for kernels that walk
    /// several rows through pointers.
    pub(crate) fn all_rows(&self) -> ActRow<'_> {
        ActRow {
            q: &self.q,
            d: &self.d,
            s: &self.s,
            bsums: &self.bsums,
            v: &self.v,
        }
    }

    /// The rows in ggml's block bytes of the vec_dot type (`block_q8_0`, `block_q8_1`,
    /// `block_q8_K`, f16, bf16 or f32 values, little-endian), for comparing with ggml itself.
    pub fn to_ggml_bytes(&self) -> Vec<u8> {
        use BlockFormat::*;
        let mut out = Vec::new();
        let f16_bytes = |v: f32| f16::from_f32(v).to_bits().to_le_bytes();
        match self.format {
            Q8_0 | Q8_1 => {
                for b in 0..self.q.len() / 32 {
                    out.extend(f16_bytes(self.d[b]));
                    if self.format == Q8_1 {
                        out.extend(f16_bytes(self.s[b]));
                    }
                    out.extend(self.q[b * 32..(b + 1) * 32].iter().map(|&q| q as u8));
                }
            }
            Q8K => {
                for b in 0..self.q.len() / 256 {
                    out.extend(self.d[b].to_le_bytes());
                    out.extend(self.q[b * 256..(b + 1) * 256].iter().map(|&q| q as u8));
                    for g in 0..16 {
                        out.extend(self.bsums[b * 16 + g].to_le_bytes());
                    }
                }
            }
            F16 => self.v.iter().for_each(|&v| out.extend(f16_bytes(v))),
            Bf16 => self
                .v
                .iter()
                .for_each(|&v| out.extend(((v.to_bits() >> 16) as u16).to_le_bytes())),
            _ => self.v.iter().for_each(|&v| out.extend(v.to_le_bytes())),
        }
        out
    }

    /// The value each activation stands for in the product (`d · q`, or the rounded value), for
    /// tests and error bounds.
    pub fn values(&self) -> Vec<f32> {
        if self.v.is_empty() {
            let block = self.format.block();
            self.q
                .iter()
                .enumerate()
                .map(|(i, &q)| self.d[i / block] * q as f32)
                .collect()
        } else {
            self.v.clone()
        }
    }
}

/// Rows `rows` of `v` ([n, per_row]) one after another (an empty buffer, a type without it,
/// stays empty).
fn pick_rows<T: Copy>(v: &[T], rows: &[usize], per_row: usize) -> Vec<T> {
    if v.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(rows.len() * per_row);
    for &r in rows {
        out.extend_from_slice(&v[r * per_row..(r + 1) * per_row]);
    }
    out
}

/// Rows `r` of a buffer of `per_row` values a row (an empty buffer, a type without it, stays
/// empty).
fn rows_of<'a, T>(v: &'a [T], r: &std::ops::Range<usize>, per_row: usize) -> &'a [T] {
    if v.is_empty() {
        v
    } else {
        &v[r.start * per_row..r.end * per_row]
    }
}

/// The 8-bit vec_dot types' conversion of every row into `a` (its format set): compiled for
/// AVX2 where the CPU has it, so that rounding is one instruction rather than a library call
/// (`round_ties_even` either way: the same bits).
fn quantize(a: &mut QuantizedActs, x: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::cpu_has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked just now).
        return unsafe { quantize_avx2(a, x) };
    }
    quantize_body(a, x, quantize_q8_block)
}

/// `quantize` compiled for AVX2.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_avx2(a: &mut QuantizedActs, x: &[f32]) {
    // SAFETY: the caller's CPU has AVX2 (this function's contract)
    quantize_body(a, x, |xb, qb| unsafe { q8_block_avx2(xb, qb) })
}

#[inline(always)]
fn quantize_body(
    a: &mut QuantizedActs,
    x: &[f32],
    q8_block: impl Fn(&[f32], &mut [i8]) -> (f32, i32),
) {
    use BlockFormat::*;
    let format = a.format;
    match format {
        Q8_0 | Q8_1 => {
            a.q = vec![0; x.len()];
            a.d = vec![0.0; x.len() / 32];
            if format == Q8_1 {
                a.s = vec![0.0; x.len() / 32];
            }
            for (b, xb) in x.chunks_exact(32).enumerate() {
                let qb = &mut a.q[b * 32..(b + 1) * 32];
                let (d, sum) = q8_block(xb, qb);
                a.d[b] = f16::from_f32(d).to_f32();
                if format == Q8_1 {
                    a.s[b] = f16::from_f32(d * sum as f32).to_f32();
                }
            }
            a.min_byte = a.q.contains(&i8::MIN);
        }
        Q8K => {
            a.q = vec![0; x.len()];
            a.d = vec![0.0; x.len() / 256];
            a.bsums = vec![0; x.len() / 16];
            for (b, xb) in x.chunks_exact(256).enumerate() {
                let qb = &mut a.q[b * 256..(b + 1) * 256];
                a.d[b] = quantize_q8k_block(xb, qb);
                for (g, qg) in qb.chunks_exact(16).enumerate() {
                    a.bsums[b * 16 + g] = qg.iter().map(|&v| v as i16).sum();
                }
            }
        }
        _ => unreachable!("{format} is not an 8-bit vec_dot type"),
    }
}

/// One block of 32 as `quantize_row_q8_0`/`_q8_1` do on AVX: returns the f32 `d` and `Σq`.
#[inline(always)]
fn quantize_q8_block(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (qv, &v) in q.iter_mut().zip(x) {
        *qv = cvt_pack_i8(v * id);
        sum += *qv as i32;
    }
    (d, sum)
}

/// `quantize_q8_block` in AVX2, as ggml's `quantize_row_q8_0`/`_q8_1` compute it: the same
/// largest magnitude (`max(|x|, m)` ignores a NaN as `f32::max` does), the same scale, rounding
/// and saturating packs, so the same bytes, `d` and sum.
///
/// # Safety
/// The CPU has AVX2; `x` and `q` hold 32 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn q8_block_avx2(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    use std::arch::x86_64::*;
    assert!(x.len() == 32 && q.len() == 32, "one block of 32");
    let v: [__m256; 4] = std::array::from_fn(|k| _mm256_loadu_ps(x.as_ptr().add(8 * k)));
    let sign = _mm256_set1_ps(-0.0);
    let mut m = _mm256_setzero_ps();
    for vk in v {
        // the second operand is returned when either is NaN: a NaN |x| leaves m as it is
        m = _mm256_max_ps(_mm256_andnot_ps(sign, vk), m);
    }
    let mut lanes = [0.0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), m);
    let amax = lanes.iter().fold(0.0f32, |a, &b| a.max(b));
    let d = amax / 127.0;
    let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
    let i: [__m256i; 4] = std::array::from_fn(|k| {
        let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(v[k], id),
        );
        _mm256_cvtps_epi32(r)
    });
    // packs interleave the 128-bit lanes: 0 1 4 5 2 3 6 7 (in fours), put back in order
    let w01 = _mm256_packs_epi32(i[0], i[1]);
    let w23 = _mm256_packs_epi32(i[2], i[3]);
    let b = _mm256_packs_epi16(w01, w23);
    let b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(q.as_mut_ptr() as *mut __m256i, b);
    let sum = q.iter().map(|&v| v as i32).sum();
    (d, sum)
}

/// `_mm256_round_ps` (nearest, ties to even), `_mm256_cvtps_epi32` (out of range or NaN: i32::MIN)
/// and the saturating packs down to a byte.
#[inline(always)]
fn cvt_pack_i8(v: f32) -> i8 {
    let r = v.round_ties_even();
    let i = if (-2147483648.0..2147483648.0).contains(&r) {
        r as i32
    } else {
        i32::MIN
    };
    i.clamp(-128, 127) as i8
}

/// One super-block of 256 as `quantize_row_q8_K_ref` does; returns d.
#[inline(always)]
fn quantize_q8k_block(x: &[f32], q: &mut [i8]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        q.iter_mut().for_each(|v| *v = 0);
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (qv, &v) in q.iter_mut().zip(x) {
        // ggml's nearest_int: ties to even for |v| below 2^22, which iscale · x always is
        *qv = ((iscale * v).round_ties_even() as i32).min(127) as i8;
    }
    1.0 / iscale
}

/// ggml's `GGML_FP32_TO_BF16`: round to nearest, ties to even; NaN kept NaN (made quiet).
pub fn round_bf16(v: f32) -> u16 {
    let u = v.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// The f32 value of bf16 bits.
#[inline]
pub fn bf16_value(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_avx2_block_gives_the_plain_blocks_bytes_d_and_sum() {
        if !crate::kernels::cpu_has_avx2() {
            eprintln!("no AVX2 here: nothing to compare");
            return;
        }
        let mut rng = crate::rng::Rng::new(3);
        let mut cases: Vec<Vec<f32>> = Vec::new();
        for amp in [1e-30f32, 1e-3, 1.0, 1e3, 3e38] {
            for _ in 0..20 {
                let mut x = vec![0.0f32; 32];
                rng.fill_sym(&mut x, amp);
                cases.push(x);
            }
        }
        // exact halves after scaling (ties), zeros, a lone NaN, infinities
        let mut ties: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) * 0.5).collect();
        ties[0] = 127.0;
        cases.push(ties);
        cases.push(vec![0.0; 32]);
        cases.push(vec![-0.0; 32]);
        let mut nan = vec![1.0f32; 32];
        nan[5] = f32::NAN;
        cases.push(nan);
        let mut inf = vec![1.0f32; 32];
        inf[9] = f32::NEG_INFINITY;
        cases.push(inf);
        for x in &cases {
            let (mut qa, mut qb) = ([0i8; 32], [0i8; 32]);
            let plain = quantize_q8_block(x, &mut qa);
            // SAFETY: AVX2 checked above; 32 values each
            let simd = unsafe { q8_block_avx2(x, &mut qb) };
            assert_eq!(qa, qb, "{x:?}");
            assert_eq!(
                (plain.0.to_bits(), plain.1),
                (simd.0.to_bits(), simd.1),
                "{x:?}"
            );
        }
    }

    #[test]
    fn q8_1_rounds_ties_to_even_and_keeps_f32_d_for_s() {
        // amax 127: d = 1, id = 1, so q is x rounded ties-to-even
        let mut x = vec![0.0f32; 32];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -3.5;
        x[3] = 0.5;
        let a = QuantizedActs::new(BlockFormat::Q8_1, &x, 32);
        assert_eq!(&a.q[..4], &[127, 2, -4, 0]);
        assert_eq!(a.d[0], 1.0);
        assert_eq!(a.s[0], 125.0);
        // amax 1: d = 1/127 is not an f16; s = f16(d · Σq) uses the f32 d
        let y: Vec<f32> = (0..32).map(|i| if i == 5 { -1.0 } else { 0.25 }).collect();
        let a = QuantizedActs::new(BlockFormat::Q8_1, &y, 32);
        let d = 1.0f32 / 127.0;
        assert_eq!(a.d[0], f16::from_f32(d).to_f32());
        let sum: i32 = a.q.iter().map(|&q| q as i32).sum();
        assert_eq!(sum, -127 + 31 * 32, "0.25 · 127 = 31.75 rounds to 32");
        assert_eq!(a.s[0], f16::from_f32(d * sum as f32).to_f32());
    }

    #[test]
    fn q8_k_takes_the_first_largest_and_caps_at_127() {
        let mut x = vec![0.5f32; 256];
        x[3] = -2.0;
        x[9] = 2.0;
        let a = QuantizedActs::new(BlockFormat::Q8K, &x, 256);
        // max = −2 (the first of the largest): iscale = −127 / −2 = 63.5, so −2 → −127, 2 → 127,
        // 0.5 → 31.75 → 32
        assert_eq!(a.q[3], -127);
        assert_eq!(a.q[9], 127);
        assert_eq!(a.q[0], 32);
        assert_eq!(a.d[0], 1.0 / 63.5);
        assert_eq!(a.bsums[0], 32 * 14);
        let mut w = x.clone();
        w[3] = 2.0;
        w[9] = -2.0;
        let b = QuantizedActs::new(BlockFormat::Q8K, &w, 256);
        assert_eq!(
            (b.q[3], b.q[9], b.q[0]),
            (-127, 127, -32),
            "max = 2: iscale < 0"
        );
        let z = QuantizedActs::new(BlockFormat::Q8K, &[0.0; 256], 256);
        assert_eq!((z.d[0], z.bsums[0]), (0.0, 0));
    }

    #[test]
    fn conversions_saturate_like_the_packs() {
        assert_eq!(cvt_pack_i8(f32::NAN), -128);
        assert_eq!(cvt_pack_i8(1e12), -128, "cvtps_epi32 overflow is i32::MIN");
        assert_eq!(cvt_pack_i8(300.0), 127);
        assert_eq!(cvt_pack_i8(-127.5), -128);
        assert_eq!(
            round_bf16(1.0 + 1.0 / 256.0),
            0x3f80,
            "a tie rounds to even"
        );
        assert_eq!(round_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert!(bf16_value(round_bf16(f32::NAN)).is_nan());
    }
}
