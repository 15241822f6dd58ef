//! Trace records (MEASUREMENTS.md §1): one per request, the only source of every timing; phase
//! records; and their files (gzip JSONL, one gzip member per record so an interrupted run keeps
//! every finished request).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use anyhow::Context;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// One request as the client saw it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    pub phase: String,
    pub family: String,
    pub family_index: usize,
    pub prompt_index: usize,
    pub cohort: usize,
    pub prompt: String,
    /// The server's `usage.prompt_tokens`.
    pub prompt_tokens: Option<u64>,
    pub max_tokens: usize,
    /// Epoch seconds just before the first HTTP attempt.
    pub started: f64,
    /// The same instant on the run's monotonic clock (seconds from the run's origin).
    pub started_mono: f64,
    /// `[t, n]`: epoch arrival time of an SSE chunk and the tokens it carries.
    pub events: Vec<(f64, u32)>,
    /// `[t, n]` on the run's monotonic clock; durations are computed from these.
    pub events_mono: Vec<(f64, u32)>,
    pub ended: f64,
    pub ended_mono: f64,
    pub finish_reason: Option<String>,
    pub usage: Option<serde_json::Value>,
    pub text: String,
    pub capacity_retries: u32,
    /// moefleet's own fields from the stream (e.g. `capture`: where the stream's capture went).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_extra: Option<serde_json::Value>,
    /// Present only when the counted tokens could not be checked against the server's usage
    /// (MEASUREMENTS.md §1: a server that reports none is recorded as unchecked, explicitly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_check: Option<String>,
    /// Present only on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl TraceRecord {
    /// Σ n over the events.
    pub fn tokens(&self) -> u64 {
        self.events_mono.iter().map(|e| e.1 as u64).sum()
    }

    pub fn completion_tokens(&self) -> Option<u64> {
        self.usage
            .as_ref()
            .and_then(|u| u.get("completion_tokens"))
            .and_then(|v| v.as_u64())
    }
}

/// One cohort's wall and monotonic bounds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CohortRecord {
    pub index: usize,
    pub requests: usize,
    pub start_mono: f64,
    pub end_mono: f64,
}

/// One phase (MEASUREMENTS.md §1, "phase record").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseRecord {
    pub phase: String,
    pub family: String,
    pub concurrency: usize,
    pub output_cap: usize,
    pub requests: usize,
    pub tokens: u64,
    pub start: f64,
    pub end: f64,
    pub start_mono: f64,
    pub end_mono: f64,
    pub cohorts: Vec<CohortRecord>,
    /// `/api/stats` just before and just after the phase (None: the server has none).
    pub stats_before: Option<serde_json::Value>,
    pub stats_after: Option<serde_json::Value>,
    /// The server was idle (`requests_in_flight == 0`) when the phase started.
    pub idle_at_start: Option<bool>,
    pub capacity_retries: u64,
    pub errors: usize,
}

/// One `/api/stats` poll.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsPoll {
    pub t: f64,
    pub t_mono: f64,
    pub stats: serde_json::Value,
}

/// Appends to trace files are serialised: each record is one gzip member written by one call.
static APPEND: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Append one record as its own gzip member (readable even if the run stops right after). The
/// member is compressed in memory and written under a process-wide lock, so records finishing at
/// the same moment on different threads never interleave.
pub fn append_gz<T: Serialize>(path: &Path, rec: &T) -> anyhow::Result<()> {
    let mut line = serde_json::to_vec(rec)?;
    line.push(b'\n');
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&line)?;
    let member = gz.finish()?;
    let _guard = APPEND.lock().unwrap_or_else(|e| e.into_inner());
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    f.write_all(&member)?;
    f.sync_data()?;
    Ok(())
}

/// Append one JSON line (uncompressed).
pub fn append_jsonl<T: Serialize>(path: &Path, rec: &T) -> anyhow::Result<()> {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let mut line = serde_json::to_vec(rec)?;
    line.push(b'\n');
    f.write_all(&line)?;
    Ok(())
}

/// Read every record of a gzip JSONL (or plain JSONL) file.
pub fn read_records<T: DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let gz = path.extension().is_some_and(|e| e == "gz");
    let reader: Box<dyn BufRead> = if gz {
        Box::new(BufReader::new(MultiGzDecoder::new(f)))
    } else {
        Box::new(BufReader::new(f))
    };
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("{}: line {}", path.display(), i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(
            serde_json::from_str(&line)
                .with_context(|| format!("{}: line {}", path.display(), i + 1))?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_appends_never_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl.gz");
        std::thread::scope(|s| {
            for t in 0..8 {
                let p = p.clone();
                s.spawn(move || {
                    for i in 0..50 {
                        let r = TraceRecord {
                            phase: format!("t{t}-{i}"),
                            text: "x".repeat(3000),
                            ..Default::default()
                        };
                        append_gz(&p, &r).unwrap();
                    }
                });
            }
        });
        let back: Vec<TraceRecord> = read_records(&p).unwrap();
        assert_eq!(back.len(), 400);
    }

    #[test]
    fn gzip_members_append_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl.gz");
        let recs: Vec<TraceRecord> = (0..5)
            .map(|i| TraceRecord {
                phase: format!("p{i}"),
                events: vec![(1.0, 1)],
                ..Default::default()
            })
            .collect();
        for r in &recs {
            append_gz(&p, r).unwrap();
        }
        let back: Vec<TraceRecord> = read_records(&p).unwrap();
        assert_eq!(back, recs);
    }
}
