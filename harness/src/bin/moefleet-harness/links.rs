//! `moefleet-harness links`: link emulation, measured: the kernel's tbf shaper and the fleet's
//! curve with and without emulated links (DIR/links.md for each given).

use std::path::PathBuf;

use anyhow::bail;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    tbf: Option<PathBuf>,
    #[arg(long)]
    fleet: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { tbf, fleet } = args;
    use moefleet_harness::experiments::links;
    if tbf.is_none() && fleet.is_none() {
        bail!("give --tbf DIR and/or --fleet DIR");
    }
    if let Some(d) = tbf {
        let md = links::tbf_markdown(&links::tbf_rows(&d)?);
        std::fs::write(d.join("links.md"), &md)?;
        println!("{md}");
    }
    if let Some(d) = fleet {
        let md = links::fleet_markdown(&links::fleet_rows(&d)?);
        std::fs::write(d.join("links.md"), &md)?;
        println!("{md}");
    }
    Ok(())
}
