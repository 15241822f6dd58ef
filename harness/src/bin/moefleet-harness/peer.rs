//! `moefleet-harness peer`: tables of a side-by-side run with llama.cpp (`scripts/peer.sh`), every
//! rate recomputed from each side's per-repetition samples (DIR/peer.csv, DIR/PEER.md).

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    dir: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { dir } = args;
    print!("{}", moefleet_harness::experiments::peer::write(&dir)?);
    eprintln!("wrote {0}/peer.csv and {0}/PEER.md", dir.display());
    Ok(())
}
