//! The context-length experiment as a unit of the main job (MEASUREMENTS.md §3): the in-role probe
//! at `inkling` shapes and at the preset's, with the serial and the parallel attention kernel; the
//! real-prompt scan through the API of the preset's fleet once per kernel; the fit and Figure 7,
//! also over the paper's published scan and probe (RUN/context/). The quick plan probes to 16k
//! positions and scans 256-1024-token prompts for 120 s per kernel; the paper plan to 1M and
//! 1k-8k for 600 s, which `reproduce --probe-max/--scan-sizes/--scan-budget-s` change.
//! Its steps are still `scripts/context.sh`.

use anyhow::Result;

use crate::experiments::unit::{exec, Experiment, RunCtx};
use crate::recheck::Recheck;

/// The context experiment.
pub struct Context;

impl Experiment for Context {
    fn name(&self) -> &'static str {
        "context"
    }

    fn about(&self) -> &'static str {
        "the in-role probe, the real-prompt scan per attention kernel, the fit and Figure 7 \
         (RUN/context/)"
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let c = &ctx.context;
        let (probe_max, sizes, budget_s) = if ctx.quick() {
            (16384, "256,512,1024".to_string(), 120)
        } else {
            (
                c.probe_max.unwrap_or(1 << 20),
                c.scan_sizes
                    .clone()
                    .unwrap_or_else(|| "1024,2048,4096,8192".into()),
                c.scan_budget_s.unwrap_or(600),
            )
        };
        exec(
            ctx.script("context.sh")
                .arg(ctx.dir("context"))
                .arg(&ctx.bin)
                .arg(probe_max.to_string())
                .arg(sizes)
                .arg(budget_s.to_string())
                .env("ROLES", ctx.roles.to_string()),
        )
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[
            &super::recheck::ContextScans,
            &super::recheck::ContextFits,
            &super::recheck::ContextProbes,
        ]
    }
}
