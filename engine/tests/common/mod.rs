//! Helpers shared by the integration tests: the float64 oracle as a subprocess, and engine runs
//! that keep every position's output.

#![allow(clippy::unwrap_used)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use moefleet_engine::model::{Model, Segment};

pub mod fleet;
pub mod held;
pub mod server;

/// A test that cannot run here: print why, straight to stderr (past the test harness's capture, so
/// the skip shows in every `cargo test` run), and return so the caller can skip; or panic with the
/// reason when the environment switch `require` (`MOEFLEET_REQUIRE_OPENVINO`,
/// `MOEFLEET_REQUIRE_NETNS`) is `1`, as `make test` and `.ci/run` set it where the thing is known to
/// work, so that a skip there is a failure and cannot hide.
#[track_caller]
pub fn skip(test: &str, require: &str, why: &str) {
    if std::env::var(require).is_ok_and(|v| v == "1") {
        panic!("{test}: {require}=1, but it cannot run: {why}");
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "{test}: SKIPPED, nothing checked ({require}=1 makes this a failure): {why}"
    );
}

pub fn oracle_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/inkling_oracle.py")
}

/// Run the oracle on an export; returns (rows, cols, values).
pub fn oracle(
    export: &Path,
    tokens: &[u32],
    upto_layer: Option<usize>,
    f16: bool,
) -> (usize, usize, Vec<f64>) {
    let out = export.join(format!("oracle-{}-{}.bin", upto_layer.unwrap_or(0), f16));
    let toks: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    let mut cmd = Command::new("python3");
    cmd.arg(oracle_script())
        .arg("--export")
        .arg(export)
        .arg("--tokens")
        .arg(toks.join(","))
        .arg("--out")
        .arg(&out);
    if let Some(k) = upto_layer {
        cmd.arg("--upto-layer").arg(k.to_string());
    }
    if f16 {
        cmd.arg("--f16");
    }
    if moefleet_engine::kernels::quantises_activations() {
        cmd.arg("--qact");
    }
    let res = cmd
        .output()
        .expect("python3 must be installed (make test installs numpy)");
    assert!(
        res.status.success(),
        "oracle failed: {}\n(is numpy installed? `make test` installs it)",
        String::from_utf8_lossy(&res.stderr)
    );
    let b = std::fs::read(&out).unwrap();
    let rows = u32::from_le_bytes(b[0..4].try_into().unwrap()) as usize;
    let cols = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
    let vals = b[8..]
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect::<Vec<_>>();
    assert_eq!(vals.len(), rows * cols);
    (rows, cols, vals)
}

/// Feed `tokens` in windows of `window` rows; return the residual after the model's last layer for
/// every position ([n, H]).
pub fn residuals(model: &Model, tokens: &[u32], window: usize) -> Vec<f32> {
    let h = model.config().hidden;
    let mut st = model.new_stream(tokens.len());
    let mut all = Vec::with_capacity(tokens.len() * h);
    for chunk in tokens.chunks(window) {
        let mut x = vec![0.0f32; chunk.len() * h];
        model.embed(chunk, &mut x).unwrap();
        model
            .forward(
                &mut [Segment {
                    state: &mut st,
                    rows: chunk.len(),
                }],
                &mut x,
            )
            .unwrap();
        all.extend_from_slice(&x);
    }
    all
}

/// Logits of every position ([n, vocab_size]).
pub fn all_logits(model: &Model, tokens: &[u32], window: usize) -> Vec<f32> {
    model.logits(&residuals(model, tokens, window)).unwrap()
}

/// Deterministic token ids in 1..vocab.
pub fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut r = moefleet_engine::rng::Rng::new(seed);
    (0..n)
        .map(|_| 1 + r.below(vocab as u64 - 1) as u32)
        .collect()
}

/// Per-row comparison: max over rows of ‖a − b‖∞ / RMS(b), and the row it occurs at.
pub fn worst_row_error(a: &[f32], b: &[f64], cols: usize) -> (f64, usize) {
    let mut worst = (0.0f64, 0usize);
    for (r, (ar, br)) in a.chunks_exact(cols).zip(b.chunks_exact(cols)).enumerate() {
        let rms = (br.iter().map(|v| v * v).sum::<f64>() / cols as f64).sqrt();
        let e = ar
            .iter()
            .zip(br)
            .map(|(x, y)| (*x as f64 - y).abs())
            .fold(0.0, f64::max)
            / rms;
        if e > worst.0 || e.is_nan() {
            worst = (e, r);
        }
    }
    worst
}
