//! Speculation as a unit of the main job (MEASUREMENTS.md §6): the preset's fleet once without
//! speculation and once per proposer set over the speculation plan, the phrase table alone at
//! several depths, speculation off again at the end; Table 3, on/off, the first-order model and the
//! figure (RUN/speculation/); then SmolLM2 with the head the draft unit fitted drafting live, beside
//! llama-server on the same file (RUN/speculation-smollm2/). Runs after the draft unit. With
//! `reproduce --model FILE.gguf` it runs on that checkpoint alone with the head of
//! RUN/draft-model/, into RUN/speculation-model/. Its steps are in `steps`.

use anyhow::{bail, Result};

use super::steps::{self, Checkpoint};
use crate::experiments::unit::{Experiment, RunCtx};
use crate::recheck::Recheck;

/// Speculation.
pub struct Speculation;

impl Experiment for Speculation {
    fn name(&self) -> &'static str {
        "speculation"
    }

    fn about(&self) -> &'static str {
        "speculation off and on per proposer, Table 3, on the preset and on SmolLM2 beside \
         llama-server (RUN/speculation/, RUN/speculation-smollm2/; after draft; with --model, \
         RUN/speculation-model/)"
    }

    fn takes_model(&self) -> bool {
        true
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        if let Some(model) = &ctx.model {
            let head = ctx.dir("draft-model/head");
            if !head.is_dir() {
                bail!(
                    "{} holds no draft head fitted to {}: run the draft unit first \
                     (reproduce --only draft,speculation --model FILE)",
                    head.display(),
                    model.display()
                );
            }
            let c = Checkpoint { model, head: &head };
            return steps::run(ctx, &ctx.dir("speculation-model"), Some(c));
        }
        steps::run(ctx, &ctx.dir("speculation"), None)?;
        let model = ctx.smollm2()?;
        let head = ctx.dir("draft-smollm2/head");
        let c = Checkpoint {
            model: &model,
            head: &head,
        };
        steps::run(ctx, &ctx.dir("speculation-smollm2"), Some(c))
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::SpeculationRuns]
    }
}
