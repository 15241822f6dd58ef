//! Runs of several steps (docs/MEASUREMENTS.md §9): a sweep across the server's range of load,
//! and a search for the highest load that meets latency objectives. Each step is a `step` in a
//! directory of its own (OUT/NN-name/); the plan's table is OUT/steps.csv and OUT/steps.md.
//!
//! - Sweep: one request at a time (`synchronous`: the rate a single stream sustains), every
//!   request at once under the concurrency cap (`throughput`: the most the server completes), then
//!   `steps` arrival rates evenly spaced strictly between those two, each an arrival process of
//!   the run's kind. The Pareto figure (OUT/pareto.svg) draws each step's output tokens/s per user
//!   (1 / median TPOT) against its total output tokens/s.
//! - Search by rate: the same two bounds, then bisection between the highest rate known to meet
//!   the objectives and the lowest known to miss them, until they are within `precision` of each
//!   other (relative) or the step budget is spent. Search by concurrency: closed loops of C
//!   streams (every request due at once under a cap of C), bisected over integers from 1 to the
//!   cap. A step meets the objectives when none of its requests failed, it did not over-saturate,
//!   and at least `share` of its measured requests met every limit. The answer is the highest
//!   load among the steps that met them and the lowest among those that missed
//!   (`answer`, the rule `verify` recomputes it by too), a step's load being its arrival
//!   rate, or for a closed loop its completed request rate (by rate) or its concurrency.
//!
//! Over-saturation: past the first steps, a step ends as soon as a request stays open longer than
//! the saturation limit (given, or ten times the synchronous step's slowest request, at least
//! 5 s): its latency grows without bound there, so nothing is gained by waiting for it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::arrivals::{Pattern, Process};
use super::latency::Summary;
use super::step::{self, Schedule, StepPlan, StepResult};
use crate::driver::server::Server;

/// What the steps share: the template every step's plan is made from.
#[derive(Clone, Debug)]
pub struct Template {
    /// Requests per step, warm-up included, and the rest of a step's plan (its schedule is set per
    /// step).
    pub step: StepPlan,
    /// The arrival process of the rate steps (and its shape and seed).
    pub process: Process,
    pub burstiness: f64,
    pub seed: u64,
}

/// A search's target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchBy {
    Rate,
    Concurrency,
}

/// How a search decides and when it stops.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Search {
    pub by: SearchBy,
    /// Share of measured requests that must meet every objective.
    pub share: f64,
    /// Relative width of the final bracket (rate search).
    pub precision: f64,
    /// At most this many bisection steps.
    pub max_steps: usize,
}

impl Search {
    /// The search can run from `t`: objectives to meet, a share in (0, 1], a precision, and a cap
    /// to search below when searching by concurrency.
    pub fn check(&self, t: &Template) -> anyhow::Result<()> {
        if t.step.slo == Default::default() {
            bail!("a search needs objectives to meet (--slo ttft=..,tpot=..,e2e=..)");
        }
        if !(self.share > 0.0 && self.share <= 1.0) {
            bail!("--slo-share must be in (0, 1], not {}", self.share);
        }
        if !(self.precision.is_finite() && self.precision > 0.0) {
            bail!("--precision must be positive, not {}", self.precision);
        }
        if self.by == SearchBy::Concurrency && t.step.max_concurrency.is_none() {
            bail!("a concurrency search needs --max-concurrency, the highest concurrency to try");
        }
        Ok(())
    }
}

/// One row of a plan's table.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub step: usize,
    pub name: String,
    /// The arrival rate asked (rate steps) or the concurrency cap (closed loops).
    pub rate_asked: Option<f64>,
    pub concurrency: Option<usize>,
    pub requests: usize,
    pub failed: usize,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub tokens_per_s_per_user: Option<f64>,
    pub ttft_p50_s: Option<f64>,
    pub ttft_p99_s: Option<f64>,
    pub tpot_p50_s: Option<f64>,
    pub tpot_p99_s: Option<f64>,
    pub e2e_p99_s: Option<f64>,
    pub good_share: f64,
    pub goodput_requests_per_s: f64,
    pub saturated: bool,
    /// Whether the step met the objectives (searches only).
    pub meets: Option<bool>,
}

