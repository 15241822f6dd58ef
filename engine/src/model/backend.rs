//! Where a layer's matrix products run: the engine's own kernels ([`Native`]) or another runtime's
//! compiled graphs (OpenVINO, `openvino::layers::OvModel`). The model computes everything else
//! itself — norms, attention over each stream's history, the short convolutions, the residual
//! sums — and asks its backend for a layer's products: attention's input projections and output,
//! the MLP, and the head. `Model::backend` builds the one its options ask for when it is first
//! needed; the forward pass sees only this trait.

use std::any::Any;

use super::attention::Projections;
use super::config::ModelConfig;
use super::mlp;
use super::options::ForwardOptions;
use super::weights::{AttentionWeights, HeadWeights, LayerWeights};
use crate::error::Result;
use crate::kernels::int8;

/// A layer's products, computed by the kernels or by another runtime.
pub trait Backend: Send + Sync {
    /// q, k, v and r of the rows of `xn`, for the layer in `slot`.
    fn project(
        &self,
        slot: usize,
        w: &AttentionWeights,
        xn: &[f32],
        p: &mut Projections,
    ) -> Result<()>;
    /// `W_o · heads` of `n` rows, for the layer in `slot`.
    fn output(
        &self,
        slot: usize,
        w: &AttentionWeights,
        heads: &[f32],
        n: usize,
        out: &mut [f32],
    ) -> Result<()>;
    /// `y = MLP(xn)` of the layer in `slot`.
    fn mlp(
        &self,
        slot: usize,
        c: &ModelConfig,
        w: &LayerWeights,
        opts: &ForwardOptions,
        xn: &[f32],
        y: &mut [f32],
    ) -> Result<()>;
    /// Logits `[n, vocab_padded]` of rows already normalised and scaled.
    fn head(&self, c: &ModelConfig, w: &HeadWeights, xn: &[f32]) -> Result<Vec<f32>>;
    /// The backend itself, for what only one kind reports (OpenVINO's executed graphs).
    fn as_any(&self) -> &dyn Any;
}

/// The engine's INT8 and expert kernels.
pub struct Native;

impl Backend for Native {
    fn project(
        &self,
        _: usize,
        w: &AttentionWeights,
        xn: &[f32],
        p: &mut Projections,
    ) -> Result<()> {
        int8::matmul_shared(
            &[&w.q, &w.k, &w.v, &w.r],
            xn,
            &mut [&mut p.q, &mut p.k, &mut p.v, &mut p.r],
        );
        Ok(())
    }

    fn output(
        &self,
        _: usize,
        w: &AttentionWeights,
        heads: &[f32],
        _: usize,
        out: &mut [f32],
    ) -> Result<()> {
        int8::matmul(&w.o, heads, out);
        Ok(())
    }

    fn mlp(
        &self,
        _: usize,
        c: &ModelConfig,
        w: &LayerWeights,
        opts: &ForwardOptions,
        xn: &[f32],
        y: &mut [f32],
    ) -> Result<()> {
        mlp::forward(c, w, opts, xn, y);
        Ok(())
    }

    fn head(&self, c: &ModelConfig, w: &HeadWeights, xn: &[f32]) -> Result<Vec<f32>> {
        let mut full = vec![0.0f32; xn.len() / c.hidden * c.vocab_padded];
        int8::matmul(&w.head, xn, &mut full);
        Ok(full)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
