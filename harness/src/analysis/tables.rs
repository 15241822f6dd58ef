//! Records -> tables: per-phase rows in the columns of the paper's `survey_phases.csv`, the paired
//! curve per level, the Table 4 Markdown, and the server-counter audit (MEASUREMENTS.md §2.3-2.5).
//! A pure function of the run's files: the same records give byte-identical outputs.

use std::fmt::Write as _;
use std::path::Path;

use polars::prelude::{DataFrame, DataType, PolarsResult, Series};

use super::frames;
pub use super::run::{load_run, Run};
use crate::trace::{PhaseRecord, StatsPoll};

/// One phase, as in `survey_phases.csv` (plus audit columns).
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseRow {
    pub phase: String,
    pub family: String,
    pub concurrency: usize,
    pub requests: usize,
    pub tokens: u64,
    pub output_cap: usize,
    pub shared_decode_tokens: u64,
    pub shared_decode_s: f64,
    pub decode_tok_s: Option<f64>,
    pub phase_tok_s: f64,
    pub mean_decode_per_stream: Option<f64>,
    pub ttft_median_s: Option<f64>,
    pub ttft_p95_s: Option<f64>,
    pub unique_prompts: usize,
    pub capacity_retries: u64,
    pub server_counter_status: String,
    /// The direct before/after bracket of §2.4: ok / mismatch / not_idle / unavailable.
    pub bracket_check: String,
    pub errors: usize,
    pub exact_tokens: bool,
    pub rejected_cohorts: usize,
}

/// One level of the paired curve.
#[derive(Clone, Debug, PartialEq)]
pub struct CurveRow {
    pub concurrency: usize,
    pub phases: Vec<String>,
    pub q_decode: Vec<f64>,
    pub q_phase: Vec<f64>,
    pub q_decode_mean: Option<f64>,
    pub q_phase_mean: f64,
    pub ttft_median_s: Option<f64>,
    pub ttft_p95_s: Option<f64>,
}

fn tokens_total(v: &serde_json::Value) -> Option<u64> {
    v.get("tokens_total").and_then(|t| t.as_u64())
}

/// §2.4 offline: an idle poll within 10 s before the start and one within 10 s after the end whose
/// token difference equals the client's tokens. A poll taken before the previous phase ended (or
/// after the next one started) brackets other traffic too, so it does not count as this phase's
/// bracket **(our choice; it only matters for phases shorter than the poll interval)**.
pub(crate) fn poll_status(
    p: &PhaseRecord,
    client_tokens: u64,
    polls: &[StatsPoll],
    prev_end: f64,
    next_start: f64,
) -> String {
    if polls.is_empty() {
        return "unavailable".into();
    }
    let idle =
        |s: &StatsPoll| s.stats.get("requests_in_flight").and_then(|v| v.as_u64()) == Some(0);
    let before = polls.iter().rev().find(|s| {
        s.t_mono <= p.start_mono
            && s.t_mono >= p.start_mono - 10.0
            && s.t_mono >= prev_end
            && idle(s)
    });
    let after = polls.iter().find(|s| {
        s.t_mono >= p.end_mono && s.t_mono <= p.end_mono + 10.0 && s.t_mono <= next_start && idle(s)
    });
    match (before, after) {
        (Some(b), Some(a)) => match (tokens_total(&b.stats), tokens_total(&a.stats)) {
            (Some(x), Some(y)) if y - x == client_tokens => "matched".into(),
            _ => "mismatch".into(),
        },
        _ => "no_idle_bracket".into(),
    }
}

