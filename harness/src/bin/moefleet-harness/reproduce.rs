//! `moefleet-harness reproduce`: the main job (`make reproduce`), or chosen experiments, as units
//! of `experiments::registry`.

use std::path::PathBuf;

use anyhow::Context;
use moefleet_harness::experiments::plan;
use moefleet_harness::experiments::registry::EXPERIMENTS;
use moefleet_harness::experiments::unit::{ContextSizes, Plan, RunCtx};

#[derive(clap::Args)]
pub struct Args {
    /// The run directory every experiment writes its folder in (required unless --list).
    #[arg(long, required_unless_present = "list")]
    out: Option<PathBuf>,
    /// Plan sizes: quick (a smoke run of every experiment, about a quarter of an hour) or paper.
    #[arg(long, value_enum, default_value = "paper")]
    plan: Plan,
    /// Run only these experiments, in this order (comma-separated; those outside the main job
    /// too); without it, every experiment of the main job, then REPORT.md and `verify`.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The preset of the sweep's, the dense stage's, the draft replay's and speculation's fleets
    /// (the context scan and Figure 6 keep inkling-mini).
    #[arg(long, default_value = "inkling-mini")]
    preset: String,
    /// Roles of every fleet of the main job.
    #[arg(long, default_value_t = 11, value_parser = clap::value_parser!(u64).range(1..=64))]
    roles: u64,
    /// The directory holding `moefleet` and `moefleet-harness` [default: this program's].
    #[arg(long)]
    bin: Option<PathBuf>,
    /// The context probe's largest size under the paper plan, in positions [default: 524288, the
    /// size issue 7 asks the probe to reach; 1048576 adds the spec's last size, about 62 s at `inkling` shapes on host E].
    #[arg(long, env = "PROBE_MAX")]
    probe_max: Option<u64>,
    /// The context scan's prompt sizes under the paper plan [default: 1024,2048,4096,8192].
    #[arg(long, env = "SCAN_SIZES")]
    scan_sizes: Option<String>,
    /// The context scan's budget per attention kernel under the paper plan, in seconds
    /// [default: 600].
    #[arg(long, env = "SCAN_BUDGET_S")]
    scan_budget_s: Option<u64>,
    /// The context scan's requests per prompt size under the paper plan [default: 2; the spec's
    /// three up to 16k when set to 3].
    #[arg(long, env = "SCAN_REPEATS", value_parser = clap::value_parser!(u64).range(1..=10))]
    scan_repeats: Option<u64>,
    /// A GGUF checkpoint for the experiments that serve one (draft, then speculation) to serve
    /// instead of their preset and SmolLM2, into RUN/draft-model/ and RUN/speculation-model/
    /// (needs --only).
    #[arg(long)]
    model: Option<PathBuf>,
    /// List the experiments (name, whether the main job runs it, what it does) and exit.
    #[arg(long)]
    list: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.list {
        let width = EXPERIMENTS
            .iter()
            .map(|e| e.name().len())
            .max()
            .unwrap_or(0);
        for e in EXPERIMENTS {
            let job = if e.in_main_job() {
                "main job"
            } else {
                "own target"
            };
            println!("{:<width$} {job:<10} {}", e.name(), e.about());
        }
        return Ok(());
    }
    let bin = match args.bin {
        Some(b) => b,
        None => std::env::current_exe()
            .context("locating this program")?
            .parent()
            .context("this program's directory")?
            .to_path_buf(),
    };
    if !std::path::Path::new("scripts").is_dir() || !std::path::Path::new("workloads").is_dir() {
        anyhow::bail!(
            "run from the repository's root (the experiments read scripts/ and workloads/)"
        );
    }
    if let Some(m) = &args.model {
        if !m.is_file() {
            anyhow::bail!("--model {}: no such file", m.display());
        }
    }
    let units = plan::select(&args.only, args.model.is_some())?;
    let ctx = RunCtx {
        run: args.out.context("--out is required")?,
        bin,
        plan: args.plan,
        preset: args.preset,
        roles: args.roles as usize,
        context: ContextSizes {
            probe_max: args.probe_max,
            scan_sizes: args.scan_sizes,
            scan_budget_s: args.scan_budget_s,
            scan_repeats: args.scan_repeats,
        },
        model: args.model,
    };
    plan::run(&ctx, &units, args.only.is_empty())
}
