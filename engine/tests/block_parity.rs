//! The block-format products (`kernels::blocks`) against their twins and against ggml itself:
//!
//! - SIMD against portable: **bit for bit** (tolerance 0). Both run, per output, ggml's AVX2
//!   operation sequence: exact integer lane sums, exact f16 × f16 scale products, the same FMAs in
//!   the same lane order, the same reduction. Any difference is a bug, not rounding.
//! - the product against the f64 product of the dequantised weights with the f32 activations:
//!   within the error of the activation conversion plus f32 accumulation (`bound`, derived there).
//! - one row alone, batched, through `matmul_shared`, on one thread or two: bit for bit.
//! - hand-made blocks whose products are exact: the known values.
//! - ggml's own library (llama.cpp's `libggml-cpu.so`, when present): activation bytes, dot
//!   products and dequantised rows bit for bit; python's `gguf` package: dequantised rows.

#![allow(clippy::unwrap_used)]

use half::f16;
use moefleet_engine::kernels::blocks::encode::{quantize, random_matrix};
use moefleet_engine::kernels::blocks::{
    matmul_shared, BlockFormat, BlockMatrix, QuantizedActs, WeightBytes,
};
use moefleet_engine::kernels::{cases, cpu_has_avx2, Isa};
use BlockFormat::*;

const ALL: [BlockFormat; 9] = [Q4_0, Q4_1, Q8_0, Q4K, Q5K, Q6K, F32, F16, Bf16];

