//! `moefleet-harness dense`: dense blocks as fused slices against three matrix calls
//! (MEASUREMENTS.md §4, ARCHITECTURE.md §1.6) at a full-shape preset, one generated layer at a time.
//! Writes `dense.csv` (the paper's columns), `dense.json` (bytes and matrix calls of each path,
//! threads, p10 / p90, a plain verdict and its explanation) and Figure 3.
//! `dense-stage` (in `stage`) reports the same comparison at the level of role 0's frames.

pub mod measure;
pub mod note;
pub mod stage;
pub mod table;

use std::path::{Path, PathBuf};

use anyhow::Context;
use moefleet_engine::model::synth::single_layer;
use moefleet_engine::model::{MlpKind, ModelConfig};
use serde_json::{json, Value};

use crate::stats::Summary;
use table::{cosine, reduction_pct, relative_difference, DenseRow};

/// What to run.
pub struct DenseConfig {
    pub out: PathBuf,
    pub preset: String,
    pub seed: u64,
    pub layers: Vec<usize>,
    pub rows: Vec<usize>,
    /// Timed calls of each form per (layer, rows).
    pub calls: usize,
    /// Untimed calls of each form first.
    pub warmup: usize,
    /// The paper's dense.csv for the figure (None: draw ours alone).
    pub paper: Option<PathBuf>,
    /// A `ceilings.json` to compare the paths' read rates with (None: no comparison).
    pub ceilings: Option<PathBuf>,
}

