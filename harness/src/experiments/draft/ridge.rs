//! Closed-form ridge regression `Y ≈ X B`: the sufficient statistics XᵀX, XᵀY, Σy and Σy² are
//! accumulated over row chunks (f32 products per chunk of `CHUNK` rows, summed in f64), and
//! `B = (XᵀX + λ' I)⁻¹ XᵀY` is solved by Cholesky in f64, with `λ' = λ · mean(diag XᵀX)` so λ is
//! free of the features' scale.

use anyhow::bail;
use moefleet_engine::kernels::linear::{self, Linear};
use rayon::prelude::*;
use std::borrow::Cow;

/// Rows per f32 product before the sums move to f64.
const CHUNK: usize = 512;

pub struct Ridge {
    p: usize,
    q: usize,
    n: usize,
    /// [p, p]
    xtx: Vec<f64>,
    /// [p, q]
    xty: Vec<f64>,
    /// [q]
    y_sum: Vec<f64>,
    yy: f64,
}

/// One part's rows as f32 products per chunk ((XᵀX, XᵀY) of each), with its targets for Σy, Σy².
struct Products {
    n: usize,
    chunks: Vec<(Vec<f32>, Vec<f32>)>,
    y: Vec<f32>,
}

/// A solved regression: `weights` as a [q, p] matrix (y = x · weightsᵀ) and its fit on the rows
/// it was solved from.
pub struct Solved {
    pub weights: Linear,
    /// 1 − SSE / SST over the training rows (SST about each output's mean).
    pub r2: f64,
    pub rows: usize,
}

impl Ridge {
    pub fn new(p: usize, q: usize) -> Self {
        Ridge {
            p,
            q,
            n: 0,
            xtx: vec![0.0; p * p],
            xty: vec![0.0; p * q],
            y_sum: vec![0.0; q],
            yy: 0.0,
        }
    }

    /// Add rows: x [n, p], y [n, q]. Panics on shapes that do not match (a caller's bug).
    pub fn add(&mut self, x: &[f32], y: &[f32]) {
        let part = self.products(x, y.to_vec());
        self.absorb_all(vec![part]);
    }