impl Row {
    /// Step `step`'s row, from what it asked and what it measured.
    pub fn of(step: usize, name: &str, plan: &StepPlan, s: &Summary, saturated: bool) -> Row {
        let (rate_asked, concurrency) = match &plan.schedule {
            Schedule::Arrivals(p) => (Some(p.rate), None),
            Schedule::AtOnce => (None, plan.max_concurrency),
            Schedule::Replay { .. } => (None, None),
        };
        let measured = s.requests.max(1) as f64;
        Row {
            step,
            name: name.to_string(),
            rate_asked,
            concurrency,
            requests: s.requests,
            failed: s.failed,
            requests_per_s: s.requests_per_s,
            output_tokens_per_s: s.output_tokens_per_s,
            tokens_per_s_per_user: s.tpot.as_ref().filter(|q| q.p50 > 0.0).map(|q| 1.0 / q.p50),
            ttft_p50_s: s.ttft.as_ref().map(|q| q.p50),
            ttft_p99_s: s.ttft.as_ref().map(|q| q.p99),
            tpot_p50_s: s.tpot.as_ref().map(|q| q.p50),
            tpot_p99_s: s.tpot.as_ref().map(|q| q.p99),
            e2e_p99_s: s.e2e.as_ref().map(|q| q.p99),
            good_share: s.good_requests as f64 / measured,
            goodput_requests_per_s: s.goodput_requests_per_s,
            saturated,
            meets: None,
        }
    }
}

/// The steps run so far, and where they go.
struct Steps<'a> {
    server: &'a Server,
    out: &'a Path,
    rows: Vec<Row>,
}

impl Steps<'_> {
    async fn run(&mut self, name: &str, plan: &StepPlan) -> anyhow::Result<(Row, StepResult)> {
        let k = self.rows.len();
        let dir = self.out.join(format!("{k:02}-{name}"));
        eprintln!("step {k}: {name}");
        let r = step::run(self.server, plan, &dir).await?;
        if let Some(why) = &r.saturated {
            eprintln!("step {k}: over-saturated, stopped early ({why})");
        }
        let row = Row::of(k, name, plan, &r.summary, r.saturated.is_some());
        self.rows.push(row.clone());
        Ok((row, r))
    }

    fn write(&self) -> anyhow::Result<()> {
        write_table(self.out, &self.rows)
    }
}

fn refuse_existing(out: &Path) -> anyhow::Result<()> {
    if out.join("steps.csv").exists() || out.join("00-synchronous").exists() {
        bail!(
            "{} already holds a run (choose another --out)",
            out.display()
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))
}

/// The two bounds every plan starts from: one request at a time, then all at once under the cap.
/// Returns (synchronous, throughput) results and the saturation limit the later steps use.
async fn bounds(
    steps: &mut Steps<'_>,
    t: &Template,
) -> anyhow::Result<(StepResult, StepResult, f64)> {
    let one = StepPlan {
        schedule: Schedule::AtOnce,
        max_concurrency: Some(1),
        ..t.step.clone()
    };
    let (_, sync) = steps.run("synchronous", &one).await?;
    let limit = saturation_limit(t, &sync);
    let all = StepPlan {
        schedule: Schedule::AtOnce,
        saturation_s: Some(limit),
        ..t.step.clone()
    };
    let (_, most) = steps.run("throughput", &all).await?;
    Ok((sync, most, limit))
}

/// The over-saturation limit of the steps after one at a time (module header).
fn saturation_limit(t: &Template, one_at_a_time: &StepResult) -> f64 {
    let slowest = one_at_a_time.summary.e2e.as_ref().map_or(0.0, |q| q.max);
    t.step.saturation_s.unwrap_or((10.0 * slowest).max(5.0))
}

fn rate_plan(t: &Template, rate: f64, limit: f64) -> StepPlan {
    StepPlan {
        schedule: Schedule::Arrivals(Pattern {
            process: t.process,
            rate,
            rate_end: None,
            burstiness: t.burstiness,
            seed: t.seed,
        }),
        saturation_s: Some(limit),
        ..t.step.clone()
    }
}

