//! Fast kernels against their plain twins, over the shared case list (`kernels::cases`), each with
//! the tolerance its case states; and the batching invariant the engine's parity relies on.

#![allow(clippy::unwrap_used)]

use half::f16;
use moefleet_engine::kernels::cases::{
    self, ATTENTION_CASES, ATTENTION_TOL, INT4_CASES, INT8_CASES, LINEAR_CASES,
};
use moefleet_engine::kernels::conv::ConvTaps;
use moefleet_engine::kernels::linear::{self, Linear};
use moefleet_engine::kernels::quant::{QMAX, QMAX_INT4};
use moefleet_engine::kernels::{attention, f16 as kf16, int4, int8, reference, router, Isa};
use moefleet_engine::rng::Rng;

/// |fast − ref| / Σ|w x| per output, against the case tolerance.
fn check(name: &str, fast: &[f32], slow: &[f32], mag: &[f32], tol: f32) {
    check_q(name, fast, slow, mag, &vec![0.0; fast.len()], tol);
}

/// As `check`, plus the activation quantisation bound of the integer kernels: `qbound[i]` =
/// Σ_c |w| · (half a quantisation step of c's block) (kernels::quant), which the error may add.
fn check_q(name: &str, fast: &[f32], slow: &[f32], mag: &[f32], qbound: &[f32], tol: f32) {
    for i in 0..fast.len() {
        let err = (fast[i] - slow[i]).abs();
        let allowed = tol * mag[i] + 1.001 * qbound[i];
        assert!(
            err <= allowed,
            "{name}: output {i}: fast {} ref {} (err {err:e} > {allowed:e})",
            fast[i],
            slow[i]
        );
    }
}

/// Per element, half a quantisation step of its block: (max|x| over the block) / (2 · qmax), with
/// qmax 127 for the INT4 products' activations and 32767 for the INT8 products'.
fn half_steps(x: &[f32], block: usize, qmax: f32) -> Vec<f32> {
    x.chunks(block)
        .flat_map(|b| {
            let m = b.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            std::iter::repeat_n(m / (2.0 * qmax), b.len())
        })
        .collect()
}

#[test]
fn int4_products_match_reference() {
    for (ci, c) in INT4_CASES.iter().filter(|c| c.quick).enumerate() {
        let w = cases::int4_matrix(c.rows, c.cols, 100 + ci as u64);
        let x = cases::activations(c.n * c.cols, 1.0, 200 + ci as u64);
        let (mut fast, mut slow) = (vec![0.0; c.n * c.rows], vec![0.0; c.n * c.rows]);
        int4::matmul(&w.view(), &x, &mut fast);
        int4::matmul_reference(&w.view(), &x, &mut slow);
        let mut portable = vec![0.0; c.n * c.rows];
        int4::matmul_on(Isa::Portable, &w.view(), &x, c.n, 0..c.rows, &mut portable);
        // Σ|w x| per output via the reference on |w| and |x|
        let wa = abs_int4(&w);
        let xa: Vec<f32> = x.iter().map(|v| v.abs()).collect();
        let mut mag = vec![0.0; c.n * c.rows];
        int4::matmul_reference(&wa.view(), &xa, &mut mag);
        let mut qbound = vec![0.0; c.n * c.rows];
        int4::matmul_reference(
            &wa.view(),
            &half_steps(&x, int4::GROUP, QMAX_INT4),
            &mut qbound,
        );
        check_q(c.name, &fast, &slow, &mag, &qbound, c.tol);
        check(c.name, &portable, &slow, &mag, c.tol);
        // each SIMD kernel on its own, whichever the dispatch picked
        if moefleet_engine::kernels::cpu_has_avx2() {
            let mut avx2 = vec![0.0; c.n * c.rows];
            int4::matmul_on(Isa::Avx2, &w.view(), &x, c.n, 0..c.rows, &mut avx2);
            check_q(c.name, &avx2, &slow, &mag, &qbound, c.tol);
        }
    }
}

/// The same matrix with every weight's magnitude (nibble 8 + |q − 8|; q = 0, weight −8·s, maps to
/// 15, i.e. 7·s: the magnitude used for the tolerance is understated by at most 1/8 there).
fn abs_int4(w: &int4::Int4Matrix) -> int4::Int4Matrix {
    let f = |n: u8| (8 + (n as i32 - 8).unsigned_abs().min(7)) as u8;
    let (q, scales) = w.row_major();
    let q = q.iter().map(|&b| f(b & 15) | (f(b >> 4) << 4)).collect();
    int4::Int4Matrix::new(w.rows, w.cols, q, scales)
}

