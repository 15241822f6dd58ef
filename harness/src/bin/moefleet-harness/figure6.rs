//! `moefleet-harness figure6`: Figure 6 (paper §5.3) from two sweeps of the burst plan, one with
//! reference admission and one windowed (figure6.csv/.md, figure6.png/.svg).

use std::path::PathBuf;

use crate::common::published;

#[derive(clap::Args)]
pub struct Args {
    /// The reference-admission run directory (with phases.csv).
    #[arg(long)]
    reference: PathBuf,
    /// The windowed run directory (with phases.csv).
    #[arg(long)]
    windowed: PathBuf,
    /// Where the figure and tables go.
    #[arg(long)]
    out: PathBuf,
    /// The paper's prefill.csv [default: reproduction/paper/prefill.csv when it exists].
    #[arg(long)]
    paper: Option<PathBuf>,
    /// Draw ours alone.
    #[arg(long, conflicts_with = "paper")]
    no_paper: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        reference,
        windowed,
        out,
        paper,
        no_paper,
    } = args;
    let paper = if no_paper {
        None
    } else {
        paper.or_else(|| published("figure6", "prefill.csv"))
    };
    let md =
        moefleet_harness::figures::figure6::run(&reference, &windowed, &out, paper.as_deref())?;
    print!("{md}");
    eprintln!(
        "wrote {0}/figure6.png/.svg, figure6.csv and figure6.md",
        out.display()
    );
    Ok(())
}
