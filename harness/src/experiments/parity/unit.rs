//! Greedy parity with llama.cpp on one GGUF file as a unit (not part of the main job): the
//! committed prompts through llama-server, the engine in one process and a fleet, token for token
//! (RUN/parity/). Its steps are `scripts/gguf_parity.sh`.

use anyhow::Result;

use crate::experiments::unit::{exec, Experiment, RunCtx};
use crate::recheck::Recheck;

/// GGUF parity.
pub struct Parity;

impl Experiment for Parity {
    fn name(&self) -> &'static str {
        "parity"
    }

    fn about(&self) -> &'static str {
        "greedy parity with llama-server on SmolLM2's GGUF file (scripts/gguf_parity.sh; RUN/parity/)"
    }

    fn in_main_job(&self) -> bool {
        false
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        exec(ctx.script("gguf_parity.sh").arg(ctx.dir("parity")))
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::ParityRuns]
    }
}
