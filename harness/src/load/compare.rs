//! Two load runs side by side (`moefleet-harness compare A B`, docs/MEASUREMENTS.md §9): for each
//! pair of steps (two single runs, either of them a `vllm bench serve` result file, or the steps
//! of the same name in two plans), each latency
//! metric of A and of B with the difference B − A and the ratio B / A, each with a bootstrap
//! confidence interval.
//!
//! The interval: the requests of each side are resampled with replacement (a request's tokens
//! stay together, so a per-token metric is resampled by request), the metric recomputed on each
//! resample, and the interval is the percentile interval of B − A (and B / A) over `resamples`
//! draws. It speaks of the variation between requests within these two runs; the variation
//! between runs on a shared machine is larger, and only repeated runs measure it. The draws are
//! seeded, so a comparison is reproducible to the bit.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::bail;
use moefleet_engine::rng::Rng;
use serde::Serialize;

use super::latency::{RequestLatency, Slo};
use super::rederive::{self, Step};
use crate::stats::{mean, quantile};

/// How the intervals are drawn.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Options {
    pub resamples: usize,
    /// Two-sided confidence, in (0, 1).
    pub confidence: f64,
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            resamples: 2000,
            confidence: 0.95,
            seed: 1,
        }
    }
}

type Metric = fn(&[&RequestLatency], Slo) -> Option<f64>;

fn q_of(l: &[&RequestLatency], f: fn(&RequestLatency) -> Option<f64>, p: f64) -> Option<f64> {
    let xs: Vec<f64> = l.iter().filter_map(|r| f(r)).collect();
    quantile(&xs, p)
}

fn itl_q(l: &[&RequestLatency], p: f64) -> Option<f64> {
    let xs: Vec<f64> = l.iter().flat_map(|r| r.itl.iter().copied()).collect();
    quantile(&xs, p)
}

/// Every metric compared: name, unit, and how it is computed from a side's requests.
const METRICS: [(&str, &str, Metric); 11] = [
    ("TTFT p50", "ms", |l, _| q_of(l, |r| r.ttft, 0.5)),
    ("TTFT p90", "ms", |l, _| q_of(l, |r| r.ttft, 0.9)),
    ("TTFT p99", "ms", |l, _| q_of(l, |r| r.ttft, 0.99)),
    ("TPOT p50", "ms", |l, _| q_of(l, |r| r.tpot, 0.5)),
    ("TPOT p99", "ms", |l, _| q_of(l, |r| r.tpot, 0.99)),
    ("TPOT mean", "ms", |l, _| {
        mean(&l.iter().filter_map(|r| r.tpot).collect::<Vec<_>>())
    }),
    ("ITL p50", "ms", |l, _| itl_q(l, 0.5)),
    ("ITL p99", "ms", |l, _| itl_q(l, 0.99)),
    ("E2E p50", "ms", |l, _| q_of(l, |r| Some(r.e2e), 0.5)),
    ("E2E p99", "ms", |l, _| q_of(l, |r| Some(r.e2e), 0.99)),
    ("meeting objectives", "%", |l, slo| {
        (!l.is_empty())
            .then(|| 100.0 * l.iter().filter(|r| slo.met(r)).count() as f64 / l.len() as f64)
    }),
];

/// One metric of one pair of steps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub step: String,
    pub metric: &'static str,
    pub unit: &'static str,
    pub a: f64,
    pub b: f64,
    pub diff: f64,
    pub diff_lo: f64,
    pub diff_hi: f64,
    /// B / A and its interval (None where A is 0).
    pub ratio: Option<f64>,
    pub ratio_lo: Option<f64>,
    pub ratio_hi: Option<f64>,
    pub n_a: usize,
    pub n_b: usize,
}

/// A side's completed measured requests.
fn latencies(s: &Step) -> Vec<RequestLatency> {
    s.records
        .iter()
        .filter(|r| r.error.is_none())
        .map(RequestLatency::of)
        .collect()
}

/// Whether `metric` means the same on both sides: the share meeting the objectives only under the
/// same objectives, and end to end only where both sides' records end at the stream's end (an
/// imported vLLM file's requests end at their last token).
fn comparable(metric: &str, a: &Step, b: &Step) -> bool {
    match metric {
        "meeting objectives" => a.plan.slo == b.plan.slo && a.plan.slo != Slo::default(),
        m if m.starts_with("E2E") => !a.imported && !b.imported,
        _ => true,
    }
}

