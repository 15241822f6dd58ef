//! One step repeated, and two servers alternated (docs/MEASUREMENTS.md §9): `run --repeats N`
//! runs the step N times against one server; `run --vs URL_B --repeats N` runs N blocks of A B B A
//! (A the `--url` server, B the other), so a drift of the machine over the run weighs on both arms
//! alike. Each run is a step directory `OUT/NN-ARM-BLOCK/`.
//!
//! `OUT/arms.csv` has one row per step and metric; `OUT/arms.md` gives per metric each arm's mean
//! over its runs and, with two arms, B / A, each with a percentile bootstrap interval over blocks:
//! blocks are drawn with replacement (a block's A and B runs together, which pairs the arms
//! within a block), each arm's mean taken over the drawn blocks' runs, and B / A as the ratio of
//! those means. With few blocks the interval is coarse (three blocks give at most ten distinct
//! draws); the table says how many there were. The draws are seeded, so `verify` re-derives the
//! table from the steps' records.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context};
use moefleet_engine::rng::Rng;

use super::latency::Summary;
use super::rederive;
use super::step::{self, StepPlan};
use crate::driver::server::Server;
use crate::stats::{mean, quantile};

/// What is compared across runs: name, unit, and its value in a step's summary.
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

/// Bootstrap draws of the block means, and the two-sided confidence of the intervals.
pub const RESAMPLES: usize = 2000;
pub const CONFIDENCE: f64 = 0.95;
const SEED: u64 = 1;

/// The order of the runs: `blocks` of A B B A, or of A alone.
pub fn order(arms: usize, blocks: usize) -> Vec<(char, usize)> {
    let block: &[char] = if arms == 2 {
        &['a', 'b', 'b', 'a']
    } else {
        &['a']
    };
    (0..blocks)
        .flat_map(|k| block.iter().map(move |&arm| (arm, k)))
        .collect()
}

/// Run `plan` against `servers` (one or two) in `blocks` blocks into OUT; writes the tables.
pub async fn run(
    servers: &[&Server],
    plan: &StepPlan,
    blocks: usize,
    out: &Path,
) -> anyhow::Result<()> {
    if servers.is_empty() || servers.len() > 2 || blocks == 0 {
        bail!("repeats: one or two servers and at least one block");
    }
    if out.join("arms.csv").exists() {
        bail!(
            "{} already holds a run (choose another --out)",
            out.display()
        );
    }
    let runs = order(servers.len(), blocks);
    for (k, &(arm, block)) in runs.iter().enumerate() {
        let server = servers[usize::from(arm == 'b')];
        eprintln!(
            "run {} of {}: {arm} ({}), block {block}",
            k + 1,
            runs.len(),
            server.base
        );
        step::run(server, plan, &out.join(format!("{k:02}-{arm}-{block}"))).await?;
    }
    let (csv, md) = tables(out)?;
    std::fs::write(out.join("arms.csv"), csv)?;
    std::fs::write(out.join("arms.md"), md)?;
    Ok(())
}

/// One metric across the runs: each arm's mean with its interval, and B / A with its interval
/// (None where there is no B, or the interval has no draw).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ArmRow {
    pub metric: &'static str,
    pub unit: &'static str,
    pub a: f64,
    pub a_interval: Option<(f64, f64)>,
    pub b: Option<f64>,
    pub b_interval: Option<(f64, f64)>,
    pub ratio: Option<f64>,
    pub ratio_interval: Option<(f64, f64)>,
}

/// The runs of a repeated step, re-derived from its records.
pub struct Arms {
    /// (arm, block, summary) of every run, in order.
    pub runs: Vec<(String, usize, Summary)>,
    pub blocks: usize,
    pub two: bool,
    pub rows: Vec<ArmRow>,
}

/// The percentile interval of `v` (None when empty).
fn interval(v: &[f64]) -> Option<(f64, f64)> {
    let tail = 0.5 * (1.0 - CONFIDENCE);
    Some((quantile(v, tail)?, quantile(v, 1.0 - tail)?))
}

/// The repeated step in `out`, every metric's row computed from the runs' records (module header).
pub fn arms(out: &Path) -> anyhow::Result<Arms> {
    let plan = rederive::plan(out)?;
    let mut runs = Vec::new();
    for s in plan.steps {
        let mut parts = s.name.splitn(2, '-');
        let (Some(arm), Some(block)) = (parts.next(), parts.next()) else {
            bail!("{}: not an ARM-BLOCK step", s.dir.display());
        };
        let block: usize = block.parse()?;
        runs.push((arm.to_string(), block, s.summary));
    }
    let blocks = runs.iter().map(|r| r.1 + 1).max().unwrap_or(0);
    let two = runs.iter().any(|r| r.0 == "b");
    let mut rows = Vec::new();
    for (metric, unit, f) in METRICS {
        // per block, each arm's values
        let per_block = |arm: &str| -> Vec<Vec<f64>> {
            (0..blocks)
                .map(|b| {
                    (runs.iter())
                        .filter(|r| r.0 == arm && r.1 == b)
                        .filter_map(|r| f(&r.2))
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
        let (Some(ma), mb) = (arm_mean(&a, &all), arm_mean(&b, &all)) else {
            continue;
        };
        let mut rng = Rng::new(SEED);
        let (mut da, mut db, mut dr) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..RESAMPLES {
            let pick: Vec<usize> = (0..blocks)
                .map(|_| rng.below(blocks as u64) as usize)
                .collect();
            let (x, y) = (arm_mean(&a, &pick), arm_mean(&b, &pick));
            da.extend(x);
            db.extend(y);
            if let (Some(x), Some(y)) = (x, y) {
                if x != 0.0 {
                    dr.push(y / x);
                }
            }
        }
        rows.push(ArmRow {
            metric,
            unit,
            a: ma,
            a_interval: interval(&da),
            b: mb,
            b_interval: interval(&db),
            ratio: mb.filter(|_| ma != 0.0).map(|y| y / ma),
            ratio_interval: interval(&dr),
        });
    }
    Ok(Arms {
        runs,
        blocks,
        two,
        rows,
    })
}

/// OUT/arms.csv and OUT/arms.md from the steps' records (module header).
pub fn tables(out: &Path) -> anyhow::Result<(String, String)> {
    let arms = arms(out)?;
    let mut csv = String::from("step,arm,block,metric,unit,value\n");
    for (k, (arm, block, s)) in arms.runs.iter().enumerate() {
        for (name, unit, f) in METRICS {
            if let Some(v) = f(s) {
                writeln!(csv, "{k},{arm},{block},{name},{unit},{v:.6}")?;
            }
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
        let (name, unit, a) = (r.metric, r.unit, r.a);
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

/// What a `load_arms` claim reads of one metric's row.
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

    /// This measure of `metric` in the repeated step in `out`, recomputed from its records.
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

    #[test]
    fn blocks_alternate_a_b_b_a() {
        let o = order(2, 2);
        let arms: String = o.iter().map(|r| r.0).collect();
        assert_eq!(arms, "abbaabba");
        assert_eq!(o[4], ('a', 1));
        assert_eq!(order(1, 3), vec![('a', 0), ('a', 1), ('a', 2)]);
    }
}