#[test]
fn linear_products_match_reference() {
    for (ci, c) in LINEAR_CASES.iter().filter(|c| c.quick).enumerate() {
        let w = Linear::new(
            c.rows,
            c.cols,
            cases::activations(c.rows * c.cols, 0.5, 300 + ci as u64),
        );
        let x = cases::activations(c.n * c.cols, 1.0, 400 + ci as u64);
        let (mut fast, mut slow) = (vec![0.0; c.n * c.rows], vec![0.0; c.n * c.rows]);
        linear::matmul(&w, &x, &mut fast);
        reference::linear_matmul(&w, &x, &mut slow);
        let wa = Linear::new(c.rows, c.cols, w.w.iter().map(|v| v.abs()).collect());
        let xa: Vec<f32> = x.iter().map(|v| v.abs()).collect();
        let mut mag = vec![0.0; c.n * c.rows];
        reference::linear_matmul(&wa, &xa, &mut mag);
        check(c.name, &fast, &slow, &mag, c.tol);
    }
}

#[test]
fn int4_row_is_bit_identical_alone_or_batched_and_sliced() {
    let w = cases::int4_matrix(96, 256, 5);
    let n = 7;
    let x = cases::activations(n * 256, 2.0, 6);
    let mut all = vec![0.0; n * 96];
    int4::matmul(&w.view(), &x, &mut all);
    for r in 0..n {
        let mut one = vec![0.0; 96];
        int4::matmul(&w.view(), &x[r * 256..(r + 1) * 256], &mut one);
        assert_eq!(
            one.to_bits(),
            all[r * 96..(r + 1) * 96].to_bits(),
            "row {r}"
        );
    }
    // slices (as dense-as-slices uses) equal the reference on the same rows and columns: one the
    // SIMD kernel cannot take (its first column inside a four of groups: the portable kernel on
    // the quantised activations), and one it takes whose rows end inside a tile and whose last
    // four it reads only in part (a pair and a lone group of a stored four)
    let w2 = cases::int4_matrix(96, 480, 8);
    for (m, rows, cols) in [(&w, 32..64, 64..192), (&w2, 32..61, 128..352)] {
        let v = m.view_part(rows.clone(), cols.clone());
        assert_eq!(v.tiled(), cols.start % 128 == 0);
        let xs = cases::activations(cols.len(), 1.0, 7);
        let (mut a, mut b) = (vec![0.0; rows.len()], vec![0.0; rows.len()]);
        int4::matmul(&v, &xs, &mut a);
        int4::matmul_reference(&v, &xs, &mut b);
        let wa = abs_int4(m);
        let mut qbound = vec![0.0; rows.len()];
        int4::matmul_reference(
            &wa.view_part(rows.clone(), cols.clone()),
            &half_steps(&xs, int4::GROUP, QMAX_INT4),
            &mut qbound,
        );
        for i in 0..rows.len() {
            assert!(
                (a[i] - b[i]).abs() <= 1e-5 * (1.0 + b[i].abs()) + 1.001 * qbound[i],
                "{rows:?} {cols:?} {i}: {} vs {}",
                a[i],
                b[i]
            );
            let direct: f32 = (0..cols.len())
                .map(|c| m.view().weight(rows.start + i, cols.start + c) * xs[c])
                .sum();
            assert!((direct - b[i]).abs() <= 1e-5 * (1.0 + b[i].abs()));
        }
    }
}

#[test]
fn int4_large_product_is_split_across_threads_without_changing_bits() {
    // 2048 x 1024 crosses the parallel threshold: two threads (or more) against one, bit for bit,
    // and both against the reference within the quantisation bound
    let w = cases::int4_matrix(2048, 1024, 9);
    for n in [1, 2] {
        let x = cases::activations(n * 1024, 1.0, 10);
        let on = |threads: usize| {
            let mut y = vec![0.0; n * 2048];
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads);
            pool.build()
                .unwrap()
                .install(|| int4::matmul(&w.view(), &x, &mut y));
            y
        };
        let y = on(2);
        assert_eq!(y.to_bits(), on(1).to_bits(), "{n} rows");
        let mut slow = vec![0.0; n * 2048];
        int4::matmul_reference(&w.view(), &x, &mut slow);
        let mut qbound = vec![0.0; n * 2048];
        let q = half_steps(&x, int4::GROUP, QMAX_INT4);
        int4::matmul_reference(&abs_int4(&w).view(), &q, &mut qbound);
        for i in 0..y.len() {
            assert!(
                (y[i] - slow[i]).abs() <= 1e-4 * (1.0 + slow[i].abs()) + 1.001 * qbound[i],
                "{i}"
            );
        }
    }
}

