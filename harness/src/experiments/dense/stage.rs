//! `moefleet-harness dense-stage`: the stage-level effect of the dense form (MEASUREMENTS.md §4).
//! Reads role 0's per-frame records (`role-0.jsonl` of `moefleet serve --profile-dir`) of two fleet
//! runs, one per dense form, and summarises role 0's compute and MLP time per frame, over all
//! frames and split by rows per frame. Pure functions from records to tables, plus the file I/O.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use crate::stats::Summary;

/// A role's frame record, of which this summary reads the role, rows and compute, MLP and
/// attention times (`moefleet_schema::FrameRecord`; older records lack some other fields).
pub type StageRecord = moefleet_schema::FrameRecord;

/// Rows-per-frame buckets: exact up to 8 rows (decode frames of up to 8 streams), then ranges
/// (mostly prefill frames).
pub const BUCKETS: [(&str, usize, usize); 11] = [
    ("1", 1, 1),
    ("2", 2, 2),
    ("3", 3, 3),
    ("4", 4, 4),
    ("5", 5, 5),
    ("6", 6, 6),
    ("7", 7, 7),
    ("8", 8, 8),
    ("9-32", 9, 32),
    ("33-128", 33, 128),
    ("129+", 129, usize::MAX),
];

/// One (form, rows bucket) line of `dense_stage.csv`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageRow {
    pub form: String,
    pub rows_bucket: String,
    pub frames: usize,
    pub rows_mean: f64,
    pub compute_ms: Summary,
    pub mlp_ms: Summary,
    /// Median of compute per frame divided by the frame's rows.
    pub compute_ms_per_row_median: f64,
}

/// Role 0's records of a profile directory (or a `role-0.jsonl` path). A torn last line (a
/// fleet stopped mid-write) is skipped with a warning; any other bad line is an error.
pub fn read_role0(path: &Path) -> anyhow::Result<(PathBuf, Vec<StageRecord>)> {
    let file = if path.is_dir() {
        path.join("role-0.jsonl")
    } else {
        path.to_path_buf()
    };
    let f = std::fs::File::open(&file).with_context(|| {
        format!(
            "{}: no role-0 profile (start the fleet with --profile-dir)",
            file.display()
        )
    })?;
    let lines: Vec<String> = std::io::BufReader::new(f)
        .lines()
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading {}", file.display()))?;
    let n = lines.len();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<StageRecord>(line) {
            Ok(r) if r.role == 0 => out.push(r),
            Ok(_) => {}
            Err(_) if i + 1 == n => {
                eprintln!(
                    "dense-stage: skipping a torn last line of {}",
                    file.display()
                )
            }
            Err(e) => anyhow::bail!("{}: line {}: {e}", file.display(), i + 1),
        }
    }
    if out.is_empty() {
        anyhow::bail!("{}: no role-0 frame records", file.display());
    }
    Ok((file, out))
}

/// Summary of `records` that fall in rows `lo..=hi`, or None if there are none.
pub fn summarize(
    form: &str,
    bucket: &str,
    records: &[StageRecord],
    lo: usize,
    hi: usize,
) -> Option<StageRow> {
    let sel: Vec<&StageRecord> = records
        .iter()
        .filter(|r| r.rows >= lo && r.rows <= hi)
        .collect();
    let ms = |f: &dyn Fn(&StageRecord) -> f64| sel.iter().map(|r| f(r)).collect::<Vec<f64>>();
    let compute = ms(&|r| r.compute_ns as f64 / 1e6);
    let per_row = ms(&|r| r.compute_ns as f64 / 1e6 / r.rows.max(1) as f64);
    Some(StageRow {
        form: form.to_string(),
        rows_bucket: bucket.to_string(),
        frames: sel.len(),
        rows_mean: sel.iter().map(|r| r.rows as f64).sum::<f64>() / sel.len().max(1) as f64,
        compute_ms: Summary::of(&compute)?,
        mlp_ms: Summary::of(&ms(&|r| r.mlp_ns as f64 / 1e6))?,
        compute_ms_per_row_median: Summary::of(&per_row)?.median,
    })
}

