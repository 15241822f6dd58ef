//! A claim over repeated runs: one number read from each of several records (a ratio of two
//! numbers of each, when asked), and a statistic of those values across the records: their
//! median, or the lowest or highest as the spread. A run measured once on a shared machine can
//! land anywhere in that spread, so a claim of a share of bandwidth states it over runs.

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use serde::Deserialize;

/// The statistic across the records.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Stat {
    Median,
    Min,
    Max,
}

/// `stat` over `files` of the number at `pointer` in each (divided by the number at `over` in the
/// same record, when given: a ratio measured side by side within each run).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Across {
    pub files: Vec<String>,
    pub pointer: String,
    #[serde(default)]
    pub over: Option<String>,
    pub stat: Stat,
}

fn number(v: &serde_json::Value, file: &str, pointer: &str) -> anyhow::Result<f64> {
    v.pointer(pointer)
        .and_then(serde_json::Value::as_f64)
        .ok_or_else(|| anyhow!("{file}: no number at {pointer}"))
}

impl Across {
    /// Each record's value, in the order of `files`.
    pub fn values(&self, root: &Path) -> anyhow::Result<Vec<f64>> {
        if self.files.is_empty() {
            bail!("a claim across runs names no records");
        }
        self.files
            .iter()
            .map(|f| {
                let p = root.join(f);
                let text = std::fs::read_to_string(&p)
                    .with_context(|| format!("record {} is missing", p.display()))?;
                let v: serde_json::Value =
                    serde_json::from_str(&text).with_context(|| format!("{f}: not JSON"))?;
                let x = number(&v, f, &self.pointer)?;
                match &self.over {
                    Some(o) => Ok(x / number(&v, f, o)?),
                    None => Ok(x),
                }
            })
            .collect()
    }

    pub fn of(&self, root: &Path) -> anyhow::Result<f64> {
        let v = self.values(root)?;
        let got = match self.stat {
            Stat::Median => crate::stats::quantile(&v, 0.5),
            Stat::Min => v.iter().copied().reduce(f64::min),
            Stat::Max => v.iter().copied().reduce(f64::max),
        };
        got.context("no values across the runs")
    }

    pub fn describe(&self) -> String {
        let what = match &self.over {
            Some(o) => format!("`{}` / `{o}` of each", self.pointer),
            None => format!("`{}` of each", self.pointer),
        };
        let stat = match self.stat {
            Stat::Median => "median",
            Stat::Min => "lowest",
            Stat::Max => "highest",
        };
        let files: Vec<String> = self.files.iter().map(|f| format!("`{f}`")).collect();
        format!(
            "{stat} over {} runs of {what}: {}",
            files.len(),
            files.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statistic_of_each_records_number_or_ratio() {
        let t = tempfile::tempdir().unwrap();
        for (k, (a, b)) in [(1.0, 2.0), (3.0, 2.0), (8.0, 4.0)].iter().enumerate() {
            let v = serde_json::json!({"m": {"a": a, "b": b}});
            std::fs::write(t.path().join(format!("{k}.json")), v.to_string()).unwrap();
        }
        let rule = |stat, over: Option<&str>| Across {
            files: (0..3).map(|k| format!("{k}.json")).collect(),
            pointer: "/m/a".into(),
            over: over.map(str::to_string),
            stat,
        };
        assert_eq!(rule(Stat::Median, None).of(t.path()).unwrap(), 3.0);
        assert_eq!(rule(Stat::Min, None).of(t.path()).unwrap(), 1.0);
        assert_eq!(rule(Stat::Max, Some("/m/b")).of(t.path()).unwrap(), 2.0);
        assert_eq!(rule(Stat::Min, Some("/m/b")).of(t.path()).unwrap(), 0.5);
        let mut missing = rule(Stat::Median, None);
        missing.pointer = "/m/c".into();
        assert!(missing.of(t.path()).is_err());
        missing.files.clear();
        assert!(missing.of(t.path()).is_err());
    }
}
