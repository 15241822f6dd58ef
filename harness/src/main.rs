//! `moefleet-harness`: argument parsing and wiring only.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::{Parser, Subcommand};
use moefleet_harness::analysis::tables;
use moefleet_harness::driver::sweep::{self, SweepConfig};
use moefleet_harness::workload::Plan;

#[derive(Parser)]
#[command(
    name = "moefleet-harness",
    version,
    about = "Replays the Cascadia experiments against moefleet or any OpenAI-compatible server"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Paired concurrency sweep: replay a plan against an OpenAI-compatible server and record one
    /// trace per request under --out.
    Sweep {
        /// Base URL of the server (e.g. http://127.0.0.1:8080).
        #[arg(long)]
        url: String,
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
    },
    /// Tables from the token traces of a run: phases.csv, curve.csv, table4.md.
    Analyze { run: PathBuf },
    /// Figures from the tables of a run (not implemented yet).
    Figures { run: PathBuf },
    /// Recompute every claim of reproduction/CLAIMS.md (not implemented yet).
    Verify,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("moefleet-harness: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Sweep {
            url,
            plan,
            levels,
            max_tokens,
            out,
            honour_eos,
            idle_timeout_s,
        } => {
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
            let cfg = SweepConfig {
                url,
                plan,
                out,
                ignore_eos: !honour_eos,
                idle_timeout: Duration::from_secs(idle_timeout_s),
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(sweep::sweep(cfg))?;
        }
        Cmd::Analyze { run } => {
            let (rows, curve) = tables::analyze(&run)?;
            print!("{}", tables::table4_md(&curve));
            eprintln!(
                "analysed {} phases into {}/phases.csv, curve.csv, table4.md",
                rows.len(),
                run.display()
            );
        }
        Cmd::Figures { .. } => bail!("'figures' is not implemented yet"),
        Cmd::Verify => bail!("'verify' is not implemented yet"),
    }
    Ok(())
}
