//! The in-role context probe's tables (MEASUREMENTS.md §3.1): `moefleet probe` (or a fleet started
//! with `serve --context-probe DIR`) writes one `probe-role-K.json` of raw per-size records per role; this
//! summarises them into `context_probe.csv` (the paper's columns) and `probe.json` (attention
//! cost per 1k positions, KV bytes per position, the largest size every role fitted). Pure apart
//! from `write`; `verify` re-derives committed probes with `render`.

use std::path::Path;

use anyhow::Context;
use moefleet_engine::probe::{median, read_records, ProbeRecord};
use serde_json::{json, Value};

/// One row of `context_probe.csv`: the records of every role at one size.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeSummary {
    pub context: usize,
    pub roles_reporting: usize,
    pub roles_fit: usize,
    pub need_mb: f64,
    pub avail_mb_min: f64,
    pub avail_mb_max: f64,
    pub decode_ms_median: Option<f64>,
    pub decode_ms_min: Option<f64>,
    pub decode_ms_max: Option<f64>,
    pub attn_ms_median: Option<f64>,
}

/// Aggregate per size over roles: need is the largest role's, decode statistics are over the
/// roles' median decode times, attention the median of the roles' median attention times.
pub fn summarize(records: &[ProbeRecord]) -> Vec<SizeSummary> {
    let mut sizes: Vec<usize> = records.iter().map(|r| r.context).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mb = |b: u64| b as f64 / 1e6;
    sizes
        .into_iter()
        .map(|n| {
            let rs: Vec<&ProbeRecord> = records.iter().filter(|r| r.context == n).collect();
            let dec: Vec<f64> = rs.iter().filter_map(|r| r.decode_median()).collect();
            let att: Vec<f64> = rs.iter().filter_map(|r| r.attention_median()).collect();
            SizeSummary {
                context: n,
                roles_reporting: rs.len(),
                roles_fit: rs.iter().filter(|r| r.fits).count(),
                need_mb: mb(rs.iter().map(|r| r.need_bytes).max().unwrap_or(0)),
                avail_mb_min: mb(rs.iter().map(|r| r.avail_bytes).min().unwrap_or(0)),
                avail_mb_max: mb(rs.iter().map(|r| r.avail_bytes).max().unwrap_or(0)),
                decode_ms_median: median(&dec),
                decode_ms_min: dec.iter().copied().reduce(f64::min),
                decode_ms_max: dec.iter().copied().reduce(f64::max),
                attn_ms_median: median(&att),
            }
        })
        .collect()
}

/// `context_probe.csv` text in the paper's columns (empty cells where nothing was measured).
pub fn csv(rows: &[SizeSummary]) -> String {
    let f = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.3}"));
    let mut out = String::from(
        "context,boxes_reporting,boxes_fit,need_mb,avail_mb_min,avail_mb_max,decode_ms_median,decode_ms_min,decode_ms_max,attn_ms_median\n",
    );
    for r in rows {
        out.push_str(&format!(
            "{},{},{},{:.1},{:.0},{:.0},{},{},{},{}\n",
            r.context,
            r.roles_reporting,
            r.roles_fit,
            r.need_mb,
            r.avail_mb_min,
            r.avail_mb_max,
            f(r.decode_ms_median),
            f(r.decode_ms_min),
            f(r.decode_ms_max),
            f(r.attn_ms_median),
        ));
    }
    out
}

/// Least-squares slope of y on x (with intercept); None for fewer than two distinct x.
pub fn slope(pts: &[(f64, f64)]) -> Option<f64> {
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return None;
    }
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The derived fields of `probe.json`: the roles and sizes, attention ms per 1k positions (the
/// least-squares slope over the sizes that were measured), KV bytes per position (from the need
/// at the smallest and largest size) and the largest size every role fitted.
pub fn summary(all: &[ProbeRecord], rows: &[SizeSummary]) -> Value {
    let mut roles: Vec<usize> = all.iter().map(|r| r.role).collect();
    roles.sort_unstable();
    roles.dedup();
    let pts: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| Some((r.context as f64, r.attn_ms_median?)))
        .collect();
    let bytes_per_pos = match (rows.first(), rows.last()) {
        (Some(a), Some(b)) if b.context > a.context => {
            Some((b.need_mb - a.need_mb) * 1e6 / (b.context - a.context) as f64)
        }
        _ => None,
    };
    json!({
        "roles": roles,
        "sizes": rows.iter().map(|r| r.context).collect::<Vec<_>>(),
        "attention_ms_per_1k_positions": slope(&pts).map(|s| s * 1000.0),
        "kv_bytes_per_position": bytes_per_pos,
        "largest_size_fitting_every_role": rows
            .iter()
            .filter(|r| r.roles_fit == r.roles_reporting)
            .map(|r| r.context)
            .max(),
    })
}

/// The probe's records under `dir` as `context_probe.csv` and the derived fields of `probe.json`.
pub fn render(dir: &Path) -> anyhow::Result<(String, Value)> {
    let all = read_records(dir)?;
    let rows = summarize(&all);
    Ok((csv(&rows), summary(&all, &rows)))
}

