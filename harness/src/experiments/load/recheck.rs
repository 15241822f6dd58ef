//! `verify`'s side of the load runs (`load_runs`): every step's summary, schedule, summary table
//! and cross-check recomputed from its per-request records and its plan, a plan's table from
//! those steps, and a search's answer by the rule of `load::rederive` (docs/MEASUREMENTS.md §9).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::load::rederive::{self, Step};
use crate::recheck::{read_json, same_as_committed, same_json, Recheck};

/// Committed load runs: a step's directory (`run` without a plan), a plan's (a sweep, a search),
/// or repeated runs of any of them or of the paired concurrency sweep.
pub struct LoadRuns;

impl Recheck for LoadRuns {
    fn key(&self) -> &'static str {
        "load_runs"
    }
    fn noun(&self) -> &'static str {
        "load run"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        run_files(&root.join(self.path(entry)?))
    }
}

/// The files of the run in `dir` that its records give afresh: a step's, a paired concurrency
/// sweep's tables, repeated runs' (each run's, and the table comparing them), or a plan's.
fn run_files(dir: &Path) -> Result<Vec<PathBuf>> {
    if dir.join("traces.jsonl.gz").exists() {
        return step_files(&rederive::step(dir)?);
    }
    if dir.join("phases.jsonl").exists() {
        return crate::analysis::recheck::reanalyse_matches(dir);
    }
    if dir.join("arms.csv").exists() {
        let mut files = Vec::new();
        for run in rederive::step_dirs(dir)? {
            files.extend(run_files(&run).with_context(|| run.display().to_string())?);
        }
        let fresh = crate::load::arms::tables(dir)
            .map(|(csv, md)| vec![("arms.csv".into(), csv), ("arms.md".into(), md)]);
        files.extend(same_as_committed(dir, fresh, "table of its runs")?);
        return Ok(files);
    }
    let plan = rederive::plan(dir)?;
    let mut files = Vec::new();
    for s in &plan.steps {
        files.extend(step_files(s).with_context(|| s.dir.display().to_string())?);
    }
    let fresh = crate::load::plans::tables(&plan.rows)
        .map(|(csv, md)| vec![("steps.csv".into(), csv), ("steps.md".into(), md)]);
    files.extend(same_as_committed(dir, fresh, "table of its steps")?);
    if let Some(found) = &plan.search {
        let first = plan.steps.first().context("a search without steps")?;
        same_search_as_command(&found.search, &first.dir)?;
        let p = dir.join("search.json");
        if !same_json(&read_json(&p)?, &serde_json::to_value(found)?) {
            bail!("search.json differs from the answer its steps' records give");
        }
        files.push(p);
    }
    Ok(files)
}

/// The value of `--name` in a recorded command line (`--name V` or `--name=V`).
fn flag<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    let eq = format!("{name}=");
    argv.iter().enumerate().find_map(|(k, a)| {
        if a == name {
            argv.get(k + 1).map(String::as_str)
        } else {
            a.strip_prefix(&eq)
        }
    })
}

/// search.json's `search` (what decides whether a step met the objectives) against the command
/// the run recorded in a step's run.json, `run`'s defaults where it named none: a share or
/// target edited in search.json alone would change every step's verdict unseen.
fn same_search_as_command(how: &crate::load::plans::Search, step: &Path) -> Result<()> {
    let manifest = read_json(&step.join("run.json"))?;
    let argv: Vec<String> = serde_json::from_value(manifest["command"].clone())
        .with_context(|| format!("{}: its command", step.join("run.json").display()))?;
    let number = |name: &str, default: f64| -> Result<f64> {
        flag(&argv, name).map_or(Ok(default), |v| {
            v.parse()
                .with_context(|| format!("{name} {v:?} in the recorded command"))
        })
    };
    let by = match flag(&argv, "--search") {
        Some("rate") => crate::load::plans::SearchBy::Rate,
        Some("concurrency") => crate::load::plans::SearchBy::Concurrency,
        other => bail!("the recorded command searched by {other:?}, not rate or concurrency"),
    };
    let recorded = (
        by,
        number("--slo-share", 0.9)?,
        number("--precision", 0.1)?,
        number("--max-search-steps", 8.0)? as usize,
    );
    if recorded != (how.by, how.share, how.precision, how.max_steps) {
        bail!(
            "search.json's search ({:?}, share {}, precision {}, {} steps) is not the one its \
             command ran ({:?}, share {}, precision {}, {} steps)",
            how.by,
            how.share,
            how.precision,
            how.max_steps,
            recorded.0,
            recorded.1,
            recorded.2,
            recorded.3
        );
    }
    Ok(())
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
    files.extend(crosscheck_files(s)?);
    Ok(files)
}

/// The step's crosscheck.json and crosscheck.md against their re-derivation: present exactly when
/// its records hold something to check beyond the stream's own count.
fn crosscheck_files(s: &Step) -> Result<Vec<PathBuf>> {
    let path = s.dir.join("crosscheck.json");
    match (crate::load::crosscheck::of(&s.records), path.exists()) {
        (None, false) => Ok(Vec::new()),
        (None, true) => bail!("crosscheck.json is there, but its records hold nothing to check"),
        (Some(_), false) => bail!(
            "its records hold server timings or client counts, but crosscheck.json is missing \
             (moefleet-harness crosscheck DIR writes it)"
        ),
        (Some(c), true) => {
            if !same_json(&read_json(&path)?, &serde_json::to_value(&c)?) {
                bail!("crosscheck.json differs from the checks of its records");
            }
            let md = vec![("crosscheck.md".to_string(), c.markdown())];
            let mut files = vec![path];
            files.extend(same_as_committed(&s.dir, Ok(md), "cross-check")?);
            Ok(files)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_read_in_both_forms() {
        let argv: Vec<String> = [
            "h",
            "run",
            "--search",
            "rate",
            "--slo-share=0.8",
            "--out",
            "d",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(flag(&argv, "--search"), Some("rate"));
        assert_eq!(flag(&argv, "--slo-share"), Some("0.8"));
        assert_eq!(flag(&argv, "--precision"), None);
        assert_eq!(flag(&argv[..6], "--out"), None, "a flag with no value");
    }
}
