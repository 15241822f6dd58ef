//! Checks of the paper's own arithmetic from its published per-phase data
//! (`reproduction/paper/`): the paired curve is the mean of the two phases of each level.
//! The pooled TTFT quantiles need per-request records, which the artifact does not publish, so
//! only the throughput columns are recomputed.

use std::collections::BTreeMap;

use crate::csv::Table;

/// One published phase row: (phase, C, Q_decode, Q_phase).
#[derive(Clone, Debug, PartialEq)]
pub struct PublishedPhase {
    pub phase: String,
    pub concurrency: usize,
    pub decode_tok_s: f64,
    pub phase_tok_s: f64,
}

/// Parse the paper's `survey_phases.csv`.
pub fn read_survey_phases(text: &str) -> anyhow::Result<Vec<PublishedPhase>> {
    let t = Table::parse(text);
    let (ip, ic, id, iq) = (
        t.index("phase")?,
        t.index("concurrency")?,
        t.index("decode_tok_s")?,
        t.index("phase_tok_s")?,
    );
    t.rows
        .iter()
        .map(|r| {
            Ok(PublishedPhase {
                phase: r.get(ip).cloned().unwrap_or_default(),
                concurrency: t.num(r, ic)? as usize,
                decode_tok_s: t.num(r, id)?,
                phase_tok_s: t.num(r, iq)?,
            })
        })
        .collect()
}

/// Paired means per level over the `mixed_a_*` / `mixed_b_*` phases: (C, mean Q_decode,
/// mean Q_phase, mean Q_decode / C, number of phases).
pub fn paired_means(phases: &[PublishedPhase]) -> Vec<(usize, f64, f64, f64, usize)> {
    let mut by_c: BTreeMap<usize, Vec<&PublishedPhase>> = BTreeMap::new();
    for p in phases
        .iter()
        .filter(|p| p.phase.starts_with("mixed_a_") || p.phase.starts_with("mixed_b_"))
    {
        by_c.entry(p.concurrency).or_default().push(p);
    }
    by_c.into_iter()
        .map(|(c, ps)| {
            let n = ps.len() as f64;
            let d = ps.iter().map(|p| p.decode_tok_s).sum::<f64>() / n;
            let q = ps.iter().map(|p| p.phase_tok_s).sum::<f64>() / n;
            (c, d, q, d / c as f64, ps.len())
        })
        .collect()
}

/// Rows of the paper's `concurrency_rows.tex`: (C, decode, phase, per-stream, TTFT median, p95).
pub fn read_table_rows(tex: &str) -> Vec<(usize, f64, f64, f64, f64, f64)> {
    tex.lines()
        .filter_map(|l| {
            let l = l.trim().trim_end_matches("\\\\").trim();
            let f: Vec<&str> = l.split('&').map(str::trim).collect();
            if f.len() != 6 {
                return None;
            }
            Some((
                f[0].parse().ok()?,
                f[1].parse().ok()?,
                f[2].parse().ok()?,
                f[3].parse().ok()?,
                f[4].parse().ok()?,
                f[5].parse().ok()?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paper(name: &str) -> String {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../reproduction/paper")
                .join(name),
        )
        .unwrap()
    }

    #[test]
    fn the_88_stream_peak_is_the_mean_of_its_two_phases() {
        let rows = paired_means(&read_survey_phases(&paper("survey_phases.csv")).unwrap());
        let (_, d, q, per, n) = rows.iter().copied().find(|r| r.0 == 88).unwrap();
        assert_eq!(n, 2);
        let audit: serde_json::Value = serde_json::from_str(&paper("survey_audit.json")).unwrap();
        let peak = &audit["peak"];
        assert!(
            (d - peak["mean_decode_tok_s"].as_f64().unwrap()).abs() < 1e-12,
            "{d}"
        );
        assert!(
            (q - peak["mean_phase_tok_s"].as_f64().unwrap()).abs() < 1e-12,
            "{q}"
        );
        assert!((d - 60.286375128761485).abs() < 1e-12 && (q - 46.874876421073495).abs() < 1e-12);
        assert!((per - peak["mean_decode_per_stream"].as_f64().unwrap()).abs() < 1e-12);
        // the peak is the level with the highest mean Q_decode
        let best = rows.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        assert_eq!(best.0, 88);
    }

    #[test]
    fn all_fifteen_table_rows_are_the_paired_means() {
        let ours = paired_means(&read_survey_phases(&paper("survey_phases.csv")).unwrap());
        let table = read_table_rows(&paper("concurrency_rows.tex"));
        assert_eq!(table.len(), 15);
        assert_eq!(ours.len(), 15);
        for ((c, d, q, per, n), t) in ours.iter().zip(&table) {
            assert_eq!(*c, t.0);
            assert_eq!(*n, 2, "C = {c} has two phases");
            // the table prints two decimals (three for the per-stream column)
            assert!(
                (d - t.1).abs() <= 0.005 + 1e-9,
                "C = {c}: decode {d} vs {}",
                t.1
            );
            assert!(
                (q - t.2).abs() <= 0.005 + 1e-9,
                "C = {c}: phase {q} vs {}",
                t.2
            );
            assert!(
                (per - t.3).abs() <= 0.0005 + 1e-9,
                "C = {c}: per stream {per} vs {}",
                t.3
            );
        }
    }
}
