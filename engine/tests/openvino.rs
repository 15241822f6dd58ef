//! The OpenVINO backend against the native kernels and the float64 oracle.
//!
//! OpenVINO's f32 mode computes the products in f32 from exactly the stored weights (the u4/i8
//! decompression is exact: a nibble minus 8 times an f16 scale has at most 15 significant bits),
//! so it is compared with the native **portable** kernels, which also compute the products in f32
//! (the SIMD kernels quantise activations, FORMAT.md, and are held to the portable ones by
//! tests/kernel_parity.rs). Neither reproduces the other's summation order, so:
//! - one product: OpenVINO's f32 result within `γ_K Σ_k |w_k x_k|` of the exact (f64) sum per
//!   element, `γ_K = K u / (1 − K u)`, u = 2⁻²⁴ (the classical bound of an f32 sum of K exact
//!   products in any order; the native f32 sum obeys the same bound, so the two differ by at most
//!   twice it). A weight rounded to f16 anywhere (a decompression that ran in f16) breaks it;
//! - whole layers: the residual after each layer within `LAYER_TOL` relative L2 (below);
//! - greedy ids equal over 128 tokens (`inkling-nano` and `inkling-mini`), and the logits against the
//!   float64 oracle within the oracle tests' architecture bound.
//!
//! Every test is skipped, with the reason printed, when OpenVINO's library cannot be found
//! (`make test` installs the wheel; `MOEFLEET_REQUIRE_OPENVINO=1` turns the skip into a failure).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use moefleet_engine::generate::generate;
use moefleet_engine::model::config::Backend;
use moefleet_engine::model::{
    export, generate as synth, load, DenseForm, ForwardOptions, ForwardTimings, Model, ModelConfig,
    SynthSpec,
};
use moefleet_engine::openvino::{graphs, Input, Runtime};

/// The oracle tests' architecture bound (tests/oracle.rs): per row, ‖a − b‖∞ / RMS(b).
const ARCH_TOL: f64 = 1e-4;
/// Residual after a layer, relative L2, OpenVINO f32 vs the portable kernels. An estimate, not a
/// worst-case bound: a product's two f32 sums differ by random-sign roundings of their partial
/// sums, about √(K/3)·u ≈ 1e-6 relative at K ≤ 1024 (u = 2⁻²⁴); a layer chains five products
/// (q/k/v → attention → o, gate/up → down) and the residual carries every layer's differences on,
/// so independent differences add in quadrature: √(5 · 12) · 1e-6 ≈ 8e-6 after the 12 layers
/// tested. Three times that, 2.5e-5, is the bound (measured: below 1e-6); a top-k route flipped by
/// such a difference, or a wrong weight, scale, nibble order or route, shows as O(1).
const LAYER_TOL: f64 = 2.5e-5;

fn backend() -> Option<Backend> {
    // where to look, as the binaries' main sets it (a second call, from another test, is refused)
    let _ = moefleet_engine::openvino::locate::configure(
        moefleet_engine::openvino::locate::Search::from_env(),
    );
    match moefleet_engine::openvino::locate::load() {
        Ok(_) => Some(Backend::openvino_f32()),
        Err(e) => {
            skip(
                "openvino",
                "MOEFLEET_REQUIRE_OPENVINO",
                &format!("OpenVINO is not available here: {e}"),
            );
            None
        }
    }
}

fn f32_native() -> ForwardOptions {
    ForwardOptions {
        expert_f16: false,
        ..Default::default()
    }
}

fn on(backend: Backend) -> ForwardOptions {
    ForwardOptions {
        backend,
        ..f32_native()
    }
}

fn gamma(k: usize) -> f64 {
    let ku = k as f64 * f64::from(f32::EPSILON) / 2.0;
    ku / (1.0 - ku)
}

#[test]
fn one_product_each_kind_within_the_summation_bound() {
    let Some(b) = backend() else { return };
    moefleet_engine::kernels::force_portable();
    let rt = Runtime::new(b, false).unwrap();
    let (n, k, rows) = (3usize, 256usize, 96usize);
    let x: Vec<f32> = (0..n * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 37.0)
        .collect();
    // INT8 (head, attention projections)
    let m8 = moefleet_engine::kernels::cases::int8_matrix(rows, k, 3);
    let p = rt.compile(&graphs::int8_products(&[&m8]), "int8").unwrap();
    let got = &p.run(&[Input::F32(&x, &[n, k])], 1).unwrap()[0];
    let w8 = |o: usize, c: usize| m8.q[o * k + c] as f64 * m8.scales[o].to_f64();
    check_product(&x, n, k, rows, w8, got, "int8");
    // INT4 group-32 (experts, dense blocks), through one product of the three-matmul graph's kind
    let m4 = moefleet_engine::kernels::cases::int4_matrix(rows, k, 5);
    let mut g = moefleet_engine::openvino::ir::Graph::new();
    let xi = g.parameter("x", "f32", &[None, Some(k)]);
    let w = graphs::int4_weights(&mut g, &[m4.view()], &[]);
    let y = graphs::matmul(&mut g, xi, w);
    g.result(y, "y");
    let p = rt.compile(&g, "int4").unwrap();
    let got = &p.run(&[Input::F32(&x, &[n, k])], 1).unwrap()[0];
    let v = m4.view();
    check_product(&x, n, k, rows, |o, c| v.weight(o, c) as f64, got, "int4");
}

