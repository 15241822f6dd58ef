//! `verify`'s side of the load runs (`load_runs`): every step's summary, schedule and summary
//! table recomputed from its per-request records and its plan, a plan's table from those steps,
//! and a search's answer by the rule of `load::rederive` (docs/MEASUREMENTS.md §9).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::load::rederive::{self, Step};
use crate::recheck::{read_json, same_as_committed, same_json, Recheck};

/// Committed load runs: a step's directory (`run` without a plan) or a plan's (a sweep, a search,
/// or repeated runs of one step).
pub struct LoadRuns;

impl Recheck for LoadRuns {
    fn key(&self) -> &'static str {
        "load_runs"
    }
    fn noun(&self) -> &'static str {
        "load run"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let dir = root.join(self.path(entry)?);
        if dir.join("traces.jsonl.gz").exists() {
            return step_files(&rederive::step(&dir)?);
        }
        let plan = rederive::plan(&dir)?;
        let mut files = Vec::new();
        for s in &plan.steps {
            files.extend(step_files(s).with_context(|| s.dir.display().to_string())?);
        }
        let fresh = if dir.join("arms.csv").exists() {
            crate::load::repeat::tables(&dir)
                .map(|(csv, md)| vec![("arms.csv".into(), csv), ("arms.md".into(), md)])
        } else {
            crate::load::plans::tables(&plan.rows)
                .map(|(csv, md)| vec![("steps.csv".into(), csv), ("steps.md".into(), md)])
        };
        files.extend(same_as_committed(&dir, fresh, "table of its steps")?);
        if let Some(found) = &plan.search {
            let p = dir.join("search.json");
            if !same_json(&read_json(&p)?, &serde_json::to_value(found)?) {
                bail!("search.json differs from the answer its steps' records give");
            }
            files.push(p);
        }
        Ok(files)
    }
}

/// One step's summary.json, summary.md and schedule.csv against their re-derivation.
fn step_files(s: &Step) -> Result<Vec<PathBuf>> {
    let path = s.dir.join("summary.json");
    let stored = read_json(&path)?;
    let why = stored["saturated"].as_str();
    if why.is_some() != s.saturated {
        bail!(
            "summary.json says the step {} over-saturated, its records say it {}",
            if why.is_some() { "did" } else { "never" },
            if s.saturated { "did" } else { "did not" }
        );
    }
    let mut fresh = serde_json::to_value(&s.summary)?;
    // what the records cannot give: the machine's load when the step ended, and the message of
    // the cancellation that stopped it (checked above to exist exactly when a record says so)
    fresh["load_average_end"] = stored["load_average_end"].clone();
    fresh["saturated"] = stored["saturated"].clone();
    if !same_json(&stored, &fresh) {
        bail!("summary.json differs from the summary of its records");
    }
    let md = crate::load::step::summary_markdown(&s.summary, why);
    let mut tables = vec![("summary.md".to_string(), md)];
    if let Some(csv) = rederive::schedule_csv(&s.plan) {
        tables.push(("schedule.csv".to_string(), csv));
    }
    let mut files = vec![path];
    files.extend(same_as_committed(&s.dir, Ok(tables), "re-derivation")?);
    Ok(files)
}
