//! The real-prompt context pass (MEASUREMENTS.md §3.2): needle prompts of growing size sent one at
//! a time (`measure`), each written to `context.jsonl` as it ends; `context.csv` and
//! `context_run.json` are rewritten after every request so an interrupted pass leaves valid
//! tables. The pass stops before a request whose predicted duration exceeds the budget left, and
//! after three failures in a row; what it did not send is recorded with the reason.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use moefleet_engine::tokenizer::TextTokenizer;
use serde::Serialize;
use serde_json::{json, Value};

use super::measure::{measure, Ask, Server};
use super::plan::{predict_s, Done};
use super::prompt::{self, Corpus};
use super::record::ContextRecord;
use super::table;
use crate::driver::client::{epoch, Clock};
use crate::trace::append_jsonl;
use moefleet_engine::bench::host_facts;

/// What the operator chose for one pass.
#[derive(Clone, Debug)]
pub struct ScanConfig {
    pub url: String,
    pub out: PathBuf,
    /// `(size, repeats)` in ascending size (`plan::plan`).
    pub plan: Vec<(usize, usize)>,
    pub max_tokens: usize,
    pub ignore_eos: bool,
    pub seed: u64,
    pub budget: Duration,
    pub sample_every: Duration,
    /// Upper bound on one request (the budget left bounds it too).
    pub request_timeout: Option<Duration>,
    pub tokenizer: Option<PathBuf>,
    /// `*.txt` directory; None: the compiled-in `workloads/corpus`.
    pub corpus: Option<PathBuf>,
    /// Roles of the server if the operator states them (else read from `/api/profile`).
    pub roles: Option<usize>,
}

/// Sizes (or repeats) the pass did not send, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skipped {
    pub size: usize,
    pub repeats: usize,
    pub reason: String,
}

/// Failures in a row after which the pass stops.
const MAX_FAILURES_IN_A_ROW: usize = 3;
/// Longest wait for the server to have no request in flight before sending the next one.
const IDLE_WAIT: Duration = Duration::from_secs(120);

/// The `context_run.json` record at the start of a pass (the counters are filled as it runs).
fn run_record(cfg: &ScanConfig, server: &Server, corpus: &Corpus, clock: &Clock) -> Value {
    let (roles, roles_source) = match (cfg.roles, server.roles()) {
        (Some(r), _) => (Some(r), "--roles"),
        (None, Some(r)) => (Some(r), "/api/profile"),
        (None, None) => (None, "unknown"),
    };
    json!({
        "record": "context_run",
        "url": server.base,
        "model": server.model,
        "engine_version": server.first_stat("engine_version"),
        "engine_commit": server.first_stat("engine_commit"),
        "roles": roles,
        "roles_source": roles_source,
        "plan": cfg.plan.iter().map(|(s, r)| json!({"size": s, "repeats": r})).collect::<Vec<_>>(),
        "sizes": cfg.plan.iter().map(|p| p.0).collect::<Vec<_>>(),
        "max_tokens": cfg.max_tokens,
        "ignore_eos": cfg.ignore_eos,
        "seed": cfg.seed,
        "budget_s": cfg.budget.as_secs_f64(),
        "sample_s": cfg.sample_every.as_secs_f64(),
        "request_timeout_s": cfg.request_timeout.map(|d| d.as_secs_f64()),
        "endpoint": "/v1/completions (raw prompt, temperature 0, streamed)",
        "tokenizer": moefleet_engine::tokenizer::describe(cfg.tokenizer.as_deref()),
        "corpus": corpus.sources,
        "host": host_facts(),
        "server_is_local": is_local(&server.base),
        "stats_available": server.first_stats.is_some(),
        "profile_available": server.first_profile.is_some(),
        "measured_here": "cores_busy and min_free_gib come from /proc/stat and /proc/meminfo of the machine running the harness (the whole machine, other processes included); they describe the server only when it runs on this machine",
        "not_measured": {
            "gpu_busy_pct": "left empty: no accelerator is used or read on this machine",
            "package_w": "left empty: the harness reads no package power counter",
        },
        "clock_origin_epoch": clock.origin_epoch(),
        "start": epoch(),
        "end": Value::Null,
        "complete": false,
    })
}

