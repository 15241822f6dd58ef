//! The pre-tokenizers of byte-level BPE vocabularies, by the name a GGUF file gives in
//! `tokenizer.ggml.pre`, as llama.cpp (`src/llama-vocab.cpp`, `llm_tokenizer_bpe`) defines them:
//! a list of regexes applied in turn, each splitting every piece the one before left into its
//! matches and the text between them (`unicode_regex_split`), then every piece mapped to GPT-2's
//! byte alphabet. Here each list is a `tokenizers` sequence: one `Split` (behaviour `Isolated`:
//! matches and gaps both become pieces) per regex, then `ByteLevel` without its own regex.
//!
//! The regexes are llama.cpp's, in the form its hand-written matchers (`unicode.cpp`,
//! `unicode_regex_split_custom_*`) implement: `(?i:'s|...)` becomes `'[sS]|...` (a Unicode
//! case-insensitive `s` would also match U+017F), and the GPT-2 regex keeps the final `|\s+`
//! its matcher has. Unicode classes are llama.cpp's: its tables (`unicode-data.cpp`) are of
//! Unicode 15.1, so a letter, number, mark or punctuation character here is one assigned by 15.1
//! (`unicode_class`); a character assigned later (Egyptian hieroglyphs of 16.0) falls with the
//! unassigned ones among "other", as there. Refused: every name not listed here, by name.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

use crate::error::{Error, Result};

/// GPT-2: contractions, letter runs, number runs, other runs (each with one leading space),
/// whitespace not before a non-space, whitespace.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Llama 3: contractions (either case), letter runs after one non-letter, numbers in threes,
/// other runs with their trailing newlines, newline runs, whitespace.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5: Qwen2's with combining marks inside letter runs.
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// One digit (StarCoder's and SmolLM's first split).
const DIGIT: &str = r"\p{N}";

/// The Unicode version of llama.cpp's character tables.
const UNICODE_AGE: &str = "15.1";

/// The regex class of general category `cat` ("L", "N", "M", "P") as llama.cpp's tables have it:
/// the category, of characters assigned by `UNICODE_AGE`. It nests inside a bracket class.
pub fn unicode_class(cat: &str) -> String {
    format!(r"[\p{{{cat}}}&&\p{{Age={UNICODE_AGE}}}]")
}

/// `re` with each `\p{L}`, `\p{N}`, `\p{M}`, `\p{P}` made `unicode_class`.
fn with_llama_classes(re: &str) -> String {
    ["L", "N", "M", "P"].iter().fold(re.to_string(), |r, cat| {
        r.replace(&format!(r"\p{{{cat}}}"), &unicode_class(cat))
    })
}

/// How a vocabulary's text is cut before BPE, and the two flags llama.cpp ties to the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreTokenizerSpec {
    /// The llama.cpp pre-tokenizer type (`LLAMA_VOCAB_PRE_TYPE_*`, lower case).
    pub kind: &'static str,
    /// Applied in order.
    pub regexes: &'static [&'static str],
    /// A piece that is a whole token is that token, merges or not (llama.cpp `ignore_merges`).
    pub ignore_merges: bool,
    /// `add_bos` when the file does not say (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
}

const fn spec(
    kind: &'static str,
    regexes: &'static [&'static str],
    ignore_merges: bool,
    add_bos: bool,
) -> PreTokenizerSpec {
    PreTokenizerSpec {
        kind,
        regexes,
        ignore_merges,
        add_bos,
    }
}

/// `tokenizer.ggml.pre` names, each with what llama.cpp makes of it.
const NAMES: &[(&[&str], PreTokenizerSpec)] = &[
    (
        &["default"],
        spec(
            "default",
            &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
            false,
            false,
        ),
    ),
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        spec("llama3", &[LLAMA3], true, true),
    ),
    (
        &["dbrx", "smaug-bpe"],
        spec("dbrx", &[LLAMA3], false, false),
    ),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
            "grok-2",
        ],
        spec("qwen2", &[QWEN2], false, false),
    ),
    (&["qwen35"], spec("qwen35", &[QWEN35], false, false)),
    (
        &[
            "smollm",
            "starcoder",
            "refact",
            "command-r",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        spec("starcoder", &[DIGIT, GPT2], false, false),
    ),
    (
        &[
            "gpt-2",
            "phi-2",
            "gigachat",
            "a.x-4.0",
            "mellum",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
            "exaone4",
        ],
        spec("gpt2", &[GPT2], false, false),
    ),
];

/// What `tokenizer.ggml.pre` names; a missing name is llama.cpp's `default` (which it warns
/// about: such files were converted before the key existed).
pub fn lookup(pre: Option<&str>) -> Result<PreTokenizerSpec> {
    let name = pre.unwrap_or("default");
    NAMES
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|(_, s)| *s)
        .ok_or_else(|| {
            let known: Vec<&str> = NAMES.iter().flat_map(|(n, _)| n.iter().copied()).collect();
            Error::Tokenizer(format!(
                "tokenizer.ggml.pre '{name}' is not a pre-tokenizer this engine supports (it \
                 supports {})",
                known.join(", ")
            ))
        })
}

/// The `tokenizers` pre-tokenizer of `spec`: its splits, then the byte alphabet.
pub fn pre_tokenizer(spec: &PreTokenizerSpec) -> Result<PreTokenizerWrapper> {
    let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(spec.regexes.len() + 1);
    for re in spec.regexes {
        let split = Split::new(
            SplitPattern::Regex(with_llama_classes(re)),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| Error::Tokenizer(format!("pre-tokenizer {} regex {re}: {e}", spec.kind)))?;
        steps.push(split.into());
    }
    steps.push(ByteLevel::new(false, false, false).into());
    Ok(Sequence::new(steps).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

    fn pieces(pre: &str, text: &str) -> Vec<String> {
        let p = pre_tokenizer(&lookup(Some(pre)).unwrap()).unwrap();
        let mut s = PreTokenizedString::from(text);
        p.pre_tokenize(&mut s).unwrap();
        s.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(_, (a, b), _)| text[a..b].to_string())
            .collect()
    }

    #[test]
    fn splits_follow_llama_cpp() {
        // SmolLM: every digit alone, then GPT-2's runs.
        assert_eq!(
            pieces("smollm", "abc 12345 it's  ok"),
            ["abc", " ", "1", "2", "3", "4", "5", " it", "'s", " ", " ok"]
        );
        // Llama 3: numbers in threes, newlines kept with the punctuation before them.
        assert_eq!(
            pieces("llama-bpe", "x=1234567;\n\nIT'S"),
            ["x", "=", "123", "456", "7", ";\n\n", "IT", "'S"]
        );
        // Qwen2: single digits; a letter run takes one leading non-letter.
        assert_eq!(pieces("qwen2", "(ab 12"), ["(ab", " ", "1", "2"]);
    }

    #[test]
    fn unknown_names_are_refused_by_name() {
        let e = lookup(Some("deepseek-llm")).unwrap_err().to_string();
        assert!(e.contains("'deepseek-llm'") && e.contains("smollm"), "{e}");
        assert_eq!(lookup(None).unwrap().kind, "default");
    }
}
