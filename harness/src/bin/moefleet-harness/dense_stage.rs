//! `moefleet-harness dense-stage`: stage-level effect of the dense form, role 0 compute time per
//! frame from the profiles of two fleet runs (OUT/dense_stage.csv and .json).

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Profile directory (or role-0.jsonl) of the run with --dense-form three-matmul.
    #[arg(long)]
    three: PathBuf,
    /// Profile directory (or role-0.jsonl) of the run with --dense-form fused-slices.
    #[arg(long)]
    fused: PathBuf,
    /// Directory for the outputs (created if missing).
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { three, fused, out } = args;
    moefleet_harness::experiments::dense::stage::run(&three, &fused, &out)?;
    Ok(())
}