#[test]
fn int8_products_match_reference() {
    for (ci, c) in INT8_CASES.iter().filter(|c| c.quick).enumerate() {
        let w = cases::int8_matrix(c.rows, c.cols, 300 + ci as u64);
        let x = cases::activations(c.n * c.cols, 1.0, 400 + ci as u64);
        let (mut fast, mut slow) = (vec![0.0; c.n * c.rows], vec![0.0; c.n * c.rows]);
        int8::matmul(&w, &x, &mut fast);
        reference::int8_matmul(&w, &x, &mut slow);
        let mut portable = vec![0.0; c.n * c.rows];
        int8::matmul_on(Isa::Portable, &w, &x, c.n, 0..c.rows, &mut portable);
        let wa = int8::Int8Matrix::new(
            w.rows,
            w.cols,
            w.q.iter().map(|v| v.saturating_abs()).collect(),
            w.scales.clone(),
        );
        let xa: Vec<f32> = x.iter().map(|v| v.abs()).collect();
        let mut mag = vec![0.0; c.n * c.rows];
        reference::int8_matmul(&wa, &xa, &mut mag);
        let mut qbound = vec![0.0; c.n * c.rows];
        let block = int8::act_block(c.cols).unwrap_or(c.cols);
        reference::int8_matmul(&wa, &half_steps(&x, block, QMAX), &mut qbound);
        check_q(c.name, &fast, &slow, &mag, &qbound, c.tol);
        check(c.name, &portable, &slow, &mag, c.tol);
        // batching never changes a row's bits
        let mut one = vec![0.0; c.rows];
        int8::matmul(&w, &x[..c.cols], &mut one);
        assert_eq!(one.to_bits(), fast[..c.rows].to_bits(), "{}", c.name);
    }
}

#[test]
fn f16_rounding_is_exact_including_overflow_ties_and_subnormals() {
    let mut v: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        65504.0,
        65519.0,
        65520.0,
        -70000.0,
        1e-8,
        6.0e-8,
        2.98e-8,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        3.25159,
        -2.81828,
        1e5,
    ];
    let mut rng = Rng::new(11);
    v.extend((0..1000).map(|_| (rng.sym() * 20.0).exp() * rng.sym()));
    let mut fast = v.clone();
    kf16::round(&mut fast);
    for (i, (&a, &x)) in fast.iter().zip(&v).enumerate() {
        let want = f16::from_f32(x).to_f32();
        assert_eq!(a.to_bits(), want.to_bits(), "value {i}: {x}");
    }
    assert_eq!(fast[5], f32::INFINITY, "65520 rounds past the f16 maximum");
    assert_eq!(fast[6], f32::NEG_INFINITY);
    let mut nan = vec![f32::NAN; 9];
    kf16::round(&mut nan);
    assert!(nan.iter().all(|v| v.is_nan()));
}

#[test]
fn attention_loops_match_reference() {
    for (ci, &(name, n, d)) in ATTENTION_CASES.iter().enumerate() {
        let q = cases::activations(d, 1.0, 500 + ci as u64);
        let keys = cases::activations(n * d, 1.0, 600 + ci as u64);
        let mut fast = vec![0.0; n];
        attention::scores(&q, &keys, &mut fast);
        for j in 0..n {
            let k = &keys[j * d..(j + 1) * d];
            let slow = reference::dot(&q, k);
            let mag: f32 = q.iter().zip(k).map(|(a, b)| (a * b).abs()).sum();
            assert!(
                (fast[j] - slow).abs() <= ATTENTION_TOL * mag,
                "{name} score {j}"
            );
        }
        let p = cases::activations(n, 1.0, 700 + ci as u64);
        let mut fo = vec![0.5; d];
        let mut so = vec![0.5; d];
        attention::weighted_sum(&p, &keys, &mut fo);
        for j in 0..n {
            reference::axpy(p[j], &keys[j * d..(j + 1) * d], &mut so);
        }
        for i in 0..d {
            let mag: f32 = 0.5 + (0..n).map(|j| (p[j] * keys[j * d + i]).abs()).sum::<f32>();
            assert!(
                (fo[i] - so[i]).abs() <= ATTENTION_TOL * mag,
                "{name} value {i}"
            );
        }
    }
}