/// Run one pass; returns the rows written to `context.csv`.
pub async fn scan(cfg: ScanConfig) -> anyhow::Result<Vec<table::ContextRow>> {
    let out = &cfg.out;
    check_fresh(&cfg)?;
    let tk = TextTokenizer::open(cfg.tokenizer.as_deref())
        .context("loading the tokenizer (use --tokenizer to point at tokenizer.json)")?;
    let corpus = match &cfg.corpus {
        Some(d) => Corpus::from_dir(d)?,
        None => Corpus::builtin()?,
    };
    let server = Server::connect(&cfg.url).await?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let clock = Clock::new();
    let t0 = Instant::now();
    let left = || cfg.budget.as_secs_f64() - t0.elapsed().as_secs_f64();
    let mut meta = run_record(&cfg, &server, &corpus, &clock);
    crate::json::write(&out.join("context_run.json"), &meta)?;

    let total: usize = cfg.plan.iter().map(|p| p.1).sum();
    let bar = progress_bar(total)?;

    let mut pass = Pass::default();
    let jsonl = out.join("context.jsonl");
    'sizes: for (si, &(size, repeats)) in cfg.plan.iter().enumerate() {
        for repeat in 0..repeats {
            if pass.failures >= MAX_FAILURES_IN_A_ROW {
                let reason = format!("{} requests in a row failed", pass.failures);
                pass.stop_at(&cfg.plan, si, repeats - repeat, reason);
                break 'sizes;
            }
            let step = format!("size {size} repeat {}/{repeats}", repeat + 1);
            bar.set_message(format!("{step}: building the prompt"));
            let p = match prompt::build(&corpus, &tk, cfg.seed, size, repeat) {
                Ok(p) => p,
                Err(e) => {
                    pass.skipped.push(Skipped {
                        size,
                        repeats: repeats - repeat,
                        reason: format!("cannot build the prompt: {e:#}"),
                    });
                    bar.inc((repeats - repeat) as u64);
                    continue 'sizes;
                }
            };
            // a server still busy with an earlier request would slow this one: wait (bounded)
            let idle_at_start = server
                .wait_idle(
                    IDLE_WAIT.min(Duration::from_secs_f64(left().max(0.0))),
                    Duration::from_secs(1),
                )
                .await;
            let left_s = left();
            let predicted = predict_s(&pass.done, p.tokens as f64, cfg.max_tokens);
            if let Some(reason) = out_of_budget(left_s, predicted) {
                pass.stop_at(&cfg.plan, si, repeats - repeat, reason);
                break 'sizes;
            }
            if idle_at_start == Some(false) {
                bar.println(format!(
                    "{step}: the server still has requests in flight; sending anyway"
                ));
            }
            bar.set_message(format!(
                "{step}: {} tokens, predicted {}, {left_s:.0} s left",
                p.tokens,
                predicted.map_or("?".to_string(), |s| format!("{s:.0} s"))
            ));
            let timeout = cfg
                .request_timeout
                .map_or(left_s, |t| t.as_secs_f64().min(left_s))
                .max(1.0);
            let ask = Ask {
                prompt: &p,
                size,
                repeat,
                seed: cfg.seed,
                max_tokens: cfg.max_tokens,
                ignore_eos: cfg.ignore_eos,
                timeout: Duration::from_secs_f64(timeout),
                sample_every: cfg.sample_every,
                predicted_s: predicted,
                budget_left_s: left_s,
                idle_at_start,
            };
            let rec = measure(&server, clock, &ask).await;
            append_jsonl(&jsonl, &rec)?;
            pass.count(rec, p.tokens, &bar, &step);
            bar.inc(1);
            write_tables(out, &pass.records, &mut meta, &pass.skipped, None, t0)?;
        }
    }
    bar.finish_with_message(match &pass.stop {
        Some(r) => format!("stopped: {r}"),
        None => "done".to_string(),
    });
    write_tables(
        out,
        &pass.records,
        &mut meta,
        &pass.skipped,
        Some(pass.stop),
        t0,
    )
}

/// Refuse an `out` that already holds a pass, and an empty size plan.
fn check_fresh(cfg: &ScanConfig) -> anyhow::Result<()> {
    let out = &cfg.out;
    for f in ["context_run.json", "context.jsonl"] {
        if out.join(f).exists() {
            bail!(
                "{} already holds a context pass ({f}); choose a new --out",
                out.display()
            );
        }
    }
    if cfg.plan.is_empty() {
        bail!("nothing to send: the size plan is empty");
    }
    Ok(())
}

