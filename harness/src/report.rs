//! REPORT.md of a run: what ran, on what machine, our tables and figure, and a side-by-side of our
//! curve with the paper's in the same columns, with each curve normalised to its own C = 1 point
//! (the machines differ by orders of magnitude, so shapes compare, raw numbers do not).
//! Reads tables and records only.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use crate::analysis::paper::read_table_rows;
use crate::figures::Table;

fn json(path: &Path) -> Option<Value> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

pub fn write(run: &Path, root: &Path) -> anyhow::Result<()> {
    let manifest = json(&run.join("run.json"))
        .with_context(|| format!("{}/run.json is missing", run.display()))?;
    let curve = Table::read(&run.join("curve.csv"))?;
    let phases = Table::read(&run.join("phases.csv"))?;
    let table4 = std::fs::read_to_string(run.join("table4.md")).unwrap_or_default();
    let paper = std::fs::read_to_string(root.join("reproduction/paper/concurrency_rows.tex"))
        .unwrap_or_default();
    let paper_rows = read_table_rows(&paper);
    let mut s = String::new();
    let host = &manifest["host"];
    let _ = writeln!(s, "# Run report: {}\n", run.display());
    let _ = writeln!(
        s,
        "- server: {} serving `{}` (engine {}, built from {}; harness checkout {})\n- plan: `{}` with levels {}, {} output tokens per request, {} s stagger\n- host: {} ({} logical CPUs, {:.1} GiB)\n- sweep wall time: {:.0} s (epoch {} to {})\n",
        manifest["url"].as_str().unwrap_or("?"),
        manifest["model"].as_str().unwrap_or("?"),
        manifest["engine_version"].as_str().unwrap_or("?"),
        manifest["engine_commit"].as_str().unwrap_or("unknown"),
        manifest["git_commit"].as_str().unwrap_or("unknown"),
        manifest["plan"]["name"].as_str().unwrap_or("?"),
        manifest["plan"]["levels"],
        manifest["plan"]["max_tokens"],
        manifest["plan"]["stagger_s"],
        host["cpu"].as_str().unwrap_or("?"),
        host["logical_cpus"],
        host["mem_total_bytes"].as_f64().unwrap_or(0.0) / (1u64 << 30) as f64,
        manifest["end"].as_f64().unwrap_or(0.0) - manifest["start"].as_f64().unwrap_or(0.0),
        manifest["start"],
        manifest["end"],
    );
    let errors: f64 = phases.col("errors")?.iter().flatten().sum();
    let exact = {
        let i = phases.index("exact_tokens")?;
        phases
            .rows
            .iter()
            .all(|r| r.get(i).is_some_and(|c| c == "true"))
    };
    let statuses: Vec<String> = {
        let i = phases
            .header
            .iter()
            .position(|h| h == "sampled_server_counter_status");
        phases
            .rows
            .iter()
            .filter_map(|r| i.and_then(|i| r.get(i).cloned()))
            .collect()
    };
    let matched = statuses.iter().filter(|s| *s == "matched").count();
    let rest: Vec<String> = statuses
        .iter()
        .filter(|s| *s != "matched")
        .cloned()
        .collect();
    let rest = if rest.is_empty() {
        String::new()
    } else {
        format!(" (the rest: {})", rest.join(", "))
    };
    let _ = writeln!(
        s,
        "{} phases, {} request errors; every request produced exactly the requested tokens: {}; server counters matched in {} of {} phases{rest}.\n",
        phases.rows.len(),
        errors,
        if exact { "yes" } else { "no" },
        matched,
        statuses.len(),
    );
    let _ = writeln!(
        s,
        "## Paired curve (the paper's Table 4 layout)\n\n{table4}\n![Figure 5](figure5.png)\n"
    );
    if let Some(sp) = json(&run.join("single_process.json")) {
        let _ = writeln!(
            s,
            "Single process (all layers in one process, one stream, same machine): decode {:.2} tok/s.\n",
            sp["decode_tok_s"].as_f64().unwrap_or(f64::NAN)
        );
    }
    // side by side
    let c = curve.col("concurrency")?;
    let qd = curve.col("q_decode_mean")?;
    let qp = curve.col("q_phase_mean")?;
    let t50 = curve.col("ttft_median_s")?;
    let base = qd.first().copied().flatten();
    let pbase = paper_rows.first().map(|r| r.1);
    let _ = writeln!(
        s,
        "## Side by side with the paper\n\nThe paper: Inkling (975B) on eleven AI PCs (`reproduction/paper/concurrency_rows.tex`). Ours: this run. \
         Columns as in Table 4; `×C=1` is Q_decode divided by the same curve's value at C = 1.\n\n\
         | C | ours Q_decode | ours ×C=1 | paper Q_decode | paper ×C=1 | ours Q_phase | paper Q_phase | ours TTFT median | paper TTFT median |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let f = |v: Option<f64>, d: usize| v.map(|x| format!("{x:.d$}")).unwrap_or_else(|| "-".into());
    for i in 0..c.len() {
        let cc = c[i].unwrap_or(0.0) as usize;
        let p = paper_rows.iter().find(|r| r.0 == cc);
        let _ = writeln!(
            s,
            "| {cc} | {} | {} | {} | {} | {} | {} | {} | {} |",
            f(qd[i], 2),
            f(qd[i].zip(base).map(|(a, b)| a / b), 2),
            f(p.map(|r| r.1), 2),
            f(p.map(|r| r.1).zip(pbase).map(|(a, b)| a / b), 2),
            f(qp[i], 2),
            f(p.map(|r| r.2), 2),
            f(t50[i], 2),
            f(p.map(|r| r.4), 2)
        );
    }
    experiments(run, &mut s);
    unit_times(run, &mut s);
    std::fs::write(run.join("REPORT.md"), s)?;
    Ok(())
}

/// How long each unit of the main job took (RUN/units.json, written by `reproduce` as each ends),
/// with the load averages at its start and end (the host is the run's, named above); nothing when
/// the run was not made by `reproduce`.
fn unit_times(run: &Path, s: &mut String) {
    let Some(Value::Array(units)) = json(&run.join("units.json")).map(|v| v["units"].clone())
    else {
        return;
    };
    let _ = writeln!(
        s,
        "## Where the time went (`moefleet-harness reproduce`, RUN/units.json)\n\n\
         | unit | seconds | load average at start | at end |\n|---|---:|---|---|"
    );
    let load = |v: &Value| match v.as_array() {
        Some(a) => a
            .iter()
            .map(|x| format!("{:.2}", x.as_f64().unwrap_or(f64::NAN)))
            .collect::<Vec<_>>()
            .join(" "),
        None => "-".into(),
    };
    let mut total = 0.0;
    for u in &units {
        let secs = u["seconds"].as_f64().unwrap_or(f64::NAN);
        total += secs;
        let failed = if u["failed"].as_bool() == Some(true) {
            " (failed)"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "| {}{failed} | {secs:.0} | {} | {} |",
            u["unit"].as_str().unwrap_or("?"),
            load(&u["load_average_start"]),
            load(&u["load_average_end"])
        );
    }
    let _ = writeln!(s, "| all | {total:.0} | | |\n");
}

/// A CSV file as a markdown table (numbers with many digits shortened); None if unreadable.
fn markdown(path: &Path) -> Option<String> {
    let t = Table::read(path).ok()?;
    let cell = |c: &str| match c.parse::<f64>() {
        Ok(v) if c.len() > 8 && v.is_finite() => format!("{v:.4}"),
        _ => c.to_string(),
    };
    let mut out = format!(
        "| {} |\n|{}\n",
        t.header.join(" | "),
        "---:|".repeat(t.header.len())
    );
    for r in &t.rows {
        let cells: Vec<String> = r.iter().map(|c| cell(c)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    Some(out)
}

/// The draft replays (MEASUREMENTS.md §5) the run holds: Table 6, the chain table, Figure 8 of
/// each (the main job's on SmolLM2; `--model`'s; a preset's, in runs made before it left the main
/// job).
fn draft(run: &Path, s: &mut String) {
    for (sub, what) in [
        ("draft-smollm2", "SmolLM2-135M-Instruct"),
        ("draft-model", "the checkpoint of `--model`"),
        ("draft", "the preset (random weights)"),
    ] {
        let dir = run.join(sub).join("replay");
        let (Ok(t6), Ok(chain)) = (
            std::fs::read_to_string(dir.join("table6.md")),
            std::fs::read_to_string(dir.join("chain.md")),
        ) else {
            continue;
        };
        let demote = |md: &str| md.replacen("# ", "### ", 1);
        let _ = writeln!(
            s,
            "## Captured-state draft replay on {what} (MEASUREMENTS.md §5)\n\nThe draft unit: \
             capture corpus through the fleet's API (`moefleet-harness capture`), head fitted to the \
             training captures (`fit-draft`), replayed over the evaluation captures (`replay`); \
             every number below is recomputed from `{sub}/replay/anchors.csv.gz`.\n\n{}\n{}",
            demote(&t6),
            demote(&chain)
        );
        if dir.join("figure8.png").exists() {
            let _ = writeln!(s, "![Figure 8]({sub}/replay/figure8.png)\n");
        }
    }
}

/// The kernel, dense-form and context experiments of the run, where present.
fn experiments(run: &Path, s: &mut String) {
    if let Some(c) = json(&run.join("kernels/ceilings.json")) {
        let _ = writeln!(
            s,
            "## Kernels against the machine's ceilings\n\n`moefleet-harness ceilings`: the read bandwidth and FMA rate measured in the same run as the products (medians).\n\n| measurement | threads | median | unit | % of read bandwidth |\n|:--|--:|--:|:--|--:|"
        );
        if let Some(m) = c["measurements"].as_object() {
            for v in m.values() {
                let pct = v["pct_of_read_bandwidth"]
                    .as_f64()
                    .map_or(String::new(), |p| format!("{p:.1}"));
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.2} | {} | {pct} |",
                    v["label"].as_str().unwrap_or("?"),
                    v["threads"],
                    v["median"].as_f64().unwrap_or(f64::NAN),
                    v["unit"].as_str().unwrap_or("")
                );
            }
        }
        let _ = writeln!(s);
    }
    let sections: [(&str, &str, &[&str], Option<&str>); 4] = [
        (
            "Dense blocks: three matrix calls against fused slices (MEASUREMENTS.md §4)",
            "`moefleet-harness dense` at the `inkling` shapes; the paper's values (Arc B390 GPU) are in `reproduction/paper/dense.csv`.",
            &["kernels/dense.csv"],
            Some("kernels/figure3.png"),
        ),
        (
            "Dense forms at the stage level (inkling-mini role 0)",
            "the `dense` unit: role 0's compute per frame under the same load with each form.",
            &["dense-stage/dense_stage.csv"],
            None,
        ),
        (
            "Context probe (MEASUREMENTS.md §3.1)",
            "`moefleet probe`: one `inkling` role (serial, then parallel attention), and every `inkling-mini` role.",
            &[
                "context/probe-inkling-serial/context_probe.csv",
                "context/probe-inkling-parallel/context_probe.csv",
                "context/probe-mini-serial/context_probe.csv",
                "context/probe-mini-parallel/context_probe.csv",
            ],
            None,
        ),
        (
            "Real-prompt scan and the aN + bN² fit (MEASUREMENTS.md §3.2-3.3)",
            "`moefleet-harness context` against the inkling-mini fleet with each attention kernel, then `context-fit`.",
            &[
                "context/scan-serial/context.csv",
                "context/scan-parallel/context.csv",
                "context/fit.csv",
            ],
            Some("context/figure7.png"),
        ),
    ];
    for (title, what, files, figure) in sections {
        let tables: Vec<(&str, String)> = files
            .iter()
            .filter_map(|f| Some((*f, markdown(&run.join(f))?)))
            .collect();
        if tables.is_empty() {
            continue;
        }
        let _ = writeln!(s, "## {title}\n\n{what}\n");
        for (f, t) in tables {
            let _ = writeln!(s, "`{f}`:\n\n{t}");
        }
        if let Some(fig) = figure.filter(|f| run.join(f).exists()) {
            let _ = writeln!(s, "![{title}]({fig})\n");
        }
    }
    draft(run, s);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run whose only inexact phase has another column reading `true`, and one whose counters
    /// all matched: the summary line says "no" for the first, and names no "rest" for the second.
    #[test]
    fn summary_reads_exact_tokens_and_names_only_unmatched_counters() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        std::fs::write(run.join("run.json"), r#"{"url": "u", "model": "m"}"#).unwrap();
        std::fs::write(
            run.join("curve.csv"),
            "concurrency,q_decode_mean,q_phase_mean,ttft_median_s\n1,10,9,0.1\n",
        )
        .unwrap();
        let phases = |rows: &[&str]| {
            let mut t = String::from(
                "phase,errors,sampled_server_counter_status,bracket_check,exact_tokens\n",
            );
            for r in rows {
                t += r;
                t += "\n";
            }
            std::fs::write(run.join("phases.csv"), t).unwrap();
            write(run, run).unwrap();
            std::fs::read_to_string(run.join("REPORT.md")).unwrap()
        };
        let md = phases(&["a,0,matched,true,false", "b,0,matched,ok,true"]);
        assert!(md.contains("exactly the requested tokens: no;"), "{md}");
        assert!(md.contains("matched in 2 of 2 phases.\n"), "{md}");
        let md = phases(&["a,0,matched,ok,true", "b,0,unavailable,ok,true"]);
        assert!(md.contains("exactly the requested tokens: yes;"), "{md}");
        assert!(
            md.contains("1 of 2 phases (the rest: unavailable)."),
            "{md}"
        );
    }
}
