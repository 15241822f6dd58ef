//! Sliding and global attention of one layer (ARCHITECTURE.md §1.2) over the rows of a frame.
//!
//! For a row at position p and query head h (KV head g = h / (n_q / n_kv)):
//! `s_j = τ_p · ((q_h · k_g,j) / D + bias(h, p, p − j))`, `bias = r_h,p · P[:, p − j]` for
//! `p − j < extent`; sliding layers see `p − j < window`, global layers every `j ≤ p`;
//! `τ_p = 1 + α ln(max((p + 1) / n_floor, 1))` on global layers. Keys are convolved then normalised
//! per head; values are convolved. Rows of one stream are processed in position order, so a prefill
//! window gives the same bits as its rows fed one at a time.

use super::config::{AttentionKind, ModelConfig};
use super::norm::rms_norm_inplace;
use super::state::StreamState;
use super::weights::AttentionWeights;
use rayon::prelude::*;

use crate::kernels::{attention as ak, int8};

/// The rows of one stream inside a frame: `rows` consecutive positions from `state.pos()`.
/// Segments of one frame must belong to distinct streams.
pub struct Segment<'a> {
    pub state: &'a mut StreamState,
    pub rows: usize,
}

/// `out = W_o · attention(xn)` for every row; `slot` indexes the layer inside the states.
pub fn forward(
    c: &ModelConfig,
    w: &AttentionWeights,
    slot: usize,
    segs: &mut [Segment<'_>],
    xn: &[f32],
    out: &mut [f32],
) {
    let n = xn.len() / c.hidden;
    let d = c.head_dim;
    let nq = c.n_q_heads;
    let n_kv = w.k.rows / d;
    let kvw = n_kv * d;
    let mut q = vec![0.0f32; n * nq * d];
    let mut k = vec![0.0f32; n * kvw];
    let mut v = vec![0.0f32; n * kvw];
    let mut r = vec![0.0f32; n * nq * c.d_rel];
    int8::matmul(&w.q, xn, &mut q);
    int8::matmul(&w.k, xn, &mut k);
    int8::matmul(&w.v, xn, &mut v);
    int8::matmul(&w.r, xn, &mut r);
    rms_norm_inplace(&mut q, &w.q_norm, c.rms_eps);

    // Streams are independent: their rows run on all cores; a stream's own rows stay in order.
    let mut heads = vec![0.0f32; n * nq * d];
    let mut parts: Vec<(&mut Segment<'_>, &mut [f32], usize)> = Vec::with_capacity(segs.len());
    let mut rest: &mut [f32] = &mut heads;
    let mut row0 = 0;
    for seg in segs.iter_mut() {
        let (mine, tail) = std::mem::take(&mut rest).split_at_mut(seg.rows * nq * d);
        rest = tail;
        let rows = seg.rows;
        parts.push((seg, mine, row0));
        row0 += rows;
    }
    let rows_of = |seg: &mut Segment<'_>, out: &mut [f32], row0: usize| {
        let mut kc = vec![0.0f32; kvw];
        let mut vc = vec![0.0f32; kvw];
        let p0 = seg.state.pos();
        for i in 0..seg.rows {
            let (p, row) = (p0 + i, row0 + i);
            let ls = &mut seg.state.layers[slot];
            let (kr, vr) = (
                &k[row * kvw..(row + 1) * kvw],
                &v[row * kvw..(row + 1) * kvw],
            );
            w.conv_k.apply(kr, &ls.conv_k.before(p), &mut kc);
            w.conv_v.apply(vr, &ls.conv_v.before(p), &mut vc);
            ls.conv_k.record(p, kr);
            ls.conv_v.record(p, vr);
            rms_norm_inplace(&mut kc, &w.k_norm, c.rms_eps);
            ls.kv.write(p, &kc, &vc);
            let qr = &q[row * nq * d..(row + 1) * nq * d];
            let rr = &r[row * nq * c.d_rel..(row + 1) * nq * c.d_rel];
            attend_row(
                c,
                w,
                seg.state,
                slot,
                p,
                qr,
                rr,
                &mut out[i * nq * d..(i + 1) * nq * d],
            );
        }
    };
    if parts.len() > 1 {
        parts
            .into_par_iter()
            .for_each(|(seg, out, row0)| rows_of(seg, out, row0));
    } else {
        for (seg, out, row0) in parts {
            rows_of(seg, out, row0);
        }
    }
    int8::matmul(&w.o, &heads, out);
}

/// τ_p of ARCHITECTURE.md §1.2.
pub fn tau(c: &ModelConfig, kind: AttentionKind, p: usize) -> f32 {
    match kind {
        AttentionKind::Sliding => 1.0,
        AttentionKind::Global => 1.0 + c.tau_alpha * ((p as f32 + 1.0) / c.tau_floor).max(1.0).ln(),
    }
}

/// All query heads of one row at position p against the cached keys `from..=p`.
#[allow(clippy::too_many_arguments)]
fn attend_row(
    c: &ModelConfig,
    w: &AttentionWeights,
    st: &StreamState,
    slot: usize,
    p: usize,
    q: &[f32],
    r: &[f32],
    out: &mut [f32],
) {
    let d = c.head_dim;
    let kv = &st.layers[slot].kv;
    let group = c.n_q_heads / kv.n_kv;
    let from = match w.kind {
        AttentionKind::Sliding => (p + 1).saturating_sub(c.window),
        AttentionKind::Global => 0,
    };
    let extent = w.rel_pos.len() / c.d_rel;
    let tau = tau(c, w.kind, p);
    let inv_d = 1.0 / d as f32;
    let n_keys = p + 1 - from;
    let near = extent.min(n_keys); // distances 0..near carry a bias
    let mut s = vec![0.0f32; n_keys];
    let mut bias = vec![0.0f32; near];
    for h in 0..c.n_q_heads {
        let qh = &q[h * d..(h + 1) * d];
        let rh = &r[h * c.d_rel..(h + 1) * c.d_rel];
        // bias[dist] = r_h · P[:, dist]
        bias.iter_mut().for_each(|b| *b = 0.0);
        for (kk, &rv) in rh.iter().enumerate() {
            let prow = &w.rel_pos[kk * extent..kk * extent + near];
            for (b, &pv) in bias.iter_mut().zip(prow) {
                *b += rv * pv;
            }
        }
        let blocks = kv.blocks(h / group, from, p);
        let mut at = 0;
        for (_, keys, _) in &blocks {
            let m = keys.len() / d;
            ak::scores(qh, keys, &mut s[at..at + m]);
            at += m;
        }
        for (j, sj) in s.iter_mut().enumerate() {
            let dist = p - (from + j);
            let b = if dist < near { bias[dist] } else { 0.0 };
            *sj = tau * (*sj * inv_d + b);
        }
        let mx = s.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let mut sum = 0.0f32;
        for sj in s.iter_mut() {
            *sj = (*sj - mx).exp();
            sum += *sj;
        }
        let inv = 1.0 / sum;
        s.iter_mut().for_each(|x| *x *= inv);
        let oh = &mut out[h * d..(h + 1) * d];
        oh.iter_mut().for_each(|x| *x = 0.0);
        let mut at = 0;
        for (_, _, values) in &blocks {
            let m = values.len() / d;
            ak::weighted_sum(&s[at..at + m], values, oh);
            at += m;
        }
    }
}
