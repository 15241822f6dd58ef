//! `moefleet-harness replay`: the draft head over the evaluation captures (MEASUREMENTS.md §5),
//! beside an untrained head, a control head and three trivial baselines, into one anchor record
//! (`anchors`).
//!
//! Calculations (prediction columns):
//! - `fitted_teacher`, `fitted_self_fed`, `fitted_no_context`: the fitted head in its original f32
//!   form, in the three replay modes, over the whole vocabulary;
//! - `fitted_teacher_r32k`, `_r64k`, `_r128k`: teacher replay with the arg-max over only the first
//!   n head rows, n the paper's 32768, 65536 and 131072 of 200058 scaled to this vocabulary
//!   (`restrictions`);
//! - `grids_teacher`, `grids_teacher_r64k`: the fitted head on the deployment grids;
//! - `untrained_teacher`: the synthetic head of the same seed, never fitted;
//! - `control_teacher` (when a control head is given): a head fitted the same way to training
//!   targets shuffled across positions (`FitConfig::shuffle_targets`), which should learn nothing;
//!
//! The last three are read only as first drafts (Table 6, `mtp.csv`, Figure 8), so they replay
//! module 0 alone: their rows of modules ≥ 1 hold `NOT_REPLAYED`, and `chain.csv` leaves those
//! drafts out. On SmolLM2 every calculation costs the same (the unembedding over the whole
//! vocabulary at every anchor), so this takes three sevenths of the replay's eight-module work away.
//! - `repeat_last`: x_{t+k+2} predicted as x_{t+k+1};
//! - `bigram`: the successor of x_{t+k+1} seen most often in the training captures' generated
//!   text (lower id on ties; a token never seen there predicts the most frequent generated token);
//! - `unigram`: always the most frequent generated token of the training captures;
//! - `suffix`: the engine's suffix proposer (`spec::suffix`) over the true tokens up to x_{t+k+1};
//!   where it has no proposal, `NO_PROPOSAL`, which never agrees.
//!
//! The targets' shuffled copy (per module, a fixed-seed permutation) gives the shuffled-label check.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{bail, Context};
use rayon::prelude::*;
use serde::Serialize;

use moefleet_engine::capture::Capture;
use moefleet_engine::model::argmax;
use moefleet_engine::rng::Rng;
use moefleet_engine::spec::head::chain::{replay, ModuleReplay, ReplayMode, Sequence};
use moefleet_engine::spec::head::{MtpWeights, Shared};
use moefleet_engine::spec::suffix;

/// The prediction recorded where a baseline proposes nothing (no token has this id).
pub const NO_PROPOSAL: u32 = u32::MAX;
/// The prediction recorded where a calculation did not replay that module (it never agrees, and
/// `chain.csv` leaves such drafts out).
pub const NOT_REPLAYED: u32 = u32::MAX - 1;

use super::anchors::Anchors;

/// The paper's head-row restrictions, of a 200058-token vocabulary.
pub const PAPER_VOCAB: usize = 200_058;
pub const PAPER_RESTRICTIONS: [(usize, &str); 3] =
    [(32_768, "r32k"), (65_536, "r64k"), (131_072, "r128k")];

/// `round(V · n / 200058)` for each of the paper's restrictions.
pub fn restrictions(vocab: usize) -> [usize; 3] {
    PAPER_RESTRICTIONS.map(|(n, _)| ((vocab * n) as f64 / PAPER_VOCAB as f64).round() as usize)
}

/// One evaluation sequence: its family and capture.
pub struct Captured<'a> {
    pub family: &'a str,
    pub capture: &'a Capture,
}

/// Throughput of one replay calculation.
#[derive(Clone, Debug, Serialize)]
pub struct RunTiming {
    pub calculation: String,
    pub anchors: usize,
    pub seconds: f64,
    pub anchors_per_s: f64,
}

/// The head's agreement with the model's own arg-max on the captured residuals (is this the model
/// the captures came from?).
#[derive(Clone, Debug, Serialize)]
pub struct ModelCheck {
    pub positions: usize,
    pub agree: usize,
}

pub struct ReplayOutput {
    pub anchors: Anchors,
    pub timings: Vec<RunTiming>,
    pub restrictions: [usize; 3],
    pub model_check: ModelCheck,
}

/// Every generated token of the training captures: (successor table, most frequent token).
pub fn bigram_table(train: &[&Capture]) -> (HashMap<u32, u32>, u32) {
    let mut pairs: HashMap<u32, HashMap<u32, u32>> = HashMap::new();
    let mut uni: HashMap<u32, u32> = HashMap::new();
    for c in train {
        let p = c.prompt_rows();
        for i in p - 1..c.tokens.len() - 1 {
            *pairs
                .entry(c.tokens[i])
                .or_default()
                .entry(c.tokens[i + 1])
                .or_default() += 1;
            *uni.entry(c.tokens[i + 1]).or_default() += 1;
        }
    }
    let best = |m: &HashMap<u32, u32>| {
        m.iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(t, _)| *t)
            .unwrap_or(0)
    };
    (
        pairs.iter().map(|(a, m)| (*a, best(m))).collect(),
        best(&uni),
    )
}

