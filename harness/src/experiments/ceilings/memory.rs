//! Sustained memory read bandwidth: sum a buffer far larger than the caches, with 256-bit loads
//! when the CPU has AVX2 (detected at run time) and a portable loop otherwise. With several threads
//! each reads its own contiguous part; a pass lasts from the first thread's start to the last
//! thread's end, so stragglers count.

/// One cache line; the buffer is a run of them, so loads are aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Line([u64; 8]);

/// A read-only buffer whose pages are all touched (written) before it is measured.
pub struct Buffer {
    lines: Vec<Line>,
}

impl Buffer {
    /// `bytes` rounded down to whole cache lines, filled with a non-zero pattern.
    pub fn new(bytes: usize) -> anyhow::Result<Buffer> {
        let n = bytes / std::mem::size_of::<Line>();
        if n == 0 {
            anyhow::bail!("a bandwidth buffer needs at least 64 bytes, got {bytes}");
        }
        let mut lines = Vec::new();
        lines
            .try_reserve_exact(n)
            .map_err(|e| anyhow::anyhow!("cannot allocate a {bytes}-byte buffer: {e}"))?;
        lines.extend((0..n as u64).map(|i| Line([i | 1; 8])));
        Ok(Buffer { lines })
    }

    pub fn bytes(&self) -> usize {
        self.lines.len() * std::mem::size_of::<Line>()
    }

    pub fn lines(&self) -> &[Line] {
        &self.lines
    }
}

/// Which read loop runs.
pub fn kernel_name() -> &'static str {
    if has_avx2() {
        "avx2 256-bit loads"
    } else {
        "portable u64 loads"
    }
}

fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Sum of every word of `lines` (its value only keeps the loads alive).
pub fn read_all(lines: &[Line]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present (checked just above).
            return unsafe { avx2::read(lines) };
        }
    }
    read_portable(lines)
}

fn read_portable(lines: &[Line]) -> u64 {
    // eight independent accumulators, one per word of a line
    let mut acc = [0u64; 8];
    for l in lines {
        for (a, w) in acc.iter_mut().zip(&l.0) {
            *a = a.wrapping_add(*w);
        }
    }
    acc.iter().fold(0, |s, a| s.wrapping_add(*a))
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::Line;

    /// Two aligned 256-bit loads per line into four accumulators (two lines per step).
    #[target_feature(enable = "avx2")]
    pub unsafe fn read(lines: &[Line]) -> u64 {
        let mut a = [_mm256_setzero_si256(); 4];
        let mut pairs = lines.chunks_exact(2);
        for p in &mut pairs {
            let p0 = p[0].0.as_ptr() as *const __m256i;
            let p1 = p[1].0.as_ptr() as *const __m256i;
            a[0] = _mm256_add_epi64(a[0], _mm256_load_si256(p0));
            a[1] = _mm256_add_epi64(a[1], _mm256_load_si256(p0.add(1)));
            a[2] = _mm256_add_epi64(a[2], _mm256_load_si256(p1));
            a[3] = _mm256_add_epi64(a[3], _mm256_load_si256(p1.add(1)));
        }
        for l in pairs.remainder() {
            let p0 = l.0.as_ptr() as *const __m256i;
            a[0] = _mm256_add_epi64(a[0], _mm256_load_si256(p0));
            a[1] = _mm256_add_epi64(a[1], _mm256_load_si256(p0.add(1)));
        }
        let s = _mm256_add_epi64(_mm256_add_epi64(a[0], a[1]), _mm256_add_epi64(a[2], a[3]));
        let mut out = [0u64; 4];
        _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, s);
        out.iter().fold(0, |x, y| x.wrapping_add(*y))
    }
}

/// Read the whole buffer on the current rayon pool, one contiguous part per thread (the product
/// timings interleave this with their calls: `products::Product::time`).
pub fn read_on_pool(buf: &Buffer) -> u64 {
    use rayon::prelude::*;
    let threads = rayon::current_num_threads().max(1);
    buf.lines
        .par_chunks(buf.lines.len().div_ceil(threads))
        .map(read_all)
        .reduce(|| 0, u64::wrapping_add)
}

/// Read bandwidth in GB/s (1e9 bytes) of `passes` timed passes over the whole buffer by `threads`
/// threads, after one untimed pass.
pub fn bandwidth(buf: &Buffer, threads: usize, passes: usize) -> Vec<f64> {
    let threads = threads.max(1);
    let parts: Vec<&[Line]> = buf
        .lines
        .chunks(buf.lines.len().div_ceil(threads))
        .collect();
    super::timed_together(&parts, passes, |part| {
        std::hint::black_box(read_all(std::hint::black_box(part)));
    })
    .into_iter()
    .map(|s| buf.bytes() as f64 / s / 1e9)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_and_portable_reads_agree() {
        let buf = Buffer::new(64 * 1001).unwrap();
        let want: u64 = (0..1001u64).map(|i| 8 * (i | 1)).sum();
        assert_eq!(read_portable(&buf.lines), want);
        assert_eq!(read_all(&buf.lines), want);
        assert_eq!(read_all(&buf.lines[..1]), 8);
        assert_eq!(read_on_pool(&buf), want);
    }

    #[test]
    fn bandwidth_gives_one_rate_per_pass() {
        let buf = Buffer::new(1 << 20).unwrap();
        let r = bandwidth(&buf, 2, 3);
        assert_eq!(r.len(), 3);
        assert!(r.iter().all(|v| *v > 0.0));
        assert!(Buffer::new(10).is_err());
    }
}
