//! `moefleet-harness capture`: build a capture corpus through the API of a moefleet server started
//! with `--capture-dir` (MEASUREMENTS.md §5). Each picked prompt is sent as one streamed chat
//! completion asking for its capture (`moefleet_capture`), greedy, ignoring end-of-text, with the
//! output cap of generated positions; the file the final chunk names is read (the server must
//! share this machine's file system, as a local fleet does), checked, and copied into the corpus.

use std::path::PathBuf;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use tokio::task::JoinSet;

use moefleet_engine::capture::Capture;
use moefleet_engine::tokenizer::TextTokenizer;

use super::corpus::{
    check, passages, pick_passages, pick_prompts, sha256_hex, Pick, SequenceRecord, Set,
};

/// One passage in this many is held out for evaluation.
pub const PASSAGE_EVAL_EVERY: usize = 8;
use crate::driver::client::{self, Clock, RequestSpec};
use crate::trace::{append_jsonl, TraceRecord};
use crate::workload::Families;

pub struct CaptureConfig {
    pub url: String,
    pub out: PathBuf,
    pub prefix: String,
    pub eval_per_family: usize,
    pub train_per_family: usize,
    /// Generated positions per sequence.
    pub tokens: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Passage prompts per passage task (`corpus::pick_passages`); 0: none.
    pub passages_per_task: usize,
    pub tokenizer: Option<PathBuf>,
}

/// What one request came to: a checked capture, or why not.
type Outcome = Result<(SequenceRecord, Vec<u8>), String>;