/// The relative-position bias (`r · P[:, dist]` over d_rel = 8 and 16, extents 512 and 1024, at
/// distance counts that leave vector tails) against float64: d_rel products summed in f32 err by at
/// most d_rel · 2⁻²⁴ of Σ|r_k P_k|, inside ATTENTION_TOL. A row's bias at a distance does not
/// depend on how many distances are asked for (bit for bit): prefill windows rely on it.
#[test]
fn relative_position_bias_matches_float64() {
    for (ci, &(d_rel, extent)) in [(8usize, 512usize), (16, 1024), (16, 37)]
        .iter()
        .enumerate()
    {
        let table = cases::activations(d_rel * extent, 1.0, 900 + ci as u64);
        let r = cases::activations(d_rel, 1.0, 950 + ci as u64);
        let mut full = vec![0.0f32; extent];
        attention::rel_bias(&r, &table, extent, &mut full);
        for (i, &got) in full.iter().enumerate() {
            let want: f64 = (0..d_rel)
                .map(|k| r[k] as f64 * table[k * extent + i] as f64)
                .sum();
            let mag: f64 = (0..d_rel)
                .map(|k| (r[k] as f64 * table[k * extent + i] as f64).abs())
                .sum();
            assert!(
                (got as f64 - want).abs() <= ATTENTION_TOL as f64 * mag,
                "d_rel {d_rel}, distance {i}: {got} vs {want}"
            );
        }
        for near in [1, 7, 33, extent / 2 + 3] {
            let mut part = vec![0.0f32; near.min(extent)];
            attention::rel_bias(&r, &table, extent, &mut part);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&part), bits(&full[..part.len()]), "near {near}");
        }
    }
}

#[test]
fn short_convolution_is_bit_identical_to_reference() {
    for &(ch, k) in &[(64usize, 4usize), (37, 4), (16, 2), (8, 1)] {
        let taps = cases::activations(ch * k, 0.3, ch as u64);
        let conv = ConvTaps::new(ch, k, taps.clone());
        let u = cases::activations(ch, 1.0, 1);
        let hist_v: Vec<Vec<f32>> = (0..k.saturating_sub(1))
            .map(|j| cases::activations(ch, 1.0, 2 + j as u64))
            .collect();
        let hist: Vec<&[f32]> = hist_v.iter().map(|v| &v[..]).collect();
        let (mut a, mut b) = (vec![0.0; ch], vec![0.0; ch]);
        conv.apply(&u, &hist, &mut a);
        reference::short_conv(&u, &hist, &taps, k, &mut b);
        assert_eq!(a.to_bits(), b.to_bits(), "channels {ch} kernel {k}");
    }
}

#[test]
fn routing_matches_full_sort_with_ties() {
    let mut rng = Rng::new(12);
    for trial in 0..200 {
        let n = 16 + (trial % 5) * 60;
        // quantised values force ties
        let sigma: Vec<f32> = (0..n).map(|_| (rng.unit() * 8.0).floor() / 8.0).collect();
        let bias: Vec<f32> = (0..n)
            .map(|_| {
                if trial % 2 == 0 {
                    0.0
                } else {
                    (rng.unit() * 4.0).floor() / 16.0
                }
            })
            .collect();
        let k = 1 + trial % 8;
        assert_eq!(
            router::top_k_partial(&sigma, &bias, k),
            reference::top_k(&sigma, &bias, k),
            "trial {trial}"
        );
    }
}

#[test]
fn routing_weights_are_normalised_over_selected_and_shared() {
    let h = 64;
    let n_routed = 16;
    let wg = cases::activations((n_routed + 1) * h, 0.3, 13);
    let bias = cases::activations(n_routed, 0.05, 14);
    let x = cases::activations(h, 1.0, 15);
    let s = router::route(&wg, &bias, &x, 2, 3.0);
    assert_eq!(s.ids.len(), 3);
    assert_eq!(s.ids[2], 16, "shared expert id follows the routed ones");
    let mut sig = vec![0.0; n_routed + 1];
    reference::gate_sigmoid(&wg, &x, &mut sig);
    assert_eq!(
        &s.ids[..2],
        &reference::top_k(&sig[..n_routed], &bias, 2)[..]
    );
    let z: f32 = s.ids.iter().map(|&i| sig[i]).sum();
    for (k, &i) in s.ids.iter().enumerate() {
        assert!((s.weights[k] - sig[i] / z * 3.0).abs() < 1e-5);
    }
    assert!((s.weights.iter().sum::<f32>() - 3.0).abs() < 1e-5);
}

