//! A made-up byte-level vocabulary: what each token type does, and every malformed piece of
//! metadata refused with a message naming it.

use super::*;

use moefleet_engine::gguf::{write, Value};

/// Control tokens 0-2, a user-defined token 3, the 256 byte characters, then merges spelling
/// "hello" and " hello".
fn vocab() -> GgufVocab {
    let mut alphabet: Vec<char> = tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet()
        .into_iter()
        .collect();
    alphabet.sort_unstable();
    // No token for the byte 0x06 (its character is U+0106), as in SmolLM2.
    alphabet.retain(|&c| c != '\u{106}');
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool call>"]
        .map(String::from)
        .to_vec();
    let mut types = vec![3, 3, 3, 4];
    tokens.extend(alphabet.iter().map(|c| c.to_string()));
    types.extend(std::iter::repeat_n(1, alphabet.len()));
    let merges = ["h e", "l l", "he ll", "hell o", "Ġ hello"];
    for m in merges {
        tokens.push(m.replace(' ', ""));
        types.push(1);
    }
    GgufVocab {
        model: "gpt2".into(),
        pre: Some("smollm".into()),
        tokens,
        token_types: Some(types),
        merges: Some(merges.map(String::from).to_vec()),
        bos: Some(1),
        eos: Some(2),
        add_bos: Some(true),
        chat_template: Some("{{ bos_token }}{{ messages[0].content }}".into()),
        ..GgufVocab::default()
    }
}

#[test]
fn made_up_vocabulary_encodes_and_decodes() {
    let v = vocab();
    let tk = TextTokenizer::from_vocab(&v).unwrap();
    let id = |t: &str| tk.token_to_id(t).unwrap();
    let hello = id("hello");
    let sp_hello = id("Ġhello");
    assert_eq!(tk.encode("hello hello").unwrap(), [hello, sp_hello]);
    // Control tokens are parsed out, or read as text; the user-defined one always parsed out.
    assert_eq!(
        tk.encode("<|im_start|>hello<tool call><|im_end|>").unwrap(),
        [1, hello, 3, 2]
    );
    let literal = tk.encode_literal("<|im_start|>hello<tool call>").unwrap();
    assert_eq!(&literal[literal.len() - 2..], [hello, 3]);
    assert!(literal.len() > 4);
    // BOS first, as the file asks; the template's BOS text is then stripped.
    assert_eq!(tk.encode_prompt("hello").unwrap(), [1, hello]);
    let chat = tk.chat_template().unwrap().unwrap();
    assert_eq!(
        chat.render(&[("user".into(), "hi".into())], true).unwrap(),
        "hi"
    );
    // Control tokens print nothing (so an end-of-generation token is never shown), unless asked.
    let ids = [1, hello, 3, sp_hello, 2, 0];
    assert_eq!(tk.decode(&ids).unwrap(), "hello<tool call> hello");
    assert_eq!(
        tk.decode_with_special(&ids).unwrap(),
        "<|im_start|>hello<tool call> hello<|im_end|><|endoftext|>"
    );
    assert_eq!(tk.eog_ids(), [0, 2]);
    assert!(tk.is_eog(2) && !tk.is_eog(1));
    let e = tk.decode(&[9999]).unwrap_err().to_string();
    assert!(e.contains("9999"), "{e}");
    // A character without a token is dropped, and the characters beside it do not merge.
    assert_eq!(tk.encode("h\u{6}e").unwrap(), [id("h"), id("e")]);
    assert_eq!(tk.vocab_size(), v.tokens.len());
    // A character split across byte tokens decodes as U+FFFD until completed.
    let ids = tk.encode("é").unwrap();
    assert_eq!(ids.len(), 2);
    assert_eq!(tk.decode(&ids[..1]).unwrap(), "\u{fffd}");
    assert_eq!(tk.decode(&ids).unwrap(), "é");
}

