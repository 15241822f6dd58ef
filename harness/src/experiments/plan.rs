//! The main job: the registry's units in order into one run directory, each unit's wall time and
//! the load average at its start and end printed as it ends and kept in RUN/units.json, then
//! REPORT.md and `verify`. `make reproduce` runs it; `--only` runs chosen units (those outside the
//! main job too) into a run directory of one's choosing.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::registry::EXPERIMENTS;
use super::unit::{exec, Experiment, RunCtx};

/// One unit's entry in RUN/units.json (its latest run into this directory).
#[derive(Serialize, Deserialize)]
struct UnitTime {
    unit: String,
    seconds: f64,
    load_average_start: Option<[f64; 3]>,
    load_average_end: Option<[f64; 3]>,
    /// The unit failed after this long.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    failed: bool,
}

/// RUN/units.json as it stands (units run into this directory before, by an earlier `--only`),
/// empty when there is none.
fn earlier_times(run: &Path) -> Vec<UnitTime> {
    std::fs::read_to_string(run.join("units.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// The units `only` names (every one must exist), or the main job's when it is empty.
pub fn select(only: &[String]) -> Result<Vec<&'static dyn Experiment>> {
    if only.is_empty() {
        return Ok(EXPERIMENTS
            .iter()
            .copied()
            .filter(|e| e.in_main_job())
            .collect());
    }
    let mut out = Vec::new();
    for name in only {
        match EXPERIMENTS.iter().find(|e| e.name() == name) {
            Some(e) => out.push(*e),
            None => {
                let known: Vec<_> = EXPERIMENTS.iter().map(|e| e.name()).collect();
                bail!("no experiment named {name:?} (known: {})", known.join(", "));
            }
        }
    }
    Ok(out)
}

/// Run `units` into `ctx.run`; with `finish`, then REPORT.md and `verify` (the main job's end).
pub fn run(ctx: &RunCtx, units: &[&'static dyn Experiment], finish: bool) -> Result<()> {
    if !Path::new("scripts").is_dir() || !Path::new("workloads").is_dir() {
        bail!("run from the repository's root (its units read scripts/ and workloads/)");
    }
    let sweeps = units.iter().any(|u| u.name() == "sweep");
    if sweeps && ctx.run.join("run.json").exists() {
        bail!(
            "{} already holds a run; remove it or choose another directory",
            ctx.run.display()
        );
    }
    std::fs::create_dir_all(&ctx.run).with_context(|| format!("creating {}", ctx.run.display()))?;
    let mut times = earlier_times(&ctx.run);
    let t_all = Instant::now();
    for (i, unit) in units.iter().enumerate() {
        eprintln!(
            "reproduce: [{}/{}] {}: {}",
            i + 1,
            units.len(),
            unit.name(),
            unit.about()
        );
        let start = crate::host::load_average();
        let t0 = Instant::now();
        let done = unit.run(ctx);
        let seconds = t0.elapsed().as_secs_f64();
        // this run's time replaces an earlier one's; written after every unit, failed or not, so
        // an interrupted run still says what each unit took
        times.retain(|t| t.unit != unit.name());
        times.push(UnitTime {
            unit: unit.name().to_string(),
            seconds,
            load_average_start: start,
            load_average_end: crate::host::load_average(),
            failed: done.is_err(),
        });
        std::fs::write(
            ctx.run.join("units.json"),
            serde_json::to_string_pretty(&times)? + "\n",
        )?;
        done.with_context(|| format!("experiment {}", unit.name()))?;
        eprintln!(
            "reproduce: [{}/{}] {} took {seconds:.0} s (total {:.0} s)",
            i + 1,
            units.len(),
            unit.name(),
            t_all.elapsed().as_secs_f64()
        );
    }
    if finish {
        exec(ctx.harness().arg("report").arg(&ctx.run))?;
        exec(ctx.harness().arg("verify"))?;
        eprintln!(
            "reproduce: done in {:.0} s: {}",
            t_all.elapsed().as_secs_f64(),
            ctx.run.join("REPORT.md").display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_main_job_and_a_chosen_unit_are_selected_and_an_unknown_one_refused() {
        let main: Vec<_> = select(&[]).unwrap().iter().map(|e| e.name()).collect();
        assert_eq!(main[0], "sweep");
        assert!(!main.contains(&"peer"));
        let chosen = select(&["peer".into()]).unwrap();
        assert_eq!(chosen[0].name(), "peer");
        let e = format!("{:#}", select(&["nope".into()]).err().unwrap());
        assert!(
            e.contains("no experiment named \"nope\"") && e.contains("sweep"),
            "{e}"
        );
    }
}
