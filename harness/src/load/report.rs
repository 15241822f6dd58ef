//! A run's page to look at (docs/MEASUREMENTS.md §9): OUT/report.html, one self-contained file
//! readable offline — the figures inline as SVG, the tables, what was asked, the host and its load
//! averages, and relative links to the raw records beside it. A single step's page draws each
//! request's TTFT and end-to-end latency against its send time (where saturation shows as a
//! climb); a sweep's or search's page has the steps table, the Pareto figure and a section per
//! step.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use crate::recheck::read_json;
use crate::trace::read_records;

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A Markdown table (as `plans` writes steps.md) as an HTML table, cells escaped.
fn md_table(path: &Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    md_table_of(&text)
}

/// The Markdown table lines of `text` as an HTML table, cells escaped.
pub(crate) fn md_table_of(text: &str) -> anyhow::Result<String> {
    let mut h = String::from("<table>\n");
    let rows = text.lines().filter(|l| l.starts_with('|'));
    for (i, l) in rows.enumerate() {
        let cells: Vec<&str> = l
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if i == 1
            && cells
                .iter()
                .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue;
        }
        let tag = if i == 0 { "th" } else { "td" };
        h += "<tr>";
        for c in cells {
            write!(h, "<{tag}>{}</{tag}>", esc(c))?;
        }
        h += "</tr>\n";
    }
    Ok(h + "</table>\n")
}

/// The quantile table of a step's summary.json.
fn summary_table(s: &Value) -> anyhow::Result<String> {
    let mut h = String::from(
        "<table>\n<tr><th>metric (ms)</th><th>n</th><th>mean</th><th>p50</th><th>p90</th>\
         <th>p95</th><th>p99</th><th>p99.9</th><th>max</th></tr>\n",
    );
    for (key, name) in [
        ("ttft", "TTFT"),
        ("tpot", "TPOT"),
        ("itl", "ITL (per token)"),
        ("chunk_gap", "chunk gap"),
        ("e2e", "end to end"),
        ("send_lag", "client send lag"),
    ] {
        let q = &s[key];
        write!(
            h,
            "<tr><td>{name}</td><td>{}</td>",
            q["n"].as_u64().unwrap_or(0)
        )?;
        for k in ["mean", "p50", "p90", "p95", "p99", "p999", "max"] {
            match q[k].as_f64() {
                Some(v) => write!(h, "<td>{:.1}</td>", v * 1e3)?,
                None => h += "<td></td>",
            }
        }
        h += "</tr>\n";
    }
    h += "</table>\n";
    let num = |k: &str| s[k].as_f64().unwrap_or(0.0);
    writeln!(
        h,
        "<p>{} requests ({} failed) in {:.2} s: {:.2} requests/s, {:.1} output tokens/s; goodput \
         {} requests, {:.2} requests/s.{}</p>",
        s["requests"],
        s["failed"],
        num("duration_s"),
        num("requests_per_s"),
        num("output_tokens_per_s"),
        s["good_requests"],
        num("goodput_requests_per_s"),
        match s["saturated"].as_str() {
            Some(why) => format!(" <b>Over-saturated</b>: {}.", esc(why)),
            None => String::new(),
        }
    )?;
    Ok(h)
}

