//! What repeated runs measured, and the intervals over their blocks (docs/MEASUREMENTS.md §9).
//! Each run is a directory `OUT/NN-ARM-BLOCK/` (`repeat`); what is compared across runs depends on
//! what a run is:
//!
//! - one step: its throughput, latency quantiles and share meeting the objectives (`METRICS`);
//! - a sweep or a search: those of its two bounds, one request at a time and every request at
//!   once (under the cap; in a concurrency search, its step at the cap), the steps every such
//!   plan runs at the same load; a search adds its answer (the
//!   highest load that met the objectives, the lowest that missed) and the goodput at the answer.
//!   A sweep's rate steps are left out: their rates come from each run's own bounds, so no two
//!   runs share them;
//! - a paired concurrency sweep: each level's Q_decode, Q_phase and median TTFT (MEASUREMENTS
//!   §2), by the plain-loop formulas of `analysis::reference`.
//!
//! `OUT/arms.csv` has one row per run and value; `OUT/arms.md` gives per value each arm's mean
//! over its runs and, with two arms, B / A, each with a percentile bootstrap interval over blocks:
//! blocks are drawn with replacement (a block's A and B runs together, which pairs the arms
//! within a block), each arm's mean taken over the drawn blocks' runs, and B / A as the ratio of
//! those means. B / A and its draws use only the blocks where both arms measured the value: a
//! block that lost one arm's value drops out of the ratio, not out of one side of it. With few
//! blocks the interval is coarse (three blocks give at most ten distinct draws); the table says
//! how many there were. The draws are seeded, so `verify` re-derives the table from the runs'
//! records.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context};
use moefleet_engine::rng::Rng;

use super::latency::Summary;
use super::plans::SearchBy;
use super::rederive;
use crate::stats::{mean, quantile};

/// What is compared across runs of one step: name, unit, and its value in the step's summary.
type Metric = (&'static str, &'static str, fn(&Summary) -> Option<f64>);

const METRICS: [Metric; 9] = [
    ("output tokens/s", "tok/s", |s| Some(s.output_tokens_per_s)),
    ("requests/s", "req/s", |s| Some(s.requests_per_s)),
    ("TTFT p50", "ms", |s| s.ttft.map(|q| q.p50 * 1e3)),
    ("TTFT p99", "ms", |s| s.ttft.map(|q| q.p99 * 1e3)),
    ("TPOT p50", "ms", |s| s.tpot.map(|q| q.p50 * 1e3)),
    ("TPOT p99", "ms", |s| s.tpot.map(|q| q.p99 * 1e3)),
    ("ITL p50", "ms", |s| s.itl.map(|q| q.p50 * 1e3)),
    ("E2E p50", "ms", |s| s.e2e.map(|q| q.p50 * 1e3)),
    ("meeting objectives", "%", |s| {
        Some(100.0 * s.good_requests as f64 / s.requests.max(1) as f64)
    }),
];

/// The bounds of a sweep or search that every run shares: (step name, label in the table).
const BOUNDS: [(&str, &str); 2] = [
    ("synchronous", "one at a time"),
    ("throughput", "all at once"),
];

/// Bootstrap draws of the block means, and the two-sided confidence of the intervals.
pub const RESAMPLES: usize = 2000;
pub const CONFIDENCE: f64 = 0.95;
const SEED: u64 = 1;

/// One value a run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub metric: String,
    pub unit: &'static str,
    pub value: f64,
}

fn value(metric: impl Into<String>, unit: &'static str, v: Option<f64>) -> Option<Value> {
    v.filter(|v| v.is_finite()).map(|value| Value {
        metric: metric.into(),
        unit,
        value,
    })
}

fn of_summary(prefix: &str, s: &Summary) -> Vec<Value> {
    (METRICS.iter())
        .filter_map(|(name, unit, f)| value(format!("{prefix}{name}"), unit, f(s)))
        .collect()
}

