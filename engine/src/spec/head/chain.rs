//! Replaying the eight modules over one captured sequence (MEASUREMENTS.md §5). Tokens
//! `x_0 .. x_{T−1}` (the prompt, then the generated tokens), residuals at positions `0 .. T−2`.
//! Module k runs as one stream over positions `t = 0 ..= T−3−k` (its attention history is the
//! whole sequence, prompt included) with `prev` = module k−1's output at t (module 0: the final-norm
//! residual at t) and the embedding of an input token for position t + k + 1:
//!
//! - **teacher**: the true x_{t+k+1};
//! - **self-fed**: module k−1's own prediction at t where x_{t+k+1} was generated (t + k + 1 ≥ P),
//!   the true prompt token otherwise (module 0 always takes the true x_{t+1}); at every position,
//!   the history before an anchor included, as a head drafting alongside generation computed it;
//! - **no-context**: as self-fed, but modules ≥ 1 see no history: every position is a fresh
//!   one-row stream at position 0.
//!
//! Predictions are the arg-max of module k's logits at the anchors `t ∈ [P−1, T−3−k]` (it predicts
//! x_{t+k+2}), over the first n rows of the unembedding for each restriction n asked for.

use super::block;
use super::weights::MtpWeights;
use super::Shared;
use crate::error::{Error, Result};
use crate::model::argmax;
use crate::model::attention::Segment;
use crate::model::config::AttentionMode;
use crate::model::state::StreamState;

/// How a module's input tokens and history are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayMode {
    Teacher,
    SelfFed,
    NoContext,
}

impl ReplayMode {
    pub const ALL: [ReplayMode; 3] = [
        ReplayMode::Teacher,
        ReplayMode::SelfFed,
        ReplayMode::NoContext,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReplayMode::Teacher => "teacher",
            ReplayMode::SelfFed => "self_fed",
            ReplayMode::NoContext => "no_context",
        }
    }
}

/// One sequence, as a capture holds it.
pub struct Sequence<'a> {
    /// `x_0 .. x_{T−1}`.
    pub tokens: &'a [u32],
    pub prompt_rows: usize,
    /// [T − 1, H] residuals before the final norm.
    pub residuals: &'a [f32],
}

/// What one module produced at its anchors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModuleReplay {
    /// Anchor positions t, ascending (`P − 1 ..= T − 3 − k`).
    pub anchors: Vec<usize>,
    /// `preds[v][i]`: arg-max at anchor i over the first `vocabs[v]` head rows.
    pub preds: Vec<Vec<u32>>,
    /// [anchors, vocab_size] logits, when asked for.
    pub logits: Option<Vec<f32>>,
}

/// Replay every module of `head` over `seq`. `vocabs` lists the head-row restrictions (each at
/// most the vocabulary; the full vocabulary is simply its size). Returns one entry per module.
pub fn replay(
    head: &MtpWeights,
    shared: &Shared,
    seq: &Sequence<'_>,
    mode: ReplayMode,
    vocabs: &[usize],
    keep_logits: bool,
) -> Result<Vec<ModuleReplay>> {
    if head.config != shared.config {
        return Err(Error::Input(format!(
            "the draft head was made for {} (hidden {}, vocabulary {}), the shared weights are {}'s",
            head.config.name, head.config.hidden, head.config.vocab_size, shared.config.name
        )));
    }
    let c = &head.config;
    let h = c.hidden;
    let t_len = seq.tokens.len();
    let p = seq.prompt_rows;
    if p == 0 || t_len < p + 2 || seq.residuals.len() != (t_len - 1) * h {
        return Err(Error::Input(format!(
            "a replayed sequence needs a prompt, at least two generated tokens and {} residual \
             rows of {h} (got {} tokens, prompt {p}, {} values)",
            t_len.saturating_sub(1),
            t_len,
            seq.residuals.len()
        )));
    }
    let v_max = shared.vocab_size();
    if let Some(&bad) = vocabs.iter().find(|&&n| n == 0 || n > v_max) {
        return Err(Error::Input(format!(
            "head restriction {bad} is outside 1..={v_max}"
        )));
    }
    let budget = t_len;
    // module 0's prev: the final-norm residual at t = 0 ..= T − 3
    let mut prev = shared.final_norm(&seq.residuals[..(t_len - 2) * h]);
    let mut prev_preds: Vec<u32> = Vec::new(); // module k−1's full-vocabulary arg-max per position
    let mut out = Vec::with_capacity(head.modules.len());
    for (k, m) in head.modules.iter().enumerate() {
        if t_len < p + 2 + k {
            break; // no anchor left for this module
        }
        let n = t_len - 2 - k; // positions 0 ..= T − 3 − k
        let tokens: Vec<u32> = (0..n)
            .map(|t| {
                let j = t + k + 1;
                match mode {
                    ReplayMode::Teacher => seq.tokens[j],
                    _ if k == 0 || j < p => seq.tokens[j],
                    _ => prev_preds[t],
                }
            })
            .collect();
        let emb = shared.embed_rows(&tokens)?;
        let mut hk = vec![0.0f32; n * h];
        // one stream over every position, or (no-context, modules ≥ 1) a fresh one per position
        let alone = mode == ReplayMode::NoContext && k > 0;
        let (streams, rows, room) = if alone { (n, 1, 1) } else { (1, n, budget) };
        let mut states: Vec<StreamState> = (0..streams)
            .map(|_| StreamState::for_kinds(c, &[m.kind], room))
            .collect();
        let mut segs: Vec<Segment<'_>> = states
            .iter_mut()
            .map(|s| Segment { state: s, rows })
            .collect();
        block::forward(
            c,
            m,
            AttentionMode::Parallel,
            &mut segs,
            &prev[..n * h],
            &emb,
            &mut hk,
            None,
        )?;
        // logits from the first position whose prediction is used: the anchors, and for the
        // self-fed modes the positions whose next module reads a generated token (t + k + 2 ≥ P)
        let lo = match mode {
            ReplayMode::Teacher => p - 1,
            _ => (p - 1).min((p + 1).saturating_sub(k + 3)),
        };
        let logits = shared.head_logits(&hk[lo * h..]);
        prev_preds = vec![0; lo];
        prev_preds.extend(logits.chunks_exact(v_max).map(argmax));
        let anchors: Vec<usize> = (p - 1..n).collect();
        let at = |t: usize| (t - lo) * v_max;
        let preds = vocabs
            .iter()
            .map(|&nv| {
                anchors
                    .iter()
                    .map(|&t| argmax(&logits[at(t)..at(t) + nv]))
                    .collect()
            })
            .collect();
        let logits = keep_logits.then(|| logits[at(p - 1)..].to_vec());
        out.push(ModuleReplay {
            anchors,
            preds,
            logits,
        });
        prev = hk;
    }
    Ok(out)
}
