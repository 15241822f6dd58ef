//! The load of a reliability run: workers streaming greedy chat completions of a fixed prompt
//! set through the harness's one SSE client, each request folded into a [`Done`] row. A request's
//! output is compared with the same prompt's output when it ran alone, so a stream that carries
//! another stream's tokens, or any token other than the one greedy decoding gives, is seen.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::driver::client::{self, Clock, Outcome, RequestSpec};
use crate::driver::server::Server;
use crate::trace::TraceRecord;
use crate::workload::Families;

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// `[DONE]` arrived and the counted tokens equal usage's.
    Complete,
    /// Accepted, then the stream broke, carried an error, or ended without `[DONE]`.
    Broken,
    /// Complete, but the tokens the stream showed differ from usage's count.
    Miscounted,
    /// Never accepted: an HTTP error other than at-capacity (those are retried and counted).
    Refused,
}

/// One request as it ended. Times are seconds on the run's monotonic clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Done {
    pub id: u64,
    pub worker: usize,
    /// Index into the run's prompt set.
    pub prompt: usize,
    pub max_tokens: usize,
    pub started: f64,
    pub ended: f64,
    pub status: Status,
    /// Tokens the stream showed (the harness's counting rules).
    pub tokens: u64,
    /// usage.completion_tokens.
    pub usage: Option<u64>,
    pub finish: Option<String>,
    /// At-capacity 503s retried before it was accepted.
    pub capacity_retries: u32,
    /// First 16 hex digits of the sha256 of the streamed text.
    pub text_sha: String,
    pub error: Option<String>,
    /// The longest wait between two token events of the stream (seconds): for a stream held
    /// through a fault, the pause its client saw. None in records made before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_gap_s: Option<f64>,
}

impl Done {
    /// Accepted by the server (a stream began).
    pub fn accepted(&self) -> bool {
        self.status != Status::Refused
    }
}

/// The prompt set: `n` prompts of the built-in families (mixed, as a sweep phase has them) with
/// output caps spread evenly over `min..=max` tokens.
pub fn prompt_set(n: usize, min: usize, max: usize) -> anyhow::Result<Vec<(String, usize)>> {
    anyhow::ensure!(n > 0, "the prompt set is empty");
    anyhow::ensure!(
        min >= 1 && min <= max,
        "output caps {min}..{max} are not a range"
    );
    let families = Families::builtin()?;
    let specs = families.phase_prompts("reliability", None, n);
    let span = (n - 1).max(1);
    Ok(specs
        .into_iter()
        .enumerate()
        .map(|(i, p)| (p.text, min + (max - min) * i / span))
        .collect())
}

pub fn text_sha(text: &str) -> String {
    let d = Sha256::digest(text.as_bytes());
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Sends requests of the prompt set; shared by every worker of a run.
pub struct Load {
    pub server: Server,
    pub clock: Clock,
    pub prompts: Vec<(String, usize)>,
    next: AtomicU64,
}

impl Load {
    pub fn new(server: Server, prompts: Vec<(String, usize)>) -> Arc<Load> {
        Arc::new(Load {
            server,
            clock: Clock::new(),
            prompts,
            next: AtomicU64::new(0),
        })
    }

    /// The run's next request id; its prompt is `id % prompts`.
    pub fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Send request `id` of `worker` (greedy, `ignore_eos`, so it must run to its cap) and say
    /// how it ended; the text is returned beside the row.
    pub async fn request(&self, id: u64, worker: usize) -> (Done, String) {
        let p = (id % self.prompts.len() as u64) as usize;
        let (text, max_tokens) = &self.prompts[p];
        let spec = RequestSpec {
            url: self.server.base.clone(),
            model: self.server.model.clone(),
            prompt: text.clone(),
            max_tokens: *max_tokens,
            ignore_eos: true,
            j: worker,
            capture: false,
            history: Vec::new(),
        };
        let mut rec = TraceRecord::default();
        let outcome = client::run(&self.server.http, &self.clock, &spec, &mut rec).await;
        let status = match (&outcome, &rec.error) {
            (Outcome::Fatal(_), _) => Status::Refused,
            (Outcome::Ok, None) => Status::Complete,
            // a complete stream whose counts disagree fails the count check again; a broken one
            // has no usage to check against
            (Outcome::Ok, Some(_))
                if client::check(&mut rec.clone()).is_some() && has_done(&rec) =>
            {
                Status::Miscounted
            }
            (Outcome::Ok, Some(_)) => Status::Broken,
        };
        let done = Done {
            id,
            worker,
            prompt: p,
            max_tokens: *max_tokens,
            started: rec.started_mono,
            ended: rec.ended_mono,
            status,
            tokens: rec.tokens(),
            usage: rec.completion_tokens(),
            finish: rec.finish_reason.clone(),
            capacity_retries: rec.capacity_retries,
            text_sha: text_sha(&rec.text),
            error: rec.error.clone(),
            longest_gap_s: longest_gap(&rec.events_mono),
        };
        (done, rec.text)
    }
}

/// The longest time between two consecutive token events (None with fewer than two).
fn longest_gap(events: &[(f64, u32)]) -> Option<f64> {
    events.windows(2).map(|w| w[1].0 - w[0].0).reduce(f64::max)
}

/// Did the stream end properly (usage arrived, which moefleet sends just before `[DONE]`)?
fn has_done(rec: &TraceRecord) -> bool {
    rec.usage.is_some()
}

/// Each prompt's output when it ran alone: `prompt index → text sha`.
pub async fn references(load: &Load) -> anyhow::Result<BTreeMap<usize, String>> {
    let mut out = BTreeMap::new();
    for p in 0..load.prompts.len() {
        let (done, _) = load.request(p as u64, 0).await;
        anyhow::ensure!(
            done.status == Status::Complete && done.tokens == done.max_tokens as u64,
            "the reference request of prompt {p} did not complete alone: {:?} ({} of {} tokens)",
            done.error,
            done.tokens,
            done.max_tokens
        );
        out.insert(p, done.text_sha);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_set_spreads_caps_over_the_range() {
        let set = prompt_set(5, 10, 50).unwrap();
        let caps: Vec<usize> = set.iter().map(|p| p.1).collect();
        assert_eq!(caps, vec![10, 20, 30, 40, 50]);
        assert_eq!(prompt_set(1, 8, 8).unwrap()[0].1, 8);
        assert!(prompt_set(0, 8, 8).is_err());
        assert!(prompt_set(3, 9, 8).is_err());
        let texts: std::collections::BTreeSet<&String> = set.iter().map(|p| &p.0).collect();
        assert_eq!(texts.len(), 5, "prompts are distinct");
    }

    #[test]
    fn text_sha_is_short_and_stable() {
        assert_eq!(text_sha("abc"), "ba7816bf8f01cfea");
    }
}
