//! Peak fp32 multiply-add rate: `CHAINS` independent register-resident chains `a = a · m + c`,
//! enough to cover the FMA latency on every pipe. With AVX2 + FMA (detected at run time) each step is
//! one 8-lane `vfmadd`, counted as 2 FLOP per lane; the portable loop does a separate multiply and
//! add on the same chains (also 2 FLOP per lane, but it is not an FMA ceiling).

use std::time::Instant;

/// Independent accumulators: ≥ latency × pipes (4–5 cycles × 2 on current x86), within the 16
/// vector registers.
pub const CHAINS: usize = 12;
/// fp32 lanes per chain.
pub const LANES: usize = 8;

/// FLOP per loop iteration: each chain does one multiply-add per lane.
pub const FLOP_PER_ITER: f64 = (CHAINS * LANES * 2) as f64;

pub fn kernel_name() -> &'static str {
    if has_fma() {
        "avx2 vfmadd231ps x12 chains"
    } else {
        "portable mul+add x12 chains"
    }
}

fn has_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Run `iters` iterations; the returned value only keeps the work alive.
fn run(iters: u64) -> f32 {
    // opaque constants so nothing folds; |m| < 1 keeps the chains bounded
    let m = std::hint::black_box(0.999_999_9f32);
    let c = std::hint::black_box(1e-7f32);
    #[cfg(target_arch = "x86_64")]
    {
        if has_fma() {
            // SAFETY: AVX2 and FMA are present (checked just above).
            return unsafe { avx2::run(iters, m, c) };
        }
    }
    run_portable(iters, m, c)
}

fn run_portable(iters: u64, m: f32, c: f32) -> f32 {
    let mut acc = [[1.0f32; LANES]; CHAINS];
    for _ in 0..iters {
        for chain in acc.iter_mut() {
            for a in chain.iter_mut() {
                *a = *a * m + c;
            }
        }
    }
    acc.iter().flatten().sum()
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::CHAINS;

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn run(iters: u64, m: f32, c: f32) -> f32 {
        let mv = _mm256_set1_ps(m);
        let cv = _mm256_set1_ps(c);
        let mut acc = [_mm256_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm256_fmadd_ps(*a, mv, cv);
            }
        }
        let mut s = _mm256_setzero_ps();
        for a in acc {
            s = _mm256_add_ps(s, a);
        }
        let mut out = [0.0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), s);
        out.iter().sum()
    }
}

/// Iterations that take about `target_s` on one thread.
pub fn calibrate(target_s: f64) -> u64 {
    let mut iters = 1u64 << 16;
    loop {
        let t0 = Instant::now();
        std::hint::black_box(run(iters));
        let s = t0.elapsed().as_secs_f64();
        if s >= 0.02 || iters >= 1 << 40 {
            return ((iters as f64 * target_s / s.max(1e-9)) as u64).max(1);
        }
        iters *= 4;
    }
}

/// GFLOP/s of `samples` timed runs of `iters` iterations on each of `threads` threads, after one
/// untimed run; a sample spans the first thread's start to the last thread's end.
pub fn rate(threads: usize, iters: u64, samples: usize) -> Vec<f64> {
    let threads = threads.max(1);
    let flop = FLOP_PER_ITER * iters as f64 * threads as f64;
    let per_thread = vec![iters; threads];
    super::timed_together(&per_thread, samples, |&n| {
        std::hint::black_box(run(std::hint::black_box(n)));
    })
    .into_iter()
    .map(|s| flop / s / 1e9)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_and_portable_chains_agree() {
        // the same recurrence per lane: fused and unfused rounding differ only slightly
        let a = run(1000);
        let b = run_portable(1000, 0.999_999_9, 1e-7);
        assert!((a - b).abs() < 1e-3 * b.abs(), "{a} vs {b}");
        assert_eq!(rate(2, 1000, 2).len(), 2);
    }
}
