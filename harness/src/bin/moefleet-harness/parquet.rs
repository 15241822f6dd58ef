//! `moefleet-harness parquet`: write the Parquet twin of every CSV table under each DIR,
//! recursively.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { dirs } = args;
    for d in dirs {
        for csv in moefleet_harness::csv::tables_under(&d)? {
            moefleet_harness::csv::write_twin(&csv)?;
            eprintln!("wrote {}", moefleet_harness::csv::twin_of(&csv).display());
        }
    }
    Ok(())
}
