//! The engine's INT4 and INT8 products timed as the engine runs them. A single expert matrix (about
//! 10.6 MB) fits in a server's last-level cache, while serving streams weights from memory; so the
//! calls cycle through enough copies of the matrix (at least four times the largest cache) that
//! every call reads its weights from DRAM, comparable with the read-bandwidth ceiling. Before each
//! call a plain read of as many bytes is timed on the same threads, so each product is also
//! compared with the bandwidth of its own moments.

use std::time::{Duration, Instant};

use super::memory::{read_on_pool, Buffer};
use moefleet_engine::kernels::int4::{self, Int4Matrix};
use moefleet_engine::kernels::int8::{self, Int8Matrix};
use moefleet_engine::kernels::{cases, IntPath};

/// Timed calls stop at this many samples or after `budget`, whichever comes first.
const MAX_CALLS: usize = 2000;
/// ... but never fewer than this many.
const MIN_CALLS: usize = 15;

/// The timings of one product.
pub struct ProductTiming {
    /// Seconds per call.
    pub seconds: Vec<f64>,
    /// Seconds of a plain read of as many bytes as a call reads, timed before each call on the
    /// same threads, from a ring of buffers as large as the matrices' (so just as cold): the
    /// bandwidth the call could have had at that moment, which drifts on a shared machine.
    pub read_seconds: Vec<f64>,
    /// Copies of the matrix the calls cycle through.
    pub copies: usize,
}

/// One product shape to time.
pub enum Product {
    Int4(Int4Matrix),
    Int8(Int8Matrix),
}

impl Product {
    /// `rows` x `cols` INT4 group-32 matrix with random nibbles and scales.
    pub fn int4(rows: usize, cols: usize) -> anyhow::Result<Product> {
        if rows == 0 || cols == 0 || !cols.is_multiple_of(int4::GROUP) {
            anyhow::bail!("INT4 shape {rows} x {cols}: cols must be a positive multiple of 32");
        }
        Ok(Product::Int4(cases::int4_matrix(rows, cols, 41)))
    }

    /// `rows` x `cols` INT8 per-row matrix with random values and scales.
    pub fn int8(rows: usize, cols: usize) -> anyhow::Result<Product> {
        if rows == 0 || cols == 0 || !cols.is_multiple_of(8) {
            anyhow::bail!("INT8 shape {rows} x {cols}: cols must be a positive multiple of 8");
        }
        Ok(Product::Int8(cases::int8_matrix(rows, cols, 43)))
    }

    pub fn rows(&self) -> usize {
        match self {
            Product::Int4(m) => m.rows,
            Product::Int8(m) => m.rows,
        }
    }

    pub fn cols(&self) -> usize {
        match self {
            Product::Int4(m) => m.cols,
            Product::Int8(m) => m.cols,
        }
    }

    /// Stored bytes of the matrix: weights plus f16 scales.
    pub fn bytes(&self) -> usize {
        match self {
            Product::Int4(m) => m.bytes(),
            Product::Int8(m) => m.bytes(),
        }
    }

