//! `moefleet-harness analyze`: tables from the token traces of a run: phases.csv, curve.csv (each
//! with its Parquet twin) and table4.md, computed with polars.

use std::path::PathBuf;

use moefleet_harness::analysis::tables;

#[derive(clap::Args)]
pub struct Args {
    run: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { run } = args;
    let table = tables::analyze(&run)?;
    print!("{table}");
    eprintln!(
        "wrote {0}/phases.csv, {0}/curve.csv (and their .parquet) and {0}/table4.md",
        run.display()
    );
    Ok(())
}
