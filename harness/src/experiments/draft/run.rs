//! The `fit-draft` and `replay` commands: loading what they need (corpus, model, head), running
//! `fit` or `replay`, and writing their records.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::json;

use moefleet_engine::model::{load, synth, ModelConfig};
use moefleet_engine::spec::head::{io, MtpForm, MtpWeights, Shared};
use moefleet_engine::tokenizer::TextTokenizer;

use super::corpus::{Corpus, Set};
use super::fit::{fit, model_next, FitConfig};
use super::replay::{self, Captured};
use super::tables::{self, PaperDraft};
use crate::figures::figure8;

/// The model whose embedding, final norm and unembedding the head shares.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelSource {
    Preset {
        name: String,
        seed: u64,
    },
    Export {
        dir: PathBuf,
    },
    /// A GGUF checkpoint (the head gets `CHECKPOINT_MODULES` modules of the file's block kind).
    Gguf {
        file: PathBuf,
    },
}

impl ModelSource {
    pub fn shared(&self) -> anyhow::Result<Shared> {
        Ok(match self {
            ModelSource::Preset { name, seed } => {
                let c = ModelConfig::preset(name)?;
                Shared::new(
                    &c,
                    synth::embed_weights(&c, *seed),
                    &synth::head_weights(&c, *seed),
                )?
            }
            ModelSource::Export { dir } => {
                let c = load::manifest(dir)?.config;
                let (e, h) = load::load_ends(dir)?;
                Shared::new(&c, e, &h)?
            }
            ModelSource::Gguf { file } => Shared::from_gguf(file)
                .with_context(|| format!("loading the ends of {}", file.display()))?,
        })
    }
}

/// Share of positions at which the model's own arg-max must reproduce the captured tokens. An
/// Inkling fleet samples through the INT8 kernel with i16 activations, the check through f32: only
/// near-ties may differ. A checkpoint's check computes the last role's own arithmetic
/// (`Shared::model_logits`), so every position must agree.
pub const MODEL_CHECK_MIN: f64 = 0.99;

fn check_min(shared: &Shared) -> f64 {
    if shared.config.family.is_checkpoint() {
        1.0
    } else {
        MODEL_CHECK_MIN
    }
}

