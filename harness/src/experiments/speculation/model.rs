//! The first-order model of speculation (ARCHITECTURE.md §3.3, MEASUREMENTS.md §6), checked per
//! request against the speedup measured side by side: `S ≈ L / (aT + (1 − a)L)` with
//! - L, the full-pipeline latency: the median launch-to-reply time of role 0's frames during the
//!   same request with speculation off (every token waits one round trip there);
//! - T, the inter-frame interval: the median time between consecutive replies during the request
//!   with speculation on, where the later reply was for a row whose proposed input had already
//!   been verified (it was in flight behind its predecessor);
//! - a, the fraction of positions whose correct input was already in flight: accepted proposals
//!   over the request's decoded tokens (tokens − 1).

use serde::Serialize;

use super::runs::{ConfigRun, Request};
use crate::stats::median;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelRow {
    pub config: String,
    pub pass: String,
    pub family: String,
    pub latency_ms: f64,
    pub interval_ms: f64,
    pub a: f64,
    pub predicted: f64,
    pub measured: f64,
}

/// Median round trip (ms) of the frames launched within a request's window.
pub fn latency_ms(run: &ConfigRun, r: &Request) -> f64 {
    median(
        run.frames
            .values()
            .filter(|f| {
                f.launch_epoch
                    .is_some_and(|t| t >= r.started_epoch && t <= r.ended_epoch)
            })
            .filter_map(|f| Some((f.reply_ns? as f64 - f.launch_ns? as f64) / 1e6))
            .collect(),
    )
}

/// Median interval (ms) between consecutive replies within a request's window where the later
/// one answered an accepted proposal.
pub fn interval_ms(run: &ConfigRun, r: &Request) -> f64 {
    let mut replies: Vec<(u64, &str)> = run
        .frames
        .values()
        .filter(|f| {
            f.reply_epoch
                .is_some_and(|t| t >= r.started_epoch && t <= r.ended_epoch)
        })
        .filter_map(|f| Some((f.reply_ns?, f.outcome.as_deref()?)))
        .filter(|(_, o)| *o != "discarded")
        .collect();
    replies.sort_unstable();
    median(
        replies
            .windows(2)
            .filter(|w| w[1].1 == "accepted")
            .map(|w| (w[1].0 - w[0].0) as f64 / 1e6)
            .collect(),
    )
}

/// `L / (aT + (1 − a)L)`; with no accepted proposal (T unknown) a is 0 and S is 1.
pub fn predicted(l: f64, t: f64, a: f64) -> f64 {
    if a <= 0.0 || !t.is_finite() {
        return 1.0;
    }
    l / (a * t + (1.0 - a) * l)
}

/// One row per request of every speculating configuration, against `off`.
pub fn rows(configs: &[ConfigRun]) -> Vec<ModelRow> {
    let off = &configs[0];
    let mut out = Vec::new();
    for c in &configs[1..] {
        for (pi, (pass_on, pass_off)) in c.passes.iter().zip(&off.passes).enumerate() {
            for r in &pass_on.requests {
                let Some(o) = pass_off.requests.iter().find(|o| o.family == r.family) else {
                    continue;
                };
                let l = latency_ms(off, o);
                let t = interval_ms(c, r);
                let a = r.accepted as f64 / r.tokens.saturating_sub(1).max(1) as f64;
                out.push(ModelRow {
                    config: c.name.clone(),
                    pass: super::runs::PASSES[pi].to_string(),
                    family: r.family.clone(),
                    latency_ms: l,
                    interval_ms: t,
                    a,
                    predicted: predicted(l, t, a),
                    measured: r.decode_tok_s / o.decode_tok_s,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_by_hand() {
        // every input in flight (a = 1): the speedup is L / T
        assert!((predicted(100.0, 25.0, 1.0) - 4.0).abs() < 1e-12);
        // nothing in flight: no speedup
        assert_eq!(predicted(100.0, 25.0, 0.0), 1.0);
        // half: 100 / (12.5 + 50)
        assert!((predicted(100.0, 25.0, 0.5) - 1.6).abs() < 1e-12);
    }
}
