//! `moefleet-harness verify`: recompute every claim of reproduction/claims.toml from the committed
//! records and check CLAIMS.md; fails naming each claim that does not hold.

use std::path::PathBuf;

use anyhow::bail;
use moefleet_harness::claims;

#[derive(clap::Args)]
pub struct Args {
    /// Repository root.
    #[arg(long, default_value = ".")]
    root: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { root } = args;
    let (n, fails) = claims::verify(&root)?;
    if !fails.is_empty() {
        for f in &fails {
            eprintln!("FAIL {}: {}", f.what, f.why);
        }
        bail!("{} of {n} checks failed", fails.len());
    }
    println!("verify: {n} passed, 0 failed");
    Ok(())
}
