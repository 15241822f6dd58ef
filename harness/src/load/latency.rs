//! Per-request and per-token latency from trace records (docs/MEASUREMENTS.md §9), right when one
//! streamed chunk carries several tokens (speculation, or a server that batches its writes):
//!
//! - TTFT: the first token-carrying chunk's arrival minus the request's send.
//! - E2E: the end of the stream (`[DONE]`) minus the send.
//! - TPOT: (last token's arrival − first token's) / (tokens − 1), per request of ≥ 2 tokens.
//! - ITL, per token: a chunk of k tokens arriving g seconds after the previous token-carrying
//!   chunk gives k gaps of g / k; tokens after the first in the first chunk arrived with it (gap
//!   0). A request of n tokens gives n − 1 gaps summing to its decode time, so their mean is
//!   its TPOT. The raw chunk gaps are kept beside them (`chunk_gap`).
//! - Send lag: when the client sent the request minus when the schedule had it due — the
//!   client's own queueing (a concurrency cap, or a client too slow for its schedule), reported
//!   so that it is never mistaken for the server's.

use moefleet_schema::TraceRecord;
use serde::{Deserialize, Serialize};

use crate::stats::{mean, quantile};

/// One request's latencies (seconds); None where it has too few tokens for one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestLatency {
    pub ttft: Option<f64>,
    pub e2e: f64,
    pub tpot: Option<f64>,
    pub tokens: u64,
    /// Per-token gaps (tokens − 1 of them).
    pub itl: Vec<f64>,
    /// Gaps between token-carrying chunks.
    pub chunk_gaps: Vec<f64>,
}

impl RequestLatency {
    /// The latencies of a finished request (its monotonic times).
    pub fn of(r: &TraceRecord) -> RequestLatency {
        let chunks: Vec<(f64, u32)> = r.events_mono.iter().copied().filter(|e| e.1 > 0).collect();
        let tokens = chunks.iter().map(|e| e.1 as u64).sum();
        let mut out = RequestLatency {
            e2e: r.ended_mono - r.started_mono,
            tokens,
            ..Default::default()
        };
        let Some(&(first, n0)) = chunks.first() else {
            return out;
        };
        out.ttft = Some(first - r.started_mono);
        out.itl.extend(std::iter::repeat_n(0.0, n0 as usize - 1));
        for w in chunks.windows(2) {
            let (g, k) = (w[1].0 - w[0].0, w[1].1);
            out.chunk_gaps.push(g);
            out.itl
                .extend(std::iter::repeat_n(g / k as f64, k as usize));
        }
        if tokens >= 2 {
            let last = chunks[chunks.len() - 1].0;
            out.tpot = Some((last - first) / (tokens - 1) as f64);
        }
        out
    }
}

