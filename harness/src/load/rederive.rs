//! A load run re-derived from its raw records (docs/MEASUREMENTS.md §9): each step's summary from
//! its per-request records (DIR/traces.jsonl.gz, the measured ones) and what it asked
//! (DIR/run.json's plan); a plan's table from its steps; a search's answer from its steps by a
//! rule of its own: the highest load that met the objectives, and the lowest that missed them
//! (the bisection that chose the steps is not replayed). A step's load is its arrival rate, or
//! for a closed loop its concurrency in a concurrency search and its completed request rate in a
//! rate search. `verify` compares these with the committed files, and the claims' load rules
//! compute from them.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use moefleet_schema::TraceRecord;

use super::drive;
use super::latency::Summary;
use super::plans::{answer, load_of, meets_with, Found, Row, Search};
use super::step::StepPlan;

/// One step, from its directory.
#[derive(Clone, Debug)]
pub struct Step {
    pub dir: PathBuf,
    /// The step's name (its directory's, after `NN-`).
    pub name: String,
    pub plan: StepPlan,
    /// Its measured requests (the warm-up's left out), as the trace file holds them.
    pub records: Vec<TraceRecord>,
    pub summary: Summary,
    /// Whether a request was cancelled as over-saturated.
    pub saturated: bool,
    /// Read from a `vllm bench serve` result file (`vllm::import`), not from our records.
    pub imported: bool,
}

/// A step directory's number and name (`NN-name`, any number of digits), or None.
fn numbered(dir: &Path) -> Option<(usize, String)> {
    let name = dir.file_name()?.to_str()?;
    let (k, rest) = name.split_once('-')?;
    if k.is_empty() || !k.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((k.parse().ok()?, rest.to_string()))
}

/// The step directories (`NN-name`) under `out`, in the order of their numbers.
pub fn step_dirs(out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    for e in std::fs::read_dir(out).with_context(|| format!("listing {}", out.display()))? {
        let p = e?.path();
        if p.is_dir() {
            if let Some((k, _)) = numbered(&p) {
                dirs.push((k, p));
            }
        }
    }
    dirs.sort();
    Ok(dirs.into_iter().map(|(_, p)| p).collect())
}

/// Every step under `dir`, in directory order: the step itself, a sweep's or search's steps, or
/// those of each run of a repeated or alternated plan (whose runs are steps or plans).
pub fn steps_under(dir: &Path) -> anyhow::Result<Vec<Step>> {
    if dir.join("traces.jsonl.gz").is_file() {
        return Ok(vec![step(dir)?]);
    }
    let dirs = step_dirs(dir)?;
    if dirs.is_empty() {
        bail!("{} holds no step, plan or repeated run", dir.display());
    }
    let mut steps = Vec::new();
    for d in &dirs {
        steps.extend(steps_under(d)?);
    }
    Ok(steps)
}

/// The step in `dir`: its plan from run.json, its summary from its measured records.
pub fn step(dir: &Path) -> anyhow::Result<Step> {
    let manifest = crate::recheck::read_json(&dir.join("run.json"))?;
    let plan: StepPlan = serde_json::from_value(manifest["plan"].clone())
        .with_context(|| format!("{}: its plan", dir.join("run.json").display()))?;
    let traces = dir.join("traces.jsonl.gz");
    let records: Vec<TraceRecord> = crate::trace::read_records(&traces)?;
    let measured: Vec<TraceRecord> = records
        .iter()
        .filter(|r| r.phase == "measure")
        .cloned()
        .collect();
    let name = match numbered(dir) {
        Some((_, name)) => name,
        None => (dir.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    Ok(Step {
        dir: dir.to_path_buf(),
        name,
        summary: Summary::of(&measured, plan.slo),
        saturated: records.iter().any(drive::cancelled_as_saturated),
        records: measured,
        plan,
        imported: false,
    })
}

/// DIR/schedule.csv as the step wrote it: the due times its seeded schedule gives (None for a
/// replay, whose times come from the trace it read).
pub fn schedule_csv(plan: &StepPlan) -> Option<String> {
    Some(super::step::schedule_csv(&plan.due()?))
}

/// A plan (a sweep or a search) re-derived from its steps.
#[derive(Clone, Debug)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub rows: Vec<Row>,
    /// A search's answer, when OUT/search.json says the plan was one.
    pub search: Option<Found>,
}

/// The plan in `out`: every `NN-name` step directory in order.
pub fn plan(out: &Path) -> anyhow::Result<Plan> {
    let dirs = step_dirs(out)?;
    if dirs.is_empty() {
        bail!("{} holds no steps (NN-name directories)", out.display());
    }
    let steps = dirs
        .iter()
        .map(|d| step(d))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut rows: Vec<Row> = steps
        .iter()
        .enumerate()
        .map(|(k, s)| Row::of(k, &s.name, &s.plan, &s.summary, s.saturated))
        .collect();
    let stored = out.join("search.json");
    let search = if stored.exists() {
        let doc = crate::recheck::read_json(&stored)?;
        let how: Search = serde_json::from_value(doc["search"].clone())
            .with_context(|| format!("{}: its `search`", stored.display()))?;
        for (row, s) in rows.iter_mut().zip(&steps) {
            row.meets = Some(meets_with(&s.summary, s.saturated, how.share));
        }
        let (best, missed) = answer(how.by, &rows);
        Some(Found {
            by: how.by,
            best,
            missed,
            search: how,
            rows: rows.clone(),
        })
    } else {
        None
    };
    Ok(Plan {
        steps,
        rows,
        search,
    })
}

impl Plan {
    /// The step a search found: the met step whose load is the answer.
    pub fn best_step(&self) -> anyhow::Result<&Step> {
        let Some(found) = &self.search else {
            bail!("not a search (no search.json)");
        };
        let Some(best) = found.best else {
            bail!("the search found no load meeting its objectives");
        };
        self.rows
            .iter()
            .zip(&self.steps)
            .find(|(r, _)| r.meets == Some(true) && load_of(found.by, r) == Some(best))
            .map(|(_, s)| s)
            .context("no met step carries the search's answer")
    }
}

/// What a `load_search` claim reads from a search re-derived from its records.
#[derive(Clone, Copy, Debug, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// The highest load that met the objectives.
    Best,
    /// The lowest load that missed them.
    Missed,
    /// At the step of the answer: requests/s meeting every objective.
    BestGoodputRequestsPerS,
    /// At the step of the answer: output tokens/s of the requests meeting every objective.
    BestGoodputTokensPerS,
    /// At the step of the answer: percent of its measured requests meeting every objective.
    BestGoodPercent,
}

