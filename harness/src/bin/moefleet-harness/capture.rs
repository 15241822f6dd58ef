//! `moefleet-harness capture`: build a capture corpus through the API (MEASUREMENTS.md §5), every
//! capture checked and copied to OUT/eval/ or OUT/train/.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Base URL of the server (e.g. http://127.0.0.1:8080).
    #[arg(long)]
    url: String,
    /// Corpus directory to create.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
    eval_per_family: u64,
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(0..=4000))]
    train_per_family: u64,
    /// Generated positions per sequence.
    #[arg(long, default_value_t = 160, value_parser = clap::value_parser!(u64).range(3..=100_000))]
    tokens: u64,
    /// Requests in flight at once. A server holds at most 2 GiB of captures, open or waiting to
    /// be written (`engine/src/capture/writer.rs`); a capture that would pass it is dropped and
    /// its request fails.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u64).range(1..=512))]
    concurrency: u64,
    /// Prompt-key prefix (keys are PREFIX/FAMILY/INDEX).
    #[arg(long, default_value = "mtp")]
    prefix: String,
    /// Also capture passages of workloads/corpus (compiled in) under each passage task
    /// (summary, continuation), up to this many per task; one passage in eight is held out
    /// for evaluation.
    #[arg(long, default_value_t = 0)]
    passages: u64,
    /// The server's tokenizer.json, or its GGUF file [default: the project's tokenizer,
    /// compiled in].
    #[arg(long)]
    tokenizer: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        url,
        out,
        eval_per_family,
        train_per_family,
        tokens,
        concurrency,
        prefix,
        passages,
        tokenizer,
    } = args;
    let cfg = moefleet_harness::experiments::draft::capture::CaptureConfig {
        passages_per_task: passages as usize,
        url,
        out,
        prefix,
        eval_per_family: eval_per_family as usize,
        train_per_family: train_per_family as usize,
        tokens: tokens as usize,
        concurrency: concurrency as usize,
        tokenizer,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(moefleet_harness::experiments::draft::capture::run(cfg))?;
    Ok(())
}
