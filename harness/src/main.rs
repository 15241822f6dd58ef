//! `moefleet-harness`: argument parsing and wiring only.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::{Parser, Subcommand};
use moefleet_harness::analysis::tables;
use moefleet_harness::claims;
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
    /// Figures from the tables of a run (run `analyze` first): figure5.png and figure5.svg.
    Figures {
        run: PathBuf,
        /// Title over the figure (default: the run directory and model).
        #[arg(long)]
        title: Option<String>,
    },
    /// Recompute every claim of reproduction/claims.toml from the committed records, re-analyse
    /// the claimed runs, and check CLAIMS.md; fails naming each claim that does not hold.
    Verify {
        /// Repository root.
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Write RUN/REPORT.md: what ran, where, our tables and figure, and the paper side by side.
    Report {
        run: PathBuf,
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Render reproduction/CLAIMS.md from reproduction/claims.toml.
    Claims {
        #[arg(long, default_value = ".")]
        root: PathBuf,
        /// Print each claim's recomputed value beside the stated one.
        #[arg(long)]
        show: bool,
    },
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
            let table = tables::analyze(&run)?;
            print!("{table}");
            eprintln!(
                "wrote {0}/phases.csv, {0}/curve.csv and {0}/table4.md",
                run.display()
            );
        }
        Cmd::Figures { run, title } => {
            let title = title.unwrap_or_else(|| {
                let model = std::fs::read_to_string(run.join("run.json"))
                    .ok()
                    .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                    .and_then(|v| v["model"].as_str().map(str::to_string))
                    .unwrap_or_default();
                format!("{} ({model})", run.display())
            });
            moefleet_harness::figures::figure5::draw(&run, &title)?;
            eprintln!("wrote {0}/figure5.png and {0}/figure5.svg", run.display());
        }
        Cmd::Report { run, root } => {
            moefleet_harness::report::write(&run, &root)?;
            eprintln!("wrote {}/REPORT.md", run.display());
        }
        Cmd::Verify { root } => {
            let (n, fails) = claims::verify(&root)?;
            if !fails.is_empty() {
                for f in &fails {
                    eprintln!("FAIL {}: {}", f.what, f.why);
                }
                bail!("{} of {n} checks failed", fails.len());
            }
            println!("verify: {n} passed, 0 failed");
        }
        Cmd::Claims { root, show } => {
            let f = claims::load(&root)?;
            if show {
                for c in f.section.iter().flat_map(|s| &s.claim) {
                    match c.rule.eval(&root) {
                        Ok(v) => println!("{:<40} stated {:<22} recomputed {v}", c.id, c.value),
                        Err(e) => println!("{:<40} stated {:<22} ERROR {e:#}", c.id, c.value),
                    }
                }
            } else {
                std::fs::write(root.join("reproduction/CLAIMS.md"), claims::render(&f))?;
                eprintln!("wrote reproduction/CLAIMS.md");
            }
        }
    }
    Ok(())
}
