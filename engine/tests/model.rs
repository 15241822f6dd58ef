//! The model in one process: stream-state invariants, weights from files, residual scale, the two
//! dense forms, and errors on bad input.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use moefleet_engine::model::{
    export, generate as synth, load, DenseForm, ForwardOptions, Model, ModelConfig, Segment,
    SynthSpec,
};

fn nano_model(seed: u64) -> Model {
    let cfg = ModelConfig::preset("inkling-nano").unwrap();
    Model::new(
        synth(&SynthSpec::whole(cfg, seed)).unwrap(),
        ForwardOptions::default(),
    )
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn multi_row_prefill_equals_rows_one_at_a_time() {
    let m = nano_model(3);
    let toks = tokens(150, m.config().vocab_size, 9);
    let one = all_logits(&m, &toks, 1);
    for window in [2, 8, 13, 150] {
        assert_eq!(
            bits(&all_logits(&m, &toks, window)),
            bits(&one),
            "window {window}"
        );
    }
}

#[test]
fn rows_of_several_streams_in_one_frame_equal_separate_runs() {
    let m = nano_model(4);
    let h = m.config().hidden;
    let a = tokens(30, m.config().vocab_size, 1);
    let b = tokens(17, m.config().vocab_size, 2);
    let (ra, rb) = (residuals(&m, &a, 30), residuals(&m, &b, 17));
    let (mut sa, mut sb) = (m.new_stream(64), m.new_stream(64));
    let mut x = vec![0.0; 47 * h];
    m.embed(&a, &mut x[..30 * h]).unwrap();
    m.embed(&b, &mut x[30 * h..]).unwrap();
    m.forward(
        &mut [
            Segment {
                state: &mut sa,
                rows: 30,
            },
            Segment {
                state: &mut sb,
                rows: 17,
            },
        ],
        &mut x,
    )
    .unwrap();
    assert_eq!(bits(&x[..30 * h]), bits(&ra));
    assert_eq!(bits(&x[30 * h..]), bits(&rb));
}

#[test]
fn truncate_then_replay_equals_never_having_gone_past() {
    let m = nano_model(5);
    let c = m.config().clone();
    let h = c.hidden;
    let toks = tokens(120, c.vocab_size, 3);
    let detour = tokens(40, c.vocab_size, 4);
    let step = |st: &mut moefleet_engine::model::StreamState, t: &[u32]| {
        let mut x = vec![0.0; t.len() * h];
        m.embed(t, &mut x).unwrap();
        m.forward(
            &mut [Segment {
                state: st,
                rows: t.len(),
            }],
            &mut x,
        )
        .unwrap();
        x
    };
    // straight: 120 positions
    let mut straight = m.new_stream(256);
    let want = step(&mut straight, &toks);
    // detour: first 100, then 40 wrong positions (past the sliding window ring's start), rewind to 100
    let mut st = m.new_stream(256);
    step(&mut st, &toks[..100]);
    step(&mut st, &detour);
    st.truncate(100).unwrap();
    assert_eq!(st.pos(), 100);
    let got = step(&mut st, &toks[100..]);
    assert_eq!(bits(&got), bits(&want[100 * h..]));
    // reset gives a fresh stream
    st.reset();
    assert_eq!(bits(&step(&mut st, &toks)), bits(&want));
}

#[test]
fn state_refuses_bad_rewinds_and_budget_overruns() {
    let m = nano_model(6);
    let c = m.config().clone();
    let mut st = m.new_stream(200);
    let toks = tokens(150, c.vocab_size, 5);
    let mut x = vec![0.0; 150 * c.hidden];
    m.embed(&toks, &mut x).unwrap();
    m.forward(
        &mut [Segment {
            state: &mut st,
            rows: 150,
        }],
        &mut x,
    )
    .unwrap();
    let e = st
        .truncate(150 - c.rewind_slack - 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rewind slack"), "{e}");
    assert!(st
        .truncate(151)
        .unwrap_err()
        .to_string()
        .contains("forward"));
    let mut x = vec![0.0; 60 * c.hidden];
    m.embed(&toks[..60], &mut x).unwrap();
    let e = m
        .forward(
            &mut [Segment {
                state: &mut st,
                rows: 60,
            }],
            &mut x,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("context budget"), "{e}");
    assert_eq!(st.pos(), 150, "a refused frame changes nothing");
    let e = m
        .embed(&[c.vocab_size as u32], &mut vec![0.0; c.hidden])
        .unwrap_err()
        .to_string();
    assert!(e.contains("outside the vocabulary"), "{e}");
}

#[test]
fn export_then_load_gives_bit_identical_weights_and_logits() {
    let cfg = ModelConfig::preset("inkling-nano").unwrap();
    let w = synth(&SynthSpec::whole(cfg.clone(), 8)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    export::export(&w, dir.path()).unwrap();
    let back = load::load(dir.path()).unwrap();
    assert!(back == w, "loaded weights differ from the generated ones");
    let toks = tokens(80, cfg.vocab_size, 6);
    let a = all_logits(&Model::new(w, ForwardOptions::default()), &toks, 8);
    let b = all_logits(&Model::new(back, ForwardOptions::default()), &toks, 8);
    assert_eq!(bits(&a), bits(&b));
}

#[test]
fn a_layer_range_generates_the_same_layers_as_the_whole_model() {
    let cfg = ModelConfig::preset("inkling-mini").unwrap();
    let whole_first = synth(&SynthSpec {
        layers: 0..7,
        ..SynthSpec::whole(cfg.clone(), 9)
    })
    .unwrap();
    let part = synth(&SynthSpec {
        layers: 6..12,
        ..SynthSpec::whole(cfg.clone(), 9)
    })
    .unwrap();
    assert!(part.embed.is_none() && part.head.is_none());
    assert!(
        part.layers[0] == whole_first.layers[6],
        "layer 6 depends on the range it was generated in"
    );
    let other_seed = synth(&SynthSpec {
        layers: 6..7,
        ..SynthSpec::whole(cfg, 10)
    })
    .unwrap();
    assert!(other_seed.layers[0] != part.layers[0]);
}

#[test]
fn export_loader_rejects_damaged_files_with_clear_errors() {
    let cfg = ModelConfig::preset("inkling-nano").unwrap();
    let w = synth(&SynthSpec::whole(cfg, 8)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    export::export(&w, dir.path()).unwrap();
    let bin = dir.path().join("experts/layer_05.bin");
    let mut b = std::fs::read(&bin).unwrap();
    b.truncate(b.len() - 3);
    std::fs::write(&bin, &b).unwrap();
    let e = load::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("layer_05.bin") && e.contains("expected"), "{e}");
    std::fs::write(dir.path().join("manifest.json"), "{not json").unwrap();
    let e = load::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("manifest.json"), "{e}");
    let e = load::load(&dir.path().join("missing"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing"), "{e}");
}

/// Per-layer residual RMS over all 66 layers of inkling-mini stays O(1).
#[test]
fn residual_rms_stays_order_one_over_inkling_mini() {
    let cfg = ModelConfig::preset("inkling-mini").unwrap();
    let m = Model::new(
        synth(&SynthSpec::whole(cfg.clone(), 7)).unwrap(),
        ForwardOptions::default(),
    );
    let toks = tokens(24, cfg.vocab_size, 7);
    let mut st = m.new_stream(64);
    let mut x = vec![0.0; toks.len() * cfg.hidden];
    m.embed(&toks, &mut x).unwrap();
    let mut rms = Vec::new();
    m.forward_observed(
        &mut [Segment {
            state: &mut st,
            rows: toks.len(),
        }],
        &mut x,
        |_, x| {
            rms.push((x.iter().map(|v| (v * v) as f64).sum::<f64>() / x.len() as f64).sqrt());
        },
        &mut Default::default(),
    )
    .unwrap();
    let line: Vec<String> = rms.iter().map(|r| format!("{r:.2}")).collect();
    eprintln!("inkling-mini residual RMS per layer: {}", line.join(" "));
    assert_eq!(rms.len(), 66);
    for (l, r) in rms.iter().enumerate() {
        assert!((0.5..=8.0).contains(r), "layer {l}: residual RMS {r}");
    }
}

/// The two dense forms are equal in real arithmetic; their FP16 paths differ by rounding only
/// (the paper measured 5.7e-4 / 5.9e-4 relative difference on its device).
#[test]
fn dense_forms_agree_to_fp16_precision() {
    let cfg = ModelConfig::preset("inkling-mini").unwrap();
    let w = synth(&SynthSpec {
        layers: 0..2,
        ..SynthSpec::whole(cfg.clone(), 7)
    })
    .unwrap();
    let toks = tokens(32, cfg.vocab_size, 8);
    let three = residuals(&Model::new(w.clone(), ForwardOptions::default()), &toks, 8);
    let fused_opts = ForwardOptions {
        dense_form: DenseForm::FusedSlices,
        ..Default::default()
    };
    let fused = residuals(&Model::new(w, fused_opts), &toks, 8);
    let num: f64 = three
        .iter()
        .zip(&fused)
        .map(|(a, b)| ((a - b) as f64).powi(2))
        .sum();
    let den: f64 = three.iter().map(|a| (*a as f64).powi(2)).sum();
    let rel = (num / den).sqrt();
    eprintln!("dense three-matmul vs fused slices after layers 0-1: relative difference {rel:.2e}");
    assert!(
        rel > 0.0,
        "the two forms round at different points, so some bits must differ"
    );
    assert!(rel < 5e-3, "relative difference {rel}");
}

#[test]
fn logits_are_bit_identical_whatever_the_thread_count() {
    // the experts of a layer run in parallel, and a whole-prompt window also spreads its rows'
    // routing and combination and splits the projections into more tasks: nothing may depend on it
    let m = nano_model(5);
    let toks = tokens(40, m.config().vocab_size, 2);
    let at = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| [8, 40].map(|window| bits(&all_logits(&m, &toks, window))))
    };
    let one = at(1);
    assert_eq!(one, at(2));
    assert_eq!(one, at(3));
}
