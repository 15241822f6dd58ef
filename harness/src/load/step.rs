//! One step of open-loop load into a directory of its own (docs/MEASUREMENTS.md §9): the
//! schedule, the requests (`drive`), their records and summary. `moefleet-harness run` is one
//! step; a sweep and a search are several, one directory each.
//!
//! A step writes DIR/run.json (what was asked, host facts, load averages), DIR/schedule.csv,
//! DIR/traces.jsonl.gz (one record per request, with its due time), DIR/summary.json and
//! DIR/summary.md.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::arrivals::Pattern;
use super::crosscheck;
use super::drive::{self, Drive};
use super::latency::{Slo, Summary};
use super::replay::Replayed;
use crate::driver::server::Server;
use crate::host;
use crate::workload::{Families, PromptSpec};
use moefleet_engine::tokenizer::TextTokenizer;

/// When a step's requests are due.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Schedule {
    /// An arrival process at a rate (or a ramp).
    Arrivals(Pattern),
    /// Every request due at once: with a concurrency cap C, C streams kept busy (a closed loop;
    /// C = 1 is one request at a time).
    AtOnce,
    /// A request trace's times, prompts and output lengths (`replay`), time divided by
    /// `time_scale`.
    Replay { trace: PathBuf, time_scale: f64 },
}

/// What one step sends (DIR/run.json's `plan`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepPlan {
    pub schedule: Schedule,
    /// Requests, the warm-up's included.
    pub requests: usize,
    pub warmup: usize,
    pub max_tokens: usize,
    pub ignore_eos: bool,
    pub max_concurrency: Option<usize>,
    /// Prompts of one workload family (None: the families in turn).
    pub family: Option<String>,
    pub slo: Slo,
    /// A request open this long ends the step as over-saturated (`drive`).
    pub saturation_s: Option<f64>,
    /// The requests of a `Schedule::Replay` (read from its trace).
    #[serde(skip)]
    pub replayed: Option<Arc<Vec<Replayed>>>,
    /// Turns per conversation: each due time starts a conversation whose later turns resend it
    /// all with a new prompt (`drive`); 1 is a single request. Requests and warm-up count
    /// conversations.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub turns: usize,
    /// Seconds from a turn's answer to its conversation's next turn.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub think_s: f64,
    /// The server's tokenizer (a GGUF file or tokenizer.json), for the client's own count of
    /// every request (`crosscheck`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<PathBuf>,
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl StepPlan {
    /// The due times of its seeded schedule (None for a replay, whose times come from its trace).
    pub fn due(&self) -> Option<Vec<f64>> {
        match &self.schedule {
            Schedule::Arrivals(p) => Some(p.schedule(self.requests)),
            Schedule::AtOnce => Some(vec![0.0; self.requests]),
            Schedule::Replay { .. } => None,
        }
    }

    /// The plan can run: a warm-up that leaves requests to measure, a usable schedule.
    pub fn check(&self) -> anyhow::Result<()> {
        if let Schedule::Arrivals(p) = &self.schedule {
            p.check().map_err(anyhow::Error::msg)?;
        }
        if self.requests == 0 || self.warmup >= self.requests {
            bail!(
                "--warmup {} leaves none of the {} requests to measure",
                self.warmup,
                self.requests
            );
        }
        if let Some(f) = &self.family {
            let names = Families::builtin()?.names;
            if !names.contains(f) {
                bail!("no family {f:?} (families: {})", names.join(", "));
            }
        }
        if self.turns == 0 || self.turns > 100 {
            bail!("--turns must be 1 to 100, not {}", self.turns);
        }
        if !(self.think_s.is_finite() && self.think_s >= 0.0) {
            bail!(
                "--think-s must be zero or more seconds, not {}",
                self.think_s
            );
        }
        if self.turns > 1 && matches!(self.schedule, Schedule::Replay { .. }) {
            bail!("a trace replays single requests: no --turns");
        }
        if let Some(s) = self.saturation_s {
            if !(s.is_finite() && s > 0.0) {
                bail!("the saturation limit must be a positive number of seconds, not {s}");
            }
        }
        Ok(())
    }
}

/// A finished step: its directory, summary and whether it ended over-saturated.
#[derive(Clone, Debug, Serialize)]
pub struct StepResult {
    pub dir: PathBuf,
    pub summary: Summary,
    /// Why the step stopped early, when a request outlived the saturation limit.
    pub saturated: Option<String>,
}