    /// Time `y = x · wᵀ` for one input row on the current rayon pool (install a 1-thread pool to
    /// pin it): one untimed pass over `copies` copies, then calls until `budget` is spent, each
    /// reading the next copy after a timed plain read of a buffer of the same size (a ring of
    /// `copies` buffers, half a ring away from the matrix the call reads). The calls take turns
    /// over `paths` (None: the kernel the engine dispatches to; Some: that integer kernel, which
    /// the CPU must have), so every path meets the same moments of a shared machine: one timing
    /// per path, each with its own calls and the reads timed before them.
    pub fn time_paths(
        &self,
        copies: usize,
        budget: Duration,
        paths: &[Option<IntPath>],
    ) -> anyhow::Result<Vec<ProductTiming>> {
        if paths.is_empty() {
            anyhow::bail!("no kernel to time");
        }
        let copies = copies.max(1);
        let x = cases::activations(self.cols(), 1.0, 5);
        let mut y = vec![0.0f32; self.rows()];
        let ring: Vec<Product> = (0..copies)
            .map(|_| match self {
                Product::Int4(m) => Product::Int4(m.clone()),
                Product::Int8(m) => Product::Int8(m.clone()),
            })
            .collect();
        let call = |p: &Product, path: Option<IntPath>, y: &mut [f32]| match (p, path) {
            (Product::Int4(m), None) => int4::matmul(&m.view(), &x, y),
            (Product::Int4(m), Some(k)) => int4::matmul_path(k, &m.view(), &x, y),
            (Product::Int8(m), None) => int8::matmul(m, &x, y),
            (Product::Int8(m), Some(k)) => int8::matmul_path(k, m, &x, y),
        };
        let bufs = (0..copies)
            .map(|_| Buffer::new(self.bytes()))
            .collect::<anyhow::Result<Vec<_>>>()?;
        for (p, b) in ring.iter().zip(&bufs) {
            for &path in paths {
                call(p, path, &mut y);
            }
            std::hint::black_box(read_on_pool(b));
        }
        let mut timings: Vec<ProductTiming> = paths
            .iter()
            .map(|_| ProductTiming {
                seconds: Vec::new(),
                read_seconds: Vec::new(),
                copies,
            })
            .collect();
        let start = Instant::now();
        let mut k = 0;
        let least = MIN_CALLS * paths.len();
        while k < least || (start.elapsed() < budget && k < MAX_CALLS * paths.len()) {
            let b = &bufs[(k + copies / 2) % copies];
            let t0 = Instant::now();
            std::hint::black_box(read_on_pool(std::hint::black_box(b)));
            let read = t0.elapsed().as_secs_f64();
            // every call reads the next copy (cold: last read a whole ring ago), the paths in turn
            let (p, at) = (&ring[k % copies], k % paths.len());
            let t0 = Instant::now();
            call(p, paths[at], std::hint::black_box(&mut y));
            timings[at].seconds.push(t0.elapsed().as_secs_f64());
            timings[at].read_seconds.push(read);
            k += 1;
        }
        std::hint::black_box(&y);
        Ok(timings)
    }
}

/// Copies of a `bytes`-byte matrix whose total is at least four times `cache_bytes`.
pub fn copies_past_cache(bytes: usize, cache_bytes: usize) -> usize {
    (4 * cache_bytes).div_ceil(bytes.max(1)).clamp(1, 256)
}

/// The largest CPU cache of cpu0 in bytes, from sysfs (None when unavailable).
pub fn largest_cache_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("size")).ok())
        .filter_map(|s| parse_cache_size(s.trim()))
        .max()
}

/// "32768K" / "1M" / "512" as bytes.
pub fn parse_cache_size(s: &str) -> Option<usize> {
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1usize << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<usize>().ok().map(|n| n * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_and_copies() {
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("x"), None);
        assert_eq!(parse_cache_size(""), None);
        assert_eq!(copies_past_cache(10 << 20, 32 << 20), 13);
        assert_eq!(copies_past_cache(1 << 30, 32 << 20), 1);
    }

    #[test]
    fn products_time_small_shapes() {
        assert!(Product::int4(4, 30).is_err());
        let p = Product::int4(64, 64).unwrap();
        assert_eq!(p.bytes(), 64 * 32 + 2 * 64 * 2);
        let t = p
            .time_paths(2, Duration::from_millis(1), &[None])
            .unwrap()
            .remove(0);
        assert!(t.seconds.len() >= MIN_CALLS && t.copies == 2);
        assert_eq!(t.read_seconds.len(), t.seconds.len());
        let q = Product::int8(16, 64).unwrap();
        assert_eq!(q.bytes(), 16 * 64 + 2 * 16);
        let timed = q.time_paths(1, Duration::ZERO, &[None]).unwrap();
        assert!(timed[0].seconds.len() >= MIN_CALLS);
    }
}
