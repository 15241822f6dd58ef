//! Figure 6 (paper §5.3): bursts of fifteen requests with a 128-token cap, under reference
//! admission (whole prompts, one at a time: `serve --admission reference`) and under eight-row
//! prefill windows (`--admission windowed --prefill-rows 8`), per retained phase: median TTFT and
//! whole-phase tokens per second (Q_phase), both read from each run's `phases.csv` (written by
//! `analyze` from the traces). The paper's values (`prefill.csv`: experiment 019, its 15-stream
//! baseline, against 024, prefill windows) are markers by phase position (`a`, `b`, ...), where it
//! published one.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context};

use super::family_bars::{self, FamilyBars, Spec};
use super::run_label::RunLabel;
use crate::csv::Table;

/// One retained phase of the two runs, matched by position.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub phase: String,
    pub reference_ttft_median_s: f64,
    pub windowed_ttft_median_s: f64,
    pub reference_phase_tok_s: f64,
    pub windowed_phase_tok_s: f64,
}

/// (phase, TTFT median, Q_phase) of every phase of a run, in phase-name order.
fn phases(run: &Path) -> anyhow::Result<Vec<(String, f64, f64)>> {
    let path = run.join("phases.csv");
    let t =
        Table::read(&path).with_context(|| format!("{}: run `analyze` first", run.display()))?;
    let (p, ttft, rate) = (
        t.index("phase")?,
        t.index("ttft_median_s")?,
        t.index("phase_tok_s")?,
    );
    let mut out = Vec::new();
    for r in &t.rows {
        let name = r.get(p).cloned().unwrap_or_default();
        out.push((name, t.num(r, ttft)?, t.num(r, rate)?));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The two runs' phases side by side (they must have the same number).
pub fn rows(reference: &Path, windowed: &Path) -> anyhow::Result<Vec<Row>> {
    let (a, b) = (phases(reference)?, phases(windowed)?);
    if a.is_empty() || a.len() != b.len() {
        bail!(
            "{} has {} phases and {} has {}: Figure 6 pairs them by position",
            reference.display(),
            a.len(),
            windowed.display(),
            b.len()
        );
    }
    Ok(a.into_iter()
        .zip(b)
        .map(|(r, w)| Row {
            phase: r.0,
            reference_ttft_median_s: r.1,
            windowed_ttft_median_s: w.1,
            reference_phase_tok_s: r.2,
            windowed_phase_tok_s: w.2,
        })
        .collect())
}

/// The paper's (TTFT, Q_phase) bars by phase position: experiment 019 (baseline) and 024
/// (windows), phases `mix15a`, `mix15b`, ...; NaN where it published none.
fn paper(path: &Path, n: usize) -> anyhow::Result<(FamilyBars, FamilyBars)> {
    let t = Table::read(path)?;
    let (e, p, ttft, rate) = (
        t.index("experiment")?,
        t.index("phase")?,
        t.index("ttft_median_s")?,
        t.index("phase_tok_s")?,
    );
    let find = |exp: &str, phase: &str, col: usize| -> f64 {
        t.rows
            .iter()
            .find(|r| {
                r.get(e).is_some_and(|v| v.starts_with(exp)) && r.get(p).is_some_and(|v| v == phase)
            })
            .and_then(|r| t.num(r, col).ok())
            .unwrap_or(f64::NAN)
    };
    let mut ttfts = Vec::new();
    let mut rates = Vec::new();
    for i in 0..n {
        let phase = format!("mix15{}", (b'a' + i as u8) as char);
        ttfts.push((
            phase.clone(),
            find("019", &phase, ttft),
            find("024", &phase, ttft),
        ));
        rates.push((
            phase.clone(),
            find("019", &phase, rate),
            find("024", &phase, rate),
        ));
    }
    Ok((ttfts, rates))
}

/// `figure6.csv` and `figure6.md` from the rows (pure; `verify` re-derives them with it).
pub fn render(rows: &[Row]) -> (String, String) {
    let mut csv = String::from(
        "phase,reference_ttft_median_s,windowed_ttft_median_s,reference_phase_tok_s,windowed_phase_tok_s\n",
    );
    let mut md = String::from(
        "| phase | TTFT median, reference (s) | TTFT median, windows (s) | Q_phase, reference (tok/s) | Q_phase, windows (tok/s) |\n|---|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let (a, b, c, d) = (
            r.reference_ttft_median_s,
            r.windowed_ttft_median_s,
            r.reference_phase_tok_s,
            r.windowed_phase_tok_s,
        );
        let _ = writeln!(csv, "{},{a},{b},{c},{d}", r.phase);
        let _ = writeln!(md, "| {} | {a:.2} | {b:.2} | {c:.1} | {d:.1} |", r.phase);
    }
    (csv, md)
}

/// The two tables, named, from the two runs' `phases.csv` (what `verify` compares).
pub fn tables(reference: &Path, windowed: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let (csv, md) = render(&rows(reference, windowed)?);
    Ok(vec![("figure6.csv".into(), csv), ("figure6.md".into(), md)])
}

/// Write `out/figure6.csv`, `out/figure6.png` and `.svg`; returns the table as Markdown.
pub fn run(
    reference: &Path,
    windowed: &Path,
    out: &Path,
    paper_csv: Option<&Path>,
) -> anyhow::Result<String> {
    let rows = rows(reference, windowed)?;
    std::fs::create_dir_all(out)?;
    let (csv, md) = render(&rows);
    crate::csv::write(&out.join("figure6.csv"), &csv)?;
    let label = |i: usize| format!("burst {}", (b'a' + i as u8) as char);
    let ttft: FamilyBars = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            (
                label(i),
                r.reference_ttft_median_s,
                r.windowed_ttft_median_s,
            )
        })
        .collect();
    let rate: FamilyBars = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (label(i), r.reference_phase_tok_s, r.windowed_phase_tok_s))
        .collect();
    let overlay = paper_csv.map(|p| paper(p, rows.len())).transpose()?;
    let names = ["reference admission", "8-row windows"];
    let paper_names = ["paper: baseline (019)", "paper: windows (024)"];
    // the two sweeps, from their records
    // (a run without one is drawn with its fields said missing)
    let labels: Vec<RunLabel> = [reference, windowed]
        .iter()
        .map(|d| RunLabel::read(&d.join("run.json")).unwrap_or_default())
        .collect();
    let run_line = format!("reference / windowed: {}", RunLabel::join(&labels).line());
    let panels = [
        (
            Spec {
                stem: "figure6",
                title: "Fifteen-request bursts: median time to first token",
                run: &run_line,
                y_desc: "TTFT median (s)",
                scale: 1.0,
                ours: names,
                paper: paper_names,
            },
            &ttft,
            overlay.as_ref().map(|o| &o.0),
        ),
        (
            Spec {
                stem: "figure6",
                title: "Whole-phase tokens per second (Q_phase)",
                run: "",
                y_desc: "Q_phase (tok/s)",
                scale: 1.0,
                ours: names,
                paper: paper_names,
            },
            &rate,
            overlay.as_ref().map(|o| &o.1),
        ),
    ];
    family_bars::draw_stacked(out, "figure6", &panels)?;
    std::fs::write(out.join("figure6.md"), &md)?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_dir(dir: &Path, name: &str, rows: &[(&str, f64, f64)]) -> std::path::PathBuf {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let mut s = String::from("phase,ttft_median_s,phase_tok_s\n");
        for (p, t, r) in rows {
            s += &format!("{p},{t},{r}\n");
        }
        std::fs::write(d.join("phases.csv"), s).unwrap();
        d
    }

    #[test]
    fn pairs_phases_by_name_order_and_draws_with_the_paper_markers() {
        let dir = tempfile::tempdir().unwrap();
        let r = run_dir(
            dir.path(),
            "ref",
            &[("burst_b_c015", 9.0, 20.0), ("burst_a_c015", 8.0, 21.0)],
        );
        let w = run_dir(
            dir.path(),
            "win",
            &[("burst_a_c015", 2.0, 25.0), ("burst_b_c015", 2.5, 24.0)],
        );
        let paper = dir.path().join("prefill.csv");
        std::fs::write(
            &paper,
            "experiment,phase,phase_tok_s,sum_rates,ttft_median_s,ttft_mean_s,stream_median\n\
             019_baseline_15_streams,mix15a,15.678,22.544,31.52,36.67,1.409\n\
             024_prefill_windows,mix15a,22.521,24.626,6.91,6.37,1.649\n",
        )
        .unwrap();
        let out = dir.path().join("fig");
        let md = run(&r, &w, &out, Some(&paper)).unwrap();
        let rows = rows(&r, &w).unwrap();
        assert_eq!(rows[0].phase, "burst_a_c015");
        assert_eq!(
            (
                rows[0].reference_ttft_median_s,
                rows[0].windowed_ttft_median_s
            ),
            (8.0, 2.0)
        );
        assert_eq!(
            (rows[1].reference_phase_tok_s, rows[1].windowed_phase_tok_s),
            (20.0, 24.0)
        );
        assert!(md.contains("| burst_b_c015 | 9.00 | 2.50 | 20.0 | 24.0 |"));
        for f in ["figure6.png", "figure6.svg", "figure6.csv", "figure6.md"] {
            assert!(out.join(f).metadata().unwrap().len() > 0, "{f}");
        }
        let (t, q) = paper_bars(&paper);
        assert_eq!((t[0].1, t[0].2), (31.52, 6.91));
        assert!(
            t[1].1.is_nan() && q[1].2.is_nan(),
            "no mix15b published: no marker"
        );
    }

    fn paper_bars(p: &Path) -> (FamilyBars, FamilyBars) {
        paper(p, 2).unwrap()
    }

    #[test]
    fn unequal_phase_counts_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let r = run_dir(dir.path(), "ref", &[("burst_a_c015", 8.0, 21.0)]);
        let w = run_dir(dir.path(), "win", &[]);
        let e = rows(&r, &w).unwrap_err().to_string();
        assert!(e.contains("pairs them by position"), "{e}");
    }
}
