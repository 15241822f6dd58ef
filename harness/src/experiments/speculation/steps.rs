//! Speculation's steps (MEASUREMENTS.md §6), each a command a person could type: a fresh fleet per
//! configuration serving the speculation plan (one prompt per family, one request at a time, a
//! first and then a repeated pass) with role 0's frame and reply records: speculation off, each
//! proposer set, and off again at the end (the drift over the session); then the tables (Table 3,
//! on/off, the first-order model) and the figure.
//!
//! On the preset the proposer sets are suffix, phrase, draft (a draft model on role 0) and all
//! three, and the phrase table alone runs at several depths of proposals in flight. On a GGUF
//! checkpoint with a head fitted to it by the draft unit, the plan is
//! `workloads/plans/speculation-real*.toml` and the sets are suffix, phrase, mtp (the head drafting
//! live in the last role), mtp-every (without its probability floor), draft (the checkpoint as its
//! own draft model: no smaller model with its vocabulary is installable here, so this is the
//! ceiling of acceptance at the cost of a whole model) and all (suffix, phrase, mtp); no depth
//! sweep; then llama-server on the same file with the same plan (speculation off, prompt lookup,
//! the same self-draft) into OUT/llama/.
//!
//! Only role 0's records are kept (gzipped, in NAME/records/): the other roles' are not used; each
//! configuration's `/api/profile` (every role's counters, the draft head's time) is kept as
//! NAME/profile.json.

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use flate2::write::GzEncoder;

use crate::experiments::server_process::ServerProcess;
use crate::experiments::unit::{exec, RunCtx};
use crate::os_args;

/// Rows of the shared unembedding the live head predicts over: the replay's restricted
/// vocabulary (MEASUREMENTS.md §5), as the committed SmolLM2 run used.
const MTP_ROWS: usize = 16101;

/// A checkpoint and the draft head fitted to it.
pub struct Checkpoint<'a> {
    pub model: &'a Path,
    pub head: &'a Path,
}

/// Every configuration into `out`, then the tables: serving `checkpoint` if given, else the run's
/// preset on its roles.
pub fn run(ctx: &RunCtx, out: &Path, checkpoint: Option<Checkpoint>) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let quick = if ctx.quick() { "-quick" } else { "" };
    let (serve, plan) = match &checkpoint {
        Some(c) => (
            os_args!["--model", c.model],
            format!("workloads/plans/speculation-real{quick}.toml"),
        ),
        None => (
            ctx.fleet_model(),
            format!("workloads/plans/speculation{quick}.toml"),
        ),
    };
    let config = |name: &str, extra: Vec<OsString>| -> Result<()> {
        let mut args = serve.clone();
        args.extend(extra);
        configuration(ctx, &out.join(name), &args, &plan)
    };
    let on = |proposers: &str| os_args!["--speculate", "--proposers", proposers];
    config("off", vec![])?;
    config("suffix", on("suffix"))?;
    config("phrase", on("phrase"))?;
    match &checkpoint {
        Some(c) => {
            // the head's first three modules, over the replay's restricted vocabulary (the
            // paper's share: 16101 rows, or the whole vocabulary of a smaller one)
            let vocab = moefleet_engine::spec::head::io::manifest(c.head)
                .with_context(|| format!("the draft head in {}", c.head.display()))?
                .config
                .vocab_size;
            let rows = MTP_ROWS.min(vocab).to_string();
            let mtp = os_args![
                "--mtp-head",
                c.head,
                "--mtp-drafts",
                "3",
                "--mtp-rows",
                &rows
            ];
            config("mtp", [on("mtp"), mtp.clone()].concat())?;
            // every draft the head makes, however unsure (mtp above sends those of p >= 0.5)
            let every = os_args!["--mtp-p-min", "0"];
            config("mtp-every", [on("mtp"), mtp.clone(), every].concat())?;
            let draft = os_args!["--draft-model", c.model];
            config("draft", [on("draft"), draft].concat())?;
            config("all", [on("suffix,phrase,mtp"), mtp].concat())?;
        }
        None => {
            config("draft", on("draft"))?;
            config("all", on("suffix,phrase,draft"))?;
            // how many proposals in flight: the phrase table alone at several depths. The paper
            // plan takes four: the rise (2, 8), the default (24) and the deepest of the committed
            // sweeps (64); their eight depths (docs/RESULTS.md, "Depth") rise to 16
            // and then lie within run-to-run noise of each other, so the depths between add a
            // fleet's run each (~18 s) and no shape the four do not show
            let depths: &[u32] = if ctx.quick() {
                &[2, 6]
            } else {
                &[2, 8, 24, 64]
            };
            for d in depths {
                let depth = os_args!["--spec-depth", &d.to_string()];
                config(&format!("depth/depth-{d}"), [on("phrase"), depth].concat())?;
            }
        }
    }
    // speculation off once more: how far the machine drifted over the session
    config("off-again", vec![])?;
    if let Some(c) = &checkpoint {
        llama(ctx, &out.join("llama"), c.model, &plan)?;
    }
    exec(ctx.harness().arg("speculation").arg(out))
}