/// The sweep (module header); returns its rows.
pub async fn sweep(
    server: &Server,
    t: &Template,
    rates: usize,
    out: &Path,
) -> anyhow::Result<Vec<Row>> {
    refuse_existing(out)?;
    let mut steps = Steps {
        server,
        out,
        rows: Vec::new(),
    };
    let (sync, most, limit) = bounds(&mut steps, t).await?;
    let (lo, hi) = (sync.summary.requests_per_s, most.summary.requests_per_s);
    if !(lo > 0.0 && hi > lo) {
        eprintln!(
            "sweep: all at once ({hi:.3} requests/s) was no faster than one at a time \
             ({lo:.3}): no rates between them to sweep"
        );
    } else {
        for i in 1..=rates {
            let rate = lo + (hi - lo) * i as f64 / (rates + 1) as f64;
            steps
                .run(&format!("rate-{rate:.3}"), &rate_plan(t, rate, limit))
                .await?;
        }
    }
    steps.write()?;
    pareto(out, &steps.rows)?;
    Ok(steps.rows)
}

/// The search's answer.
#[derive(Clone, Debug, Serialize)]
pub struct Found {
    pub by: SearchBy,
    /// The highest load that met the objectives (None: not even the lowest did).
    pub best: Option<f64>,
    /// The lowest load that missed them (None: even the highest met them).
    pub missed: Option<f64>,
    pub search: Search,
    pub rows: Vec<Row>,
}

/// Whether a step met the objectives (module header).
fn meets(r: &StepResult, share: f64) -> bool {
    meets_with(&r.summary, r.saturated.is_some(), share)
}

/// Whether a step of summary `s` met the objectives: nothing failed, it did not over-saturate,
/// and `share` of its measured requests met every limit (or, under a percentile gate, that
/// percentile of each limited metric is within its limit).
pub fn meets_with(s: &Summary, saturated: bool, share: f64) -> bool {
    let judged = match s.slo.tail_within(s) {
        Some(tail) => tail,
        None => s.good_requests as f64 >= share * s.requests as f64,
    };
    !saturated && s.failed == 0 && s.requests > 0 && judged
}

/// The search (module header); writes OUT/search.json beside the table.
pub async fn search(
    server: &Server,
    t: &Template,
    how: Search,
    out: &Path,
) -> anyhow::Result<Found> {
    how.check(t)?;
    refuse_existing(out)?;
    let mut steps = Steps {
        server,
        out,
        rows: Vec::new(),
    };
    match how.by {
        SearchBy::Rate => search_rate(&mut steps, t, how).await?,
        SearchBy::Concurrency => search_concurrency(&mut steps, t, how).await?,
    }
    steps.write()?;
    pareto(out, &steps.rows)?;
    // the answer from the judged steps, by the rule verify re-derives it with
    let (best, missed) = answer(how.by, &steps.rows);
    let found = Found {
        by: how.by,
        best,
        missed,
        search: how,
        rows: steps.rows,
    };
    crate::json::write(&out.join("search.json"), &found)?;
    Ok(found)
}

/// A row's load in a search by `by` (module header: its arrival rate, or a closed loop's
/// completed rate by rate and its concurrency by concurrency).
pub fn load_of(by: SearchBy, row: &Row) -> Option<f64> {
    match by {
        SearchBy::Rate => Some(row.rate_asked.unwrap_or(row.requests_per_s)),
        SearchBy::Concurrency => row.concurrency.map(|c| c as f64),
    }
}

/// The highest load among the rows that met the objectives and the lowest among those that
/// missed (rows not judged are left out).
pub fn answer(by: SearchBy, rows: &[Row]) -> (Option<f64>, Option<f64>) {
    let (mut best, mut missed): (Option<f64>, Option<f64>) = (None, None);
    for r in rows {
        let (Some(m), Some(load)) = (r.meets, load_of(by, r)) else {
            continue;
        };
        if m {
            best = Some(best.map_or(load, |b| b.max(load)));
        } else {
            missed = Some(missed.map_or(load, |b| b.min(load)));
        }
    }
    (best, missed)
}

