//! `moefleet-harness replay`: replay the fitted head over a corpus's evaluation captures, beside the
//! untrained head, repeat-last and a bigram (mtp.csv, chain.csv, table6.md, figure8.png/.svg).

use std::path::PathBuf;

use moefleet_harness::experiments::draft::run as draft_run;

use crate::common::DraftModel;

#[derive(clap::Args)]
pub struct Args {
    /// A corpus directory from `capture`.
    corpus: PathBuf,
    /// The head from `fit-draft`.
    #[arg(long)]
    head: PathBuf,
    #[arg(long)]
    out: PathBuf,
    /// The model, if not the one the head's manifest names.
    #[command(flatten)]
    model: DraftModel,
    /// Repository root (the paper's published data under reproduction/paper is tabled beside
    /// ours when present).
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// Draw the paper's per-family agreement over ours in Figure 8.
    #[arg(long)]
    paper_overlay: bool,
    /// A control head (`fit-draft --shuffle-targets`) to replay beside the fitted one.
    #[arg(long)]
    control_head: Option<PathBuf>,
    #[arg(long)]
    tokenizer: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        corpus,
        head,
        out,
        model,
        root,
        paper_overlay,
        control_head,
        tokenizer,
    } = args;
    draft_run::replay_draft(&draft_run::ReplayArgs {
        corpus,
        head,
        out,
        tokenizer: tokenizer.or(model.model.clone()),
        model: model.source(None),
        root,
        overlay: paper_overlay,
        control: control_head,
    })?;
    Ok(())
}