trait Bits {
    fn to_bits(&self) -> Vec<u32>;
}

impl Bits for [f32] {
    fn to_bits(&self) -> Vec<u32> {
        self.iter().map(|v| v.to_bits()).collect()
    }
}

impl Bits for Vec<f32> {
    fn to_bits(&self) -> Vec<u32> {
        self.iter().map(|v| v.to_bits()).collect()
    }
}

/// With the activations replaced by the values their quantisation stands for, the integer
/// kernels equal the f32 reference up to accumulation order (the case tolerance, 1e-5 of Σ|w x|).
#[test]
fn integer_kernels_equal_reference_on_quantised_activations() {
    if !moefleet_engine::kernels::quantises_activations() {
        return;
    }
    use moefleet_engine::kernels::quant::QuantRows;
    for (ci, c) in INT4_CASES.iter().filter(|c| c.quick).enumerate() {
        let w = cases::int4_matrix(c.rows, c.cols, 500 + ci as u64);
        let x = cases::activations(c.n * c.cols, 1.0, 600 + ci as u64);
        let (mut fast, mut slow) = (vec![0.0; c.n * c.rows], vec![0.0; c.n * c.rows]);
        int4::matmul(&w.view(), &x, &mut fast);
        int4::matmul_reference(&w.view(), &QuantRows::int4(&x, c.cols).values(), &mut slow);
        let xa: Vec<f32> = x.iter().map(|v| v.abs()).collect();
        let mut mag = vec![0.0; c.n * c.rows];
        int4::matmul_reference(&abs_int4(&w).view(), &xa, &mut mag);
        check(c.name, &fast, &slow, &mag, c.tol);
    }
    for (ci, c) in INT8_CASES.iter().filter(|c| c.quick).enumerate() {
        let w = cases::int8_matrix(c.rows, c.cols, 700 + ci as u64);
        let x = cases::activations(c.n * c.cols, 1.0, 800 + ci as u64);
        let block = int8::act_block(c.cols).unwrap();
        let (mut fast, mut slow) = (vec![0.0; c.n * c.rows], vec![0.0; c.n * c.rows]);
        int8::matmul(&w, &x, &mut fast);
        reference::int8_matmul(&w, &QuantRows::new(&x, c.cols, block).values(), &mut slow);
        let wa = int8::Int8Matrix::new(
            w.rows,
            w.cols,
            w.q.iter().map(|v| v.saturating_abs()).collect(),
            w.scales.clone(),
        );
        let xa: Vec<f32> = x.iter().map(|v| v.abs()).collect();
        let mut mag = vec![0.0; c.n * c.rows];
        reference::int8_matmul(&wa, &xa, &mut mag);
        check(c.name, &fast, &slow, &mag, c.tol);
    }
}

