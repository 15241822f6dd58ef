//! Float weights (F32, F16, BF16): conversion to f32 and the dot products of ggml's x86 AVX2 build
//! (`vec.cpp`, `simd-mappings.h`), with the activations already rounded to the weight's type
//! (`acts`):
//!
//! ```text
//! F32, F16: four accumulators of 8 lanes over steps of 32: sum_k,l = fma(w, a, sum_k,l);
//!           reduce4x8; the last n mod 32 elements added one by one: F16 in f64 (`ggml_float`),
//!           F32 in f32 as GCC 12 compiles `sumf += x[i]*y[i]` at -O3 (the peer's build,
//!           checked in its disassembly): products rounded then added in order for the tail's
//!           elements up to a multiple of 4 (its vectorised part), fused for the last n mod 4
//! BF16:     c_k += w · a (exact products) over steps of 32; (c1 + c3) + (c2 + c4), then hsum8;
//!           the last n mod 32 added in f64
//! ```
//!
//! f16 × f16 and bf16 × bf16 products are exact in f32, so whether a build fuses them does not
//! matter; f32 × f32 ones are not, and ggml's AVX2 build fuses them. A build for AVX-512 reduces
//! over 16 lanes instead (ggml's `__AVX512F__` paths): not mirrored. Owns no data.

use half::f16;

use super::acts::{bf16_value, ActRow};
use super::lanes::{fma, hsum8, reduce4x8, LANES};

/// Elements per step of the unrolled loops.
pub const STEP: usize = 32;

pub fn dequantize_f32(row: &[u8], out: &mut [f32]) {
    for (b, o) in row.chunks_exact(4).zip(out.iter_mut()) {
        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub fn dequantize_f16(row: &[u8], out: &mut [f32]) {
    for (b, o) in row.chunks_exact(2).zip(out.iter_mut()) {
        *o = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
    }
}

pub fn dequantize_bf16(row: &[u8], out: &mut [f32]) {
    for (b, o) in row.chunks_exact(2).zip(out.iter_mut()) {
        *o = bf16_value(u16::from_le_bytes([b[0], b[1]]));
    }
}

/// The shared shape of the F32 and F16 dots over weights `w(i)` and activations `a`.
#[inline]
fn dot_4x8(n: usize, w: impl Fn(usize) -> f32, a: &[f32]) -> (f32, usize) {
    let np = n - n % STEP;
    let mut sum = [[0.0f32; LANES]; 4];
    for i in (0..np).step_by(STEP) {
        for (k, s) in sum.iter_mut().enumerate() {
            for (l, s) in s.iter_mut().enumerate() {
                let e = i + LANES * k + l;
                *s = fma(w(e), a[e], *s);
            }
        }
    }
    (reduce4x8(&sum), np)
}

/// `ggml_vec_dot_f32` (AVX2 + FMA).
pub fn dot_f32(w: &[u8], a: ActRow<'_>) -> f32 {
    let wf = |e: usize| f32::from_le_bytes([w[4 * e], w[4 * e + 1], w[4 * e + 2], w[4 * e + 3]]);
    let n = a.v.len();
    let (mut sumf, np) = dot_4x8(n, wf, a.v);
    let fused = n - n % 4;
    for e in np..fused {
        sumf += wf(e) * a.v[e];
    }
    for e in fused.max(np)..n {
        sumf = fma(wf(e), a.v[e], sumf);
    }
    sumf
}

/// `ggml_vec_dot_f16` (AVX2 + F16C + FMA).
pub fn dot_f16(w: &[u8], a: ActRow<'_>) -> f32 {
    let wf = |e: usize| f16::from_bits(u16::from_le_bytes([w[2 * e], w[2 * e + 1]])).to_f32();
    let n = a.v.len();
    let (s, np) = dot_4x8(n, wf, a.v);
    let mut sumf = s as f64;
    for e in np..n {
        sumf += (wf(e) * a.v[e]) as f64;
    }
    sumf as f32
}

/// `ggml_vec_dot_bf16` (AVX2).
pub fn dot_bf16(w: &[u8], a: ActRow<'_>) -> f32 {
    let wf = |e: usize| bf16_value(u16::from_le_bytes([w[2 * e], w[2 * e + 1]]));
    let n = a.v.len();
    let np = n - n % STEP;
    let mut c = [[0.0f32; LANES]; 4];
    for i in (0..np).step_by(STEP) {
        for (k, c) in c.iter_mut().enumerate() {
            for (l, c) in c.iter_mut().enumerate() {
                let e = i + LANES * k + l;
                *c += wf(e) * a.v[e];
            }
        }
    }
    let v: [f32; LANES] = std::array::from_fn(|l| (c[0][l] + c[2][l]) + (c[1][l] + c[3][l]));
    let mut sumf = hsum8(&v) as f64;
    for e in np..n {
        sumf += (wf(e) * a.v[e]) as f64;
    }
    sumf as f32
}