/// Each request's TTFT and end to end against its send time, as an SVG string.
fn latency_figure(step: &Path) -> anyhow::Result<String> {
    use plotters::prelude::*;
    crate::figures::fonts();
    let recs: Vec<moefleet_schema::TraceRecord> = read_records(&step.join("traces.jsonl.gz"))?;
    let t0 = recs
        .iter()
        .map(|r| r.started_mono)
        .fold(f64::INFINITY, f64::min);
    let pts: Vec<(f64, Option<f64>, f64, bool)> = recs
        .iter()
        .map(|r| {
            let l = super::latency::RequestLatency::of(r);
            (r.started_mono - t0, l.ttft, l.e2e, r.error.is_some())
        })
        .collect();
    let xmax = pts.iter().map(|p| p.0).fold(0.0, f64::max) * 1.05 + 1e-3;
    let ymax = pts.iter().map(|p| p.2).fold(0.0, f64::max) * 1.1 + 1e-3;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 420)).into_drawing_area();
        let err = |e| anyhow::anyhow!("drawing: {e:?}");
        root.fill(&WHITE).map_err(err)?;
        let mut ch = ChartBuilder::on(&root)
            .caption(
                "Latency of each request by when it was sent",
                ("sans-serif", 18),
            )
            .margin(14)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)
            .map_err(err)?;
        ch.configure_mesh()
            .light_line_style(TRANSPARENT)
            .x_desc("sent at (s from the first send)")
            .y_desc("seconds")
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        let blue = RGBColor(31, 119, 180);
        let orange = RGBColor(230, 120, 20);
        let red = RGBColor(200, 30, 30);
        ch.draw_series(
            pts.iter()
                .map(|p| Circle::new((p.0, p.2), 3, if p.3 { red } else { orange }.filled())),
        )
        .map_err(err)?
        .label("end to end (red: failed or cancelled)")
        .legend(move |(x, y)| Circle::new((x, y), 3, orange.filled()));
        ch.draw_series(
            pts.iter()
                .filter_map(|p| Some(Circle::new((p.0, p.1?), 3, blue.filled()))),
        )
        .map_err(err)?
        .label("time to first token")
        .legend(move |(x, y)| Circle::new((x, y), 3, blue.filled()));
        ch.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A step's section: its summary, its figure, links to its files (relative to `base`).
fn step_section(step: &Path, base: &Path, heading: &str) -> anyhow::Result<String> {
    let rel = step
        .strip_prefix(base)
        .unwrap_or(step)
        .to_string_lossy()
        .to_string();
    let prefix = if rel.is_empty() {
        String::new()
    } else {
        format!("{rel}/")
    };
    let mut h = format!("<section>\n<h2>{}</h2>\n", esc(heading));
    h += &summary_table(&read_json(&step.join("summary.json"))?)?;
    let md = std::fs::read_to_string(step.join("summary.md")).unwrap_or_default();
    if let Some((_, turns)) = md.split_once(super::turns::HEADING) {
        write!(
            h,
            "<p>{}</p>\n{}",
            esc(super::turns::HEADING),
            md_table_of(turns)?
        )?;
    }
    if let Ok(text) = std::fs::read_to_string(step.join("crosscheck.md")) {
        // its prose line, then each of its tables
        let mut blocks = text.split("\n\n");
        writeln!(
            h,
            "<p>{}</p>",
            esc(blocks.next().unwrap_or_default().trim())
        )?;
        for b in blocks.filter(|b| b.trim_start().starts_with('|')) {
            h += &md_table_of(b)?;
        }
    }
    h += "<figure>";
    h += &latency_figure(step)?;
    h += "</figure>\n<p>Records: ";
    for f in [
        "traces.jsonl.gz",
        "summary.json",
        "run.json",
        "schedule.csv",
        "crosscheck.json",
    ] {
        if !step.join(f).is_file() {
            continue;
        }
        write!(h, "<a href=\"{}{f}\">{f}</a> ", esc(&prefix))?;
    }
    h += "</p>\n</section>\n";
    Ok(h)
}

pub(crate) const STYLE: &str =
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}\
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #bbb;\
padding:3px 7px;text-align:right}th{background:#eee}figure{margin:1em 0}\
pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}";

/// The record of the first run under `dir`: its own run.json, or its first step's (or run's).
fn first_manifest(dir: &Path) -> anyhow::Result<serde_json::Value> {
    if dir.join("run.json").is_file() {
        return read_json(&dir.join("run.json"));
    }
    let first = super::rederive::step_dirs(dir)?.into_iter().next();
    first_manifest(&first.with_context(|| format!("no run.json under {}", dir.display()))?)
}