/// The steps `a` and `b` compared metric by metric (module header).
pub fn steps(name: &str, a: &Step, b: &Step, opt: Options) -> Vec<Row> {
    let (la, lb) = (latencies(a), latencies(b));
    let (ra, rb): (Vec<&RequestLatency>, Vec<&RequestLatency>) =
        (la.iter().collect(), lb.iter().collect());
    let mut rng = Rng::new(opt.seed);
    let mut draws: Vec<Vec<(f64, f64)>> = vec![Vec::with_capacity(opt.resamples); METRICS.len()];
    if !la.is_empty() && !lb.is_empty() {
        for _ in 0..opt.resamples {
            let sa: Vec<&RequestLatency> = (0..la.len())
                .map(|_| ra[rng.below(la.len() as u64) as usize])
                .collect();
            let sb: Vec<&RequestLatency> = (0..lb.len())
                .map(|_| rb[rng.below(lb.len() as u64) as usize])
                .collect();
            for (k, (_, _, f)) in METRICS.iter().enumerate() {
                if let (Some(x), Some(y)) = (f(&sa, a.plan.slo), f(&sb, b.plan.slo)) {
                    draws[k].push((x, y));
                }
            }
        }
    }
    let tail = 0.5 * (1.0 - opt.confidence);
    let mut rows = Vec::new();
    for (k, (metric, unit, f)) in METRICS.iter().enumerate() {
        if !comparable(metric, a, b) {
            continue;
        }
        let (Some(x), Some(y)) = (f(&ra, a.plan.slo), f(&rb, b.plan.slo)) else {
            continue;
        };
        let scale = if *unit == "ms" { 1e3 } else { 1.0 };
        let diffs: Vec<f64> = draws[k].iter().map(|(x, y)| y - x).collect();
        let ratios: Vec<f64> = (draws[k].iter())
            .filter(|(x, _)| *x != 0.0)
            .map(|(x, y)| y / x)
            .collect();
        let ends = |v: &[f64], s: f64| {
            (
                quantile(v, tail).map_or(f64::NAN, |q| q * s),
                quantile(v, 1.0 - tail).map_or(f64::NAN, |q| q * s),
            )
        };
        let (diff_lo, diff_hi) = ends(&diffs, scale);
        let (ratio_lo, ratio_hi) = ends(&ratios, 1.0);
        let finite = |v: f64| v.is_finite().then_some(v);
        rows.push(Row {
            step: name.to_string(),
            metric,
            unit,
            a: x * scale,
            b: y * scale,
            diff: (y - x) * scale,
            diff_lo,
            diff_hi,
            ratio: (x != 0.0).then(|| y / x),
            ratio_lo: finite(ratio_lo),
            ratio_hi: finite(ratio_hi),
            n_a: la.len(),
            n_b: lb.len(),
        });
    }
    rows
}

