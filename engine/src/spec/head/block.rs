//! One draft module over the rows of a frame (ARCHITECTURE.md §1.7), in f32:
//!
//! ```text
//! z = [RMSNorm_hidden(prev) ; RMSNorm_embed(e)]            [n, 2H]
//! x = input_proj · z                                       [n, H]
//! x = x + ConvOut_attn(W_o · Attention(RMSNorm_attn(x)))   (own KV cache and conv histories)
//! x = x + ConvOut_mlp(W_down (silu(W_gate x̂) ⊙ W_up x̂)),  x̂ = RMSNorm_mlp(x)
//! h = x
//! ```
//!
//! Inkling's attention is the main model's (`attention::attend`: the same scores, relative-position
//! bias, τ_p, windows and kernels), fed by f32 projections. A checkpoint's module attends as the
//! checkpoint's layers do, in f32 (`rope_attention`), and has no output convolutions (ConvOut is
//! the identity). A module's state is a `StreamState` of one
//! block of the module's kind (`StreamState::for_kinds`), so it rewinds with `truncate` like the
//! model's.

use super::rope_attention;
use super::weights::ModuleWeights;
use crate::error::{Error, Result};
use crate::kernels::linear::{self, Linear};
use crate::model::attention::{self, AttentionCore, Projections, Segment};
use crate::model::config::{AttentionMode, ModelConfig};
use crate::model::forward::conv_out;
use crate::model::norm::rms_norm;

/// The intermediate values of one forward pass (what the draft fit regresses on).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlockTrace {
    /// [n, 2H] normalised inputs.
    pub z: Vec<f32>,
    /// [n, H] the input projection's output.
    pub u: Vec<f32>,
    /// [n, n_q·D] attention heads before W_o.
    pub heads: Vec<f32>,
    /// [n, H] the residual after the attention branch.
    pub mid: Vec<f32>,
    /// [n, w_e] SwiGLU activations before W_down.
    pub act: Vec<f32>,
}