/// Rows for one form: all frames, then every bucket that has frames.
pub fn rows_for(form: &str, records: &[StageRecord]) -> Vec<StageRow> {
    let mut out: Vec<StageRow> = summarize(form, "all", records, 0, usize::MAX)
        .into_iter()
        .collect();
    out.extend(
        BUCKETS
            .iter()
            .filter_map(|(name, lo, hi)| summarize(form, name, records, *lo, *hi)),
    );
    out
}

/// Columns of `dense_stage.csv`.
pub const HEADER: &str = "form,rows_bucket,frames,rows_mean,compute_ms_median,compute_ms_p10,compute_ms_p90,mlp_ms_median,mlp_ms_p10,mlp_ms_p90,compute_ms_per_row_median";

/// The text of `dense_stage.csv`.
pub fn csv(rows: &[StageRow]) -> String {
    let mut s = String::from(HEADER);
    s.push('\n');
    for r in rows {
        s += &format!(
            "{},{},{},{:.3},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4}\n",
            r.form,
            r.rows_bucket,
            r.frames,
            r.rows_mean,
            r.compute_ms.median,
            r.compute_ms.p10,
            r.compute_ms.p90,
            r.mlp_ms.median,
            r.mlp_ms.p10,
            r.mlp_ms.p90,
            r.compute_ms_per_row_median,
        );
    }
    s
}

/// One bucket present in both runs: the change of the medians, fused against three-matmul.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageChange {
    pub rows_bucket: String,
    pub frames_three: usize,
    pub frames_fused: usize,
    pub compute_ms_three: f64,
    pub compute_ms_fused: f64,
    /// `100 · (1 − fused / three)` of the median compute per frame: positive = fused faster.
    pub compute_reduction_pct: f64,
    pub mlp_ms_three: f64,
    pub mlp_ms_fused: f64,
    pub mlp_reduction_pct: f64,
}

/// Changes for every bucket both forms have.
pub fn changes(three: &[StageRow], fused: &[StageRow]) -> Vec<StageChange> {
    three
        .iter()
        .filter_map(|t| {
            let f = fused.iter().find(|f| f.rows_bucket == t.rows_bucket)?;
            Some(StageChange {
                rows_bucket: t.rows_bucket.clone(),
                frames_three: t.frames,
                frames_fused: f.frames,
                compute_ms_three: t.compute_ms.median,
                compute_ms_fused: f.compute_ms.median,
                compute_reduction_pct: 100.0 * (1.0 - f.compute_ms.median / t.compute_ms.median),
                mlp_ms_three: t.mlp_ms.median,
                mlp_ms_fused: f.mlp_ms.median,
                mlp_reduction_pct: 100.0 * (1.0 - f.mlp_ms.median / t.mlp_ms.median),
            })
        })
        .collect()
}

