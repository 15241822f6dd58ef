//! Train the byte-level BPE tokenizer from corpus files.

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, num_args = 1.., required = true)]
    corpus: Vec<PathBuf>,
    #[arg(long, default_value_t = 8000)]
    vocab: usize,
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: Args) -> Result<()> {
    let Args { corpus, vocab, out } = args;
    if !(256..=65536).contains(&vocab) {
        bail!("--vocab must be in 256..=65536");
    }
    let n = tokenizer::train(&corpus, vocab, &out)?;
    eprintln!(
        "trained a byte-level BPE of {n} tokens into {}",
        out.display()
    );
    Ok(())
}
