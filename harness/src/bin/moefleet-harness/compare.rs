//! `moefleet-harness compare A B`: two load runs side by side (`load::compare`).

use std::path::PathBuf;

use moefleet_harness::load::compare::{self, Options};
use moefleet_harness::load::compare_page;

#[derive(clap::Args)]
pub struct Args {
    /// The first run (A): a `run` directory, or a sweep's or search's.
    a: PathBuf,
    /// The second run (B), of the same kind; differences and ratios are B − A and B / A.
    b: PathBuf,
    /// Where to write compare.md, compare.csv, compare.svg and compare.html (default: print the
    /// table only).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Bootstrap resamples of each side's requests.
    #[arg(long, default_value_t = 2000)]
    resamples: usize,
    /// Two-sided confidence of the intervals.
    #[arg(long, default_value_t = 0.95)]
    confidence: f64,
    /// Seed of the resampling (the same seed gives the same intervals).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let opt = Options {
        resamples: args.resamples,
        confidence: args.confidence,
        seed: args.seed,
    };
    let rows = match &args.out {
        Some(out) => {
            let rows = compare_page::write(out, &args.a, &args.b, opt)?;
            eprintln!(
                "compare: wrote {}/compare.{{md,csv,svg,html}}",
                out.display()
            );
            rows
        }
        None => compare::runs(&args.a, &args.b, opt)?,
    };
    let (a, b) = (args.a.display().to_string(), args.b.display().to_string());
    println!("{}", compare::markdown(&rows, &a, &b, opt));
    Ok(())
}
