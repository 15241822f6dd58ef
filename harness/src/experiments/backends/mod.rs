//! `moefleet-harness backends`: the native kernels and the OpenVINO backend side by side in one
//! run, as ratios. Two measurements, each alternating the backends (A B, B A, ...) so drift and
//! cache state hit both alike:
//!
//! - **per layer**: one `inkling` MoE layer at full shape (attention, router and the eight experts
//!   one row selects: `probe::routed_layer`), one forward of 1 and 2 rows per call;
//! - **per token**: `inkling-mini` whole, single process: decode tokens after a one-token prompt,
//!   split into attention, MLP, the rest and the head (`bench::profile_decode`), in rounds.
//!
//! The native side runs as deployed (SIMD kernels, FP16 expert path); OpenVINO in f32 mode (its
//! CPU plugin's default on this AVX2 host resolves to f32 as well; `openvino-report` records it).
//! Writes OUT/backends.json (every sample, the load average before and after, host facts) and
//! OUT/backends.csv.

pub mod unit;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use moefleet_engine::bench::{load_average, profile_decode};
use moefleet_engine::model::config::Backend;
use moefleet_engine::model::weights::ModelWeights;
use moefleet_engine::model::{generate as synth, ForwardOptions, Model, ModelConfig, SynthSpec};
use serde_json::json;

use crate::stats::Summary;

pub struct BackendsConfig {
    pub out: PathBuf,
    pub seed: u64,
    /// Preset and layer of the per-layer measurement.
    pub layer_preset: String,
    pub layer: usize,
    pub rows: Vec<usize>,
    /// Timed calls of each backend per row count.
    pub calls: usize,
    /// Preset of the per-token measurement.
    pub token_preset: String,
    /// Decode tokens per round and rounds per backend.
    pub tokens: usize,
    pub rounds: usize,
}

fn with(backend: Backend) -> ForwardOptions {
    ForwardOptions {
        backend,
        ..Default::default()
    }
}