/// Write DIR/context_probe.csv (with its Parquet twin) and DIR/probe.json, whose `host` is the
/// first role record's (the machine the probe ran on, not the one summarising it).
pub fn write(dir: &Path) -> anyhow::Result<Value> {
    let (text, mut doc) = render(dir)?;
    crate::csv::write(&dir.join("context_probe.csv"), &text)?;
    doc["host"] = first_host(dir).unwrap_or(Value::Null);
    let path = dir.join("probe.json");
    crate::json::write(&path, &doc)?;
    Ok(doc)
}

fn first_host(dir: &Path) -> Option<Value> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("probe-role-") && n.ends_with(".json"))
        })
        .collect();
    names.sort();
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(names.first()?).ok()?).ok()?;
    doc.get("host").cloned()
}

/// For `verify`: the committed `context_probe.csv` and the derived fields of `probe.json` equal a
/// fresh summary of the role records.
pub fn rederive_matches(dir: &Path) -> anyhow::Result<()> {
    let (text, doc) = render(dir)?;
    let csv_path = dir.join("context_probe.csv");
    let committed = std::fs::read_to_string(&csv_path)
        .with_context(|| format!("reading {}", csv_path.display()))?;
    if committed != text {
        anyhow::bail!(
            "context_probe.csv differs from a fresh summary of probe-role-*.json (edited by hand?)"
        );
    }
    crate::csv::check_twin(&csv_path)?;
    let p = dir.join("probe.json");
    let stored: Value = serde_json::from_str(
        &std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?,
    )
    .with_context(|| format!("parsing {}", p.display()))?;
    for (k, v) in doc.as_object().into_iter().flatten() {
        if !stored
            .get(k)
            .is_some_and(|s| crate::recheck::same_json(s, v))
        {
            anyhow::bail!("probe.json's {k} differs from a fresh summary of probe-role-*.json");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(role: usize, n: usize, fits: bool, dec: &[f64], att: &[f64]) -> ProbeRecord {
        ProbeRecord {
            role,
            context: n,
            fits,
            need_bytes: n as u64 * 8192,
            avail_bytes: 10_000_000_000 + role as u64,
            decode_ms: dec.to_vec(),
            attention_ms: att.to_vec(),
            mlp_ms: vec![],
            rss_filled_bytes: 0,
            rss_freed_bytes: 0,
            fill_s: 0.0,
        }
    }

    #[test]
    fn summary_takes_medians_over_roles_and_counts_fits() {
        let rs = vec![
            rec(0, 4096, true, &[4.0, 2.0, 3.0, 9.0], &[1.0, 1.0, 2.0, 2.0]),
            rec(1, 4096, true, &[5.0, 5.0, 5.0, 5.0], &[3.0, 3.0, 3.0, 3.0]),
            rec(0, 8192, true, &[6.0; 4], &[2.5; 4]),
            rec(1, 8192, true, &[6.0; 4], &[2.5; 4]),
            rec(0, 1 << 20, false, &[], &[]),
        ];
        let s = summarize(&rs);
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].roles_reporting, s[0].roles_fit), (2, 2));
        assert_eq!(s[0].decode_ms_median, Some(4.25)); // medians 3.5 and 5
        assert_eq!(
            (s[0].decode_ms_min, s[0].decode_ms_max),
            (Some(3.5), Some(5.0))
        );
        assert_eq!(s[0].attn_ms_median, Some(2.25));
        assert_eq!((s[2].roles_fit, s[2].decode_ms_median), (0, None));
        let text = csv(&s);
        assert!(text.lines().nth(3).unwrap().ends_with(",,,,"), "{text}");
        let d = summary(&rs, &s);
        // attention 2.25 ms at 4096 and 2.5 at 8192: 0.25 ms per 4096 positions
        let per_1k = d["attention_ms_per_1k_positions"].as_f64().unwrap();
        assert!((per_1k - 0.25 / 4.096).abs() < 1e-12);
        // need: 8192 bytes per position (through MB, so within rounding)
        let per_pos = d["kv_bytes_per_position"].as_f64().unwrap();
        assert!((per_pos - 8192.0).abs() < 1e-6, "{per_pos}");
        assert_eq!(d["largest_size_fitting_every_role"], 8192);
    }

    #[test]
    fn a_probe_written_from_role_records_rederives_and_an_edit_fails() {
        let dir = tempfile::tempdir().unwrap();
        let recs = [
            rec(0, 4096, true, &[4.0, 2.0], &[1.0, 2.0]),
            rec(0, 8192, true, &[5.0, 6.0], &[2.0, 2.5]),
        ];
        let doc = json!({"role": 0, "host": {"cpu": "x"}, "records": recs});
        std::fs::write(dir.path().join("probe-role-0.json"), doc.to_string()).unwrap();
        let written = write(dir.path()).unwrap();
        assert_eq!(written["host"]["cpu"], "x");
        rederive_matches(dir.path()).unwrap();
        let p = dir.path().join("probe.json");
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        v["kv_bytes_per_position"] = json!(1.0);
        std::fs::write(&p, v.to_string()).unwrap();
        assert!(rederive_matches(dir.path()).is_err());
    }
}