/// Run the experiment, write the outputs, print the table and the verdict.
pub fn run(cfg: &DenseConfig) -> anyhow::Result<()> {
    let c = ModelConfig::preset(&cfg.preset)?;
    if cfg.calls == 0 {
        anyhow::bail!("--calls must be at least 1");
    }
    if cfg.layers.is_empty() || cfg.rows.is_empty() {
        anyhow::bail!("--layers and --rows must name at least one value each");
    }
    for &l in &cfg.layers {
        if l >= c.n_layers || c.mlp_kind(l) != MlpKind::Dense {
            anyhow::bail!(
                "layer {l} of {} is not dense (dense layers: 0..{})",
                c.name,
                c.n_dense_layers
            );
        }
    }
    if let Some(r) = cfg.rows.iter().find(|r| **r == 0 || **r > 1024) {
        anyhow::bail!("--rows {r}: rows must be in 1..=1024");
    }
    // inputs are read before the long part, so a bad path fails at once
    let threads = rayon::current_num_threads();
    let bandwidth = match &cfg.ceilings {
        Some(p) => Some(read_bandwidth(p, threads)?),
        None => None,
    };
    if let Some(p) = &cfg.paper {
        table::cases(&crate::csv::Table::read(p)?)
            .with_context(|| format!("{} is not a dense table", p.display()))?;
    }
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;
    let mut rows_out = Vec::new();
    let mut cases = Vec::new();
    let mut cost = None;
    let mut breakdowns = Vec::new();
    for &l in &cfg.layers {
        eprintln!(
            "dense: generating layer {l} of {} (seed {})",
            c.name, cfg.seed
        );
        let w = single_layer(&c, cfg.seed, l, None)?;
        let e = measure::dense_weights(&w)?;
        let (three, fused) = measure::costs(&c, e);
        cost = Some((three, fused));
        for &n in &cfg.rows {
            eprintln!(
                "dense: layer {l}, {n} row(s): {} warm-up + {} timed calls of each form",
                cfg.warmup, cfg.calls
            );
            let x = measure::input_rows(cfg.seed, l, n, c.hidden);
            let t = measure::time_both(&c, &w, &x, cfg.warmup, cfg.calls);
            let parts = measure::breakdown(&c, e, n, cfg.seed, (cfg.calls / 2).max(5))
                .context("no product timings")?;
            let (m, f) = (
                Summary::of(&t.three_ms).context("no three-matmul timings")?,
                Summary::of(&t.fused_ms).context("no fused timings")?,
            );
            let row = DenseRow {
                layer: l,
                rows: n,
                matrix_ms: m.median,
                fused_ms: f.median,
                reduction_pct: reduction_pct(m.median, f.median),
                cosine: cosine(&t.y_fused, &t.y_three),
                relative_difference: relative_difference(&t.y_fused, &t.y_three),
            };
            cases.push(json!({
                "layer": l,
                "rows": n,
                "three_matmul": path_json(&m, &t.three_ms, three),
                "fused_slices": path_json(&f, &t.fused_ms, fused),
                "reduction_pct": row.reduction_pct,
                "cosine": row.cosine,
                "relative_difference": row.relative_difference,
                "fused_faster": f.median < m.median,
                "matrix_products_only": parts_json(&parts),
            }));
            breakdowns.push(parts);
            rows_out.push(row);
        }
    }
    let (three, fused) = cost.context("no layer measured")?;
    let verdict = note::verdict(&rows_out);
    let note = note::explain(&note::Inputs {
        rows: &rows_out,
        three,
        fused,
        threads,
        hidden: c.hidden,
        dense_width: c.dense_width,
        bandwidth_gbs: bandwidth.as_ref().map(|b| b.0),
        breakdowns: &breakdowns,
    });

    let csv_path = cfg.out.join("dense.csv");
    crate::csv::write(&csv_path, &table::csv(&rows_out))?;
    let record = json!({
        "record": "dense",
        "model": c.name,
        "seed": cfg.seed,
        "options": {
            "expert_f16": moefleet_engine::model::ForwardOptions::default().expert_f16,
            "row_factor": moefleet_engine::model::ForwardOptions::default().row_factor,
        },
        "threads": threads,
        "calls": cfg.calls,
        "warmup": cfg.warmup,
        "timing": "median of timed calls of one mlp::forward, forms alternating A B / B A",
        "reference_for_agreement": "three_matmul (b in ‖a − b‖ / ‖b‖)",
        "bytes_per_call": { "three_matmul": three.bytes, "fused_slices": fused.bytes },
        "matrix_calls_per_call": {
            "three_matmul": three.matrix_calls,
            "fused_slices": fused.matrix_calls,
        },
        "read_bandwidth": bandwidth.as_ref().map(|b| json!({ "gbs": b.0, "from": b.1 })),
        "cases": cases,
        "fused_faster": verdict.0,
        "verdict": verdict.1,
        "note": note,
        "host": crate::host::facts(),
    });
    let json_path = cfg.out.join("dense.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&record)? + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    crate::figures::figure3::draw(&cfg.out, cfg.paper.as_deref())?;

    print!("{}", table::csv(&rows_out));
    println!("{}", verdict.1);
    println!("note: {note}");
    eprintln!(
        "dense: wrote {0}/dense.csv, {0}/dense.json, {0}/figure3.png and {0}/figure3.svg",
        cfg.out.display()
    );
    Ok(())
}

fn path_json(s: &Summary, ms: &[f64], cost: measure::PathCost) -> Value {
    json!({
        "median_ms": s.median,
        "p10_ms": s.p10,
        "p90_ms": s.p90,
        "min_ms": s.min,
        "max_ms": s.max,
        "calls": s.n,
        "samples_ms": ms,
        "bytes": cost.bytes,
        "matrix_calls": cost.matrix_calls,
        "read_gbs_median": cost.bytes as f64 / (s.median * 1e-3) / 1e9,
    })
}

fn parts_json(b: &measure::Breakdown) -> Value {
    let three: f64 = b.three_ms.iter().sum();
    let fused: f64 = b.fused_ms.iter().sum();
    json!({
        "what": "median ms of the bare int4::matmul calls of each form (no rounding, activation or buffers)",
        "calls": b.calls,
        "three_matmul_ms": { "gate": b.three_ms[0], "up": b.three_ms[1], "down": b.three_ms[2], "total": three },
        "fused_slices_ms": { "gate": b.fused_ms[0], "up": b.fused_ms[1], "down": b.fused_ms[2], "total": fused },
    })
}

/// The median read bandwidth of a `ceilings.json` at `threads` threads (1 → `read_bandwidth_1t`,
/// otherwise `read_bandwidth_all`), with the key it came from.
pub fn read_bandwidth(path: &Path, threads: usize) -> anyhow::Result<(f64, String)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let key = if threads == 1 {
        "read_bandwidth_1t"
    } else {
        "read_bandwidth_all"
    };
    let m = &v["measurements"][key];
    let gbs = m["median"]
        .as_f64()
        .with_context(|| format!("{}: no /measurements/{key}/median", path.display()))?;
    if m["threads"].as_u64() != Some(threads as u64) {
        eprintln!(
            "dense: note: {} measured {key} with {} threads, this run uses {threads}",
            path.display(),
            m["threads"]
        );
    }
    Ok((
        gbs,
        format!("{}#/measurements/{key}/median", path.display()),
    ))
}
