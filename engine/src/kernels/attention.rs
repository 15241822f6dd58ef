//! Attention inner loops over a contiguous block of cached keys/values of one KV head:
//! `scores[j] = q · k_j` and `out += Σ_j p_j · v_j`. The model's attention module
//! (`model::attention`) handles rings, bias, scale and softmax around them.

use super::{isa, reference, Isa};

/// `scores[j] = Σ_d q[d] · keys[j, d]` for keys [n, D].
pub fn scores(q: &[f32], keys: &[f32], out: &mut [f32]) {
    let d = q.len();
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if d % 8 == 0 => unsafe { avx2::scores(q, keys, out) },
        _ => {
            for (j, s) in out.iter_mut().enumerate() {
                *s = reference::dot(q, &keys[j * d..(j + 1) * d]);
            }
        }
    }
}

/// `out[d] += Σ_j p[j] · values[j, d]` for values [n, D].
pub fn weighted_sum(p: &[f32], values: &[f32], out: &mut [f32]) {
    let d = out.len();
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if d % 8 == 0 => unsafe { avx2::weighted_sum(p, values, out) },
        _ => {
            for (j, &pj) in p.iter().enumerate() {
                reference::axpy(pj, &values[j * d..(j + 1) * d], out);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use crate::kernels::hsum256;

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn scores(q: &[f32], keys: &[f32], out: &mut [f32]) {
        let d = q.len();
        for (j, s) in out.iter_mut().enumerate() {
            let k = keys.as_ptr().add(j * d);
            let mut a0 = _mm256_setzero_ps();
            let mut a1 = _mm256_setzero_ps();
            let mut i = 0;
            while i + 16 <= d {
                a0 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(q.as_ptr().add(i)),
                    _mm256_loadu_ps(k.add(i)),
                    a0,
                );
                a1 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(q.as_ptr().add(i + 8)),
                    _mm256_loadu_ps(k.add(i + 8)),
                    a1,
                );
                i += 16;
            }
            if i < d {
                a0 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(q.as_ptr().add(i)),
                    _mm256_loadu_ps(k.add(i)),
                    a0,
                );
            }
            *s = hsum256(_mm256_add_ps(a0, a1));
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn weighted_sum(p: &[f32], values: &[f32], out: &mut [f32]) {
        let d = out.len();
        let mut i = 0;
        while i < d {
            let mut acc = _mm256_loadu_ps(out.as_ptr().add(i));
            for (j, &pj) in p.iter().enumerate() {
                let v = _mm256_loadu_ps(values.as_ptr().add(j * d + i));
                acc = _mm256_fmadd_ps(_mm256_set1_ps(pj), v, acc);
            }
            _mm256_storeu_ps(out.as_mut_ptr().add(i), acc);
            i += 8;
        }
    }
}
