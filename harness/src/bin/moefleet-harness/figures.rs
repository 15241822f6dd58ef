//! `moefleet-harness figures`: figures of a run directory: figure5 from a sweep's curve.csv, or
//! figure3 from a dense run's dense.csv.

use std::path::PathBuf;

use crate::common::published;

#[derive(clap::Args)]
pub struct Args {
    run: PathBuf,
    /// Title over Figure 5 (default: what it shows; the run is named under it).
    #[arg(long)]
    title: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { run, title } = args;
    if run.join("dense.json").exists() {
        let paper = published("figures", "dense.csv");
        moefleet_harness::figures::figure3::draw(&run, paper.as_deref())?;
        eprintln!("wrote {0}/figure3.png and {0}/figure3.svg", run.display());
        return Ok(());
    }
    let title = title.unwrap_or_else(|| {
        "Figure 5: throughput and time to first token against concurrency".into()
    });
    let run_line =
        moefleet_harness::figures::run_label::RunLabel::read(&run.join("run.json"))?.line();
    moefleet_harness::figures::figure5::draw(&run, &title, &run_line)?;
    eprintln!("wrote {0}/figure5.png and {0}/figure5.svg", run.display());
    Ok(())
}