/// Shapes (rows, cols / block) per format: one row, one block, odd counts, the model's widths.
fn shapes(f: BlockFormat) -> Vec<(usize, usize)> {
    match f.block() {
        256 => vec![(1, 256), (37, 512), (9, 1536)],
        32 => vec![(1, 32), (1, 576), (37, 96), (64, 576), (13, 1536)],
        // floats: also lengths with a tail after the steps of 32
        _ => vec![(1, 32), (5, 45), (3, 7), (37, 96), (13, 1536), (9, 589)],
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Activations with a zero block, a block of tiny values and one of large ones among random ones.
fn acts(n: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut x = cases::activations(n * cols, 2.0, seed);
    if cols >= 128 {
        x[32..64].iter_mut().for_each(|v| *v = 0.0);
        x[64..96].iter_mut().for_each(|v| *v *= 1e-6);
        x[96..128].iter_mut().for_each(|v| *v *= 300.0);
    }
    x
}

#[test]
fn simd_kernels_equal_the_reference_bit_for_bit() {
    if !cpu_has_avx2() {
        return;
    }
    for f in ALL {
        for (si, (rows, cols)) in shapes(f).into_iter().enumerate() {
            let m = random_matrix(f, rows, cols, 10 + si as u64).unwrap();
            for n in [1, 2, 3, 4, 7] {
                let x = acts(n, cols, 20 + n as u64);
                let (mut fast, mut slow) = (vec![0.0; n * rows], vec![0.0; n * rows]);
                m.matmul_on(Isa::Avx2, &x, &mut fast);
                m.matmul_reference(&x, &mut slow);
                assert_eq!(bits(&fast), bits(&slow), "{f} {rows}x{cols} n={n}");
                let mut dispatched = vec![0.0; n * rows];
                m.matmul(&x, &mut dispatched);
                assert_eq!(bits(&dispatched), bits(&slow), "{f} {rows}x{cols} n={n}");
            }
        }
    }
}

/// Bound on |matmul − Σ_j w_j x_j (in f64)| for one output, w the dequantised row and x the f32
/// activations. Two parts:
///
/// 1. the activation conversion. An element becomes `a_j` with |x_j − a_j| ≤ δ_j:
///    - Q8_0 / Q8_1: q = rne(x · 127/amax) is within ½ (+127·2⁻²⁴ for the product's rounding) of
///      x / d, d = amax/127; the kernel uses d16 = f16(d), |d − d16| ≤ 2⁻¹¹·d + 2⁻²⁵ (half an
///      f16 ulp, subnormals included), times |q| ≤ 127:
///      δ = d·(½ + 2⁻²⁰) + 127·(2⁻¹¹·d + 2⁻²⁵)
///    - Q8_K: d = 1/iscale in f32: δ = |d|·(½ + 2⁻¹⁶)
///    - F16: 2⁻¹¹·|x| + 2⁻²⁵; BF16: 2⁻⁸·|x|; F32: 0.
///
///    Every format's kernel equals Σ_j w_j a_j in exact arithmetic (the minimum and offset terms
///    go through exact integer sums of the same a_j) except Q4_1, whose Σ_b m_w · s_a uses
///    s = f16(d · Σq) in place of Σ a_j: |s − Σ x| ≤ 32 · d·(½ + 2⁻²⁰) + 2⁻¹¹·4064·d + 2⁻²⁵
///    (|Σq| ≤ 4064). Part 1 = Σ_j |w_j| δ_j (+ Σ_b |m_w| · that, for Q4_1).
/// 2. f32 rounding: each product and lane FMA rounds once (relative 2⁻²⁴) and a lane runs through
///    at most `steps` FMAs plus the scale product, the conversion of a lane sum and the final
///    additions (≤ 16 more): (steps + 16) · 2⁻²⁴ · T, with T = Σ_j (|w_j| + c_j) · (|x_j| + δ_j)
///    and c_j the magnitude of the term a format accumulates apart (|m_w| for Q4_1,
///    |dmin·m| for Q4_K/Q5_K, 32·|d·sc| for Q6_K's offset).
fn bound(m: &BlockMatrix, o: usize, x: &[f32]) -> f32 {
    let cols = m.cols;
    let mut w = vec![0.0f32; cols];
    m.dequantize_row(o, &mut w);
    let eps = 2f64.powi(-24);
    let block = m.format.block();
    let mut delta = vec![0.0f64; cols];
    let mut part1 = 0.0f64;
    let mut t = 0.0f64;
    let row = m.row(o);
    let bb = m.format.block_bytes();
    let f16_at =
        |b: &[u8], i: usize| f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32() as f64;
    let chunk = block.max(32);
    for (b, xb) in x.chunks(chunk).enumerate() {
        let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs())) as f64;
        for (j, &xv) in xb.iter().enumerate() {
            let c = b * chunk + j;
            delta[c] = match m.format {
                Q4_0 | Q4_1 | Q8_0 => {
                    let d = amax / 127.0;
                    d * (0.5 + 2f64.powi(-20)) + 127.0 * (d * 2f64.powi(-11) + 2f64.powi(-25))
                }
                Q4K | Q5K | Q6K => amax / 127.0 * (0.5 + 2f64.powi(-16)),
                F16 => (xv.abs() as f64) * 2f64.powi(-11) + 2f64.powi(-25),
                Bf16 => (xv.abs() as f64) * 2f64.powi(-8) + 1e-38,
                _ => 0.0,
            };
        }
    }
    for c in 0..cols {
        part1 += (w[c].abs() as f64) * delta[c];
        // the term a format accumulates apart from d·q, per element
        let blk = &row[c / block * bb..(c / block + 1) * bb];
        let apart = match m.format {
            Q4_1 => f16_at(blk, 2).abs(),
            Q4K | Q5K => {
                let (_, mins) = moefleet_engine::kernels::blocks::kquants::scales_mins(&blk[4..16]);
                f16_at(blk, 2).abs() * mins[c % 256 / 32] as f64
            }
            Q6K => 32.0 * (f16_at(blk, 208) * (blk[192 + c % 256 / 16] as i8) as f64).abs(),
            _ => 0.0,
        };
        t += (w[c].abs() as f64 + apart) * (x[c].abs() as f64 + delta[c]);
    }
    if m.format == Q4_1 {
        for (b, xb) in x.chunks(32).enumerate() {
            let d = xb.iter().fold(0.0f32, |a, v| a.max(v.abs())) as f64 / 127.0;
            let s_err =
                32.0 * d * (0.5 + 2f64.powi(-20)) + 2f64.powi(-11) * 4064.0 * d + 2f64.powi(-25);
            part1 += f16_at(&row[b * bb..], 2).abs() * s_err;
        }
    }
    let steps = (cols / 32).max(1) as f64;
    (part1 + (steps + 16.0) * eps * t) as f32
}