pub(crate) fn bracket(p: &PhaseRecord, client_tokens: u64) -> String {
    let (Some(b), Some(a)) = (&p.stats_before, &p.stats_after) else {
        return "unavailable".into();
    };
    let req = |v: &serde_json::Value| v.get("requests_total").and_then(|t| t.as_u64());
    let ok_tokens =
        matches!((tokens_total(b), tokens_total(a)), (Some(x), Some(y)) if y - x == client_tokens);
    let ok_requests = matches!((req(b), req(a)), (Some(x), Some(y)) if y - x == p.requests as u64 + p.capacity_retries);
    if p.idle_at_start == Some(false) {
        "not_idle".into()
    } else if ok_tokens && ok_requests {
        "ok".into()
    } else {
        "mismatch".into()
    }
}

/// The phase table: trace statistics from polars (`frames.rs`), the server-counter audit from the
/// phase and poll records.
pub fn phase_rows(run: &Run) -> anyhow::Result<Vec<PhaseRow>> {
    Ok(tables(run)?.0)
}

/// The phase table and the paired curve of a run.
pub fn tables(run: &Run) -> anyhow::Result<(Vec<PhaseRow>, Vec<CurveRow>)> {
    let f = frames::frames(run)?;
    let reqs = frames::per_request(&f).collect()?;
    let pt = frames::phase_table(&f, &reqs)?;
    let ct = frames::curve_table(&f, &reqs, &pt)?;
    let col = Cols(&pt);
    let names = col.strs("phase")?;
    let (decode, phase_tok_s) = (col.f64s("decode_tok_s")?, col.f64s("phase_tok_s")?);
    let (per_stream, shared_s) = (
        col.f64s("mean_decode_per_stream")?,
        col.f64s("shared_decode_s")?,
    );
    let (median, p95) = (col.f64s("ttft_median_s")?, col.f64s("ttft_p95_s")?);
    let (conc, requests, tokens) = (
        col.u64s("concurrency")?,
        col.u64s("requests")?,
        col.u64s("tokens")?,
    );
    let (cap, shared_tokens) = (col.u64s("output_cap")?, col.u64s("shared_decode_tokens")?);
    let (unique, retries) = (col.u64s("unique_prompts")?, col.u64s("capacity_retries")?);
    let (errors, rejected) = (col.u64s("errors")?, col.u64s("rejected_cohorts")?);
    let exact = col.bools("exact_tokens")?;
    let mut rows = Vec::with_capacity(run.phases.len());
    for (i, p) in run.phases.iter().enumerate() {
        anyhow::ensure!(
            names[i] == p.phase,
            "phase table out of run order at {}",
            p.phase
        );
        rows.push(PhaseRow {
            phase: p.phase.clone(),
            family: p.family.clone(),
            concurrency: conc[i] as usize,
            requests: requests[i] as usize,
            tokens: tokens[i],
            output_cap: cap[i] as usize,
            shared_decode_tokens: shared_tokens[i],
            shared_decode_s: shared_s[i].unwrap_or(0.0),
            decode_tok_s: decode[i],
            phase_tok_s: phase_tok_s[i].unwrap_or(f64::NAN),
            mean_decode_per_stream: per_stream[i],
            ttft_median_s: median[i],
            ttft_p95_s: p95[i],
            unique_prompts: unique[i] as usize,
            capacity_retries: retries[i],
            server_counter_status: audit_polls(run, i, tokens[i]),
            bracket_check: bracket(p, tokens[i]),
            errors: errors[i] as usize,
            exact_tokens: exact[i],
            rejected_cohorts: rejected[i] as usize,
        });
    }
    let col = Cols(&ct);
    let (levels, phases) = (col.u64s("concurrency")?, col.str_lists("phase")?);
    let (qd, qp) = (col.f64_lists("q_decode")?, col.f64_lists("q_phase")?);
    let (qd_mean, qp_mean) = (col.f64s("q_decode_mean")?, col.f64s("q_phase_mean")?);
    let (median, p95) = (col.f64s("ttft_median_s")?, col.f64s("ttft_p95_s")?);
    let curve = (0..ct.height())
        .map(|i| CurveRow {
            concurrency: levels[i] as usize,
            phases: phases[i].clone(),
            q_decode: qd[i].clone(),
            q_phase: qp[i].clone(),
            q_decode_mean: qd_mean[i],
            q_phase_mean: qp_mean[i].unwrap_or(f64::NAN),
            ttft_median_s: median[i],
            ttft_p95_s: p95[i],
        })
        .collect();
    Ok((rows, curve))
}

