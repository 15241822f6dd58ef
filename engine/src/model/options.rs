//! What a forward pass is asked for and what it reports: `ForwardOptions` (operator choices that
//! do not change the weights) and `ForwardTimings` (time spent in each part), shared by `Model`
//! (`forward`), the feed-forward (`mlp`) and the checkpoint layers.

use super::config::{AttentionMode, Backend, DenseForm};

/// Operator choices that do not change the weights.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct ForwardOptions {
    pub dense_form: DenseForm,
    /// Apply the per-row factor F_i on the FP16 expert path (off only to demonstrate overflow).
    pub row_factor: bool,
    /// Round the expert path to f16 as the device does (ARCHITECTURE.md §1.5). Off, the same
    /// path runs in f32: used to compare the architecture itself with the float64 oracle.
    pub expert_f16: bool,
    /// Serial (the paper's loop) or parallel attention over the caches.
    pub attention: AttentionMode,
    /// Which kernels compute the products (native, or OpenVINO graphs).
    pub backend: Backend,
}

impl Default for ForwardOptions {
    fn default() -> Self {
        ForwardOptions {
            dense_form: DenseForm::ThreeMatmul,
            row_factor: true,
            expert_f16: true,
            attention: AttentionMode::Parallel,
            backend: Backend::default(),
        }
    }
}

/// Time spent in each part of a forward pass (accumulated by `Model::forward_timed`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ForwardTimings {
    pub attention_ns: u64,
    pub mlp_ns: u64,
    pub other_ns: u64,
}
