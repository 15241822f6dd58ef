//! An open-loop run: requests sent when the schedule has them due (`arrivals`), whatever the
//! server's progress, at most `max_concurrency` in flight when capped (a request due while the
//! cap is reached waits, and its send lag says so), the first `warmup` left out of the summary.
//! Every request's trace record is appended as it ends (RUN/traces.jsonl.gz), with its due time.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use moefleet_schema::TraceRecord;

use crate::driver::client::{self, Clock, Outcome, RequestSpec};
use crate::driver::server::Server;
use crate::trace::append_gz;
use crate::workload::PromptSpec;

/// What to send, and how.
pub struct Drive<'a> {
    pub server: &'a Server,
    /// One prompt per request, in order.
    pub prompts: Vec<PromptSpec>,
    /// Each request's due time, seconds from the start (as many as prompts).
    pub due: Vec<f64>,
    pub max_tokens: usize,
    pub ignore_eos: bool,
    /// At most this many requests in flight (None: no cap).
    pub max_concurrency: Option<usize>,
    /// Requests at the start marked `warmup` (phase) and left out of the summary.
    pub warmup: usize,
}

/// Send every request on schedule; the records in request order. Stops at the first fatal
/// outcome (a server that refuses or is gone), after the requests already sent end.
pub async fn run(d: Drive<'_>, traces: &Path) -> anyhow::Result<Vec<TraceRecord>> {
    anyhow::ensure!(d.prompts.len() == d.due.len(), "one due time per prompt");
    let clock = Clock::new();
    let (_, origin) = clock.now();
    let cap = Arc::new(tokio::sync::Semaphore::new(
        d.max_concurrency
            .unwrap_or(tokio::sync::Semaphore::MAX_PERMITS),
    ));
    let bar = indicatif::ProgressBar::new(d.prompts.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} requests {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    // the first fatal outcome (set once, by whichever request meets it first)
    let fatal = Arc::new(std::sync::OnceLock::<String>::new());
    let mut tasks = Vec::new();
    for (j, (p, &due)) in d.prompts.iter().zip(&d.due).enumerate() {
        if fatal.get().is_some() {
            break;
        }
        let (_, now) = clock.now();
        let wait = origin + due - now;
        if wait > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        }
        let permit = cap
            .clone()
            .acquire_owned()
            .await
            .context("the concurrency cap")?;
        let spec = RequestSpec {
            url: d.server.base.clone(),
            model: d.server.model.clone(),
            prompt: p.text.clone(),
            max_tokens: d.max_tokens,
            ignore_eos: d.ignore_eos,
            j,
            capture: false,
        };
        let mut rec = TraceRecord {
            phase: if j < d.warmup { "warmup" } else { "measure" }.into(),
            family: p.family.clone(),
            family_index: p.family_index,
            prompt_index: p.prompt_index,
            scheduled_mono: Some(origin + due),
            ..Default::default()
        };
        let (http, path) = (d.server.http.clone(), traces.to_path_buf());
        let (bar, fatal) = (bar.clone(), fatal.clone());
        tasks.push(tokio::spawn(async move {
            let outcome = client::run(&http, &clock, &spec, &mut rec).await;
            drop(permit);
            if let Outcome::Fatal(m) = outcome {
                let _ = fatal.set(format!("request {j}: {m}"));
            }
            let write = tokio::task::spawn_blocking({
                let rec = rec.clone();
                move || append_gz(&path, &rec)
            })
            .await;
            bar.inc(1);
            (rec, write)
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        let (rec, write) = t.await?;
        write??;
        out.push(rec);
    }
    bar.finish_and_clear();
    if let Some(m) = fatal.get() {
        anyhow::bail!("the run stopped: {m} ({} requests sent)", out.len());
    }
    Ok(out)
}
