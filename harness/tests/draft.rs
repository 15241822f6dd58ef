//! The draft replay end to end on a corpus captured in one process from the `inkling-nano` model
//! (the same capture files a fleet writes; the fleet's own capture path is tested in the engine's
//! tests/capture.rs): every file checked on load, damaged files refused naming the check, a fit
//! that is deterministic, and a replay whose untrained head, shuffled labels and control head (the
//! same fit to targets shuffled across positions) sit at chance while the fitted head does not.
//! Then the same teeth on the committed `inkling-mini` replay.
//!
//! "Near chance" is a bound from the arithmetic: a predictor independent of the targets hits with
//! probability `c = Σ_v p(v) q(v)` (its and the targets' token frequencies), so over n anchors its
//! hit count is Binomial(n, c) and exceeds `c + 4·sqrt(c(1 − c)/n) + 1/n` with probability below
//! 1e-4 (the 1/n term covers a zero c on small samples).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use moefleet_engine::generate::generate_captured;
use moefleet_engine::model::{generate as synth, ForwardOptions, Model, ModelConfig, SynthSpec};
use moefleet_engine::pipeline::fleet::{MtpOptions, WeightsSource};
use moefleet_engine::serve::request::render_chat;
use moefleet_engine::spec::head::{io, MtpWeights};
use moefleet_engine::tokenizer::TextTokenizer;
use moefleet_harness::experiments::draft::anchors::Anchors;
use moefleet_harness::experiments::draft::corpus::{
    pick_prompts, sha256_hex, Corpus, SequenceRecord, Set,
};
use moefleet_harness::experiments::draft::replay::NOT_REPLAYED;
use moefleet_harness::experiments::draft::run::{
    fit_draft, replay_draft, Control, FitArgs, ModelSource, ReplayArgs,
};
use moefleet_harness::experiments::draft::stats::{
    chain, expected_accepted, first_draft, marginal_chance,
};
use moefleet_harness::workload::Families;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A nano corpus: two evaluation and ten training prompts per family, 64 generated tokens each.
fn nano_corpus(dir: &Path) {
    let c = ModelConfig::preset("inkling-nano").unwrap();
    let model = Model::new(
        synth(&SynthSpec::whole(c, 7)).unwrap(),
        ForwardOptions::default(),
    );
    let tk = TextTokenizer::embedded().unwrap();
    let (picks, _) = pick_prompts(&Families::builtin().unwrap(), "test", 2, 10);
    for set in [Set::Eval, Set::Train] {
        std::fs::create_dir_all(dir.join(set.dir())).unwrap();
    }
    let recs: Vec<SequenceRecord> = picks
        .par_iter()
        .map(|p| {
            let ids = tk
                .encode(&render_chat(&[("user".into(), p.text.clone())]))
                .unwrap();
            let (g, cap) = generate_captured(&model, &ids, 64, 8, None).unwrap();
            let bytes = cap.encode();
            let file = format!("{}/{}-{:04}.bin", p.set.dir(), p.family, p.prompt_index);
            std::fs::write(dir.join(&file), &bytes).unwrap();
            SequenceRecord {
                set: p.set,
                family: p.family.clone(),
                family_index: p.family_index,
                prompt_index: p.prompt_index,
                key: p.key.clone(),
                prompt: p.text.clone(),
                text: tk.decode(&g.tokens).unwrap(),
                prompt_tokens: ids.len(),
                generated: g.tokens.len(),
                file,
                source: String::new(),
                sequence: 0,
                bytes: bytes.len() as u64,
                sha256: sha256_hex(&bytes),
            }
        })
        .collect();
    for r in &recs {
        moefleet_harness::trace::append_jsonl(&dir.join("sequences.jsonl"), r).unwrap();
    }
    std::fs::write(dir.join("corpus.json"), r#"{"model": "inkling-nano"}"#).unwrap();
}

fn tk() -> TextTokenizer {
    TextTokenizer::embedded().unwrap()
}

/// The chance bound of the header.
fn near_chance(rate: f64, chance: f64, n: usize) -> bool {
    let n = n as f64;
    rate <= chance + 4.0 * (chance * (1.0 - chance) / n).sqrt() + 1.0 / n
}

/// Module-0 predictions and targets of a column.
fn first(a: &Anchors, col: &str) -> (Vec<u32>, Vec<u32>) {
    let idx: Vec<usize> = (0..a.len()).filter(|&i| a.module[i] == 0).collect();
    let p = a.column(col).unwrap();
    (
        idx.iter().map(|&i| p[i]).collect(),
        idx.iter().map(|&i| a.target[i]).collect(),
    )
}

#[test]
fn damaged_captures_are_refused_naming_the_file_and_the_check() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("corpus");
    nano_corpus(&dir);
    let corpus = Corpus::load(&dir, &tk()).unwrap();
    // true_false renders eight distinct prompts: two for evaluation, six for training
    assert_eq!(corpus.set(Set::Eval).count(), 24);
    assert_eq!(corpus.set(Set::Train).count(), 11 * 10 + 6);
    let victim = dir.join("eval/code-0000.bin");
    let good = std::fs::read(&victim).unwrap();
    let damage = |bytes: Vec<u8>, want: &str| {
        std::fs::write(&victim, &bytes).unwrap();
        let e = format!("{:#}", Corpus::load(&dir, &tk()).err().unwrap());
        assert!(e.contains("code-0000.bin") && e.contains(want), "{e}");
    };
    damage(
        good[..good.len() - 5].to_vec(),
        "does not divide the payload",
    );
    let mut m = good.clone();
    m[1] = b'X';
    damage(m, "bad magic");
    let mut m = good.clone();
    let at = m.len() - 4;
    m[at..].copy_from_slice(&f32::INFINITY.to_le_bytes());
    damage(m, "not finite");
    let mut m = good.clone();
    m[64 + 4] ^= 1; // the first prompt id
    damage(m, "prompt ids differ");
    let mut m = good.clone();
    let at = m.len() - 4;
    m[at] ^= 1; // a finite residual changed: only the hash can tell
    damage(m, "SHA-256 differs");
    std::fs::write(&victim, &good).unwrap();
    let seqs = dir.join("sequences.jsonl");
    let text = std::fs::read_to_string(&seqs).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("eval/code-0000.bin"))
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let mut edited = v.clone();
    edited["text"] = format!("{} and more", v["text"].as_str().unwrap()).into();
    std::fs::write(&seqs, text.replace(line, &edited.to_string())).unwrap();
    let e = format!("{:#}", Corpus::load(&dir, &tk()).err().unwrap());
    assert!(
        e.contains("code-0000.bin") && e.contains("differs from the API's"),
        "{e}"
    );
}

