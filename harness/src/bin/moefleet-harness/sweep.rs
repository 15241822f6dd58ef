//! `moefleet-harness sweep`: paired concurrency sweep: replay a plan against an OpenAI-compatible
//! server and record one trace per request under --out (or `--resume` an interrupted one). With
//! `--repeats N` (and `--vs URL_B`: blocks of A B B A against a second server) each run is a sweep
//! directory OUT/NN-ARM-BLOCK/, and OUT/arms.md gives each level's Q_decode, Q_phase and median
//! TTFT per arm and B / A, with bootstrap intervals over blocks (`load::arms`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use moefleet_harness::driver::server::Server;
use moefleet_harness::driver::sweep::{self, SweepConfig};
use moefleet_harness::load::repeat::{self, Unit};
use moefleet_harness::workload::Plan;

#[derive(clap::Args)]
pub struct Args {
    /// Base URL of the server (e.g. http://127.0.0.1:8080) [with --resume: the run's].
    #[arg(long, required_unless_present = "resume")]
    url: Option<String>,
    /// Continue the interrupted run in --out: its plan and settings, the finished phases
    /// kept, the phase that was cut short run again (its partial traces kept aside).
    #[arg(long, conflicts_with_all = ["plan", "levels", "max_tokens", "honour_eos", "vs", "repeats"])]
    resume: bool,
    /// A built-in plan (paper, quick) or a plan TOML file.
    #[arg(long, default_value = "quick")]
    plan: String,
    /// Only these levels of the plan (comma-separated), e.g. 1,88.
    #[arg(long, value_delimiter = ',')]
    levels: Option<Vec<usize>>,
    /// Override the plan's output tokens per request.
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Run directory to create (e.g. results/RUN).
    #[arg(long)]
    out: PathBuf,
    /// Let the server stop at end-of-text (by default requests ask it to ignore EOS so every
    /// request yields exactly the output cap).
    #[arg(long)]
    honour_eos: bool,
    /// Seconds to wait for the server to become idle before a phase.
    #[arg(long, default_value_t = 120)]
    idle_timeout_s: u64,
    /// A second server (B) to alternate with --url (A) in blocks of A B B A, the same plan each
    /// time (OUT/NN-ARM-BLOCK/; OUT/arms.md gives B / A per level with its interval over blocks).
    #[arg(long)]
    vs: Option<String>,
    /// Run the plan this many times (blocks of A B B A with --vs); OUT/arms.md gives each level's
    /// means with their bootstrap intervals over the runs.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    repeats: Option<u64>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args {
        Args {
            url,
            resume: true,
            out,
            idle_timeout_s,
            ..
        } => {
            let m = moefleet_harness::driver::manifest::RunManifest::read(&out)
                .context("--resume needs the run's run.json")?;
            let plan: Plan =
                serde_json::from_value(m.plan.clone()).context("the run's plan in run.json")?;
            let cfg = SweepConfig {
                url: url.unwrap_or(m.url),
                plan,
                out,
                ignore_eos: m.ignore_eos,
                idle_timeout: Duration::from_secs(idle_timeout_s),
                resume: true,
            };
            run_sweep(cfg)?;
        }
        Args {
            url,
            plan,
            levels,
            max_tokens,
            out,
            honour_eos,
            idle_timeout_s,
            vs,
            repeats,
            ..
        } => {
            let url = url.ok_or_else(|| anyhow::anyhow!("--url is required"))?;
            let mut plan = Plan::load(&plan)?;
            if let Some(ls) = levels {
                for l in &ls {
                    if !plan.levels.contains(l) {
                        bail!(
                            "level {l} is not in plan '{}' (levels: {:?})",
                            plan.name,
                            plan.levels
                        );
                    }
                }
                plan.levels.retain(|l| ls.contains(l));
            }
            if let Some(m) = max_tokens {
                if m == 0 {
                    bail!("--max-tokens must be at least 1");
                }
                plan.max_tokens = m;
            }
            let idle_timeout = Duration::from_secs(idle_timeout_s);
            if vs.is_some() || repeats.is_some() {
                let unit = Unit::Paired(&plan, !honour_eos, idle_timeout);
                let blocks = repeats.unwrap_or(1) as usize;
                run_repeated(&url, vs.as_deref(), &unit, blocks, &out)?;
                return Ok(());
            }
            let cfg = SweepConfig {
                url,
                plan,
                out,
                ignore_eos: !honour_eos,
                idle_timeout,
                resume: false,
            };
            run_sweep(cfg)?;
        }
    }
    Ok(())
}

/// Run the paired sweep `blocks` times against `a` (and A B B A with `b`), and print the table.
fn run_repeated(
    a: &str,
    b: Option<&str>,
    unit: &Unit<'_>,
    blocks: usize,
    out: &std::path::Path,
) -> anyhow::Result<()> {
    crate::common::runtime()?.block_on(async {
        let mut servers = vec![Server::connect(a).await?];
        if let Some(b) = b {
            servers.push(Server::connect(b).await?);
        }
        let refs: Vec<&Server> = servers.iter().collect();
        repeat::run(&refs, unit, blocks, out).await
    })?;
    print!("{}", std::fs::read_to_string(out.join("arms.md"))?);
    Ok(())
}

/// Run a sweep on a runtime of its own.
fn run_sweep(cfg: SweepConfig) -> anyhow::Result<()> {
    crate::common::runtime()?.block_on(sweep::sweep(cfg))
}