/// §2.4's offline audit of phase `i` of the run against the stats polls.
pub(crate) fn audit_polls(run: &Run, i: usize, client_tokens: u64) -> String {
    let prev_end = if i > 0 {
        run.phases[i - 1].end_mono
    } else {
        f64::NEG_INFINITY
    };
    let next_start = run
        .phases
        .get(i + 1)
        .map_or(f64::INFINITY, |n| n.start_mono);
    poll_status(
        &run.phases[i],
        client_tokens,
        &run.polls,
        prev_end,
        next_start,
    )
}

/// Typed reads of a polars table's columns (nulls kept as `None` where a column may have them).
struct Cols<'a>(&'a DataFrame);

impl Cols<'_> {
    fn series(&self, name: &str, to: &DataType) -> PolarsResult<Series> {
        self.0.column(name)?.as_materialized_series().cast(to)
    }

    fn f64s(&self, name: &str) -> PolarsResult<Vec<Option<f64>>> {
        Ok(self
            .series(name, &DataType::Float64)?
            .f64()?
            .into_iter()
            .collect())
    }

    fn u64s(&self, name: &str) -> PolarsResult<Vec<u64>> {
        let s = self.series(name, &DataType::UInt64)?;
        Ok(s.u64()?.into_iter().map(|v| v.unwrap_or(0)).collect())
    }

    fn bools(&self, name: &str) -> PolarsResult<Vec<bool>> {
        let s = self.series(name, &DataType::Boolean)?;
        Ok(s.bool()?.into_iter().map(|v| v.unwrap_or(false)).collect())
    }

    fn strs(&self, name: &str) -> PolarsResult<Vec<String>> {
        let s = self.series(name, &DataType::String)?;
        Ok(s.str()?
            .into_iter()
            .map(|v| v.unwrap_or_default().to_string())
            .collect())
    }

    fn lists(&self, name: &str) -> PolarsResult<Vec<Series>> {
        let s = self.0.column(name)?.as_materialized_series().clone();
        Ok(s.list()?
            .into_iter()
            .map(|v| v.unwrap_or_default())
            .collect())
    }

    fn f64_lists(&self, name: &str) -> PolarsResult<Vec<Vec<f64>>> {
        self.lists(name)?
            .into_iter()
            .map(|s| {
                Ok(s.cast(&DataType::Float64)?
                    .f64()?
                    .into_no_null_iter()
                    .collect())
            })
            .collect()
    }

    fn str_lists(&self, name: &str) -> PolarsResult<Vec<Vec<String>>> {
        self.lists(name)?
            .into_iter()
            .map(|s| Ok(s.str()?.into_no_null_iter().map(str::to_string).collect()))
            .collect()
    }
}

/// The level with the highest mean Q_decode.
pub fn peak(curve: &[CurveRow]) -> Option<&CurveRow> {
    curve
        .iter()
        .filter(|r| r.q_decode_mean.is_some())
        .max_by(|a, b| {
            a.q_decode_mean
                .partial_cmp(&b.q_decode_mean)
                .unwrap_or(std::cmp::Ordering::Equal)
        })
}