/// The control fitted beside the head in `t`/control (module 0 only) against the whole control
/// fitted alone in `t`/control2 and the head `a`; and such a head refused as the replayed head.
fn check_control(t: &Path, dir: &Path, a: &MtpWeights) {
    let (c, cm) = io::load(&t.join("control")).unwrap();
    let (whole, _) = io::load(&t.join("control2")).unwrap();
    assert_eq!(
        c.modules[0], whole.modules[0],
        "module 0 of the control fitted beside the head differs from the control fitted alone"
    );
    // the later modules kept the synthetic weights; the control fitted alone fitted them
    let synthetic = MtpWeights::synthetic(&c.config, 7).unwrap();
    assert!(c.modules.len() > 1);
    assert_eq!(c.modules[1..], synthetic.modules[1..]);
    assert_ne!(whole.modules[1..], synthetic.modules[1..]);
    assert_eq!(cm.provenance["fitted_modules"], 1);
    assert_ne!(a.modules[0], c.modules[0]);
    assert_eq!(cm.provenance["fit"]["shuffle_targets"], 11);
    // a head with modules left unfitted is refused as the head replayed
    let partial = replay_draft(&ReplayArgs {
        corpus: dir.to_path_buf(),
        head: t.join("control"),
        out: t.join("partial"),
        model: None,
        tokenizer: None,
        root: repo(),
        overlay: false,
        control: None,
    });
    assert!(format!("{:#}", partial.err().unwrap()).contains("only its first 1 of 2 modules"));
    // and as the head that drafts live, when asked for a module its fit did not reach
    let live = |drafts| {
        let opts = MtpOptions {
            head: t.join("control"),
            drafts,
            rows: None,
            p_min: 0.0,
        };
        let nano = WeightsSource::Preset {
            name: "inkling-nano".into(),
            seed: 7,
        };
        format!("{:#}", opts.check(&nano).unwrap_err())
    };
    let e = live(2);
    assert!(e.contains("only its first 1 of 2 modules"), "{e}");
    // one draft reads module 0 alone: past that check, refused only as a preset's head
    let e = live(1);
    assert!(e.contains("only for a GGUF model"), "{e}");
}

