//! What `context-fit` reads under ROOT: scans (`scan-*/context.csv`, or ROOT's own `context.csv`,
//! each with an optional `context_run.json`) and probes (`probe-*/context_probe.csv`, the columns
//! of the paper's `context_probe.csv`). Anything else under ROOT is ignored.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use crate::csv::Table;

/// One point of a scan's `context.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScanPoint {
    pub streams: usize,
    pub size: usize,
    pub prompt_tokens: f64,
    pub ttft_s: f64,
    pub decode_tok_s: Option<f64>,
}

/// A scan directory.
#[derive(Clone, Debug, PartialEq)]
pub struct Scan {
    /// `serial`, `parallel`, other `scan-*` suffixes, or `scan` for ROOT itself.
    pub label: String,
    pub dir: PathBuf,
    pub points: Vec<ScanPoint>,
    /// From `context_run.json`, when present.
    pub model: Option<String>,
    pub roles: Option<usize>,
}

impl Scan {
    /// What the label means, for legends and outputs.
    pub fn description(&self) -> String {
        match self.label.as_str() {
            "serial" => "serial: single-threaded attention kernel".to_string(),
            "parallel" => "parallel: multi-threaded attention kernel".to_string(),
            other => other.to_string(),
        }
    }

    /// `(prompt_tokens, ttft_s)` of the single-stream points.
    pub fn single_stream(&self) -> Vec<(f64, f64)> {
        self.points
            .iter()
            .filter(|p| p.streams == 1)
            .map(|p| (p.prompt_tokens, p.ttft_s))
            .collect()
    }
}

/// One row of a probe's `context_probe.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeRow {
    pub context: f64,
    pub boxes_reporting: Option<f64>,
    pub boxes_fit: Option<f64>,
    pub need_mb: Option<f64>,
    pub decode_ms_median: Option<f64>,
    pub decode_ms_min: Option<f64>,
    pub decode_ms_max: Option<f64>,
    pub attn_ms_median: Option<f64>,
}

/// A probe directory.
#[derive(Clone, Debug, PartialEq)]
pub struct Probe {
    /// The `probe-*` suffix.
    pub label: String,
    pub path: PathBuf,
    pub rows: Vec<ProbeRow>,
    /// `preset` and `attention` of a `probe.json` beside the CSV, when there is one.
    pub preset: Option<String>,
    pub attention: Option<String>,
}

/// Everything found under ROOT.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub scans: Vec<Scan>,
    pub probes: Vec<Probe>,
    /// Files that were found but could not be read, with the reason (reported, not fatal).
    pub problems: Vec<String>,
}

fn cell(t: &Table, row: &[String], name: &str) -> Option<f64> {
    let i = t.index(name).ok()?;
    row.get(i)?.trim().parse().ok()
}

