//! How a claim's number is derived from a record. Each rule names its file (relative to the
//! repository root) and its selector; `describe` is what CLAIMS.md prints.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};

use crate::csv::Table as Csv;
use crate::experiments::draft::anchors::Anchors;
use crate::experiments::draft::stats::{chain, expected_accepted, first_draft};
use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Rule {
    /// A number in a CSV table: the row whose `key_col` equals `key`, column `col`.
    CsvValue {
        file: String,
        key_col: String,
        key: String,
        col: String,
    },
    /// 1 if every row's `col` equals `equals`, else 0.
    CsvAll {
        file: String,
        col: String,
        equals: String,
    },
    /// The level of a curve.csv with the highest `q_decode_mean`.
    PeakLevel { file: String },
    /// A number in a JSON file, by JSON pointer (a boolean counts as 1 or 0), times `scale`
    /// when given (100 states a fraction in percent).
    JsonValue {
        file: String,
        pointer: String,
        #[serde(default)]
        scale: Option<f64>,
    },
    /// `(a − b) · 100` of two JSON numbers (percentage points).
    JsonDifferencePp { file: String, a: String, b: String },
    /// Mean of `col` over every row whose `key_col` is one of `numerator`, divided by the mean
    /// over the `denominator` rows (each key must match at least one row).
    CsvMeanRatio {
        file: String,
        key_col: String,
        col: String,
        numerator: Vec<String>,
        denominator: Vec<String>,
    },
    /// `num / den` of two other rules (e.g. a speedup measured side by side in one run).
    Ratio { num: Box<Rule>, den: Box<Rule> },
    /// Mean over the `mixed_a_*`/`mixed_b_*` rows of level `concurrency` of a published
    /// survey_phases.csv column (the paper's paired curve).
    PaperPairedMean {
        file: String,
        concurrency: usize,
        col: String,
    },
    /// The largest value of a CSV column.
    CsvMax { file: String, col: String },
    /// The mean of a CSV column over every row (e.g. a metric over a run's retained phases).
    CsvMean { file: String, col: String },
    /// Sum of JSON numbers (e.g. the paper's E = Σ prefix_k of its published chain rows).
    JsonSum { file: String, pointers: Vec<String> },
    /// Mean of the array of numbers at a JSON pointer (e.g. a benchmark's per-repetition rates,
    /// rather than the mean the benchmark wrote).
    JsonMean { file: String, pointer: String },
    /// Median of the array of numbers at a JSON pointer (e.g. per-call times of a timed run, so
    /// the claim is recomputed from the samples rather than read from the median the run wrote).
    JsonMedian { file: String, pointer: String },
    /// First-draft agreement (module 0's hit rate over every anchor, or one family's) of a
    /// prediction column of a draft replay's `anchors.csv.gz`, recomputed from every row; against
    /// the shuffled targets with `shuffled`.
    DraftAgreement {
        file: String,
        column: String,
        #[serde(default)]
        shuffled: bool,
        #[serde(default)]
        family: Option<String>,
    },
    /// `(agreement(a) − agreement(b)) · 100` of two prediction columns (percentage points).
    DraftDifferencePp { file: String, a: String, b: String },
    /// Expected accepted drafts `E = Σ_k prefix_k` of a prediction column (MEASUREMENTS.md §5).
    DraftExpected { file: String, column: String },
    /// A measure of two sides' greedy continuations of the same prompts (a GGUF parity run's raw
    /// JSON-lines records, `experiments::parity`), `candidate` against `reference`, recomputed
    /// token for token from both.
    GgufParity {
        reference: String,
        candidate: String,
        measure: crate::experiments::parity::Measure,
    },
    /// A load search's answer, or its goodput at the answer, recomputed from every step's
    /// per-request records (`load::rederive`; `dir` is the search's directory, ending in `/`).
    LoadSearch {
        dir: String,
        measure: crate::load::rederive::Measure,
    },
    /// One metric of a repeated step (A B B A against two servers, `load::repeat`): an arm's mean,
    /// B / A, or an end of its interval, recomputed from every run's per-request records (`dir`
    /// ending in `/`).
    LoadArms {
        dir: String,
        metric: String,
        measure: crate::load::arms::ArmMeasure,
    },
    /// One measure of one load step (a turn's, or a cross-check's), recomputed from its records.
    LoadStep(crate::load::measure::StepRule),
    /// A statistic across repeated runs' records (`claims::across`).
    JsonAcross(super::across::Across),
}

