//! `moefleet-harness claims`: render reproduction/CLAIMS.md from reproduction/claims.toml (or, with
//! --show, print each claim's recomputed value beside the stated one).

use std::path::PathBuf;

use moefleet_harness::claims;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// Print each claim's recomputed value beside the stated one.
    #[arg(long)]
    show: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args { root, show } = args;
    let f = claims::load(&root)?;
    if show {
        for c in f.section.iter().flat_map(|s| &s.claim) {
            match c.rule.eval(&root) {
                Ok(v) => println!("{:<40} stated {:<22} recomputed {v}", c.id, c.value),
                Err(e) => println!("{:<40} stated {:<22} ERROR {e:#}", c.id, c.value),
            }
        }
    } else {
        std::fs::write(root.join("reproduction/CLAIMS.md"), claims::render(&f))?;
        eprintln!("wrote reproduction/CLAIMS.md");
    }
    Ok(())
}
