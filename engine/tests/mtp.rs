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
use moefleet_engine::model::{
    export, generate as synth, load, ForwardOptions, Model, ModelConfig, StreamState, SynthSpec,
};
use moefleet_engine::spec::head::chain::{replay, ReplayMode, Sequence};
use moefleet_engine::spec::head::{block, io, MtpForm, MtpState, MtpWeights, Shared};
use moefleet_engine::tokenizer::TextTokenizer;

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
    let tk = TextTokenizer::embedded().unwrap();
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

/// Module 1 computed by hand, straight from MEASUREMENTS.md §5, for one stream (teacher and
/// self-fed) or one fresh stream per position (no-context); the full-vocabulary arg-max at each
/// position.
fn module1_by_hand(
    head: &MtpWeights,
    shared: &Shared,
    cap: &Capture,
    mode: ReplayMode,
) -> Vec<u32> {
    let c = &head.config;
    let (h, v) = (c.hidden, c.vocab_size);
    let (x, p) = (&cap.tokens, cap.prompt_rows());
    let t_len = x.len();
    let run = |k: usize, prev: &[f32], tokens: &[u32], alone: bool| -> Vec<f32> {
        let n = tokens.len();
        let emb = shared.embed_rows(tokens).unwrap();
        let mut out = vec![0.0; n * h];
        if alone {
            for t in 0..n {
                let mut st = StreamState::for_kinds(c, &[head.modules[k].kind], 1);
                let mut segs = [Segment {
                    state: &mut st,
                    rows: 1,
                }];
                block::forward(
                    c,
                    &head.modules[k],
                    Default::default(),
                    &mut segs,
                    &prev[t * h..(t + 1) * h],
                    &emb[t * h..(t + 1) * h],
                    &mut out[t * h..(t + 1) * h],
                    None,
                )
                .unwrap();
            }
        } else {
            let mut st = StreamState::for_kinds(c, &[head.modules[k].kind], t_len);
            let mut segs = [Segment {
                state: &mut st,
                rows: n,
            }];
            block::forward(
                c,
                &head.modules[k],
                Default::default(),
                &mut segs,
                prev,
                &emb,
                &mut out,
                None,
            )
            .unwrap();
        }
        out
    };
    let argmaxes = |hk: &[f32]| -> Vec<u32> {
        shared
            .logits(shared.head(), hk)
            .chunks_exact(v)
            .map(moefleet_engine::model::argmax)
            .collect()
    };
    // module 0 at t = 0..=T−3: prev = RMSNorm_final(residual_t), token x_{t+1}
    let prev0 = shared.final_norm(&cap.residuals[..(t_len - 2) * h]);
    let h0 = run(0, &prev0, &x[1..t_len - 1], false);
    let pred0 = argmaxes(&h0);
    // module 1 at t = 0..=T−4: prev = module 0's output, token x_{t+2} or module 0's prediction
    let n1 = t_len - 3;
    let tokens1: Vec<u32> = (0..n1)
        .map(|t| match mode {
            ReplayMode::Teacher => x[t + 2],
            _ if t + 2 < p => x[t + 2],
            _ => pred0[t],
        })
        .collect();
    let h1 = run(1, &h0[..n1 * h], &tokens1, mode == ReplayMode::NoContext);
    argmaxes(&h1)
}