fn check_model(
    shared: &Shared,
    seqs: &[Captured<'_>],
    what: &str,
) -> anyhow::Result<replay::ModelCheck> {
    let mc = replay::check_model(shared, seqs);
    let share = mc.agree as f64 / mc.positions.max(1) as f64;
    let min = check_min(shared);
    if share < min {
        bail!(
            "the {what} captures do not come from this model: its arg-max reproduces {} of {} \
             emitted tokens ({:.1} %; at least {:.0} % expected). Pass the served model with \
             --preset/--seed, --weights or --model.",
            mc.agree,
            mc.positions,
            100.0 * share,
            100.0 * min
        );
    }
    Ok(mc)
}

pub struct FitArgs {
    pub corpus: PathBuf,
    pub out: PathBuf,
    pub model: ModelSource,
    pub tokenizer: Option<PathBuf>,
    pub fit: FitConfig,
    /// Also fit a control head (`Control`) from the same loaded corpus, model check and next
    /// tokens.
    pub control: Option<Control>,
}

/// A control head fitted beside the head: its targets shuffled with `seed`
/// (`FitConfig::shuffle_targets`), its first `modules` modules fitted (`FitConfig::modules`).
pub struct Control {
    pub out: PathBuf,
    pub seed: u64,
    pub modules: Option<usize>,
}

pub fn fit_draft(a: &FitArgs) -> anyhow::Result<()> {
    let tk = TextTokenizer::open(a.tokenizer.as_deref())?;
    let corpus = Corpus::load(&a.corpus, &tk)?;
    let train: Vec<_> = corpus.set(Set::Train).collect();
    if train.is_empty() {
        bail!(
            "{}: the corpus has no training sequences",
            a.corpus.display()
        );
    }
    let shared = a.model.shared()?;
    let seqs: Vec<Captured<'_>> = train
        .iter()
        .map(|(r, c)| Captured {
            family: &r.family,
            capture: c,
        })
        .collect();
    let mc = check_model(&shared, &seqs, "training")?;
    eprintln!(
        "fit-draft: {} training sequences ({} positions); fitting {} modules",
        train.len(),
        train.iter().map(|(_, c)| c.positions()).sum::<usize>(),
        shared.config.n_mtp
    );
    let caps: Vec<_> = train.iter().map(|(_, c)| c).collect();
    let t0 = std::time::Instant::now();
    let next = model_next(&shared, &caps, a.fit.descent.steps > 0);
    if a.fit.descent.steps > 0 {
        eprintln!(
            "fit-draft: the model's next tokens at every prompt position in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
    let mut heads = vec![(a.out.clone(), a.fit.clone())];
    if let Some(c) = &a.control {
        let cfg = FitConfig {
            shuffle_targets: Some(c.seed),
            modules: c.modules,
            ..a.fit.clone()
        };
        heads.push((c.out.clone(), cfg));
    }
    for (out, cfg) in &heads {
        if cfg.shuffle_targets.is_some() {
            eprintln!(
                "fit-draft: the control head (targets shuffled), into {}",
                out.display()
            );
        }
        let (head, report) = fit(&shared, &caps, &next, cfg)?;
        print_report(&report);
        let provenance = json!({
            "made_by": "moefleet-harness fit-draft",
            "control": cfg.shuffle_targets.map(|_| "targets shuffled across positions: a head that should learn nothing"),
            "method": if cfg.descent.steps > 0 {
                "three closed-form ridge regressions per module onto RMSNorm_final(residual(t+k+1)): input projection, attention output, MLP down; then gradient descent on MLP down against the model's own next token (harness/src/experiments/draft/fit.rs, descent.rs)"
            } else {
                "three closed-form ridge regressions per module onto RMSNorm_final(residual(t+k+1)): input projection, attention output, MLP down (harness/src/experiments/draft/fit.rs)"
            },
            "fit": cfg,
            "fitted_modules": report.modules.len(),
            "unfitted": (report.modules.len() < head.modules.len()).then_some(
                "the modules after the fitted ones keep the synthetic weights of the seed: this head is read as a first draft only"
            ),
            "model": a.model,
            "corpus": a.corpus,
            "training_captures": train.iter().map(|(r, _)| json!({"file": r.file, "sha256": r.sha256})).collect::<Vec<_>>(),
            "model_check": mc,
        });
        io::export(&head, out, provenance)?;
        let rec = json!({
            "record": "draft_fit",
            "report": report,
            "train_sequences": train.len(),
            "host": crate::host::facts(),
        });
        crate::json::write(&out.join("fit.json"), &rec)?;
        eprintln!(
            "fit-draft: head written to {} in {:.1} s",
            out.display(),
            report.seconds
        );
    }
    Ok(())
}

fn print_report(report: &super::fit::FitReport) {
    for m in &report.modules {
        eprintln!(
            "  module {}: {} rows, R² {:.3} (input) {:.3} (+attention) {:.3} (+MLP), {:.1} s",
            m.module, m.rows, m.r2_input, m.r2_attention, m.r2_mlp, m.seconds
        );
        if let Some(d) = &m.descent {
            eprintln!(
                "    descent: held-out agreement {:.1} % -> {:.1} % (kept step {} of {}, {} candidates), \
                 cross-entropy {:.3} -> {:.3}, {:.1} s",
                100.0 * d.held_out_before,
                100.0 * d.held_out_after,
                d.kept_step,
                d.steps,
                d.candidates,
                d.train_ce_first,
                d.train_ce_last,
                d.seconds
            );
        }
    }
}

pub struct ReplayArgs {
    pub corpus: PathBuf,
    pub head: PathBuf,
    pub out: PathBuf,
    /// Overrides the model named in the head's manifest.
    pub model: Option<ModelSource>,
    pub tokenizer: Option<PathBuf>,
    /// Repository root: the paper's published data under reproduction/paper is drawn beside ours.
    pub root: PathBuf,
    /// Draw the paper's per-family values over ours in Figure 8.
    pub overlay: bool,
    /// A head fitted to shuffled targets (`fit-draft --shuffle-targets`), replayed as a control.
    pub control: Option<PathBuf>,
}

pub fn replay_draft(a: &ReplayArgs) -> anyhow::Result<()> {
    let tk = TextTokenizer::open(a.tokenizer.as_deref())?;
    let corpus = Corpus::load(&a.corpus, &tk)?;
    let (fitted, man) =
        io::load(&a.head).with_context(|| format!("loading the head {}", a.head.display()))?;
    if fitted.form != MtpForm::Original {
        bail!(
            "{}: replay takes the head as fitted (form original); it makes the grids itself",
            a.head.display()
        );
    }
    let n = man.fitted_modules();
    if n < fitted.modules.len() {
        bail!(
            "{}: only its first {n} of {} modules were fitted (a control's fit); replay takes a \
             head with every module fitted",
            a.head.display(),
            fitted.modules.len()
        );
    }
    let source = match &a.model {
        Some(m) => m.clone(),
        None => serde_json::from_value(man.provenance["model"].clone())
            .context("the head's manifest names no model; pass --preset/--seed or --weights")?,
    };
    let shared = source.shared()?;
    if shared.config != fitted.config {
        bail!(
            "the head was made for {}, the model is {}",
            fitted.config.name,
            shared.config.name
        );
    }
    let eval: Vec<Captured<'_>> = corpus
        .set(Set::Eval)
        .map(|(r, c)| Captured {
            family: &r.family,
            capture: c,
        })
        .collect();
    let train: Vec<_> = corpus.set(Set::Train).map(|(_, c)| c).collect();
    let model_check = check_model(&shared, &eval, "evaluation")?;
    let untrained = MtpWeights::synthetic(&fitted.config, fitted.seed)?;
    let control = match &a.control {
        Some(d) => {
            let (w, m) =
                io::load(d).with_context(|| format!("loading the control head {}", d.display()))?;
            if m.provenance["fit"]["shuffle_targets"].is_null() {
                bail!(
                    "{}: not a control head (fitted without --shuffle-targets)",
                    d.display()
                );
            }
            Some(w)
        }
        None => None,
    };
    eprintln!(
        "replay: {} evaluation sequences, {} training sequences for the bigram",
        eval.len(),
        train.len()
    );
    let out = replay::run(
        &fitted,
        &untrained,
        control.as_ref(),
        &shared,
        &eval,
        model_check,
        &train,
        7,
    )?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    out.anchors.write_gz(&a.out.join("anchors.csv.gz"))?;
    let v = shared.vocab_size();
    let model = shared.config.name.clone();
    for t in &out.timings {
        eprintln!(
            "  {:<20} {:>6} anchors in {:6.2} s: {:8.0} anchors/s",
            t.calculation, t.anchors, t.seconds, t.anchors_per_s
        );
    }
    let rec = json!({
        "record": "draft_replay",
        "model": source,
        "head": a.head,
        "control_head": a.control,
        "head_provenance": man.provenance,
        "corpus": a.corpus,
        "eval_sequences": eval.len(),
        "train_sequences": train.len(),
        "anchors": out.anchors.len(),
        "vocab": v,
        "model_name": model,
        "restrictions": {"r32k": out.restrictions[0], "r64k": out.restrictions[1], "r128k": out.restrictions[2]},
        "model_check": out.model_check,
        "timings": out.timings,
        "host": crate::host::facts(),
    });
    crate::json::write(&a.out.join("replay.json"), &rec)?;
    tables::write(&a.out, &a.root)?;
    let paper = PaperDraft::load(&a.root.join("reproduction/paper"));
    let first = out.anchors.module.iter().filter(|&&m| m == 0).count();
    draw_figure8(&a.out, &paper, a.overlay, &model, first)?;
    print!("{}", std::fs::read_to_string(a.out.join("table6.md"))?);
    eprintln!(
        "replay: wrote anchors.csv.gz, mtp.csv, chain.csv, table6.md, chain.md, figure8.png/.svg and replay.json to {}",
        a.out.display()
    );
    Ok(())
}

/// Figure 8 from `dir/mtp.csv`, the paper's families over ours when asked.
pub fn draw_figure8(
    dir: &Path,
    paper: &PaperDraft,
    overlay: bool,
    model: &str,
    anchors: usize,
) -> anyhow::Result<()> {
    let ours = figure8::read_ours(&dir.join("mtp.csv"))?;
    let title = format!(
        "Figure 8: first-draft agreement per family ({model}, fitted head, {anchors} anchors)"
    );
    let p = (overlay && !paper.families.is_empty()).then_some(&paper.families);
    // the run, from its record
    let run_line = crate::figures::run_label::RunLabel::read(&dir.join("replay.json"))?.line();
    figure8::draw(dir, &ours, p, &title, &run_line)
}
