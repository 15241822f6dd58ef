//! The phase and curve tables computed with plain loops over the trace records, through the
//! formulas of `metrics.rs`: the slow twin of `frames.rs`, which the tables are computed with. The
//! parity tests below hold the two equal bit for bit, on hand-made runs with every edge the formulas
//! name (rejected cohorts, silent requests, failures, multi-token and empty chunks, a phase without
//! records) and on every committed sweep.

use std::collections::{BTreeMap, BTreeSet};

use super::metrics::{q_decode, quantile, ttft};
use super::tables::{audit_polls, bracket, CurveRow, PhaseRow, Run};
use crate::trace::TraceRecord;

pub fn phase_rows(run: &Run) -> Vec<PhaseRow> {
    let mut rows = Vec::new();
    for (i, p) in run.phases.iter().enumerate() {
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
            server_counter_status: audit_polls(run, i, tokens),
            bracket_check: bracket(p, tokens),
            errors: recs.iter().filter(|r| r.error.is_some()).count(),
            exact_tokens: recs.len() == p.requests
                && recs
                    .iter()
                    .all(|r| r.error.is_none() && r.tokens() == p.output_cap as u64),
            rejected_cohorts: d.rejected_cohorts,
        });
    }
    rows
}

/// Paired means per level (phases of one level in run order), TTFT pooled over their requests.
pub fn curve(run: &Run, rows: &[PhaseRow]) -> Vec<CurveRow> {
    let mut by_c: BTreeMap<usize, Vec<&PhaseRow>> = BTreeMap::new();
    for r in rows {
        by_c.entry(r.concurrency).or_default().push(r);
    }
    by_c.into_iter()
        .map(|(c, rs)| {
            let qd: Vec<f64> = rs.iter().filter_map(|r| r.decode_tok_s).collect();
            let qp: Vec<f64> = rs.iter().map(|r| r.phase_tok_s).collect();
            let pooled: Vec<f64> = rs
                .iter()
                .flat_map(|r| run.traces.get(&r.phase).into_iter().flatten())
                .filter_map(ttft)
                .collect();
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::analysis::tables::{load_run, tables};
    use crate::trace::PhaseRecord;

    fn rec(cohort: usize, prompt: &str, started: f64, events: &[(f64, u32)]) -> TraceRecord {
        TraceRecord {
            cohort,
            prompt: prompt.into(),
            started_mono: started,
            events_mono: events.to_vec(),
            ..Default::default()
        }
    }

    fn phase(name: &str, c: usize, cap: usize, requests: usize, span: (f64, f64)) -> PhaseRecord {
        PhaseRecord {
            phase: name.into(),
            concurrency: c,
            output_cap: cap,
            requests,
            start_mono: span.0,
            end_mono: span.1,
            ..Default::default()
        }
    }

    /// Both computations, compared field by field (floats by their bits).
    fn assert_parity(run: &Run) {
        let (rows, curve_rows) = tables(run).unwrap();
        let want = phase_rows(run);
        assert_eq!(format!("{rows:?}"), format!("{want:?}"));
        let want_curve = curve(run, &want);
        assert_eq!(format!("{curve_rows:?}"), format!("{want_curve:?}"));
        let bits = |v: Option<f64>| v.map(f64::to_bits);
        for (a, b) in rows.iter().zip(&want) {
            assert_eq!(bits(a.decode_tok_s), bits(b.decode_tok_s), "{}", a.phase);
            assert_eq!(a.shared_decode_s.to_bits(), b.shared_decode_s.to_bits());
            assert_eq!(bits(a.ttft_p95_s), bits(b.ttft_p95_s));
        }
        for (a, b) in curve_rows.iter().zip(&want_curve) {
            assert_eq!(bits(a.q_decode_mean), bits(b.q_decode_mean));
            assert_eq!(a.q_phase_mean.to_bits(), b.q_phase_mean.to_bits());
            assert_eq!(bits(a.ttft_median_s), bits(b.ttft_median_s));
        }
    }

    fn hand_made() -> Run {
        let mut traces = BTreeMap::new();
        // two cohorts; the second's requests never overlap (rejected); a multi-token chunk and an
        // empty final chunk
        traces.insert(
            "a".to_string(),
            vec![
                rec(0, "p", 0.0, &[(0.3, 1), (0.9, 2), (1.4, 1), (1.5, 0)]),
                rec(0, "q", 0.1, &[(0.5, 1), (1.0, 1), (1.2, 1), (1.3, 1)]),
                rec(1, "p", 2.0, &[(2.1, 1), (2.2, 1)]),
                rec(1, "r", 2.0, &[(2.5, 1), (2.7, 1)]),
            ],
        );
        // a silent request (no token events) rejects its cohort; a failed one
        let mut failed = rec(0, "s", 3.0, &[(3.2, 1)]);
        failed.error = Some("boom".into());
        traces.insert(
            "b".to_string(),
            vec![
                rec(0, "s", 3.0, &[(3.5, 0)]),
                failed,
                rec(1, "s", 4.0, &[(4.25, 1), (4.75, 3), (5.125, 1)]),
            ],
        );
        // level 2 again, exact: two cohorts of one request
        traces.insert(
            "c".to_string(),
            vec![
                rec(0, "x", 6.0, &[(6.1, 1), (6.4, 1), (6.7, 1)]),
                rec(1, "y", 7.0, &[(7.3, 1), (7.35, 1), (7.6, 1)]),
            ],
        );
        Run {
            phases: vec![
                phase("a", 2, 4, 4, (0.0, 2.9)),
                phase("b", 1, 5, 3, (3.0, 5.5)),
                phase("c", 2, 3, 2, (6.0, 7.7)),
                phase("d", 4, 4, 4, (8.0, 9.0)), // no records at all
            ],
            traces,
            polls: Vec::new(),
        }
    }

    #[test]
    fn polars_tables_equal_the_plain_loops_on_a_hand_made_run() {
        let run = hand_made();
        assert_parity(&run);
        let (rows, curve) = tables(&run).unwrap();
        // the numbers themselves, by hand: phase a, cohort 0: a = 0.5, b = 1.3, D = 2 + 1 + 1 + 1
        assert_eq!(rows[0].shared_decode_tokens, 5);
        assert!((rows[0].shared_decode_s - 0.8).abs() < 1e-12);
        assert_eq!((rows[0].rejected_cohorts, rows[1].rejected_cohorts), (1, 1));
        assert_eq!(
            (rows[1].errors, rows[1].exact_tokens, rows[2].exact_tokens),
            (1, false, true)
        );
        assert_eq!((rows[3].requests, rows[3].decode_tok_s), (0, None));
        assert_eq!(
            curve.iter().map(|c| c.concurrency).collect::<Vec<_>>(),
            [1, 2, 4]
        );
        assert_eq!(curve[1].phases, ["a", "c"]);
        assert_eq!(curve[2].q_decode_mean, None);
    }

    #[test]
    fn polars_tables_equal_the_plain_loops_on_every_committed_sweep() {
        let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results");
        let mut todo = vec![results];
        let mut seen = 0;
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    todo.push(p);
                } else if p.file_name().is_some_and(|n| n == "phases.jsonl") {
                    assert_parity(&load_run(p.parent().unwrap()).unwrap());
                    seen += 1;
                }
            }
        }
        assert!(seen >= 20, "only {seen} committed sweeps found");
    }
}