impl Measure {
    pub fn describe(self) -> &'static str {
        match self {
            Measure::Best => "the highest load that met the objectives",
            Measure::Missed => "the lowest load that missed them",
            Measure::BestGoodputRequestsPerS => "goodput (requests/s) at the answer's step",
            Measure::BestGoodputTokensPerS => "goodput (output tokens/s) at the answer's step",
            Measure::BestGoodPercent => "percent of requests meeting every objective there",
        }
    }

    /// The measure of the search in `out`, recomputed from its steps' records.
    pub fn of(self, out: &Path) -> anyhow::Result<f64> {
        let plan = plan(out)?;
        let found = plan
            .search
            .as_ref()
            .context("not a search (no search.json)")?;
        let at_best = || plan.best_step().map(|s| &s.summary);
        match self {
            Measure::Best => found.best.context("no load met the objectives"),
            Measure::Missed => found.missed.context("no load missed the objectives"),
            Measure::BestGoodputRequestsPerS => Ok(at_best()?.goodput_requests_per_s),
            Measure::BestGoodputTokensPerS => Ok(at_best()?.goodput_tokens_per_s),
            Measure::BestGoodPercent => {
                let s = at_best()?;
                Ok(100.0 * s.good_requests as f64 / s.requests.max(1) as f64)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::plans::SearchBy;

    fn row(rate: Option<f64>, c: Option<usize>, rps: f64, meets: Option<bool>) -> Row {
        Row {
            step: 0,
            name: String::new(),
            rate_asked: rate,
            concurrency: c,
            requests: 1,
            failed: 0,
            requests_per_s: rps,
            output_tokens_per_s: 0.0,
            tokens_per_s_per_user: None,
            ttft_p50_s: None,
            ttft_p99_s: None,
            tpot_p50_s: None,
            tpot_p99_s: None,
            e2e_p99_s: None,
            good_share: 0.0,
            goodput_requests_per_s: 0.0,
            saturated: false,
            meets,
        }
    }

    /// A rate search's bounds count at their completed rates, its bisection steps at the rates
    /// asked; the answer brackets the threshold whatever order the steps ran in.
    #[test]
    fn the_answer_is_the_highest_met_and_lowest_missed_load() {
        let rows = [
            row(None, Some(1), 0.8, Some(true)),
            row(None, None, 3.0, Some(false)),
            row(Some(1.9), None, 1.85, Some(true)),
            row(Some(2.45), None, 2.0, Some(false)),
            row(Some(2.175), None, 2.1, Some(true)),
            row(Some(9.0), None, 2.0, None),
        ];
        assert_eq!(answer(SearchBy::Rate, &rows), (Some(2.175), Some(2.45)));
        let by_c = [
            row(None, Some(1), 1.0, Some(true)),
            row(None, Some(8), 3.0, Some(false)),
            row(None, Some(4), 2.5, Some(true)),
            row(None, Some(6), 2.9, Some(false)),
        ];
        assert_eq!(answer(SearchBy::Concurrency, &by_c), (Some(4.0), Some(6.0)));
        assert_eq!(answer(SearchBy::Rate, &[]), (None, None));
    }
}