/// Read a scan directory: its points from the raw per-request records (`context.jsonl`) when
/// they are there, so a fit sees unrounded means, else from `context.csv` (the paper's published
/// table, rounded as published); `context_run.json` if present.
pub fn read_scan(dir: &Path, label: &str) -> anyhow::Result<Scan> {
    let points = if dir.join("context.jsonl").exists() {
        super::table::rows(&super::table::read_records(dir)?)
            .into_iter()
            .map(|r| ScanPoint {
                streams: r.streams,
                size: r.size,
                prompt_tokens: r.prompt_tokens,
                ttft_s: r.ttft_s,
                decode_tok_s: r.decode_tok_s,
            })
            .collect()
    } else {
        read_table_points(dir)?
    };
    let run: Option<Value> = std::fs::read_to_string(dir.join("context_run.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok());
    Ok(Scan {
        label: label.to_string(),
        dir: dir.to_path_buf(),
        points,
        model: run
            .as_ref()
            .and_then(|r| r.get("model")?.as_str().map(str::to_string)),
        roles: run
            .as_ref()
            .and_then(|r| r.get("roles")?.as_u64().map(|v| v as usize)),
    })
}

/// A scan's points from its `context.csv`.
fn read_table_points(dir: &Path) -> anyhow::Result<Vec<ScanPoint>> {
    let path = dir.join("context.csv");
    let t = Table::read(&path)?;
    for c in ["streams", "size", "prompt_tokens", "ttft_s"] {
        t.index(c).with_context(|| format!("{}", path.display()))?;
    }
    let mut points = Vec::new();
    for (i, row) in t.rows.iter().enumerate() {
        let need = |name: &str| {
            cell(&t, row, name).with_context(|| {
                format!(
                    "{} line {}: '{name}' is not a number",
                    path.display(),
                    i + 2
                )
            })
        };
        points.push(ScanPoint {
            streams: need("streams")? as usize,
            size: need("size")? as usize,
            prompt_tokens: need("prompt_tokens")?,
            ttft_s: need("ttft_s")?,
            decode_tok_s: cell(&t, row, "decode_tok_s"),
        });
    }
    Ok(points)
}

/// Read a probe's `context_probe.csv`.
pub fn read_probe(path: &Path, label: &str) -> anyhow::Result<Probe> {
    let t = Table::read(path)?;
    t.index("context")
        .with_context(|| format!("{}", path.display()))?;
    let mut rows = Vec::new();
    for (i, row) in t.rows.iter().enumerate() {
        let context = cell(&t, row, "context").with_context(|| {
            format!(
                "{} line {}: 'context' is not a number",
                path.display(),
                i + 2
            )
        })?;
        rows.push(ProbeRow {
            context,
            boxes_reporting: cell(&t, row, "boxes_reporting"),
            boxes_fit: cell(&t, row, "boxes_fit"),
            need_mb: cell(&t, row, "need_mb"),
            decode_ms_median: cell(&t, row, "decode_ms_median"),
            decode_ms_min: cell(&t, row, "decode_ms_min"),
            decode_ms_max: cell(&t, row, "decode_ms_max"),
            attn_ms_median: cell(&t, row, "attn_ms_median"),
        });
    }
    rows.sort_by(|a, b| a.context.total_cmp(&b.context));
    let meta: Option<Value> = path
        .parent()
        .and_then(|d| std::fs::read_to_string(d.join("probe.json")).ok())
        .and_then(|s| serde_json::from_str(&s).ok());
    let text = |k: &str| {
        meta.as_ref()
            .and_then(|m| m.get(k)?.as_str().map(str::to_string))
    };
    Ok(Probe {
        label: label.to_string(),
        path: path.to_path_buf(),
        rows,
        preset: text("preset"),
        attention: text("attention"),
    })
}

/// Scan order: serial, parallel, then the others by name.
fn scan_rank(label: &str) -> (u8, String) {
    match label {
        "serial" => (0, String::new()),
        "parallel" => (1, String::new()),
        other => (2, other.to_string()),
    }
}

/// Find and read every scan and probe under `root`. Unreadable ones become `problems`.
pub fn discover(root: &Path) -> anyhow::Result<Inputs> {
    if !root.is_dir() {
        anyhow::bail!("{} is not a directory", root.display());
    }
    let mut inputs = Inputs::default();
    if root.join("context.csv").is_file() {
        match read_scan(root, "scan") {
            Ok(s) => inputs.scans.push(s),
            Err(e) => inputs.problems.push(format!("{e:#}")),
        }
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(root)
        .with_context(|| format!("reading {}", root.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    entries.sort();
    for dir in entries {
        let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
            continue;
        };
        if let Some(label) = name.strip_prefix("scan-") {
            if dir.join("context.csv").is_file() {
                match read_scan(&dir, label) {
                    Ok(s) => inputs.scans.push(s),
                    Err(e) => inputs.problems.push(format!("{e:#}")),
                }
            }
        } else if let Some(label) = name.strip_prefix("probe-") {
            let p = dir.join("context_probe.csv");
            if p.is_file() {
                match read_probe(&p, label) {
                    Ok(pr) => inputs.probes.push(pr),
                    Err(e) => inputs.problems.push(format!("{e:#}")),
                }
            }
        }
    }
    inputs.scans.sort_by_key(|s| scan_rank(&s.label));
    Ok(inputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCAN: &str = "streams,size,repeats,prompt_tokens,ttft_s,ttft_sd,prefill_tok_s,decode_tok_s\r\n1,1024,3,1041,22.46,0.37,46.37,4.726\r\n1,2048,3,2011,37.46,0.02,53.7,\r\n";
    const PROBE: &str = "context,boxes_reporting,boxes_fit,need_mb,avail_mb_min,avail_mb_max,decode_ms_median,decode_ms_min,decode_ms_max,attn_ms_median\n16384,2,2,170,1,2,75,69,79,50\n4096,2,0,74,1,2,,,,\n";

    #[test]
    fn discovers_scans_and_probes_and_ignores_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        for (dir, file, text) in [
            ("scan-parallel", "context.csv", SCAN),
            ("scan-serial", "context.csv", SCAN),
            ("probe-serial", "context_probe.csv", PROBE),
            ("probe-serial", "roles.json", "{}"),
            (
                "probe-serial",
                "probe.json",
                r#"{"preset": "inkling", "attention": "serial", "other": [1]}"#,
            ),
            ("other", "context.csv", SCAN),
            ("scan-empty", "notes.txt", "x"),
        ] {
            std::fs::create_dir_all(r.join(dir)).unwrap();
            std::fs::write(r.join(dir).join(file), text).unwrap();
        }
        std::fs::write(
            r.join("scan-serial/context_run.json"),
            r#"{"model": "inkling-nano", "roles": 2, "extra": 1}"#,
        )
        .unwrap();
        let i = discover(r).unwrap();
        let labels: Vec<&str> = i.scans.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["serial", "parallel"]);
        assert_eq!(i.scans[0].model.as_deref(), Some("inkling-nano"));
        assert_eq!(i.scans[0].roles, Some(2));
        assert_eq!(i.scans[1].model, None);
        assert_eq!(
            i.scans[0].single_stream(),
            vec![(1041.0, 22.46), (2011.0, 37.46)]
        );
        assert_eq!(i.scans[0].points[1].decode_tok_s, None);
        assert_eq!(i.probes.len(), 1);
        // sorted by context; a size that does not fit has no timings
        assert_eq!(i.probes[0].rows[0].context, 4096.0);
        assert_eq!(i.probes[0].rows[0].decode_ms_median, None);
        assert_eq!(i.probes[0].rows[1].attn_ms_median, Some(50.0));
        assert_eq!(i.probes[0].preset.as_deref(), Some("inkling"));
        assert_eq!(i.probes[0].attention.as_deref(), Some("serial"));
        assert!(i.problems.is_empty());
    }

    #[test]
    fn bad_files_are_reported_not_fatal() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("scan-serial")).unwrap();
        std::fs::write(r.join("scan-serial/context.csv"), "streams,size\n1,2\n").unwrap();
        std::fs::create_dir_all(r.join("probe-x")).unwrap();
        std::fs::write(r.join("probe-x/context_probe.csv"), "context\nabc\n").unwrap();
        let i = discover(r).unwrap();
        assert!(i.scans.is_empty() && i.probes.is_empty());
        assert_eq!(i.problems.len(), 2, "{:?}", i.problems);
        assert!(
            i.problems
                .iter()
                .any(|p| p.contains("no column 'prompt_tokens'")),
            "{:?}",
            i.problems
        );
        assert!(discover(&r.join("missing")).is_err());
    }
}