#[test]
fn each_mode_is_what_its_definition_says() {
    let (_dir, cap, shared) = captured();
    let c = nano();
    let head = MtpWeights::synthetic(&c, 3).unwrap();
    let seq = Sequence {
        tokens: &cap.tokens,
        prompt_rows: cap.prompt_rows(),
        residuals: &cap.residuals,
    };
    let v = c.vocab_size;
    let p = cap.prompt_rows();
    let last = cap.tokens.len();
    let mut seen = Vec::new();
    for mode in ReplayMode::ALL {
        let got = replay(&head, &shared, &seq, mode, &[v, 100], false).unwrap();
        // anchors t in [P−1, T−3−k]
        for (k, m) in got.iter().enumerate() {
            assert_eq!(m.anchors.first(), Some(&(p - 1)));
            assert_eq!(m.anchors.last(), Some(&(last - 3 - k)));
        }
        // a restriction picks among the first rows only
        assert!(got[0].preds[1].iter().all(|&id| id < 100));
        let want = module1_by_hand(&head, &shared, &cap, mode);
        let at_anchors: Vec<u32> = got[1].anchors.iter().map(|&t| want[t]).collect();
        assert_eq!(got[1].preds[0], at_anchors, "{mode:?}: module 1");
        seen.push(got);
    }
    // module 0 is the same in every mode; module 1 is not
    assert_eq!(seen[0][0], seen[1][0]);
    assert_eq!(seen[0][0], seen[2][0]);
    assert_ne!(seen[0][1].preds, seen[1][1].preds);
    assert_ne!(seen[1][1].preds, seen[2][1].preds);
    // a head made for another model is refused, not a panic
    let other = MtpWeights::synthetic(&ModelConfig::preset("inkling-mini").unwrap(), 3).unwrap();
    let e = replay(&other, &shared, &seq, ReplayMode::Teacher, &[v], false).unwrap_err();
    assert!(e.to_string().contains("made for inkling-mini"), "{e}");
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

/// The head live in the last role (`spec::head::live`) drafts, row by row as a fleet feeds it, what
/// the self-fed replay of the whole capture predicts: the same inputs and the same history. A row
/// alone is multiplied as a matrix-vector product and a frame by SGEMM, so the two agree to
/// rounding (`linear::matmul`) and an arg-max could differ only where the top two logits are that
/// close; on this capture none is, and every draft is compared exactly. A prompt that arrives in
/// two windows, and a wrong row undone by `truncate`, change nothing.
#[test]
fn the_live_head_drafts_what_the_self_fed_replay_predicts() {
    use moefleet_engine::spec::head::live::{HeadRow, LiveHead};
    let (_dir, cap, shared) = captured();
    let c = nano();
    let head = MtpWeights::synthetic(&c, 3).unwrap();
    let k = head.modules.len();
    let (h, v, p) = (c.hidden, c.vocab_size, cap.prompt_rows());
    let t_len = cap.tokens.len();
    let seq = Sequence {
        tokens: &cap.tokens,
        prompt_rows: p,
        residuals: &cap.residuals,
    };
    let want = replay(&head, &shared, &seq, ReplayMode::SelfFed, &[v], false).unwrap();
    let mut live = LiveHead::new(head, shared, k, v, 256, false).unwrap();
    let row = |t: usize, input: u32, sampled: Option<u32>| HeadRow {
        slot: 3,
        pos: t,
        input,
        residual: &cap.residuals[t * h..(t + 1) * h],
        sampled,
    };
    let x = &cap.tokens;
    // the prompt in two windows: nothing is drafted before its sampled row
    let first: Vec<HeadRow> = (0..p / 2).map(|t| row(t, x[t], None)).collect();
    assert!(live.rows(&first).unwrap().is_empty());
    let rest: Vec<HeadRow> = (p / 2..p)
        .map(|t| row(t, x[t], (t == p - 1).then(|| x[p])))
        .collect();
    let mut drafted = live.rows(&rest).unwrap();
    for t in p..t_len - 1 {
        if t == p + 5 {
            // a wrong proposal's row, then its undoing
            live.rows(&[row(t, x[t] + 1, Some(x[t]))]).unwrap();
            live.truncate(3, t).unwrap();
        }
        drafted.extend(live.rows(&[row(t, x[t], Some(x[t + 1]))]).unwrap());
    }
    assert_eq!(drafted.len(), t_len - p);
    let mut compared = 0;
    for d in &drafted {
        assert_eq!((d.slot, d.tokens.len()), (3, k));
        for (m, r) in want.iter().enumerate() {
            if let Some(i) = r.anchors.iter().position(|&a| a == d.pos) {
                assert_eq!(d.tokens[m], r.preds[0][i], "module {m} at anchor {}", d.pos);
                compared += 1;
            }
        }
    }
    assert!(
        compared >= (t_len - p - k) * k,
        "{compared} drafts compared"
    );
}

/// The replay's logits, through the head's k-major copy, have the bits of the head's own product
/// (`Shared::logits`), for one row and for many.
#[test]
fn head_logits_have_the_bits_of_the_heads_product() {
    let c = nano();
    let shared = Shared::new(
        &c,
        moefleet_engine::model::synth::embed_weights(&c, 5),
        &moefleet_engine::model::synth::head_weights(&c, 5),
    )
    .unwrap();
    let h = c.hidden;
    let mut rng = moefleet_engine::rng::Rng::new(3);
    for n in [1, 2, 7, 300] {
        let mut x = vec![0.0f32; n * h];
        rng.fill_sym(&mut x, 1.0);
        let want = shared.logits(shared.head(), &x);
        assert_eq!(want.len(), n * c.vocab_size);
        assert!(shared.head_logits(&x) == want, "{n} rows");
    }
}