#[test]
fn fit_is_deterministic_and_replay_has_teeth() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("corpus");
    nano_corpus(&dir);
    let model = ModelSource::Preset {
        name: "inkling-nano".into(),
        seed: 7,
    };
    let fit = |out: &Path, shuffle_targets: Option<u64>, control: Option<Control>| {
        fit_draft(&FitArgs {
            corpus: dir.clone(),
            out: out.to_path_buf(),
            model: model.clone(),
            tokenizer: None,
            control,
            fit: moefleet_harness::experiments::draft::fit::FitConfig {
                seed: 7,
                lambda: 1e-3,
                shuffle_targets,
                descent: moefleet_harness::experiments::draft::descent::DescentConfig {
                    steps: 60,
                    batch: 64,
                    lr_rel: 0.01,
                    seed: 7,
                },
                modules: None,
            },
        })
        .unwrap()
    };
    // a head alone; a head with its control (module 0 fitted) in one run; the control alone
    fit(&t.path().join("head"), None, None);
    fit(
        &t.path().join("head2"),
        None,
        Some(Control {
            out: t.path().join("control"),
            seed: 11,
            modules: Some(1),
        }),
    );
    fit(&t.path().join("control2"), Some(11), None);
    let (a, m) = io::load(&t.path().join("head")).unwrap();
    assert_eq!(
        a,
        io::load(&t.path().join("head2")).unwrap().0,
        "the fit is not deterministic"
    );
    check_control(t.path(), &dir, &a);
    assert_eq!(
        m.provenance["training_captures"].as_array().unwrap().len(),
        11 * 10 + 6
    );
    // a replay against another model's captures is refused
    let wrong = replay_draft(&ReplayArgs {
        corpus: dir.clone(),
        head: t.path().join("head"),
        out: t.path().join("wrong"),
        model: Some(ModelSource::Preset {
            name: "inkling-nano".into(),
            seed: 8,
        }),
        tokenizer: None,
        root: repo(),
        overlay: false,
        control: None,
    });
    assert!(format!("{:#}", wrong.err().unwrap()).contains("do not come from this model"));
    let out = t.path().join("replay");
    replay_draft(&ReplayArgs {
        corpus: dir.clone(),
        head: t.path().join("head"),
        out: out.clone(),
        model: None,
        tokenizer: None,
        root: repo(),
        overlay: true,
        control: Some(t.path().join("control")),
    })
    .unwrap();
    let an = Anchors::read_gz(&out.join("anchors.csv.gz")).unwrap();
    // anchors t in [P−1, T−3−k]: 63 − k per sequence and module (64 generated tokens)
    assert_eq!(an.len(), 24 * (63 + 62));
    let (fitted, targets) = first(&an, "fitted_teacher");
    let n = fitted.len();
    let rate =
        |p: &[u32], y: &[u32]| p.iter().zip(y).filter(|(a, b)| a == b).count() as f64 / n as f64;
    let (untrained, _) = first(&an, "untrained_teacher");
    let c_u = marginal_chance(&untrained, &targets);
    assert!(
        near_chance(rate(&untrained, &targets), c_u, n),
        "untrained head above chance"
    );
    let shuffled: Vec<u32> = (0..an.len())
        .filter(|&i| an.module[i] == 0)
        .map(|i| an.target_shuffled[i])
        .collect();
    let c_f = marginal_chance(&fitted, &targets);
    assert!(
        near_chance(rate(&fitted, &shuffled), c_f, n),
        "shuffled labels above chance"
    );
    assert!(
        !near_chance(rate(&fitted, &targets), c_f, n),
        "the fitted head learned nothing"
    );
    // the same fit to shuffled targets learns nothing
    let (control, _) = first(&an, "control_teacher");
    let c_c = marginal_chance(&control, &targets);
    assert!(
        near_chance(rate(&control, &targets), c_c, n),
        "the control head learned something"
    );
    // the reference heads replay module 0 alone (they are read as first drafts only): their
    // later drafts are marked and left out of chain.csv, the fitted head's are there
    for col in ["untrained_teacher", "control_teacher", "grids_teacher"] {
        let p = an.column(col).unwrap();
        assert!((0..an.len()).all(|i| (an.module[i] == 0) == (p[i] != NOT_REPLAYED)));
    }
    let chain = std::fs::read_to_string(out.join("chain.csv")).unwrap();
    let drafts = |col: &str| -> Vec<String> {
        chain
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{col},")))
            .map(|l| l.split(',').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(drafts("untrained_teacher"), ["1"]);
    assert_eq!(drafts("control_teacher"), ["1"]);
    assert_eq!(drafts("fitted_teacher"), ["1", "2"]);
    for f in [
        "mtp.csv",
        "chain.csv",
        "table6.md",
        "chain.md",
        "figure8.png",
        "figure8.svg",
    ] {
        assert!(out.join(f).exists(), "{f}");
    }
    // the tables are a function of the anchors alone
    moefleet_harness::experiments::draft::recheck::retabulate_matches(&out, &repo()).unwrap();
}

/// The committed `inkling-mini` replay: the references at chance, the fitted head above every
/// reference, and the chain ordering MEASUREMENTS.md §5 implies.
#[test]
fn committed_replay_has_teeth() {
    let p = repo().join("results/draft-inkling-mini/replay/anchors.csv.gz");
    let a = Anchors::read_gz(&p).unwrap();
    let (fitted, targets) = first(&a, "fitted_teacher");
    let n = fitted.len();
    assert_eq!(n, 36 * 159, "36 sequences of 160 generated tokens");
    let g = |c: &str| first_draft(&a, a.column(c).unwrap(), &a.target, None).rate();
    let (untrained, _) = first(&a, "untrained_teacher");
    assert!(near_chance(
        g("untrained_teacher"),
        marginal_chance(&untrained, &targets),
        n
    ));
    let shuffled = first_draft(
        &a,
        a.column("fitted_teacher").unwrap(),
        &a.target_shuffled,
        None,
    );
    assert!(near_chance(
        shuffled.rate(),
        marginal_chance(&fitted, &targets),
        n
    ));
    let (control, _) = first(&a, "control_teacher");
    assert!(near_chance(
        g("control_teacher"),
        marginal_chance(&control, &targets),
        n
    ));
    for reference in [
        "untrained_teacher",
        "control_teacher",
        "repeat_last",
        "bigram",
    ] {
        assert!(
            g("fitted_teacher") > g(reference),
            "fitted head not above {reference}"
        );
    }
    // no history can only lose: modules ≥ 1 pooled, and E
    let pooled = |c: &str| {
        let p = a.column(c).unwrap();
        let rows: Vec<usize> = (0..a.len()).filter(|&i| a.module[i] > 0).collect();
        rows.iter().filter(|&&i| p[i] == a.target[i]).count() as f64 / rows.len() as f64
    };
    assert!(pooled("fitted_no_context") <= pooled("fitted_teacher"));
    let e = |c: &str| expected_accepted(&chain(&a, a.column(c).unwrap()));
    assert!(e("fitted_teacher") >= e("fitted_self_fed"));
    assert!(e("fitted_no_context") <= e("fitted_teacher"));
}