/// The runs in `a` and `b` compared: two single runs (a step's directory or a `vllm bench serve`
/// result file, `vllm`), or the steps of the same name in two plans.
pub fn runs(a: &Path, b: &Path, opt: Options) -> anyhow::Result<Vec<Row>> {
    if !(opt.resamples > 0 && opt.confidence > 0.0 && opt.confidence < 1.0) {
        bail!("--resamples must be positive and --confidence in (0, 1)");
    }
    // a single run: a step's directory, or a `vllm bench serve` result file
    let single = |d: &Path| -> anyhow::Result<Option<Step>> {
        if d.is_file() && d.extension().is_some_and(|e| e == "json") {
            return super::vllm::import(d).map(Some);
        }
        if d.join("traces.jsonl.gz").is_file() {
            return rederive::step(d).map(Some);
        }
        Ok(None)
    };
    let plan_dir = |d: &Path| rederive::step_dirs(d).is_ok_and(|v| !v.is_empty());
    for d in [a, b] {
        if single(d)?.is_none() && !plan_dir(d) {
            bail!(
                "{} holds no run: neither a step's traces.jsonl.gz, nor NN-name step \
                 directories, nor a `vllm bench serve` result file (.json)",
                d.display()
            );
        }
    }
    match (single(a)?, single(b)?) {
        (Some(sa), Some(sb)) => return Ok(steps("run", &sa, &sb, opt)),
        (None, None) => {}
        _ => bail!("compare two single runs, or two plans (a sweep or a search), not one of each"),
    }
    let (pa, pb) = (rederive::plan(a)?, rederive::plan(b)?);
    let mut rows = Vec::new();
    for sa in &pa.steps {
        if let Some(sb) = pb.steps.iter().find(|s| s.name == sa.name) {
            rows.extend(steps(&sa.name, sa, sb, opt));
        }
    }
    let shared = pa
        .steps
        .iter()
        .any(|s| pb.steps.iter().any(|t| t.name == s.name));
    if rows.is_empty() && shared {
        bail!("the steps of the same name in both plans have no completed request to compare");
    }
    if rows.is_empty() {
        let names = |p: &rederive::Plan| {
            p.steps
                .iter()
                .map(|s| s.name.clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        bail!(
            "no step of the same name in both plans ({}: {}; {}: {})",
            a.display(),
            names(&pa),
            b.display(),
            names(&pb)
        );
    }
    Ok(rows)
}

fn f(v: f64, unit: &str) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    if unit == "%" {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn r(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.3}"))
}

/// The comparison as a Markdown table.
pub fn markdown(rows: &[Row], a: &str, b: &str, opt: Options) -> String {
    let pct = 100.0 * opt.confidence;
    let mut s = format!(
        "A = `{a}`, B = `{b}`; {pct:.0} % bootstrap intervals over {} resamples of each side's \
         requests (seed {}).\n\n| step | metric | A | B | B − A | {pct:.0} % interval | B / A | \
         {pct:.0} % interval | requests A / B |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
        opt.resamples, opt.seed
    );
    for x in rows {
        let u = x.unit;
        let _ = writeln!(
            s,
            "| {} | {} ({u}) | {} | {} | {} | [{}, {}] | {} | [{}, {}] | {} / {} |",
            x.step,
            x.metric,
            f(x.a, u),
            f(x.b, u),
            f(x.diff, u),
            f(x.diff_lo, u),
            f(x.diff_hi, u),
            r(x.ratio),
            r(x.ratio_lo),
            r(x.ratio_hi),
            x.n_a,
            x.n_b
        );
    }
    s
}

/// The comparison as CSV.
pub fn csv(rows: &[Row]) -> String {
    let mut s =
        String::from("step,metric,unit,a,b,diff,diff_lo,diff_hi,ratio,ratio_lo,ratio_hi,n_a,n_b\n");
    let o = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
    for x in rows {
        let _ = writeln!(
            s,
            "{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{},{},{},{},{}",
            x.step,
            x.metric,
            x.unit,
            x.a,
            x.b,
            x.diff,
            x.diff_lo,
            x.diff_hi,
            o(x.ratio),
            o(x.ratio_lo),
            o(x.ratio_hi),
            x.n_a,
            x.n_b
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use moefleet_schema::TraceRecord;

    fn step(tpot: f64, n: usize) -> Step {
        let records = (0..n)
            .map(|k| {
                let t0 = k as f64;
                let jitter = 1.0 + 0.01 * (k % 5) as f64;
                let ev: Vec<(f64, u32)> = (0..8)
                    .map(|j| (t0 + 0.1 + j as f64 * tpot * jitter, 1))
                    .collect();
                let end = ev[7].0 + 0.001;
                TraceRecord {
                    phase: "measure".into(),
                    started_mono: t0,
                    events_mono: ev,
                    ended_mono: end,
                    ..Default::default()
                }
            })
            .collect::<Vec<_>>();
        let plan: super::super::step::StepPlan = serde_json::from_value(serde_json::json!({
            "schedule": {"kind": "at_once"}, "requests": n, "warmup": 0, "max_tokens": 8,
            "ignore_eos": true, "max_concurrency": 1, "family": null,
            "slo": {"ttft": null, "tpot": 0.015, "e2e": null}, "saturation_s": null
        }))
        .unwrap();
        Step {
            dir: Default::default(),
            name: "synchronous".into(),
            summary: super::super::latency::Summary::of(&records, plan.slo),
            records,
            plan,
            saturated: false,
            imported: false,
        }
    }

    /// B decodes twice as slowly as A: TPOT's ratio is 2 and its interval holds 2 and not 1; the
    /// TTFTs are equal, so their difference's interval holds 0; the draws are seeded.
    #[test]
    fn intervals_bracket_the_true_difference() {
        let (a, b) = (step(0.01, 40), step(0.02, 40));
        let rows = steps("s", &a, &b, Options::default());
        let get = |m: &str| rows.iter().find(|r| r.metric == m).unwrap().clone();
        let tpot = get("TPOT p50");
        let (lo, hi) = (tpot.ratio_lo.unwrap(), tpot.ratio_hi.unwrap());
        assert!(lo <= 2.0 && 2.0 <= hi && lo > 1.5, "{tpot:?}");
        let ttft = get("TTFT p50");
        assert!(ttft.diff_lo <= 0.0 && 0.0 <= ttft.diff_hi, "{ttft:?}");
        let good = get("meeting objectives");
        assert_eq!((good.a, good.b), (100.0, 0.0));
        assert_eq!(rows, steps("s", &a, &b, Options::default()));
        assert!(markdown(&rows, "a", "b", Options::default()).contains("| s | TPOT p50 (ms) |"));
    }
}