/// Anchor files this process has parsed, by the digest of their bytes (the newest four): a dozen
/// claims read each file.
static PARSED: crate::memo::Memo<Arc<Anchors>> = crate::memo::Memo::new(4);

fn anchors(root: &Path, file: &str) -> anyhow::Result<Arc<Anchors>> {
    let path = root.join(file);
    let bytes =
        std::fs::read(&path).with_context(|| format!("record {} is missing", path.display()))?;
    PARSED.get_or_derive(crate::memo::digest(&[&bytes]), || {
        Ok(Arc::new(Anchors::from_gz(&bytes, &path)?))
    })
}

/// First-draft agreement of `column` (against the shuffled targets with `shuffled`).
fn draft_agreement(
    a: &Anchors,
    column: &str,
    shuffled: bool,
    family: Option<&str>,
) -> anyhow::Result<f64> {
    let targets = if shuffled {
        &a.target_shuffled
    } else {
        &a.target
    };
    let g = first_draft(a, a.column(column)?, targets, family);
    if g.anchors == 0 {
        bail!(
            "no first-draft anchors{}",
            family
                .map(|f| format!(" of family {f}"))
                .unwrap_or_default()
        );
    }
    Ok(g.rate())
}

fn read(root: &Path, file: &str) -> anyhow::Result<String> {
    let p = root.join(file);
    std::fs::read_to_string(&p).with_context(|| format!("record {} is missing", p.display()))
}

/// The numbers at `pointers` in a JSON record.
fn json_number(root: &Path, file: &str, pointers: &[&String]) -> anyhow::Result<Vec<f64>> {
    let v: serde_json::Value = serde_json::from_str(&read(root, file)?)?;
    pointers
        .iter()
        .map(|p| {
            v.pointer(p)
                .and_then(|x| x.as_f64())
                .ok_or_else(|| anyhow!("{file}: no number at {p}"))
        })
        .collect()
}

/// The non-empty array of numbers at `pointer` in a JSON record.
fn json_array(root: &Path, file: &str, pointer: &str) -> anyhow::Result<Vec<f64>> {
    let v: serde_json::Value = serde_json::from_str(&read(root, file)?)?;
    let xs: Vec<f64> = v
        .pointer(pointer)
        .and_then(|x| x.as_array())
        .ok_or_else(|| anyhow!("{file}: no array at {pointer}"))?
        .iter()
        .map(|x| {
            x.as_f64()
                .ok_or_else(|| anyhow!("{file}: {pointer} holds a non-number"))
        })
        .collect::<anyhow::Result<_>>()?;
    if xs.is_empty() {
        bail!("{file}: the array at {pointer} is empty");
    }
    Ok(xs)
}