pub async fn run(cfg: CaptureConfig) -> anyhow::Result<()> {
    let out = &cfg.out;
    if out.join("corpus.json").exists() {
        bail!(
            "{} already holds a corpus; choose a new --out",
            out.display()
        );
    }
    for set in [Set::Eval, Set::Train] {
        std::fs::create_dir_all(out.join(set.dir()))
            .with_context(|| format!("creating {}", out.display()))?;
    }
    let tk = std::sync::Arc::new(TextTokenizer::open(cfg.tokenizer.as_deref())?);
    let server = crate::driver::server::Server::connect(&cfg.url).await?;
    let (http, base, model) = (
        server.http.clone(),
        server.base.clone(),
        server.model.clone(),
    );
    let families = Families::builtin()?;
    let (picks, shortfalls) = pick_prompts(
        &families,
        &cfg.prefix,
        cfg.eval_per_family,
        cfg.train_per_family,
    );
    let mut picks = picks;
    if cfg.passages_per_task > 0 {
        let text = crate::experiments::context::prompt::Corpus::builtin()?;
        picks.extend(pick_passages(
            &passages(&text.paragraphs),
            &cfg.prefix,
            cfg.passages_per_task,
            PASSAGE_EVAL_EVERY,
            families.names.len(),
        ));
    }
    for s in &shortfalls {
        eprintln!(
            "capture: family {} has only {} distinct prompts ({} asked)",
            s.family, s.distinct, s.asked
        );
    }
    let started = client::epoch();
    let clock = Clock::new();
    let bar = ProgressBar::new(picks.len() as u64).with_style(
        ProgressStyle::with_template(
            "capture {bar:40} {pos}/{len} sequences, {elapsed} ({eta} left)",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut pending = picks.into_iter().enumerate();
    let mut running = JoinSet::new();
    let mut rejected: Vec<String> = Vec::new();
    let (mut n_eval, mut n_train) = (0usize, 0usize);
    loop {
        while running.len() < cfg.concurrency.max(1) {
            let Some((j, pick)) = pending.next() else {
                break;
            };
            let (http, base, model, tk) = (http.clone(), base.clone(), model.clone(), tk.clone());
            let tokens = cfg.tokens;
            running.spawn(async move {
                let o = one(&http, &clock, &base, &model, &pick, j, tokens, &tk).await;
                (pick, o)
            });
        }
        let Some(done) = running.join_next().await else {
            break;
        };
        let (pick, outcome) = done?;
        bar.inc(1);
        match outcome {
            Ok((rec, bytes)) => {
                let path = out.join(&rec.file);
                std::fs::write(&path, &bytes)
                    .with_context(|| format!("writing {}", path.display()))?;
                append_jsonl(&out.join("sequences.jsonl"), &rec)?;
                match rec.set {
                    Set::Eval => n_eval += 1,
                    Set::Train => n_train += 1,
                }
            }
            Err(why) => {
                bar.println(format!("capture: rejected {}: {why}", pick.key));
                rejected.push(format!("{}: {why}", pick.key));
            }
        }
    }
    bar.finish();
    let ended = client::epoch();
    let manifest = json!({
        "record": "capture_corpus",
        "url": base,
        "model": model,
        "prefix": cfg.prefix,
        "generated_tokens": cfg.tokens,
        "eval_per_family": cfg.eval_per_family,
        "train_per_family": cfg.train_per_family,
        "passages_per_task": cfg.passages_per_task,
        "passage_eval_every": PASSAGE_EVAL_EVERY,
        "sequences": {"eval": n_eval, "train": n_train},
        "shortfalls": shortfalls,
        "rejected": rejected,
        "started": started,
        "ended": ended,
        "duration_s": ended - started,
        "concurrency": cfg.concurrency,
        // which engine captured (moefleet's /api/stats; null from other servers)
        "engine_version": server.first_stat("engine_version"),
        "engine_commit": server.first_stat("engine_commit"),
        "harness_commit": crate::BUILD_COMMIT,
        "host": crate::host::facts(),
    });
    crate::json::write(&out.join("corpus.json"), &manifest)?;
    eprintln!(
        "capture: {n_eval} evaluation and {n_train} training sequences in {:.0} s into {}",
        ended - started,
        out.display()
    );
    if !rejected.is_empty() {
        // the first few say why; the manifest lists them all
        const SHOWN: usize = 3;
        let more = match rejected.len().saturating_sub(SHOWN) {
            0 => String::new(),
            n => format!("; and {n} more"),
        };
        bail!(
            "{} captures were rejected (listed in {}/corpus.json): {}{more}",
            rejected.len(),
            out.display(),
            rejected[..rejected.len().min(SHOWN)].join("; ")
        );
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn one(
    http: &reqwest::Client,
    clock: &Clock,
    base: &str,
    model: &str,
    pick: &Pick,
    j: usize,
    tokens: usize,
    tk: &TextTokenizer,
) -> Outcome {
    let spec = RequestSpec {
        url: base.to_string(),
        model: model.to_string(),
        prompt: pick.text.clone(),
        max_tokens: tokens,
        ignore_eos: true,
        j,
        capture: true,
        history: Vec::new(),
    };
    let mut rec = TraceRecord::default();
    if let client::Outcome::Fatal(e) = client::run(http, clock, &spec, &mut rec).await {
        return Err(e);
    }
    if let Some(e) = rec.error {
        return Err(e);
    }
    let source = rec
        .server_extra
        .as_ref()
        .and_then(|x| x["capture"]["path"].as_str())
        .ok_or("the stream named no capture file (is the server started with --capture-dir?)")?
        .to_string();
    let sequence = rec
        .server_extra
        .as_ref()
        .and_then(|x| x["capture"]["sequence"].as_u64())
        .unwrap_or(0);
    let bytes = std::fs::read(&source).map_err(|e| {
        format!("cannot read {source} (the capture is on the last role's host): {e}")
    })?;
    let cap = Capture::decode(&bytes).map_err(|why| format!("capture {source}: {why}"))?;
    let file = format!(
        "{}/{}-{:04}.bin",
        pick.set.dir(),
        pick.family,
        pick.prompt_index
    );
    let seq = SequenceRecord {
        set: pick.set,
        family: pick.family.clone(),
        family_index: pick.family_index,
        prompt_index: pick.prompt_index,
        key: pick.key.clone(),
        prompt: pick.text.clone(),
        text: rec.text.clone(),
        prompt_tokens: rec.prompt_tokens.unwrap_or(0) as usize,
        generated: rec.completion_tokens().unwrap_or(0) as usize,
        file,
        source: source.clone(),
        sequence,
        bytes: bytes.len() as u64,
        sha256: sha256_hex(&bytes),
    };
    check(&cap, &seq, tk).map_err(|why| format!("capture {source}: {why}"))?;
    if seq.generated != tokens {
        return Err(format!(
            "capture {source}: {} generated positions, {tokens} asked",
            seq.generated
        ));
    }
    Ok((seq, bytes))
}