/// What the run in `dir` measured (module header), recomputed from its records.
pub fn measured(dir: &Path) -> anyhow::Result<Vec<Value>> {
    if dir.join("phases.jsonl").is_file() {
        return paired(dir);
    }
    if dir.join("traces.jsonl.gz").is_file() {
        return Ok(of_summary("", &rederive::step(dir)?.summary));
    }
    let plan = rederive::plan(dir)?;
    let mut v = Vec::new();
    // a concurrency search's all-at-once step is the one at its cap, its highest concurrency
    let at_cap = (plan.steps.iter())
        .filter_map(|s| Some((s.name.strip_prefix("concurrency-")?.parse().ok()?, s)))
        .max_by_key(|&(c, _): &(usize, _)| c)
        .map(|(_, s)| s);
    for (step, label) in BOUNDS {
        let found = plan.steps.iter().find(|s| s.name == step);
        let found = found.or(at_cap.filter(|_| step == "throughput"));
        if let Some(s) = found {
            v.extend(of_summary(&format!("{label}: "), &s.summary));
        }
    }
    if let Some(found) = &plan.search {
        let unit = match found.by {
            SearchBy::Rate => "req/s",
            SearchBy::Concurrency => "streams",
        };
        v.extend(value("search: highest load met", unit, found.best));
        v.extend(value("search: lowest load missed", unit, found.missed));
        let best = plan.best_step().ok().map(|s| &s.summary);
        v.extend(value(
            "search: goodput at the answer",
            "tok/s",
            best.map(|s| s.goodput_tokens_per_s),
        ));
    }
    Ok(v)
}

/// A paired concurrency sweep's values per level.
fn paired(dir: &Path) -> anyhow::Result<Vec<Value>> {
    use crate::analysis::reference;
    let run = crate::analysis::run::load_run(dir)?;
    let rows = reference::phase_rows(&run);
    let mut v = Vec::new();
    for c in reference::curve(&run, &rows) {
        let level = format!("C = {}: ", c.concurrency);
        v.extend(value(format!("{level}Q_decode"), "tok/s", c.q_decode_mean));
        v.extend(value(
            format!("{level}Q_phase"),
            "tok/s",
            Some(c.q_phase_mean),
        ));
        v.extend(value(
            format!("{level}TTFT p50"),
            "ms",
            c.ttft_median_s.map(|t| t * 1e3),
        ));
    }
    Ok(v)
}

/// One value across the runs: each arm's mean with its interval, and B / A with its interval
/// (None where there is no B, or the interval has no draw).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ArmRow {
    pub metric: String,
    pub unit: &'static str,
    pub a: f64,
    pub a_interval: Option<(f64, f64)>,
    pub b: Option<f64>,
    pub b_interval: Option<(f64, f64)>,
    pub ratio: Option<f64>,
    pub ratio_interval: Option<(f64, f64)>,
}

/// One run of the repeated unit.
pub struct Run {
    pub arm: String,
    pub block: usize,
    pub values: Vec<Value>,
}

/// The runs in `out`, every value's row computed from the runs' records (module header).
pub struct Arms {
    pub runs: Vec<Run>,
    pub blocks: usize,
    pub two: bool,
    pub rows: Vec<ArmRow>,
}

/// The percentile interval of `v` (None when empty).
fn interval(v: &[f64]) -> Option<(f64, f64)> {
    let tail = 0.5 * (1.0 - CONFIDENCE);
    Some((quantile(v, tail)?, quantile(v, 1.0 - tail)?))
}

/// A run directory's arm and block (`NN-ARM-BLOCK`).
fn arm_block(dir: &Path) -> anyhow::Result<(String, usize)> {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let mut parts = name.splitn(3, '-').skip(1);
    match (parts.next(), parts.next().map(str::parse::<usize>)) {
        (Some(arm @ ("a" | "b")), Some(Ok(block))) => Ok((arm.to_string(), block)),
        _ => bail!("{}: not an NN-ARM-BLOCK run", dir.display()),
    }
}

