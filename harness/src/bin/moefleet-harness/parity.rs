//! `moefleet-harness parity`: tables of a GGUF parity run (`scripts/gguf_parity.sh`), llama-server,
//! `moefleet continue` and a fleet compared token for token (parity.csv, PARITY.md, parity.png/.svg).

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    dir: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { dir } = args;
    print!("{}", moefleet_harness::experiments::parity::write(&dir)?);
    eprintln!(
        "wrote {0}/parity.csv, PARITY.md and parity.png/.svg",
        dir.display()
    );
    Ok(())
}
