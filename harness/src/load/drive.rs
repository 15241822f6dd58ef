//! An open-loop run: requests sent when the schedule has them due (`arrivals`), whatever the
//! server's progress, at most `max_concurrency` in flight when capped (a request due while the
//! cap is reached waits, and its send lag says so), the first `warmup` left out of the summary.
//! Every request's trace record is appended as it ends (RUN/traces.jsonl.gz), with its due time.
//!
//! A due time may start a conversation of several turns: each later turn is due `think_s` after
//! the previous turn's answer ended and carries the conversation so far (every earlier prompt and
//! answer) before its own prompt, so a server with a prefix cache can reuse what it computed for
//! the turn before. A conversation holds no place under the cap while it thinks; a turn that fails
//! ends its conversation.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use moefleet_engine::tokenizer::TextTokenizer;
use moefleet_schema::TraceRecord;

use crate::driver::client::{self, Clock, Outcome, RequestSpec};
use crate::driver::server::Server;
use crate::trace::append_gz;
use crate::workload::PromptSpec;

/// What to send, and how.
pub struct Drive<'a> {
    pub server: &'a Server,
    /// Per due time, the prompts of its conversation's turns (one for a single request).
    pub prompts: Vec<Vec<PromptSpec>>,
    /// Each conversation's due time, seconds from the start (as many as prompts).
    pub due: Vec<f64>,
    /// Output tokens asked, per conversation (each of its turns).
    pub max_tokens: Vec<usize>,
    pub ignore_eos: bool,
    /// At most this many requests in flight (None: no cap).
    pub max_concurrency: Option<usize>,
    /// Conversations at the start marked `warmup` (phase) and left out of the summary.
    pub warmup: usize,
    /// Over-saturation: a request still open this long after it was sent is cancelled (its
    /// record says so) and no further request is sent (None: no limit).
    pub saturation_s: Option<f64>,
    /// Seconds between a turn's answer and the next turn of its conversation.
    pub think_s: f64,
    /// The server's tokenizer: each successful request's record gets the client's own count.
    pub tokenizer: Option<Arc<TextTokenizer>>,
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

/// What every request of a run shares: its clock, cap, limits, progress and stop flags.
#[derive(Clone)]
struct Shared {
    http: reqwest::Client,
    clock: Clock,
    cap: Arc<tokio::sync::Semaphore>,
    limit: Option<Duration>,
    bar: indicatif::ProgressBar,
    traces: PathBuf,
    tokenizer: Option<Arc<TextTokenizer>>,
    /// The first fatal outcome (set once, by whichever request meets it first).
    fatal: Arc<OnceLock<String>>,
    saturated: Arc<OnceLock<String>>,
}

impl Shared {
    fn stopped(&self) -> bool {
        self.fatal.get().is_some() || self.saturated.get().is_some()
    }

    /// Send one request (holding `permit`, a place under the cap), its record appended to the
    /// trace file as it ends. True when it succeeded.
    async fn send(
        &self,
        spec: RequestSpec,
        mut rec: TraceRecord,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) -> anyhow::Result<(TraceRecord, bool)> {
        let j = spec.j;
        let (http, clock) = (&self.http, &self.clock);
        let outcome = match self.limit {
            Some(l) => tokio::select! {
                o = client::run(http, clock, &spec, &mut rec) => Some(o),
                _ = tokio::time::sleep(l) => None,
            },
            None => Some(client::run(http, clock, &spec, &mut rec).await),
        };
        drop(permit);
        let ok = match outcome {
            Some(Outcome::Fatal(m)) => {
                let _ = self.fatal.set(format!("request {j}: {m}"));
                false
            }
            Some(Outcome::Ok) => rec.error.is_none(),
            None => {
                let l = self.limit.map_or(0.0, |l| l.as_secs_f64());
                let _ = self
                    .saturated
                    .set(format!("request {j} still open {l:.1} s after it was sent"));
                let why = format!("{CANCELLED} {l:.1} s after it was sent (over-saturated)");
                let (t, tm) = clock.now();
                (rec.ended, rec.ended_mono, rec.error) = (t, tm, Some(why));
                false
            }
        };
        // the client's count and the record's write run off the runtime's two workers, so the
        // streams still open are read on time; a count that fails (the template cannot render)
        // is left out, and shows as fewer requests compared in the cross-check
        let (path, tk) = (self.traces.clone(), self.tokenizer.clone().filter(|_| ok));
        let rec = tokio::task::spawn_blocking(move || {
            if let Some(tk) = tk {
                rec.client_count = super::crosscheck::count(&tk, &spec, &rec.text).ok();
            }
            append_gz(&path, &rec).map(|()| rec)
        })
        .await??;
        self.bar.inc(1);
        Ok((rec, ok))
    }
}

