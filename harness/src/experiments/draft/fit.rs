//! Fitting the draft head to the model from training captures (our design; FORMAT.md "Draft head
//! exports" records it in each fitted head's manifest).
//!
//! An untrained head agrees with the model at chance. Module k must turn (prev at t, the embedding
//! of x_{t+k+1}) into a vector whose logits through the shared unembedding pick x_{t+k+2}; the model
//! itself picks that token from `RMSNorm_final(residual_{t+k+1})`, which the training captures hold.
//! So each module is fitted, in order k = 0..7, to reproduce that target `y_t =
//! RMSNorm_final(residual_{t+k+1})` at every position t of every training sequence (prompt
//! positions included), by three closed-form ridge regressions on what its block computes:
//!
//! 1. the input projection: `z → y` (z = [hidden_norm(prev); embed_norm(e)], the block's input);
//! 2. the attention output projection W_o: attention heads → `y − u` (u = the projection's output),
//!    the heads computed by the module's own (synthetic) q, k, v, r over its history;
//! 3. the MLP down projection W_down: SwiGLU activations → what is left, `y − (u + attention)`.
//!
//! The two output convolutions get zero taps (identity), so each branch is exactly the regression's
//! output; every other weight stays the synthetic one of the same seed. Module k is fitted on
//! teacher inputs: `prev` is module k−1's fitted output (module 0: the final-norm residual at t).
//!
//! 4. With `descent.steps` > 0, gradient descent on W_down against the model's own next token
//!    (`descent`: cross-entropy through the shared unembedding, started from step 3's solution,
//!    the best held-out weights kept; a checkpoint's modules have no convolutions at all).
//!
//! Deterministic from (captures, seed, λ, descent settings): sums in a fixed order, mini-batches
//! drawn with a fixed seed.

use std::time::Instant;

use anyhow::Context;
use rayon::prelude::*;
use serde::Serialize;

use moefleet_engine::capture::Capture;
use moefleet_engine::kernels::conv::ConvTaps;
use moefleet_engine::kernels::linear::Linear;
use moefleet_engine::model::attention::Segment;
use moefleet_engine::model::config::{AttentionMode, ModelConfig};
use moefleet_engine::model::{argmax, StreamState};
use moefleet_engine::spec::head::{
    block, mlp_width, BlockTrace, ModuleWeights, MtpWeights, Shared,
};

use super::descent::{self, DescentConfig, DescentReport, DescentRows};
use super::ridge::Ridge;

#[derive(Clone, Debug, Serialize)]
pub struct FitConfig {
    /// Seed of the synthetic weights the fit starts from (and keeps where it does not fit).
    pub seed: u64,
    /// Ridge strength relative to the mean diagonal of XᵀX.
    pub lambda: f64,
    /// A control: permute every module's targets across all its training rows with this seed
    /// before fitting, so inputs and targets no longer belong together. A head fitted so must
    /// agree with the model no better than chance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shuffle_targets: Option<u64>,
    /// The last stage: gradient descent on W_down (`descent`).
    pub descent: DescentConfig,
    /// Fit only the first this many modules; the later ones keep the synthetic weights of
    /// `seed`, unfitted (None: every module). The control head is read as a first draft only
    /// (`replay`'s `control_teacher` replays module 0), and module k's fit reads only modules
    /// before it, so a control of one module has the bits of module 0 of a whole one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modules: Option<usize>,
}

