//! Sliding and global attention of one layer (ARCHITECTURE.md §1.2) over the rows of a frame.
//!
//! For a row at position p and query head h (KV head g = h / (n_q / n_kv)):
//! `s_j = τ_p · ((q_h · k_g,j) / D + bias(h, p, p − j))`, `bias = r_h,p · P[:, p − j]` for
//! `p − j < extent`; sliding layers see `p − j < window`, global layers every `j ≤ p`;
//! `τ_p = 1 + α ln(max((p + 1) / n_floor, 1))` on global layers. Keys are convolved then normalised
//! per head; values are convolved. Rows of one stream are processed in position order, so a prefill
//! window gives the same bits as its rows fed one at a time.

use super::config::{AttentionKind, AttentionMode, ModelConfig};
use super::norm::rms_norm_inplace;
use super::state::StreamState;
use super::weights::AttentionWeights;
use rayon::prelude::*;

use crate::kernels::attention as ak;
use crate::kernels::conv::ConvTaps;

/// The rows of one stream inside a frame: `rows` consecutive positions from `state.pos()`.
/// Segments of one frame must belong to distinct streams.
pub struct Segment<'a> {
    pub state: &'a mut StreamState,
    pub rows: usize,
}

/// Positions per key block of the parallel kernel: the unit of splitting a long cache across cores.
pub const KEY_BLOCK: usize = 2048;
/// Attention of fewer multiply-adds than this (scores and weighted sums over every task) stays
/// on the calling thread: below it a task is a few microseconds, and handing it to a sleeping pool
/// thread cost more than it saved (`moefleet bench` tg128 on two threads, `inkling-mini`).
const PAR_MIN_MACS: usize = 1 << 18;

/// What attention needs besides its projection matrices: the layer's kind, its per-head norms, its
/// relative-position table and its key/value convolutions. The model's INT8 layers and the draft
/// head's f32 blocks (`mtp`) share everything from here on.
pub struct AttentionCore<'a> {
    pub kind: AttentionKind,
    /// [D]
    pub q_norm: &'a [f32],
    /// [D]
    pub k_norm: &'a [f32],
    /// [d_rel, extent]
    pub rel_pos: &'a [f32],
    pub conv_k: &'a ConvTaps,
    pub conv_v: &'a ConvTaps,
}

impl AttentionWeights {
    pub fn core(&self) -> AttentionCore<'_> {
        AttentionCore {
            kind: self.kind,
            q_norm: &self.q_norm,
            k_norm: &self.k_norm,
            rel_pos: &self.rel_pos,
            conv_k: &self.conv_k,
            conv_v: &self.conv_v,
        }
    }
}

/// The projections of a frame's rows: q [n, n_q·D], k and v [n, n_kv·D], r [n, n_q·d_rel].
pub struct Projections {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub r: Vec<f32>,
}

impl Projections {
    pub fn zeros(c: &ModelConfig, kind: AttentionKind, n: usize) -> Self {
        let kvw = c.n_kv_heads(kind) * c.head_dim;
        Projections {
            q: vec![0.0; n * c.q_width()],
            k: vec![0.0; n * kvw],
            v: vec![0.0; n * kvw],
            r: vec![0.0; n * c.n_q_heads * c.d_rel],
        }
    }
}