/// Send every request on schedule; the records in request order (a conversation's turns
/// together). Stops at the first fatal outcome (a server that refuses or is gone), after the
/// requests already sent end; stops sending once a request outlives `saturation_s` (the run is
/// then past what the server can serve: its latency grows without bound), each request still open
/// ending at that limit.
pub async fn run(d: Drive<'_>, traces: &Path) -> anyhow::Result<Driven> {
    anyhow::ensure!(
        d.prompts.len() == d.due.len() && d.due.len() == d.max_tokens.len(),
        "one due time and one output length per conversation"
    );
    let clock = Clock::new();
    let (_, origin) = clock.now();
    let total: usize = d.prompts.iter().map(Vec::len).sum();
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} requests {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let shared = Shared {
        http: d.server.http.clone(),
        clock,
        cap: Arc::new(tokio::sync::Semaphore::new(
            d.max_concurrency
                .unwrap_or(tokio::sync::Semaphore::MAX_PERMITS),
        )),
        limit: d.saturation_s.map(Duration::from_secs_f64),
        bar,
        traces: traces.to_path_buf(),
        tokenizer: d.tokenizer.clone(),
        fatal: Arc::new(OnceLock::new()),
        saturated: Arc::new(OnceLock::new()),
    };
    let multi = d.prompts.iter().any(|c| c.len() > 1);
    let think_s = d.think_s;
    let mut tasks = Vec::new();
    let mut j = 0;
    for (k, (turns, &due)) in d.prompts.iter().zip(&d.due).enumerate() {
        if shared.stopped() {
            break;
        }
        let (_, now) = shared.clock.now();
        let wait = origin + due - now;
        if wait > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        }
        let mut permit = Some(
            shared
                .cap
                .clone()
                .acquire_owned()
                .await
                .context("the concurrency cap")?,
        );
        let base = RequestSpec {
            url: d.server.base.clone(),
            model: d.server.model.clone(),
            prompt: String::new(),
            max_tokens: d.max_tokens[k],
            ignore_eos: d.ignore_eos,
            j,
            capture: false,
            history: Vec::new(),
        };
        let phase = if k < d.warmup { "warmup" } else { "measure" };
        let (turns, shared, first) = (turns.clone(), shared.clone(), j);
        j += turns.len();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(turns.len());
            let mut spec = base;
            let mut due_at = origin + due;
            for (t, p) in turns.iter().enumerate() {
                let permit = match permit.take() {
                    Some(p) => p,
                    None => {
                        let wait = due_at - shared.clock.now().1;
                        if wait > 0.0 {
                            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
                        }
                        if shared.stopped() {
                            break;
                        }
                        shared.cap.clone().acquire_owned().await?
                    }
                };
                spec.prompt = p.text.clone();
                spec.j = first + t;
                let rec = TraceRecord {
                    phase: phase.into(),
                    family: p.family.clone(),
                    family_index: p.family_index,
                    prompt_index: p.prompt_index,
                    scheduled_mono: Some(due_at),
                    conversation: multi.then_some(first),
                    turn: multi.then_some(t),
                    ..Default::default()
                };
                let (rec, ok) = shared.send(spec.clone(), rec, permit).await?;
                spec.history.push((p.text.clone(), rec.text.clone()));
                due_at = rec.ended_mono + think_s;
                out.push(rec);
                if !ok {
                    break;
                }
            }
            anyhow::Ok(out)
        }));
    }
    let mut out = Vec::with_capacity(total);
    for t in tasks {
        out.extend(t.await??);
    }
    shared.bar.finish_and_clear();
    if let Some(m) = shared.fatal.get() {
        anyhow::bail!("the run stopped: {m} ({} requests sent)", out.len());
    }
    Ok(Driven {
        records: out,
        saturated: shared.saturated.get().cloned(),
    })
}