/// The pass's progress bar over `total` requests, ticking every second.
fn progress_bar(total: usize) -> anyhow::Result<ProgressBar> {
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {elapsed_precise} {msg}")?
            .progress_chars("=> "),
    );
    bar.set_prefix("context");
    bar.enable_steady_tick(Duration::from_secs(1));
    Ok(bar)
}

/// Why the next request is not sent with `left_s` seconds of budget left, if it is not.
fn out_of_budget(left_s: f64, predicted: Option<f64>) -> Option<String> {
    if left_s <= 0.0 || predicted.is_some_and(|s| s > left_s) {
        let reason = match predicted {
            Some(s) => format!(
                "predicted {s:.0} s exceeds the {:.0} s of budget left",
                left_s.max(0.0)
            ),
            None => "the budget is spent".to_string(),
        };
        return Some(reason);
    }
    None
}

/// What a pass has gathered so far.
#[derive(Default)]
struct Pass {
    records: Vec<ContextRecord>,
    done: Vec<Done>,
    skipped: Vec<Skipped>,
    failures: usize,
    stop: Option<String>,
}

impl Pass {
    /// Stop for `reason`: skip `repeats_left` repeats of `plan[si]` and every later size.
    fn stop_at(&mut self, plan: &[(usize, usize)], si: usize, repeats_left: usize, reason: String) {
        self.skipped.push(Skipped {
            size: plan[si].0,
            repeats: repeats_left,
            reason: reason.clone(),
        });
        for &(s, r) in &plan[si + 1..] {
            self.skipped.push(Skipped {
                size: s,
                repeats: r,
                reason: format!("not reached: {reason}"),
            });
        }
        self.stop = Some(reason);
    }

    /// Keep a finished request: a success feeds the predictor, a failure is counted and printed.
    fn count(&mut self, rec: ContextRecord, prompt_tokens: usize, bar: &ProgressBar, step: &str) {
        match (&rec.error, rec.ttft_s) {
            (None, Some(ttft_s)) => {
                self.failures = 0;
                self.done.push(Done {
                    n: rec.prompt_tokens.unwrap_or(prompt_tokens as u64) as f64,
                    ttft_s,
                    decode_s_per_token: rec.decode_tok_s.map(|r| 1.0 / r),
                });
            }
            (e, _) => {
                self.failures += 1;
                bar.println(format!(
                    "{step}: {}",
                    e.as_deref().unwrap_or("no token arrived")
                ));
            }
        }
        self.records.push(rec);
    }
}

/// Rewrite `context.csv` and `context_run.json` (`end`: the pass is over, with its stop reason).
fn write_tables(
    out: &Path,
    records: &[ContextRecord],
    meta: &mut Value,
    skipped: &[Skipped],
    end: Option<Option<String>>,
    t0: Instant,
) -> anyhow::Result<Vec<table::ContextRow>> {
    let rows = table::rows(records);
    let path = out.join("context.csv");
    crate::csv::write(&path, &table::render(&rows))?;
    meta["requests"] = records.len().into();
    meta["errors"] = records.iter().filter(|r| r.error.is_some()).count().into();
    meta["code_found"] = records.iter().filter(|r| r.code_found).count().into();
    meta["skipped"] = serde_json::to_value(skipped)?;
    meta["elapsed_s"] = t0.elapsed().as_secs_f64().into();
    if let Some(stop) = end {
        meta["end"] = epoch().into();
        meta["complete"] = true.into();
        meta["stop_reason"] = stop.map_or(Value::Null, Value::from);
    }
    crate::json::write(&out.join("context_run.json"), meta)?;
    Ok(rows)
}

/// Is the server on this machine (so the load samples describe it)?
pub fn is_local(base: &str) -> bool {
    let rest = base.split("://").nth(1).unwrap_or(base);
    let host = match rest.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => rest.split(['/', ':']).next().unwrap_or_default(),
    };
    matches!(host, "localhost" | "::1") || host.starts_with("127.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_hosts() {
        assert!(is_local("http://127.0.0.1:8080"));
        assert!(is_local("http://localhost:1/x"));
        assert!(!is_local("http://10.0.0.2:8080"));
        assert!(!is_local("https://example.org"));
        assert!(is_local("http://[::1]:8080"));
    }
}
