//! The multi-token-prediction draft head (ARCHITECTURE.md §1.7): eight chained modules. Module k at
//! anchor t takes `prev` (module 0: the model's final-norm residual at t; module k > 0: module
//! k−1's output at t) and the embedding of x_{t+k+1}, runs one decoder block with its own attention
//! and convolution history over the sequence, and predicts x_{t+k+2} through the model's shared
//! unembedding.
//!
//! - `weights`: the modules' f32 weights, synthetic or fitted, and their deployment grids.
//! - `block`: one module's forward over a frame of rows.
//! - `shared`: the embedding, final norm and unembedding the head shares with the model.
//! - `chain`: replaying every module over a captured sequence (teacher, self-fed, no-context).
//! - `io`: the head's export (manifest + safetensors).
//!
//! Weights are immutable; each module's per-stream state is a `StreamState` of one block, made by
//! `MtpState`, which rewinds with `truncate` like the model's.

pub mod block;
pub mod chain;
pub mod io;
pub mod shared;
pub mod weights;

pub use block::BlockTrace;
pub use shared::Shared;
pub use weights::{ModuleWeights, MtpForm, MtpWeights};

use crate::error::Result;
use crate::model::config::{AttentionKind, ModelConfig};
use crate::model::state::StreamState;

/// Modules 1 and 3 attend globally, the others over the sliding window (ARCHITECTURE.md §1.7).
pub fn module_kind(k: usize) -> AttentionKind {
    if k == 1 || k == 3 {
        AttentionKind::Global
    } else {
        AttentionKind::Sliding
    }
}

/// One stream's state in every module.
pub struct MtpState {
    pub modules: Vec<StreamState>,
}

impl MtpState {
    pub fn new(c: &ModelConfig, budget: usize) -> Self {
        MtpState {
            modules: (0..c.n_mtp)
                .map(|k| StreamState::for_kinds(c, &[module_kind(k)], budget))
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
