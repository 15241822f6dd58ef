//! The one list of kernel cases, shared by the parity tests (each case states its tolerance) and,
//! later, the criterion benchmarks. Shapes named after presets use that preset's dimensions.

use half::f16;

use super::int4::Int4Matrix;
use super::int8::Int8Matrix;
use crate::rng::Rng;

/// A matrix-product case: `rows` outputs, `cols` inputs, `n` input rows.
#[derive(Clone, Copy, Debug)]
pub struct MatCase {
    pub name: &'static str,
    pub rows: usize,
    pub cols: usize,
    pub n: usize,
    /// Largest allowed |fast − reference| / Σ_c |w x| (accumulation-order difference only).
    pub tol: f32,
    /// Part of the quick parity set (the rest are benchmark-sized).
    pub quick: bool,
}

const fn case(name: &'static str, rows: usize, cols: usize, n: usize, quick: bool) -> MatCase {
    MatCase {
        name,
        rows,
        cols,
        n,
        tol: 1e-5,
        quick,
    }
}

/// INT4 group-32 product cases.
pub const INT4_CASES: &[MatCase] = &[
    case("nano-expert-up-1", 32, 64, 1, true),
    case("nano-expert-down-3", 64, 32, 3, true),
    case("odd-rows-5", 37, 96, 5, true),
    case("mini-expert-gate-1", 128, 256, 1, true),
    case("mini-expert-down-8", 256, 128, 8, true),
    case("mini-dense-up-2", 1024, 256, 2, true),
    case("mini-dense-down-64", 256, 1024, 64, true),
    // 33 groups leave a lone group in a short last four; 37 rows a padded last tile
    case("long-row-1", 40, 2048, 1, true),
    case("long-odd-row-1", 24, 1056, 1, true),
    case("inkling-expert-gate-1", 3072, 6144, 1, false),
    case("inkling-expert-gate-2", 3072, 6144, 2, false),
    case("inkling-expert-gate-8", 3072, 6144, 8, false),
    case("inkling-expert-gate-64", 3072, 6144, 64, false),
    case("inkling-expert-down-1", 6144, 3072, 1, false),
    case("inkling-dense-up-1", 24576, 6144, 1, false),
    case("inkling-dense-down-1", 6144, 24576, 1, false),
];

/// INT8 per-row product cases.
pub const INT8_CASES: &[MatCase] = &[
    case("nano-q-1", 64, 64, 1, true),
    case("nano-o-7", 64, 64, 7, true),
    case("mini-q-3", 256, 256, 3, true),
    case("mini-head-1", 7104, 256, 1, true),
    case("inkling-q-1", 8192, 6144, 1, false),
    case("inkling-o-1", 6144, 8192, 1, false),
    case("inkling-head-1", 201_024, 6144, 1, false),
];

/// f32 product cases (the draft head: input projection [H, 2H], attention, head rows).
pub const LINEAR_CASES: &[MatCase] = &[
    case("nano-input-proj-1", 64, 128, 1, true),
    case("odd-7", 37, 19, 7, true),
    case("mini-input-proj-190", 256, 512, 190, true),
    case("mini-head-64", 7104, 256, 64, true),
];

/// Attention block cases: (name, keys, head_dim).
pub const ATTENTION_CASES: &[(&str, usize, usize)] = &[
    ("nano", 70, 16),
    ("mini", 600, 32),
    ("inkling-1k", 1024, 128),
    ("odd-dim", 33, 12),
];

/// Attention tolerance relative to Σ|q||k| (scores) or Σ|p||v| (values).
pub const ATTENTION_TOL: f32 = 1e-5;

/// Random INT4 matrix with random nibbles and scales in [0.01, 0.03).
pub fn int4_matrix(rows: usize, cols: usize, seed: u64) -> Int4Matrix {
    let mut rng = Rng::new(seed);
    let q = (0..rows * cols / 2).map(|_| rng.next_u64() as u8).collect();
    let scales = (0..rows * cols / 32)
        .map(|_| f16::from_f32(0.01 + 0.02 * rng.unit()))
        .collect();
    Int4Matrix::new(rows, cols, q, scales)
}

/// Random INT8 matrix.
pub fn int8_matrix(rows: usize, cols: usize, seed: u64) -> Int8Matrix {
    let mut rng = Rng::new(seed);
    let q = (0..rows * cols)
        .map(|_| (rng.below(255) as i32 - 127) as i8)
        .collect();
    let scales = (0..rows)
        .map(|_| f16::from_f32(0.001 + 0.002 * rng.unit()))
        .collect();
    Int8Matrix::new(rows, cols, q, scales)
}

/// Random activations in [−amp, amp).
pub fn activations(len: usize, amp: f32, seed: u64) -> Vec<f32> {
    let mut v = vec![0.0; len];
    Rng::new(seed).fill_sym(&mut v, amp);
    v
}
