//! The forward pass of a checkpoint's layer range: per layer
//! `x += W_o·attention(RMSNorm_attn(x))`, then `x += FFN(RMSNorm_ffn(x))`, where the FFN is SwiGLU
//! or a softmax-routed mixture of SwiGLU experts; plus the embedding lookup and the final norm and
//! head. Per-stream state is the caller's (`StreamState`): only the KV caches are used.

use rayon::prelude::*;

pub use super::norm::rms_norm;
use super::norm::PAR_MIN_ROWS;
use super::{attention, tap, vecmath, CheckpointLayer, CheckpointMlp, CheckpointWeights};
use crate::error::{Error, Result};
use crate::kernels::{self, blocks::BlockMatrix, blocks::QuantizedActs};
use crate::model::attention::Segment;
use crate::model::config::ModelConfig;
use crate::model::options::ForwardTimings;

/// `x = embed[token]` for each token, into x [n, H] (no scaling: the llama family adds none).
pub fn embed(c: &ModelConfig, w: &CheckpointWeights, tokens: &[u32], x: &mut [f32]) -> Result<()> {
    let e = w
        .embed
        .as_ref()
        .ok_or_else(|| Error::Config("this model range has no embedding".into()))?;
    for (i, &t) in tokens.iter().enumerate() {
        if t as usize >= c.vocab_size {
            return Err(Error::Input(format!(
                "token id {t} is outside the vocabulary (size {})",
                c.vocab_size
            )));
        }
        e.dequantize_row(t as usize, &mut x[i * c.hidden..(i + 1) * c.hidden]);
    }
    Ok(())
}

