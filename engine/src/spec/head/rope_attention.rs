//! A checkpoint-family draft module's attention over the rows of a frame, in f32: q, k, v
//! projections, per-head q/k RMSNorm where the model has them, the model's RoPE at each row's
//! position, keys and values written unrounded to the module's own cache, then causal
//! grouped-query softmax attention with scale 1/sqrt(D). The head is f32 throughout (it is not
//! bit-matched to anything, unlike the model's layers), so the loop is the plain one, except that
//! each score's dot product is `linear::dot` (lane sums added pairwise): a fixed order, so the same
//! bits on every CPU, and no longer one chain of dependent scalar adds per key.

use super::weights::ModuleWeights;
use crate::kernels::linear;
use crate::model::attention::Segment;
use crate::model::checkpoint::{layer::rms_norm, rope};
use crate::model::config::ModelConfig;

/// `heads` ([n, n_q·D]) = attention of the rows of `xn` ([n, H]) over each stream's history and
/// the rows before them in the frame. Writes the rows' keys and values; the caller commits.
pub fn attend(
    c: &ModelConfig,
    m: &ModuleWeights,
    segs: &mut [Segment<'_>],
    xn: &[f32],
    heads: &mut [f32],
) {
    let (d, nq, nkv) = (c.head_dim, c.n_q_heads, c.n_kv_heads(m.kind));
    let n = xn.len() / c.hidden;
    let mut q = vec![0.0f32; n * nq * d];
    let mut k = vec![0.0f32; n * nkv * d];
    let mut v = vec![0.0f32; n * nkv * d];
    linear::matmul(&m.q, xn, &mut q);
    linear::matmul(&m.k, xn, &mut k);
    linear::matmul(&m.v, xn, &mut v);
    if c.qk_norm {
        rms_norm(&mut q, &m.q_norm, c.rms_eps);
        rms_norm(&mut k, &m.k_norm, c.rms_eps);
    }
    let scale = 1.0 / (d as f32).sqrt();
    let group = nq / nkv;
    let mut row = 0;
    let mut scores = Vec::new();
    for seg in segs.iter_mut() {
        let p0 = seg.state.pos();
        for i in 0..seg.rows {
            let p = p0 + i;
            let (qr, kr) = (
                &mut q[row * nq * d..(row + 1) * nq * d],
                &mut k[row * nkv * d..(row + 1) * nkv * d],
            );
            if let Some(r) = &c.rope {
                let (cos, sin) = rope::angles(r, p);
                rope::apply(r, d, &cos, &sin, qr);
                rope::apply(r, d, &cos, &sin, kr);
            }
            let kv = &mut seg.state.layers[0].kv;
            kv.write(p, kr, &v[row * nkv * d..(row + 1) * nkv * d]);
            for h in 0..nq {
                let qh = &qr[h * d..(h + 1) * d];
                let out = &mut heads[(row * nq + h) * d..(row * nq + h + 1) * d];
                softmax_attend(qh, &kv.blocks(h / group, 0, p), scale, &mut scores, out);
            }
            row += 1;
        }
    }
}

/// One query head against position-ordered blocks of keys and values: `softmax(scale · q·kᵀ) · V`.
fn softmax_attend(
    q: &[f32],
    blocks: &[(usize, &[f32], &[f32])],
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let d = q.len();
    scores.clear();
    for (_, ks, _) in blocks {
        scores.extend(ks.chunks_exact(d).map(|kr| scale * linear::dot(kr, q)));
    }
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    out.iter_mut().for_each(|o| *o = 0.0);
    let mut j = 0;
    for (_, _, vs) in blocks {
        for vr in vs.chunks_exact(d) {
            let w = scores[j] / sum;
            out.iter_mut().zip(vr).for_each(|(o, x)| *o += w * x);
            j += 1;
        }
    }
}