#[test]
fn products_stay_within_the_activation_conversion_bound() {
    for f in ALL {
        for (si, (rows, cols)) in shapes(f).into_iter().enumerate() {
            let m = random_matrix(f, rows, cols, 30 + si as u64).unwrap();
            let n = 3;
            let x = acts(n, cols, 40 + si as u64);
            let mut y = vec![0.0; n * rows];
            m.matmul(&x, &mut y);
            let mut w = vec![0.0f32; cols];
            let mut worst = 0.0f64;
            for o in 0..rows {
                m.dequantize_row(o, &mut w);
                for r in 0..n {
                    let xr = &x[r * cols..(r + 1) * cols];
                    let exact: f64 = w.iter().zip(xr).map(|(&a, &b)| a as f64 * b as f64).sum();
                    // Σ_j |w_j| · (largest |x| of j's block): the size the conversion works at
                    let block = f.block().max(32);
                    let mag: f64 = w
                        .iter()
                        .enumerate()
                        .map(|(j, &a)| {
                            let xb = &xr[j / block * block..((j / block + 1) * block).min(cols)];
                            a.abs() as f64 * xb.iter().fold(0.0f32, |m, v| m.max(v.abs())) as f64
                        })
                        .sum();
                    let err = (y[r * rows + o] as f64 - exact).abs();
                    let allowed = bound(&m, o, xr) as f64;
                    assert!(
                        err <= allowed,
                        "{f} {rows}x{cols} row {r} out {o}: {} vs {exact} (err {err:e} > {allowed:e})",
                        y[r * rows + o]
                    );
                    // the bound means something: a small part of the size it works at (about
                    // a 250th; Q4_1's m · s term can add up to 18 · d · |m| per block)
                    assert!(
                        allowed <= 0.02 * mag + 1e-6,
                        "{f}: bound {allowed:e} vs {mag:e}"
                    );
                    worst = worst.max(err / allowed.max(1e-30));
                }
            }
            assert!(
                worst > 0.0 || f == F32 || rows == 1,
                "{f}: no error at all is suspicious"
            );
        }
    }
}

#[test]
fn a_row_gives_the_same_bits_alone_batched_shared_and_threaded() {
    // 576 x 1536 crosses the parallel thresholds (2^16 weights for one input row, 2^20 for 7);
    // 71 rows on two threads split by input rows (40 and 31, an odd run), 7 by output rows
    for f in [Q4_1, Q8_0, Q4_0, Q6K, F16] {
        let (rows, cols) = (576, 1536);
        let m = random_matrix(f, rows, cols, 50).unwrap();
        let other = random_matrix(Q8_0, 64, cols, 51).unwrap();
        let n = 7;
        let many = acts(71, cols, 52);
        let x = many[..n * cols].to_vec();
        let mut all = vec![0.0; n * rows];
        m.matmul(&x, &mut all);
        for r in 0..n {
            let mut one = vec![0.0; rows];
            m.matmul(&x[r * cols..(r + 1) * cols], &mut one);
            assert_eq!(
                bits(&one),
                bits(&all[r * rows..(r + 1) * rows]),
                "{f} row {r}"
            );
        }
        let (mut a, mut b, mut c) = (vec![0.0; n * rows], vec![0.0; n * 64], vec![0.0; n * rows]);
        matmul_shared(&[&m, &other, &m], &x, &mut [&mut a, &mut b, &mut c]);
        let mut b_alone = vec![0.0; n * 64];
        other.matmul(&x, &mut b_alone);
        assert_eq!(bits(&a), bits(&all), "{f} shared");
        assert_eq!(bits(&c), bits(&all), "{f} shared, second use");
        assert_eq!(bits(&b), bits(&b_alone), "{f} shared, other type");
        let mut all71 = vec![0.0; 71 * rows];
        m.matmul(&many, &mut all71);
        assert_eq!(bits(&all71[..n * rows]), bits(&all), "{f} 71 rows");
        for nn in [1, n, 71] {
            let xs = &many[..nn * cols];
            let on = |threads: usize| {
                let mut y = vec![0.0; nn * rows];
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads);
                pool.build().unwrap().install(|| m.matmul(xs, &mut y));
                y
            };
            assert_eq!(bits(&on(1)), bits(&on(2)), "{f} threads, n={nn}");
            assert_eq!(
                bits(&on(2)),
                bits(&all71[..nn * rows]),
                "{f} pool vs global, n={nn}"
            );
        }
    }
}

