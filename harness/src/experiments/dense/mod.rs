//! `moefleet-harness dense`: dense blocks as fused slices against three matrix calls
//! (MEASUREMENTS.md §4, ARCHITECTURE.md §1.6) at a full-shape preset, one generated layer at a time.
//! Writes `dense.csv` (the paper's columns), `dense.json` (bytes and matrix calls of each path,
//! threads, p10 / p90, a plain verdict and its explanation) and Figure 3.
//! `dense-stage` (in `stage`) reports the same comparison at the level of role 0's frames.

pub mod measure;
pub mod note;
pub mod recheck;
pub mod stage;
pub mod table;
pub mod unit;

use std::path::{Path, PathBuf};

use anyhow::Context;
use moefleet_engine::model::config::{Backend, BackendKind};
use moefleet_engine::model::synth::single_layer;
use moefleet_engine::model::weights::{ExpertWeights, LayerWeights};
use moefleet_engine::model::{DenseForm, MlpKind, ModelConfig};
use moefleet_engine::openvino::layers::OvMlp;
use moefleet_engine::openvino::{GraphReport, Runtime};
use serde_json::{json, Value};

use crate::stats::Summary;
use measure::PathCost;
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
    /// Backends to measure side by side (native kernels, OpenVINO graphs).
    pub backends: Vec<BackendKind>,
}

/// Run the experiment, write the outputs, print the table and the verdict.
pub fn run(cfg: &DenseConfig) -> anyhow::Result<()> {
    let c = ModelConfig::preset(&cfg.preset)?;
    check_options(cfg, &c)?;
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
    let mut g = Gathered::default();
    if cfg.backends.is_empty() {
        anyhow::bail!("--backends must name at least one backend");
    }
    for &l in &cfg.layers {
        measure_layer(cfg, &c, l, &mut g)?;
    }
    let (three, fused) = g.cost.context("no layer measured")?;
    // the verdict and the explanation are of the native kernels (the engine's own forms); the
    // OpenVINO rows and what OpenVINO executed are recorded beside them
    let verdict = note::verdict(if g.native_rows.is_empty() {
        &g.rows_out
    } else {
        &g.native_rows
    });
    let note = note::explain(&note::Inputs {
        rows: if g.native_rows.is_empty() {
            &g.rows_out
        } else {
            &g.native_rows
        },
        three,
        fused,
        threads,
        hidden: c.hidden,
        dense_width: c.dense_width,
        bandwidth_gbs: bandwidth.as_ref().map(|b| b.0),
        breakdowns: &g.breakdowns,
    });
    let findings = Findings {
        threads,
        bandwidth,
        three,
        fused,
        verdict,
        note,
    };

    let csv_path = cfg.out.join("dense.csv");
    crate::csv::write(&csv_path, &table::csv(&g.rows_out))?;
    let record = record_json(cfg, &c, &g, &findings);
    let json_path = cfg.out.join("dense.json");
    crate::json::write(&json_path, &record)?;
    crate::figures::figure3::draw(&cfg.out, cfg.paper.as_deref())?;

    print!("{}", table::csv(&g.rows_out));
    println!("{}", findings.verdict.1);
    println!("note: {}", findings.note);
    eprintln!(
        "dense: wrote {0}/dense.csv, {0}/dense.json, {0}/figure3.png and {0}/figure3.svg",
        cfg.out.display()
    );
    Ok(())
}

/// Refuse what cannot be measured: no calls, no layers or rows, a non-dense layer, bad rows.
fn check_options(cfg: &DenseConfig, c: &ModelConfig) -> anyhow::Result<()> {
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
    Ok(())
}

/// What the measurement of every layer gathers, in the order it was measured.
#[derive(Default)]
struct Gathered {
    rows_out: Vec<DenseRow>,
    cases: Vec<Value>,
    cost: Option<(PathCost, PathCost)>,
    breakdowns: Vec<measure::Breakdown>,
    native_rows: Vec<DenseRow>,
    ov_reports: Vec<GraphReport>,
}

/// One generated layer and what its cases share across row counts and backends.
#[derive(Clone, Copy)]
struct Layer<'a> {
    cfg: &'a DenseConfig,
    c: &'a ModelConfig,
    l: usize,
    w: &'a LayerWeights,
    e: &'a ExpertWeights,
    three: PathCost,
    fused: PathCost,
    /// The OpenVINO graphs of both forms (three-matmul, fused-slices), when OpenVINO is measured.
    ov: Option<(&'a OvMlp, &'a OvMlp)>,
}

/// What the run concluded, for the record.
struct Findings {
    threads: usize,
    bandwidth: Option<(f64, String)>,
    three: PathCost,
    fused: PathCost,
    verdict: (bool, String),
    note: String,
}

