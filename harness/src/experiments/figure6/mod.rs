//! Figure 6 (paper §5.3) as a unit of the main job: the burst plan (`workloads/plans/burst.toml`:
//! fifteen requests released together, 128-token cap, three retained phases) against the
//! `inkling-mini` fleet under reference admission (whole prompts, one at a time) and then with eight-row prefill
//! windows, each sweep analysed; then `moefleet-harness figure6` (median TTFT and whole-phase
//! tokens per second per phase, the paper's values as markers) into RUN/figure6/. The figure is
//! drawn in `figures::figure6`, and re-derived for `verify` in `figures::recheck`.

use anyhow::Result;

use crate::experiments::unit::{exec, exec_to, Experiment, RunCtx};
use crate::os_args;
use crate::recheck::Recheck;

/// The admission modes, in the order they run.
const MODES: [&str; 2] = ["reference", "windowed"];

/// Figure 6's bursts.
pub struct Figure6;

impl Experiment for Figure6 {
    fn name(&self) -> &'static str {
        "figure6"
    }

    fn about(&self) -> &'static str {
        "bursts under reference admission and under eight-row windows (RUN/figure6/)"
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let out = ctx.dir("figure6");
        std::fs::create_dir_all(&out)?;
        for mode in MODES {
            // inkling-mini whatever the main job's preset: the figure sets it beside the paper's
            let mut args = ctx.fleet_of("inkling-mini");
            args.extend(os_args!["--admission", mode, "--prefill-rows", "8"]);
            let mut fleet = ctx.fleet(&out.join(format!("fleet-{mode}.log")), &args)?;
            let load = crate::host::load_average().map_or("unknown".into(), |l| format!("{l:?}"));
            eprintln!("figure6: {mode} admission (load average {load})");
            exec(ctx.harness().args(os_args![
                "sweep",
                "--url",
                fleet.url(),
                "--plan",
                "workloads/plans/burst.toml",
                "--out",
                &out.join(mode)
            ]))?;
            fleet.stop();
            exec_to(ctx.harness().arg("analyze").arg(out.join(mode)), None)?;
        }
        exec(ctx.harness().args(os_args![
            "figure6",
            "--reference",
            &out.join("reference"),
            "--windowed",
            &out.join("windowed"),
            "--out",
            &out
        ]))
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&crate::figures::recheck::Figure6Runs]
    }
}
