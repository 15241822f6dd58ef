//! The link experiments as a unit (not part of the main job): the fleet's curve on loopback and
//! over emulated links (RUN/links/fleet/), and the kernel's `tbf` shaper measured on a veth pair
//! between network namespaces (RUN/links/tbf/, root only). Its steps are
//! `scripts/link_emulation.sh` and `scripts/link_tbf.sh`.

use anyhow::Result;

use crate::experiments::unit::{exec, Experiment, RunCtx};
use crate::recheck::Recheck;

/// The link experiments.
pub struct Links;

impl Experiment for Links {
    fn name(&self) -> &'static str {
        "links"
    }

    fn about(&self) -> &'static str {
        "the fleet over emulated links, and the kernel's shaper between namespaces (RUN/links/)"
    }

    fn in_main_job(&self) -> bool {
        false
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let out = ctx.dir("links");
        exec(
            ctx.script("link_emulation.sh")
                .arg(out.join("fleet"))
                .arg(&ctx.bin),
        )?;
        exec(ctx.script("link_tbf.sh").arg(out.join("tbf")))
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::LinkFleets, &super::recheck::LinkTbf]
    }
}