/// The repeated runs in `out` (module header).
pub fn arms(out: &Path) -> anyhow::Result<Arms> {
    let mut runs = Vec::new();
    for dir in rederive::step_dirs(out)? {
        let (arm, block) = arm_block(&dir)?;
        let values = measured(&dir).with_context(|| dir.display().to_string())?;
        runs.push(Run { arm, block, values });
    }
    if runs.is_empty() {
        bail!("{} holds no runs (NN-ARM-BLOCK directories)", out.display());
    }
    let blocks = runs.iter().map(|r| r.block + 1).max().unwrap_or(0);
    let two = runs.iter().any(|r| r.arm == "b");
    // every value any run measured, in the order they first appear
    let mut names: Vec<(String, &'static str)> = Vec::new();
    for v in runs.iter().flat_map(|r| &r.values) {
        if !names.iter().any(|(m, _)| *m == v.metric) {
            names.push((v.metric.clone(), v.unit));
        }
    }
    let rows = names
        .into_iter()
        .filter_map(|(metric, unit)| row(&runs, blocks, metric, unit))
        .collect();
    Ok(Arms {
        runs,
        blocks,
        two,
        rows,
    })
}

/// One value's row: each arm's mean over its runs, B / A, and their bootstrap intervals.
fn row(runs: &[Run], blocks: usize, metric: String, unit: &'static str) -> Option<ArmRow> {
    // per block, each arm's values
    let per_block = |arm: &str| -> Vec<Vec<f64>> {
        (0..blocks)
            .map(|b| {
                (runs.iter())
                    .filter(|r| r.arm == arm && r.block == b)
                    .flat_map(|r| r.values.iter().filter(|v| v.metric == metric))
                    .map(|v| v.value)
                    .collect()
            })
            .collect()
    };
    let (a, b) = (per_block("a"), per_block("b"));
    let arm_mean = |v: &[Vec<f64>], pick: &[usize]| {
        mean(
            &pick
                .iter()
                .flat_map(|&k| v[k].iter().copied())
                .collect::<Vec<_>>(),
        )
    };
    let all: Vec<usize> = (0..blocks).collect();
    let (ma, mb) = (arm_mean(&a, &all)?, arm_mean(&b, &all));
    // B / A only over the blocks where both arms measured the value, so a block that lost one
    // arm's value cannot set the other arm's block against the wrong partner
    let is_paired: Vec<bool> = (0..blocks)
        .map(|k| !a[k].is_empty() && !b[k].is_empty())
        .collect();
    let paired: Vec<usize> = all.iter().copied().filter(|&k| is_paired[k]).collect();
    let ratio_of = |pick: &[usize]| {
        let x = arm_mean(&a, pick)?;
        Some(arm_mean(&b, pick)? / x).filter(|_| x != 0.0)
    };
    let mut rng = Rng::new(SEED);
    let (mut da, mut db, mut dr) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RESAMPLES {
        let pick: Vec<usize> = (0..blocks)
            .map(|_| rng.below(blocks as u64) as usize)
            .collect();
        da.extend(arm_mean(&a, &pick));
        db.extend(arm_mean(&b, &pick));
        let both: Vec<usize> = pick.into_iter().filter(|&k| is_paired[k]).collect();
        dr.extend(ratio_of(&both));
    }
    Some(ArmRow {
        metric,
        unit,
        a: ma,
        a_interval: interval(&da),
        b: mb,
        b_interval: interval(&db),
        ratio: ratio_of(&paired),
        ratio_interval: interval(&dr),
    })
}

/// OUT/arms.csv and OUT/arms.md from the runs' records (module header).
pub fn tables(out: &Path) -> anyhow::Result<(String, String)> {
    let arms = arms(out)?;
    let mut csv = String::from("step,arm,block,metric,unit,value\n");
    for (k, r) in arms.runs.iter().enumerate() {
        for v in &r.values {
            let (arm, block) = (&r.arm, r.block);
            writeln!(
                csv,
                "{k},{arm},{block},{},{},{:.6}",
                v.metric, v.unit, v.value
            )?;
        }
    }
    let pct = 100.0 * CONFIDENCE;
    let mut md = format!(
        "{} runs in {} blocks{}; {pct:.0} % bootstrap intervals over blocks ({RESAMPLES} \
         draws, seed {SEED}).\n\n",
        arms.runs.len(),
        arms.blocks,
        if arms.two { " of A B B A" } else { "" }
    );
    md += if arms.two {
        "| metric | A | interval | B | interval | B / A | interval |\n|---|---:|---:|---:|---:|---:|---:|\n"
    } else {
        "| metric | mean | interval |\n|---|---:|---:|\n"
    };
    for r in &arms.rows {
        let d = if r.unit == "%" { 1 } else { 2 };
        let iv = |v: Option<(f64, f64)>, d: usize| {
            v.map_or("–".into(), |(l, h)| format!("[{l:.d$}, {h:.d$}]"))
        };
        let (name, unit, a) = (&r.metric, r.unit, r.a);
        if arms.two {
            writeln!(
                md,
                "| {name} ({unit}) | {a:.d$} | {} | {} | {} | {} | {} |",
                iv(r.a_interval, d),
                r.b.map_or("–".into(), |y| format!("{y:.d$}")),
                iv(r.b_interval, d),
                r.ratio.map_or("–".into(), |x| format!("{x:.3}")),
                iv(r.ratio_interval, 3)
            )?;
        } else {
            writeln!(
                md,
                "| {name} ({unit}) | {a:.d$} | {} |",
                iv(r.a_interval, d)
            )?;
        }
    }
    Ok((csv, md))
}

/// What a `load_arms` claim reads of one value's row.
#[derive(Clone, Copy, Debug, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ArmMeasure {
    A,
    B,
    Ratio,
    RatioLow,
    RatioHigh,
}

