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
    keep_freed_memory();
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

/// Ask glibc's malloc to keep freed memory for reuse rather than hand it back to the kernel.
///
/// The draft replay allocates and frees logits over the vocabulary per sequence and module on
/// every thread (about 50 MB each on SmolLM2). Past glibc's mmap threshold each such buffer is
/// mapped, unmapped on free and faulted in again as zeroed pages. With every allocation up to
/// 1 GiB served from the arenas and none trimmed, the SmolLM2 replay on host E took 129 s and 2 s
/// of system time, against 150 s and 38 s without (one run each, not a committed record); the
/// anchors written were the same bytes. The draft fit's system time (its per-module row and trace
/// buffers, hundreds of megabytes each) did not change, so `fit-draft` does not call this.
/// Nothing is computed differently; the process holds its freed memory until it exits.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets two of glibc's malloc parameters; it takes no pointers, and it is
    // called before the command starts its threads
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, std::ffi::c_int::MAX);
    }
}
