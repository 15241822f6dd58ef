//! `moefleet-harness ceilings`: ceilings of this machine (memory read bandwidth, fp32 FMA rate, the
//! engine's INT4 and INT8 products, decode of a preset against the bandwidth and against reads laid
//! out as its token's) in about a minute.

use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Directory for ceilings.json (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Size of the streamed buffer in MiB; keep it far larger than the caches.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(64..=65536))]
    buffer_mib: u64,
    /// Timed passes over the buffer per thread count (after one untimed pass).
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u64).range(1..=1000))]
    passes: u64,
    /// Milliseconds of timed calls per product and thread count (at least 15 calls).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    product_ms: u64,
    /// The preset whose greedy decode (synthetic weights) is set against the read bandwidth, as
    /// the bytes a token reads per second, and against plain reads of the same bytes laid out as a
    /// token finds them (what every token rereads, then its experts from a pool as large as the
    /// model's: picked at random, and as a recorded decode of the same length picked them, which
    /// is the share's ceiling: on a host whose cache holds the former, the fair roofline); `none`
    /// to skip it.
    #[arg(long, default_value = "inkling-mini")]
    decode: String,
    /// Tokens per decode repetition (llama-bench's tg length).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    decode_tokens: u64,
    /// Timed decode repetitions per thread count (after one untimed).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    decode_repetitions: u64,
    /// Seed of the decoded preset's synthetic weights.
    #[arg(long, default_value_t = 7)]
    decode_seed: u64,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        out,
        buffer_mib,
        passes,
        product_ms,
        decode,
        decode_tokens,
        decode_repetitions,
        decode_seed,
    } = args;
    use moefleet_harness::experiments::ceilings::decode::DecodeConfig;
    let decode = (decode != "none").then_some(DecodeConfig {
        preset: decode,
        seed: decode_seed,
        tokens: decode_tokens as usize,
        repetitions: decode_repetitions as usize,
    });
    if let Some(d) = &decode {
        // an unknown preset is refused before the half minute of other measurements
        moefleet_engine::model::ModelConfig::preset(&d.preset)?;
    }
    moefleet_harness::experiments::ceilings::run(
        &moefleet_harness::experiments::ceilings::CeilingsConfig {
            out,
            buffer_bytes: (buffer_mib as usize) << 20,
            passes: passes as usize,
            product_budget: Duration::from_millis(product_ms),
            decode,
        },
    )?;
    Ok(())
}