/// Run `plan` against `server` into `dir` (created; refused when it already holds a step).
pub async fn run(server: &Server, plan: &StepPlan, dir: &Path) -> anyhow::Result<StepResult> {
    plan.check()?;
    let traces = dir.join("traces.jsonl.gz");
    if traces.exists() {
        bail!(
            "{} already holds a run (choose another --out)",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let families = Families::builtin()?;
    let family = match &plan.family {
        Some(f) => Some(
            families
                .names
                .iter()
                .position(|n| n == f)
                .with_context(|| {
                    format!("no family {f:?} (families: {})", families.names.join(", "))
                })?,
        ),
        None => None,
    };
    let n = plan.requests;
    let (prompts, due, max_tokens) = match (&plan.schedule, &plan.replayed) {
        (Schedule::Replay { .. }, Some(rows)) => {
            let rows = &rows[..n.min(rows.len())];
            let prompts = rows
                .iter()
                .enumerate()
                .map(|(j, r)| {
                    vec![PromptSpec {
                        family: "trace".into(),
                        family_index: 0,
                        prompt_index: j,
                        key: format!("trace/{j}"),
                        text: r.prompt.clone(),
                    }]
                })
                .collect();
            let due = rows.iter().map(|r| r.due_s).collect();
            (prompts, due, rows.iter().map(|r| r.max_tokens).collect())
        }
        (Schedule::Replay { trace, .. }, None) => {
            bail!("the replay of {} was not read", trace.display())
        }
        (Schedule::Arrivals(_) | Schedule::AtOnce, _) => (
            conversations(&families, family, n, plan.turns),
            plan.due().unwrap_or_default(),
            vec![plan.max_tokens; n],
        ),
    };
    std::fs::write(dir.join("schedule.csv"), schedule_csv(&due))?;
    let manifest = serde_json::json!({
        "record": "load_run",
        "url": server.base,
        "model": server.model,
        "plan": plan,
        "command": std::env::args().collect::<Vec<_>>(),
        // which code ran: the server's build (moefleet's /api/stats; null from other servers)
        // and this harness binary's
        "engine_version": server.first_stat("engine_version"),
        "engine_commit": server.first_stat("engine_commit"),
        "harness_commit": crate::BUILD_COMMIT,
        "host": host::facts(),
        "load_average_start": host::load_average(),
    });
    crate::json::write(&dir.join("run.json"), &manifest)?;
    let tokenizer = match &plan.tokenizer {
        Some(p) => {
            let tk = TextTokenizer::open(Some(p))
                .with_context(|| format!("--tokenizer {}", p.display()))?;
            let probe = vec![("user".to_string(), "Hello.".to_string())];
            moefleet_engine::serve::request::chat_text(&tk, &probe).map_err(|e| {
                anyhow::anyhow!("--tokenizer {}: cannot count a chat: {e}", p.display())
            })?;
            Some(Arc::new(tk))
        }
        None => None,
    };
    let driven = drive::run(
        Drive {
            server,
            prompts,
            due,
            max_tokens,
            ignore_eos: plan.ignore_eos,
            max_concurrency: plan.max_concurrency,
            warmup: plan.warmup,
            saturation_s: plan.saturation_s,
            think_s: plan.think_s,
            tokenizer,
        },
        &traces,
    )
    .await?;
    let measured: Vec<_> = driven
        .records
        .into_iter()
        .filter(|r| r.phase == "measure")
        .collect();
    let summary = Summary::of(&measured, plan.slo);
    let mut doc = serde_json::to_value(&summary)?;
    doc["load_average_end"] = serde_json::json!(host::load_average());
    doc["saturated"] = serde_json::json!(driven.saturated);
    crate::json::write(&dir.join("summary.json"), &doc)?;
    std::fs::write(
        dir.join("summary.md"),
        summary_markdown(&summary, driven.saturated.as_deref()),
    )?;
    write_crosscheck(dir, &measured)?;
    Ok(StepResult {
        dir: dir.to_path_buf(),
        summary,
        saturated: driven.saturated,
    })
}

/// The prompts of `n` conversations of `turns` turns: a conversation's first prompt is the one a
/// single request would have had (the families in turn, or `family`'s), its later turns' prompts
/// the next of a second sequence of the same workload, so a conversation moves on to a new task
/// while its history stays in front.
fn conversations(
    families: &Families,
    family: Option<usize>,
    n: usize,
    turns: usize,
) -> Vec<Vec<PromptSpec>> {
    let first = families.phase_prompts("run", family, n);
    let mut later = families
        .phase_prompts("turn", family, n * (turns - 1))
        .into_iter();
    first
        .into_iter()
        .map(|p| {
            let mut c = vec![p];
            c.extend(later.by_ref().take(turns - 1));
            c
        })
        .collect()
}

/// DIR/crosscheck.json and crosscheck.md, where the records hold more to check than the stream's
/// own count (`crosscheck`); nothing otherwise.
pub fn write_crosscheck(
    dir: &Path,
    measured: &[moefleet_schema::TraceRecord],
) -> anyhow::Result<()> {
    if let Some(c) = crosscheck::of(measured) {
        crate::json::write(&dir.join("crosscheck.json"), &c)?;
        std::fs::write(dir.join("crosscheck.md"), c.markdown())?;
    }
    Ok(())
}

/// DIR/schedule.csv: each request's due time, seconds from the step's start.
pub fn schedule_csv(due: &[f64]) -> String {
    let mut s = String::from("request,due_s\n");
    for (j, t) in due.iter().enumerate() {
        s += &format!("{j},{t:.6}\n");
    }
    s
}

/// DIR/summary.md: the summary's table, and why the step stopped early if it did.
pub fn summary_markdown(summary: &Summary, saturated: Option<&str>) -> String {
    let mut md = summary.markdown();
    if let Some(why) = saturated {
        md += &format!("\nOver-saturated: the step stopped early ({why}).\n");
    }
    md
}