/// Every layer of the range over the rows of `segs` (x [Σ rows, H]); the caller commits positions.
pub fn forward(
    c: &ModelConfig,
    w: &CheckpointWeights,
    segs: &mut [Segment<'_>],
    x: &mut [f32],
    mut observe: impl FnMut(usize, &[f32]),
    t: &mut ForwardTimings,
) {
    let h = c.hidden;
    let mut xn = vec![0.0f32; x.len()];
    let mut b = vec![0.0f32; x.len()];
    // the experts' buffers, reused from layer to layer (every value is written before it is read)
    let mut scratch = Vec::new();
    for (slot, l) in w.layers.iter().enumerate() {
        let t0 = std::time::Instant::now();
        xn.copy_from_slice(x);
        rms_norm(&mut xn, &l.attn_norm, c.rms_eps);
        tap::emit("attn_norm", l.index, &xn);
        attention::forward(c, l, slot, segs, &xn, &mut b);
        tap::emit("attn_out", l.index, &b);
        x.iter_mut().zip(&b).for_each(|(a, v)| *a += v);
        tap::emit("ffn_inp", l.index, x);
        let t1 = std::time::Instant::now();
        xn.copy_from_slice(x);
        rms_norm(&mut xn, &l.ffn_norm, c.rms_eps);
        tap::emit("ffn_norm", l.index, &xn);
        mlp(c, l, &xn, &mut b, &mut scratch);
        tap::emit("ffn_out", l.index, &b);
        x.iter_mut().zip(&b).for_each(|(a, v)| *a += v);
        tap::emit("l_out", l.index, x);
        let t2 = std::time::Instant::now();
        t.attention_ns += (t1 - t0).as_nanos() as u64;
        t.mlp_ns += (t2 - t1).as_nanos() as u64;
        observe(l.index, x);
    }
    debug_assert_eq!(x.len() % h, 0);
}

/// Logits [n, vocab] of the rows of x (the residual after the last layer).
pub fn logits(c: &ModelConfig, w: &CheckpointWeights, x: &[f32]) -> Result<Vec<f32>> {
    let (norm, head) = match (&w.final_norm, &w.head) {
        (Some(n), Some(h)) => (n, h),
        _ => return Err(Error::Config("this model range has no head".into())),
    };
    let mut xn = x.to_vec();
    rms_norm(&mut xn, norm, c.rms_eps);
    tap::emit("result_norm", 0, &xn);
    let mut out = vec![0.0f32; x.len() / c.hidden * c.vocab_size];
    head.matmul(&xn, &mut out);
    Ok(out)
}

/// `y = FFN(xn)` for every row; `scratch` holds the experts' buffers.
fn mlp(c: &ModelConfig, l: &CheckpointLayer, xn: &[f32], y: &mut [f32], scratch: &mut Vec<f32>) {
    match &l.mlp {
        CheckpointMlp::Dense { gate, up, down } => swiglu(l.index, gate, up, down, xn, y),
        CheckpointMlp::Moe { router, experts } => moe(c, l.index, router, experts, xn, y, scratch),
    }
}

/// `down(silu(gate·x) ⊙ up·x)` over the rows of x (ggml's `swiglu` op: `vecmath::swiglu`).
fn swiglu(
    layer: usize,
    gate: &BlockMatrix,
    up: &BlockMatrix,
    down: &BlockMatrix,
    x: &[f32],
    y: &mut [f32],
) {
    let n = x.len() / gate.cols;
    let mut g = vec![0.0f32; n * gate.rows];
    let mut u = vec![0.0f32; n * up.rows];
    crate::kernels::blocks::matmul_shared(&[gate, up], x, &mut [&mut g, &mut u]);
    swiglu_down(layer, down, &mut g, &u, y);
}

/// `y = down(silu(g) ⊙ u)` from the gate and up products' rows (g becomes the activation).
fn swiglu_down(layer: usize, down: &BlockMatrix, g: &mut [f32], u: &[f32], y: &mut [f32]) {
    tap::emit("ffn_gate", layer, g);
    tap::emit("ffn_up", layer, u);
    let simd = vecmath::Simd::host();
    let w = down.cols;
    for (gr, ur) in g.chunks_exact_mut(w).zip(u.chunks_exact(w)) {
        vecmath::swiglu(simd, gr, ur);
    }
    tap::emit("ffn_swiglu", layer, g);
    down.matmul(g, y);
}

/// An expert and the (row, selection slot) pairs that chose it.
type ExpertRows = (usize, Vec<(usize, usize)>);

/// `swiglu` from the rows already converted for `gate` and `up` (the same type for both), into
/// the caller's buffers for the gate and up products (`g`, `u`: whole rows, overwritten).
fn swiglu_quantized(
    layer: usize,
    [gate, up, down]: [&BlockMatrix; 3],
    xq: &QuantizedActs,
    (g, u): (&mut [f32], &mut [f32]),
    y: &mut [f32],
) {
    gate.matmul_quantized(xq, g);
    up.matmul_quantized(xq, u);
    swiglu_down(layer, down, g, u, y);
}

/// Whether `xq` is what `m`'s products take (its vec_dot type, its width).
fn same_type(xq: &QuantizedActs, m: &BlockMatrix) -> bool {
    m.format.vec_dot_type() == Some(xq.format()) && m.cols == xq.cols()
}

/// One row's experts and weights: softmax over the router's logits, the top k by probability
/// (ties to the lower id), renormalised to sum one when the model says so.
pub fn route(c: &ModelConfig, logits: &[f32]) -> (Vec<usize>, Vec<f32>) {
    let max = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let args: Vec<f32> = logits.iter().map(|&v| v - max).collect();
    let e = exps(&args);
    let sum: f64 = e.iter().map(|&v| v as f64).sum();
    let inv = (1.0 / sum) as f32;
    let p: Vec<f32> = e.iter().map(|&v| v * inv).collect();
    // a strict total order (ties to the lower id): the k first under it, in its order, are what
    // sorting everything and keeping k would give
    let order = |a: &usize, b: &usize| p[*b].total_cmp(&p[*a]).then(a.cmp(b));
    let k = c.top_k;
    let ids = if k > 0 && k < p.len() {
        // one pass keeping the k first so far in order: most ids rank below the k-th and cost
        // one comparison
        let mut top: Vec<usize> = Vec::with_capacity(k + 1);
        // the k-th's probability once k are held: an id below it ranks after the k-th (a NaN,
        // or a tie, takes the whole comparison)
        let mut floor = f32::NEG_INFINITY;
        for i in 0..p.len() {
            if top.len() == k && (p[i] < floor || order(&top[k - 1], &i).is_lt()) {
                continue;
            }
            let at = top.partition_point(|j| order(j, &i).is_lt());
            top.insert(at, i);
            top.truncate(k);
            if top.len() == k {
                floor = p[top[k - 1]];
            }
        }
        top
    } else {
        let mut ids: Vec<usize> = (0..p.len()).collect();
        ids.truncate(k);
        ids.sort_by(order);
        ids
    };
    let mut w: Vec<f32> = ids.iter().map(|&i| p[i]).collect();
    if c.norm_top_k {
        let s = w.iter().map(|&v| v as f64).sum::<f64>() as f32;
        w.iter_mut().for_each(|v| *v /= s);
    }
    (ids, w)
}

/// `f32::exp` of each value: sixteen at a time with the C library's bits where the CPU allows
/// (`expf_x86`), the rest one call each.
fn exps(args: &[f32]) -> Vec<f32> {
    let mut e = vec![0.0f32; args.len()];
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if super::expf_x86::libm_agrees() {
        for (x, y) in args.chunks_exact(16).zip(e.chunks_exact_mut(16)) {
            // SAFETY: `libm_agrees` holds only where the CPU has AVX-512F; the chunks are sixteen
            unsafe {
                super::expf_x86::exp16(
                    x.try_into().unwrap_unchecked(),
                    y.try_into().unwrap_unchecked(),
                )
            };
        }
        done = args.len() - args.len() % 16;
    }
    for (x, y) in args[done..].iter().zip(&mut e[done..]) {
        *y = x.exp();
    }
    e
}

/// The mixture: rows that select the same expert share its weight reads; each row then sums its
/// experts' outputs times their weights in selection order.
fn moe(
    c: &ModelConfig,
    layer: usize,
    router: &BlockMatrix,
    experts: &[[BlockMatrix; 3]],
    x: &[f32],
    y: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    let h = c.hidden;
    let n = x.len() / h;
    let mut logits = vec![0.0f32; n * router.rows];
    router.matmul(x, &mut logits);
    let par = n >= PAR_MIN_ROWS && kernels::threads() > 1;
    let sel: Vec<(Vec<usize>, Vec<f32>)> = if par {
        logits
            .par_chunks_exact(router.rows)
            .map(|r| route(c, r))
            .collect()
    } else {
        logits
            .chunks_exact(router.rows)
            .map(|r| route(c, r))
            .collect()
    };
    let mut by_expert: std::collections::BTreeMap<usize, Vec<(usize, usize)>> = Default::default();
    for (row, (ids, _)) in sel.iter().enumerate() {
        for (k, &e) in ids.iter().enumerate() {
            by_expert.entry(e).or_default().push((row, k));
        }
    }
    let by_expert: Vec<ExpertRows> = by_expert.into_iter().collect();
    // the rows converted once for the experts' gate and up products (the layer's expert tensors
    // share one format each), each expert then taking its rows' conversions: the same values as
    // converting its gathered rows, since a row converts on its own
    let shared = experts.first().and_then(|[g0, u0, _]| {
        let t = g0.format.vec_dot_type();
        (t.is_some() && t == u0.format.vec_dot_type())
            .then(|| QuantizedActs::for_weights(g0.format, x, h))
    });
    // each expert's output rows, then its gate and up products, one after another in `scratch`
    // (grown, never shrunk: the values are overwritten, not read, so no layer zeroes them)
    let widths: Vec<usize> = by_expert
        .iter()
        .map(|(e, uses)| uses.len() * (h + experts[*e][0].rows + experts[*e][1].rows))
        .collect();
    let total: usize = widths.iter().sum();
    if scratch.len() < total {
        scratch.resize(total, 0.0);
    }
    let mut parts: Vec<&mut [f32]> = Vec::with_capacity(widths.len());
    let mut rest = &mut scratch[..total];
    for &w in &widths {
        let (part, tail) = rest.split_at_mut(w);
        parts.push(part);
        rest = tail;
    }
    let one = |((e, uses), part): (&ExpertRows, &mut [f32])| {
        let [g, u, d] = &experts[*e];
        let (out, gu) = part.split_at_mut(uses.len() * h);
        match &shared {
            Some(xq) if same_type(xq, g) && same_type(xq, u) => {
                let rows: Vec<usize> = uses.iter().map(|&(row, _)| row).collect();
                let (gb, ub) = gu.split_at_mut(uses.len() * g.rows);
                swiglu_quantized(layer, [g, u, d], &xq.gather(&rows), (gb, ub), out);
            }
            _ => {
                let mut xb = Vec::with_capacity(uses.len() * h);
                for &(row, _) in uses {
                    xb.extend_from_slice(&x[row * h..(row + 1) * h]);
                }
                swiglu(layer, g, u, d, &xb, out);
            }
        }
    };
    if kernels::threads() > 1 && by_expert.len() > 1 {
        by_expert.par_iter().zip(parts).for_each(one);
    } else {
        by_expert.iter().zip(parts).for_each(one);
    }
    let mut outs: Vec<&[f32]> = Vec::with_capacity(widths.len());
    let mut from = 0;
    for ((_, uses), &w) in by_expert.iter().zip(&widths) {
        outs.push(&scratch[from..from + uses.len() * h]);
        from += w;
    }
    let k = c.top_k;
    let mut at = vec![(0usize, 0usize); n * k];
    for (j, (_, uses)) in by_expert.iter().enumerate() {
        for (i, &(row, kk)) in uses.iter().enumerate() {
            at[row * k + kk] = (j, i);
        }
    }
    let combine = |(row, yr): (usize, &mut [f32])| {
        yr.iter_mut().for_each(|v| *v = 0.0);
        for (kk, &wk) in sel[row].1.iter().enumerate() {
            let (j, i) = at[row * k + kk];
            let o = &outs[j][i * h..(i + 1) * h];
            yr.iter_mut().zip(o).for_each(|(a, &v)| *a += v * wk);
        }
    };
    if par {
        y.par_chunks_exact_mut(h).enumerate().for_each(combine);
    } else {
        y.chunks_exact_mut(h).enumerate().for_each(combine);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_selects_what_a_full_sort_would_ties_included() {
        let mut c = ModelConfig::preset("inkling-nano").unwrap();
        let mut rng = crate::rng::Rng::new(5);
        for k in [1usize, 2, 8, 63, 64] {
            c.top_k = k;
            for _ in 0..50 {
                // few distinct values: many ties, broken by the lower id
                let mut logits = vec![0.0f32; 64];
                rng.fill_sym(&mut logits, 2.0);
                logits.iter_mut().for_each(|v| *v = (*v * 2.0).round());
                let max = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                let e: Vec<f32> = logits.iter().map(|&v| (v - max).exp()).collect();
                let inv = (1.0 / e.iter().map(|&v| v as f64).sum::<f64>()) as f32;
                let p: Vec<f32> = e.iter().map(|&v| v * inv).collect();
                let mut all: Vec<usize> = (0..64).collect();
                all.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
                all.truncate(k);
                assert_eq!(route(&c, &logits).0, all, "top {k} of {logits:?}");
            }
        }
    }

    #[test]
    fn routing_takes_the_most_probable_and_renormalises() {
        let mut c = ModelConfig::preset("inkling-nano").unwrap();
        c.top_k = 2;
        c.norm_top_k = true;
        let (ids, w) = route(&c, &[0.0, 2.0, 1.0, 2.0]);
        assert_eq!(ids, vec![1, 3]);
        assert!((w[0] - 0.5).abs() < 1e-6 && (w[1] - 0.5).abs() < 1e-6);
        c.norm_top_k = false;
        let (_, w) = route(&c, &[0.0, 0.0]);
        assert!((w[0] - 0.5).abs() < 1e-6);
    }
}
