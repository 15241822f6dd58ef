//! Machine load while a request runs (MEASUREMENTS.md §3.2): CPU cores busy from `/proc/stat` and
//! least `MemAvailable` from `/proc/meminfo` of the machine running the harness, sampled every few
//! seconds, plus the server's `/api/stats` when it has one. The parsers are pure; the sampler is a
//! task that only reads and never blocks the request it watches.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::driver::client::{get_json, Clock};

/// Cumulative CPU time of the whole machine (jiffies) and the number of logical CPUs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuTimes {
    /// user + nice + system + irq + softirq + steal (guest time is already inside user).
    pub busy: u64,
    /// busy + idle + iowait.
    pub total: u64,
    pub cpus: usize,
}

/// Parse `/proc/stat`: the aggregate `cpu` line and the count of `cpuN` lines.
pub fn parse_stat(text: &str) -> Option<CpuTimes> {
    let mut agg = None;
    let mut cpus = 0;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        match it.next() {
            Some("cpu") => {
                let v: Vec<u64> = it.take(8).filter_map(|x| x.parse().ok()).collect();
                if v.len() < 5 {
                    return None;
                }
                let at = |i: usize| v.get(i).copied().unwrap_or(0);
                // user nice system idle iowait irq softirq steal
                let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
                agg = Some((busy, busy + at(3) + at(4)));
            }
            Some(name) if name.starts_with("cpu") => cpus += 1,
            _ => {}
        }
    }
    let (busy, total) = agg?;
    Some(CpuTimes {
        busy,
        total,
        cpus: cpus.max(1),
    })
}

/// Average busy cores between two readings: `Δbusy / Δtotal × cpus` (None if no time passed).
pub fn busy_cores(a: &CpuTimes, b: &CpuTimes) -> Option<f64> {
    let dt = b.total.checked_sub(a.total)?;
    let db = b.busy.checked_sub(a.busy)?;
    (dt > 0).then(|| db as f64 / dt as f64 * b.cpus as f64)
}

/// `MemAvailable` of `/proc/meminfo` in GiB.
pub fn parse_mem_available_gib(text: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let kb: f64 = l
            .strip_prefix("MemAvailable:")?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb / (1024.0 * 1024.0))
    })
}

fn read_cpu() -> Option<CpuTimes> {
    parse_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

fn read_mem() -> Option<f64> {
    parse_mem_available_gib(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// One sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Monotonic seconds on the run's clock.
    pub t_mono: f64,
    /// Busy cores since the previous sample (None for the first).
    pub cores_busy: Option<f64>,
    pub mem_available_gib: Option<f64>,
    /// The server's `/api/stats` at this moment (None: unavailable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Value>,
}

/// Everything the sampler saw over one request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// Busy cores averaged over the whole window (first to last reading).
    pub cores_busy: Option<f64>,
    /// Least `MemAvailable` over the samples, GiB.
    pub min_free_gib: Option<f64>,
    pub samples: Vec<Sample>,
}

/// A running sampler; `stop` ends it and returns what it saw.
pub struct Sampler {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Load>,
}

impl Sampler {
    /// Start sampling now and every `every` until stopped; `stats_url` is polled with each sample.
    pub fn start(
        clock: Clock,
        every: Duration,
        http: reqwest::Client,
        stats_url: Option<String>,
    ) -> Sampler {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let first = read_cpu();
            let mut prev = first;
            let mut samples = Vec::new();
            let poll_timeout = every.min(Duration::from_secs(2));
            loop {
                let cpu = read_cpu();
                let stats = match &stats_url {
                    Some(u) => get_json(&http, u, poll_timeout).await,
                    None => None,
                };
                samples.push(Sample {
                    t_mono: clock.now().1,
                    cores_busy: match (&prev, &cpu) {
                        (Some(a), Some(b)) if !samples.is_empty() => busy_cores(a, b),
                        _ => None,
                    },
                    mem_available_gib: read_mem(),
                    stats,
                });
                prev = cpu.or(prev);
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = tokio::time::sleep(every) => {}
                }
            }
            // a closing reading so the window covers the whole request
            let last = read_cpu();
            samples.push(Sample {
                t_mono: clock.now().1,
                cores_busy: match (&prev, &last) {
                    (Some(a), Some(b)) => busy_cores(a, b),
                    _ => None,
                },
                mem_available_gib: read_mem(),
                stats: None,
            });
            summarize(first.as_ref(), last.as_ref(), samples)
        });
        Sampler { stop, task }
    }

    pub async fn stop(self) -> Load {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

/// Whole-window busy cores from the first and last readings, least free memory over the samples.
pub fn summarize(first: Option<&CpuTimes>, last: Option<&CpuTimes>, samples: Vec<Sample>) -> Load {
    let cores_busy = match (first, last) {
        (Some(a), Some(b)) => busy_cores(a, b),
        _ => None,
    };
    let min_free_gib = samples
        .iter()
        .filter_map(|s| s.mem_available_gib)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))));
    Load {
        cores_busy,
        min_free_gib,
        samples,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT_A: &str = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\ncpu1 50 0 25 400 25 0 0 0 0 0\nintr 1 2 3\nctxt 9\n";
    // one core fully busy for 100 jiffies, the other idle: 100 busy of 200 total
    const STAT_B: &str = "cpu  190 0 60 900 50 0 0 0 0 0\ncpu0 140 0 35 400 25 0 0 0 0 0\ncpu1 50 0 25 500 25 0 0 0 0 0\n";

    #[test]
    fn busy_cores_from_two_readings() {
        let a = parse_stat(STAT_A).unwrap();
        assert_eq!(
            a,
            CpuTimes {
                busy: 150,
                total: 1000,
                cpus: 2
            }
        );
        let b = parse_stat(STAT_B).unwrap();
        assert!((busy_cores(&a, &b).unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(busy_cores(&a, &a), None);
        assert_eq!(busy_cores(&b, &a), None);
        assert_eq!(parse_stat("intr 1\n"), None);
        assert_eq!(parse_stat("cpu 1 2\n"), None);
    }

    #[test]
    fn mem_available_in_gib() {
        let m = "MemTotal:       16384000 kB\nMemFree:  100 kB\nMemAvailable:    7340032 kB\n";
        assert!((parse_mem_available_gib(m).unwrap() - 7.0).abs() < 1e-12);
        assert_eq!(parse_mem_available_gib("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn summary_takes_the_least_free_memory() {
        let a = parse_stat(STAT_A).unwrap();
        let b = parse_stat(STAT_B).unwrap();
        let s = |m: Option<f64>| Sample {
            t_mono: 0.0,
            cores_busy: None,
            mem_available_gib: m,
            stats: None,
        };
        let l = summarize(
            Some(&a),
            Some(&b),
            vec![s(Some(6.5)), s(None), s(Some(6.25))],
        );
        assert_eq!(l.min_free_gib, Some(6.25));
        assert!((l.cores_busy.unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(summarize(None, Some(&b), vec![]), Load::default());
    }

    #[test]
    fn this_machine_is_readable() {
        // the harness runs on Linux; both files must parse here
        assert!(read_cpu().is_some_and(|c| c.cpus >= 1 && c.total > 0));
        assert!(read_mem().is_some_and(|m| m > 0.0));
    }
}
