//! The formulas of MEASUREMENTS.md §2.3 as pure functions of trace records: shared-interval decode
//! throughput over cohorts (a ratio of sums), whole-phase throughput, per-request decode rates and
//! TTFT (quantiles: `crate::stats`).

use crate::trace::TraceRecord;

pub use crate::stats::quantile;

/// Token events (n > 0) of a record on the monotonic clock.
fn token_events(r: &TraceRecord) -> impl Iterator<Item = &(f64, u32)> {
    r.events_mono.iter().filter(|e| e.1 > 0)
}

/// Time of the first token event.
pub fn t_first(r: &TraceRecord) -> Option<f64> {
    token_events(r).next().map(|e| e.0)
}

/// Time of the last token event.
pub fn t_last(r: &TraceRecord) -> Option<f64> {
    token_events(r).last().map(|e| e.0)
}

/// TTFT = first token event − started.
pub fn ttft(r: &TraceRecord) -> Option<f64> {
    t_first(r).map(|t| t - r.started_mono)
}

/// `(tokens − n_first) / (t_last − t_first)`.
pub fn request_decode_rate(r: &TraceRecord) -> Option<f64> {
    let first = token_events(r).next()?;
    let last = t_last(r)?;
    (last > first.0).then(|| (r.tokens() - first.1 as u64) as f64 / (last - first.0))
}

/// One cohort's shared interval: `a = max_r t_first(r)`, `b = min_r t_last(r)`, `D` = tokens of
/// events with `a < t ≤ b`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shared {
    pub a: f64,
    pub b: f64,
    pub tokens: u64,
}

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum CohortError {
    #[error("a request of the cohort has no token events")]
    NoTokens,
    #[error("no shared interval: b = {b} <= a = {a}")]
    NoOverlap { a: f64, b: f64 },
}

pub fn shared_interval(cohort: &[&TraceRecord]) -> Result<Shared, CohortError> {
    let mut a = f64::NEG_INFINITY;
    let mut b = f64::INFINITY;
    for r in cohort {
        a = a.max(t_first(r).ok_or(CohortError::NoTokens)?);
        b = b.min(t_last(r).ok_or(CohortError::NoTokens)?);
    }
    if b <= a {
        return Err(CohortError::NoOverlap { a, b });
    }
    let tokens = cohort
        .iter()
        .flat_map(|r| token_events(r))
        .filter(|e| e.0 > a && e.0 <= b)
        .map(|e| e.1 as u64)
        .sum();
    Ok(Shared { a, b, tokens })
}

/// Q_decode over cohorts: `Σ D_j / Σ (b_j − a_j)`, with the totals; cohorts without a shared
/// interval are left out and counted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decode {
    pub tokens: u64,
    pub seconds: f64,
    pub rejected_cohorts: usize,
}

impl Decode {
    pub fn rate(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.tokens as f64 / self.seconds)
    }
}

pub fn q_decode(cohorts: &[Vec<&TraceRecord>]) -> Decode {
    let mut d = Decode {
        tokens: 0,
        seconds: 0.0,
        rejected_cohorts: 0,
    };
    for c in cohorts {
        match shared_interval(c) {
            Ok(s) => {
                d.tokens += s.tokens;
                d.seconds += s.b - s.a;
            }
            Err(_) => d.rejected_cohorts += 1,
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(started: f64, events: &[(f64, u32)]) -> TraceRecord {
        TraceRecord {
            started_mono: started,
            events_mono: events.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn the_event_exactly_at_a_is_excluded_and_b_included() {
        // r1 first token at 1.0, r2 at 2.0 -> a = 2.0; last tokens 5.0 and 4.0 -> b = 4.0
        let r1 = rec(0.0, &[(1.0, 1), (2.0, 1), (3.0, 1), (4.0, 1), (5.0, 1)]);
        let r2 = rec(0.0, &[(2.0, 1), (3.0, 2), (4.0, 1)]);
        let s = shared_interval(&[&r1, &r2]).unwrap();
        assert_eq!((s.a, s.b), (2.0, 4.0));
        // in (2, 4]: r1 at 3 and 4 (2 tokens), r2 at 3 (2 tokens, a multi-token chunk) and 4 (1)
        assert_eq!(s.tokens, 5);
    }

    #[test]
    fn q_decode_is_a_ratio_of_sums_not_a_mean_of_rates() {
        // cohort 1: 10 tokens over 1 s; cohort 2: 10 tokens over 4 s
        let c1 = [rec(0.0, &[(0.0, 1), (1.0, 10)])];
        let c2 = [rec(0.0, &[(0.0, 1), (4.0, 10)])];
        let d = q_decode(&[c1.iter().collect(), c2.iter().collect()]);
        assert_eq!(d.tokens, 20);
        assert!((d.rate().unwrap() - 20.0 / 5.0).abs() < 1e-12); // not (10 + 2.5) / 2
    }

    #[test]
    fn a_cohort_without_overlap_is_rejected() {
        let r1 = rec(0.0, &[(1.0, 1), (2.0, 1)]);
        let r2 = rec(0.0, &[(3.0, 1), (4.0, 1)]);
        assert_eq!(
            shared_interval(&[&r1, &r2]),
            Err(CohortError::NoOverlap { a: 3.0, b: 2.0 })
        );
        // b == a is rejected too
        let r3 = rec(0.0, &[(2.0, 1), (3.0, 1)]);
        assert!(shared_interval(&[&r1, &r3]).is_err());
        let d = q_decode(&[vec![&r1, &r2]]);
        assert_eq!((d.rejected_cohorts, d.rate()), (1, None));
    }

    #[test]
    fn empty_structural_chunks_do_not_move_the_interval() {
        // a zero-token event (final chunk with finish_reason) after the last token
        let r = rec(0.5, &[(1.0, 1), (2.0, 1), (3.0, 1), (3.5, 0)]);
        assert_eq!(t_last(&r), Some(3.0));
        assert_eq!(ttft(&r), Some(0.5));
        // with C = 1, Q_decode = (tokens − 1) / (t_last − t_first)
        let d = q_decode(&[vec![&r]]);
        assert!((d.rate().unwrap() - 2.0 / 2.0).abs() < 1e-12);
        assert!((request_decode_rate(&r).unwrap() - 1.0).abs() < 1e-12);
    }
}
