//! `moefleet-harness bench-table`: the kernel microbenchmarks against this machine's ceilings
//! (OUT/kernels.csv and OUT/kernels.md).

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Criterion's directory (`cargo bench -p moefleet-engine --bench kernels` writes
    /// target/criterion).
    #[arg(long, default_value = "target/criterion")]
    criterion: PathBuf,
    /// The ceilings.json of `moefleet-harness ceilings` (or its directory).
    #[arg(long)]
    ceilings: PathBuf,
    /// Directory for kernels.csv and kernels.md (created if missing).
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        criterion,
        ceilings,
        out,
    } = args;
    let (_, md) = moefleet_harness::experiments::bench_table::run(&criterion, &ceilings, &out)?;
    print!("{md}");
    eprintln!("wrote {0}/kernels.csv and {0}/kernels.md", out.display());
    Ok(())
}
