//! A run's figures checked against the server's own and against the client's tokenizer
//! (docs/MEASUREMENTS.md §9), per successful request:
//!
//! - Tokens: the server's `usage.completion_tokens` against the tokens the client counted in the
//!   stream; llama-server's own `timings.predicted_n` against `usage`; and, where the run was
//!   given the server's tokenizer (`--tokenizer`), the client's count of the prompt (the messages
//!   sent, rendered by the model's chat template) and of the answer's text encoded again, each
//!   against `usage`. An answer's text encoded again may merge into fewer tokens than the model
//!   emitted, so that row is a cross-check, not a rule.
//! - Times, where the server reports its own (llama-server's `timings`): the client's TPOT minus
//!   the server's decode time per token, `predicted_ms / (predicted_n − 1)` (both span the first
//!   token to the last, so this is the stream's delivery stretching or shrinking that span: near
//!   0 when the client measures what the server did); and the client's TTFT minus the server's
//!   `prompt_ms`, what the server's prompt time leaves out (its queue, the first token's
//!   sampling, the network, the client).

use moefleet_engine::serve::request::chat_text;
use moefleet_engine::tokenizer::TextTokenizer;
use moefleet_schema::{ClientCount, TraceRecord};
use serde::Serialize;

use crate::driver::client::{self, RequestSpec};
use crate::stats::Summary;

/// Requests whose two counts were compared, how many were equal, and Σ (first − second).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Agreement {
    pub requests: usize,
    pub equal: usize,
    pub difference: i64,
}

impl Agreement {
    fn of(pairs: impl Iterator<Item = (u64, u64)>) -> Option<Agreement> {
        let mut a = Agreement::default();
        for (x, y) in pairs {
            a.requests += 1;
            a.equal += usize::from(x == y);
            a.difference += x as i64 - y as i64;
        }
        (a.requests > 0).then_some(a)
    }
}

/// The checks of one step's measured requests.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CrossCheck {
    /// Successful requests.
    pub requests: usize,
    /// Tokens counted in the stream against `usage.completion_tokens`.
    pub stream_vs_usage: Option<Agreement>,
    /// llama-server's `timings.predicted_n` against `usage.completion_tokens`.
    pub server_timings_vs_usage: Option<Agreement>,
    /// The client's tokenizer: the prompt, then the answer's text, against `usage`.
    pub client_prompt_vs_usage: Option<Agreement>,
    pub client_completion_vs_usage: Option<Agreement>,
    /// Client TPOT minus the server's decode time per token, seconds.
    pub tpot_minus_server: Option<Summary>,
    /// Client TTFT minus the server's prompt time, seconds.
    pub ttft_minus_server_prompt: Option<Summary>,
}

/// The client's count of `spec`'s prompt (its messages through the chat template) and of the
/// answer `text`, in the server's tokenizer `tk`.
pub fn count(tk: &TextTokenizer, spec: &RequestSpec, text: &str) -> anyhow::Result<ClientCount> {
    let prompt = chat_text(tk, &client::turns(spec)).map_err(anyhow::Error::msg)?;
    Ok(ClientCount {
        prompt_tokens: tk.encode_prompt(&prompt)?.len() as u64,
        completion_tokens: tk.encode_literal(text)?.len() as u64,
    })
}

fn timing(r: &TraceRecord, key: &str) -> Option<f64> {
    r.server_extra.as_ref()?.get("timings")?.get(key)?.as_f64()
}

/// The checks of `records` (the failed ones left out); None when there is nothing to compare
/// beyond the stream's own count (no server timings, no client count).
pub fn of(records: &[TraceRecord]) -> Option<CrossCheck> {
    let ok: Vec<&TraceRecord> = records.iter().filter(|r| r.error.is_none()).collect();
    let pairs = |f: &dyn Fn(&TraceRecord) -> Option<(u64, u64)>| {
        Agreement::of(ok.iter().filter_map(|r| f(r)))
    };
    let completion = |r: &TraceRecord| r.completion_tokens();
    let mut tpot = Vec::new();
    let mut ttft = Vec::new();
    for r in &ok {
        let lat = super::latency::RequestLatency::of(r);
        if let (Some(ms), Some(n), Some(t)) = (
            timing(r, "predicted_ms"),
            timing(r, "predicted_n"),
            lat.tpot,
        ) {
            if n >= 2.0 {
                tpot.push(t - ms / 1e3 / (n - 1.0));
            }
        }
        if let (Some(ms), Some(t)) = (timing(r, "prompt_ms"), lat.ttft) {
            ttft.push(t - ms / 1e3);
        }
    }
    let c = CrossCheck {
        requests: ok.len(),
        stream_vs_usage: pairs(&|r| Some((r.tokens(), completion(r)?))),
        server_timings_vs_usage: pairs(&|r| {
            Some((timing(r, "predicted_n")? as u64, completion(r)?))
        }),
        client_prompt_vs_usage: pairs(&|r| {
            Some((
                r.client_count?.prompt_tokens,
                r.usage_u64("/prompt_tokens")?,
            ))
        }),
        client_completion_vs_usage: pairs(&|r| {
            Some((r.client_count?.completion_tokens, completion(r)?))
        }),
        tpot_minus_server: Summary::of(&tpot),
        ttft_minus_server_prompt: Summary::of(&ttft),
    };
    let beyond = c.server_timings_vs_usage.is_some() || c.client_prompt_vs_usage.is_some();
    beyond.then_some(c)
}

