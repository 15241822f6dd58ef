//! `moefleet-harness report`: write RUN/REPORT.md: what ran, where, our tables and figure, and the
//! paper side by side.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    run: PathBuf,
    #[arg(long, default_value = ".")]
    root: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { run, root } = args;
    moefleet_harness::report::write(&run, &root)?;
    eprintln!("wrote {}/REPORT.md", run.display());
    Ok(())
}
