//! Single-process greedy generation over a whole model: the reference the pipeline must equal
//! token for token.

use std::time::Instant;

use crate::capture::{Capture, Header};
use crate::error::{Error, Result};
use crate::model::{argmax, Model, Segment};

/// Result of one greedy generation.
#[derive(Clone, Debug)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// Logits of every generated position (only when asked for).
    pub logits: Vec<Vec<f32>>,
    pub prefill_s: f64,
    pub decode_s: f64,
    pub prompt_rows: usize,
}

impl Generation {
    pub fn prefill_tok_s(&self) -> f64 {
        self.prompt_rows as f64 / self.prefill_s.max(1e-12)
    }

    /// Decode rate over the tokens after the first (the first comes from prefill).
    pub fn decode_tok_s(&self) -> f64 {
        self.tokens.len().saturating_sub(1) as f64 / self.decode_s.max(1e-12)
    }
}

/// Feed `prompt` in windows of at most `window` rows, then decode `max_tokens` greedily, stopping
/// early at `stop` if given.
pub fn generate(
    model: &Model,
    prompt: &[u32],
    max_tokens: usize,
    window: usize,
    stop: Option<u32>,
    keep_logits: bool,
) -> Result<Generation> {
    run(model, prompt, max_tokens, window, stop, keep_logits, None)
}

/// As `generate`, also returning the capture of the stream (ARCHITECTURE.md §3.4): the residual
/// before the final norm at every position fed, as the fleet's last role records it.
pub fn generate_captured(
    model: &Model,
    prompt: &[u32],
    max_tokens: usize,
    window: usize,
    stop: Option<u32>,
) -> Result<(Generation, Capture)> {
    let mut residuals = Vec::new();
    let g = run(
        model,
        prompt,
        max_tokens,
        window,
        stop,
        false,
        Some(&mut residuals),
    )?;
    let mut tokens = prompt.to_vec();
    tokens.extend_from_slice(&g.tokens);
    let capture = Capture {
        header: Header {
            hidden: model.config().hidden as u32,
            role: 0,
            slot: 0,
            prompt_rows: prompt.len() as u32,
            sequence: 0,
            n_records: (tokens.len() - 1) as u32,
        },
        tokens,
        residuals,
    };
    Ok((g, capture))
}

fn run(
    model: &Model,
    prompt: &[u32],
    max_tokens: usize,
    window: usize,
    stop: Option<u32>,
    keep_logits: bool,
    mut residuals: Option<&mut Vec<f32>>,
) -> Result<Generation> {
    let c = model.config();
    if prompt.is_empty() {
        return Err(Error::Input("the prompt is empty".into()));
    }
    if window == 0 {
        return Err(Error::Input(
            "the prefill window must be at least one row".into(),
        ));
    }
    let budget = prompt.len() + max_tokens;
    let mut st = model.new_stream(budget);
    let h = c.hidden;
    let t0 = Instant::now();
    let mut last = vec![0.0f32; h];
    for chunk in prompt.chunks(window) {
        let mut x = vec![0.0f32; chunk.len() * h];
        model.embed(chunk, &mut x)?;
        model.forward(
            &mut [Segment {
                state: &mut st,
                rows: chunk.len(),
            }],
            &mut x,
        )?;
        last.copy_from_slice(&x[(chunk.len() - 1) * h..]);
        if let Some(r) = residuals.as_deref_mut() {
            r.extend_from_slice(&x);
        }
    }
    let mut logits = model.logits(&last)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut out = Generation {
        tokens: Vec::new(),
        logits: Vec::new(),
        prefill_s,
        decode_s: 0.0,
        prompt_rows: prompt.len(),
    };
    loop {
        let tok = argmax(&logits);
        out.tokens.push(tok);
        if keep_logits {
            out.logits.push(std::mem::take(&mut logits));
        }
        if out.tokens.len() >= max_tokens || Some(tok) == stop {
            break;
        }
        let mut x = vec![0.0f32; h];
        model.embed(&[tok], &mut x)?;
        model.forward(
            &mut [Segment {
                state: &mut st,
                rows: 1,
            }],
            &mut x,
        )?;
        if let Some(r) = residuals.as_deref_mut() {
            r.extend_from_slice(&x);
        }
        logits = model.logits(&x)?;
    }
    out.decode_s = t1.elapsed().as_secs_f64();
    Ok(out)
}
