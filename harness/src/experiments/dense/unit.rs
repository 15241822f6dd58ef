//! The dense experiment as a unit of the main job (MEASUREMENTS.md §4): the dense forms at
//! `inkling` shapes on the native kernels and on OpenVINO (RUN/kernels/dense.*), then their effect
//! at the stage level: the preset's fleet with per-frame records once per dense form, the same short
//! fixed load through each (levels 1 and 8, 16-token outputs, so role 0 sees 1-row and up-to-8-row
//! decode frames), and role 0's compute per frame of both (RUN/dense-stage/dense_stage.*).

use anyhow::{bail, Context, Result};

use crate::experiments::unit::{exec, Experiment, RunCtx};
use crate::os_args;
use crate::recheck::Recheck;

/// The stage level's fixed load: the quick plan's shape (paired passes, 16-token outputs, at least
/// 12 requests per phase) at levels 1 and 8.
const STAGE_PLAN: &str = r#"name = "dense-stage"
levels = [1, 8]
max_tokens = 16
stagger_s = 0.015
settle_s = 0.5
min_requests = 12
family = "mixed"

[[passes]]
name = "mixed_a"
order = "ascending"

[[passes]]
name = "mixed_b"
order = "descending"
"#;

/// The dense forms, in the order the stage level runs them.
const FORMS: [&str; 2] = ["three-matmul", "fused-slices"];

/// The dense experiment.
pub struct Dense;

impl Experiment for Dense {
    fn name(&self) -> &'static str {
        "dense"
    }

    fn about(&self) -> &'static str {
        "dense blocks as fused slices vs three matrix calls, in-process and at the stage level \
         (RUN/kernels/dense.*, RUN/dense-stage/)"
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        exec(
            ctx.harness()
                .args(["dense", "--out"])
                .arg(ctx.dir("kernels")),
        )?;
        stage(ctx)
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::DenseRuns]
    }
}

/// Both fleets under the fixed load, then `dense-stage` over their role-0 records.
fn stage(ctx: &RunCtx) -> Result<()> {
    let out = ctx.dir("dense-stage");
    for form in FORMS {
        if out.join(form).join("profiles").exists() {
            bail!(
                "{} already holds a run; remove it",
                out.join(form).display()
            );
        }
    }
    let tmp = tempfile::tempdir().context("a scratch directory for the stage plan")?;
    let plan = tmp.path().join("plan.toml");
    std::fs::write(&plan, STAGE_PLAN)?;
    for form in FORMS {
        let dir = out.join(form);
        std::fs::create_dir_all(&dir)?;
        let mut args = ctx.fleet_model();
        args.extend(os_args![
            "--profile-dir",
            &dir.join("profiles"),
            "--dense-form",
            form
        ]);
        let mut fleet = ctx.fleet(&dir.join("fleet.log"), &args)?;
        exec(ctx.harness().args(os_args![
            "sweep",
            "--url",
            fleet.url(),
            "--plan",
            &plan,
            "--levels",
            "1,8",
            "--out",
            &tmp.path().join(format!("sweep-{form}"))
        ]))?;
        fleet.stop();
    }
    exec(ctx.harness().args(os_args![
        "dense-stage",
        "--three",
        &out.join("three-matmul/profiles"),
        "--fused",
        &out.join("fused-slices/profiles"),
        "--out",
        &out
    ]))
}
