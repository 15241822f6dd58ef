//! The multi-token-prediction draft head (ARCHITECTURE.md §1.7): eight chained modules. Module k at
//! anchor t takes `prev` (module 0: the model's final-norm residual at t; module k > 0: module
//! k−1's output at t) and the embedding of x_{t+k+1}, runs one decoder block with its own attention
//! history over the sequence, and predicts x_{t+k+2} through the model's shared unembedding.
//!
//! The block is the model's own kind at the model's width: for Inkling, its attention with
//! relative-position bias and short convolutions and an MLP of the expert width; for a checkpoint
//! (llama, qwen3moe), the checkpoint's layer (grouped-query attention with the file's RoPE, q/k
//! norms where the file has them, a dense SwiGLU of the file's feed-forward width, no
//! convolutions). A checkpoint has no draft head of its own; `draft_config` gives it eight.
//!
//! - `weights`: the modules' f32 weights, synthetic or fitted, and their deployment grids.
//! - `block`: one module's forward over a frame of rows.
//! - `shared`: the embedding, final norm and unembedding the head shares with the model.
//! - `chain`: replaying every module over a captured sequence (teacher, self-fed, no-context):
//!   the draft replay's measurement, and the reference `live` is tested against.
//! - `live`: the head drafting in the last role while it serves.
//! - `io`: the head's export (manifest + safetensors).
//!
//! Weights are immutable; each module's per-stream state is a `StreamState` of one block, made by
//! `MtpState`, which rewinds with `truncate` like the model's.

pub mod block;
pub mod chain;
pub mod io;
pub mod live;
pub mod rope_attention;
pub mod shared;
pub mod weights;

pub use block::BlockTrace;
pub use shared::Shared;
pub use weights::{ModuleWeights, MtpForm, MtpWeights};

use crate::error::Result;
use crate::model::config::{AttentionKind, ModelConfig};
use crate::model::state::StreamState;

/// Draft modules of a head made for a checkpoint (the paper's eight).
pub const CHECKPOINT_MODULES: usize = 8;

/// The configuration a draft head of `c` is made for: `c` itself, with `CHECKPOINT_MODULES`
/// modules when it is a checkpoint's (whose files carry none).
pub fn draft_config(c: &ModelConfig) -> ModelConfig {
    let mut d = c.clone();
    if c.family.is_checkpoint() && d.n_mtp == 0 {
        d.n_mtp = CHECKPOINT_MODULES;
    }
    d
}

/// Inkling: modules 1 and 3 attend globally, the others over the sliding window (ARCHITECTURE.md
/// §1.7). A checkpoint's modules all attend globally, as its layers do.
pub fn module_kind(c: &ModelConfig, k: usize) -> AttentionKind {
    if c.family.is_checkpoint() || k == 1 || k == 3 {
        AttentionKind::Global
    } else {
        AttentionKind::Sliding
    }
}

/// Width of a module's SwiGLU: Inkling's expert width; a checkpoint's dense feed-forward width
/// (qwen3moe, which has none, its expert width).
pub fn mlp_width(c: &ModelConfig) -> usize {
    if c.family.is_checkpoint() && c.dense_width > 0 {
        c.dense_width
    } else {
        c.expert_width
    }
}

/// One stream's state in every module.
pub struct MtpState {
    pub modules: Vec<StreamState>,
}

impl MtpState {
    pub fn new(c: &ModelConfig, budget: usize) -> Self {
        Self::with_modules(c, c.n_mtp, budget)
    }

    /// The state of the first `n` modules only (a head drafting `n` tokens).
    pub fn with_modules(c: &ModelConfig, n: usize, budget: usize) -> Self {
        MtpState {
            modules: (0..n.min(c.n_mtp))
                .map(|k| StreamState::for_kinds(c, &[module_kind(c, k)], budget))
                .collect(),
        }
    }

    /// Rewind every module that is past position `to` back to it (within the rewind slack).
    pub fn truncate(&mut self, to: usize) -> Result<()> {
        for s in self.modules.iter_mut().filter(|s| s.pos() > to) {
            s.truncate(to)?;
        }
        Ok(())
    }
}
