//! Emulated FP16 rounding for the expert path (ARCHITECTURE.md §1.5): values are rounded to the
//! nearest f16 (ties to even) and kept as f32; beyond the f16 range they become ±inf, as on the
//! device. The F16C version converts eight values per instruction and is bit-identical to `half`.

use super::{isa, reference, Isa};

/// Round `v` in place to f16 precision and range.
pub fn round(v: &mut [f32]) {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: isa() checked AVX2 and F16C; the kernel touches only v's whole chunks of 8 and
        // rounds the tail with the reference.
        Isa::Avx2 => unsafe { f16c_round(v) },
        _ => reference::round_f16(v),
    }
}

/// One value (scalar paths).
#[inline]
pub fn round1(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn f16c_round(v: &mut [f32]) {
    use std::arch::x86_64::*;
    let chunks = v.len() / 8;
    for i in 0..chunks {
        let p = v.as_mut_ptr().add(i * 8);
        let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(p));
        _mm256_storeu_ps(p, _mm256_cvtph_ps(h));
    }
    reference::round_f16(&mut v[chunks * 8..]);
}
