//! The machine's ceilings as a unit of the main job: memory read bandwidth, the fp32 FMA rate, the
//! engine's INT4 and INT8 products and `inkling-mini` decode against them, into
//! RUN/kernels/ceilings.json.

use anyhow::Result;

use crate::experiments::unit::{exec, Experiment, RunCtx};
use crate::recheck::Recheck;

/// The ceilings.
pub struct Ceilings;

impl Experiment for Ceilings {
    fn name(&self) -> &'static str {
        "ceilings"
    }

    fn about(&self) -> &'static str {
        "read bandwidth, FMA rate, the INT4 and INT8 products, decode's share of the bandwidth \
         and of reads laid out as its token's (RUN/kernels/ceilings.json)"
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        exec(
            ctx.harness()
                .args(["ceilings", "--out"])
                .arg(ctx.dir("kernels")),
        )
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::CeilingsRecords]
    }
}