impl Rule {
    /// Every file the rule reads (relative to the repository root), for verify's check that each
    /// is re-derived from raw data or listed as not re-derivable.
    pub fn files(&self) -> Vec<&str> {
        match self {
            Rule::Ratio { num, den } => {
                let mut v = num.files();
                v.extend(den.files());
                v
            }
            Rule::GgufParity {
                reference,
                candidate,
                ..
            } => vec![reference.as_str(), candidate.as_str()],
            Rule::LoadSearch { dir, .. } | Rule::LoadArms { dir, .. } => vec![dir.as_str()],
            Rule::LoadStep(r) => vec![r.dir.as_str()],
            Rule::JsonAcross(r) => r.files.iter().map(String::as_str).collect(),
            Rule::CsvValue { file, .. }
            | Rule::CsvAll { file, .. }
            | Rule::PeakLevel { file }
            | Rule::JsonValue { file, .. }
            | Rule::JsonDifferencePp { file, .. }
            | Rule::CsvMeanRatio { file, .. }
            | Rule::PaperPairedMean { file, .. }
            | Rule::CsvMax { file, .. }
            | Rule::CsvMean { file, .. }
            | Rule::JsonSum { file, .. }
            | Rule::JsonMean { file, .. }
            | Rule::JsonMedian { file, .. }
            | Rule::DraftAgreement { file, .. }
            | Rule::DraftDifferencePp { file, .. }
            | Rule::DraftExpected { file, .. } => vec![file.as_str()],
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Rule::CsvValue {
                file,
                key_col,
                key,
                col,
            } => format!("`{file}`: row {key_col} = {key}, column `{col}`"),
            Rule::CsvAll { file, col, equals } => {
                format!("`{file}`: every row has `{col}` = {equals} (1 = yes)")
            }
            Rule::PeakLevel { file } => {
                format!("`{file}`: the level with the highest `q_decode_mean`")
            }
            Rule::JsonValue {
                file,
                pointer,
                scale,
            } => match scale {
                Some(k) => format!("`{file}` at `{pointer}` × {k}"),
                None => format!("`{file}` at `{pointer}`"),
            },
            Rule::Ratio { num, den } => format!("({}) / ({})", num.describe(), den.describe()),
            Rule::JsonDifferencePp { file, a, b } => format!("`{file}`: (`{a}` − `{b}`) × 100"),
            Rule::CsvMeanRatio {
                file,
                key_col,
                col,
                numerator,
                denominator,
            } => format!(
                "`{file}`: mean `{col}` over {key_col} in [{}] / mean over [{}]",
                numerator.join(", "),
                denominator.join(", ")
            ),
            Rule::PaperPairedMean {
                file,
                concurrency,
                col,
            } => {
                format!("`{file}`: mean of `{col}` over the two phases at C = {concurrency}")
            }
            Rule::CsvMax { file, col } => format!("`{file}`: the largest `{col}`"),
            Rule::CsvMean { file, col } => format!("`{file}`: mean of `{col}` over its rows"),
            Rule::JsonSum { file, pointers } => {
                format!(
                    "`{file}`: sum at {}",
                    pointers
                        .iter()
                        .map(|p| format!("`{p}`"))
                        .collect::<Vec<_>>()
                        .join(" + ")
                )
            }
            Rule::JsonMean { file, pointer } => {
                format!("`{file}`: mean of the numbers at `{pointer}`")
            }
            Rule::JsonMedian { file, pointer } => {
                format!("`{file}`: median of the numbers at `{pointer}`")
            }
            Rule::DraftAgreement {
                file,
                column,
                shuffled,
                family,
            } => {
                format!(
                "`{file}`: first-draft hit rate of `{column}`{}{}, recomputed from every anchor",
                if *shuffled { " against the shuffled targets" } else { "" },
                family.as_ref().map(|f| format!(" ({f} only)")).unwrap_or_default()
            )
            }
            Rule::DraftDifferencePp { file, a, b } => {
                format!("`{file}`: first-draft hit rate of `{a}` − `{b}`, × 100")
            }
            Rule::DraftExpected { file, column } => {
                format!("`{file}`: E = Σ_k prefix_k of `{column}`, recomputed from every anchor")
            }
            Rule::GgufParity {
                reference,
                candidate,
                measure,
            } => format!(
                "`{candidate}` against `{reference}`: {}, recomputed token for token from both",
                measure.describe()
            ),
            Rule::LoadSearch { dir, measure } => format!(
                "`{dir}`: {}, recomputed from every step's per-request records",
                measure.describe()
            ),
            Rule::LoadArms {
                dir,
                metric,
                measure,
            } => format!(
                "`{dir}`: {metric}, {}, recomputed from every run's per-request records",
                measure.describe()
            ),
            Rule::LoadStep(r) => r.describe(),
            Rule::JsonAcross(r) => r.describe(),
        }
    }