/// Order statistics of one metric, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Quantiles {
    pub n: usize,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Quantiles {
    /// Type-7 quantiles (numpy's default) of `xs`; None when empty.
    pub fn of(xs: &[f64]) -> Option<Quantiles> {
        let q = |p| quantile(xs, p);
        Some(Quantiles {
            n: xs.len(),
            mean: mean(xs)?,
            p50: q(0.5)?,
            p90: q(0.9)?,
            p95: q(0.95)?,
            p99: q(0.99)?,
            p999: q(0.999)?,
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// Latency objectives a request must meet to count toward goodput (seconds; None: no limit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub ttft: Option<f64>,
    pub tpot: Option<f64>,
    pub e2e: Option<f64>,
    /// A step's gate on the tail instead of on each request (`gate=p99`): the step meets the
    /// objectives when this percentile of each limited metric is within its limit, as MLPerf's
    /// server and interactive scenarios judge (None: a share of requests must meet every limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentile: Option<f64>,
}

/// MLPerf Inference's latency gates for LLMs (its v5.0 rules for Llama 2 70B): the 99th
/// percentiles of TTFT and TPOT within these limits, in seconds.
pub const MLPERF_PRESETS: [(&str, f64, f64); 2] = [
    ("mlperf-server", 2.0, 0.2),
    ("mlperf-interactive", 0.45, 0.04),
];

impl Slo {
    /// `ttft=0.5,tpot=0.05,e2e=10` (any subset, seconds), optionally `gate=p99` (or p90, p95,
    /// p99.9); or a preset, `mlperf-server` or `mlperf-interactive` (`MLPERF_PRESETS`, gate p99).
    pub fn parse(s: &str) -> Result<Slo, String> {
        if let Some(&(_, ttft, tpot)) = MLPERF_PRESETS.iter().find(|p| p.0 == s.trim()) {
            return Ok(Slo {
                ttft: Some(ttft),
                tpot: Some(tpot),
                e2e: None,
                percentile: Some(0.99),
            });
        }
        let mut slo = Slo::default();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            if let Some(g) = part.trim().strip_prefix("gate=") {
                slo.percentile = Some(match g {
                    "p90" => 0.9,
                    "p95" => 0.95,
                    "p99" => 0.99,
                    "p99.9" => 0.999,
                    other => return Err(format!("gate={other}: p90, p95, p99 or p99.9")),
                });
                continue;
            }
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected NAME=SECONDS (ttft, tpot, e2e)"))?;
            let v: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v > 0.0)
                .ok_or_else(|| {
                    format!("{part:?}: the limit must be a positive number of seconds")
                })?;
            let slot = match k.trim() {
                "ttft" => &mut slo.ttft,
                "tpot" => &mut slo.tpot,
                "e2e" => &mut slo.e2e,
                other => {
                    return Err(format!(
                        "{other:?}: no such objective (ttft, tpot, e2e, gate; or a preset: \
                         mlperf-server, mlperf-interactive)"
                    ))
                }
            };
            *slot = Some(v);
        }
        if slo.percentile.is_some() && slo.ttft.is_none() && slo.tpot.is_none() && slo.e2e.is_none()
        {
            return Err("a gate needs a limit to apply to (ttft, tpot or e2e)".into());
        }
        Ok(slo)
    }

    /// Under a percentile gate, whether `s`'s tail is within every limit (None: no gate).
    pub fn tail_within(&self, s: &Summary) -> Option<bool> {
        let p = self.percentile?;
        let at = |q: &Option<Quantiles>| {
            q.map(|q| match p {
                x if x >= 0.999 => q.p999,
                x if x >= 0.99 => q.p99,
                x if x >= 0.95 => q.p95,
                _ => q.p90,
            })
        };
        let within = |limit: Option<f64>, v: Option<f64>| match (limit, v) {
            (None, _) => true,
            (Some(l), Some(v)) => v <= l,
            (Some(_), None) => false,
        };
        Some(
            within(self.ttft, at(&s.ttft))
                && within(self.tpot, at(&s.tpot))
                && within(self.e2e, at(&s.e2e)),
        )
    }

    /// Whether `r` meets every limit (a limit on a quantity the request lacks is met only
    /// vacuously for TPOT, which a one-token answer has none of; TTFT needs a first token).
    pub fn met(&self, r: &RequestLatency) -> bool {
        let within = |limit: Option<f64>, v: Option<f64>, vacuous: bool| match (limit, v) {
            (None, _) => true,
            (Some(l), Some(v)) => v <= l,
            (Some(_), None) => vacuous,
        };
        within(self.ttft, r.ttft, false)
            && within(self.tpot, r.tpot, true)
            && within(self.e2e, Some(r.e2e), false)
    }
}

/// A run's latency and throughput summary (its measured requests: warm-up excluded).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Requests measured, and those that failed (excluded from every latency).
    pub requests: usize,
    pub failed: usize,
    /// From the first measured send to the last measured end.
    pub duration_s: f64,
    pub output_tokens: u64,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub ttft: Option<Quantiles>,
    pub tpot: Option<Quantiles>,
    pub itl: Option<Quantiles>,
    pub chunk_gap: Option<Quantiles>,
    pub e2e: Option<Quantiles>,
    /// Tokens per token-carrying chunk, on average (1 when every chunk carries one).
    pub tokens_per_chunk: Option<f64>,
    /// The client's send lag against the schedule (requests that had a due time).
    pub send_lag: Option<Quantiles>,
    /// Prompt tokens the server counted (`usage.prompt_tokens`), and of those the ones it served
    /// from its prefix cache where it says so (`usage.prompt_tokens_details.cached_tokens`; None
    /// when no answer reported it).
    pub prompt_tokens: u64,
    pub cached_prompt_tokens: Option<u64>,
    pub slo: Slo,
    /// Requests meeting every objective, per second and their output tokens per second.
    pub good_requests: usize,
    pub goodput_requests_per_s: f64,
    pub goodput_tokens_per_s: f64,
    /// A multi-turn run's requests by turn (absent for single requests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_turn: Option<Vec<super::turns::TurnRow>>,
}

