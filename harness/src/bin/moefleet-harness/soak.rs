//! `moefleet-harness soak`: bounded soak against a moefleet server on this machine, every output
//! checked against its output alone; exits non-zero if a check fails.

use std::path::PathBuf;

use anyhow::bail;

use crate::common::{runtime, ReliabilityPrompts};

#[derive(clap::Args)]
pub struct Args {
    /// Base URL of the server (e.g. http://127.0.0.1:8080).
    #[arg(long)]
    url: String,
    /// Directory to create.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 1800.0)]
    duration_s: f64,
    #[arg(long, default_value_t = 176, value_parser = clap::value_parser!(u64).range(1..=4096))]
    streams: u64,
    #[arg(long, default_value_t = 300.0)]
    burst_every_s: f64,
    #[arg(long, default_value_t = 60.0)]
    burst_s: f64,
    #[arg(long, default_value_t = 2.0)]
    burst_factor: f64,
    #[command(flatten)]
    prompts: ReliabilityPrompts,
    #[arg(long, default_value_t = 10.0)]
    sample_s: f64,
    /// Longest wait for the requests in flight at the end to finish.
    #[arg(long, default_value_t = 600.0)]
    drain_s: f64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        url,
        out,
        duration_s,
        streams,
        burst_every_s,
        burst_s,
        burst_factor,
        prompts,
        sample_s,
        drain_s,
    } = args;
    let cfg = moefleet_harness::reliability::soak::SoakConfig {
        url,
        duration_s,
        streams: streams as usize,
        burst_every_s,
        burst_s,
        burst_factor,
        prompts: prompts.prompts as usize,
        min_tokens: prompts.min_tokens as usize,
        max_tokens: prompts.max_tokens as usize,
        sample_s,
        drain_s,
    };
    let rec = runtime()?.block_on(moefleet_harness::reliability::soak::run(cfg, &out))?;
    println!("{}", serde_json::to_string_pretty(&rec.summary.checks)?);
    eprintln!("wrote {}/soak.json", out.display());
    if !rec.summary.passed {
        bail!("the soak failed a check (see {}/soak.json)", out.display());
    }
    Ok(())
}