/// Generate layer `l`, measure it at every row count and backend, then profile its OpenVINO graphs.
fn measure_layer(
    cfg: &DenseConfig,
    c: &ModelConfig,
    l: usize,
    g: &mut Gathered,
) -> anyhow::Result<()> {
    eprintln!(
        "dense: generating layer {l} of {} (seed {})",
        c.name, cfg.seed
    );
    let w = single_layer(c, cfg.seed, l, None)?;
    let e = measure::dense_weights(&w)?;
    let (three, fused) = measure::costs(c, e);
    g.cost = Some((three, fused));
    // OpenVINO: both forms compiled once per layer on one Core in f32 (parity) mode, timed
    // without per-node profiling; a profiled copy, run once, says what executed
    let ov = if cfg.backends.contains(&BackendKind::Openvino) {
        eprintln!("dense: compiling layer {l}'s two forms on OpenVINO (CPU, f32)");
        let rt = Runtime::new(Backend::openvino_f32(), false)?;
        let t3 = OvMlp::build(&rt, c, &w, DenseForm::ThreeMatmul)?;
        let tf = OvMlp::build(&rt, c, &w, DenseForm::FusedSlices)?;
        Some((rt, t3, tf))
    } else {
        None
    };
    let layer = Layer {
        cfg,
        c,
        l,
        w: &w,
        e,
        three,
        fused,
        ov: ov.as_ref().map(|(_, t3, tf)| (t3, tf)),
    };
    for &n in &cfg.rows {
        let x = measure::input_rows(cfg.seed, l, n, c.hidden);
        let mut native_out: Option<Vec<f32>> = None;
        for &b in &cfg.backends {
            measure_case(layer, n, &x, b, &mut native_out, g)?;
        }
    }
    if let Some((_, t3, tf)) = &ov {
        let rt = Runtime::new(Backend::openvino_f32(), true)?;
        let x = measure::input_rows(cfg.seed, l, 1, c.hidden);
        let mut y = vec![0.0f32; c.hidden];
        for (timed, form) in [(t3, DenseForm::ThreeMatmul), (tf, DenseForm::FusedSlices)] {
            let p = OvMlp::build(&rt, c, &w, form)?;
            p.run(c, &w, true, &x, &mut y)?;
            let mut r = GraphReport::of(p.program())?;
            // the timed copy's compile time, not the profiled one's
            r.compile_ms = timed.program().compile_time.as_secs_f64() * 1e3;
            g.ov_reports.push(r);
        }
    }
    Ok(())
}

/// Time one layer's two forms on the `n` rows `x` on backend `b`; add its row and case record.
fn measure_case(
    layer: Layer<'_>,
    n: usize,
    x: &[f32],
    b: BackendKind,
    native_out: &mut Option<Vec<f32>>,
    g: &mut Gathered,
) -> anyhow::Result<()> {
    let Layer {
        cfg,
        c,
        l,
        w,
        e,
        three,
        fused,
        ov,
    } = layer;
    eprintln!(
        "dense: layer {l}, {n} row(s), {}: {} warm-up + {} timed calls of each form",
        backend_name(b),
        cfg.warmup,
        cfg.calls
    );
    let (t, parts) = match (b, ov) {
        (BackendKind::Native, _) => {
            let t = measure::time_both(c, w, x, cfg.warmup, cfg.calls);
            let parts = measure::breakdown(c, e, n, cfg.seed, (cfg.calls / 2).max(5))
                .context("no product timings")?;
            (t, Some(parts))
        }
        (BackendKind::Openvino, Some((t3, tf))) => (
            measure::time_both_openvino(c, w, x, cfg.warmup, cfg.calls, t3, tf)?,
            None,
        ),
        (BackendKind::Openvino, None) => unreachable!("compiled above"),
    };
    let (m, f) = (
        Summary::of(&t.three_ms).context("no three-matmul timings")?,
        Summary::of(&t.fused_ms).context("no fused timings")?,
    );
    let row = DenseRow {
        backend: (cfg.backends.len() > 1 || b != BackendKind::Native)
            .then(|| backend_name(b).to_string()),
        layer: l,
        rows: n,
        matrix_ms: m.median,
        fused_ms: f.median,
        reduction_pct: reduction_pct(m.median, f.median),
        cosine: cosine(&t.y_fused, &t.y_three),
        relative_difference: relative_difference(&t.y_fused, &t.y_three),
    };
    // OpenVINO's f32 three-matmul output against the native FP16 one, same input
    let vs_native = match (&*native_out, b) {
        (Some(y), BackendKind::Openvino) => relative_difference(&t.y_three, y),
        _ => None,
    };
    g.cases.push(json!({
        "backend": backend_name(b),
        "layer": l,
        "rows": n,
        "three_matmul": path_json(&m, &t.three_ms, three),
        "fused_slices": path_json(&f, &t.fused_ms, fused),
        "reduction_pct": row.reduction_pct,
        "cosine": row.cosine,
        "relative_difference": row.relative_difference,
        "three_matmul_vs_native_relative_difference": vs_native,
        "fused_faster": f.median < m.median,
        "matrix_products_only": parts.as_ref().map(parts_json),
    }));
    if b == BackendKind::Native {
        *native_out = Some(t.y_three.clone());
        g.breakdowns.extend(parts);
        g.native_rows.push(row.clone());
    }
    g.rows_out.push(row);
    Ok(())
}