impl CrossCheck {
    /// The checks as Markdown: a table of counts, a table of time differences.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "Cross-checks of {} successful requests.\n\n\
             | count | against | requests | equal | Σ difference (tokens) |\n|---|---|---|---|---|\n",
            self.requests
        );
        for (a, what, against) in [
            (
                self.stream_vs_usage,
                "tokens in the stream",
                "usage.completion_tokens",
            ),
            (
                self.server_timings_vs_usage,
                "server timings.predicted_n",
                "usage.completion_tokens",
            ),
            (
                self.client_prompt_vs_usage,
                "client tokenizer: prompt",
                "usage.prompt_tokens",
            ),
            (
                self.client_completion_vs_usage,
                "client tokenizer: answer text",
                "usage.completion_tokens",
            ),
        ] {
            if let Some(a) = a {
                s += &format!(
                    "| {what} | {against} | {} | {} | {:+} |\n",
                    a.requests, a.equal, a.difference
                );
            }
        }
        let rows = [
            (
                self.tpot_minus_server,
                "client TPOT − server decode time per token",
            ),
            (
                self.ttft_minus_server_prompt,
                "client TTFT − server prompt time",
            ),
        ];
        if rows.iter().any(|r| r.0.is_some()) {
            s += "\n| difference (ms) | requests | median | p10 | p90 | min | max |\n\
                  |---|---|---|---|---|---|---|\n";
            // milliseconds to two places, a value that rounds to zero printed without a sign
            let ms = |x: f64| {
                let t = format!("{:.2}", 1e3 * x);
                if t == "-0.00" {
                    "0.00".to_string()
                } else {
                    t
                }
            };
            for (q, name) in rows {
                if let Some(q) = q {
                    s += &format!(
                        "| {name} | {} | {} | {} | {} | {} | {} |\n",
                        q.n,
                        ms(q.median),
                        ms(q.p10),
                        ms(q.p90),
                        ms(q.min),
                        ms(q.max)
                    );
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tokens: u32, usage: u64, timings: Option<(f64, f64, f64)>) -> TraceRecord {
        // one token a chunk, 20 ms apart, the first at 0.3 s
        let events = (0..tokens).map(|k| (0.3 + 0.02 * k as f64, 1)).collect();
        TraceRecord {
            events_mono: events,
            ended_mono: 0.3 + 0.02 * tokens as f64,
            usage: Some(serde_json::json!({"completion_tokens": usage, "prompt_tokens": 40})),
            server_extra: timings.map(|(n, ms, prompt_ms)| {
                serde_json::json!({"timings": {"predicted_n": n, "predicted_ms": ms, "prompt_ms": prompt_ms}})
            }),
            ..Default::default()
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn counts_and_times_against_the_servers_own() {
        // the server's 10 tokens in 171 ms: 19 ms a gap against the client's 20
        let a = rec(10, 10, Some((10.0, 171.0, 250.0)));
        let mut b = rec(5, 6, Some((6.0, 76.0, 100.0)));
        b.client_count = Some(ClientCount {
            prompt_tokens: 40,
            completion_tokens: 5,
        });
        let mut failed = rec(3, 3, Some((3.0, 1.0, 1.0)));
        failed.error = Some("HTTP 500".into());
        let c = of(&[a, b, failed]).unwrap();
        assert_eq!(c.requests, 2);
        let agree = |n, e, d| {
            Some(Agreement {
                requests: n,
                equal: e,
                difference: d,
            })
        };
        assert_eq!(c.stream_vs_usage, agree(2, 1, -1));
        assert_eq!(c.server_timings_vs_usage, agree(2, 2, 0));
        assert_eq!(c.client_prompt_vs_usage, agree(1, 1, 0));
        assert_eq!(c.client_completion_vs_usage, agree(1, 0, -1));
        let tpot = c.tpot_minus_server.unwrap();
        // 20 − 19 ms, and 20 − 76 / 5 = 4.8 ms
        assert!(
            close(tpot.min, 0.001) && close(tpot.max, 0.0048),
            "{tpot:?}"
        );
        let ttft = c.ttft_minus_server_prompt.unwrap();
        assert!(close(ttft.min, 0.05) && close(ttft.max, 0.2), "{ttft:?}");
        let md = c.markdown();
        assert!(
            md.contains("| tokens in the stream | usage.completion_tokens | 2 | 1 | -1 |"),
            "{md}"
        );
        assert!(
            md.contains("| client TTFT − server prompt time | 2 | 125.00 |"),
            "{md}"
        );
        // nothing beyond the stream's own count: no check
        assert_eq!(of(&[rec(4, 4, None)]), None);
    }
}