impl Summary {
    /// The summary of `records` (every one measured) against `slo`. The records are taken in
    /// order of their send (then end), whatever order they come in, so a summary re-derived from
    /// a trace file (written as requests end) has the same bits as the run's own.
    pub fn of(records: &[TraceRecord], slo: Slo) -> Summary {
        let mut ok: Vec<&TraceRecord> = records.iter().filter(|r| r.error.is_none()).collect();
        ok.sort_by(|a, b| {
            (a.started_mono.total_cmp(&b.started_mono)).then(a.ended_mono.total_cmp(&b.ended_mono))
        });
        let lat: Vec<RequestLatency> = ok.iter().map(|r| RequestLatency::of(r)).collect();
        let start = records
            .iter()
            .map(|r| r.started_mono)
            .fold(f64::INFINITY, f64::min);
        let end = records
            .iter()
            .map(|r| r.ended_mono)
            .fold(f64::NEG_INFINITY, f64::max);
        let duration_s = if records.is_empty() { 0.0 } else { end - start };
        let per_s = |x: f64| {
            if duration_s > 0.0 {
                x / duration_s
            } else {
                0.0
            }
        };
        let all = |f: &dyn Fn(&RequestLatency) -> Option<f64>| -> Vec<f64> {
            lat.iter().filter_map(f).collect()
        };
        let flat = |f: &dyn Fn(&RequestLatency) -> &[f64]| -> Vec<f64> {
            lat.iter().flat_map(|l| f(l).iter().copied()).collect()
        };
        let output_tokens: u64 = lat.iter().map(|l| l.tokens).sum();
        let chunks: usize = lat
            .iter()
            .map(|l| l.chunk_gaps.len() + usize::from(l.ttft.is_some()))
            .sum();
        let good: Vec<&RequestLatency> = lat.iter().filter(|l| slo.met(l)).collect();
        let lags: Vec<f64> = ok
            .iter()
            .filter_map(|r| r.scheduled_mono.map(|due| r.started_mono - due))
            .collect();
        let cached: Vec<u64> = ok
            .iter()
            .filter_map(|r| r.usage_u64("/prompt_tokens_details/cached_tokens"))
            .collect();
        Summary {
            requests: records.len(),
            failed: records.len() - ok.len(),
            duration_s,
            output_tokens,
            requests_per_s: per_s(ok.len() as f64),
            output_tokens_per_s: per_s(output_tokens as f64),
            ttft: Quantiles::of(&all(&|l| l.ttft)),
            tpot: Quantiles::of(&all(&|l| l.tpot)),
            itl: Quantiles::of(&flat(&|l| &l.itl)),
            chunk_gap: Quantiles::of(&flat(&|l| &l.chunk_gaps)),
            e2e: Quantiles::of(&all(&|l| Some(l.e2e))),
            tokens_per_chunk: (chunks > 0).then(|| output_tokens as f64 / chunks as f64),
            send_lag: Quantiles::of(&lags),
            prompt_tokens: ok
                .iter()
                .filter_map(|r| r.usage_u64("/prompt_tokens"))
                .sum(),
            cached_prompt_tokens: (!cached.is_empty()).then(|| cached.iter().sum()),
            slo,
            good_requests: good.len(),
            goodput_requests_per_s: per_s(good.len() as f64),
            // a fold from +0: an empty f64 sum is −0, which would print as "-0.0"
            goodput_tokens_per_s: per_s(good.iter().fold(0.0, |a, l| a + l.tokens as f64)),
            by_turn: super::turns::by_turn(&ok, &lat.iter().map(|l| l.ttft).collect::<Vec<_>>()),
        }
    }

