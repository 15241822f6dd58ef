//! The paired concurrency sweep as a unit of the main job (MEASUREMENTS.md §2): the preset's fleet
//! with per-frame records (which calibrate the fleet simulator), the plan replayed through its API,
//! the fleet stopped; then the tables and figures, the two presets' inspections and one
//! single-process generation beside it. Writes into the run directory itself.

use anyhow::Result;

use crate::experiments::unit::{exec, exec_to, Experiment, RunCtx};
use crate::os_args;
use crate::recheck::Recheck;

/// The sweep.
pub struct Sweep;

impl Experiment for Sweep {
    fn name(&self) -> &'static str {
        "sweep"
    }

    fn about(&self) -> &'static str {
        "the paired concurrency sweep on the preset's fleet, its tables and figures (RUN/)"
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let run = &ctx.run;
        let mut args = ctx.fleet_model();
        args.extend(os_args!["--profile-dir", &run.join("profiles")]);
        let mut fleet = ctx.fleet(&run.join("fleet.log"), &args)?;
        exec(ctx.harness().args(os_args![
            "sweep",
            "--url",
            fleet.url(),
            "--plan",
            ctx.plan.name(),
            "--out",
            run
        ]))?;
        fleet.stop();
        exec(ctx.harness().arg("analyze").arg(run))?;
        exec(ctx.harness().arg("figures").arg(run))?;
        for preset in ["inkling", ctx.preset.as_str()] {
            let out = run.join(format!("inspect-{preset}.json"));
            exec_to(ctx.engine().args(["inspect", preset, "--json"]), Some(&out))?;
        }
        exec_to(
            ctx.engine().args(os_args![
                "generate",
                "--preset",
                &ctx.preset,
                "--prompt",
                "The river runs past the old mill and the",
                "--max-tokens",
                "128",
                "--record",
                &run.join("single_process.json")
            ]),
            None,
        )
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::SweepRuns]
    }
}
