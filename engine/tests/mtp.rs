//! The draft head (ARCHITECTURE.md §1.7): its export round trip, its replay against the float64
//! oracle's independent replay of the same capture, the state API speculation will rewind with, and
//! the replay modes' definitions.
//!
//! Tolerance of the oracle comparison: the engine runs the head in f32 (SGEMM products of up to 2H
//! terms, the attention kernel's polynomial exp of relative error below 2e-7), the oracle in
//! float64 from the same f32 weights and residuals; over one block that is ~1e-6 of a row's RMS, so
//! `MTP_TOL` = 1e-4 of each logit row's RMS (as the model's own architecture check) leaves room
//! without hiding a wrong equation, which moves rows by O(1). Arg-max ids may differ only where
//! the top two logits are closer than that error.

#![allow(clippy::unwrap_used)]

mod common;

use common::{oracle_script, worst_row_error};
use moefleet_engine::capture::Capture;
use moefleet_engine::generate::generate_captured;
use moefleet_engine::model::attention::Segment;
use moefleet_engine::model::mtp::chain::{replay, ReplayMode, Sequence};
use moefleet_engine::model::mtp::{block, io, MtpForm, MtpState, MtpWeights, Shared};
use moefleet_engine::model::{
    export, generate as synth, load, ForwardOptions, Model, ModelConfig, SynthSpec,
};
use moefleet_engine::tokenizer::{default_path, TextTokenizer};

const MTP_TOL: f64 = 1e-4;

fn nano() -> ModelConfig {
    ModelConfig::preset("inkling-nano").unwrap()
}

#[test]
fn export_round_trip_and_grids() {
    let c = nano();
    let w = MtpWeights::synthetic(&c, 11).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let prov = serde_json::json!({"made_by": "test"});
    io::export(&w, dir.path(), prov.clone()).unwrap();
    let (back, man) = io::load(dir.path()).unwrap();
    assert_eq!(back, w);
    assert_eq!(man.provenance, prov);
    let g = w.to_grids();
    io::export(&g, dir.path(), prov).unwrap();
    let (back, _) = io::load(dir.path()).unwrap();
    assert_eq!((back.form, back), (MtpForm::Grids, g));
    // a tensor of the wrong shape is refused, naming it
    std::fs::write(dir.path().join("manifest.json"), {
        let mut m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("manifest.json")).unwrap())
                .unwrap();
        m["config"]["hidden"] = 32.into();
        serde_json::to_vec(&m).unwrap()
    })
    .unwrap();
    let e = io::load(dir.path()).err().unwrap().to_string();
    assert!(e.contains("mtp.0."), "{e}");
}

/// A captured nano sequence from an evaluation-style prompt, its export, and the shared weights.
fn captured() -> (tempfile::TempDir, Capture, Shared) {
    let c = nano();
    let dir = tempfile::tempdir().unwrap();
    let w = synth(&SynthSpec::whole(c.clone(), 7)).unwrap();
    export::export(&w, &dir.path().join("model")).unwrap();
    let model = Model::new(w, ForwardOptions::default());
    let tk = TextTokenizer::load(&default_path()).unwrap();
    let prompt = tk
        .encode("user: Explain tides to a curious ten-year-old in one short paragraph.\nassistant:")
        .unwrap();
    // past the sliding window (64) of nano
    let (_, cap) = generate_captured(&model, &prompt, 72, 8, None).unwrap();
    let (e, h) = load::load_ends(&dir.path().join("model")).unwrap();
    (dir, cap, Shared::new(&c, e, &h).unwrap())
}

