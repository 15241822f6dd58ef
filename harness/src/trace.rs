//! The files of trace records (MEASUREMENTS.md §1; the records themselves are declared in
//! `moefleet_schema::trace`): gzip JSONL, one gzip member per record so an interrupted run keeps
//! every finished request, and plain JSONL.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use anyhow::Context;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::{de::DeserializeOwned, Serialize};

pub use moefleet_schema::{CohortRecord, PhaseRecord, StatsPoll, TraceRecord};

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
