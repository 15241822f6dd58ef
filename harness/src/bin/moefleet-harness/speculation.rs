//! `moefleet-harness speculation`: tables and figure of a speculation experiment (MEASUREMENTS.md §6)
//! as the speculation unit writes it (table3, onoff, model, speculation.png/.svg).

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    root: PathBuf,
    /// Repository root (the paper's published data under reproduction/paper).
    #[arg(long, default_value = ".")]
    repo: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { root, repo } = args;
    print!(
        "{}",
        moefleet_harness::experiments::speculation::write(&root, &repo)?
    );
    eprintln!(
        "wrote {0}/table3.md, onoff.md, model.md (and .csv) and speculation.png/.svg",
        root.display()
    );
    Ok(())
}
