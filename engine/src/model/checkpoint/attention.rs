//! Attention of a checkpoint layer over the rows of a frame: q, k, v projections (plus biases and
//! per-head q/k norms where the file has them), RoPE at each row's position, keys and values
//! written to the stream's cache rounded to f16 (llama.cpp's default cache type), then causal
//! grouped-query attention with scale 1/sqrt(D) and the output projection.
//!
//! The attention loop is ggml's CPU flash-attention loop
//! (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`) as llama-server runs it for batches of
//! fewer than 64 rows and for single-row decode while the cache holds at most 256 positions: the
//! query is rounded to f16, each score is an f16·f16 dot product summed in f32 in ggml's lane order
//! (`vecmath::dot_f16`), and the values are accumulated in f16 with an online softmax (`scale` on
//! a new maximum, then a fused multiply-add, each rounded to f16; the sum `S·ms + vs` fused too),
//! divided by the sum at the end. With SmolLM2 this gives llama.cpp's bits exactly
//! (`tests/gguf_bitexact.rs`). We use that loop for every row and every length, so a row gives
//! the same bits alone or in a prefill window; llama.cpp does not: it switches to f32 tiles
//! (`ggml_compute_forward_flash_attn_ext_tiled`) for batches of 64 rows or more, and for a
//! single-row decode over a key view of 512 or more (its views are padded to 256, so from the
//! 257th cached position) splits the keys into one range per thread and merges the ranges'
//! partial sums (`ggml_flash_attn_ext_reduce_partials`), so its result then depends on its thread
//! count. Past those bounds bit-for-bit agreement is not promised.

use half::f16;
use rayon::prelude::*;

use super::CheckpointLayer;
use super::{rope, tap, vecmath};
use crate::kernels::{self, blocks};
use crate::model::attention::Segment;
use crate::model::config::ModelConfig;

/// Rows × heads × cached positions below which the loop stays on the calling thread.
const PAR_MIN_WORK: usize = 1 << 15;

