//! Conversations as a unit (not part of the main job: `make load` runs it after `load`, or
//! `moefleet-harness reproduce --only conversations`): for llama-server and then a moefleet fleet
//! on the same GGUF file, each fresh and alone on the machine, one open-loop run of multi-turn
//! conversations (`moefleet-harness run --turns`) into RUN/conversations/llama-server/ and
//! RUN/conversations/moefleet/: Poisson arrivals of conversations, each turn resending the
//! conversation so far after a pause, the client counting every prompt and answer in the file's
//! own tokenizer (`--tokenizer`). What it shows: how each server's TTFT grows as a conversation
//! grows, how much of each turn's prompt llama-server serves from its prefix cache (our fleet
//! reports none: it computes every prompt whole), and whether the harness's counts and times
//! agree with each server's own (`crosscheck.md`).

use std::ffi::OsString;
use std::path::Path;

use anyhow::Result;

use super::unit::SLO;
use crate::experiments::server_process::ServerProcess;
use crate::experiments::unit::{exec, Experiment, RunCtx};
use crate::os_args;
use crate::recheck::Recheck;

/// The unit.
pub struct Conversations;

/// `moefleet-harness run` arguments of one server's run under the plan (`quick`: the CI smoke).
fn run_args(quick: bool, url: &str, tokenizer: &Path, out: &Path) -> Vec<OsString> {
    // conversations per second (Poisson), conversations (warm-up included), warm-up, turns,
    // output tokens, seconds between a turn's answer and the next turn
    let (rate, n, warmup, turns, tokens, think) = if quick {
        ("0.5", "4", "1", "3", "16", "0.5")
    } else {
        ("0.1", "16", "2", "4", "64", "1")
    };
    os_args![
        "run",
        "--url",
        url,
        "--slo",
        SLO,
        "--load",
        "poisson",
        "--rate",
        rate,
        "--requests",
        n,
        "--warmup",
        warmup,
        "--turns",
        turns,
        "--think-s",
        think,
        "--max-tokens",
        tokens,
        "--ignore-eos",
        "--tokenizer",
        tokenizer,
        "--out",
        out
    ]
}

impl Experiment for Conversations {
    fn name(&self) -> &'static str {
        "conversations"
    }

    fn about(&self) -> &'static str {
        "multi-turn conversations on llama-server and our fleet, same GGUF, counts and times \
         cross-checked (make load; RUN/conversations/)"
    }

    fn in_main_job(&self) -> bool {
        false
    }

    fn takes_model(&self) -> bool {
        true
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let out = ctx.dir("conversations");
        std::fs::create_dir_all(&out)?;
        let model = match &ctx.model {
            Some(m) => m.clone(),
            None => ctx.smollm2()?,
        };
        let quick = ctx.quick();
        // llama-server as the load unit configures it: 8 slots of 2048 positions, a thread per
        // logical CPU
        let threads = crate::host::logical_cpus().to_string();
        let llama = os_args!["-m", &model, "-t", &threads, "-np", "8", "-c", "16384"];
        let log = out.join("llama-server.log");
        let server = ServerProcess::llama_server(&ctx.llama_dir()?, &log, &llama)?;
        let args = run_args(quick, server.url(), &model, &out.join("llama-server"));
        exec(ctx.harness().args(args))?;
        drop(server);
        let serve = os_args!["--model", &model];
        let fleet = ctx.fleet(&out.join("moefleet.log"), &serve)?;
        let args = run_args(quick, fleet.url(), &model, &out.join("moefleet"));
        exec(ctx.harness().args(args))?;
        drop(fleet);
        exec(ctx.harness().arg("parquet").arg(&out))
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[]
    }
}
