//! `moefleet-harness reliability`: print the reliability table rendered from committed records
//! (faults runs, a soak, the wire fuzzing record), as the README holds it.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// Faults run directories, relative to ROOT.
    #[arg(long = "faults", required = true)]
    faults: Vec<String>,
    #[arg(long)]
    soak: String,
    #[arg(long)]
    fuzz: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        root,
        faults,
        soak,
        fuzz,
    } = args;
    print!(
        "{}",
        moefleet_harness::reliability::table::render(&root, &faults, &soak, &fuzz)?
    );
    Ok(())
}
