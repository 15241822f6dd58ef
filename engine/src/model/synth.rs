//! Synthetic weights (ARCHITECTURE.md §2): every tensor is generated from
//! `(seed, layer, tensor name, expert id)` directly in its stored format (random nibbles and group
//! scales for INT4, random bytes and row scales for INT8), so any role can generate exactly its own
//! layers, in parallel, in any order.
//!
//! Gains are chosen so the residual stream stays O(1) over all layers: each branch adds roughly
//! `BRANCH_GAIN` of RMS (the `residual_rms` test prints and bounds the per-layer values).

use half::f16;
use rayon::prelude::*;

use super::config::{MlpKind, ModelConfig};
use super::weights::*;
use crate::error::{Error, Result};
use crate::kernels::conv::ConvTaps;
use crate::kernels::int4::Int4Matrix;
use crate::kernels::int8::Int8Matrix;
use crate::rng::Rng;

/// E[(q − 8)²] for nibbles uniform in 1..=15.
const INT4_VAR: f32 = 280.0 / 15.0;
/// E[q²] for q uniform in −127..=127.
const INT8_VAR: f32 = 127.0 * 128.0 / 3.0;
/// RMS each attention and MLP branch adds to the residual stream, roughly.
const BRANCH_GAIN: f32 = 0.3;

/// A test's deliberate change to one layer (e.g. to drive expert values out of f16 range).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plant {
    pub layer: usize,
    /// True up-projection weights are multiplied by `2^up_gain_log2`.
    pub up_gain_log2: i32,
    /// The layer's `global_scale`.
    pub global_scale: f32,
    /// Record `A_l = 2^up_gain_log2` (divide the stored up scales by it); false stores the true
    /// scales with `A_l = 1`, as an exporter without attenuation would.
    pub attenuate: bool,
}

/// What to generate.
#[derive(Clone, Debug)]
pub struct SynthSpec {
    pub config: ModelConfig,
    pub seed: u64,
    pub layers: std::ops::Range<usize>,
    pub plants: Vec<Plant>,
}

impl SynthSpec {
    pub fn whole(config: ModelConfig, seed: u64) -> Self {
        let n = config.n_layers;
        SynthSpec {
            config,
            seed,
            layers: 0..n,
            plants: Vec::new(),
        }
    }
}

/// Generate the weights of `spec.layers` (and the embedding / head if the range touches the ends).
pub fn generate(spec: &SynthSpec) -> Result<ModelWeights> {
    let c = &spec.config;
    c.validate()?;
    if spec.layers.start >= spec.layers.end || spec.layers.end > c.n_layers {
        return Err(Error::Config(format!(
            "layer range {:?} is not inside 0..{}",
            spec.layers, c.n_layers
        )));
    }
    let layers: Vec<LayerWeights> = spec
        .layers
        .clone()
        .into_par_iter()
        .map(|l| {
            layer(
                c,
                spec.seed,
                l,
                spec.plants.iter().find(|p| p.layer == l),
                None,
            )
        })
        .collect();
    let embed = (spec.layers.start == 0).then(|| embed_weights(c, spec.seed));
    let head = (spec.layers.end == c.n_layers).then(|| head_weights(c, spec.seed));
    Ok(ModelWeights {
        config: c.clone(),
        seed: spec.seed,
        layer_start: spec.layers.start,
        layer_end: spec.layers.end,
        embed,
        layers,
        head,
        checkpoint: None,
    })
}

/// The embedding table and its norm alone (what the draft head shares with the model).
pub fn embed_weights(c: &ModelConfig, seed: u64) -> EmbedWeights {
    EmbedWeights {
        embed: {
            let mut rng = Rng::for_tensor(seed, 0, "embed.weight", 0);
            (0..c.vocab_padded * c.hidden)
                .map(|_| f16::from_f32(rng.sym()))
                .collect()
        },
        norm: norm_weight(seed, 0, "embed_norm.weight", c.hidden),
    }
}

/// The final norm and output head alone.
pub fn head_weights(c: &ModelConfig, seed: u64) -> HeadWeights {
    HeadWeights {
        final_norm: norm_weight(seed, 0, "final_norm.weight", c.hidden),
        head: int8(seed, 0, "head", c.vocab_padded, c.hidden, 3.0),
    }
}

/// One layer on its own (no embedding or head), for per-layer and per-role measurements at full
/// shapes. With `experts = Some(ids)` only those experts of a MoE layer are generated (the router is
/// whole); every other expert is an empty 0 x 0 triple, so a row routed to it is a caller's error.
pub fn single_layer(
    c: &ModelConfig,
    seed: u64,
    l: usize,
    experts: Option<&[usize]>,
) -> Result<LayerWeights> {
    c.validate()?;
    if l >= c.n_layers {
        return Err(Error::Config(format!(
            "layer {l} is not inside 0..{}",
            c.n_layers
        )));
    }
    Ok(layer(c, seed, l, None, experts))
}

