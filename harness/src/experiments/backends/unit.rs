//! The two backends side by side as a unit of the main job: the native kernels against OpenVINO
//! per layer and per token, as ratios (RUN/openvino/backends.*), and what OpenVINO executed for
//! `inkling-mini` (RUN/openvino/report-f32.json).

use anyhow::Result;

use crate::experiments::unit::{exec, exec_to, Experiment, RunCtx};
use crate::os_args;

/// The backends.
pub struct Backends;

impl Experiment for Backends {
    fn name(&self) -> &'static str {
        "backends"
    }

    fn about(&self) -> &'static str {
        "the native kernels against OpenVINO per layer and per token, and OpenVINO's report \
         (RUN/openvino/)"
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let out = ctx.dir("openvino");
        let mut cmd = ctx.harness();
        cmd.args(os_args!["backends", "--out", &out]);
        if ctx.quick() {
            cmd.args(["--calls", "11", "--tokens", "32", "--rounds", "2"]);
        }
        exec(&mut cmd)?;
        exec_to(
            ctx.engine().args(os_args![
                "openvino-report",
                "--preset",
                "inkling-mini",
                "--out",
                &out.join("report-f32.json")
            ]),
            None,
        )
    }
}
