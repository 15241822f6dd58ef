//! The draft replay's steps (MEASUREMENTS.md §5), each a command a person could type: a fleet
//! with captures on request, the capture corpus built through its API (evaluation sequences per
//! family and a disjoint training set), the fleet stopped, the draft head fitted to the training
//! captures and a control head to shuffled targets, both replayed over the evaluation captures:
//! OUT/corpus, OUT/head, OUT/control-head, OUT/replay (Table 6, the chain table, Figure 8).
//!
//! The fleet serves a GGUF checkpoint (its own cut into roles, its tokenizer; the head is the
//! checkpoint's kind, `engine/src/spec/head`). The commands take a preset fleet as well
//! (`results/draft-inkling-mini` was made so), but the main job no longer replays one (`unit`).

use std::ffi::OsString;
use std::path::Path;

use anyhow::Result;

use crate::experiments::unit::{exec, RunCtx};
use crate::os_args;

/// Streams the capture keeps in flight. A capture holds the same residuals and tokens at any
/// concurrency (a row's bits do not depend on its batch); more streams only fill the frames fuller:
/// side by side on host E a SmolLM2 corpus took 0.95x and 0.94x the seconds at 64 as at 48
/// (`results/capture-streams-20261206-e`), and on host C 0.95x and 0.89x at 128 as at 64
/// (`results/capture-streams-20261207-c`, the same texts in all four runs); the main-job runs at 48
/// and at 64 fitted the same heads (`results/paper-inkling-mini-20261206-b`, `-c`). The server's
/// capture writer holds captures by bytes, not count (`engine::capture::writer::MAX_OPEN_BYTES`:
/// 128 SmolLM2 streams of 256 positions hold about 75 MB); the fleet has 176 slots.
const CAPTURE_STREAMS: usize = 128;

/// How much a draft run captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Greedy tokens generated per captured prompt.
    pub tokens: u32,
    /// Training prompts per workload family.
    pub train: u32,
    /// Evaluation prompts per workload family.
    pub eval: u32,
    /// Passage prompts (of `workloads/corpus`) per passage task.
    pub passages: u32,
    /// Gradient-descent steps per module after the regressions (None: `fit-draft`'s 400).
    pub descent_steps: Option<u32>,
}

impl Sizes {
    /// The sizes of the committed preset run (`results/draft-inkling-mini`), and under `quick`
    /// the base of the checkpoint's quick plan.
    pub fn preset(quick: bool) -> Sizes {
        let (tokens, train) = if quick { (48, 6) } else { (160, 24) };
        Sizes {
            tokens,
            train,
            eval: 3,
            passages: 0,
            descent_steps: None,
        }
    }

    /// A trained checkpoint's run: passages of real text as longer prompts, and under the paper
    /// plan longer generations and a larger training set. The quick plan is a smoke run of every
    /// step (CI's time): half the preset quick plan's training prompts per family, four passages,
    /// and 50 descent steps per module rather than 400 (the descent still runs and keeps its best
    /// step). Its head drafts worse than the paper plan's; nothing it measures is committed.
    pub fn checkpoint(quick: bool) -> Sizes {
        if quick {
            Sizes {
                train: 3,
                passages: 4,
                descent_steps: Some(50),
                ..Sizes::preset(true)
            }
        } else {
            Sizes {
                tokens: 256,
                train: 27,
                eval: 3,
                passages: 100,
                descent_steps: None,
            }
        }
    }
}

/// Capture (unless OUT/corpus holds a corpus already), fit and replay into `out`, serving `model`
/// (a GGUF file).
pub fn run(ctx: &RunCtx, out: &Path, model: &Path, sizes: Sizes) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let file: Vec<OsString> = os_args!["--model", model];
    let corpus = out.join("corpus");
    if corpus.join("corpus.json").is_file() {
        eprintln!("draft: keeping the corpus already in {}", corpus.display());
    } else {
        let captures = out.join("server-captures");
        let mut args = file.clone();
        // one pipeline group: the captures are the same bytes as under the default groups (but
        // for the header's slot and sequence numbers), and where the roles share a machine's
        // cores fewer frames in flight capture sooner (this step times nothing)
        args.extend(os_args![
            "--capture-dir",
            &captures,
            "--capture",
            "requested",
            "--groups",
            "1"
        ]);
        let fleet = ctx.fleet(&out.join("fleet.log"), &args)?;
        let mut capture = ctx.harness();
        capture
            .args(["capture", "--url", fleet.url()])
            .args(os_args!["--out", &corpus])
            .args(["--tokens", &sizes.tokens.to_string()])
            .args(["--eval-per-family", &sizes.eval.to_string()])
            .args(["--train-per-family", &sizes.train.to_string()])
            .args(["--passages", &sizes.passages.to_string()])
            .args(["--concurrency", &CAPTURE_STREAMS.to_string()]);
        capture.args(os_args!["--tokenizer", model]);
        exec(&mut capture)?;
        drop(fleet);
    }
    // the corpus holds checked copies of the server's captures
    let _ = std::fs::remove_dir_all(out.join("server-captures"));
    let descent: Vec<String> = match sizes.descent_steps {
        Some(n) => vec!["--descent-steps".into(), n.to_string()],
        None => vec![],
    };
    // the head and its control in one run: one load, model check and pass of the model
    exec(
        ctx.harness()
            .args(os_args!["fit-draft", &corpus, "--out", &out.join("head")])
            .args(os_args!["--control-out", &out.join("control-head")])
            .args(["--control-seed", "11"])
            .args(&descent)
            .args(&file),
    )?;
    exec(
        ctx.harness()
            .args(os_args!["replay", &corpus, "--head", &out.join("head")])
            .args(os_args!["--control-head", &out.join("control-head")])
            .args(os_args!["--out", &out.join("replay"), "--paper-overlay"])
            .args(&file),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The paper plan's sizes are those the committed runs were captured with.
    #[test]
    fn the_paper_plans_sizes_are_the_committed_runs() {
        for (run, sizes) in [
            ("draft-inkling-mini", Sizes::preset(false)),
            ("draft-smollm2-20261203", Sizes::checkpoint(false)),
        ] {
            let path = format!("../results/{run}/corpus/corpus.json");
            let c: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let n = |k: &str| c[k].as_u64().unwrap_or(0) as u32;
            assert_eq!(
                (
                    n("generated_tokens"),
                    n("train_per_family"),
                    n("eval_per_family")
                ),
                (sizes.tokens, sizes.train, sizes.eval),
                "{path}"
            );
            assert_eq!(n("passages_per_task"), sizes.passages, "{path}");
        }
        assert_eq!(Sizes::checkpoint(true).passages, 4);
        // the committed heads took fit-draft's 400 steps, which the paper plan leaves in place
        assert_eq!(Sizes::checkpoint(false).descent_steps, None);
    }
}