fn opt(v: Option<f64>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

pub fn phases_csv(rows: &[PhaseRow]) -> String {
    let mut s = String::from("phase,family,concurrency,requests,tokens,output_cap,shared_decode_tokens,shared_decode_s,decode_tok_s,phase_tok_s,mean_decode_per_stream,ttft_median_s,ttft_p95_s,unique_prompts,capture_writes,capacity_retries,sampled_server_counter_status,bracket_check,errors,exact_tokens,rejected_cohorts\n");
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},off,{},{},{},{},{},{}",
            r.phase,
            r.family,
            r.concurrency,
            r.requests,
            r.tokens,
            r.output_cap,
            r.shared_decode_tokens,
            r.shared_decode_s,
            opt(r.decode_tok_s),
            r.phase_tok_s,
            opt(r.mean_decode_per_stream),
            opt(r.ttft_median_s),
            opt(r.ttft_p95_s),
            r.unique_prompts,
            r.capacity_retries,
            r.server_counter_status,
            r.bracket_check,
            r.errors,
            r.exact_tokens,
            r.rejected_cohorts
        );
    }
    s
}

pub fn curve_csv(curve: &[CurveRow]) -> String {
    let mut s = String::from("concurrency,q_decode_mean,q_decode_min,q_decode_max,q_phase_mean,q_phase_min,q_phase_max,q_decode_per_stream,ttft_median_s,ttft_p95_s,phases\n");
    for r in curve {
        let mn = |v: &[f64]| v.iter().copied().reduce(f64::min);
        let mx = |v: &[f64]| v.iter().copied().reduce(f64::max);
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{}",
            r.concurrency,
            opt(r.q_decode_mean),
            opt(mn(&r.q_decode)),
            opt(mx(&r.q_decode)),
            r.q_phase_mean,
            opt(mn(&r.q_phase)),
            opt(mx(&r.q_phase)),
            opt(r.q_decode_mean.map(|q| q / r.concurrency as f64)),
            opt(r.ttft_median_s),
            opt(r.ttft_p95_s),
            r.phases.join(" ")
        );
    }
    s
}

/// The paper's Table 4 layout.
pub fn table4_md(curve: &[CurveRow]) -> String {
    let mut s = String::from("| C | Q_decode (tok/s) | Q_phase (tok/s) | Q_decode/C | TTFT median (s) | TTFT p95 (s) |\n|---:|---:|---:|---:|---:|---:|\n");
    let f = |v: Option<f64>, d: usize| v.map(|x| format!("{x:.d$}")).unwrap_or_else(|| "-".into());
    for r in curve {
        let range = |v: &[f64]| match (
            v.iter().copied().reduce(f64::min),
            v.iter().copied().reduce(f64::max),
        ) {
            (Some(a), Some(b)) if v.len() > 1 => format!(" ({a:.2}-{b:.2})"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "| {} | {}{} | {}{} | {} | {} | {} |",
            r.concurrency,
            f(r.q_decode_mean, 2),
            range(&r.q_decode),
            f(Some(r.q_phase_mean), 2),
            range(&r.q_phase),
            f(r.q_decode_mean.map(|q| q / r.concurrency as f64), 3),
            f(r.ttft_median_s, 2),
            f(r.ttft_p95_s, 2)
        );
    }
    s
}

/// The table files of a run and their contents: a pure function of the run's records.
pub fn render(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let run = load_run(dir)?;
    let (rows, c) = tables(&run)?;
    let mut md = table4_md(&c);
    if let Some(p) = peak(&c) {
        let _ = writeln!(
            md,
            "\nPeak: C = {} with paired mean Q_decode {:.2} tok/s.",
            p.concurrency,
            p.q_decode_mean.unwrap_or(0.0)
        );
    }
    Ok(vec![
        ("phases.csv".into(), phases_csv(&rows)),
        ("curve.csv".into(), curve_csv(&c)),
        ("table4.md".into(), md),
    ])
}

/// Write phases.csv, curve.csv and table4.md into `dir`; returns table4.md.
pub fn analyze(dir: &Path) -> anyhow::Result<String> {
    let files = render(dir)?;
    let mut table = String::new();
    for (name, text) in files {
        crate::csv::write(&dir.join(&name), &text)?;
        if name == "table4.md" {
            table = text;
        }
    }
    Ok(table)
}