fn check_product(
    x: &[f32],
    n: usize,
    k: usize,
    rows: usize,
    w: impl Fn(usize, usize) -> f64,
    got: &[f32],
    what: &str,
) {
    assert_eq!(got.len(), n * rows);
    let mut worst: f64 = 0.0;
    for r in 0..n {
        for o in 0..rows {
            let (mut exact, mut abs) = (0.0f64, 0.0f64);
            for c in 0..k {
                let t = w(o, c) * x[r * k + c] as f64;
                exact += t;
                abs += t.abs();
            }
            // one side's error against the exact sum is ≤ γ_K Σ|t|; the native f32 sum is within
            // the same of `exact`, so OpenVINO is held to the exact sum with the one-sided bound
            let bound = gamma(k) * abs;
            let err = (got[r * rows + o] as f64 - exact).abs();
            worst = worst.max(err / bound.max(f64::MIN_POSITIVE));
            assert!(
                err <= bound,
                "{what} ({r}, {o}): {} vs exact {exact}, bound {bound:e}",
                got[r * rows + o]
            );
        }
    }
    eprintln!("{what}: worst error {worst:.3} of the summation bound");
}

/// Residual after each layer, native portable (f32) vs OpenVINO f32.
fn layer_residuals(m: &Model, toks: &[u32]) -> Vec<Vec<f32>> {
    let c = m.config().clone();
    let mut st = m.new_stream(toks.len() + 1);
    let mut x = vec![0.0f32; toks.len() * c.hidden];
    m.embed(toks, &mut x).unwrap();
    let mut out = Vec::new();
    let mut segs = [moefleet_engine::model::Segment {
        state: &mut st,
        rows: toks.len(),
    }];
    m.forward_observed(
        &mut segs,
        &mut x,
        |_, r| out.push(r.to_vec()),
        &mut ForwardTimings::default(),
    )
    .unwrap();
    out
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let (mut d, mut n) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        d += (*x as f64 - *y as f64).powi(2);
        n += (*y as f64).powi(2);
    }
    (d / n).sqrt()
}

fn layers_agree(preset: &str, layers: usize, dense_form: DenseForm) {
    let Some(b) = backend() else { return };
    moefleet_engine::kernels::force_portable();
    let cfg = ModelConfig::preset(preset).unwrap();
    let w = synth(&SynthSpec {
        layers: 0..layers,
        ..SynthSpec::whole(cfg.clone(), 7)
    })
    .unwrap();
    let opts = |o: ForwardOptions| ForwardOptions { dense_form, ..o };
    let native = Model::new(w.clone(), opts(f32_native()));
    let ov = Model::new(w, opts(on(b)));
    let toks = tokens(24, cfg.vocab_size, 3);
    let (a, r) = (layer_residuals(&ov, &toks), layer_residuals(&native, &toks));
    assert_eq!(a.len(), layers);
    let errs: Vec<f64> = a.iter().zip(&r).map(|(x, y)| rel_l2(x, y)).collect();
    eprintln!("{preset} {dense_form:?}: per-layer relative L2 {errs:?}");
    for (l, e) in errs.iter().enumerate() {
        assert!(*e <= LAYER_TOL, "{preset} layer {l}: {e:e}");
    }
}

#[test]
fn nano_layers_agree_with_the_native_kernels_in_both_dense_forms() {
    layers_agree("inkling-nano", 12, DenseForm::ThreeMatmul);
    layers_agree("inkling-nano", 4, DenseForm::FusedSlices);
}

#[test]
fn mini_first_role_layers_agree_with_the_native_kernels() {
    layers_agree("inkling-mini", 6, DenseForm::ThreeMatmul);
}

fn greedy_equal(preset: &str) {
    let Some(b) = backend() else { return };
    moefleet_engine::kernels::force_portable();
    let cfg = ModelConfig::preset(preset).unwrap();
    let w = synth(&SynthSpec::whole(cfg.clone(), 7)).unwrap();
    let native = Model::new(w.clone(), f32_native());
    let ov = Model::new(w, on(b));
    let prompt = tokens(16, cfg.vocab_size, 5);
    let gn = generate(&native, &prompt, 128, 8, None, false).unwrap();
    let go = generate(&ov, &prompt, 128, 8, None, false).unwrap();
    let first = gn.tokens.iter().zip(&go.tokens).position(|(a, b)| a != b);
    assert_eq!(
        first, None,
        "{preset}: greedy ids differ from step {first:?}"
    );
    assert_eq!(gn.tokens.len(), 128);
}