#[test]
fn teacher_replay_matches_the_float64_oracle() {
    let (dir, cap, shared) = captured();
    let c = nano();
    let head = MtpWeights::synthetic(&c, 3).unwrap();
    io::export(&head, &dir.path().join("head"), serde_json::json!({})).unwrap();
    let cap_path = dir.path().join("seq.bin");
    std::fs::write(&cap_path, cap.encode()).unwrap();
    let seq = Sequence {
        tokens: &cap.tokens,
        prompt_rows: cap.prompt_rows(),
        residuals: &cap.residuals,
    };
    let v = c.vocab_size;
    let got = replay(&head, &shared, &seq, ReplayMode::Teacher, &[v], true).unwrap();
    let out = dir.path().join("oracle.bin");
    let res = std::process::Command::new("python3")
        .arg(oracle_script())
        .arg("--export")
        .arg(dir.path().join("model"))
        .arg("--mtp")
        .arg(dir.path().join("head"))
        .arg("--capture")
        .arg(&cap_path)
        .args(["--modules", "2", "--out"])
        .arg(&out)
        .output()
        .expect("python3 with numpy (make test installs it)");
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
    let b = std::fs::read(&out).unwrap();
    let oracle: Vec<f64> = b[8..]
        .chunks_exact(8)
        .map(|x| f64::from_le_bytes(x.try_into().unwrap()))
        .collect();
    let mut at = 0;
    for (k, m) in got.iter().enumerate() {
        let ours = m.logits.as_ref().unwrap();
        let theirs = &oracle[at..at + ours.len()];
        at += ours.len();
        let (err, row) = worst_row_error(ours, theirs, v);
        let agree = ours
            .chunks_exact(v)
            .zip(theirs.chunks_exact(v))
            .filter(|(a, b)| {
                let ob = b
                    .iter()
                    .enumerate()
                    .fold(0, |best, (i, x)| if *x > b[best] { i } else { best });
                moefleet_engine::model::argmax(a) as usize == ob
            })
            .count() as f64
            / m.anchors.len() as f64;
        eprintln!("module {k}: worst row error {err:.2e} (row {row}), arg-max agreement {agree}");
        assert!(err <= MTP_TOL, "module {k}: {err:e} at anchor row {row}");
        assert!(agree >= 0.99, "module {k}: arg-max agreement {agree}");
    }
    assert_eq!(at, oracle.len(), "the oracle returned other anchors");
}

#[test]
fn modes_differ_where_their_definitions_do() {
    let (_dir, cap, shared) = captured();
    let c = nano();
    let head = MtpWeights::synthetic(&c, 3).unwrap();
    let seq = Sequence {
        tokens: &cap.tokens,
        prompt_rows: cap.prompt_rows(),
        residuals: &cap.residuals,
    };
    let v = c.vocab_size;
    let run = |m| replay(&head, &shared, &seq, m, &[v, 100], false).unwrap();
    let (t, s, n) = (
        run(ReplayMode::Teacher),
        run(ReplayMode::SelfFed),
        run(ReplayMode::NoContext),
    );
    let p = cap.prompt_rows();
    let last = cap.tokens.len();
    // anchors t in [P−1, T−3−k]
    for (k, m) in t.iter().enumerate() {
        assert_eq!(m.anchors.first(), Some(&(p - 1)));
        assert_eq!(m.anchors.last(), Some(&(last - 3 - k)));
    }
    // module 0 is the same in every mode; module 1 is not
    assert_eq!(t[0], s[0]);
    assert_eq!(t[0], n[0]);
    assert_ne!(t[1].preds, s[1].preds);
    assert_ne!(s[1].preds, n[1].preds);
    // a restriction picks among the first rows only
    assert!(t[0].preds[1].iter().all(|&id| id < 100));
}

#[test]
fn module_state_rewinds_like_the_models() {
    // feeding rows, truncating, and feeding the same rows again gives the same bits
    let c = nano();
    let head = MtpWeights::synthetic(&c, 5).unwrap();
    let m = &head.modules[1];
    let h = c.hidden;
    let rows = 20;
    let prev = moefleet_engine::kernels::cases::activations(rows * h, 1.0, 1);
    let emb = moefleet_engine::kernels::cases::activations(rows * h, 1.0, 2);
    let run = |st: &mut MtpState, from: usize, to: usize| {
        let mut out = vec![0.0; (to - from) * h];
        let mut segs = [Segment {
            state: &mut st.modules[1],
            rows: to - from,
        }];
        block::forward(
            &c,
            m,
            Default::default(),
            &mut segs,
            &prev[from * h..to * h],
            &emb[from * h..to * h],
            &mut out,
            None,
        )
        .unwrap();
        out
    };
    let mut a = MtpState::new(&c, 64);
    let whole = run(&mut a, 0, rows);
    let mut b = MtpState::new(&c, 64);
    run(&mut b, 0, 15);
    b.truncate(12).unwrap();
    let tail = run(&mut b, 12, rows);
    assert_eq!(&whole[12 * h..], &tail[..]);
}
