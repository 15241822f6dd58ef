//! Greedy continuations of a prompt set (JSON lines with "id" and "prompt_ids"), with each
//! position's two best tokens and log-probabilities, as JSON lines: the engine's side of the
//! token-for-token comparison with llama.cpp (`scripts/gguf_parity.sh`).

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: WholeModel,
    #[arg(long)]
    prompts: PathBuf,
    /// Tokens to generate per prompt (fewer when the model's end-of-sequence token comes).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_tokens: u64,
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> Result<()> {
    let Args {
        model: source,
        prompts,
        max_tokens,
        out,
    } = args;
    let w = source.load("continuations")?;
    let model = Model::new(w, ForwardOptions::default());
    // a checkpoint stops at its end-of-sequence token, as llama-server does
    let stop = match &source.model {
        Some(m) => Gguf::open(m)?.opt_u32("tokenizer.ggml.eos_token_id")?,
        None => None,
    };
    let bar = indicatif::ProgressBar::new(0);
    let n = moefleet_engine::pipeline::on_compute_pool("continue", || {
        moefleet_engine::continuations::run(
            &model,
            &prompts,
            max_tokens as usize,
            stop,
            &out,
            |done, total| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            },
        )
    })??;
    bar.finish_and_clear();
    eprintln!("{n} continuations written to {}", out.display());
    Ok(())
}
