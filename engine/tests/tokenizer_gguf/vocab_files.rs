//! llama.cpp's own tokenizer test files: `models/ggml-vocab-<name>.gguf` (a vocabulary and no
//! weights), `.inp` (texts separated by `\n__ggml_vocab_test__\n`) and `.out` (the ids llama.cpp's
//! `test-tokenizer-0` expects, special tokens not parsed, nothing added).

use super::*;

/// Files this engine must refuse, and a word its message must hold.
const REFUSED: &[(&str, &str)] = &[
    ("baichuan", "'llama' (SentencePiece)"),
    ("bert-bge", "'bert'"),
    ("deepseek-coder", "'deepseek-coder'"),
    ("deepseek-llm", "'deepseek-llm'"),
    ("falcon", "'falcon'"),
    ("gemma-4", "'gemma4'"),
    ("llama-spm", "'llama' (SentencePiece)"),
    ("nomic-bert-moe", "'t5'"),
    ("phi-3", "'llama' (SentencePiece)"),
];

fn cases(inp: &Path, out: &Path) -> Vec<(String, Vec<u32>)> {
    let raw = std::fs::read_to_string(inp).unwrap();
    let sep = "\n__ggml_vocab_test__\n";
    let body = raw.strip_suffix(sep).unwrap_or(&raw);
    let texts: Vec<&str> = body.split(sep).collect();
    let expected: Vec<Vec<u32>> = std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), expected.len(), "{}", inp.display());
    texts
        .into_iter()
        .map(str::to_string)
        .zip(expected)
        .collect()
}

#[test]
fn vocab_files_match_llama_cpp_expected_ids() {
    let dir = peer_cache().join(LLAMA_CPP).join("models");
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
            .collect(),
        Err(_) => {
            return common::skip(
                "vocab_files_match_llama_cpp_expected_ids",
                "MOEFLEET_REQUIRE_GGUF_FILES",
                &format!(
                    "{} is absent (`make peer` unpacks llama.cpp there)",
                    dir.display()
                ),
            )
        }
    };
    files.sort();
    let t0 = Instant::now();
    let (mut compared, mut refused) = (Vec::new(), Vec::new());
    for path in &files {
        let name = path
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_start_matches("ggml-vocab-")
            .to_string();
        let v = GgufVocab::from_gguf(&Gguf::open(path).unwrap()).unwrap();
        let tk = match TextTokenizer::from_vocab(&v) {
            Ok(tk) => tk,
            Err(e) => {
                let why = REFUSED.iter().find(|(n, _)| *n == name);
                let msg = e.to_string();
                assert!(
                    why.is_some_and(|(_, w)| msg.contains(w)),
                    "{name} refused: {msg}"
                );
                refused.push(name);
                continue;
            }
        };
        assert!(
            !REFUSED.iter().any(|(n, _)| *n == name),
            "{name} should be refused"
        );
        let inp = path.with_extension("gguf.inp");
        if !inp.is_file() {
            continue;
        }
        let cases = cases(&inp, &path.with_extension("gguf.out"));
        for (text, want) in &cases {
            let got = tk.encode_literal(text).unwrap();
            assert_eq!(&got, want, "{name}: {text:?}");
            assert_eq!(tk.decode(&got).unwrap(), *text, "{name}: {text:?} decoded");
        }
        compared.push(format!("{name} ({} texts)", cases.len()));
    }
    eprintln!(
        "vocab_files_match_llama_cpp_expected_ids: identical ids for {}; refused {}; {:.1} s",
        compared.join(", "),
        refused.join(", "),
        t0.elapsed().as_secs_f64()
    );
    assert!(compared.len() >= 8, "{compared:?}");
}

/// llama.cpp's character flags (`src/unicode-data.cpp`): each codepoint's category bits, and
/// the whitespace set.
fn llama_flags(src: &str) -> (Vec<u16>, Vec<u32>) {
    let ranges = src
        .split("unicode_ranges_flags = {")
        .nth(1)
        .unwrap()
        .split("};")
        .next()
        .unwrap();
    let hex = |s: &str| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap();
    let starts: Vec<(u32, u16)> = ranges
        .lines()
        .filter_map(|l| l.trim().strip_prefix('{'))
        .map(|l| {
            let mut f = l.trim_end_matches(['}', ',']).split(',');
            (hex(f.next().unwrap()), hex(f.next().unwrap()) as u16)
        })
        .collect();
    let mut flags = vec![0u16; 0x110000];
    for w in starts.windows(2) {
        for cp in w[0].0..w[1].0 {
            flags[cp as usize] = w[0].1;
        }
    }
    let ws = src
        .split("unicode_set_whitespace = {")
        .nth(1)
        .unwrap()
        .split("};")
        .next()
        .unwrap()
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(hex)
        .collect();
    (flags, ws)
}

/// The codepoints `pattern` matches (one pass of a `Split` that removes the matches).
fn members(pattern: &str, all: &str) -> std::collections::HashSet<u32> {
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
    let split = Split::new(
        SplitPattern::Regex(format!("(?:{pattern})+")),
        tokenizers::SplitDelimiterBehavior::Removed,
        false,
    )
    .unwrap();
    let mut s = PreTokenizedString::from(all);
    split.pre_tokenize(&mut s).unwrap();
    let kept: std::collections::HashSet<u32> = s
        .get_splits(OffsetReferential::Original, OffsetType::Byte)
        .iter()
        .flat_map(|(t, _, _)| t.chars().map(|c| c as u32))
        .collect();
    all.chars()
        .map(|c| c as u32)
        .filter(|c| !kept.contains(c))
        .collect()
}

/// The regex classes the pre-tokenizers use hold exactly the characters llama.cpp's tables flag
/// (letters, numbers, marks, punctuation, whitespace), over all of Unicode.
#[test]
fn unicode_classes_match_llama_cpp_tables() {
    let path = peer_cache().join(LLAMA_CPP).join("src/unicode-data.cpp");
    let Ok(src) = std::fs::read_to_string(&path) else {
        return common::skip(
            "unicode_classes_match_llama_cpp_tables",
            "MOEFLEET_REQUIRE_GGUF_FILES",
            &format!(
                "{} is absent (`make peer` unpacks llama.cpp there)",
                path.display()
            ),
        );
    };
    let (flags, ws) = llama_flags(&src);
    let all: String = (0..0x110000u32).filter_map(char::from_u32).collect();
    use moefleet_engine::tokenizer::pre::unicode_class;
    for (cat, bit) in [("L", 0x4u16), ("N", 0x2), ("M", 0x10), ("P", 0x20)] {
        let ours = members(&unicode_class(cat), &all);
        assert!(ours.len() > 500, "\\p{{{cat}}}: {} members", ours.len());
        let diff: Vec<String> = all
            .chars()
            .map(|c| c as u32)
            .filter(|&c| ours.contains(&c) != (flags[c as usize] & bit != 0))
            .map(|c| format!("U+{c:04X}"))
            .collect();
        assert!(
            diff.is_empty(),
            "\\p{{{cat}}}: {} differ: {:?}",
            diff.len(),
            &diff[..diff.len().min(20)]
        );
    }
    let mut ours: Vec<u32> = members(r"\s", &all).into_iter().collect();
    let mut theirs = ws;
    ours.sort_unstable();
    theirs.sort_unstable();
    assert_eq!(ours, theirs, "whitespace");
}