/// `out = W_o · attention(xn)` for every row; `slot` indexes the layer inside the states. The
/// products are the backend's (`model::backend`): `project` (q, k, v, r of xn) and `output`
/// (`W_o · heads` of n rows).
#[allow(clippy::too_many_arguments)]
pub fn forward_with<E>(
    c: &ModelConfig,
    w: &AttentionWeights,
    mode: AttentionMode,
    slot: usize,
    segs: &mut [Segment<'_>],
    xn: &[f32],
    out: &mut [f32],
    project: impl FnOnce(&[f32], &mut Projections) -> Result<(), E>,
    output: impl FnOnce(&[f32], usize, &mut [f32]) -> Result<(), E>,
) -> Result<(), E> {
    let n = xn.len() / c.hidden;
    let mut p = Projections::zeros(c, w.kind, n);
    project(xn, &mut p)?;
    let mut heads = vec![0.0f32; n * c.q_width()];
    attend(c, &w.core(), mode, slot, segs, &mut p, &mut heads);
    output(&heads, n, out)
}

/// The attention heads `concat_h(o_h)` ([n, n_q·D]) of a frame's rows from their projections:
/// normalises q, convolves, normalises and caches k and v at each row's position, and attends.
pub fn attend(
    c: &ModelConfig,
    core: &AttentionCore<'_>,
    mode: AttentionMode,
    slot: usize,
    segs: &mut [Segment<'_>],
    p: &mut Projections,
    heads: &mut [f32],
) {
    let d = c.head_dim;
    let nq = c.n_q_heads;
    rms_norm_inplace(&mut p.q, core.q_norm, c.rms_eps);
    let w = core;
    let proj = Projected {
        q: &p.q,
        k: &p.k,
        v: &p.v,
        r: &p.r,
    };
    match mode {
        AttentionMode::Serial => {
            let mut row0 = 0;
            for seg in segs.iter_mut() {
                for i in 0..seg.rows {
                    let p = seg.state.pos() + i;
                    write_kv(c, w, seg.state, slot, p, &proj, row0 + i);
                    let (qr, rr) = proj.row(c, row0 + i);
                    let o = &mut heads[(row0 + i) * nq * d..(row0 + i + 1) * nq * d];
                    attend_row(c, w, seg.state, slot, p, qr, rr, o);
                }
                row0 += seg.rows;
            }
        }
        AttentionMode::Parallel => {
            // Pieces of at most `rewind_slack` rows keep a sliding ring's oldest needed key alive
            // while the piece's own keys are written ahead of its attention.
            let piece = c.rewind_slack.max(1);
            let mut row0 = 0;
            for seg in segs.iter_mut() {
                let mut i0 = 0;
                while i0 < seg.rows {
                    let m = piece.min(seg.rows - i0);
                    let p0 = seg.state.pos() + i0;
                    for i in 0..m {
                        write_kv(c, w, seg.state, slot, p0 + i, &proj, row0 + i0 + i);
                    }
                    let o = &mut heads[(row0 + i0) * nq * d..(row0 + i0 + m) * nq * d];
                    attend_rows(c, w, seg.state, slot, p0, m, &proj, row0 + i0, o);
                    i0 += m;
                }
                row0 += seg.rows;
            }
        }
    }
}

/// The frame's projections, [rows, …].
struct Projected<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    r: &'a [f32],
}

impl Projected<'_> {
    /// (q, r) of one row.
    fn row(&self, c: &ModelConfig, row: usize) -> (&[f32], &[f32]) {
        let (qw, rw) = (c.n_q_heads * c.head_dim, c.n_q_heads * c.d_rel);
        (
            &self.q[row * qw..(row + 1) * qw],
            &self.r[row * rw..(row + 1) * rw],
        )
    }
}

/// Convolve, normalise and cache the key and value of one row at position p.
fn write_kv(
    c: &ModelConfig,
    w: &AttentionCore<'_>,
    st: &mut StreamState,
    slot: usize,
    p: usize,
    proj: &Projected<'_>,
    row: usize,
) {
    let kvw = c.n_kv_heads(w.kind) * c.head_dim;
    let (kr, vr) = (
        &proj.k[row * kvw..(row + 1) * kvw],
        &proj.v[row * kvw..(row + 1) * kvw],
    );
    let mut kc = vec![0.0f32; kvw];
    let mut vc = vec![0.0f32; kvw];
    let ls = &mut st.layers[slot];
    w.conv_k.apply(kr, &ls.conv_k.before(p), &mut kc);
    w.conv_v.apply(vr, &ls.conv_v.before(p), &mut vc);
    ls.conv_k.record(p, kr);
    ls.conv_v.record(p, vr);
    rms_norm_inplace(&mut kc, w.k_norm, c.rms_eps);
    ls.kv.write(p, &kc, &vc);
}