fn refused(v: &GgufVocab) -> String {
    match TextTokenizer::from_vocab(v) {
        Ok(_) => panic!("accepted {v:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn malformed_metadata_is_refused_clearly() {
    let cases: Vec<(&str, GgufVocab, &str)> = vec![
        (
            "no merges",
            GgufVocab {
                merges: None,
                ..vocab()
            },
            "tokenizer.ggml.merges is missing",
        ),
        (
            "unknown pre-tokenizer",
            GgufVocab {
                pre: Some("nonesuch".into()),
                ..vocab()
            },
            "tokenizer.ggml.pre 'nonesuch'",
        ),
        (
            "SentencePiece",
            GgufVocab {
                model: "llama".into(),
                ..vocab()
            },
            "'llama' (SentencePiece) is not supported",
        ),
        (
            "types not one per token",
            GgufVocab {
                token_types: Some(vec![1; 10]),
                ..vocab()
            },
            "token_type has 10 entries for 264 tokens",
        ),
        (
            "BOS outside",
            GgufVocab {
                bos: Some(264),
                ..vocab()
            },
            "bos_token_id 264 is outside the vocabulary of 264 tokens",
        ),
        (
            "EOT outside",
            GgufVocab {
                eot: Some(70000),
                ..vocab()
            },
            "eot_token_id 70000 is outside",
        ),
        (
            "merge without a space",
            GgufVocab {
                merges: Some(vec!["hello".into()]),
                ..vocab()
            },
            "merges entry 0 'hello' is not two tokens",
        ),
        (
            "merge of unknown tokens",
            GgufVocab {
                merges: Some(vec!["x yz".into()]),
                ..vocab()
            },
            "'yz' is not a token",
        ),
        (
            "no tokens",
            GgufVocab {
                tokens: vec![],
                token_types: None,
                ..vocab()
            },
            "tokenizer.ggml.tokens is empty",
        ),
    ];
    for (what, v, want) in cases {
        let e = refused(&v);
        assert!(e.contains(want), "{what}: {e}");
    }
    let mut dup = vocab();
    dup.tokens[5] = dup.tokens[6].clone();
    let e = refused(&dup);
    assert!(
        e.contains("token 6") && e.contains("repeats token 5"),
        "{e}"
    );
}

/// Through a written file: the keys are read, and a key of the wrong type is named.
#[test]
fn from_gguf_reads_the_keys_and_names_wrong_types() {
    let v = vocab();
    let strs = |s: &[String]| Value::Array(s.iter().map(|t| Value::Str(t.clone())).collect());
    let mut meta = vec![
        (
            "tokenizer.ggml.model".to_string(),
            Value::Str("gpt2".into()),
        ),
        (
            "tokenizer.ggml.pre".to_string(),
            Value::Str("smollm".into()),
        ),
        ("tokenizer.ggml.tokens".to_string(), strs(&v.tokens)),
        (
            "tokenizer.ggml.token_type".to_string(),
            Value::Array(
                v.token_types
                    .clone()
                    .unwrap()
                    .into_iter()
                    .map(Value::I32)
                    .collect(),
            ),
        ),
        (
            "tokenizer.ggml.merges".to_string(),
            strs(v.merges.as_ref().unwrap()),
        ),
        ("tokenizer.ggml.bos_token_id".to_string(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".to_string(), Value::U32(2)),
        (
            "tokenizer.ggml.add_bos_token".to_string(),
            Value::Bool(true),
        ),
        (
            "tokenizer.chat_template".to_string(),
            Value::Str(v.chat_template.clone().unwrap()),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let open = |meta: &[(String, Value)]| {
        let p = dir.path().join("vocab.gguf");
        std::fs::write(&p, write::to_bytes(meta, &[]).unwrap()).unwrap();
        GgufVocab::from_gguf(&Gguf::open(&p).unwrap())
    };
    assert_eq!(open(&meta).unwrap(), v);
    meta[5].1 = Value::Str("one".into());
    let e = open(&meta).unwrap_err().to_string();
    assert!(e.contains("tokenizer.ggml.bos_token_id"), "{e}");
    meta.remove(2);
    let e = open(&meta).unwrap_err().to_string();
    assert!(
        e.contains("tokenizer.ggml.tokens") && e.contains("missing"),
        "{e}"
    );
}
