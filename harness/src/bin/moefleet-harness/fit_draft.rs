//! `moefleet-harness fit-draft`: fit the draft head to the model from a corpus's training captures
//! (ridge regressions per module, then gradient descent on W_down).

use std::path::PathBuf;

use anyhow::bail;
use moefleet_harness::experiments::draft::run as draft_run;

use crate::common::DraftModel;

#[derive(clap::Args)]
pub struct Args {
    /// A corpus directory from `capture`.
    corpus: PathBuf,
    /// Directory for the fitted head.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    model: DraftModel,
    /// Seed of the synthetic weights the fit starts from and keeps where it does not fit.
    #[arg(long, default_value_t = 7)]
    head_seed: u64,
    /// Ridge strength, relative to the mean diagonal of XᵀX.
    #[arg(long, default_value_t = 1e-3)]
    lambda: f64,
    /// Fit a control head instead: every module's targets permuted across the training rows
    /// with this seed, so it should agree with the model no better than chance.
    #[arg(long, conflicts_with = "control_out")]
    shuffle_targets: Option<u64>,
    /// Also fit a control head into this directory (targets shuffled with --control-seed), from
    /// the same loaded corpus and model: what `--shuffle-targets` fits in a second run, without
    /// loading, checking and running the model over the corpus again.
    #[arg(long)]
    control_out: Option<PathBuf>,
    /// The control head's shuffle seed.
    #[arg(long, default_value_t = 11, requires = "control_out")]
    control_seed: u64,
    /// Modules of the control head to fit (the later ones keep the synthetic weights, unfitted;
    /// the manifest says how many were fitted). `replay` reads the control as a first draft
    /// only, module 0, whose fit reads no later module: one module fitted gives module 0's bits
    /// of a whole control in one module's time. 0: every module.
    #[arg(long, default_value_t = 1, requires = "control_out")]
    control_modules: usize,
    /// Gradient-descent steps per module on W_down after the regressions (cross-entropy of
    /// the model's own next token through the shared unembedding; 0: regressions only).
    #[arg(long, default_value_t = 400)]
    descent_steps: u64,
    /// Rows per descent step.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65536))]
    descent_batch: u64,
    /// Adam's step relative to the regression's RMS weight.
    #[arg(long, default_value_t = 0.01)]
    descent_lr: f32,
    #[arg(long)]
    tokenizer: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        corpus,
        out,
        model,
        head_seed,
        lambda,
        shuffle_targets,
        control_out,
        control_seed,
        control_modules,
        descent_steps,
        descent_batch,
        descent_lr,
        tokenizer,
    } = args;
    if !(descent_lr.is_finite() && descent_lr > 0.0) {
        bail!("--descent-lr must be a positive number");
    }
    if !(lambda.is_finite() && lambda > 0.0) {
        bail!("--lambda must be a positive number");
    }
    let named = std::fs::read_to_string(corpus.join("corpus.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["model"].as_str().map(str::to_string));
    let tokenizer = tokenizer.or(model.model.clone());
    let Some(model) = model.source(named.as_deref()) else {
        bail!("the corpus names no model: pass --preset (and --seed), --weights or --model");
    };
    draft_run::fit_draft(&draft_run::FitArgs {
        corpus,
        out,
        model,
        tokenizer,
        control: control_out.map(|out| draft_run::Control {
            out,
            seed: control_seed,
            modules: (control_modules > 0).then_some(control_modules),
        }),
        fit: moefleet_harness::experiments::draft::fit::FitConfig {
            seed: head_seed,
            lambda,
            shuffle_targets,
            descent: moefleet_harness::experiments::draft::descent::DescentConfig {
                steps: descent_steps as usize,
                batch: descent_batch as usize,
                lr_rel: descent_lr,
                seed: head_seed,
            },
            modules: None,
        },
    })?;
    Ok(())
}