/// One configuration: a fresh fleet serving `plan` into `dir`, its profile, role 0's records.
fn configuration(ctx: &RunCtx, dir: &Path, serve: &[OsString], plan: &str) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let profiles = dir.join("profiles");
    let mut args = serve.to_vec();
    args.extend(os_args!["--profile-dir", &profiles]);
    let fleet = ctx.fleet(&dir.join("fleet.log"), &args)?;
    exec(
        ctx.harness()
            .args(["sweep", "--url", fleet.url(), "--plan", plan])
            .args(os_args!["--out", dir]),
    )?;
    let profile = reqwest::blocking::get(format!("{}/api/profile", fleet.url()))
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.bytes())
        .with_context(|| format!("{}/api/profile", fleet.url()))?;
    std::fs::write(dir.join("profile.json"), profile)?;
    drop(fleet);
    let records = dir.join("records");
    std::fs::create_dir_all(&records)?;
    for file in ["role-0.jsonl", "role-0-replies.jsonl"] {
        gzip(&profiles.join(file), &records.join(format!("{file}.gz")))?;
    }
    std::fs::remove_dir_all(&profiles)?;
    Ok(())
}

/// llama-server on `model` (one slot, two threads, as its users run it for one stream) serving
/// `plan`: off, prompt lookup (ngram-simple), the file as its own draft, off again.
fn llama(ctx: &RunCtx, out: &Path, model: &Path, plan: &str) -> Result<()> {
    let dir = ctx.llama_dir()?;
    let base = os_args!["-m", model, "-t", "2", "-np", "1", "-c", "4096"];
    let arms: [(&str, Vec<OsString>); 4] = [
        ("off", vec![]),
        ("ngram", os_args!["--spec-type", "ngram-simple"]),
        (
            "draft",
            os_args!["--spec-type", "draft-simple", "--model-draft", model],
        ),
        ("off-again", vec![]),
    ];
    for (name, extra) in arms {
        let run = out.join(name);
        std::fs::create_dir_all(&run)?;
        let log = run.join("server.log");
        let server = ServerProcess::llama_server(&dir, &log, &[base.clone(), extra].concat())?;
        exec(
            ctx.harness()
                .args(["sweep", "--url", server.url(), "--plan", plan])
                .args(os_args!["--out", &run]),
        )?;
        drop(server);
        gzip(&log, &run.join("server.log.gz"))?;
        std::fs::remove_file(&log)?;
    }
    Ok(())
}

/// `from` gzipped into `to`.
fn gzip(from: &Path, to: &Path) -> Result<()> {
    let bytes = std::fs::read(from).with_context(|| format!("reading {}", from.display()))?;
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&bytes)?;
    std::fs::write(to, gz.finish()?).with_context(|| format!("writing {}", to.display()))
}