/// `out = W_o · attention(xn)` for every row of the frame; `slot` indexes the layer in the states.
pub fn forward(
    c: &ModelConfig,
    l: &CheckpointLayer,
    slot: usize,
    segs: &mut [Segment<'_>],
    xn: &[f32],
    out: &mut [f32],
) {
    let (d, nq) = (c.head_dim, c.n_q_heads);
    let nkv = c.n_kv_heads_global;
    let n = xn.len() / c.hidden;
    let mut q = vec![0.0f32; n * nq * d];
    let mut k = vec![0.0f32; n * nkv * d];
    let mut v = vec![0.0f32; n * nkv * d];
    blocks::matmul_shared(&[&l.q, &l.k, &l.v], xn, &mut [&mut q, &mut k, &mut v]);
    tap::emit("Qcur", l.index, &q);
    tap::emit("Kcur", l.index, &k);
    tap::emit("Vcur", l.index, &v);
    for (m, b) in [
        (&mut q, &l.q_bias),
        (&mut k, &l.k_bias),
        (&mut v, &l.v_bias),
    ] {
        if let Some(b) = b {
            for row in m.chunks_exact_mut(b.len()) {
                row.iter_mut().zip(b).for_each(|(x, bv)| *x += bv);
            }
        }
    }
    if let Some(w) = &l.q_norm {
        super::norm::rms_norm(&mut q, w, c.rms_eps);
    }
    if let Some(w) = &l.k_norm {
        super::norm::rms_norm(&mut k, w, c.rms_eps);
    }
    // rotate every row at its position and round keys and values to the f16 cache (rows are
    // independent: a window's spread over the pool), then cache them, stream by stream
    let positions: Vec<usize> = segs
        .iter()
        .flat_map(|s| {
            let p0 = s.state.pos();
            p0..p0 + s.rows
        })
        .collect();
    let (qw, kw) = (nq * d, nkv * d);
    let par = n >= super::norm::PAR_MIN_ROWS && kernels::threads() > 1;
    if let Some(r) = &c.rope {
        let rotate = |((p, qr), kr): ((&usize, &mut [f32]), &mut [f32])| {
            let (cos, sin) = rope::angles(r, *p);
            rope::apply(r, d, &cos, &sin, qr);
            rope::apply(r, d, &cos, &sin, kr);
        };
        if par {
            let rows = positions.par_iter().zip(q.par_chunks_exact_mut(qw));
            rows.zip(k.par_chunks_exact_mut(kw)).for_each(rotate);
        } else {
            let rows = positions.iter().zip(q.chunks_exact_mut(qw));
            rows.zip(k.chunks_exact_mut(kw)).for_each(rotate);
        }
    }
    let round = |x: &f32| f16::from_f32(*x).to_f32();
    let (k16, v16): (Vec<f32>, Vec<f32>) = if par {
        (
            k.par_iter().map(round).collect(),
            v.par_iter().map(round).collect(),
        )
    } else {
        (k.iter().map(round).collect(), v.iter().map(round).collect())
    };
    let mut row = 0;
    for seg in segs.iter_mut() {
        let p0 = seg.state.pos();
        for i in 0..seg.rows {
            let at = row * kw..(row + 1) * kw;
            seg.state.layers[slot]
                .kv
                .write(p0 + i, &k16[at.clone()], &v16[at]);
            row += 1;
        }
    }
    tap::emit("Qrope", l.index, &q);
    tap::emit("Krope", l.index, &k);
    // attend: one task per (row, KV head), its group of query heads together
    let group = nq / nkv;
    let mut tasks = Vec::with_capacity(n * nkv);
    let mut row = 0;
    for (s, seg) in segs.iter().enumerate() {
        let p0 = seg.state.pos();
        for i in 0..seg.rows {
            for kvh in 0..nkv {
                tasks.push((s, row, p0 + i, kvh));
            }
            row += 1;
        }
    }
    let scale = 1.0 / (d as f32).sqrt();
    let states: Vec<&crate::model::StreamState> = segs.iter().map(|s| &*s.state).collect();
    // each task writes its heads in place: task t is row t / nkv's KV head t % nkv, whose query
    // heads are that row's heads kvh·group.. in order
    let run = |(&(s, row, p, kvh), o): (&(usize, usize, usize, usize), &mut [f32])| {
        let kv = &states[s].layers[slot].kv;
        let h0 = row * nq + kvh * group;
        let qs = &q[h0 * d..(h0 + group) * d];
        attend_group(d, qs, &kv.blocks(kvh, 0, p), scale, o);
    };
    let work: usize = tasks.iter().map(|t| t.2 + 1).sum::<usize>() * group * d;
    let mut heads = vec![0.0f32; n * nq * d];
    if work >= PAR_MIN_WORK && kernels::threads() > 1 {
        tasks
            .par_iter()
            .zip(heads.par_chunks_exact_mut(group * d))
            .for_each(run);
    } else {
        tasks
            .iter()
            .zip(heads.chunks_exact_mut(group * d))
            .for_each(run);
    }
    tap::emit("kqv_out", l.index, &heads);
    l.o.matmul(&heads, out);
}

/// One query head against its cached keys and values (position-ordered blocks), as ggml's
/// flash-attention loop computes it with an f16 cache (module docs): the vector twin where the
/// CPU and head width allow (`attend_x86`, the same bits), else the plain loop.
pub fn attend(q: &[f32], blocks: &[(usize, &[f32], &[f32])], scale: f32, out: &mut [f32]) {
    attend_group(q.len(), q, blocks, scale, out)
}

/// `attend` for the query heads of one KV group (`qs` and `outs`: heads of `d` values one after
/// another): each head's result is the one `attend` gives it alone.
pub fn attend_group(
    d: usize,
    qs: &[f32],
    blocks: &[(usize, &[f32], &[f32])],
    scale: f32,
    outs: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if super::attend_x86::usable(d) {
        assert!(
            qs.len() == outs.len() && qs.len().is_multiple_of(d),
            "queries and outputs must be whole heads of {d}"
        );
        // SAFETY: `usable` checked the CPU's features and the head width, the assert the heads
        unsafe {
            super::attend_x86::attend_heads(vecmath::Simd::host(), d, qs, blocks, scale, outs)
        };
        return;
    }
    let simd = vecmath::Simd::host();
    for (q, out) in qs.chunks_exact(d).zip(outs.chunks_exact_mut(d)) {
        attend_plain(simd, q, blocks, scale, out);
    }
}

/// The plain loop: the reference the vector twin is held to, bit for bit.
pub fn attend_plain(
    simd: vecmath::Simd,
    q: &[f32],
    blocks: &[(usize, &[f32], &[f32])],
    scale: f32,
    out: &mut [f32],
) {
    let d = q.len();
    let q16: Vec<f32> = q.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
    let mut acc = vec![0.0f32; d]; // holds f16 values
    let (mut sum, mut max) = (0.0f32, f32::NEG_INFINITY);
    for (_, keys, values) in blocks {
        for (kj, vj) in keys.chunks_exact(d).zip(values.chunks_exact(d)) {
            let s = vecmath::dot_f16(simd, kj, &q16) * scale;
            let (mut ms, mut vs) = (1.0f32, 1.0f32);
            if s > max {
                let old = max;
                max = s;
                ms = (old - max).exp();
                acc.iter_mut().for_each(|a| *a = round16(*a * ms));
            } else {
                vs = (s - max).exp();
            }
            for (a, &x) in acc.iter_mut().zip(vj) {
                *a = round16(x.mul_add(vs, *a));
            }
            // `S = S*ms + vs`, which GCC contracts into one fused multiply-add
            sum = sum.mul_add(ms, vs);
        }
    }
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    for (o, a) in out.iter_mut().zip(&acc) {
        *o = a * inv;
    }
}

#[inline]
fn round16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact softmax attention in f64 over the same (f16) keys and values.
    fn exact(q: &[f32], k: &[f32], v: &[f32], scale: f32) -> Vec<f64> {
        let d = q.len();
        let s: Vec<f64> = k
            .chunks_exact(d)
            .map(|kj| {
                kj.iter()
                    .zip(q)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum::<f64>()
                    * scale as f64
            })
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = e.iter().sum();
        (0..d)
            .map(|c| {
                (0..e.len())
                    .map(|j| e[j] * v[j * d + c] as f64)
                    .sum::<f64>()
                    / z
            })
            .collect()
    }

    /// A query of width `d` and `n` cached keys and values, uniform in ±`amp` each, the cache
    /// rounded to f16 as the cache holds it.
    fn random_qkv(
        rng: &mut crate::rng::Rng,
        d: usize,
        n: usize,
        amp: [f32; 3],
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut q = vec![0.0f32; d];
        let mut k = vec![0.0f32; n * d];
        let mut v = vec![0.0f32; n * d];
        rng.fill_sym(&mut q, amp[0]);
        rng.fill_sym(&mut k, amp[1]);
        rng.fill_sym(&mut v, amp[2]);
        k.iter_mut()
            .chain(v.iter_mut())
            .for_each(|x| *x = round16(*x));
        (q, k, v)
    }

    #[test]
    fn the_f16_loop_stays_within_f16_rounding_of_exact_attention() {
        let d = 64;
        let mut rng = crate::rng::Rng::new(5);
        for n in [1usize, 2, 17, 200] {
            let (q, k, v) = random_qkv(&mut rng, d, n, [2.0, 2.0, 1.0]);
            let mut o = vec![0.0f32; d];
            attend(&q, &[(0, &k, &v)], 0.125, &mut o);
            let want = exact(
                &q.iter().map(|&x| round16(x)).collect::<Vec<_>>(),
                &k,
                &v,
                0.125,
            );
            // the accumulator is rounded to f16 (relative 2^-11) once per key: at most n roundings
            // of values bounded by max|v| = 1, after the final division by the sum (≥ 1)
            let bound = (n as f64 + 1.0) * 2f64.powi(-11) + 1e-6;
            for c in 0..d {
                let e = (o[c] as f64 - want[c]).abs();
                assert!(
                    e <= bound,
                    "n={n} c={c}: {} vs {} (bound {bound})",
                    o[c],
                    want[c]
                );
            }
        }
    }

    /// Keys and queries spread over f16's whole range (subnormals to 2^15), so that the scores'
    /// f64 sums round: the vector loop's fused multiply-adds still give the plain loop's bits.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn vector_loop_keeps_the_bits_where_the_scores_sums_round() {
        use vecmath::Simd;
        let mut rng = crate::rng::Rng::new(13);
        for simd in [Simd::Avx512, Simd::Avx2] {
            for d in [32usize, 40, 96] {
                if !super::super::attend_x86::usable(d) {
                    eprintln!("no AVX2/FMA/F16C here: the vector loop is not run");
                    return;
                }
                let n = 70;
                let (mut q, mut k, v) = random_qkv(&mut rng, d, n, [1.0, 1.0, 1.0]);
                for x in q.iter_mut().chain(k.iter_mut()) {
                    // 2^-24 (f16's least subnormal) to 2^15 (its largest binade)
                    let e = rng.below(40) as i32 - 24;
                    *x = round16(*x * 2f32.powi(e));
                }
                let blocks = [(0, &k[..], &v[..])];
                let (mut plain, mut fast) = (vec![0.0f32; d], vec![0.0f32; d]);
                attend_plain(simd, &q, &blocks, 1.0, &mut plain);
                // SAFETY: `usable` said yes
                unsafe {
                    super::super::attend_x86::attend_heads(simd, d, &q, &blocks, 1.0, &mut fast)
                };
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&plain), bits(&fast), "{simd:?} d={d}");
            }
        }
    }

    /// The vector loop gives the plain loop's bits, in both host layouts, over cache lengths that
    /// cross new maxima and split into two blocks (a ring's wrap).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn vector_loop_gives_the_plain_loops_bits() {
        use vecmath::Simd;
        let mut rng = crate::rng::Rng::new(11);
        for simd in [Simd::Avx512, Simd::Avx2] {
            for d in [32usize, 40, 64, 96, 128] {
                if !super::super::attend_x86::usable(d) {
                    eprintln!("no AVX2/FMA/F16C here: the vector loop is not run");
                    return;
                }
                for n in [1usize, 2, 8, 33, 300] {
                    let (q, k, v) = random_qkv(&mut rng, d, n, [3.0, 3.0, 2.0]);
                    let cut = n / 3;
                    let blocks = [
                        (0, &k[..cut * d], &v[..cut * d]),
                        (cut, &k[cut * d..], &v[cut * d..]),
                    ];
                    let (mut plain, mut fast) = (vec![0.0f32; d], vec![0.0f32; d]);
                    attend_plain(simd, &q, &blocks, 0.125, &mut plain);
                    // SAFETY: `usable` said yes
                    unsafe {
                        super::super::attend_x86::attend_heads(
                            simd, d, &q, &blocks, 0.125, &mut fast,
                        )
                    };
                    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&plain), bits(&fast), "{simd:?} d={d} n={n}");
                    // five query heads over the same keys, side by side (where AVX-512's
                    // register walk takes the width: four and one, three and two, or two, two
                    // and one heads at a time): each as alone
                    let mut qs = q.clone();
                    for amp in [2.0, 4.0, 1.0, 3.0] {
                        qs.extend(random_qkv(&mut rng, d, 1, [amp, 1.0, 1.0]).0);
                    }
                    let mut group = vec![0.0f32; 5 * d];
                    // SAFETY: `usable` said yes; five whole heads each
                    unsafe {
                        super::super::attend_x86::attend_heads(
                            simd, d, &qs, &blocks, 0.125, &mut group,
                        )
                    };
                    for (h, qh) in qs.chunks_exact(d).enumerate() {
                        let mut alone = vec![0.0f32; d];
                        attend_plain(simd, qh, &blocks, 0.125, &mut alone);
                        assert_eq!(
                            bits(&alone),
                            bits(&group[h * d..(h + 1) * d]),
                            "{simd:?} d={d} n={n} head {h} of 5"
                        );
                    }
                }
            }
        }
    }
}