#[test]
fn new_refuses_what_it_cannot_compute() {
    let e = BlockMatrix::new(Q5_0, 2, 32, WeightBytes::owned(vec![0; 44])).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("Q5_0") && msg.contains(&BlockFormat::supported_list()),
        "{msg}"
    );
    let e = BlockMatrix::new(Q4_1, 2, 48, WeightBytes::owned(vec![0; 60])).unwrap_err();
    assert!(
        e.to_string().contains("[2, 48]") && e.to_string().contains("whole blocks"),
        "{e}"
    );
    let e = BlockMatrix::new(Q6K, 2, 256, WeightBytes::owned(vec![0; 419])).unwrap_err();
    assert!(
        e.to_string().contains("419") && e.to_string().contains("420"),
        "{e}"
    );
    assert!(BlockMatrix::new(Q6K, 2, 256, WeightBytes::owned(vec![0; 420])).is_ok());
}

/// Integer activations with one ±127 per block: Q8_0/Q8_1 take d = 1 and q = x, Q8_K (max 127)
/// iscale = −1, d = −1, q = −x; so the converted activations are x itself and, with weights on
/// small grids, every product below is exact in f32.
fn grid_acts(cols: usize) -> Vec<f32> {
    (0..cols)
        .map(|j| {
            if j % 32 == 0 {
                127.0
            } else {
                ((j * 37) % 23) as f32 - 11.0
            }
        })
        .collect()
}

fn f16b(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_bits().to_le_bytes()
}

/// The hand-made row's values, written from ggml's layouts (not from the engine's code).
fn hand_made(f: BlockFormat) -> (Vec<u8>, Vec<f32>) {
    let mut b = Vec::new();
    let mut w = Vec::new();
    match f {
        Q4_0 | Q4_1 => {
            b.extend(f16b(if f == Q4_0 { 0.25 } else { 0.5 }));
            if f == Q4_1 {
                b.extend(f16b(-1.0));
            }
            b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
            for j in 0..32u8 {
                let q = if j < 16 { j } else { 31 - j } as f32;
                w.push(if f == Q4_0 {
                    0.25 * (q - 8.0)
                } else {
                    0.5 * q - 1.0
                });
            }
        }
        Q8_0 => {
            b.extend(f16b(0.125));
            for j in 0..32i32 {
                b.push((4 * j - 64) as i8 as u8);
                w.push(0.125 * (4 * j - 64) as f32);
            }
        }
        Q4K | Q5K => {
            b.extend(f16b(1.0));
            b.extend(f16b(0.5));
            // scales s + 1 and mins s, all below 16: bytes 0-3 scales, 4-7 mins, 8-11 both
            let (sc, mn): (Vec<u8>, Vec<u8>) = ((1..=8).collect(), (0..8).collect());
            b.extend(&sc[..4]);
            b.extend(&mn[..4]);
            b.extend((4..8).map(|s| sc[s] | (mn[s] << 4)));
            let qh: Vec<u8> = (0..32).map(|t| (t * 29 % 256) as u8).collect();
            if f == Q5K {
                b.extend(&qh);
            }
            let qs: Vec<u8> = (0..128)
                .map(|k| ((k * 7 % 16) | ((k * 3 % 16) << 4)) as u8)
                .collect();
            b.extend(&qs);
            for e in 0..256 {
                let (j, half, t) = (e / 64, e / 32 % 2, e % 32);
                let mut q = (qs[32 * j + t] >> (4 * half)) & 15;
                if f == Q5K {
                    q |= ((qh[t] >> (2 * j + half)) & 1) << 4;
                }
                let s = e / 32;
                w.push(sc[s] as f32 * q as f32 - 0.5 * mn[s] as f32);
            }
        }
        Q6K => {
            let ql: Vec<u8> = (0..128).map(|k| (k * 5 % 256) as u8).collect();
            let qh: Vec<u8> = (0..64).map(|k| (k * 11 % 256) as u8).collect();
            let sc: Vec<i8> = (0..16).map(|g| g as i8 - 8).collect();
            b.extend(&ql);
            b.extend(&qh);
            b.extend(sc.iter().map(|&s| s as u8));
            b.extend(f16b(0.5));
            w = vec![0.0; 256];
            for n in 0..2 {
                for l in 0..32 {
                    let h = qh[32 * n + l];
                    let (lo, hi) = (ql[64 * n + l], ql[64 * n + l + 32]);
                    let q = [
                        (lo & 15) | ((h & 3) << 4),
                        (hi & 15) | (((h >> 2) & 3) << 4),
                        (lo >> 4) | (((h >> 4) & 3) << 4),
                        (hi >> 4) | (((h >> 6) & 3) << 4),
                    ];
                    for k in 0..4 {
                        let s = sc[8 * n + l / 16 + 2 * k] as f32;
                        w[128 * n + 32 * k + l] = 0.5 * s * (q[k] as i32 - 32) as f32;
                    }
                }
            }
        }
        F32 | F16 | Bf16 => {
            w = (0..64).map(|j| (j % 9) as f32 * 0.5 - 2.0).collect();
            b = quantize(f, &w).unwrap();
        }
        _ => unreachable!(),
    }
    (b, w)
}

