//! The main job: the registry's units in order into one run directory, each unit's wall time and
//! the load average at its start and end printed as it ends and kept in RUN/units.json (with the
//! host it ran on), then REPORT.md and `verify`. `make reproduce` runs it; `--only` runs chosen units (those outside the
//! main job too) into a run directory of one's choosing.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::registry::{experiment, EXPERIMENTS};
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

/// RUN/units.json: the host the units ran on (CPU family/model, SIMD flags, the kernels'
/// instruction set: `host::facts`) and each unit's latest time.
#[derive(Serialize, Deserialize)]
struct UnitTimes {
    host: serde_json::Value,
    units: Vec<UnitTime>,
}

/// The units' times already in RUN/units.json (run into this directory before, by an earlier
/// `--only`), none when there is no such file. The file names one host for every unit, so times
/// taken on another host (another CPU family/model or kernel ISA) are dropped, saying so.
fn earlier_times(run: &Path, host: &serde_json::Value) -> Vec<UnitTime> {
    let Some(earlier) = std::fs::read_to_string(run.join("units.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<UnitTimes>(&t).ok())
    else {
        return Vec::new();
    };
    let same = ["cpu_family", "cpu_model", "isa"]
        .iter()
        .all(|k| earlier.host.get(k) == host.get(k));
    if !same && !earlier.units.is_empty() {
        eprintln!(
            "reproduce: {} holds unit times from another host; they are dropped",
            run.join("units.json").display()
        );
        return Vec::new();
    }
    earlier.units
}

/// The units `only` names (every one must exist), or the main job's when it is empty; with
/// `model` (a checkpoint to serve), `only` must name units that take one.
pub fn select(only: &[String], model: bool) -> Result<Vec<&'static dyn Experiment>> {
    if model && only.is_empty() {
        bail!(
            "--model needs --only naming the experiments that serve it ({})",
            takers()
        );
    }
    if only.is_empty() {
        return Ok(EXPERIMENTS
            .iter()
            .copied()
            .filter(|e| e.in_main_job())
            .collect());
    }
    let mut out = Vec::new();
    for name in only {
        match experiment(name) {
            Some(e) if model && !e.takes_model() => {
                bail!(
                    "{name} does not serve a --model (those that do: {})",
                    takers()
                );
            }
            Some(e) => out.push(e),
            None => {
                let known: Vec<_> = EXPERIMENTS.iter().map(|e| e.name()).collect();
                bail!("no experiment named {name:?} (known: {})", known.join(", "));
            }
        }
    }
    Ok(out)
}

/// The units that serve a `--model`.
fn takers() -> String {
    let names: Vec<_> = EXPERIMENTS
        .iter()
        .filter(|e| e.takes_model())
        .map(|e| e.name())
        .collect();
    names.join(", ")
}

/// Run `units` into `ctx.run`; with `finish`, then REPORT.md and `verify` (the main job's end).
pub fn run(ctx: &RunCtx, units: &[&'static dyn Experiment], finish: bool) -> Result<()> {
    let sweeps = units.iter().any(|u| u.name() == "sweep");
    if sweeps && ctx.run.join("run.json").exists() {
        bail!(
            "{} already holds a run; remove it or choose another directory",
            ctx.run.display()
        );
    }
    std::fs::create_dir_all(&ctx.run).with_context(|| format!("creating {}", ctx.run.display()))?;
    let host = crate::host::facts();
    let earlier = earlier_times(&ctx.run, &host);
    let mut times = UnitTimes {
        host,
        units: earlier,
    };
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
        times.units.retain(|t| t.unit != unit.name());
        times.units.push(UnitTime {
            unit: unit.name().to_string(),
            seconds,
            load_average_start: start,
            load_average_end: crate::host::load_average(),
            failed: done.is_err(),
        });
        crate::json::write(&ctx.run.join("units.json"), &times)?;
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

    /// A unit that only fails or succeeds.
    struct Fake(&'static str, bool);

    impl Experiment for Fake {
        fn name(&self) -> &'static str {
            self.0
        }
        fn about(&self) -> &'static str {
            "a test unit"
        }
        fn run(&self, _: &RunCtx) -> Result<()> {
            if self.1 {
                Ok(())
            } else {
                bail!("it broke")
            }
        }
    }

    /// RUN/units.json names the host and every unit run into the directory: a unit run again
    /// replaces its entry, a failed unit is recorded (marked) and stops the run.
    #[test]
    fn units_json_names_the_host_and_keeps_each_units_latest_time() {
        let t = tempfile::tempdir().unwrap();
        let ctx = RunCtx {
            run: t.path().join("run"),
            bin: t.path().into(),
            plan: super::super::unit::Plan::Quick,
            preset: "inkling-nano".into(),
            roles: 1,
            context: Default::default(),
            model: None,
        };
        static A: Fake = Fake("a", true);
        static B: Fake = Fake("b", false);
        static C: Fake = Fake("c", true);
        run(&ctx, &[&A, &C], false).unwrap();
        let e = format!("{:#}", run(&ctx, &[&C, &B, &A], false).unwrap_err());
        assert!(e.contains("experiment b") && e.contains("it broke"), "{e}");
        let text = std::fs::read_to_string(ctx.run.join("units.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(
            v["host"]["isa"].is_string() && v["host"]["cpu_family"].is_u64(),
            "{v}"
        );
        let units: Vec<(&str, bool)> = v["units"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| (u["unit"].as_str().unwrap(), u["failed"] == true))
            .collect();
        assert_eq!(units, [("a", false), ("c", false), ("b", true)]);
        // times from another host are not kept under this one's name
        let mut other = v.clone();
        other["host"]["cpu_family"] = serde_json::json!(9999);
        std::fs::write(ctx.run.join("units.json"), other.to_string()).unwrap();
        run(&ctx, &[&A], false).unwrap();
        let text = std::fs::read_to_string(ctx.run.join("units.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["units"].as_array().unwrap().len(), 1, "{v}");
    }

    #[test]
    fn the_main_job_and_a_chosen_unit_are_selected_and_an_unknown_one_refused() {
        let main: Vec<_> = select(&[], false)
            .unwrap()
            .iter()
            .map(|e| e.name())
            .collect();
        assert_eq!(main[0], "sweep");
        assert!(!main.contains(&"peer"));
        let chosen = select(&["peer".into()], false).unwrap();
        assert_eq!(chosen[0].name(), "peer");
        let e = format!("{:#}", select(&["nope".into()], false).err().unwrap());
        assert!(
            e.contains("no experiment named \"nope\"") && e.contains("sweep"),
            "{e}"
        );
        // a checkpoint goes only to the units that serve one, named
        let both = ["draft".into(), "speculation".into()];
        assert_eq!(select(&both, true).unwrap().len(), 2);
        let e = format!("{:#}", select(&["sweep".into()], true).err().unwrap());
        assert!(
            e.contains("sweep does not serve a --model") && e.contains("draft, speculation"),
            "{e}"
        );
        let e = format!("{:#}", select(&[], true).err().unwrap());
        assert!(e.contains("--model needs --only"), "{e}");
    }
}
