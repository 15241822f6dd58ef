//! The soak (`moefleet-harness soak`): a bounded run at a fixed number of streams with periodic
//! overload bursts, against a moefleet server on this machine. Every request's row goes to
//! OUT/requests.jsonl.gz as it ends and every sample of the server's processes to
//! OUT/samples.jsonl as it is taken; OUT/soak.json holds what was asked, the counters before and
//! after, and the summary [`summarize`] computes from those rows (as `verify` does again).
//!
//! This module holds the soak's configuration and the records it writes; `run` drives the soak
//! (the streams, their bursts, the samples of the server) and `summary` computes the summary from
//! the rows and rechecks a committed one (with the unit tests that show each check failing on its
//! own fault).

mod run;
mod summary;

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use run::run;
pub use summary::{recheck, summarize};

use super::procs::ProcSample;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SoakConfig {
    pub url: String,
    pub duration_s: f64,
    /// Streams kept open throughout.
    pub streams: usize,
    /// A burst begins every this many seconds (the first after one period).
    pub burst_every_s: f64,
    pub burst_s: f64,
    /// Offered streams during a burst, as a multiple of `streams`.
    pub burst_factor: f64,
    pub prompts: usize,
    pub min_tokens: usize,
    pub max_tokens: usize,
    pub sample_s: f64,
    /// Longest wait for the requests in flight at the end to finish.
    pub drain_s: f64,
}

impl SoakConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        let positive = [
            ("--duration-s", self.duration_s),
            ("--burst-every-s", self.burst_every_s),
            ("--sample-s", self.sample_s),
            ("--drain-s", self.drain_s),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                bail!("{name} must be a positive number of seconds (got {v})");
            }
        }
        if !(self.burst_s >= 0.0 && self.burst_s < self.burst_every_s) {
            bail!("--burst-s must be at least 0 and shorter than --burst-every-s");
        }
        if !(self.burst_factor >= 1.0 && self.burst_factor <= 16.0) {
            bail!("--burst-factor must be between 1 and 16");
        }
        if self.streams == 0 {
            bail!("--streams must be at least 1");
        }
        Ok(())
    }

    /// Extra streams during a burst.
    pub fn burst_streams(&self) -> usize {
        ((self.burst_factor - 1.0) * self.streams as f64).round() as usize
    }

    /// Is `t` seconds after the load began inside a burst?
    pub fn in_burst(&self, t: f64) -> bool {
        t >= self.burst_every_s && t % self.burst_every_s < self.burst_s
    }
}

/// One sample of the server while the load runs (or idle before and after it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds on the run's clock.
    pub t: f64,
    /// "idle_before", "load" or "idle_after".
    pub when: String,
    pub load1: Option<f64>,
    pub in_flight: Option<u64>,
    pub queue_depth: Option<u64>,
    pub tokens_total: Option<u64>,
    pub procs: Vec<ProcSample>,
}

/// The server's counters a soak compares with its own counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    pub tokens_total: u64,
    pub requests_total: u64,
    pub rejected_total: u64,
    pub recoveries_total: u64,
}

impl Counters {
    fn of(stats: &Value) -> anyhow::Result<Counters> {
        let g = |k: &str| {
            stats[k]
                .as_u64()
                .with_context(|| format!("/api/stats has no {k}"))
        };
        Ok(Counters {
            tokens_total: g("tokens_total")?,
            requests_total: g("requests_total")?,
            rejected_total: g("rejected_total")?,
            recoveries_total: g("recoveries_total")?,
        })
    }
}

/// What OUT/soak.json holds besides its summary.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SoakRecord {
    pub config: SoakConfig,
    pub model: String,
    pub engine_commit: Value,
    pub host: Value,
    /// Each prompt's text sha when it ran alone before the load.
    pub references: BTreeMap<usize, String>,
    pub before: Counters,
    pub after: Counters,
    /// Load began / ended, seconds on the run's clock.
    pub load_start: f64,
    pub load_end: f64,
    pub load_average_start: Option<[f64; 3]>,
    pub load_average_end: Option<[f64; 3]>,
    pub summary: Summary,
}

/// Resident memory and descriptors of one role over the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcSummary {
    pub role: usize,
    pub pids: Vec<u32>,
    pub rss_idle_before_kib: Option<u64>,
    pub rss_load_first_kib: Option<u64>,
    pub rss_load_last_kib: Option<u64>,
    pub rss_idle_after_kib: Option<u64>,
    /// Largest RSS in the first and in the second half of the load.
    pub rss_max_first_half_kib: Option<u64>,
    pub rss_max_second_half_kib: Option<u64>,
    /// Fewest descriptors over the idle samples before and after the load (a connection being
    /// closed as a sample is taken is not a leak; a leaked descriptor is in every sample).
    pub fds_idle_before: Option<u64>,
    pub fds_idle_after: Option<u64>,
    pub fds_max_load: Option<u64>,
}

/// Allowed growth of a role's largest RSS from the first half of the load to the second, as a
/// fraction of the first half's: allocator pages reused unevenly under bursts move it by well
/// under this; a leak of `RSS_GROWTH_BOUND × RSS / requests-in-the-second-half` bytes per request
/// or more crosses it (the record states that size).
pub const RSS_GROWTH_BOUND: f64 = 0.02;

/// The soak's findings, recomputed from its rows by [`summarize`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub requests: usize,
    pub complete: usize,
    pub broken: usize,
    pub miscounted: usize,
    pub refused: usize,
    pub capacity_retries: u64,
    /// Complete, but the text differs from the prompt's output alone (or counts differ).
    pub corrupted: usize,
    /// Accepted, but short of its cap or without a `length` finish (or broken).
    pub truncated: usize,
    pub client_tokens: u64,
    pub server_tokens: u64,
    /// Requests the server counted: each row's accepted attempt or refusal plus its capacity
    /// retries, plus the references.
    pub client_requests: u64,
    pub server_requests: u64,
    pub server_rejected: u64,
    pub recoveries: u64,
    pub max_in_flight: Option<u64>,
    pub requests_second_half: usize,
    pub procs: Vec<ProcSummary>,
    /// Smallest per-request leak (bytes) the RSS bound would catch, over all roles.
    pub detectable_leak_bytes_per_request: Option<f64>,
    pub checks: BTreeMap<String, bool>,
    pub passed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_follow_the_period() {
        let cfg = SoakConfig {
            url: String::new(),
            duration_s: 1800.0,
            streams: 176,
            burst_every_s: 300.0,
            burst_s: 60.0,
            burst_factor: 2.0,
            prompts: 24,
            min_tokens: 16,
            max_tokens: 96,
            sample_s: 10.0,
            drain_s: 600.0,
        };
        cfg.validate().unwrap();
        assert_eq!(cfg.burst_streams(), 176);
        assert!(!cfg.in_burst(10.0) && !cfg.in_burst(299.0));
        assert!(cfg.in_burst(300.0) && cfg.in_burst(359.0) && !cfg.in_burst(360.0));
        assert!(cfg.in_burst(1500.0));
        let bad = SoakConfig {
            burst_s: 300.0,
            ..cfg.clone()
        };
        assert!(bad.validate().is_err());
        let bad = SoakConfig {
            duration_s: f64::NAN,
            ..cfg
        };
        assert!(bad.validate().is_err());
    }
}