#[test]
fn hand_made_blocks_give_known_values() {
    for f in ALL {
        let (b, w) = hand_made(f);
        let cols = w.len();
        let m = BlockMatrix::new(f, 1, cols, WeightBytes::owned(b)).unwrap();
        let mut got = vec![0.0; cols];
        m.dequantize_row(0, &mut got);
        assert_eq!(got, w, "{f} dequantised");
        let x = grid_acts(cols);
        let xq = QuantizedActs::for_weights(f, &x, cols);
        assert_eq!(xq.values(), x, "{f}: the grid activations convert exactly");
        let want: f64 = w.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
        for isa in [Isa::Portable, Isa::Avx2] {
            if isa == Isa::Avx2 && !cpu_has_avx2() {
                continue;
            }
            let mut y = [0.0f32];
            m.matmul_on(isa, &x, &mut y);
            assert_eq!(y[0] as f64, want, "{f} {isa:?}");
        }
    }
}

/// Against ggml's own library and python's `gguf` package.
#[path = "block_parity/oracles.rs"]
mod oracles;

/// Batches of every size from 2 to 9 against outputs that are not a whole number of tiles (37),
/// for the formats with a batch kernel of their own on AVX-512 (`blocks::avx512` with VNNI, and
/// F32's in `avx2_f`; two input rows to a register): every row as alone (the one-row kernel) and
/// as the portable reference.
/// A batch holding a −128 activation byte (NaN input) takes the other path and must agree too.
#[test]
fn every_batch_size_gives_each_rows_bits() {
    println!(
        "GGUF block batch paths run: {} (batches of two or more rows against Q4_0, Q4_1, Q8_0)",
        moefleet_engine::kernels::blocks::legacy_batch_path()
    );
    let (rows, cols) = (37, 256);
    for f in [Q4_0, Q4_1, Q8_0, F32] {
        let m = random_matrix(f, rows, cols, 60).unwrap();
        for n in 2..=9 {
            let mut x = acts(n, cols, 61 + n as u64);
            if n == 5 {
                x[3 * cols + 7] = f32::NAN;
            }
            let mut all = vec![0.0; n * rows];
            m.matmul(&x, &mut all);
            let mut reference = vec![0.0; n * rows];
            m.matmul_reference(&x, &mut reference);
            assert_eq!(
                bits(&all),
                bits(&reference),
                "{f} n={n}: batch vs reference"
            );
            for r in 0..n {
                let mut one = vec![0.0; rows];
                m.matmul(&x[r * cols..(r + 1) * cols], &mut one);
                let got = &all[r * rows..(r + 1) * rows];
                assert_eq!(bits(&one), bits(got), "{f} n={n} row {r}: batch vs alone");
            }
        }
    }
}