/// The module's output h ([n, H]) for rows whose `prev` ([n, H]) and token embeddings `emb`
/// ([n, H], rows of the model's embedding table) are given; commits the rows' positions in each
/// segment's state. With `trace`, also returns the intermediate values.
pub fn forward(
    c: &ModelConfig,
    m: &ModuleWeights,
    mode: AttentionMode,
    segs: &mut [Segment<'_>],
    prev: &[f32],
    emb: &[f32],
    out: &mut [f32],
    trace: Option<&mut BlockTrace>,
) -> Result<()> {
    let (z, mut x) = project(c, m, segs, prev, emb, Some(out.len()))?;
    if c.family.is_checkpoint() {
        let heads = checkpoint_attend(c, m, segs, &x);
        let (mid, act) = checkpoint_mid_act(c, m, &x, &heads);
        out.copy_from_slice(&checkpoint_out(m, &mid, &act));
        if let Some(t) = trace {
            *t = BlockTrace {
                z,
                u: x,
                heads,
                mid,
                act,
            };
        }
        return Ok(());
    }
    let h = c.hidden;
    let n = x.len() / h;
    // x = x + ConvOut_attn(W_o · Attention(RMSNorm_attn(x)))
    let mut xn = vec![0.0f32; n * h];
    rms_norm(&x, &m.attn_norm, c.rms_eps, &mut xn);
    let mut heads = vec![0.0f32; n * c.q_width()];
    let u = trace.is_some().then(|| x.clone());
    let mut branch = vec![0.0f32; n * h];
    let mut y = vec![0.0f32; n * h];
    let mut p = Projections::zeros(c, m.kind, n);
    for (w, y) in [
        (&m.q, &mut p.q),
        (&m.k, &mut p.k),
        (&m.v, &mut p.v),
        (&m.r, &mut p.r),
    ] {
        linear::matmul(w, &xn, y);
    }
    let core = AttentionCore {
        kind: m.kind,
        q_norm: &m.q_norm,
        k_norm: &m.k_norm,
        rel_pos: &m.rel_pos,
        conv_k: &m.conv_k,
        conv_v: &m.conv_v,
    };
    attention::attend(c, &core, mode, 0, segs, &mut p, &mut heads);
    linear::matmul(&m.o, &heads, &mut branch);
    conv_out(
        segs,
        0,
        &branch,
        &mut y,
        h,
        |ls| &mut ls.conv_attn_out,
        &m.conv_attn_out,
    );
    x.iter_mut().zip(&y).for_each(|(v, d)| *v += d);
    let mid = trace.is_some().then(|| x.clone());

    // x = x + ConvOut_mlp(W_down (silu(W_gate x̂) ⊙ W_up x̂))
    rms_norm(&x, &m.mlp_norm, c.rms_eps, &mut xn);
    let act = swiglu(&m.gate, &m.up, &xn);
    linear::matmul(&m.down, &act, &mut branch);
    conv_out(
        segs,
        0,
        &branch,
        &mut y,
        h,
        |ls| &mut ls.conv_mlp_out,
        &m.conv_mlp_out,
    );
    x.iter_mut().zip(&y).for_each(|(v, d)| *v += d);
    for s in segs.iter_mut() {
        s.state.commit(s.rows);
    }
    out.copy_from_slice(&x);
    if let (Some(t), Some(u), Some(mid)) = (trace, u, mid) {
        *t = BlockTrace {
            z,
            u,
            heads,
            mid,
            act,
        };
    }
    Ok(())
}

/// `forward`'s checks of the rows (and of its output's length, when there is an output) and the
/// segments' states, then `z` and the input projection's output `u = input_proj · z`.
fn project(
    c: &ModelConfig,
    m: &ModuleWeights,
    segs: &[Segment<'_>],
    prev: &[f32],
    emb: &[f32],
    out_len: Option<usize>,
) -> Result<(Vec<f32>, Vec<f32>)> {
    let h = c.hidden;
    let n: usize = segs.iter().map(|s| s.rows).sum();
    let lens = [
        ("prev", Some(prev.len())),
        ("emb", Some(emb.len())),
        ("out", out_len),
    ];
    for (what, len) in lens.into_iter().filter_map(|(w, l)| Some((w, l?))) {
        if len != n * h {
            return Err(Error::Input(format!(
                "draft module: {what} has {len} values, expected {n} rows x {h}"
            )));
        }
    }
    for s in segs {
        s.state.check_room(s.rows)?;
        if s.state.layers.len() != 1 || s.state.layers[0].kv.kind != m.kind {
            return Err(Error::State(
                "a draft module's state holds one block of the module's kind".into(),
            ));
        }
    }
    let z = inputs(c, m, prev, emb);
    let mut u = vec![0.0f32; n * h];
    linear::matmul(&m.input_proj, &z, &mut u);
    Ok((z, u))
}

/// A checkpoint-kind module's attention heads ([n, n_q·D]) for rows whose input projection gave
/// `u`, committing the rows' positions in each segment's state (nothing after attention touches
/// it).
fn checkpoint_attend(
    c: &ModelConfig,
    m: &ModuleWeights,
    segs: &mut [Segment<'_>],
    u: &[f32],
) -> Vec<f32> {
    let n = u.len() / c.hidden;
    let mut xn = vec![0.0f32; u.len()];
    rms_norm(u, &m.attn_norm, c.rms_eps, &mut xn);
    let mut heads = vec![0.0f32; n * c.q_width()];
    rope_attention::attend(c, m, segs, &xn, &mut heads);
    for s in segs.iter_mut() {
        s.state.commit(s.rows);
    }
    heads
}

/// A checkpoint-kind module up to its attention heads, as `forward` computes them: the trace's
/// `z`, `u` and `heads` (`mid` and `act` left empty), the rows' positions committed. The draft fit's
/// first pass, where W_o and W_down are still to be solved and the rest would be thrown away.
pub fn checkpoint_heads(
    c: &ModelConfig,
    m: &ModuleWeights,
    segs: &mut [Segment<'_>],
    prev: &[f32],
    emb: &[f32],
) -> Result<BlockTrace> {
    if !c.family.is_checkpoint() {
        return Err(Error::Input(
            "checkpoint_heads: an Inkling module's output convolutions carry state; run forward"
                .into(),
        ));
    }
    let (z, u) = project(c, m, segs, prev, emb, None)?;
    let heads = checkpoint_attend(c, m, segs, &u);
    Ok(BlockTrace {
        z,
        u,
        heads,
        ..BlockTrace::default()
    })
}

/// A checkpoint-kind module (no output convolutions) from its attention heads on, as `forward`
/// computes it: the residual after the attention branch `mid = u + W_o · heads` and the SwiGLU
/// activations of `RMSNorm_mlp(mid)` (`BlockTrace::mid`, `act`) for rows whose input projection
/// gave `u`. The draft fit re-solves W_o and then W_down from here without re-running attention.
pub fn checkpoint_mid_act(
    c: &ModelConfig,
    m: &ModuleWeights,
    u: &[f32],
    heads: &[f32],
) -> (Vec<f32>, Vec<f32>) {
    let n = u.len() / c.hidden;
    let mut y = vec![0.0f32; u.len()];
    linear::matmul(&m.o, heads, &mut y);
    let mut mid = u.to_vec();
    mid.iter_mut().zip(&y).for_each(|(v, d)| *v += d);
    let mut xn = vec![0.0f32; n * c.hidden];
    rms_norm(&mid, &m.mlp_norm, c.rms_eps, &mut xn);
    let act = swiglu(&m.gate, &m.up, &xn);
    (mid, act)
}

/// A checkpoint-kind module's output `mid + W_down · act`, as `forward` computes it.
pub fn checkpoint_out(m: &ModuleWeights, mid: &[f32], act: &[f32]) -> Vec<f32> {
    let mut y = vec![0.0f32; mid.len()];
    linear::matmul(&m.down, act, &mut y);
    let mut x = mid.to_vec();
    x.iter_mut().zip(&y).for_each(|(v, d)| *v += d);
    x
}

/// `z = [RMSNorm_hidden(prev) ; RMSNorm_embed(e)]` ([n, 2H]) for rows prev and emb ([n, H] each).
pub fn inputs(c: &ModelConfig, m: &ModuleWeights, prev: &[f32], emb: &[f32]) -> Vec<f32> {
    let h = c.hidden;
    let n = prev.len() / h;
    let mut z = vec![0.0f32; n * 2 * h];
    let (mut a, mut b) = (vec![0.0f32; n * h], vec![0.0f32; n * h]);
    rms_norm(prev, &m.hidden_norm, c.rms_eps, &mut a);
    rms_norm(emb, &m.embed_norm, c.rms_eps, &mut b);
    for i in 0..n {
        z[i * 2 * h..i * 2 * h + h].copy_from_slice(&a[i * h..(i + 1) * h]);
        z[i * 2 * h + h..(i + 1) * 2 * h].copy_from_slice(&b[i * h..(i + 1) * h]);
    }
    z
}

/// `silu(W_gate x) ⊙ W_up x` for the rows of x.
pub fn swiglu(gate: &Linear, up: &Linear, x: &[f32]) -> Vec<f32> {
    let n = x.len() / gate.cols;
    let mut g = vec![0.0f32; n * gate.rows];
    let mut u = vec![0.0f32; n * up.rows];
    linear::matmul(gate, x, &mut g);
    linear::matmul(up, x, &mut u);
    for (gv, uv) in g.iter_mut().zip(&u) {
        *gv = *gv / (1.0 + (-*gv).exp()) * uv;
    }
    g
}