    pub fn eval(&self, root: &Path) -> anyhow::Result<f64> {
        match self {
            Rule::CsvValue {
                file,
                key_col,
                key,
                col,
            } => csv_value(root, file, key_col, key, col),
            Rule::CsvAll { file, col, equals } => csv_all(root, file, col, equals),
            Rule::PeakLevel { file } => peak_level(root, file),
            Rule::JsonValue {
                file,
                pointer,
                scale,
            } => {
                let v: serde_json::Value = serde_json::from_str(&read(root, file)?)?;
                v.pointer(pointer)
                    .and_then(|x| x.as_f64().or_else(|| x.as_bool().map(f64::from)))
                    .map(|x| x * scale.unwrap_or(1.0))
                    .ok_or_else(|| anyhow!("{file}: no number or boolean at {pointer}"))
            }
            Rule::Ratio { num, den } => {
                let d = den.eval(root)?;
                if d == 0.0 {
                    bail!("ratio with a zero denominator ({})", den.describe());
                }
                Ok(num.eval(root)? / d)
            }
            Rule::JsonDifferencePp { file, a, b } => {
                let v = json_number(root, file, &[a, b])?;
                Ok((v[0] - v[1]) * 100.0)
            }
            Rule::CsvMeanRatio {
                file,
                key_col,
                col,
                numerator,
                denominator,
            } => csv_mean_ratio(root, file, key_col, col, numerator, denominator),
            Rule::PaperPairedMean {
                file,
                concurrency,
                col,
            } => paper_paired_mean(root, file, *concurrency, col),
            Rule::CsvMax { file, col } => csv_max(root, file, col),
            Rule::CsvMean { file, col } => csv_mean(root, file, col),
            Rule::JsonSum { file, pointers } => {
                let ps: Vec<&String> = pointers.iter().collect();
                if ps.is_empty() {
                    bail!("json_sum over no pointers");
                }
                Ok(json_number(root, file, &ps)?.iter().sum())
            }
            Rule::JsonMean { file, pointer } => {
                let xs = json_array(root, file, pointer)?;
                Ok(xs.iter().sum::<f64>() / xs.len() as f64)
            }
            Rule::JsonMedian { file, pointer } => {
                Ok(crate::stats::median(json_array(root, file, pointer)?))
            }
            Rule::DraftAgreement {
                file,
                column,
                shuffled,
                family,
            } => draft_agreement(&*anchors(root, file)?, column, *shuffled, family.as_deref())
                .with_context(|| file.clone()),
            Rule::DraftDifferencePp { file, a, b } => {
                let t = anchors(root, file)?;
                Ok(100.0
                    * (draft_agreement(&t, a, false, None)? - draft_agreement(&t, b, false, None)?))
            }
            Rule::DraftExpected { file, column } => {
                let t = anchors(root, file)?;
                Ok(expected_accepted(&chain(&t, t.column(column)?)))
            }
            Rule::GgufParity {
                reference,
                candidate,
                measure,
            } => crate::experiments::parity::measure(
                &root.join(reference),
                &root.join(candidate),
                *measure,
            ),
            Rule::LoadSearch { dir, measure } => measure.of(&root.join(dir)),
            Rule::LoadArms {
                dir,
                metric,
                measure,
            } => measure.of(&root.join(dir), metric),
            Rule::LoadStep(r) => r.of(root),
            Rule::JsonAcross(r) => r.of(root),
        }
    }
}

/// The number in column `col` of the row whose `key_col` equals `key` (`Rule::CsvValue`).
fn csv_value(root: &Path, file: &str, key_col: &str, key: &str, col: &str) -> anyhow::Result<f64> {
    let t = Csv::parse(&read(root, file)?);
    let (k, c) = (t.index(key_col)?, t.index(col)?);
    let row = t
        .rows
        .iter()
        .find(|r| r.get(k).map(String::as_str) == Some(key))
        .ok_or_else(|| anyhow!("{file}: no row with {key_col} = {key}"))?;
    t.num(row, c)
}

/// 1 if every row's `col` equals `equals`, else 0; an empty table is an error (`Rule::CsvAll`).
fn csv_all(root: &Path, file: &str, col: &str, equals: &str) -> anyhow::Result<f64> {
    let t = Csv::parse(&read(root, file)?);
    let c = t.index(col)?;
    if t.rows.is_empty() {
        bail!("{file} has no rows");
    }
    Ok(t.rows
        .iter()
        .all(|r| r.get(c).map(String::as_str) == Some(equals)) as u8 as f64)
}

/// The concurrency of the curve row with the highest `q_decode_mean` (`Rule::PeakLevel`).
fn peak_level(root: &Path, file: &str) -> anyhow::Result<f64> {
    let t = Csv::parse(&read(root, file)?);
    let (c, q) = (t.index("concurrency")?, t.index("q_decode_mean")?);
    let mut best: Option<(f64, f64)> = None;
    for r in &t.rows {
        if let Ok(v) = t.num(r, q) {
            if best.is_none_or(|b| v > b.1) {
                best = Some((t.num(r, c)?, v));
            }
        }
    }
    best.map(|b| b.0)
        .ok_or_else(|| anyhow!("{file} has no Q_decode values"))
}

