//! Phrase tables of the speculation proposer: merge (counts added) or summarise.

use super::prelude::*;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: PhrasesCmd,
}

pub fn run(args: Args) -> Result<()> {
    let Args { cmd } = args;
    let default_vocab = || -> Result<u32> { Ok(TextTokenizer::embedded()?.vocab_size() as u32) };
    match cmd {
        PhrasesCmd::Merge { tables, out, vocab } => {
            let v = match vocab {
                Some(v) => v,
                None => default_vocab()?,
            };
            let mut all = PhraseTable::new(v);
            for t in &tables {
                all.merge(&PhraseTable::load(t, v)?)?;
            }
            all.save(&out)?;
            eprintln!(
                "merged {} tables into {}: {} contexts, {} observations",
                tables.len(),
                out.display(),
                all.contexts(),
                all.observations()
            );
        }
        PhrasesCmd::Show { table, vocab } => {
            let v = match vocab {
                Some(v) => v,
                None => default_vocab()?,
            };
            let t = PhraseTable::load(&table, v)?;
            println!(
                "{}: vocabulary {}, {} contexts, {} observations",
                table.display(),
                t.vocab,
                t.contexts(),
                t.observations()
            );
        }
    }
    Ok(())
}

#[derive(clap::Subcommand)]
enum PhrasesCmd {
    /// Merge phrase tables: every (context, next token) count added.
    Merge {
        /// The tables to merge (at least one).
        #[arg(required = true)]
        tables: Vec<PathBuf>,
        #[arg(long)]
        out: PathBuf,
        /// The vocabulary they belong to [default: the project's tokenizer's].
        #[arg(long)]
        vocab: Option<u32>,
    },
    /// How many contexts and observations a table holds.
    Show {
        table: PathBuf,
        #[arg(long)]
        vocab: Option<u32>,
    },
}
