//! What the draft head shares with the model (ARCHITECTURE.md §1.7): the token embedding its
//! modules read, the final norm that turns a captured residual into module 0's `prev`, and the
//! unembedding its logits go through, `logits_k = (h_k / mup_width_multiplier) · unembedᵀ`.

use crate::error::{Error, Result};
use crate::kernels::linear::{self, dequantize_int8, Linear};
use crate::model::config::ModelConfig;
use crate::model::norm::rms_norm;
use crate::model::weights::{EmbedWeights, HeadWeights};

pub struct Shared {
    pub config: ModelConfig,
    embed: EmbedWeights,
    final_norm: Vec<f32>,
    /// [vocab_size, H]: the model's INT8 head rows, dequantised (the same values).
    head: Linear,
}

impl Shared {
    pub fn new(c: &ModelConfig, embed: EmbedWeights, head: &HeadWeights) -> Result<Self> {
        let h = c.hidden;
        if embed.embed.len() != c.vocab_padded * h
            || head.head.rows != c.vocab_padded
            || head.head.cols != h
        {
            return Err(Error::Weights(format!(
                "embedding or head does not have {}'s shape",
                c.name
            )));
        }
        let w = dequantize_int8(&head.head);
        Ok(Shared {
            config: c.clone(),
            embed,
            final_norm: head.final_norm.clone(),
            head: Linear::new(c.vocab_size, h, w[..c.vocab_size * h].to_vec()),
        })
    }

    /// Rows of the embedding table (f16 values in f32), [tokens, H]. Ids must be in the vocabulary.
    pub fn embed_rows(&self, tokens: &[u32]) -> Result<Vec<f32>> {
        let h = self.config.hidden;
        let mut out = Vec::with_capacity(tokens.len() * h);
        for &t in tokens {
            let t = t as usize;
            if t >= self.config.vocab_size {
                return Err(Error::Input(format!(
                    "token id {t} is outside the vocabulary (size {})",
                    self.config.vocab_size
                )));
            }
            out.extend(
                self.embed.embed[t * h..(t + 1) * h]
                    .iter()
                    .map(|v| v.to_f32()),
            );
        }
        Ok(out)
    }

    /// `RMSNorm_final(x)` of residual rows: module 0's `prev`, and the vector the model's own
    /// logits are `headᵀ` of.
    pub fn final_norm(&self, x: &[f32]) -> Vec<f32> {
        let mut y = vec![0.0f32; x.len()];
        rms_norm(x, &self.final_norm, self.config.rms_eps, &mut y);
        y
    }

    /// The whole unembedding, [vocab_size, H].
    pub fn head(&self) -> &Linear {
        &self.head
    }

    pub fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    /// `(h / mup) · wᵀ` for rows h of [n, H], w a (possibly restricted) head: [n, w.rows].
    pub fn logits(&self, w: &Linear, h: &[f32]) -> Vec<f32> {
        let inv = 1.0 / self.config.mup_width_multiplier;
        let scaled: Vec<f32>;
        let x = if inv == 1.0 {
            h
        } else {
            scaled = h.iter().map(|v| v * inv).collect();
            &scaled
        };
        let mut y = vec![0.0f32; (h.len() / self.config.hidden) * w.rows];
        linear::matmul(w, x, &mut y);
        y
    }
}