/// Mean of `col` over the `numerator` rows over that of the `denominator` rows.
fn csv_mean_ratio(
    root: &Path,
    file: &str,
    key_col: &str,
    col: &str,
    numerator: &[String],
    denominator: &[String],
) -> anyhow::Result<f64> {
    let t = Csv::parse(&read(root, file)?);
    let (k, c) = (t.index(key_col)?, t.index(col)?);
    let mean = |keys: &[String]| -> anyhow::Result<f64> {
        let hit = |r: &&Vec<String>| r.get(k).is_some_and(|v| keys.contains(v));
        let vals: Vec<f64> = t
            .rows
            .iter()
            .filter(hit)
            .map(|r| t.num(r, c))
            .collect::<anyhow::Result<_>>()?;
        if let Some(missing) = keys
            .iter()
            .find(|key| !t.rows.iter().any(|r| r.get(k) == Some(*key)))
        {
            bail!("{file}: no row with {key_col} = {missing}");
        }
        Ok(vals.iter().sum::<f64>() / vals.len() as f64)
    };
    Ok(mean(numerator)? / mean(denominator)?)
}

/// Mean of `col` over the two `mixed_a_*`/`mixed_b_*` rows at `concurrency`.
fn paper_paired_mean(
    root: &Path,
    file: &str,
    concurrency: usize,
    col: &str,
) -> anyhow::Result<f64> {
    let t = Csv::parse(&read(root, file)?);
    let (p, c, v) = (t.index("phase")?, t.index("concurrency")?, t.index(col)?);
    let vals: Vec<f64> = t
        .rows
        .iter()
        .filter(|r| {
            r.get(p)
                .is_some_and(|x| x.starts_with("mixed_a_") || x.starts_with("mixed_b_"))
        })
        .filter(|r| t.num(r, c).ok() == Some(concurrency as f64))
        .map(|r| t.num(r, v))
        .collect::<anyhow::Result<_>>()?;
    if vals.len() != 2 {
        bail!(
            "{file}: {} phases at C = {concurrency}, expected 2",
            vals.len()
        );
    }
    Ok(vals.iter().sum::<f64>() / 2.0)
}

/// The largest value of a CSV column (`Rule::CsvMax`).
fn csv_max(root: &Path, file: &str, col: &str) -> anyhow::Result<f64> {
    let t = Csv::parse(&read(root, file)?);
    let c = t.index(col)?;
    t.rows
        .iter()
        .map(|r| t.num(r, c))
        .collect::<anyhow::Result<Vec<f64>>>()?
        .into_iter()
        .reduce(f64::max)
        .ok_or_else(|| anyhow!("{file} has no rows"))
}

/// The mean of a CSV column over every row; an empty table is an error (`Rule::CsvMean`).
fn csv_mean(root: &Path, file: &str, col: &str) -> anyhow::Result<f64> {
    let t = Csv::parse(&read(root, file)?);
    let c = t.index(col)?;
    let v = t
        .rows
        .iter()
        .map(|r| t.num(r, c))
        .collect::<anyhow::Result<Vec<f64>>>()?;
    if v.is_empty() {
        return Err(anyhow!("{file} has no rows"));
    }
    Ok(v.iter().sum::<f64>() / v.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_mean_averages_the_array_and_names_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("b.json"),
            r#"{"r": [{"tok_s": [1.0, 2.0, 6.0]}, {"tok_s": []}, {"tok_s": [1, "x"]}]}"#,
        )
        .unwrap();
        let rule = |p: &str| Rule::JsonMean {
            file: "b.json".into(),
            pointer: p.into(),
        };
        assert_eq!(rule("/r/0/tok_s").eval(dir.path()).unwrap(), 3.0);
        let median = Rule::JsonMedian {
            file: "b.json".into(),
            pointer: "/r/0/tok_s".into(),
        };
        assert_eq!(median.eval(dir.path()).unwrap(), 2.0);
        for (p, why) in [
            ("/r/1/tok_s", "empty"),
            ("/r/2/tok_s", "non-number"),
            ("/r/9", "no array"),
        ] {
            let e = rule(p).eval(dir.path()).unwrap_err().to_string();
            assert!(e.contains(why), "{p}: {e}");
        }
    }

    #[test]
    fn csv_mean_averages_every_row_and_refuses_an_empty_table() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.csv"), "phase,x\na,1.5\nb,2.5\nc,5\n").unwrap();
        std::fs::write(dir.path().join("e.csv"), "phase,x\n").unwrap();
        let rule = |f: &str| Rule::CsvMean {
            file: f.into(),
            col: "x".into(),
        };
        assert_eq!(rule("a.csv").eval(dir.path()).unwrap(), 3.0);
        let e = rule("e.csv").eval(dir.path()).unwrap_err().to_string();
        assert!(e.contains("no rows"), "{e}");
    }
}
