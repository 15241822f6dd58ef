//! The fleet simulator as a unit of the main job: calibrated on every other level of the sweep's
//! frame records and checked at the others (RUN/simulator/local), then calibrated from the paper's
//! profiles against its Table 4, with predictions from the experiments' ceilings and backends
//! records (RUN/simulator/paper). Runs after the sweep, ceilings and backends units.

use anyhow::Result;

use crate::experiments::unit::{exec, exec_to, Experiment, RunCtx};
use crate::os_args;
use crate::recheck::Recheck;

/// The simulator's checks.
pub struct Simulator;

impl Experiment for Simulator {
    fn name(&self) -> &'static str {
        "simulator"
    }

    fn about(&self) -> &'static str {
        "the fleet simulator checked on the sweep's uncalibrated levels and against the paper's \
         Table 4 (RUN/simulator/; after sweep, ceilings, backends)"
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let local = ctx.dir("simulator/local");
        exec(ctx.harness().args(os_args![
            "simulate", "validate", "--run", &ctx.run, "--out", &local
        ]))?;
        exec_to(
            ctx.harness().args(os_args![
                "simulate",
                "paper",
                "--local",
                &local,
                "--out",
                &ctx.dir("simulator/paper"),
                "--ceilings",
                &ctx.dir("kernels/ceilings.json"),
                "--backends",
                &ctx.dir("openvino/backends.json")
            ]),
            None,
        )
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[
            &super::recheck::Validations,
            &super::recheck::PaperComparisons,
        ]
    }
}
