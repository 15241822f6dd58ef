//! What the x86 kernels of the legacy formats (Q4_0, Q4_1, Q8_0) share: where a batch's
//! activations lie, and the loads of a weight block's f16 scale and nibbles (`avx2`, `avx512`).

use std::arch::x86_64::*;

use super::acts::QuantizedActs;
use super::legacy::QK;
use super::stored::BlockMatrix;

/// Where the activations of `xq` lie for products with `m`: row r's bytes at `q + r · cols`, its
/// block scales at `d + r · blocks` (and Q8_1's `d · Σq` at `s + r · blocks`).
#[derive(Clone, Copy)]
pub(super) struct Acts {
    pub q: *const i8,
    pub d: *const f32,
    pub s: *const f32,
    pub cols: usize,
    pub blocks: usize,
}

impl Acts {
    pub fn of(m: &BlockMatrix, xq: &QuantizedActs) -> Acts {
        let all = xq.all_rows();
        Acts {
            q: all.q.as_ptr(),
            d: all.d.as_ptr(),
            s: all.s.as_ptr(),
            cols: m.cols,
            blocks: m.cols / QK,
        }
    }
}

/// The f16 at `p` as f32.
///
/// # Safety
/// The CPU has AVX2 and F16C; `p` points at two readable bytes.
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = (p as *const u16).read_unaligned();
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// 16 bytes of nibbles as 32 bytes 0..15 in element order (low nibbles, then high): ggml's
/// `bytes_from_nibbles_32`.
///
/// # Safety
/// The CPU has AVX2; `p` points at 16 readable bytes.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
    let t = _mm_loadu_si128(p as *const __m128i);
    _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(t, 4), t),
        _mm256_set1_epi8(0x0f),
    )
}