/// Read both runs, write `dense_stage.csv` and `dense_stage.json` into `out`, print the table.
pub fn run(three: &Path, fused: &Path, out: &Path) -> anyhow::Result<()> {
    let (three_file, three_recs) = read_role0(three)?;
    let (fused_file, fused_recs) = read_role0(fused)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let t = rows_for("three-matmul", &three_recs);
    let f = rows_for("fused-slices", &fused_recs);
    let ch = changes(&t, &f);
    let all: Vec<StageRow> = t.iter().chain(&f).cloned().collect();
    let text = csv(&all);
    let csv_path = out.join("dense_stage.csv");
    crate::csv::write(&csv_path, &text)?;
    let overall = ch.iter().find(|c| c.rows_bucket == "all");
    let verdict = match overall {
        Some(c) if c.compute_reduction_pct > 0.0 => format!(
            "Role 0 compute per frame is {:.1} % lower with the fused-slices path (median {:.3} -> {:.3} ms over all frames).",
            c.compute_reduction_pct, c.compute_ms_three, c.compute_ms_fused
        ),
        Some(c) => format!(
            "Role 0 compute per frame is NOT lower with the fused-slices path: {:.1} % change (median {:.3} -> {:.3} ms over all frames; negative = fused slower).",
            c.compute_reduction_pct, c.compute_ms_three, c.compute_ms_fused
        ),
        None => "no frames to compare".to_string(),
    };
    let record = serde_json::json!({
        "record": "dense_stage",
        "role": 0,
        "three_matmul": { "profile": three_file, "frames": three_recs.len(), "buckets": t },
        "fused_slices": { "profile": fused_file, "frames": fused_recs.len(), "buckets": f },
        "changes": ch,
        "verdict": verdict,
        "note": "compute = role 0's whole frame, wall clock: embedding, its layers (dense layers 0 and 1 and its MoE layers) and encoding and queueing the frame for role 1; mlp = the MLP part of its layers; rows = residual rows per frame (one per stream in the frame). Wall-clock times include any time role 0 waited for a core, which is large when the fleet has more roles than the machine has cores; the mlp medians of the frequent buckets are the cleanest comparison.",
        "host": crate::host::facts(),
    });
    let json_path = out.join("dense_stage.json");
    crate::json::write(&json_path, &record)?;
    print!("{text}");
    println!("{verdict}");
    eprintln!(
        "dense-stage: wrote {} and {}",
        csv_path.display(),
        json_path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(rows: usize, compute_ms: f64, mlp_ms: f64) -> StageRecord {
        StageRecord {
            role: 0,
            rows,
            compute_ns: (compute_ms * 1e6) as u64,
            mlp_ns: (mlp_ms * 1e6) as u64,
            attention_ns: 0,
            ..Default::default()
        }
    }

    #[test]
    fn summaries_by_rows_and_changes() {
        let three = [
            rec(1, 10.0, 6.0),
            rec(1, 12.0, 7.0),
            rec(1, 11.0, 8.0),
            rec(2, 20.0, 10.0),
            rec(40, 100.0, 50.0),
        ];
        let fused = [rec(1, 9.0, 5.0), rec(2, 22.0, 11.0)];
        let t = rows_for("three-matmul", &three);
        let names: Vec<&str> = t.iter().map(|r| r.rows_bucket.as_str()).collect();
        assert_eq!(names, ["all", "1", "2", "33-128"]);
        assert_eq!(t[1].frames, 3);
        assert_eq!(t[1].compute_ms.median, 11.0);
        assert_eq!(t[1].mlp_ms.median, 7.0);
        assert_eq!(t[0].compute_ms.median, 12.0);
        assert!((t[0].rows_mean - 9.0).abs() < 1e-12);
        assert_eq!(t[3].compute_ms_per_row_median, 2.5);
        let f = rows_for("fused-slices", &fused);
        let ch = changes(&t, &f);
        let names: Vec<&str> = ch.iter().map(|c| c.rows_bucket.as_str()).collect();
        assert_eq!(names, ["all", "1", "2"]);
        assert!((ch[1].compute_reduction_pct - 100.0 * (1.0 - 9.0 / 11.0)).abs() < 1e-9);
        assert!(ch[2].compute_reduction_pct < 0.0);
        let text = csv(&t);
        assert!(text.starts_with(HEADER));
        assert!(text.contains("\nthree-matmul,1,3,1.000,11.0000,10.2000,11.8000,7.0000,"));
        assert_eq!(text.lines().count(), 5);
    }

    #[test]
    fn reads_profiles_and_tolerates_only_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let good = r#"{"role":0,"seq":0,"group":0,"rows":2,"t_ns":5,"idle_ns":0,"compute_ns":3000000,"attention_ns":1,"mlp_ns":2000000,"head_ns":0,"bytes_in":0,"bytes_out":8}"#;
        std::fs::write(
            dir.path().join("role-0.jsonl"),
            format!("{good}\n{good}\n{{\"role\":0,\"ro"),
        )
        .unwrap();
        let (_, r) = read_role0(dir.path()).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].rows, 2);
        assert_eq!(r[0].mlp_ns, 2_000_000);
        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, format!("{{\"role\":0\n{good}\n")).unwrap();
        assert!(read_role0(&bad).is_err());
        assert!(read_role0(&dir.path().join("missing")).is_err());
        let empty = dir.path().join("empty.jsonl");
        std::fs::write(&empty, "").unwrap();
        assert!(read_role0(&empty).is_err());
    }
}
