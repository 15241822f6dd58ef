//! `context.csv` from the raw records: one row per (streams, size) over the requests that
//! finished without error, in the paper's columns and with its aggregation (means over repeats,
//! population SD of TTFT, min/max decode rate, needle count, least free memory). The columns we
//! cannot measure here (`gpu_busy_pct`, `package_w`) stay empty. Pure: records in, text out.

use super::record::ContextRecord;
use crate::stats::{mean, pstdev};

/// The paper's columns, in its order (`results/context.csv`).
pub const COLUMNS: [&str; 16] = [
    "streams",
    "size",
    "repeats",
    "prompt_tokens",
    "ttft_s",
    "ttft_sd",
    "prefill_tok_s",
    "decode_tok_s",
    "decode_min",
    "decode_max",
    "output_tokens",
    "needle_found",
    "cores_busy",
    "gpu_busy_pct",
    "package_w",
    "min_free_gib",
];

/// One row of `context.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextRow {
    pub streams: usize,
    pub size: usize,
    pub repeats: usize,
    pub prompt_tokens: f64,
    pub ttft_s: f64,
    pub ttft_sd: f64,
    pub prefill_tok_s: Option<f64>,
    pub decode_tok_s: Option<f64>,
    pub decode_min: Option<f64>,
    pub decode_max: Option<f64>,
    pub output_tokens: f64,
    pub needle_found: usize,
    pub cores_busy: Option<f64>,
    pub min_free_gib: Option<f64>,
}

/// Rows from the records that have a TTFT and no error, ascending by (streams, size).
pub fn rows(records: &[ContextRecord]) -> Vec<ContextRow> {
    let mut keys: Vec<(usize, usize)> = records.iter().map(|r| (r.streams, r.size)).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut out = Vec::new();
    for (streams, size) in keys {
        let ok: Vec<&ContextRecord> = records
            .iter()
            .filter(|r| r.streams == streams && r.size == size)
            .filter(|r| r.error.is_none() && r.ttft_s.is_some())
            .collect();
        if ok.is_empty() {
            continue;
        }
        let col = |f: &dyn Fn(&ContextRecord) -> Option<f64>| -> Vec<f64> {
            ok.iter().filter_map(|r| f(r)).collect()
        };
        let ttft = col(&|r| r.ttft_s);
        let decode = col(&|r| r.decode_tok_s);
        let prompt = col(&|r| {
            r.prompt_tokens
                .map(|p| p as f64)
                .or(Some(r.prompt_tokens_client as f64))
        });
        out.push(ContextRow {
            streams,
            size,
            repeats: ok.len(),
            prompt_tokens: mean(&prompt).unwrap_or(0.0),
            ttft_s: mean(&ttft).unwrap_or(0.0),
            ttft_sd: pstdev(&ttft),
            prefill_tok_s: mean(&col(&|r| r.prefill_tok_s)),
            decode_tok_s: mean(&decode),
            decode_min: decode.iter().copied().reduce(f64::min),
            decode_max: decode.iter().copied().reduce(f64::max),
            output_tokens: mean(&col(&|r| Some(r.output_tokens as f64))).unwrap_or(0.0),
            needle_found: ok.iter().filter(|r| r.code_found).count(),
            cores_busy: mean(&col(&|r| r.cores_busy)),
            min_free_gib: col(&|r| r.min_free_gib).into_iter().reduce(f64::min),
        });
    }
    out
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.filter(|x| x.is_finite())
        .map(|x| format!("{x:.decimals$}"))
        .unwrap_or_default()
}

/// The CSV text (header and rows, LF line ends), rounded as the paper rounds.
pub fn render(rows: &[ContextRow]) -> String {
    let mut s = COLUMNS.join(",");
    s.push('\n');
    for r in rows {
        let cells = [
            r.streams.to_string(),
            r.size.to_string(),
            r.repeats.to_string(),
            format!("{:.0}", r.prompt_tokens),
            format!("{:.2}", r.ttft_s),
            format!("{:.2}", r.ttft_sd),
            opt(r.prefill_tok_s, 2),
            opt(r.decode_tok_s, 3),
            opt(r.decode_min, 3),
            opt(r.decode_max, 3),
            format!("{:.1}", r.output_tokens),
            r.needle_found.to_string(),
            opt(r.cores_busy, 2),
            String::new(),
            String::new(),
            opt(r.min_free_gib, 2),
        ];
        s.push_str(&cells.join(","));
        s.push('\n');
    }
    s
}

/// `context.csv` rendered afresh from a scan directory's raw records (`context.jsonl`): what
/// `verify` compares with the committed table.
pub fn render_dir(dir: &std::path::Path) -> anyhow::Result<Vec<(String, String)>> {
    Ok(vec![(
        "context.csv".to_string(),
        render(&rows(&read_records(dir)?)),
    )])
}

/// A scan directory's raw per-request records (`context.jsonl`).
pub fn read_records(dir: &std::path::Path) -> anyhow::Result<Vec<ContextRecord>> {
    let path = dir.join("context.jsonl");
    let text =
        std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let records = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str::<ContextRecord>)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csv::Table;

    fn rec(size: usize, ttft: f64, decode: f64, found: bool, free: f64) -> ContextRecord {
        ContextRecord {
            streams: 1,
            size,
            prompt_tokens: Some(size as u64 + 10),
            ttft_s: Some(ttft),
            prefill_tok_s: Some((size + 10) as f64 / ttft),
            decode_tok_s: Some(decode),
            output_tokens: 96,
            code_found: found,
            cores_busy: Some(1.0),
            min_free_gib: Some(free),
            ..Default::default()
        }
    }

    #[test]
    fn aggregates_like_the_paper() {
        let mut failed = rec(1024, 1.0, 9.0, true, 0.1);
        failed.error = Some("HTTP 400".into());
        let recs = vec![
            rec(2048, 30.0, 4.0, false, 6.0),
            rec(1024, 10.0, 5.0, true, 7.0),
            rec(1024, 14.0, 3.0, false, 6.5),
            failed,
        ];
        let rows = rows(&recs);
        assert_eq!(rows.len(), 2);
        let r = &rows[0];
        assert_eq!((r.size, r.repeats, r.needle_found), (1024, 2, 1));
        assert!((r.ttft_s - 12.0).abs() < 1e-12);
        assert!((r.ttft_sd - 2.0).abs() < 1e-12);
        assert_eq!((r.decode_min, r.decode_max), (Some(3.0), Some(5.0)));
        assert_eq!(r.min_free_gib, Some(6.5));
        let text = render(&rows);
        let t = Table::parse(&text);
        assert_eq!(t.header, COLUMNS);
        assert_eq!(
            t.rows[0],
            "1,1024,2,1034,12.00,2.00,88.63,4.000,3.000,5.000,96.0,1,1.00,,,6.50"
                .split(',')
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_size_with_only_failures_has_no_row() {
        let mut r = rec(1024, 1.0, 1.0, false, 1.0);
        r.error = Some("timeout".into());
        assert!(rows(&[r]).is_empty());
        assert_eq!(render(&[]), format!("{}\n", COLUMNS.join(",")));
    }
}
