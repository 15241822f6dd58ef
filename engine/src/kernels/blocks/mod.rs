//! Products with weights in ggml's block formats (GGUF files), in the arithmetic of llama.cpp's
//! CPU backend on x86 AVX2, so that a forward pass built on them can agree with llama.cpp token
//! for token:
//!
//! - `format`: the ggml types (ids, names, block sizes); `bytes`: the bytes that hold a tensor;
//! - `matrix`: `BlockMatrix` (a [rows, cols] matrix of one format), its products and
//!   `matmul_shared`;
//! - `acts`: the activations converted to a format's vec_dot type (Q8_0, Q8_1, Q8_K, F16, BF16);
//! - `lanes`: ggml's f32 lane arithmetic in scalar form, shared by the portable dots;
//! - `legacy` (Q4_0, Q4_1, Q8_0), `kquants` (Q4_K, Q5_K, Q6_K), `floats` (F32, F16, BF16): block
//!   layouts, dequantisation and the portable dots (the reference twins);
//! - `avx2` (Q4_0, Q4_1, Q8_0), `avx2_k` (K-quants), `avx2_f` (floats): the SIMD kernels,
//!   bit-identical to the portable dots; `avx512`: batches of Q4_0, Q4_1 and Q8_0 with AVX-512
//!   VNNI, two input rows a register, bit-identical to `avx2`;
//! - `encode`: ggml's reference quantisers for weights, random matrices (tests, benches, tools).
//!
//! What is mirrored is ggml's `vec_dot` route (`ggml_compute_forward_mul_mat`, one dot per
//! output), checked bit for bit against llama.cpp's own library (`tests/block_parity.rs`). Where
//! llama.cpp on x86 takes other routes the f32 order differs (the integer block sums do not):
//! Q4_0 and Q4_K matrices whose rows are a multiple of 8 are repacked (`repack.cpp`), batches of
//! two or more rows against F32, F16, BF16, Q8_0 or Q4_0 weights go through llamafile's `sgemm`,
//! and AVX-512 builds reduce the float dots over 16 lanes. Q4_1, Q5_K and Q6_K always take the
//! vec_dot route, as do single rows of Q8_0 (a tied output head at decode).
//!
//! Owns no model state: matrices hold their bytes, products take and write slices.

pub mod acts;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_f;
#[cfg(target_arch = "x86_64")]
mod avx2_k;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod bytes;
pub mod encode;
pub mod floats;
pub mod format;
pub mod kquants;
pub mod lanes;
pub mod legacy;
#[cfg(target_arch = "x86_64")]
mod legacy_x86;
pub mod matrix;
mod stored;

/// How many tiles ahead of the one being computed the SIMD block products prefetch its weights
/// (`avx2`, `avx512`): without it the hardware prefetchers left a one-row product reading from
/// memory at well under half the rate of the same product in L2 (on host D).
#[cfg(target_arch = "x86_64")]
const AHEAD_TILES: usize = 2;

/// The kernel that a batch of two or more rows against Q4_0, Q4_1 or Q8_0 takes on this CPU:
/// `avx512-vnni`, `avx2` or `portable` (a signed format's batch holding a −128 activation byte
/// stays on `avx2`). `make test` prints it.
pub fn legacy_batch_path() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if avx512::vnni512() {
            return "avx512-vnni";
        }
        if crate::kernels::isa() == crate::kernels::Isa::Avx2 && crate::kernels::cpu_has_avx2() {
            return "avx2";
        }
    }
    "portable"
}

pub use acts::QuantizedActs;
pub use bytes::WeightBytes;
pub use format::BlockFormat;
pub use matrix::{matmul_shared, BlockMatrix};
