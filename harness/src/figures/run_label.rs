//! The line under a figure's title that names its run: model, plan, host, date and engine commit,
//! read from the run's own record (`run.json`, `context_run.json`, `dense.json`, `replay.json`),
//! never from the directory the figure is written to. What a record does not hold is said to be
//! missing, not guessed.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

/// What names a run. Every field is as recorded (`None`: the record does not say).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunLabel {
    pub model: Option<String>,
    pub plan: Option<String>,
    /// CPU and logical CPUs.
    pub host: Option<String>,
    /// `YYYY-MM-DD` (UTC) of the run's start.
    pub date: Option<String>,
    /// `engine 1234abc` (the server's commit) or `git 1234abc` (the harness checkout's).
    pub commit: Option<String>,
}

impl RunLabel {
    /// From any of the harness's run records.
    pub fn from_record(v: &Value) -> RunLabel {
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        let model = s("/model")
            .or_else(|| s("/model_name"))
            .or_else(|| s("/model/preset/name"));
        let plan = s("/plan/name").or_else(|| s("/plan"));
        let host = s("/host/cpu").map(|cpu| {
            match v.pointer("/host/logical_cpus").and_then(Value::as_u64) {
                Some(n) => format!("{cpu} ({n} CPUs)"),
                None => cpu,
            }
        });
        let epoch = v
            .pointer("/start")
            .and_then(Value::as_f64)
            .or_else(|| v.pointer("/host/epoch_s").and_then(Value::as_f64));
        let date = s("/host/date_utc")
            .or_else(|| epoch.map(|e| crate::host::utc_date_time(e as u64)))
            .map(|d| d.chars().take(10).collect());
        let short = |c: String| c.chars().take(7).collect::<String>();
        let commit = s("/engine_commit")
            .map(|c| format!("engine {}", short(c)))
            .or_else(|| s("/git_commit").map(|c| format!("git {}", short(c))));
        RunLabel {
            model,
            plan,
            host,
            date,
            commit,
        }
    }

    /// From a record file.
    pub fn read(path: &Path) -> anyhow::Result<RunLabel> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(RunLabel::from_record(&v))
    }

    /// Several runs drawn in one figure: a field they share once, one that differs as `a / b`.
    pub fn join(labels: &[RunLabel]) -> RunLabel {
        let f = |get: &dyn Fn(&RunLabel) -> &Option<String>| -> Option<String> {
            let mut seen: Vec<String> = Vec::new();
            for l in labels {
                let v = get(l).clone().unwrap_or_else(|| "?".into());
                if !seen.contains(&v) {
                    seen.push(v);
                }
            }
            (!seen.is_empty() && seen != ["?"]).then(|| seen.join(" / "))
        };
        RunLabel {
            model: f(&|l| &l.model),
            plan: f(&|l| &l.plan),
            host: f(&|l| &l.host),
            date: f(&|l| &l.date),
            commit: f(&|l| &l.commit),
        }
    }

    /// `inkling-mini; plan paper; AMD EPYC (2 CPUs); 2026-12-01; git a7032d4`.
    pub fn line(&self) -> String {
        let or = |x: &Option<String>, what: &str| x.clone().unwrap_or_else(|| what.to_string());
        let mut parts = vec![or(&self.model, "model not recorded")];
        if let Some(p) = &self.plan {
            parts.push(format!("plan {p}"));
        }
        parts.push(or(&self.host, "host not recorded"));
        parts.push(or(&self.date, "date not recorded"));
        parts.push(or(&self.commit, "commit not recorded"));
        parts.join("; ")
    }
}

/// Draw `title` and, under it, the run line; returns the area below them.
pub fn titled<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    size: u32,
    run: &str,
) -> Result<DrawingArea<DB, Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    let area = area.titled(title, ("sans-serif", size))?;
    if run.is_empty() {
        return Ok(area);
    }
    area.titled(
        run,
        ("sans-serif", 15).into_font().color(&RGBColor(90, 90, 90)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_record_names_its_run() {
        let v: Value = serde_json::from_str(
            r#"{"model":"inkling-mini","plan":{"name":"paper"},"host":{"cpu":"AMD EPYC","logical_cpus":2},
                "start":1796105211.99,"git_commit":"a7032d49b20d852f5ff128be16755fa8de8a4106","engine_commit":null}"#,
        )
        .unwrap();
        let l = RunLabel::from_record(&v);
        assert_eq!(
            l.line(),
            "inkling-mini; plan paper; AMD EPYC (2 CPUs); 2026-12-01; git a7032d4"
        );
    }

    #[test]
    fn other_records_and_joins() {
        let dense: Value = serde_json::from_str(
            r#"{"model":"inkling","host":{"cpu":"AMD EPYC","date_utc":"2026-11-29T12:26:53Z"},"engine_commit":"1500c615c71c"}"#,
        )
        .unwrap();
        let replay: Value =
            serde_json::from_str(r#"{"model":{"preset":{"name":"inkling-mini"}}}"#).unwrap();
        let (a, b) = (
            RunLabel::from_record(&dense),
            RunLabel::from_record(&replay),
        );
        assert_eq!(a.line(), "inkling; AMD EPYC; 2026-11-29; engine 1500c61");
        assert_eq!(
            b.line(),
            "inkling-mini; host not recorded; date not recorded; commit not recorded"
        );
        let j = RunLabel::join(&[a.clone(), a.clone()]);
        assert_eq!(j, a);
        let j = RunLabel::join(&[a, b]);
        assert_eq!(j.model.as_deref(), Some("inkling / inkling-mini"));
        assert_eq!(j.date.as_deref(), Some("2026-11-29 / ?"));
    }
}