/// The `dense.json` record of a run.
fn record_json(cfg: &DenseConfig, c: &ModelConfig, g: &Gathered, f: &Findings) -> Value {
    let Findings {
        threads,
        bandwidth,
        three,
        fused,
        verdict,
        note,
    } = f;
    json!({
        "record": "dense",
        "engine_commit": moefleet_engine::BUILD_COMMIT,
        "model": c.name,
        "seed": cfg.seed,
        "options": {
            "expert_f16": moefleet_engine::model::ForwardOptions::default().expert_f16,
            "row_factor": moefleet_engine::model::ForwardOptions::default().row_factor,
        },
        "backends": cfg.backends.iter().map(|b| backend_name(*b)).collect::<Vec<_>>(),
        "openvino": (!g.ov_reports.is_empty()).then(|| json!({
            "version": Runtime::version().unwrap_or_else(|e| e.to_string()),
            "device": "CPU",
            "precision": "f32 (INFERENCE_PRECISION_HINT f32, DYNAMIC_QUANTIZATION_GROUP_SIZE 0): the expert path's f16 rounding points are not reproduced",
            "timing": "OvMlp::run: host routing/F_i/restoration plus one inference of the layer's graph, without per-node profiling (a profiled copy of each graph, run once, gives `graphs`)",
            "graphs": g.ov_reports,
        })),
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
        "cases": g.cases,
        "fused_faster": verdict.0,
        "verdict": verdict.1,
        "note": note,
        "host": crate::host::facts(),
    })
}

fn backend_name(b: BackendKind) -> &'static str {
    match b {
        BackendKind::Native => "native",
        BackendKind::Openvino => "openvino",
    }
}

fn path_json(s: &Summary, ms: &[f64], cost: PathCost) -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Both backends side by side on `inkling-nano`: a row each per (layer, rows), the backend
    /// column, what OpenVINO executed, and a table that `verify` re-derives byte for byte.
    #[test]
    fn nano_on_both_backends() {
        use moefleet_engine::openvino::locate;
        let _ = locate::configure(locate::Search::from_env());
        if let Err(e) = locate::load() {
            if std::env::var("MOEFLEET_REQUIRE_OPENVINO").is_ok_and(|v| v == "1") {
                panic!("OpenVINO required but not loadable: {e}");
            }
            eprintln!("SKIPPED: OpenVINO is not available here: {e}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        run(&DenseConfig {
            out: dir.path().into(),
            preset: "inkling-nano".into(),
            seed: 7,
            layers: vec![0],
            rows: vec![1, 2],
            calls: 3,
            warmup: 1,
            paper: None,
            ceilings: None,
            backends: vec![BackendKind::Native, BackendKind::Openvino],
        })
        .unwrap();
        let csv = std::fs::read_to_string(dir.path().join("dense.csv")).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert!(lines[0].starts_with("backend,layer,rows,"), "{csv}");
        assert_eq!(lines.len(), 5, "{csv}");
        assert!(lines[2].starts_with("openvino,0,1,") && lines[4].starts_with("openvino,0,2,"));
        let rec: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("dense.json")).unwrap())
                .unwrap();
        assert_eq!(table::csv_from_record(&rec).unwrap(), csv);
        let graphs = rec["openvino"]["graphs"].as_array().unwrap();
        let slices = graphs
            .iter()
            .find(|g| g["graph"] == "layer0.dense-slices")
            .unwrap();
        assert_eq!(slices["moe_fused"], true, "{slices}");
        // OpenVINO's two f32 forms agree to f32 rounding. Against the native output as deployed
        // the difference is the native side's: its SIMD INT4 kernel quantises activations to 8
        // bits per group of 32 (FORMAT.md), noise ≈ amax / (254 √3) ≈ 0.7 % of a group's RMS at
        // amax ≈ 3 RMS, entering twice (x into gate/up, h into down: ≈ 1 % in quadrature), plus
        // the FP16 path's roundings (5e-4); three times that is the bound
        let ov1 = &rec["cases"][1];
        assert!(ov1["relative_difference"].as_f64().unwrap() < 1e-5, "{ov1}");
        let vs_native = ov1["three_matmul_vs_native_relative_difference"]
            .as_f64()
            .unwrap();
        let bound = if moefleet_engine::kernels::quantises_activations() {
            3e-2
        } else {
            2e-3
        };
        assert!(vs_native < bound, "{vs_native}");
    }
}