    /// The summary as a Markdown table (milliseconds) and its throughput lines.
    pub fn markdown(&self) -> String {
        let ms = |q: &Option<Quantiles>, name: &str| match q {
            Some(q) => format!(
                "| {name} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
                q.n,
                q.mean * 1e3,
                q.p50 * 1e3,
                q.p90 * 1e3,
                q.p95 * 1e3,
                q.p99 * 1e3,
                q.p999 * 1e3,
                q.max * 1e3
            ),
            None => format!("| {name} | 0 | | | | | | | |\n"),
        };
        let mut s = String::from(
            "| metric (ms) | n | mean | p50 | p90 | p95 | p99 | p99.9 | max |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        s += &ms(&self.ttft, "TTFT");
        s += &ms(&self.tpot, "TPOT");
        s += &ms(&self.itl, "ITL (per token)");
        s += &ms(&self.chunk_gap, "chunk gap");
        s += &ms(&self.e2e, "end to end");
        s += &ms(&self.send_lag, "client send lag");
        s += &format!(
            "\n{} requests ({} failed) in {:.2} s: {:.2} requests/s, {:.1} output tokens/s, {} tokens per chunk\n",
            self.requests,
            self.failed,
            self.duration_s,
            self.requests_per_s,
            self.output_tokens_per_s,
            self.tokens_per_chunk.map_or("no".into(), |t| format!("{t:.2}")),
        );
        if let Some(c) = self.cached_prompt_tokens {
            s += &format!(
                "prefix cache: {c} of {} prompt tokens served from the server's cache ({:.1} %)\n",
                self.prompt_tokens,
                100.0 * c as f64 / self.prompt_tokens.max(1) as f64
            );
        }
        if self.slo != Slo::default() {
            s += &format!(
                "goodput ({}): {} of {} requests, {:.2} requests/s, {:.1} tokens/s\n",
                self.slo_text(),
                self.good_requests,
                self.requests - self.failed,
                self.goodput_requests_per_s,
                self.goodput_tokens_per_s
            );
        }
        if let Some(rows) = &self.by_turn {
            let table = super::turns::markdown(rows);
            s += &format!("\n{}\n\n{table}", super::turns::HEADING);
        }
        s
    }

    fn slo_text(&self) -> String {
        let mut parts = Vec::new();
        for (name, v) in [
            ("ttft", self.slo.ttft),
            ("tpot", self.slo.tpot),
            ("e2e", self.slo.e2e),
        ] {
            if let Some(v) = v {
                parts.push(format!("{name} ≤ {v} s"));
            }
        }
        if let Some(p) = self.slo.percentile {
            parts.push(format!("gate p{:.1}", 100.0 * p).replace(".0", ""));
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(started: f64, events: &[(f64, u32)], ended: f64) -> TraceRecord {
        TraceRecord {
            started_mono: started,
            events_mono: events.to_vec(),
            ended_mono: ended,
            ..Default::default()
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    /// A chunk of three tokens 0.3 s after the first spreads into three gaps of 0.1 s; the
    /// structural chunks (0 tokens) count for nothing; the mean ITL is the TPOT.
    #[test]
    fn multi_token_chunks_spread_their_gap() {
        let r = record(
            10.0,
            &[(10.0, 0), (10.5, 1), (10.8, 3), (10.9, 1), (11.0, 0)],
            11.2,
        );
        let l = RequestLatency::of(&r);
        assert_eq!(l.tokens, 5);
        assert!(close(l.ttft.unwrap(), 0.5));
        assert!(close(l.e2e, 1.2));
        assert_eq!(l.itl.len(), 4);
        for (got, want) in l.itl.iter().zip([0.1, 0.1, 0.1, 0.1]) {
            assert!(close(*got, want), "{:?}", l.itl);
        }
        assert!(close(l.tpot.unwrap(), 0.4 / 4.0));
        assert_eq!(l.chunk_gaps.len(), 2);
        assert!(close(l.chunk_gaps[0], 0.3) && close(l.chunk_gaps[1], 0.1));
        // a first chunk of two: its second token has gap 0, and the mean is still the TPOT
        let l = RequestLatency::of(&record(0.0, &[(1.0, 2), (1.6, 2)], 1.7));
        assert_eq!(l.itl.len(), 3);
        for (got, want) in l.itl.iter().zip([0.0, 0.3, 0.3]) {
            assert!(close(*got, want), "{:?}", l.itl);
        }
        let mean = l.itl.iter().sum::<f64>() / 3.0;
        assert!(close(mean, l.tpot.unwrap()));
        // one token: a TTFT, no TPOT, no gaps
        let l = RequestLatency::of(&record(0.0, &[(0.2, 1)], 0.3));
        assert_eq!((l.tpot, l.itl.len()), (None, 0));
    }

    #[test]
    fn goodput_counts_requests_meeting_every_objective() {
        let slo = Slo::parse("ttft=0.5,tpot=0.05").unwrap();
        let fast = record(0.0, &[(0.4, 1), (0.44, 1)], 0.5); // ttft 0.4, tpot 0.04
        let slow_first = record(0.0, &[(0.6, 1), (0.62, 1)], 0.7);
        let slow_decode = record(0.0, &[(0.1, 1), (0.3, 1)], 0.4);
        let mut failed = fast.clone();
        failed.error = Some("HTTP 500".into());
        let s = Summary::of(&[fast, slow_first, slow_decode, failed], slo);
        assert_eq!((s.requests, s.failed, s.good_requests), (4, 1, 1));
        assert!(close(s.duration_s, 0.7));
        assert!(close(s.goodput_tokens_per_s, 2.0 / 0.7));
        assert!(s
            .markdown()
            .contains("goodput (ttft ≤ 0.5 s, tpot ≤ 0.05 s): 1 of 3 requests"));
        // none good: zero tokens/s, printed without a sign
        let none = Summary::of(&[record(0.0, &[(0.9, 1), (0.95, 1)], 1.0)], slo);
        assert!(none
            .markdown()
            .contains("0 of 1 requests, 0.00 requests/s, 0.0 tokens/s"));
        assert!(Slo::parse("ttft=fast").is_err());
        assert!(Slo::parse("itl=1")
            .unwrap_err()
            .contains("no such objective"));
        assert_eq!(Slo::parse("").unwrap(), Slo::default());
        // MLPerf's gates: the 99th percentiles, not each request
        let m = Slo::parse("mlperf-interactive").unwrap();
        assert_eq!(
            (m.ttft, m.tpot, m.percentile),
            (Some(0.45), Some(0.04), Some(0.99))
        );
        assert_eq!(
            Slo::parse("tpot=0.05,gate=p95").unwrap().percentile,
            Some(0.95)
        );
        assert!(Slo::parse("gate=p99").is_err());
        assert!(Slo::parse("tpot=1,gate=p42").is_err());
    }

    /// A p99 gate judges the tail: one slow request in a hundred passes, two do not, whatever
    /// share of requests met the limit.
    #[test]
    fn a_percentile_gate_judges_the_tail() {
        let slo = Slo::parse("tpot=0.05,gate=p99").unwrap();
        let rs = |slow: usize| -> Vec<TraceRecord> {
            (0..100)
                .map(|k| {
                    let gap = if k < slow { 0.2 } else { 0.01 };
                    record(
                        k as f64,
                        &[(k as f64 + 0.1, 1), (k as f64 + 0.1 + gap, 1)],
                        k as f64 + 0.5,
                    )
                })
                .collect()
        };
        assert_eq!(slo.tail_within(&Summary::of(&rs(0), slo)), Some(true));
        // one slow of 100: the type-7 p99 lies 1 % of the way from the 99th value to the 100th
        assert_eq!(slo.tail_within(&Summary::of(&rs(1), slo)), Some(true));
        assert_eq!(slo.tail_within(&Summary::of(&rs(2), slo)), Some(false));
        // the same two in a hundred pass a share of 0.9 (98 of 100 met the limit)
        let s = Summary::of(&rs(2), Slo::parse("tpot=0.05").unwrap());
        assert_eq!(s.good_requests, 98);
        assert_eq!(Slo::default().tail_within(&Summary::of(&rs(1), slo)), None);
    }

    #[test]
    fn send_lag_is_the_clients_own() {
        let mut a = record(1.25, &[(1.5, 1)], 1.6);
        a.scheduled_mono = Some(1.0);
        let s = Summary::of(&[a], Slo::default());
        assert!(close(s.send_lag.unwrap().max, 0.25));
    }

    /// A trace file holds records in the order requests ended: the summary must not depend on it.
    #[test]
    fn the_summary_does_not_depend_on_the_records_order() {
        let rs: Vec<TraceRecord> = (0..7)
            .map(|k| {
                let t = 0.1 * k as f64;
                let gaps = [0.013, 0.0170001, 0.0230007, 0.031];
                let mut at = t + 0.2 + 0.01 * k as f64;
                let mut ev = vec![(at, 1)];
                for g in gaps.iter().take(1 + k % 4) {
                    at += g / 3.0;
                    ev.push((at, 1 + (k % 3) as u32));
                }
                record(t, &ev, at + 0.001)
            })
            .collect();
        let slo = Slo::parse("ttft=0.25,tpot=0.01").unwrap();
        let mut reversed = rs.clone();
        reversed.reverse();
        reversed.swap(1, 4);
        assert_eq!(Summary::of(&rs, slo), Summary::of(&reversed, slo));
    }
}