    /// Add the rows of `count` parts, part i's (x, y) made by `part(i)`: the parts' f32 products
    /// are computed in parallel, a few at a time, and summed into the f64 statistics in part
    /// order, so every sum is the one `add` of each part in turn makes.
    pub fn add_parts<'a, F>(&mut self, count: usize, part: F)
    where
        F: Fn(usize) -> (Cow<'a, [f32]>, Vec<f32>) + Sync,
    {
        let batch = 2 * rayon::current_num_threads().max(1);
        for start in (0..count).step_by(batch) {
            let products: Vec<Products> = (start..count.min(start + batch))
                .into_par_iter()
                .map(|i| {
                    let (x, y) = part(i);
                    self.products(&x, y)
                })
                .collect();
            self.absorb_all(products);
        }
    }

    /// One part's f32 products, chunk by chunk.
    fn products(&self, x: &[f32], y: Vec<f32>) -> Products {
        let (p, q) = (self.p, self.q);
        assert!(
            x.len().is_multiple_of(p) && y.len().is_multiple_of(q) && x.len() / p == y.len() / q
        );
        let n = x.len() / p;
        let chunks = (0..n)
            .step_by(CHUNK)
            .map(|s| {
                let m = CHUNK.min(n - s);
                let (xs, ys) = (&x[s * p..(s + m) * p], &y[s * q..(s + m) * q]);
                let mut g = vec![0.0f32; p * p];
                linear::gram(xs, m, p, &mut g);
                let mut h = vec![0.0f32; p * q];
                linear::cross(xs, ys, m, p, q, &mut h);
                (g, h)
            })
            .collect();
        Products { n, chunks, y }
    }

    /// Sum parts' products into the f64 statistics, in part order and chunk order for every
    /// element (so the same sums as absorbing them one by one), with the elements split across
    /// threads: rows of XᵀX and XᵀY at a time.
    fn absorb_all(&mut self, parts: Vec<Products>) {
        let (p, q) = (self.p, self.q);
        let chunks: Vec<&(Vec<f32>, Vec<f32>)> =
            parts.iter().flat_map(|part| &part.chunks).collect();
        let rows = 16;
        self.xtx
            .par_chunks_mut(rows * p)
            .zip(self.xty.par_chunks_mut(rows * q))
            .enumerate()
            .for_each(|(b, (xtx, xty))| {
                for (g, h) in &chunks {
                    let g = &g[b * rows * p..][..xtx.len()];
                    xtx.iter_mut().zip(g).for_each(|(a, v)| *a += *v as f64);
                    let h = &h[b * rows * q..][..xty.len()];
                    xty.iter_mut().zip(h).for_each(|(a, v)| *a += *v as f64);
                }
            });
        for part in &parts {
            for row in part.y.chunks_exact(q) {
                for (s, v) in self.y_sum.iter_mut().zip(row) {
                    *s += *v as f64;
                    self.yy += (*v as f64) * (*v as f64);
                }
            }
            self.n += part.n;
        }
    }

    pub fn rows(&self) -> usize {
        self.n
    }

    /// Solve with ridge strength `lambda` (relative to the mean diagonal of XᵀX).
    pub fn solve(&self, lambda: f64) -> anyhow::Result<Solved> {
        let (p, q) = (self.p, self.q);
        if self.n == 0 {
            bail!("ridge regression without rows");
        }
        let mean_diag = (0..p).map(|i| self.xtx[i * p + i]).sum::<f64>() / p as f64;
        let mut a = self.xtx.clone();
        for i in 0..p {
            a[i * p + i] += lambda * mean_diag.max(f64::MIN_POSITIVE);
        }
        let l = cholesky(&a, p)?;
        // B [p, q]: solve L Lᵀ B = XᵀY for every column at once, row by row (contiguous q-wide
        // updates)
        let mut b = self.xty.clone();
        solve_rows(&l, p, q, &mut b);
        // SSE = Σy² − 2 tr(Bᵀ XᵀY) + tr(Bᵀ XᵀX B)
        let mut cross = 0.0;
        for i in 0..p * q {
            cross += b[i] * self.xty[i];
        }
        // tr(Bᵀ G B) = Σ_{i,k} G_ik (b_i · b_k) over the rows b_i of B, G symmetric: each pair
        // once (contiguous reads), the terms in parallel, summed here in row order
        let terms: Vec<Vec<f64>> = (0..p)
            .into_par_iter()
            .map(|i| {
                let bi = &b[i * q..(i + 1) * q];
                (i..p)
                    .map(|k| {
                        let g = self.xtx[i * p + k];
                        let dot = dot(bi, &b[k * q..(k + 1) * q]);
                        if k == i {
                            g * dot
                        } else {
                            2.0 * g * dot
                        }
                    })
                    .collect()
            })
            .collect();
        let mut quad = 0.0;
        for t in terms.iter().flatten() {
            quad += t;
        }
        let sse = (self.yy - 2.0 * cross + quad).max(0.0);
        let sst = self.yy - self.y_sum.iter().map(|s| s * s).sum::<f64>() / self.n as f64;
        let w: Vec<f32> = linear::transposed(&b, p, q)
            .iter()
            .map(|&v| v as f32)
            .collect();
        Ok(Solved {
            weights: Linear::new(q, p, w),
            r2: if sst > 0.0 { 1.0 - sse / sst } else { 0.0 },
            rows: self.n,
        })
    }
}

/// Σ a_k b_k in f64, summed in `LANES` interleaved partial sums (k mod LANES) added in lane order,
/// then the tail: a fixed order the compiler can keep in vector registers, where one running sum
/// waits on every previous add (the solve's O(p³) and O(p² q) loops are these dots).
fn dot(a: &[f64], b: &[f64]) -> f64 {
    const LANES: usize = 8;
    let n = a.len().min(b.len());
    let (ac, bc) = (a[..n].chunks_exact(LANES), b[..n].chunks_exact(LANES));
    let tail: f64 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut acc = [0.0f64; LANES];
    for (x, y) in ac.zip(bc) {
        for k in 0..LANES {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// Lower-triangular L with L Lᵀ = a ([p, p], symmetric positive definite).
fn cholesky(a: &[f64], p: usize) -> anyhow::Result<Vec<f64>> {
    let mut l = vec![0.0f64; p * p];
    for i in 0..p {
        for j in 0..=i {
            let s = dot(&l[i * p..i * p + j], &l[j * p..j * p + j]);
            if i == j {
                let d = a[i * p + i] - s;
                if d <= 0.0 || !d.is_finite() {
                    bail!("ridge regression: the normal equations are not positive definite (pivot {i})");
                }
                l[i * p + i] = d.sqrt();
            } else {
                l[i * p + j] = (a[i * p + j] - s) / l[j * p + j];
            }
        }
    }
    Ok(l)
}

/// Solve L Lᵀ X = B in place for B [p, q] (row-major): forward substitution with L, then back
/// substitution with Lᵀ, each row of X updated as one q-wide vector.
fn solve_rows(l: &[f64], p: usize, q: usize, b: &mut [f64]) {
    // the columns are independent: a block of them per thread, each with every step it had
    let width = q.div_ceil(rayon::current_num_threads().max(1)).max(1);
    if p == 0 || width >= q {
        return solve_columns(l, p, q, b);
    }
    let mut blocks: Vec<(usize, Vec<f64>)> = (0..q)
        .step_by(width)
        .map(|from| {
            let to = (from + width).min(q);
            let cols = b.chunks_exact(q).flat_map(|row| &row[from..to]);
            (to - from, cols.copied().collect())
        })
        .collect();
    blocks
        .par_iter_mut()
        .for_each(|(w, x)| solve_columns(l, p, *w, x));
    for (i, row) in b.chunks_exact_mut(q).enumerate() {
        let mut from = 0;
        for (w, x) in &blocks {
            row[from..from + w].copy_from_slice(&x[i * w..(i + 1) * w]);
            from += w;
        }
    }
}

/// `solve_rows` on all of B's q columns in one thread.
fn solve_columns(l: &[f64], p: usize, q: usize, b: &mut [f64]) {
    for i in 0..p {
        let (done, rest) = b.split_at_mut(i * q);
        let row = &mut rest[..q];
        for k in 0..i {
            let c = l[i * p + k];
            if c != 0.0 {
                row.iter_mut()
                    .zip(&done[k * q..(k + 1) * q])
                    .for_each(|(r, x)| *r -= c * x);
            }
        }
        let d = l[i * p + i];
        row.iter_mut().for_each(|r| *r /= d);
    }
    for i in (0..p).rev() {
        let (head, tail) = b.split_at_mut((i + 1) * q);
        let row = &mut head[i * q..];
        for k in i + 1..p {
            let c = l[k * p + i];
            if c != 0.0 {
                row.iter_mut()
                    .zip(&tail[(k - i - 1) * q..(k - i) * q])
                    .for_each(|(r, x)| *r -= c * x);
            }
        }
        let d = l[i * p + i];
        row.iter_mut().for_each(|r| *r /= d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_added_in_parallel_sum_as_parts_added_in_turn() {
        // parts of uneven lengths (one over a chunk), features over several of the sums' row
        // blocks: the same f64 statistics, bit for bit
        let mut rng = moefleet_engine::rng::Rng::new(9);
        let (p, q) = (37, 3);
        let parts: Vec<(Vec<f32>, Vec<f32>)> = [3usize, 700, 1, 40, 9, 513, 2]
            .iter()
            .map(|&n| {
                let x = (0..n * p).map(|_| rng.sym()).collect();
                let y = (0..n * q).map(|_| rng.sym()).collect();
                (x, y)
            })
            .collect();
        let mut turn = Ridge::new(p, q);
        for (x, y) in &parts {
            turn.add(x, y);
        }
        let mut par = Ridge::new(p, q);
        par.add_parts(parts.len(), |i| {
            (Cow::from(&parts[i].0[..]), parts[i].1.clone())
        });
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&turn.xtx), bits(&par.xtx));
        assert_eq!(bits(&turn.xty), bits(&par.xty));
        assert_eq!(bits(&turn.y_sum), bits(&par.y_sum));
        assert_eq!((turn.yy.to_bits(), turn.n), (par.yy.to_bits(), par.n));
    }

    #[test]
    fn the_solve_in_column_blocks_has_the_one_threads_bits() {
        let mut rng = moefleet_engine::rng::Rng::new(4);
        let (p, q) = (23, 7);
        let x: Vec<f64> = (0..p * p).map(|_| rng.sym() as f64).collect();
        // a = x xᵀ + p I: positive definite
        let mut a = vec![0.0f64; p * p];
        for i in 0..p {
            for j in 0..p {
                a[i * p + j] = dot(&x[i * p..(i + 1) * p], &x[j * p..(j + 1) * p]);
            }
            a[i * p + i] += p as f64;
        }
        let l = cholesky(&a, p).unwrap();
        let b: Vec<f64> = (0..p * q).map(|_| rng.sym() as f64).collect();
        let mut one = b.clone();
        solve_columns(&l, p, q, &mut one);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        // blocks of 4 + 3 columns on two threads, 3 + 3 + 1 on three
        for threads in [2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut blocks = b.clone();
            pool.install(|| solve_rows(&l, p, q, &mut blocks));
            assert_eq!(bits(&blocks), bits(&one), "{threads} threads");
        }
        // and it solves: |B − a·X| ≤ γ_{3p+1} (|L| |Lᵀ| |X|) entry by entry (Higham, 2002,
        // Theorem 10.4: the backward error of a Cholesky solve), plus the rounding of the
        // residual's own products here (γ_p |a| |X|)
        let u = f64::EPSILON / 2.0;
        let gamma = |n: usize| n as f64 * u / (1.0 - n as f64 * u);
        for i in 0..p {
            for j in 0..q {
                let ax: f64 = (0..p).map(|k| a[i * p + k] * one[k * q + j]).sum();
                let llx: f64 = (0..p)
                    .map(|k| {
                        let llt: f64 = (0..p).map(|m| (l[i * p + m] * l[k * p + m]).abs()).sum();
                        llt * one[k * q + j].abs()
                    })
                    .sum();
                let ax_abs: f64 = (0..p).map(|k| (a[i * p + k] * one[k * q + j]).abs()).sum();
                let bound = gamma(3 * p + 1) * llx + gamma(p) * ax_abs;
                assert!(
                    (b[i * q + j] - ax).abs() <= bound,
                    "({i}, {j}): {} vs {ax}, bound {bound}",
                    b[i * q + j]
                );
            }
        }
    }

    #[test]
    fn the_lane_dot_is_the_plain_sum_within_rounding() {
        // |Σ error| <= n ε Σ|a_k b_k| for any summation order (Higham, 2002, §3.1): checked at
        // lengths around the lane count, against a sum in the plain order
        let mut rng = moefleet_engine::rng::Rng::new(5);
        for n in [0usize, 1, 7, 8, 9, 63, 64, 1151] {
            let a: Vec<f64> = (0..n).map(|_| rng.sym() as f64).collect();
            let b: Vec<f64> = (0..n).map(|_| rng.sym() as f64).collect();
            let plain: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            let abs: f64 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum();
            let bound = 2.0 * n as f64 * f64::EPSILON * abs;
            assert!((dot(&a, &b) - plain).abs() <= bound, "n = {n}");
        }
        assert_eq!(dot(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), 32.0);
    }

    #[test]
    fn recovers_a_linear_map_and_reports_its_fit() {
        // y = x Bᵀ exactly for a known B [2, 3], over 1500 rows (three chunks)
        let mut rng = moefleet_engine::rng::Rng::new(3);
        let b = [0.5f32, -1.0, 2.0, 0.0, 3.0, -0.25];
        let n = 1500;
        let x: Vec<f32> = (0..n * 3).map(|_| rng.sym()).collect();
        let mut y = vec![0.0f32; n * 2];
        for r in 0..n {
            for o in 0..2 {
                y[r * 2 + o] = (0..3).map(|c| b[o * 3 + c] * x[r * 3 + c]).sum();
            }
        }
        let mut rr = Ridge::new(3, 2);
        rr.add(&x[..700 * 3], &y[..700 * 2]);
        rr.add(&x[700 * 3..], &y[700 * 2..]);
        let s = rr.solve(1e-9).unwrap();
        for (got, want) in s.weights.w.iter().zip(b) {
            assert!((got - want).abs() < 1e-4, "{got} vs {want}");
        }
        assert!(s.r2 > 0.999_999, "{}", s.r2);
        assert_eq!(s.rows, n);
        // a strong ridge shrinks the solution's norm and explains less
        let shrunk = rr.solve(100.0).unwrap();
        let norm = |w: &[f32]| w.iter().map(|v| v * v).sum::<f32>();
        assert!(norm(&shrunk.weights.w) < 0.5 * norm(&s.weights.w));
        assert!(shrunk.r2 < s.r2);
        // noise the features cannot explain: R² near zero
        let mut z = Ridge::new(3, 1);
        let noise: Vec<f32> = (0..n).map(|_| rng.sym()).collect();
        z.add(&x, &noise);
        assert!(z.solve(1e-6).unwrap().r2 < 0.01);
    }
}