async fn judged(
    steps: &mut Steps<'_>,
    name: &str,
    plan: &StepPlan,
    share: f64,
) -> anyhow::Result<(bool, StepResult)> {
    let (_, r) = steps.run(name, plan).await?;
    let ok = meets(&r, share);
    if let Some(row) = steps.rows.last_mut() {
        row.meets = Some(ok);
    }
    Ok((ok, r))
}

/// Bisection by rate between the two bounds (module header): which steps run.
async fn search_rate(steps: &mut Steps<'_>, t: &Template, how: Search) -> anyhow::Result<()> {
    let (sync, most, limit) = bounds(steps, t).await?;
    for (k, r) in [&sync, &most].into_iter().enumerate() {
        steps.rows[k].meets = Some(meets(r, how.share));
    }
    let (lo, hi) = (sync.summary.requests_per_s, most.summary.requests_per_s);
    // nothing to bisect when one at a time already misses, when all at once still meets (the
    // most the server completes is the answer), or when all at once completed no more
    if !meets(&sync, how.share) || meets(&most, how.share) || hi <= lo {
        return Ok(());
    }
    let (mut good, mut bad) = (lo, hi);
    for _ in 0..how.max_steps {
        if bad / good - 1.0 <= how.precision {
            break;
        }
        let mid = 0.5 * (good + bad);
        let (ok, _) = judged(
            steps,
            &format!("rate-{mid:.3}"),
            &rate_plan(t, mid, limit),
            how.share,
        )
        .await?;
        if ok {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Ok(())
}

async fn search_concurrency(
    steps: &mut Steps<'_>,
    t: &Template,
    how: Search,
) -> anyhow::Result<()> {
    let Some(cap) = t.step.max_concurrency else {
        bail!("a concurrency search needs --max-concurrency, the highest concurrency to try");
    };
    let closed = |c: usize, limit: Option<f64>| StepPlan {
        schedule: Schedule::AtOnce,
        max_concurrency: Some(c),
        saturation_s: limit,
        ..t.step.clone()
    };
    let (ok, one) = judged(
        steps,
        "synchronous",
        &closed(1, t.step.saturation_s),
        how.share,
    )
    .await?;
    if !ok {
        return Ok(());
    }
    let limit = Some(saturation_limit(t, &one));
    // the cap first, then the midpoints of the bracket
    let (mut good, mut bad) = (1usize, cap + 1);
    let mut probe = (cap > 1).then_some(cap);
    for _ in 0..=how.max_steps {
        let Some(c) = probe.take().or((bad - good > 1).then(|| (good + bad) / 2)) else {
            break;
        };
        let name = format!("concurrency-{c}");
        let (ok, _) = judged(steps, &name, &closed(c, limit), how.share).await?;
        if ok {
            good = c;
        } else {
            bad = c;
        }
    }
    Ok(())
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or(String::new(), |v| format!("{v:.digits$}"))
}

/// OUT/steps.csv and OUT/steps.md.
fn write_table(out: &Path, rows: &[Row]) -> anyhow::Result<()> {
    let (csv, md) = tables(rows)?;
    std::fs::write(out.join("steps.csv"), csv)?;
    std::fs::write(out.join("steps.md"), md)?;
    Ok(())
}

/// The plan's table as CSV and as Markdown.
pub fn tables(rows: &[Row]) -> anyhow::Result<(String, String)> {
    let mut csv = String::from(
        "step,name,rate_asked,concurrency,requests,failed,requests_per_s,output_tokens_per_s,\
         tokens_per_s_per_user,ttft_p50_s,ttft_p99_s,tpot_p50_s,tpot_p99_s,e2e_p99_s,good_share,\
         goodput_requests_per_s,saturated,meets\n",
    );
    let mut md = String::from(
        "| step | load | req/s | out tok/s | tok/s/user | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) \
         | e2e p99 (s) | good | goodput req/s | |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let ms = |v: Option<f64>| opt(v.map(|x| x * 1e3), 1);
    for r in rows {
        let load = match (r.rate_asked, r.concurrency) {
            (Some(rate), _) => format!("{rate:.3} req/s"),
            (None, Some(c)) => format!("C = {c}"),
            (None, None) => "all at once".into(),
        };
        writeln!(
            csv,
            "{},{},{},{},{},{},{:.6},{:.6},{},{},{},{},{},{},{:.6},{:.6},{},{}",
            r.step,
            r.name,
            opt(r.rate_asked, 6),
            r.concurrency.map_or(String::new(), |c| c.to_string()),
            r.requests,
            r.failed,
            r.requests_per_s,
            r.output_tokens_per_s,
            opt(r.tokens_per_s_per_user, 6),
            opt(r.ttft_p50_s, 6),
            opt(r.ttft_p99_s, 6),
            opt(r.tpot_p50_s, 6),
            opt(r.tpot_p99_s, 6),
            opt(r.e2e_p99_s, 6),
            r.good_share,
            r.goodput_requests_per_s,
            r.saturated,
            r.meets.map_or(String::new(), |m| m.to_string()),
        )?;
        let mark = match (r.saturated, r.meets) {
            (true, _) => "over-saturated",
            (false, Some(true)) => "meets",
            (false, Some(false)) => "misses",
            (false, None) => "",
        };
        writeln!(
            md,
            "| {} {} | {load} | {:.3} | {:.1} | {} | {} / {} | {} / {} | {} | {:.0} % | {:.3} | {mark} |",
            r.step,
            r.name,
            r.requests_per_s,
            r.output_tokens_per_s,
            opt(r.tokens_per_s_per_user, 1),
            ms(r.ttft_p50_s),
            ms(r.ttft_p99_s),
            ms(r.tpot_p50_s),
            ms(r.tpot_p99_s),
            opt(r.e2e_p99_s, 2),
            100.0 * r.good_share,
            r.goodput_requests_per_s,
        )?;
    }
    Ok((csv, md))
}

/// OUT/pareto.svg: tokens/s per user against total output tokens/s, one point per step.
fn pareto(out: &Path, rows: &[Row]) -> anyhow::Result<PathBuf> {
    use plotters::prelude::*;
    crate::figures::fonts();
    let pts: Vec<(f64, f64, &str)> = rows
        .iter()
        .filter_map(|r| {
            Some((
                r.output_tokens_per_s,
                r.tokens_per_s_per_user?,
                r.name.as_str(),
            ))
        })
        .filter(|(x, y, _)| x.is_finite() && y.is_finite())
        .collect();
    let path = out.join("pareto.svg");
    let xmax = pts.iter().map(|p| p.0).fold(0.0, f64::max) * 1.15 + 1e-9;
    let ymax = pts.iter().map(|p| p.1).fold(0.0, f64::max) * 1.15 + 1e-9;
    let err = |e: DrawingAreaErrorKind<std::io::Error>| anyhow::anyhow!("drawing: {e:?}");
    let root = SVGBackend::new(&path, (760, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut ch = ChartBuilder::on(&root)
        .caption(
            "Per-user speed against total throughput, one point per step",
            ("sans-serif", 18),
        )
        .margin(14)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)
        .map_err(err)?;
    ch.configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("output tokens/s, all requests")
        .y_desc("output tokens/s per user (1 / median TPOT)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err)?;
    let blue = RGBColor(31, 119, 180);
    let mut by_x = pts.clone();
    by_x.sort_by(|a, b| a.0.total_cmp(&b.0));
    ch.draw_series(LineSeries::new(
        by_x.iter().map(|p| (p.0, p.1)),
        blue.stroke_width(1),
    ))
    .map_err(err)?;
    ch.draw_series(
        pts.iter()
            .map(|p| Circle::new((p.0, p.1), 4, blue.filled())),
    )
    .map_err(err)?;
    ch.draw_series(
        pts.iter()
            .map(|p| Text::new(p.2.to_string(), (p.0, p.1), ("sans-serif", 12).into_font())),
    )
    .map_err(err)?;
    root.present().map_err(err)?;
    drop(ch);
    drop(root);
    Ok(path)
}
