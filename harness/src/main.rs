//! `moefleet-harness`: the measurement lab. For now it parses the commands of the experiments that
//! later issues implement and says plainly that they are not there yet.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Paired concurrency sweep against an OpenAI-compatible server (not implemented yet).
    Sweep {
        #[arg(long)]
        url: String,
        #[arg(long, default_value = "quick")]
        plan: String,
        #[arg(long)]
        out: PathBuf,
    },
    /// Tables from the token traces of a run (not implemented yet).
    Analyze { run: PathBuf },
    /// Figures from the tables of a run (not implemented yet).
    Figures { run: PathBuf },
    /// Recompute every claim of reproduction/CLAIMS.md (not implemented yet).
    Verify,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let name = match cli.cmd {
        Cmd::Sweep { .. } => "sweep",
        Cmd::Analyze { .. } => "analyze",
        Cmd::Figures { .. } => "figures",
        Cmd::Verify => "verify",
    };
    eprintln!(
        "moefleet-harness: '{name}' is not implemented yet (it arrives with the harness issues)"
    );
    ExitCode::from(2)
}