/// Run both measurements, write the records, print the table.
pub fn run(cfg: &BackendsConfig) -> anyhow::Result<()> {
    if cfg.calls == 0 || cfg.tokens == 0 || cfg.rounds == 0 || cfg.rows.is_empty() {
        anyhow::bail!("--calls, --tokens, --rounds and --rows must be at least 1");
    }
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("creating {}", cfg.out.display()))?;
    let threads = rayon::current_num_threads();
    let load_start = load_average();

    // per layer
    let c = ModelConfig::preset(&cfg.layer_preset)?;
    eprintln!(
        "backends: generating layer {} of {} (its row's eight experts)",
        cfg.layer, c.name
    );
    let lw = moefleet_engine::probe::routed_layer(&c, cfg.seed, cfg.layer)?;
    let weights = ModelWeights {
        config: c.clone(),
        seed: cfg.seed,
        layer_start: cfg.layer,
        layer_end: cfg.layer + 1,
        embed: None,
        layers: vec![lw],
        head: None,
        checkpoint: None,
    };
    let native = Model::new(weights.clone(), ForwardOptions::default());
    let ov = Model::new(weights, with(Backend::openvino_f32()));
    eprintln!("backends: compiling its OpenVINO graphs");
    let t0 = Instant::now();
    ov.prepare()?;
    let compile_s = t0.elapsed().as_secs_f64();
    let mut layer_cases = Vec::new();
    let mut csv = String::from("what,preset,rows,native_ms,openvino_ms,openvino_speedup\n");
    for &n in &cfg.rows {
        eprintln!(
            "backends: layer {}, {n} row(s): {} calls of each backend",
            cfg.layer, cfg.calls
        );
        let (a, b) = time_layer(&native, &ov, n, cfg.calls, cfg.seed)?;
        let (sa, sb) = (
            Summary::of(&a).context("no native samples")?,
            Summary::of(&b).context("no OpenVINO samples")?,
        );
        csv += &format!(
            "layer,{},{n},{:.4},{:.4},{:.3}\n",
            c.name,
            sa.median,
            sb.median,
            sa.median / sb.median
        );
        layer_cases.push(json!({
            "rows": n,
            "native_ms": a,
            "openvino_ms": b,
            "native_median_ms": sa.median,
            "openvino_median_ms": sb.median,
            "openvino_speedup": sa.median / sb.median,
        }));
    }

    // per token
    let ct = ModelConfig::preset(&cfg.token_preset)?;
    eprintln!("backends: generating {} whole", ct.name);
    let w = synth(&SynthSpec::whole(ct.clone(), cfg.seed))?;
    let native = Model::new(w.clone(), ForwardOptions::default());
    let ov = Model::new(w, with(Backend::openvino_f32()));
    ov.prepare()?;
    let mut rounds: [Vec<serde_json::Value>; 2] = Default::default();
    let mut totals: [Vec<f64>; 2] = Default::default();
    for r in 0..cfg.rounds {
        eprintln!(
            "backends: {} round {}/{}: {} decode tokens on each backend",
            ct.name,
            r + 1,
            cfg.rounds,
            cfg.tokens
        );
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let m = if i == 0 { &native } else { &ov };
            let p = profile_decode(m, cfg.tokens, threads)?;
            totals[i].push(p.total_ms);
            rounds[i].push(serde_json::to_value(p)?);
        }
    }
    let (sa, sb) = (
        Summary::of(&totals[0]).context("no native rounds")?,
        Summary::of(&totals[1]).context("no OpenVINO rounds")?,
    );
    csv += &format!(
        "token,{},1,{:.4},{:.4},{:.3}\n",
        ct.name,
        sa.median,
        sb.median,
        sa.median / sb.median
    );
    let load_end = load_average();
    let record = json!({
        "record": "backends",
        "engine_commit": moefleet_engine::BUILD_COMMIT,
        "threads": threads,
        "seed": cfg.seed,
        "native": "engine kernels as deployed (SIMD, FP16 expert path)",
        "openvino": {
            "version": moefleet_engine::openvino::Runtime::version()?,
            "device": "CPU",
            "precision": "f32 (INFERENCE_PRECISION_HINT f32, DYNAMIC_QUANTIZATION_GROUP_SIZE 0)",
        },
        "layer": {
            "preset": c.name,
            "layer": cfg.layer,
            "what": "one Model::forward of n rows over the layer (attention, router, experts), a fresh position each call",
            "openvino_compile_s": compile_s,
            "calls": cfg.calls,
            "cases": layer_cases,
        },
        "token": {
            "preset": ct.name,
            "what": "bench::profile_decode: ms per decode token after a one-token prompt (attention, mlp, other, head)",
            "tokens_per_round": cfg.tokens,
            "native_total_ms": totals[0],
            "openvino_total_ms": totals[1],
            "native_rounds": rounds[0],
            "openvino_rounds": rounds[1],
            "native_median_ms": sa.median,
            "openvino_median_ms": sb.median,
            "openvino_speedup": sa.median / sb.median,
        },
        "load_average_start": load_start,
        "load_average_end": load_end,
        "host": crate::host::facts(),
    });
    let jp = cfg.out.join("backends.json");
    crate::json::write(&jp, &record)?;
    crate::csv::write(&cfg.out.join("backends.csv"), &csv)?;
    print!("{csv}");
    eprintln!(
        "backends: openvino_speedup = native ms / OpenVINO ms (above 1: OpenVINO faster); load \
         average {load_start:?} -> {load_end:?}; wrote {0}/backends.json and {0}/backends.csv",
        cfg.out.display()
    );
    Ok(())
}

/// Per-call ms of one forward of `n` rows through both models, alternating, each on its own
/// stream (a fresh position every call; the caches grow alike on both sides).
fn time_layer(
    a: &Model,
    b: &Model,
    n: usize,
    calls: usize,
    seed: u64,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let h = a.config().hidden;
    let x0 = crate::experiments::dense::measure::input_rows(seed, 0, n, h);
    let budget = (calls + 2) * n + 1;
    let mut sa = a.new_stream(budget);
    let mut sb = b.new_stream(budget);
    let once = |m: &Model, st: &mut moefleet_engine::model::StreamState| {
        let mut x = x0.clone();
        let mut segs = [moefleet_engine::model::Segment { state: st, rows: n }];
        let t0 = Instant::now();
        m.forward(&mut segs, &mut x)?;
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        std::hint::black_box(&x);
        anyhow::Ok(ms)
    };
    // one untimed call each
    once(a, &mut sa)?;
    once(b, &mut sb)?;
    let (mut ta, mut tb) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for i in 0..calls {
        if i % 2 == 0 {
            ta.push(once(a, &mut sa)?);
            tb.push(once(b, &mut sb)?);
        } else {
            tb.push(once(b, &mut sb)?);
            ta.push(once(a, &mut sa)?);
        }
    }
    Ok((ta, tb))
}
