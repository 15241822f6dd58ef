//! Read-only weights of a contiguous range of layers (a role, or the whole model), in their stored
//! formats (FORMAT.md). Built by `synth` (generated) or `load` (from an export); never mutated after.

use half::f16;

use super::config::{AttentionKind, MlpKind, ModelConfig};
use crate::kernels::conv::ConvTaps;
use crate::kernels::int4::{Int4Matrix, Int4View};
use crate::kernels::int8::Int8Matrix;

/// Attention of one layer.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionWeights {
    pub kind: AttentionKind,
    /// [n_q·D, H]
    pub q: Int8Matrix,
    /// [n_kv·D, H]
    pub k: Int8Matrix,
    /// [n_kv·D, H]
    pub v: Int8Matrix,
    /// [n_q·d_rel, H]
    pub r: Int8Matrix,
    /// [H, n_q·D]
    pub o: Int8Matrix,
    /// [D], shared by the heads of the layer.
    pub q_norm: Vec<f32>,
    /// [D]
    pub k_norm: Vec<f32>,
    /// [d_rel, extent]
    pub rel_pos: Vec<f32>,
    /// over n_kv·D channels
    pub conv_k: ConvTaps,
    pub conv_v: ConvTaps,
}

/// One expert (or one dense slice set): `E(x) = W_down (silu(W_gate x) ⊙ W_up' x)`.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpertWeights {
    /// [width, H]
    pub gate: Int4Matrix,
    /// [width, H], scales divided by A_l
    pub up: Int4Matrix,
    /// [H, width]
    pub down: Int4Matrix,
}

impl ExpertWeights {
    /// A placeholder for an expert that was not instantiated (0 x 0 matrices).
    pub fn empty() -> Self {
        let m = || Int4Matrix::new(0, 0, Vec::new(), Vec::new());
        ExpertWeights {
            gate: m(),
            up: m(),
            down: m(),
        }
    }

    pub fn bytes(&self) -> usize {
        self.gate.bytes() + self.up.bytes() + self.down.bytes()
    }

    /// A dense triple as `n` slices of equal width (ARCHITECTURE.md §1.6): slice j's gate and up
    /// rows and down columns `j·w..(j+1)·w`, views of the same packed weights.
    pub fn slices(&self, n: usize) -> Vec<[Int4View<'_>; 3]> {
        let (h, we) = (self.gate.cols, self.gate.rows / n.max(1));
        (0..n)
            .map(|j| {
                let r = j * we..(j + 1) * we;
                [
                    self.gate.view_part(r.clone(), 0..h),
                    self.up.view_part(r.clone(), 0..h),
                    self.down.view_part(0..h, r),
                ]
            })
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum MlpWeights {
    /// Dense SwiGLU of width `dense_width`, kept as one expert-shaped triple.
    Dense(ExpertWeights),
    Moe {
        /// [n_routed + n_shared, H] f32
        router: Vec<f32>,
        /// [n_routed]
        bias: Vec<f32>,
        /// routed experts, then shared
        experts: Vec<ExpertWeights>,
    },
}

impl MlpWeights {
    pub fn kind(&self) -> MlpKind {
        match self {
            MlpWeights::Dense(_) => MlpKind::Dense,
            MlpWeights::Moe { .. } => MlpKind::Moe,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct LayerWeights {
    pub index: usize,
    pub attn_norm: Vec<f32>,
    pub attn: AttentionWeights,
    /// over H channels
    pub conv_attn_out: ConvTaps,
    pub mlp_norm: Vec<f32>,
    pub mlp: MlpWeights,
    pub conv_mlp_out: ConvTaps,
    pub global_scale: f32,
    /// n_l of `A_l = 2^n_l`
    pub attenuation_exp: i32,
}

impl LayerWeights {
    pub fn attenuation(&self) -> f32 {
        (self.attenuation_exp as f32).exp2()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct EmbedWeights {
    /// [vocab_padded, H]
    pub embed: Vec<f16>,
    /// [H]
    pub norm: Vec<f32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct HeadWeights {
    /// [H]
    pub final_norm: Vec<f32>,
    /// [vocab_padded, H]
    pub head: Int8Matrix,
}

/// The weights of layers `layer_start..layer_end`, plus the embedding when the range starts at 0
/// and the head when it ends at the last layer.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelWeights {
    pub config: ModelConfig,
    pub seed: u64,
    pub layer_start: usize,
    pub layer_end: usize,
    pub embed: Option<EmbedWeights>,
    pub layers: Vec<LayerWeights>,
    pub head: Option<HeadWeights>,
    /// A real checkpoint's layers (GGUF): then `embed`, `layers` and `head` above are empty and
    /// the forward pass runs these (`checkpoint`).
    pub checkpoint: Option<super::checkpoint::CheckpointWeights>,
}
