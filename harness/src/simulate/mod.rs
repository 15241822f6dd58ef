//! The fleet simulator (`moefleet-harness simulate`): a discrete-event model of the engine on a
//! fleet (`des`), calibrated from measured per-frame stage costs (`costs`), that replays a sweep
//! plan as the harness would and writes the same trace and phase records, so the same analysis
//! gives its Q_decode, Q_phase and TTFT. `validate` checks it against a measured run at levels it
//! was not calibrated on; `paper` calibrates it from the paper's stage profiles and compares it
//! with the paper's Table 4; `predict` sizes fleets that were never measured.

pub mod cli;
pub mod costs;
pub mod des;
pub mod level;
pub mod network;
pub mod paper;
pub mod predict;
pub mod recheck;
pub mod unit;
pub mod validate;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use crate::analysis::tables::Run;
use std::io::Write;

use crate::trace::{append_jsonl, CohortRecord, PhaseRecord, TraceRecord};
use crate::workload::{Families, Plan};
use des::{FleetModel, Request, Sim};

/// Pause between phases beyond the plan's settle time: the idle gate and the stats reads.
const PHASE_GAP_S: f64 = 0.2;

/// Prompt lengths in tokens, as the engine's embedded tokenizer counts them (the server's
/// `usage.prompt_tokens` for the same text).
pub struct PromptLengths {
    tokenizer: moefleet_engine::tokenizer::TextTokenizer,
}

impl PromptLengths {
    pub fn embedded() -> Result<PromptLengths> {
        Ok(PromptLengths {
            tokenizer: moefleet_engine::tokenizer::TextTokenizer::embedded()
                .context("the engine's embedded tokenizer")?,
        })
    }

    pub fn count(&self, text: &str) -> Result<usize> {
        Ok(self.tokenizer.encode(text)?.len())
    }
}

/// Replay `plan` on the model: every phase's cohorts in order, request j of a cohort sent
/// `stagger_s * j` after the cohort starts, the next cohort once every request of this one has its
/// last token (as the sweep does). Returns the run as the harness would have recorded it.
pub fn simulate_plan(model: &FleetModel, plan: &Plan, lengths: &PromptLengths) -> Result<Run> {
    let families = Families::builtin()?;
    let mut sim = Sim::new(model.clone());
    let mut phases = Vec::new();
    let mut traces = BTreeMap::new();
    for ph in plan.phases() {
        let prefix = plan.prompt_prefix.as_deref().unwrap_or(&ph.name);
        let prompts = families.phase_prompts(prefix, None, ph.requests);
        let start = sim.now;
        let mut recs = Vec::new();
        let mut cohorts = Vec::new();
        for (ci, chunk) in prompts.chunks(ph.concurrency).enumerate() {
            let c0 = sim.now;
            let reqs = chunk
                .iter()
                .enumerate()
                .map(|(k, p)| {
                    Ok(Request {
                        offset_s: plan.stagger_s * k as f64,
                        prompt_tokens: lengths.count(&p.text)?,
                        max_tokens: ph.max_tokens,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let out = sim
                .cohort(&reqs)
                .with_context(|| format!("simulating phase {}", ph.name))?;
            for ((p, r), o) in chunk.iter().zip(&reqs).zip(&out) {
                let events: Vec<(f64, u32)> = o.tokens.iter().map(|&t| (t, 1)).collect();
                let ended = o.tokens.last().copied().unwrap_or(o.started);
                recs.push(TraceRecord {
                    phase: ph.name.clone(),
                    family: p.family.clone(),
                    family_index: p.family_index,
                    prompt_index: p.prompt_index,
                    cohort: ci,
                    prompt: p.text.clone(),
                    prompt_tokens: Some(r.prompt_tokens as u64),
                    max_tokens: r.max_tokens,
                    started: o.started,
                    started_mono: o.started,
                    events: events.clone(),
                    events_mono: events,
                    ended,
                    ended_mono: ended,
                    finish_reason: Some("length".into()),
                    usage: Some(serde_json::json!({
                        "prompt_tokens": r.prompt_tokens,
                        "completion_tokens": o.tokens.len(),
                    })),
                    ..Default::default()
                });
            }
            cohorts.push(CohortRecord {
                index: ci,
                requests: chunk.len(),
                start_mono: c0,
                end_mono: sim.now,
            });
        }
        let end = sim.now;
        phases.push(PhaseRecord {
            phase: ph.name.clone(),
            family: plan.family.clone(),
            concurrency: ph.concurrency,
            output_cap: ph.max_tokens,
            requests: ph.requests,
            tokens: recs.iter().map(|r| r.tokens()).sum(),
            start,
            end,
            start_mono: start,
            end_mono: end,
            cohorts,
            idle_at_start: Some(true),
            ..Default::default()
        });
        traces.insert(ph.name.clone(), recs);
        sim.idle(plan.settle_s + PHASE_GAP_S);
    }
    Ok(Run {
        phases,
        traces,
        polls: Vec::new(),
    })
}

/// Write a simulated run in a sweep's layout (`phases.jsonl`, `traces/PHASE.jsonl.gz`), so
/// `moefleet-harness analyze DIR` reads it as it reads a measured one.
pub fn write_run(run: &Run, dir: &Path) -> Result<()> {
    let traces = dir.join("traces");
    if traces.exists() {
        std::fs::remove_dir_all(&traces)?;
    }
    std::fs::create_dir_all(&traces)?;
    let _ = std::fs::remove_file(dir.join("phases.jsonl"));
    for p in &run.phases {
        append_jsonl(&dir.join("phases.jsonl"), p)?;
        let path = traces.join(format!("{}.jsonl.gz", p.phase));
        let f =
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
        for r in &run.traces[&p.phase] {
            serde_json::to_writer(&mut gz, r)?;
            gz.write_all(b"\n")?;
        }
        gz.finish()?;
    }
    Ok(())
}
