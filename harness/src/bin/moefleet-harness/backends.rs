//! `moefleet-harness backends`: the native kernels against the OpenVINO backend in one run, as
//! ratios (OUT/backends.json and OUT/backends.csv).

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Preset of the per-layer measurement.
    #[arg(long, default_value = "inkling")]
    layer_preset: String,
    /// Layer measured (a MoE layer: 2 or above).
    #[arg(long, default_value_t = 2)]
    layer: usize,
    /// Rows per call (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    rows: Vec<usize>,
    /// Timed calls of each backend per row count.
    #[arg(long, default_value_t = 31, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    calls: u64,
    /// Preset of the per-token measurement (whole model, one process).
    #[arg(long, default_value = "inkling-mini")]
    token_preset: String,
    /// Decode tokens per round.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    tokens: u64,
    /// Rounds of each backend, alternating.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=1000))]
    rounds: u64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        out,
        seed,
        layer_preset,
        layer,
        rows,
        calls,
        token_preset,
        tokens,
        rounds,
    } = args;
    moefleet_harness::experiments::backends::run(
        &moefleet_harness::experiments::backends::BackendsConfig {
            out,
            seed,
            layer_preset,
            layer,
            rows,
            calls: calls as usize,
            token_preset,
            tokens: tokens as usize,
            rounds: rounds as usize,
        },
    )?;
    Ok(())
}