impl ArmMeasure {
    pub fn describe(self) -> &'static str {
        match self {
            ArmMeasure::A => "arm A's mean over its runs",
            ArmMeasure::B => "arm B's mean over its runs",
            ArmMeasure::Ratio => "B / A",
            ArmMeasure::RatioLow => "the low end of B / A's bootstrap interval over blocks",
            ArmMeasure::RatioHigh => "the high end of B / A's bootstrap interval over blocks",
        }
    }

    /// This measure of `metric` in the repeated runs in `out`, recomputed from their records.
    pub fn of(self, out: &Path, metric: &str) -> anyhow::Result<f64> {
        let arms = arms(out)?;
        let r = (arms.rows.iter())
            .find(|r| r.metric == metric)
            .with_context(|| format!("no metric {metric:?} in {}", out.display()))?;
        let v = match self {
            ArmMeasure::A => Some(r.a),
            ArmMeasure::B => r.b,
            ArmMeasure::Ratio => r.ratio,
            ArmMeasure::RatioLow => r.ratio_interval.map(|i| i.0),
            ArmMeasure::RatioHigh => r.ratio_interval.map(|i| i.1),
        };
        v.with_context(|| format!("{metric}: no {}", self.describe()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(arm: &str, block: usize, x: f64) -> Run {
        Run {
            arm: arm.into(),
            block,
            values: vec![Value {
                metric: "m".into(),
                unit: "tok/s",
                value: x,
            }],
        }
    }

    /// Each arm's mean is over its runs; B / A's interval holds every ratio a draw of blocks can
    /// give and no other: with blocks whose B / A are 2 and 3, the draws give 2, 3 or the ratio
    /// of the pooled means.
    #[test]
    fn the_ratio_interval_spans_what_draws_of_blocks_can_give() {
        let runs = [
            run("a", 0, 1.0),
            run("b", 0, 2.0),
            run("b", 0, 2.0),
            run("a", 0, 1.0),
            run("a", 1, 2.0),
            run("b", 1, 6.0),
            run("b", 1, 6.0),
            run("a", 1, 2.0),
        ];
        let r = row(&runs, 2, "m".into(), "tok/s").unwrap();
        assert_eq!((r.a, r.b), (1.5, Some(4.0)));
        assert_eq!(r.ratio, Some(4.0 / 1.5));
        let (lo, hi) = r.ratio_interval.unwrap();
        assert_eq!((lo, hi), (2.0, 3.0));
        assert!(row(&runs, 2, "other".into(), "ms").is_none());
    }

    /// A block where one arm lost the value leaves B / A: the ratio is over the paired block
    /// alone, while each arm's own mean keeps every run it has.
    #[test]
    fn a_block_missing_one_arm_drops_out_of_the_ratio() {
        let runs = [
            run("a", 0, 1.0),
            run("b", 0, 2.0),
            run("a", 1, 10.0),
            Run {
                arm: "b".into(),
                block: 1,
                values: vec![],
            },
        ];
        let r = row(&runs, 2, "m".into(), "tok/s").unwrap();
        assert_eq!((r.a, r.b), (5.5, Some(2.0)));
        assert_eq!(r.ratio, Some(2.0));
        assert_eq!(r.ratio_interval, Some((2.0, 2.0)));
    }

    #[test]
    fn run_directories_name_their_arm_and_block() {
        let p = Path::new("/x/07-b-12");
        assert_eq!(arm_block(p).unwrap(), ("b".to_string(), 12));
        assert!(arm_block(Path::new("/x/00-synchronous")).is_err());
        assert!(arm_block(Path::new("/x/00-c-1")).is_err());
    }
}