/// Links to each repeated run that is a plan (its own page, written here) or a paired
/// concurrency sweep (its tables).
fn run_links(runs: &[std::path::PathBuf], base: &Path) -> anyhow::Result<String> {
    let mut h = String::from("<h2>Runs</h2>\n<ul>\n");
    for run in runs {
        let rel = esc(&run.strip_prefix(base).unwrap_or(run).to_string_lossy());
        if run.join("phases.jsonl").is_file() {
            writeln!(
                h,
                "<li>{rel}: <a href=\"{rel}/table4.md\">table4.md</a> \
                 <a href=\"{rel}/curve.csv\">curve.csv</a> \
                 <a href=\"{rel}/phases.jsonl\">phases.jsonl</a></li>"
            )?;
        } else {
            write(run)?;
            writeln!(h, "<li><a href=\"{rel}/report.html\">{rel}</a></li>")?;
        }
    }
    h += "</ul>\n";
    Ok(h)
}

/// Write OUT/report.html for the run in `out`: one step, a sweep's or search's steps, or
/// repeated runs of any of these (each plan run with a page of its own) or of the paired sweep.
pub fn write(out: &Path) -> anyhow::Result<std::path::PathBuf> {
    let repeated = out.join("arms.md").is_file();
    let plan = out.join("steps.csv").is_file() || repeated;
    let runs = if repeated {
        super::rederive::step_dirs(out)?
    } else {
        Vec::new()
    };
    let mut steps: Vec<std::path::PathBuf> = if plan {
        std::fs::read_dir(out)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("summary.json").is_file())
            .collect()
    } else {
        vec![out.to_path_buf()]
    };
    steps.sort();
    let manifest = first_manifest(out)?;
    let host = &manifest["host"];
    let mut h = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>moefleet-harness run: {}</title><style>{STYLE}</style></head><body>\n",
        esc(&out.display().to_string())
    );
    write!(
        h,
        "<h1>Load run against {} ({})</h1>\n<p>Host: {}, ISA {}, {} logical CPUs; load average \
         at the first step's start {}.</p>\n<pre>{}</pre>\n",
        esc(manifest["url"].as_str().unwrap_or("?")),
        esc(manifest["model"].as_str().unwrap_or("?")),
        esc(host["host_id"].as_str().unwrap_or("?")),
        esc(host["isa"].as_str().unwrap_or("?")),
        host["logical_cpus"],
        manifest["load_average_start"],
        esc(&manifest["command"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()),
    )?;
    if repeated {
        let text = std::fs::read_to_string(out.join("arms.md"))?;
        h += "<h2>Repeated runs</h2>\n";
        writeln!(h, "<p>{}</p>", esc(text.lines().next().unwrap_or_default()))?;
        h += &md_table_of(&text)?;
        h += "<p>Every run's value: <a href=\"arms.csv\">arms.csv</a>.</p>\n";
        let plans: Vec<_> = runs
            .iter()
            .filter(|r| !r.join("summary.json").is_file())
            .cloned()
            .collect();
        if !plans.is_empty() {
            h += &run_links(&plans, out)?;
        }
    } else if plan {
        h += "<h2>Steps</h2>\n";
        h += &md_table(&out.join("steps.md"))?;
        h += "<p>Every column: <a href=\"steps.csv\">steps.csv</a>.</p>\n";
        if let Ok(found) = read_json(&out.join("search.json")) {
            writeln!(
                h,
                "<p>Search by {}: highest load meeting the objectives {}, lowest missing them \
                 {}.</p>",
                found["by"], found["best"], found["missed"]
            )?;
        }
        if let Ok(svg) = std::fs::read_to_string(out.join("pareto.svg")) {
            h += "<figure>";
            // the file's own XML declaration has no place inside the page
            let body = match svg.find("<svg") {
                Some(i) => &svg[i..],
                None => svg.as_str(),
            };
            h += body;
            h += "</figure>\n";
        }
    }
    for s in &steps {
        let name = s
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().to_string());
        let heading = if plan {
            format!("Step {name}")
        } else {
            "Summary".to_string()
        };
        h += &step_section(s, out, &heading)?;
    }
    h += "</body></html>\n";
    let path = out.join("report.html");
    std::fs::write(&path, h)?;
    Ok(path)
}