/// The parallel attention kernel's pieces against a float64 two-pass softmax: one pass over all keys,
/// and key blocks of 2048 positions merged in order (as the engine splits long caches across cores),
/// at 1k to 256k positions with a distance bias on the nearest keys. Outputs are convex combinations
/// of the values: tolerance 2e-5 of max|v| (f32 accumulation over up to 2^18 keys and the polynomial exp).
#[test]
fn blocked_attention_matches_float64_softmax_up_to_256k_positions() {
    use moefleet_engine::kernels::attention::{attend_block, Partial, ScoreRule};
    let (heads, d, near) = (4usize, 16usize, 64usize);
    for &n in &[1024usize, 16_384, 262_144] {
        let keys = cases::activations(n * d, 2.0, n as u64);
        let values = cases::activations(n * d, 1.0, n as u64 + 1);
        let q = cases::activations(heads * d, 2.0, n as u64 + 2);
        let bias = cases::activations(heads * near, 0.5, n as u64 + 3);
        let (tau, inv_d) = (1.3f32, 1.0 / d as f32);
        let rule = |dist0| ScoreRule {
            tau,
            inv_d,
            bias: &bias,
            near,
            dist0,
        };
        // float64 reference
        let mut want = vec![0.0f64; heads * d];
        for h in 0..heads {
            let s: Vec<f64> = (0..n)
                .map(|j| {
                    let dot: f64 = (0..d)
                        .map(|i| q[h * d + i] as f64 * keys[j * d + i] as f64)
                        .sum();
                    let dist = n - 1 - j;
                    let b = if dist < near {
                        bias[h * near + dist] as f64
                    } else {
                        0.0
                    };
                    tau as f64 * (dot * inv_d as f64 + b)
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|v| (v - m).exp()).sum();
            for (j, sj) in s.iter().enumerate() {
                let p = (sj - m).exp() / z;
                for i in 0..d {
                    want[h * d + i] += p * values[j * d + i] as f64;
                }
            }
        }
        let finish = |parts: &[Partial]| {
            let mut out = vec![0.0f32; heads * d];
            for (h, p) in parts.iter().enumerate() {
                p.finish(&mut out[h * d..(h + 1) * d]);
            }
            out
        };
        let mut scratch = Vec::new();
        let mut whole = vec![Partial::empty(d); heads];
        attend_block(&q, &keys, &values, &rule(n - 1), &mut whole, &mut scratch);
        let mut merged = vec![Partial::empty(d); heads];
        for b0 in (0..n).step_by(2048) {
            let b1 = (b0 + 2048).min(n);
            let mut part = vec![Partial::empty(d); heads];
            let (k, v) = (&keys[b0 * d..b1 * d], &values[b0 * d..b1 * d]);
            attend_block(&q, k, v, &rule(n - 1 - b0), &mut part, &mut scratch);
            for (a, b) in merged.iter_mut().zip(&part) {
                a.merge(b);
            }
        }
        for (name, got) in [
            ("one pass", finish(&whole)),
            ("merged blocks", finish(&merged)),
        ] {
            for i in 0..heads * d {
                assert!(
                    (got[i] as f64 - want[i]).abs() <= 2e-5,
                    "{n} positions, {name}, output {i}: {} vs {}",
                    got[i],
                    want[i]
                );
            }
        }
    }
}

/// Safe kernel entry points check what their SIMD code relies on, so a bad call panics with a
/// message instead of reading past a buffer.
#[test]
fn safe_kernel_calls_check_their_preconditions() {
    use std::panic::catch_unwind;
    let m = moefleet_engine::kernels::cases::int4_matrix(64, 64, 1);
    let x = vec![0.5f32; 64];
    let refused = |f: &(dyn Fn() + std::panic::RefUnwindSafe)| catch_unwind(f).is_err();
    // a view edited to claim more rows than its matrix has
    assert!(refused(&|| {
        let mut v = m.view();
        v.rows = 1000;
        let mut y = vec![0.0f32; 1000];
        int4::matmul(&v, &x, &mut y);
    }));
    // output rows outside the matrix, on either instruction set
    for isa in [Isa::Portable, moefleet_engine::kernels::isa()] {
        assert!(refused(&|| {
            let mut y = vec![0.0f32; 128];
            int4::matmul_on(isa, &m.view(), &x, 1, 60..70, &mut y);
        }));
    }
    // keys shorter than the scores asked for
    assert!(refused(&|| {
        let mut out = vec![0.0f32; 4];
        attention::scores(&[1.0; 8], &[0.0; 16], &mut out);
    }));
    assert!(refused(&|| {
        let mut out = vec![0.0f32; 8];
        attention::weighted_sum(&[1.0; 4], &[0.0; 16], &mut out);
    }));
    // a bias table shorter than its rows and extent claim, or more distances than the extent
    assert!(refused(&|| {
        let mut bias = vec![0.0f32; 8];
        attention::rel_bias(&[1.0; 4], &[0.0; 24], 8, &mut bias);
    }));
    assert!(refused(&|| {
        let mut bias = vec![0.0f32; 9];
        attention::rel_bias(&[1.0; 4], &[0.0; 32], 8, &mut bias);
    }));
    // an INT8 matrix whose fields were edited
    let mut w8 = moefleet_engine::kernels::cases::int8_matrix(16, 32, 2);
    w8.rows = 64;
    assert!(refused(&|| {
        let mut y = vec![0.0f32; 64];
        int8::matmul(&w8, &[0.1; 32], &mut y);
    }));
    // the checks pass on good calls
    let mut y = vec![0.0f32; 64];
    int4::matmul(&m.view(), &x, &mut y);
    assert!(y.iter().all(|v| v.is_finite()));
}