/// Rows `p0..p0 + m` of one stream (their keys already cached), all query heads, on all cores:
/// one task per (row, KV head, key block of KEY_BLOCK absolute positions), merged per head in
/// position order.
#[allow(clippy::too_many_arguments)]
fn attend_rows(
    c: &ModelConfig,
    w: &AttentionCore<'_>,
    st: &StreamState,
    slot: usize,
    p0: usize,
    m: usize,
    proj: &Projected<'_>,
    row0: usize,
    out: &mut [f32],
) {
    let d = c.head_dim;
    let kv = &st.layers[slot].kv;
    let group = c.n_q_heads / kv.n_kv;
    let extent = w.rel_pos.len() / c.d_rel;
    // (row index, kv head, first position, last position) of every task
    let mut tasks = Vec::new();
    for i in 0..m {
        let p = p0 + i;
        let from = first_key(c, w.kind, p);
        for g in 0..kv.n_kv {
            let mut b = from;
            while b <= p {
                let e = ((b / KEY_BLOCK + 1) * KEY_BLOCK - 1).min(p);
                tasks.push((i, g, b, e));
                b = e + 1;
            }
        }
    }
    let run = |&(i, g, b, e): &(usize, usize, usize, usize)| {
        let p = p0 + i;
        let (qr, rr) = proj.row(c, row0 + i);
        let near = extent.min(p + 1 - first_key(c, w.kind, p));
        let heads = g * group..(g + 1) * group;
        let mut bias = vec![0.0f32; group * near];
        for (hi, h) in heads.clone().enumerate() {
            rel_bias(
                c,
                w,
                &rr[h * c.d_rel..(h + 1) * c.d_rel],
                &mut bias[hi * near..(hi + 1) * near],
            );
        }
        let mut parts = vec![ak::Partial::empty(d); group];
        let mut scratch = Vec::new();
        for (first, keys, values) in kv.blocks(g, b, e) {
            let rule = ak::ScoreRule {
                tau: tau(c, w.kind, p),
                inv_d: 1.0 / d as f32,
                bias: &bias,
                near,
                dist0: p - first,
            };
            let qh = &qr[heads.start * d..heads.end * d];
            ak::attend_block(qh, keys, values, &rule, &mut parts, &mut scratch);
        }
        parts
    };
    let macs: usize = tasks
        .iter()
        .map(|&(_, _, b, e)| 2 * (e + 1 - b) * group * d)
        .sum();
    let results: Vec<Vec<ak::Partial>> =
        if tasks.len() > 1 && macs >= PAR_MIN_MACS && crate::kernels::threads() > 1 {
            tasks.par_iter().map(run).collect()
        } else {
            tasks.iter().map(run).collect()
        };
    // merge each (row, kv head)'s blocks in position order
    let nq = c.n_q_heads;
    let mut t = 0;
    while t < tasks.len() {
        let (i, g, _, _) = tasks[t];
        let mut acc = results[t].clone();
        t += 1;
        while t < tasks.len() && (tasks[t].0, tasks[t].1) == (i, g) {
            for (a, b) in acc.iter_mut().zip(&results[t]) {
                a.merge(b);
            }
            t += 1;
        }
        for (hi, part) in acc.iter().enumerate() {
            let h = g * group + hi;
            part.finish(&mut out[(i * nq + h) * d..(i * nq + h + 1) * d]);
        }
    }
}

/// The first cached position a row at p attends to.
fn first_key(c: &ModelConfig, kind: AttentionKind, p: usize) -> usize {
    match kind {
        AttentionKind::Sliding => (p + 1).saturating_sub(c.window),
        AttentionKind::Global => 0,
    }
}

/// `bias[dist] = r_h · P[:, dist]` for dist < bias.len().
fn rel_bias(c: &ModelConfig, w: &AttentionCore<'_>, rh: &[f32], bias: &mut [f32]) {
    ak::rel_bias(rh, w.rel_pos, w.rel_pos.len() / c.d_rel, bias);
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
    w: &AttentionCore<'_>,
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
