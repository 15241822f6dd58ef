//! Greedy continuations of a set of prompts with each generated position's two best candidates
//! and their log-probabilities: the engine's side of the token-for-token comparison with
//! llama.cpp on the same GGUF file (`scripts/gguf_parity.sh`; the harness compares the two).
//!
//! Input: JSON lines with `id` and `prompt_ids` (token ids, as llama-server tokenised the prompt).
//! Output: one line per prompt with `id`, `prompt_ids`, `generated_ids` and `top` (per position,
//! `[[id, logprob], [id, logprob]]`), the shape `scripts/gguf_parity_llama.py` writes.

use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::generate::generate;
use crate::model::Model;

#[derive(Deserialize)]
struct PromptLine {
    id: String,
    prompt_ids: Vec<u32>,
}

/// One prompt's greedy continuation.
#[derive(Serialize, Deserialize)]
pub struct Continuation {
    pub id: String,
    pub prompt_ids: Vec<u32>,
    pub generated_ids: Vec<u32>,
    /// Per generated position, the best two tokens and their log-probabilities.
    pub top: Vec<Vec<(u32, f32)>>,
}

/// The `k` best tokens of a logit row with their log-probabilities (log-sum-exp in f64), best
/// first, lower id first on ties.
pub fn top_logprobs(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let lse = max
        + logits
            .iter()
            .map(|&v| (v as f64 - max).exp())
            .sum::<f64>()
            .ln();
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    let k = k.min(ids.len());
    ids.select_nth_unstable_by(k.saturating_sub(1), |&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    ids.truncate(k);
    ids.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    ids.into_iter()
        .map(|i| (i, (logits[i as usize] as f64 - lse) as f32))
        .collect()
}

/// Run every prompt of `prompts` (JSON lines) for `max_tokens` greedy tokens (fewer when `stop`
/// is generated) and write the continuations to `out`, calling `progress(done, total)` after each.
pub fn run(
    model: &Model,
    prompts: &Path,
    max_tokens: usize,
    stop: Option<u32>,
    out: &Path,
    mut progress: impl FnMut(usize, usize),
) -> Result<usize> {
    let f = std::fs::File::open(prompts).map_err(|e| Error::io(prompts, e))?;
    let mut lines = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| Error::io(prompts, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let p: PromptLine = serde_json::from_str(&line).map_err(|e| {
            Error::Input(format!(
                "{} line {}: {e} (each line needs \"id\" and \"prompt_ids\")",
                prompts.display(),
                i + 1
            ))
        })?;
        lines.push(p);
    }
    let mut w = std::io::BufWriter::new(std::fs::File::create(out).map_err(|e| Error::io(out, e))?);
    for (i, p) in lines.iter().enumerate() {
        let g = generate(
            model,
            &p.prompt_ids,
            max_tokens,
            p.prompt_ids.len(),
            stop,
            true,
        )?;
        let c = Continuation {
            id: p.id.clone(),
            prompt_ids: p.prompt_ids.clone(),
            generated_ids: g.tokens.clone(),
            top: g.logits.iter().map(|l| top_logprobs(l, 2)).collect(),
        };
        let line = serde_json::to_string(&c).map_err(|e| Error::Input(e.to_string()))?;
        writeln!(w, "{line}").map_err(|e| Error::io(out, e))?;
        progress(i + 1, lines.len());
    }
    w.flush().map_err(|e| Error::io(out, e))?;
    Ok(lines.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_logprobs_are_best_first_and_normalised() {
        let t = top_logprobs(&[0.0, 2.0, 1.0, 2.0], 2);
        assert_eq!(t.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 3]);
        let z = 2f64.exp() * 2.0 + 1.0 + 1f64.exp();
        assert!((t[0].1 as f64 - (2.0 - z.ln())).abs() < 1e-6);
    }
}
