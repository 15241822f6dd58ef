//! Speculation as a unit of the main job (MEASUREMENTS.md §6): the preset's fleet once without
//! speculation and once per proposer set over the speculation plan, the phrase table alone at
//! several depths, speculation off again at the end; Table 3, on/off, the first-order model and the
//! figure (RUN/speculation/); then SmolLM2 with the head the draft unit fitted drafting live, beside
//! llama-server on the same file (RUN/speculation-smollm2/). Runs after the draft unit. Its steps
//! are still `scripts/speculation.sh`.

use anyhow::Result;

use crate::experiments::draft::unit::smollm2_model;
use crate::experiments::unit::{exec, Experiment, RunCtx};
use crate::recheck::Recheck;

/// Speculation.
pub struct Speculation;

impl Experiment for Speculation {
    fn name(&self) -> &'static str {
        "speculation"
    }

    fn about(&self) -> &'static str {
        "speculation off and on per proposer, Table 3, on the preset and on SmolLM2 beside \
         llama-server (RUN/speculation/, RUN/speculation-smollm2/; after draft)"
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let plan = ctx.plan.name();
        exec(
            ctx.script("speculation.sh")
                .arg(ctx.dir("speculation"))
                .arg(&ctx.bin)
                .arg(plan)
                .env("PRESET", &ctx.preset)
                .env("ROLES", ctx.roles.to_string()),
        )?;
        exec(
            ctx.script("speculation.sh")
                .arg(ctx.dir("speculation-smollm2"))
                .arg(&ctx.bin)
                .arg(plan)
                .env("MODEL", smollm2_model(ctx)?)
                .env("MTP_HEAD", ctx.dir("draft-smollm2/head")),
        )
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::SpeculationRuns]
    }
}