/// The model's arg-max from the final-norm residual at every generated position, against what it
/// emitted (a replay against another model's captures fails here).
pub fn check_model(shared: &Shared, eval: &[Captured<'_>]) -> ModelCheck {
    let v = shared.vocab_size();
    let (positions, agree) = eval
        .par_iter()
        .map(|e| {
            let c = e.capture;
            let p = c.prompt_rows();
            let h = c.hidden();
            let logits = shared.model_logits(&c.residuals[(p - 1) * h..]);
            let agree = logits
                .chunks_exact(v)
                .enumerate()
                .filter(|(i, l)| argmax(l) == c.tokens[p + i])
                .count();
            (logits.len() / v, agree)
        })
        .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    ModelCheck { positions, agree }
}

/// Replay every calculation over the evaluation sequences.
pub fn run(
    fitted: &MtpWeights,
    untrained: &MtpWeights,
    control: Option<&MtpWeights>,
    shared: &Shared,
    eval: &[Captured<'_>],
    model_check: ModelCheck,
    train: &[&Capture],
    shuffle_seed: u64,
) -> anyhow::Result<ReplayOutput> {
    let v = shared.vocab_size();
    let r = restrictions(v);
    if eval.is_empty() {
        bail!("no evaluation sequences to replay");
    }
    // module 0 of the reference heads (they are read as first drafts only)
    let first = |h: &MtpWeights| MtpWeights {
        config: h.config.clone(),
        seed: h.seed,
        form: h.form,
        modules: h.modules[..1].to_vec(),
    };
    let (grids0, untrained0) = (first(fitted).to_grids(), first(untrained));
    let control0 = control.map(first);
    // (column names, head, mode, head-row restrictions)
    let plan: Vec<(Vec<String>, &MtpWeights, ReplayMode, Vec<usize>)> = vec![
        (
            [
                "fitted_teacher",
                "fitted_teacher_r32k",
                "fitted_teacher_r64k",
                "fitted_teacher_r128k",
            ]
            .map(String::from)
            .to_vec(),
            fitted,
            ReplayMode::Teacher,
            vec![v, r[0], r[1], r[2]],
        ),
        (
            vec!["fitted_self_fed".into()],
            fitted,
            ReplayMode::SelfFed,
            vec![v],
        ),
        (
            vec!["fitted_no_context".into()],
            fitted,
            ReplayMode::NoContext,
            vec![v],
        ),
        (
            vec!["grids_teacher".into(), "grids_teacher_r64k".into()],
            &grids0,
            ReplayMode::Teacher,
            vec![v, r[1]],
        ),
        (
            vec!["untrained_teacher".into()],
            &untrained0,
            ReplayMode::Teacher,
            vec![v],
        ),
    ];
    let mut plan = plan;
    if let Some(ctl) = &control0 {
        plan.push((
            vec!["control_teacher".into()],
            ctl,
            ReplayMode::Teacher,
            vec![v],
        ));
    }
    let mut a = Anchors::default();
    let mut shape: Vec<Vec<usize>> = Vec::new();
    let mut timings = Vec::new();
    for (pi, (names, head, mode, vocabs)) in plan.iter().enumerate() {
        let t0 = Instant::now();
        let outs = eval
            .par_iter()
            .map(|e| {
                let c = e.capture;
                let seq = Sequence {
                    tokens: &c.tokens,
                    prompt_rows: c.prompt_rows(),
                    residuals: &c.residuals,
                };
                replay(head, shared, &seq, *mode, vocabs, false)
            })
            .collect::<moefleet_engine::Result<Vec<_>>>()
            .with_context(|| format!("replaying {}", names[0]))?;
        let seconds = t0.elapsed().as_secs_f64();
        let first = pi == 0;
        if first {
            // the rows every later calculation fills: sequence, then module, then anchor
            shape = outs
                .iter()
                .map(|mods| mods.iter().map(|m| m.anchors.len()).collect())
                .collect();
        }
        let (cols, n_anchors) = fill(&names[0], names.len(), eval, &outs, &shape, &mut a, first)?;
        timings.push(RunTiming {
            calculation: names[0].clone(),
            anchors: n_anchors,
            seconds,
            anchors_per_s: n_anchors as f64 / seconds.max(1e-9),
        });
        a.columns.extend(names.iter().cloned());
        a.preds.extend(cols);
    }
    // baselines from the tokens alone
    let (big, fallback) = bigram_table(train);
    let (mut rep, mut bi, mut suf) = (
        Vec::with_capacity(a.len()),
        Vec::with_capacity(a.len()),
        Vec::with_capacity(a.len()),
    );
    for i in 0..a.len() {
        let c = eval[a.seq[i] as usize].capture;
        let last = a.anchor[i] as usize + a.module[i] as usize + 1;
        let prev = c.tokens[last];
        rep.push(prev);
        bi.push(big.get(&prev).copied().unwrap_or(fallback));
        suf.push(suffix::propose(&c.tokens[..=last]).unwrap_or(NO_PROPOSAL));
    }
    a.columns.extend([
        "repeat_last".into(),
        "bigram".into(),
        "unigram".into(),
        "suffix".into(),
    ]);
    a.preds.extend([rep, bi, vec![fallback; a.len()], suf]);
    a.target_shuffled = shuffled_targets(&a, shuffle_seed);
    Ok(ReplayOutput {
        anchors: a,
        timings,
        restrictions: r,
        model_check,
    })
}

/// One calculation's prediction columns (`width` of them) in the rows of `a`: sequence, then module,
/// then anchor, as the first calculation (`first`, which also fills `a`'s anchor columns) gave them
/// (`shape`: anchors per sequence and module). A module the calculation did not replay is
/// `NOT_REPLAYED` at every one of its anchors. Returns the columns and the anchors replayed.
fn fill(
    name: &str,
    width: usize,
    eval: &[Captured<'_>],
    outs: &[Vec<ModuleReplay>],
    shape: &[Vec<usize>],
    a: &mut Anchors,
    first: bool,
) -> anyhow::Result<(Vec<Vec<u32>>, usize)> {
    let (mut rows, mut n_anchors) = (0, 0);
    let mut cols: Vec<Vec<u32>> = vec![Vec::new(); width];
    for (s, (e, mods)) in eval.iter().zip(outs).enumerate() {
        for (k, &len) in shape[s].iter().enumerate() {
            let Some(m) = mods.get(k) else {
                // a module this calculation does not replay
                cols.iter_mut()
                    .for_each(|col| col.extend(std::iter::repeat_n(NOT_REPLAYED, len)));
                rows += len;
                continue;
            };
            if m.anchors.len() != len {
                bail!(
                    "{} replayed {} anchors of module {k} of sequence {s}, the first \
                     calculation {len}",
                    name,
                    m.anchors.len()
                );
            }
            for (i, &t) in m.anchors.iter().enumerate() {
                n_anchors += 1;
                rows += 1;
                if first {
                    a.seq.push(s as u32);
                    a.family.push(e.family.to_string());
                    a.anchor.push(t as u32);
                    a.module.push(k as u8);
                    a.target.push(e.capture.tokens[t + k + 2]);
                }
                for (c, col) in cols.iter_mut().enumerate() {
                    col.push(m.preds[c][i]);
                }
            }
        }
        if mods.len() > shape[s].len() {
            bail!("{} replayed more modules than the first calculation", name);
        }
    }
    if rows != a.len() {
        bail!(
            "{} filled {rows} anchor rows, the first calculation {}",
            name,
            a.len()
        );
    }
    Ok((cols, n_anchors))
}

/// Each module's targets permuted across its rows (Fisher-Yates with a fixed seed).
fn shuffled_targets(a: &Anchors, seed: u64) -> Vec<u32> {
    let mut out = a.target.clone();
    let modules = a.module.iter().copied().max().map_or(0, |m| m as usize + 1);
    for m in 0..modules {
        let idx: Vec<usize> = (0..a.len())
            .filter(|&i| a.module[i] as usize == m)
            .collect();
        let mut vals: Vec<u32> = idx.iter().map(|&i| a.target[i]).collect();
        let mut rng = Rng::new(seed ^ (m as u64 + 1));
        for i in (1..vals.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            vals.swap(i, j);
        }
        for (&i, v) in idx.iter().zip(vals) {
            out[i] = v;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restrictions_scale_the_papers_fractions() {
        assert_eq!(restrictions(200_058), [32_768, 65_536, 131_072]);
        assert_eq!(restrictions(7070), [1158, 2316, 4632]);
    }

    #[test]
    fn bigram_counts_generated_pairs_only() {
        let cap = |tokens: Vec<u32>, p: u32| Capture {
            header: moefleet_engine::capture::Header {
                hidden: 1,
                role: 0,
                slot: 0,
                prompt_rows: p,
                sequence: 0,
                n_records: 0,
            },
            residuals: vec![0.0; tokens.len() - 1],
            tokens,
        };
        // prompt [9, 1]; generated 2 3 1 2 1 2: pairs from the last prompt token on
        let a = cap(vec![9, 1, 2, 3, 1, 2, 1, 2], 2);
        let (t, most) = bigram_table(&[&a]);
        assert_eq!(t.get(&1), Some(&2)); // 1->2 three times
        assert_eq!(t.get(&2), Some(&1)); // 2->3 once, 2->1 once: lower id wins
        assert_eq!(t.get(&9), None); // a prompt pair
        assert_eq!(most, 2);
    }
}