fn layer(
    c: &ModelConfig,
    seed: u64,
    l: usize,
    plant: Option<&Plant>,
    only: Option<&[usize]>,
) -> LayerWeights {
    let kind = c.attention_kind(l);
    let n_kv = c.n_kv_heads(kind);
    let extent = c.rel_extent(kind);
    let qw = c.q_width();
    let kvw = n_kv * c.head_dim;
    let attn = AttentionWeights {
        kind,
        q: int8(seed, l, "attn.q", qw, c.hidden, 1.0),
        k: int8(seed, l, "attn.k", kvw, c.hidden, 1.0),
        v: int8(seed, l, "attn.v", kvw, c.hidden, 1.0),
        r: int8(seed, l, "attn.r", c.n_q_heads * c.d_rel, c.hidden, 1.0),
        o: int8(seed, l, "attn.o", c.hidden, qw, 2.0 * BRANCH_GAIN),
        q_norm: norm_weight(seed, l, "attn.q_norm", c.head_dim),
        k_norm: norm_weight(seed, l, "attn.k_norm", c.head_dim),
        rel_pos: uniform(
            seed,
            l,
            "attn.rel_pos",
            c.d_rel * extent,
            (3.0 / c.d_rel as f32).sqrt(),
        ),
        conv_k: conv(seed, l, "attn.conv_k", kvw, c.conv_kernel),
        conv_v: conv(seed, l, "attn.conv_v", kvw, c.conv_kernel),
    };
    let (up_gain_log2, global_scale, attenuation_exp) = match plant {
        Some(p) => (
            p.up_gain_log2,
            p.global_scale,
            if p.attenuate { p.up_gain_log2 } else { 0 },
        ),
        None => (0, 1.0, 0),
    };
    // Stored up scales are the true ones divided by A_l (exact: powers of two).
    let up_factor = ((up_gain_log2 - attenuation_exp) as f32).exp2();
    let mlp = match c.mlp_kind(l) {
        MlpKind::Dense => MlpWeights::Dense(expert(
            seed,
            l,
            "mlp",
            0,
            c.hidden,
            c.dense_width,
            up_factor,
            1.0,
        )),
        MlpKind::Moe => {
            let n = c.n_experts_total();
            let experts = (0..n)
                .into_par_iter()
                .map(|e| {
                    if only.is_some_and(|ids| !ids.contains(&e)) {
                        return ExpertWeights::empty();
                    }
                    expert(
                        seed,
                        l,
                        "experts",
                        e,
                        c.hidden,
                        c.expert_width,
                        up_factor,
                        2.5,
                    )
                })
                .collect();
            MlpWeights::Moe {
                router: uniform(
                    seed,
                    l,
                    "router.weight",
                    n * c.hidden,
                    2.0 * (3.0 / c.hidden as f32).sqrt(),
                ),
                bias: uniform(seed, l, "router.bias", c.n_routed, 0.05),
                experts,
            }
        }
    };
    LayerWeights {
        index: l,
        attn_norm: norm_weight(seed, l, "attn_norm.weight", c.hidden),
        attn,
        conv_attn_out: conv(seed, l, "conv_attn_out", c.hidden, c.conv_kernel),
        mlp_norm: norm_weight(seed, l, "mlp_norm.weight", c.hidden),
        mlp,
        conv_mlp_out: conv(seed, l, "conv_mlp_out", c.hidden, c.conv_kernel),
        global_scale,
        attenuation_exp,
    }
}

/// One expert-shaped triple; `down_gain` sets the branch's contribution.
#[allow(clippy::too_many_arguments)]
fn expert(
    seed: u64,
    l: usize,
    name: &str,
    e: usize,
    hidden: usize,
    width: usize,
    up_factor: f32,
    down_gain: f32,
) -> ExpertWeights {
    let gain = if name == "mlp" {
        2.0 * BRANCH_GAIN
    } else {
        down_gain * BRANCH_GAIN
    };
    ExpertWeights {
        gate: int4(seed, l, &format!("{name}.gate"), e, width, hidden, 1.0),
        up: int4(seed, l, &format!("{name}.up"), e, width, hidden, up_factor),
        down: int4(
            seed,
            l,
            &format!("{name}.down"),
            e,
            hidden,
            width,
            gain * 2.0,
        ),
    }
}

/// INT4 with nibbles uniform in 1..=15 and group scales giving outputs of RMS ≈ `gain` for unit
/// inputs.
fn int4(
    seed: u64,
    l: usize,
    name: &str,
    e: usize,
    rows: usize,
    cols: usize,
    gain: f32,
) -> Int4Matrix {
    let mut rng = Rng::for_tensor(seed, l, name, e);
    let base = 1.0 / (INT4_VAR * cols as f32).sqrt();
    let mut q = vec![0u8; rows * cols / 2];
    for b in q.iter_mut() {
        let lo = 1 + rng.below(15) as u8;
        let hi = 1 + rng.below(15) as u8;
        *b = lo | (hi << 4);
    }
    let scales = (0..rows * cols / 32)
        .map(|_| f16::from_f32(base * (0.75 + 0.5 * rng.unit())) * f16::from_f32(gain))
        .collect();
    Int4Matrix::new(rows, cols, q, scales)
}

fn int8(seed: u64, l: usize, name: &str, rows: usize, cols: usize, gain: f32) -> Int8Matrix {
    let mut rng = Rng::for_tensor(seed, l, name, 0);
    let q = (0..rows * cols)
        .map(|_| (rng.below(255) as i32 - 127) as i8)
        .collect();
    let base = gain / (INT8_VAR * cols as f32).sqrt();
    let scales = (0..rows)
        .map(|_| f16::from_f32(base * (0.75 + 0.5 * rng.unit())))
        .collect();
    Int8Matrix::new(rows, cols, q, scales)
}

fn norm_weight(seed: u64, l: usize, name: &str, n: usize) -> Vec<f32> {
    let mut rng = Rng::for_tensor(seed, l, name, 0);
    (0..n).map(|_| 1.0 + 0.1 * rng.sym()).collect()
}

fn uniform(seed: u64, l: usize, name: &str, n: usize, amp: f32) -> Vec<f32> {
    let mut v = vec![0.0; n];
    Rng::for_tensor(seed, l, name, 0).fill_sym(&mut v, amp);
    v
}

fn conv(seed: u64, l: usize, name: &str, channels: usize, k: usize) -> ConvTaps {
    ConvTaps::new(channels, k, uniform(seed, l, name, channels * k, 0.1))
}
