//! Records -> tables: per-phase rows in the columns of the paper's `survey_phases.csv`, the paired
//! curve per level, the Table 4 Markdown, and the server-counter audit (MEASUREMENTS.md §2.3-2.5).
//! A pure function of the run's files: the same records give byte-identical outputs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use super::metrics::{q_decode, quantile, ttft};
use crate::trace::{read_records, PhaseRecord, StatsPoll, TraceRecord};

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
    /// TTFTs of the phase's requests (pooled per level for the curve).
    pub ttfts: Vec<f64>,
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

pub struct Run {
    pub phases: Vec<PhaseRecord>,
    pub traces: BTreeMap<String, Vec<TraceRecord>>,
    pub polls: Vec<StatsPoll>,
}

pub fn load_run(dir: &Path) -> anyhow::Result<Run> {
    let phases: Vec<PhaseRecord> = read_records(&dir.join("phases.jsonl"))
        .with_context(|| format!("{} is not a sweep run", dir.display()))?;
    let mut traces = BTreeMap::new();
    for p in &phases {
        let path = dir.join("traces").join(format!("{}.jsonl.gz", p.phase));
        let mut recs: Vec<TraceRecord> = read_records(&path)?;
        recs.sort_by(|a, b| {
            (a.cohort, a.family_index, a.prompt_index).cmp(&(
                b.cohort,
                b.family_index,
                b.prompt_index,
            ))
        });
        traces.insert(p.phase.clone(), recs);
    }
    let poll_path = dir.join("stats_poll.jsonl");
    let polls = if poll_path.exists() {
        read_records(&poll_path)?
    } else {
        Vec::new()
    };
    Ok(Run {
        phases,
        traces,
        polls,
    })
}

fn tokens_total(v: &serde_json::Value) -> Option<u64> {
    v.get("tokens_total").and_then(|t| t.as_u64())
}

/// §2.4 offline: an idle poll within 10 s before the start and one within 10 s after the end whose
/// token difference equals the client's tokens. A poll taken before the previous phase ended (or
/// after the next one started) brackets other traffic too, so it does not count as this phase's
/// bracket **(our choice; it only matters for phases shorter than the poll interval)**.
fn poll_status(
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

fn bracket(p: &PhaseRecord, client_tokens: u64) -> String {
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

pub fn phase_rows(run: &Run) -> Vec<PhaseRow> {
    let mut rows = Vec::new();
    for (i, p) in run.phases.iter().enumerate() {
        let prev_end = if i > 0 {
            run.phases[i - 1].end_mono
        } else {
            f64::NEG_INFINITY
        };
        let next_start = run
            .phases
            .get(i + 1)
            .map_or(f64::INFINITY, |n| n.start_mono);
        let recs = run.traces.get(&p.phase).map(Vec::as_slice).unwrap_or(&[]);
        let mut by_cohort: BTreeMap<usize, Vec<&TraceRecord>> = BTreeMap::new();
        for r in recs {
            by_cohort.entry(r.cohort).or_default().push(r);
        }
        let cohorts: Vec<Vec<&TraceRecord>> = by_cohort.into_values().collect();
        let d = q_decode(&cohorts);
        let tokens: u64 = recs.iter().map(|r| r.tokens()).sum();
        let ttfts: Vec<f64> = recs.iter().filter_map(ttft).collect();
        let secs = p.end_mono - p.start_mono;
        let unique: BTreeSet<&str> = recs.iter().map(|r| r.prompt.as_str()).collect();
        let decode = d.rate();
        rows.push(PhaseRow {
            phase: p.phase.clone(),
            family: p.family.clone(),
            concurrency: p.concurrency,
            requests: recs.len(),
            tokens,
            output_cap: p.output_cap,
            shared_decode_tokens: d.tokens,
            shared_decode_s: d.seconds,
            decode_tok_s: decode,
            phase_tok_s: tokens as f64 / secs,
            mean_decode_per_stream: decode.map(|q| q / p.concurrency as f64),
            ttft_median_s: quantile(&ttfts, 0.5),
            ttft_p95_s: quantile(&ttfts, 0.95),
            unique_prompts: unique.len(),
            capacity_retries: recs.iter().map(|r| r.capacity_retries as u64).sum(),
            server_counter_status: poll_status(p, tokens, &run.polls, prev_end, next_start),
            bracket_check: bracket(p, tokens),
            errors: recs.iter().filter(|r| r.error.is_some()).count(),
            exact_tokens: recs.len() == p.requests
                && recs
                    .iter()
                    .all(|r| r.error.is_none() && r.tokens() == p.output_cap as u64),
            rejected_cohorts: d.rejected_cohorts,
            ttfts,
        });
    }
    rows
}

/// Paired means per level (phases of one level in run order), TTFT pooled over them.
pub fn curve(rows: &[PhaseRow]) -> Vec<CurveRow> {
    let mut by_c: BTreeMap<usize, Vec<&PhaseRow>> = BTreeMap::new();
    for r in rows {
        by_c.entry(r.concurrency).or_default().push(r);
    }
    by_c.into_iter()
        .map(|(c, rs)| {
            let qd: Vec<f64> = rs.iter().filter_map(|r| r.decode_tok_s).collect();
            let qp: Vec<f64> = rs.iter().map(|r| r.phase_tok_s).collect();
            let pooled: Vec<f64> = rs.iter().flat_map(|r| r.ttfts.iter().copied()).collect();
            CurveRow {
                concurrency: c,
                phases: rs.iter().map(|r| r.phase.clone()).collect(),
                q_decode_mean: (qd.len() == rs.len() && !qd.is_empty())
                    .then(|| qd.iter().sum::<f64>() / qd.len() as f64),
                q_phase_mean: qp.iter().sum::<f64>() / qp.len() as f64,
                q_decode: qd,
                q_phase: qp,
                ttft_median_s: quantile(&pooled, 0.5),
                ttft_p95_s: quantile(&pooled, 0.95),
            }
        })
        .collect()
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
    let rows = phase_rows(&run);
    let c = curve(&rows);
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
        std::fs::write(dir.join(&name), &text)?;
        if name == "table4.md" {
            table = text;
        }
    }
    Ok(table)
}
