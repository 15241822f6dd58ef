//! The committed tokenizer: its vocabulary is the scaled presets' vocabulary, it round-trips text,
//! and `moefleet tokenizer` regenerates it byte for byte from the shipped corpus.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use moefleet_engine::model::config::TOKENIZER_VOCAB;
use moefleet_engine::model::ModelConfig;
use moefleet_engine::tokenizer::{self, TextTokenizer};

fn corpus() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../workloads/corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    files
}

#[test]
fn vocabulary_is_the_scaled_presets_vocabulary() {
    let tk = TextTokenizer::load(&tokenizer::default_path()).unwrap();
    assert_eq!(tk.vocab_size(), TOKENIZER_VOCAB);
    assert!((4000..=32000).contains(&tk.vocab_size()));
    for p in ["inkling-mini", "inkling-nano"] {
        let c = ModelConfig::preset(p).unwrap();
        assert_eq!(c.vocab_size, tk.vocab_size());
        assert_eq!(c.vocab_padded % 64, 0);
        assert!(
            c.vocab_padded > c.vocab_size,
            "padding exercises the logit slice"
        );
    }
    assert_eq!(tk.end_of_text(), Some(0));
}

#[test]
fn text_round_trips_and_compresses() {
    let tk = TextTokenizer::load(&tokenizer::default_path()).unwrap();
    let text = "The scheduler admits 176 streams; each decode step reads eight experts.\nZürich café — 3.5 °C!";
    let ids = tk.encode(text).unwrap();
    assert_eq!(tk.decode(&ids).unwrap(), text);
    assert!(
        ids.len() < text.len() / 2,
        "{} tokens for {} bytes",
        ids.len(),
        text.len()
    );
}

#[test]
fn training_regenerates_the_committed_file() {
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("tokenizer.json");
    let n = tokenizer::train(&corpus(), 8000, &path).unwrap();
    assert_eq!(n, TOKENIZER_VOCAB);
    let committed = std::fs::read(tokenizer::default_path()).unwrap();
    assert!(
        std::fs::read(&path).unwrap() == committed,
        "retrained tokenizer differs from workloads/tokenizer.json"
    );
}

#[test]
fn embedded_tokenizer_is_the_committed_file() {
    let file = TextTokenizer::load(&tokenizer::default_path()).unwrap();
    let embedded = TextTokenizer::embedded().unwrap();
    let text = "Role 0 admits the prompt in windows of 64 positions; the last role samples.";
    assert_eq!(file.vocab_size(), embedded.vocab_size());
    assert_eq!(file.encode(text).unwrap(), embedded.encode(text).unwrap());
    assert_eq!(
        TextTokenizer::open(None).unwrap().vocab_size(),
        TOKENIZER_VOCAB
    );
}
