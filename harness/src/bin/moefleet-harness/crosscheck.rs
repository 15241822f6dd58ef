//! `moefleet-harness crosscheck DIR`: a load run's token counts and times against the server's own
//! (`load::crosscheck`), written as DIR/crosscheck.json and crosscheck.md (for a sweep, search or
//! repeated run, in each step's directory). `run` writes them as it ends; this rewrites them from
//! the records of a run made before.

use std::path::PathBuf;

use moefleet_harness::load::{rederive, step};

#[derive(clap::Args)]
pub struct Args {
    /// A `run` directory, or a sweep's, search's or repeated run's.
    dir: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let steps = rederive::steps_under(&args.dir)?;
    for s in &steps {
        step::write_crosscheck(&s.dir, &s.records)?;
        let md = s.dir.join("crosscheck.md");
        match std::fs::read_to_string(&md) {
            Ok(text) => println!("## {}\n\n{text}", s.dir.display()),
            Err(_) => println!(
                "## {}\n\nnothing to check beyond the stream's own count (no server timings, no \
                 client count)\n",
                s.dir.display()
            ),
        }
    }
    Ok(())
}