/// How each module's regressions went.
#[derive(Clone, Debug, Serialize)]
pub struct ModuleFit {
    pub module: usize,
    pub rows: usize,
    /// Training R² of the target after each stage (input projection, + attention, + MLP).
    pub r2_input: f64,
    pub r2_attention: f64,
    pub r2_mlp: f64,
    /// The descent on W_down, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub descent: Option<DescentReport>,
    pub seconds: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct FitReport {
    pub config: FitConfig,
    pub train_sequences: usize,
    pub modules: Vec<ModuleFit>,
    pub seconds: f64,
}

/// One training sequence's inputs to module k: (prev rows, embedding rows, target rows, the
/// model's own next token at each target row), n rows.
struct Rows {
    n: usize,
    prev: Vec<f32>,
    emb: Vec<f32>,
    y: Vec<f32>,
    tok: Vec<u32>,
}

/// Fit every module of the head to `train` (see the module header); `next` is `model_next` of
/// the same captures (computed once for every head fitted to them).
pub fn fit(
    shared: &Shared,
    train: &[&Capture],
    next: &[Vec<u32>],
    cfg: &FitConfig,
) -> anyhow::Result<(MtpWeights, FitReport)> {
    let t0 = Instant::now();
    let c = shared.config.clone();
    let h = c.hidden;
    if let Some(bad) = train.iter().find(|cap| cap.hidden() != h) {
        anyhow::bail!(
            "a training capture has hidden width {}, the model {h}",
            bad.hidden()
        );
    }
    let mut head = MtpWeights::synthetic(&c, cfg.seed)?;
    // y per sequence: the final-norm residual at every captured position
    let targets: Vec<Vec<f32>> = train
        .par_iter()
        .map(|cap| shared.final_norm(&cap.residuals))
        .collect();
    if next.len() != train.len() {
        anyhow::bail!(
            "{} sequences of next tokens for {} captures",
            next.len(),
            train.len()
        );
    }
    let mut prev: Vec<Vec<f32>> = targets.clone();
    let mut modules = Vec::new();
    let fitted = cfg
        .modules
        .map_or(head.modules.len(), |n| n.min(head.modules.len()));
    for k in 0..fitted {
        let tk = Instant::now();
        let rows: Vec<Rows> = train
            .iter()
            .enumerate()
            .filter(|(_, cap)| cap.tokens.len() >= k + 3)
            .map(|(s, cap)| {
                let n = cap.tokens.len() - 2 - k;
                Ok(Rows {
                    n,
                    prev: prev[s][..n * h].to_vec(),
                    emb: shared.embed_rows(&cap.tokens[k + 1..k + 1 + n])?,
                    y: targets[s][(k + 1) * h..(k + 1 + n) * h].to_vec(),
                    tok: next[s].get(k + 1..k + 1 + n).unwrap_or_default().to_vec(),
                })
            })
            .collect::<anyhow::Result<Vec<Rows>>>()?;
        let rows = match cfg.shuffle_targets {
            Some(seed) => shuffle_targets(rows, h, seed ^ (k as u64 + 1)),
            None => rows,
        };
        let m = &mut head.modules[k];
        silence_outputs(&c, m);
        // 1. input projection: z -> y
        let mut r1 = Ridge::new(2 * h, h);
        r1.add_parts(rows.len(), |i| {
            let r = &rows[i];
            (block::inputs(&c, m, &r.prev, &r.emb).into(), r.y.clone())
        });
        let s1 = r1
            .solve(cfg.lambda)
            .context("fitting the input projection")?;
        m.input_proj = s1.weights;
        // 2. attention output: heads -> y − u
        let traces = run(&c, m, &rows)?;
        let mut r2 = Ridge::new(c.q_width(), h);
        r2.add_parts(rows.len(), |i| {
            let t = &traces[i].1;
            (t.heads.as_slice().into(), minus(&rows[i].y, &t.u))
        });
        let s2 = r2
            .solve(cfg.lambda)
            .context("fitting the attention output")?;
        m.o = s2.weights;
        // 3. MLP down: activations -> y − mid
        // (the rows' outputs are left empty: the fit reads them only after W_down)
        let traces = carry(&c, m, &rows, traces, |t| {
            let (mid, act) = block::checkpoint_mid_act(&c, m, &t.u, &t.heads);
            (Vec::new(), BlockTrace { mid, act, ..t })
        })?;
        let r2_attention = r2_of(&rows, traces.iter().map(|(_, t)| t.mid.as_slice()));
        let mut r3 = Ridge::new(mlp_width(&c), h);
        r3.add_parts(rows.len(), |i| {
            let t = &traces[i].1;
            (t.act.as_slice().into(), minus(&rows[i].y, &t.mid))
        });
        let s3 = r3
            .solve(cfg.lambda)
            .context("fitting the MLP down projection")?;
        m.down = s3.weights;
        // 4. gradient descent on W_down against the model's next tokens
        let descent = (cfg.descent.steps > 0).then(|| {
            let d = DescentConfig {
                seed: cfg.descent.seed ^ (k as u64 + 1),
                ..cfg.descent.clone()
            };
            let inv = 1.0 / c.mup_width_multiplier;
            descend(&mut m.down, shared, inv, &rows, &traces, &d)
        });
        // the fitted module's outputs are the next module's prev (teacher inputs)
        let outs = carry(&c, m, &rows, traces, |t| {
            (block::checkpoint_out(m, &t.mid, &t.act), t)
        })?;
        let mut s = 0;
        for (i, cap) in train.iter().enumerate() {
            if cap.tokens.len() >= k + 3 {
                prev[i] = outs[s].0.clone();
                s += 1;
            }
        }
        modules.push(ModuleFit {
            module: k,
            rows: s1.rows,
            r2_input: s1.r2,
            r2_attention,
            r2_mlp: r2_of(&rows, outs.iter().map(|(o, _)| o.as_slice())),
            descent,
            seconds: tk.elapsed().as_secs_f64(),
        });
    }
    let report = FitReport {
        config: cfg.clone(),
        train_sequences: train.len(),
        modules,
        seconds: t0.elapsed().as_secs_f64(),
    };
    Ok((head, report))
}

/// The model's own arg-max after every captured position (the descent's targets), or nothing per
/// sequence when no descent runs (`wanted` false): computed at the prompt's positions; past them,
/// the tokens it emitted (the model check verifies those are its arg-max).
pub fn model_next(shared: &Shared, train: &[&Capture], wanted: bool) -> Vec<Vec<u32>> {
    if !wanted {
        return train.iter().map(|_| Vec::new()).collect();
    }
    let h = shared.config.hidden;
    train
        .par_iter()
        .map(|cap| {
            let p = cap.prompt_rows();
            let mut next: Vec<u32> = shared
                .model_logits(&cap.residuals[..(p - 1) * h])
                .chunks_exact(shared.vocab_size())
                .map(argmax)
                .collect();
            next.extend_from_slice(&cap.tokens[p..]);
            next
        })
        .collect()
}

/// Gradient descent on W_down against the model's next tokens, over every row of the module.
fn descend(
    down: &mut Linear,
    shared: &Shared,
    inv_width: f32,
    rows: &[Rows],
    traces: &[(Vec<f32>, BlockTrace)],
    d: &DescentConfig,
) -> DescentReport {
    let (mut mid, mut act, mut tok, mut seq) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (s, (r, (_, t))) in rows.iter().zip(traces).enumerate() {
        mid.extend_from_slice(&t.mid);
        act.extend_from_slice(&t.act);
        tok.extend_from_slice(&r.tok);
        seq.extend(std::iter::repeat_n(s as u32, r.n));
    }
    let rows = DescentRows {
        mid: &mid,
        act: &act,
        target: &tok,
        seq: &seq,
    };
    descent::refine(down, shared.head(), inv_width, &rows, d)
}

/// The rows' targets permuted across all rows (Fisher-Yates with a fixed seed); inputs unchanged.
fn shuffle_targets(mut rows: Vec<Rows>, h: usize, seed: u64) -> Vec<Rows> {
    let flat: Vec<f32> = rows.iter().flat_map(|r| r.y.iter().copied()).collect();
    let toks: Vec<u32> = rows.iter().flat_map(|r| r.tok.iter().copied()).collect();
    let mut all: Vec<(&[f32], Option<u32>)> = flat
        .chunks_exact(h)
        .enumerate()
        .map(|(i, y)| (y, toks.get(i).copied()))
        .collect();
    let mut rng = moefleet_engine::rng::Rng::new(seed);
    for i in (1..all.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        all.swap(i, j);
    }
    let mut it = all.into_iter();
    for r in &mut rows {
        let has_tok = !r.tok.is_empty();
        for (i, row) in r.y.chunks_exact_mut(h).enumerate() {
            if let Some((src, t)) = it.next() {
                row.copy_from_slice(src);
                if let (true, Some(t)) = (has_tok, t) {
                    r.tok[i] = t;
                }
            }
        }
    }
    rows
}

/// Zero W_o and W_down and the output convolutions' taps, so both branches start at nothing and
/// each then equals its regression's output.
fn silence_outputs(c: &ModelConfig, m: &mut ModuleWeights) {
    let zero = |l: &Linear| Linear::new(l.rows, l.cols, vec![0.0; l.rows * l.cols]);
    m.o = zero(&m.o);
    m.down = zero(&m.down);
    let k = c.conv_kernel;
    m.conv_attn_out = ConvTaps::new(c.hidden, k, vec![0.0; c.hidden * k]);
    m.conv_mlp_out = ConvTaps::new(c.hidden, k, vec![0.0; c.hidden * k]);
}

/// The module over each sequence as one stream, with its intermediate values. A checkpoint-kind
/// module stops at its attention heads (`block::checkpoint_heads`: its output and the rest of its
/// trace are left empty), since W_o and W_down are still zero and `carry` computes the rest.
fn run(
    c: &ModelConfig,
    m: &ModuleWeights,
    rows: &[Rows],
) -> anyhow::Result<Vec<(Vec<f32>, BlockTrace)>> {
    rows.par_iter()
        .map(|r| {
            let mut st = StreamState::for_kinds(c, &[m.kind], r.n);
            let mut segs = [Segment {
                state: &mut st,
                rows: r.n,
            }];
            if c.family.is_checkpoint() {
                let t = block::checkpoint_heads(c, m, &mut segs, &r.prev, &r.emb)?;
                return Ok((Vec::new(), t));
            }
            let mut out = vec![0.0f32; r.n * c.hidden];
            let mut t = BlockTrace::default();
            block::forward(
                c,
                m,
                AttentionMode::Parallel,
                &mut segs,
                &r.prev,
                &r.emb,
                &mut out,
                Some(&mut t),
            )?;
            Ok((out, t))
        })
        .collect()
}

/// The traces after a stage re-solved W_o or W_down. A checkpoint-kind module's attention heads
/// depend only on the input projection, so `step` carries each trace forward from its `u` and
/// `heads` (`block::checkpoint_mid_act`) or its `mid` and `act` (`block::checkpoint_out`) as
/// `forward` computes them, without running attention again; an Inkling module, whose output
/// convolutions carry state, runs whole again.
fn carry(
    c: &ModelConfig,
    m: &ModuleWeights,
    rows: &[Rows],
    traces: Vec<(Vec<f32>, BlockTrace)>,
    step: impl Fn(BlockTrace) -> (Vec<f32>, BlockTrace) + Sync + Send,
) -> anyhow::Result<Vec<(Vec<f32>, BlockTrace)>> {
    if !c.family.is_checkpoint() {
        drop(traces);
        return run(c, m, rows);
    }
    Ok(traces.into_par_iter().map(|(_, t)| step(t)).collect())
}

fn minus(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}

/// R² of the rows' targets by one output per row set (SST about each output's mean).
fn r2_of<'a>(rows: &[Rows], outs: impl Iterator<Item = &'a [f32]>) -> f64 {
    let h = rows.first().map_or(1, |r| r.y.len() / r.n.max(1));
    let mut mean = vec![0.0f64; h];
    let mut n = 0usize;
    for r in rows {
        for row in r.y.chunks_exact(h) {
            mean.iter_mut().zip(row).for_each(|(m, v)| *m += *v as f64);
            n += 1;
        }
    }
    mean.iter_mut().for_each(|m| *m /= n.max(1) as f64);
    let (mut sse, mut sst) = (0.0f64, 0.0f64);
    for (r, o) in rows.iter().zip(outs) {
        for (yr, or) in r.y.chunks_exact(h).zip(o.chunks_exact(h)) {
            for i in 0..h {
                sse += (yr[i] as f64 - or[i] as f64).powi(2);
                sst += (yr[i] as f64 - mean[i]).powi(2);
            }
        }
    }
    if sst > 0.0 {
        1.0 - sse / sst
    } else {
        0.0
    }
}
