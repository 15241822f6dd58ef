//! A multi-turn run's requests by turn (docs/MEASUREMENTS.md §9): how many prompt tokens each
//! turn sent, how many of those the server served from its prefix cache where it says so
//! (`usage.prompt_tokens_details.cached_tokens`), and the turn's TTFT. A later turn resends its
//! conversation, so its prompt grows with each turn; a server that keeps the earlier turns'
//! states answers it with most of that prompt cached.

use moefleet_schema::TraceRecord;
use serde::Serialize;

use crate::stats::quantile;

/// What heads the table by turn in a step's summary.md.
pub const HEADING: &str = "By turn of the conversations:";

/// One turn (1 = the first) of a run's conversations: its successful requests.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TurnRow {
    pub turn: usize,
    pub requests: usize,
    pub prompt_tokens: u64,
    /// None when no answer of this turn reported its cache hits.
    pub cached_prompt_tokens: Option<u64>,
    /// The turn's TTFT median and 90th percentile, seconds (type-7).
    pub ttft_p50: Option<f64>,
    pub ttft_p90: Option<f64>,
}

/// The rows of `ok` (successful requests, each with its TTFT in `ttft`) by turn, in turn order;
/// None when no record is a turn of a conversation.
pub fn by_turn(ok: &[&TraceRecord], ttft: &[Option<f64>]) -> Option<Vec<TurnRow>> {
    let last = ok.iter().filter_map(|r| r.turn).max()?;
    let rows = (0..=last)
        .map(|t| {
            let of_turn = |k: &usize| ok[*k].turn == Some(t);
            let rs: Vec<&TraceRecord> = (0..ok.len()).filter(of_turn).map(|k| ok[k]).collect();
            let times: Vec<f64> = (0..ok.len())
                .filter(of_turn)
                .filter_map(|k| ttft[k])
                .collect();
            let cached: Vec<u64> = rs
                .iter()
                .filter_map(|r| r.usage_u64("/prompt_tokens_details/cached_tokens"))
                .collect();
            TurnRow {
                turn: t + 1,
                requests: rs.len(),
                prompt_tokens: rs
                    .iter()
                    .filter_map(|r| r.usage_u64("/prompt_tokens"))
                    .sum(),
                cached_prompt_tokens: (!cached.is_empty()).then(|| cached.iter().sum()),
                ttft_p50: quantile(&times, 0.5),
                ttft_p90: quantile(&times, 0.9),
            }
        })
        .collect();
    Some(rows)
}

/// The rows as a Markdown table.
pub fn markdown(rows: &[TurnRow]) -> String {
    let mut s = String::from(
        "| turn | requests | prompt tokens (mean) | served from cache | TTFT p50 (ms) | TTFT p90 (ms) |\n\
         |---|---|---|---|---|---|\n",
    );
    for r in rows {
        let cached = match r.cached_prompt_tokens {
            Some(c) => format!("{:.1} %", 100.0 * c as f64 / r.prompt_tokens.max(1) as f64),
            None => "not reported".into(),
        };
        let ms = |q: Option<f64>| q.map_or(String::new(), |q| format!("{:.1}", 1e3 * q));
        s += &format!(
            "| {} | {} | {:.1} | {cached} | {} | {} |\n",
            r.turn,
            r.requests,
            r.prompt_tokens as f64 / r.requests.max(1) as f64,
            ms(r.ttft_p50),
            ms(r.ttft_p90),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(t: usize, prompt: u64, cached: Option<u64>) -> TraceRecord {
        let mut usage = serde_json::json!({"prompt_tokens": prompt, "completion_tokens": 1});
        if let Some(c) = cached {
            usage["prompt_tokens_details"] = serde_json::json!({"cached_tokens": c});
        }
        TraceRecord {
            turn: Some(t),
            conversation: Some(0),
            usage: Some(usage),
            ..Default::default()
        }
    }

    #[test]
    fn turns_sum_their_prompts_and_cache_hits() {
        let rs = [
            turn(0, 40, Some(0)),
            turn(1, 120, Some(100)),
            turn(0, 60, Some(10)),
            turn(1, 140, None),
        ];
        let ok: Vec<&TraceRecord> = rs.iter().collect();
        let rows = by_turn(&ok, &[Some(0.2), Some(0.1), Some(0.4), Some(0.3)]).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].turn, rows[0].requests, rows[0].prompt_tokens),
            (1, 2, 100)
        );
        assert_eq!(rows[0].cached_prompt_tokens, Some(10));
        // the second turn: one answer reported its hits, one did not
        assert_eq!(
            (rows[1].prompt_tokens, rows[1].cached_prompt_tokens),
            (260, Some(100))
        );
        assert!((rows[1].ttft_p50.unwrap() - 0.2).abs() < 1e-12);
        let md = markdown(&rows);
        assert!(md.contains("| 1 | 2 | 50.0 | 10.0 % |"), "{md}");
        assert!(md.contains("| 2 | 2 | 130.0 | 38.5 % |"), "{md}");
        // single requests: no rows
        let single = TraceRecord::default();
        assert_eq!(by_turn(&[&single], &[None]), None);
    }
}
