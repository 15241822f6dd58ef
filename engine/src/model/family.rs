//! The architecture family of a model, as data the forward pass reads: Inkling (the paper's model,
//! synthetic weights or our own export format) or a real checkpoint family read from a GGUF file.
//!
//! What the checkpoint families share with Inkling: RMSNorm, grouped-query attention over the same
//! per-stream KV caches, SwiGLU feed-forwards, softmax-routed experts, the same residual frames,
//! roles, capture and speculation. What only Inkling uses (the checkpoint layers never touch it):
//! the FP16 expert path with its attenuation A_l and row factor F_i, dense-as-slices, the
//! relative-position bias, the short convolutions, the global-layer temperature τ_p, sliding
//! windows and the normalised embedding. What only the checkpoint families use: rotary position
//! embedding, 1/sqrt(D) score scaling, ggml's block formats with 8-bit activations, and an f16 KV
//! cache (`checkpoint`).

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// The paper's architecture (ARCHITECTURE.md §1), the presets and their exports.
    #[default]
    Inkling,
    /// Dense decoder of the llama family as GGUF files describe it (llama, mistral, qwen2, qwen3):
    /// RoPE, GQA, RMSNorm, SwiGLU, optional q/k norms and projection biases.
    Llama,
    /// Qwen3-MoE: llama-family attention with q/k norms, every layer a softmax-routed mixture.
    Qwen3Moe,
}

impl Family {
    pub fn is_checkpoint(self) -> bool {
        self != Family::Inkling
    }
}

/// Rotary position embedding (checkpoint families).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rope {
    /// θ base (`rope.freq_base`).
    pub base: f32,
    /// Leading dimensions of each head that rotate (`rope.dimension_count`).
    pub dims: usize,
    /// Pairs `(i, i + dims/2)` (GPT-NeoX style: qwen2, qwen3) rather than `(2i, 2i+1)` (llama).
    pub neox: bool,
    /// Linear position scaling: positions are multiplied by this (1 / `rope.scaling.factor`).
    pub freq_scale: f32,
}
