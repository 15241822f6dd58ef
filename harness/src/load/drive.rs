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
    /// Output tokens asked, per request.
    pub max_tokens: Vec<usize>,
    pub ignore_eos: bool,
    /// At most this many requests in flight (None: no cap).
    pub max_concurrency: Option<usize>,
    /// Requests at the start marked `warmup` (phase) and left out of the summary.
    pub warmup: usize,
    /// Over-saturation: a request still open this long after it was sent is cancelled (its
    /// record says so) and no further request is sent (None: no limit).
    pub saturation_s: Option<f64>,
}

/// What a run sent and saw: every request's record in request order, and why it ended early when
/// it did (over-saturation).
pub struct Driven {
    pub records: Vec<TraceRecord>,
    pub saturated: Option<String>,
}

/// How the error of a request cancelled as over-saturated begins.
const CANCELLED: &str = "cancelled: still open";

/// Whether `r` was cancelled as over-saturated (its step stopped sending then).
pub fn cancelled_as_saturated(r: &TraceRecord) -> bool {
    r.error.as_deref().is_some_and(|e| e.starts_with(CANCELLED))
}

/// Send every request on schedule; the records in request order. Stops at the first fatal
/// outcome (a server that refuses or is gone), after the requests already sent end; stops sending
/// once a request outlives `saturation_s` (the run is then past what the server can serve: its
/// latency grows without bound), each request still open ending at that limit.
pub async fn run(d: Drive<'_>, traces: &Path) -> anyhow::Result<Driven> {
    anyhow::ensure!(
        d.prompts.len() == d.due.len() && d.due.len() == d.max_tokens.len(),
        "one due time and one output length per prompt"
    );
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
    let saturated = Arc::new(std::sync::OnceLock::<String>::new());
    let limit = d.saturation_s.map(Duration::from_secs_f64);
    let mut tasks = Vec::new();
    for (j, (p, &due)) in d.prompts.iter().zip(&d.due).enumerate() {
        if fatal.get().is_some() || saturated.get().is_some() {
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
            max_tokens: d.max_tokens[j],
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
        let (bar, fatal, saturated) = (bar.clone(), fatal.clone(), saturated.clone());
        tasks.push(tokio::spawn(async move {
            let outcome = match limit {
                Some(l) => tokio::select! {
                    o = client::run(&http, &clock, &spec, &mut rec) => Some(o),
                    _ = tokio::time::sleep(l) => None,
                },
                None => Some(client::run(&http, &clock, &spec, &mut rec).await),
            };
            drop(permit);
            match outcome {
                Some(Outcome::Fatal(m)) => {
                    let _ = fatal.set(format!("request {j}: {m}"));
                }
                Some(Outcome::Ok) => {}
                None => {
                    let l = limit.map_or(0.0, |l| l.as_secs_f64());
                    let _ =
                        saturated.set(format!("request {j} still open {l:.1} s after it was sent"));
                    let why = format!("{CANCELLED} {l:.1} s after it was sent (over-saturated)");
                    let (t, tm) = clock.now();
                    (rec.ended, rec.ended_mono, rec.error) = (t, tm, Some(why));
                }
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
    Ok(Driven {
        records: out,
        saturated: saturated.get().cloned(),
    })
}