#[test]
fn nano_greedy_ids_equal_native_over_128_tokens() {
    greedy_equal("inkling-nano");
}

#[test]
fn mini_greedy_ids_equal_native_over_128_tokens() {
    greedy_equal("inkling-mini");
}

#[test]
fn nano_logits_match_the_float64_oracle_on_openvino() {
    let Some(b) = backend() else { return };
    let cfg = ModelConfig::preset("inkling-nano").unwrap();
    let dir = tempfile::tempdir().unwrap();
    export::export(
        &synth(&SynthSpec::whole(cfg.clone(), 7)).unwrap(),
        dir.path(),
    )
    .unwrap();
    let ov = Model::new(load::load(dir.path()).unwrap(), on(b));
    // past the sliding window, the sliding extent and the global extent, as tests/oracle.rs
    let toks = tokens(300, cfg.vocab_size, 1);
    let (_, cols, exact) = oracle(dir.path(), &toks, None, false);
    let (e, r) = worst_row_error(&all_logits(&ov, &toks, 8), &exact, cols);
    eprintln!("nano logits on OpenVINO f32: worst row error {e:.2e} (row {r})");
    assert!(e <= ARCH_TOL, "OpenVINO vs oracle: {e:e} at row {r}");
}

#[test]
fn the_report_shows_the_fused_moe_and_f32_with_no_fallback() {
    let Some(b) = backend() else { return };
    let cfg = ModelConfig::preset("inkling-nano").unwrap();
    let w = synth(&SynthSpec {
        layers: 0..4,
        ..SynthSpec::whole(cfg.clone(), 7)
    })
    .unwrap();
    let m = Model::new(w, on(Backend { profile: true, ..b }));
    layer_residuals(&m, &tokens(3, cfg.vocab_size, 1));
    let reports = moefleet_engine::openvino::layers::of(m.backend().unwrap())
        .unwrap()
        .report()
        .unwrap();
    for r in &reports {
        eprintln!(
            "{}: {:?} ({} reference nodes)",
            r.graph, r.executed, r.reference_nodes
        );
        assert_eq!(r.inference_precision.to_lowercase(), "f32", "{}", r.graph);
        assert_eq!(r.reference_nodes, 0, "{}: fallback nodes", r.graph);
    }
    let moe = reports.iter().find(|r| r.graph.ends_with(".moe")).unwrap();
    assert!(moe.moe_fused, "MoE graph not fused: {:?}", moe.executed);
    let dense = reports
        .iter()
        .find(|r| r.graph.ends_with(".dense3"))
        .unwrap();
    assert!(
        dense
            .executed
            .iter()
            .any(|(k, _)| k.starts_with("FullyConnected")),
        "{:?}",
        dense.executed
    );
}

#[test]
fn a_missing_library_is_a_clear_error() {
    // in a child process: the library loads once per process
    let exe = env!("CARGO_BIN_EXE_moefleet");
    let out = std::process::Command::new(exe)
        .args([
            "generate",
            "--preset",
            "inkling-nano",
            "--prompt",
            "hi",
            "--max-tokens",
            "2",
            "--backend",
            "openvino",
        ])
        .env("MOEFLEET_OPENVINO_LIB", "/nonexistent/openvino")
        .env("PYTHON", "/nonexistent/python3")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("libopenvino_c.so") && err.contains("/nonexistent/openvino"),
        "{err}"
    );
}

#[test]
fn generate_and_serve_run_on_openvino() {
    let Some(b) = backend() else { return };
    let exe = env!("CARGO_BIN_EXE_moefleet");
    let out = std::process::Command::new(exe)
        .args([
            "generate",
            "--preset",
            "inkling-nano",
            "--prompt",
            "The fleet",
        ])
        .args(["--max-tokens", "8", "--backend", "openvino"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("decode 8 tokens"), "{err}");
    // a two-role fleet on OpenVINO gives one stream the ids of single-process OpenVINO generation
    let cfg = ModelConfig::preset("inkling-nano").unwrap();
    let model = Model::new(
        synth(&SynthSpec::whole(cfg.clone(), 7)).unwrap(),
        ForwardOptions {
            backend: b,
            ..Default::default()
        },
    );
    let prompt = tokens(13, cfg.vocab_size, 9);
    let want = generate(&model, &prompt, 24, 8, None, false)
        .unwrap()
        .tokens;
    let s = common::server::Server::start(&[
        "--preset",
        "inkling-nano",
        "--roles",
        "2",
        "--seed",
        "7",
        "--backend",
        "openvino",
    ]);
    let (code, v) = s.post(
        "/v1/completions",
        &serde_json::json!({"prompt": prompt, "max_tokens": 24, "moefleet_debug": true, "ignore_eos": true}),
    );
    assert_eq!(code, 200, "{v}");
    let got: Vec<u32> = v["moefleet"]["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(got, want);
}
