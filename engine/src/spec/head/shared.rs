//! What the draft head shares with the model (ARCHITECTURE.md §1.7): the token embedding its
//! modules read, the final norm that turns a captured residual into module 0's `prev`, and the
//! unembedding its logits go through, `logits_k = (h_k / mup_width_multiplier) · unembedᵀ`.

use std::path::Path;

use super::draft_config;
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use crate::kernels::blocks::BlockMatrix;
use crate::kernels::linear::{self, dequantize_int8, Linear};
use crate::model::checkpoint;
use crate::model::config::ModelConfig;
use crate::model::norm::rms_norm;
use crate::model::weights::{EmbedWeights, HeadWeights};

enum Embed {
    F32(Vec<f32>),
    Blocks(BlockMatrix),
}

pub struct Shared {
    /// The model's configuration as the head sees it (`draft_config`).
    pub config: ModelConfig,
    /// The embedding rows: f32 [vocab_size, H] (Inkling), or a checkpoint's blocks, a row
    /// dequantised when it is read (the same values, without holding vocabulary × H floats).
    embed: Embed,
    final_norm: Vec<f32>,
    /// [vocab_size, H]: the model's INT8 head rows, dequantised (the same values); a checkpoint's
    /// head blocks dequantised on first use (a live draft head never uses them: it multiplies the
    /// blocks, and would otherwise hold the vocabulary × H floats for nothing).
    head: std::sync::OnceLock<Linear>,
    /// `head` stored k-major, [H, vocab_size], made on first use by `head_logits` (the replay).
    head_t: std::sync::OnceLock<Vec<f32>>,
    /// A checkpoint's head blocks as the model multiplies them (`model_logits`).
    blocks: Option<BlockMatrix>,
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
            config: draft_config(c),
            embed: Embed::F32(
                embed.embed[..c.vocab_size * h]
                    .iter()
                    .map(|v| v.to_f32())
                    .collect(),
            ),
            final_norm: head.final_norm.clone(),
            head: Linear::new(c.vocab_size, h, w[..c.vocab_size * h].to_vec()).into(),
            head_t: std::sync::OnceLock::new(),
            blocks: None,
        })
    }

    /// The embedding, final norm and head of a GGUF checkpoint, kept as the file's blocks: an
    /// embedding row is dequantised to f32 when read, the head when `head` is first asked for (the
    /// model's own logits multiply the same blocks with 8-bit activations: only near-ties may
    /// differ).
    pub fn from_gguf(path: &Path) -> Result<Self> {
        let g = Gguf::open(path)?;
        let c = checkpoint::config::from_gguf(&g)?;
        let first = checkpoint::load::load_range(&g, &c, 0..1)?;
        let last = checkpoint::load::load_range(&g, &c, c.n_layers - 1..c.n_layers)?;
        let (Some(first), Some(last)) = (&first.checkpoint, &last.checkpoint) else {
            return Err(Error::Weights(format!(
                "{}: not loaded as a checkpoint",
                path.display()
            )));
        };
        let (Some(embed), Some(norm), Some(head)) = (&first.embed, &last.final_norm, &last.head)
        else {
            return Err(Error::Weights(format!(
                "{}: no embedding, final norm or head",
                path.display()
            )));
        };
        Ok(Shared {
            config: draft_config(&c),
            embed: Embed::Blocks(embed.clone()),
            final_norm: norm.clone(),
            head: std::sync::OnceLock::new(),
            head_t: std::sync::OnceLock::new(),
            blocks: Some(head.clone()),
        })
    }

    /// Rows of the embedding table in f32, [tokens, H]. Ids must be in the vocabulary.
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
            match &self.embed {
                Embed::F32(e) => out.extend_from_slice(&e[t * h..(t + 1) * h]),
                Embed::Blocks(b) => {
                    let at = out.len();
                    out.resize(at + h, 0.0);
                    b.dequantize_row(t, &mut out[at..]);
                }
            }
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

    /// The model's own logits of residual rows ([n, H] before the final norm): a checkpoint's
    /// final norm and head blocks as its last role computes them (the same bits), Inkling's
    /// `logits(head, final_norm(x))` (the fleet's INT8 kernel may differ at near-ties).
    pub fn model_logits(&self, x: &[f32]) -> Vec<f32> {
        match &self.blocks {
            Some(b) => {
                let mut xn = x.to_vec();
                checkpoint::layer::rms_norm(&mut xn, &self.final_norm, self.config.rms_eps);
                let mut out = vec![0.0f32; x.len() / self.config.hidden * b.rows];
                b.matmul(&xn, &mut out);
                out
            }
            None => self.logits(self.head(), &self.final_norm(x)),
        }
    }

    /// A checkpoint's head blocks, as its last role multiplies them (None for Inkling).
    pub fn head_blocks(&self) -> Option<&BlockMatrix> {
        self.blocks.as_ref()
    }

    /// The whole unembedding, [vocab_size, H].
    pub fn head(&self) -> &Linear {
        self.head.get_or_init(|| {
            let (v, h) = (self.config.vocab_size, self.config.hidden);
            let mut w = vec![0.0f32; v * h];
            if let Some(b) = &self.blocks {
                for (r, o) in w.chunks_exact_mut(h).enumerate() {
                    b.dequantize_row(r, o);
                }
            }
            Linear::new(v, h, w)
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    /// `(h / mup) · wᵀ` for rows h of [n, H], w a (possibly restricted) head: [n, w.rows].
    pub fn logits(&self, w: &Linear, h: &[f32]) -> Vec<f32> {
        let x = self.scaled(h);
        let mut y = vec![0.0f32; (h.len() / self.config.hidden) * w.rows];
        linear::matmul(w, &x, &mut y);
        y
    }

    /// `logits(head(), h)` with its bits, for many rows at once (the replay's every anchor of
    /// every module): through a k-major copy of the head, made on first use (vocabulary × H
    /// floats more, 113 MB for SmolLM2), which the SGEMM packs by contiguous copies where the
    /// head's own rows need a gather per value (`linear::product`, whose bits are `matmul`'s for
    /// two rows or more; one row takes `logits`). On host E the SmolLM2 replay took 0.85x and
    /// 0.86x the seconds, side by side (`results/replay-kmajor-20261206-e`).
    pub fn head_logits(&self, h: &[f32]) -> Vec<f32> {
        let w = self.head();
        let n = h.len() / self.config.hidden;
        if n < 2 {
            return self.logits(w, h);
        }
        let t = self
            .head_t
            .get_or_init(|| linear::transposed(&w.w, w.rows, w.cols));
        let x = self.scaled(h);
        let mut y = vec![0.0f32; n * w.rows];
        linear::product(&x, t, n, w.cols, w.rows, &mut y);
        y
    }

    /// `h / mup` (borrowed as it is when mup is 1).
    fn scaled<'a>(&self, h: &'a [f32]) -> std::borrow::Cow<'a, [f32]> {
        let inv = 1.0 / self.config.mup_width_multiplier;
        if inv == 1.0 {
            h.into()
        } else {
            h.iter().map(|v| v * inv).collect::<Vec<f32>>().into()
        }
    }
}
