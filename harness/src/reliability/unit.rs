//! Reliability as a unit (`make reliability`, not part of the main job): faults under load and
//! the 30-minute soak against fresh 11-role `inkling-mini` fleets (the script's own, whatever
//! `--preset` and `--roles` say), and the reliability table from their records
//! (RUN/reliability/). Its steps are `scripts/reliability.sh`.

use anyhow::Result;

use crate::experiments::unit::{exec, Experiment, RunCtx};
use crate::recheck::Recheck;

/// Faults and the soak.
pub struct Reliability;

impl Experiment for Reliability {
    fn name(&self) -> &'static str {
        "reliability"
    }

    fn about(&self) -> &'static str {
        "faults under load and the soak, and the reliability table (make reliability; \
         RUN/reliability/)"
    }

    fn in_main_job(&self) -> bool {
        false
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        exec(
            ctx.script("reliability.sh")
                .arg(ctx.dir("reliability"))
                .env("BIN", &ctx.bin),
        )
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::ReliabilityRuns]
    }
}
