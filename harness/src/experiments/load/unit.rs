//! The load experiment as a unit (not part of the main job: `make load`, or `moefleet-harness
//! reproduce --only load`): for llama-server and then a moefleet fleet on the same GGUF file, an
//! SLA search by request rate (`moefleet-harness run --search rate`) into RUN/load/llama-server/
//! and RUN/load/moefleet/, each server fresh and alone on the machine while it is measured; then
//! both at one Poisson rate in blocks of A B B A (llama-server A, the fleet B; both up, one loaded
//! at a time) into RUN/load/abba/.

use std::ffi::OsString;
use std::path::Path;

use anyhow::Result;

use crate::experiments::server_process::ServerProcess;
use crate::experiments::unit::{exec, Experiment, RunCtx};
use crate::os_args;
use crate::recheck::Recheck;

/// The objectives both servers are searched against: a first token within half a second and a
/// steady 20 tokens/s per user or better (the example objectives).
pub const SLO: &str = "ttft=0.5,tpot=0.05";

/// The load experiment.
pub struct Load;

/// The search's sizes under a plan.
struct Sizes {
    requests: usize,
    warmup: usize,
    max_tokens: usize,
    /// Streams the servers are configured for, and the client's cap.
    streams: usize,
    precision: f64,
    steps: usize,
    /// Blocks of A B B A, and requests per run, of the side-by-side at a fixed rate.
    blocks: usize,
    abba_requests: usize,
    /// The GGUF file both servers serve: the client counts every request in its tokenizer.
    model: std::path::PathBuf,
}

impl Sizes {
    fn of(quick: bool, model: &Path) -> Sizes {
        if quick {
            Sizes {
                requests: 16,
                warmup: 2,
                max_tokens: 32,
                streams: 4,
                precision: 0.25,
                steps: 3,
                blocks: 1,
                abba_requests: 8,
                model: model.to_path_buf(),
            }
        } else {
            Sizes {
                requests: 64,
                warmup: 4,
                max_tokens: 64,
                streams: 8,
                precision: 0.1,
                steps: 6,
                blocks: 3,
                abba_requests: 24,
                model: model.to_path_buf(),
            }
        }
    }

    /// What every `moefleet-harness run` of the experiment shares: the server, objectives, sizes
    /// of each run (`requests` of them) and where it writes.
    fn run_args(&self, url: &str, requests: usize, out: &Path) -> Vec<OsString> {
        os_args![
            "run",
            "--url",
            url,
            "--tokenizer",
            &self.model,
            "--slo",
            SLO,
            "--requests",
            &requests.to_string(),
            "--warmup",
            &self.warmup.to_string(),
            "--max-tokens",
            &self.max_tokens.to_string(),
            "--ignore-eos",
            "--max-concurrency",
            &self.streams.to_string(),
            "--out",
            out
        ]
    }

    /// `moefleet-harness run` arguments of the search.
    fn search(&self, url: &str, out: &Path) -> Vec<OsString> {
        let mut args = self.run_args(url, self.requests, out);
        args.extend(os_args![
            "--search",
            "rate",
            "--sweep-process",
            "poisson",
            "--precision",
            &self.precision.to_string(),
            "--max-search-steps",
            &self.steps.to_string()
        ]);
        args
    }

    /// `moefleet-harness run` arguments of the side-by-side: A B B A blocks at `ABBA_RATE`.
    fn abba(&self, a: &str, b: &str, out: &Path) -> Vec<OsString> {
        let mut args = self.run_args(a, self.abba_requests, out);
        args.extend(os_args![
            "--vs",
            b,
            "--repeats",
            &self.blocks.to_string(),
            "--load",
            "poisson",
            "--rate",
            &ABBA_RATE.to_string()
        ]);
        args
    }
}

/// The side-by-side's arrival rate: below both servers' one-at-a-time rates on host C (1.10 and
/// 0.70 requests/s in `results/load-20261204`), a load both are meant to serve within the
/// objectives.
pub const ABBA_RATE: f64 = 0.5;

impl Experiment for Load {
    fn name(&self) -> &'static str {
        "load"
    }

    fn about(&self) -> &'static str {
        "SLA searches by Poisson rate on llama-server and our fleet, same GGUF (make load; RUN/load/)"
    }

    fn in_main_job(&self) -> bool {
        false
    }

    fn takes_model(&self) -> bool {
        true
    }

    fn run(&self, ctx: &RunCtx) -> Result<()> {
        let out = ctx.dir("load");
        std::fs::create_dir_all(&out)?;
        let model = match &ctx.model {
            Some(m) => m.clone(),
            None => ctx.smollm2()?,
        };
        let sizes = Sizes::of(ctx.quick(), &model);
        let streams = sizes.streams.to_string();
        // llama-server as its users configure it for this load: a slot per stream, 2048
        // positions each, a thread per logical CPU
        let context = (2048 * sizes.streams).to_string();
        let threads = crate::host::logical_cpus().to_string();
        let llama = os_args!["-m", &model, "-t", &threads, "-np", &streams, "-c", &context];
        let server =
            ServerProcess::llama_server(&ctx.llama_dir()?, &out.join("llama-server.log"), &llama)?;
        exec(
            ctx.harness()
                .args(sizes.search(server.url(), &out.join("llama-server"))),
        )?;
        drop(server);
        let serve = os_args!["--model", &model];
        let fleet = ctx.fleet(&out.join("moefleet.log"), &serve)?;
        exec(
            ctx.harness()
                .args(sizes.search(fleet.url(), &out.join("moefleet"))),
        )?;
        // the two side by side at one rate, alternated: both up, one loaded at a time
        let log = out.join("llama-server-abba.log");
        let server = ServerProcess::llama_server(&ctx.llama_dir()?, &log, &llama)?;
        let abba = sizes.abba(server.url(), fleet.url(), &out.join("abba"));
        exec(ctx.harness().args(abba))?;
        drop(server);
        drop(fleet);
        exec(ctx.harness().arg("parquet").arg(&out))
    }

    fn rechecks(&self) -> &'static [&'static dyn Recheck] {
        &[&super::recheck::LoadRuns]
    }
}
