//! The tokenizer a GGUF file carries. `GgufVocab` (`vocab`) holds the `tokenizer.*` metadata as
//! stored; `build` checks it and makes the `tokenizers` BPE, pre-tokenizer (`pre`) and special
//! tokens (`special`) that give the ids llama.cpp gives for the same text, and the pieces decoding
//! prints.
//!
//! Supported: `tokenizer.ggml.model` "gpt2" (byte-level BPE) with the pre-tokenizers `pre` lists.
//! Refused, each by name: other models ("llama" is SentencePiece, "bert" WordPiece, ...), other
//! pre-tokenizers, missing merges, a merge without a space or naming tokens the vocabulary lacks,
//! token types not one per token, duplicate tokens, special ids outside the vocabulary.
//!
//! How llama.cpp's tokenisation maps onto `tokenizers`:
//! - control and unknown tokens are special added tokens (split out of text unless
//!   `encode_literal`), user-defined tokens plain added tokens (always split out), longest first;
//! - `ignore_merges` (Llama 3) is the BPE option of the same name;
//! - an empty token text is `[EMPTY_<id>]`, as llama.cpp renames it;
//! - a character the vocabulary has no token for is dropped after merging (`UNKNOWN_CHAR`).
//!
//! Decoding follows `llama_vocab::token_to_piece`: control and unknown tokens print nothing
//! (their text with `special`), user-defined tokens their text, normal tokens their bytes through
//! the GPT-2 byte alphabet, byte tokens (`<0xXX>`) their byte, unused and undefined ones nothing.

use std::collections::HashMap;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::{AddedToken, Tokenizer};

use super::special::{self, attr};
pub use super::vocab::GgufVocab;
use super::{pre, SpecialTokens};
use crate::error::{Error, Result};

/// What one id prints: its bytes, and whether only a decode with special tokens prints them.
#[derive(Debug, Clone)]
pub struct Piece {
    bytes: Box<[u8]>,
    special: bool,
}

/// A checked vocabulary, made into what `TextTokenizer` keeps.
pub struct Built {
    pub tokenizer: Tokenizer,
    pub special: SpecialTokens,
    pub pieces: Vec<Piece>,
    /// The id `tokenizer` gives a character the vocabulary lacks; encoding drops it.
    pub unknown: u32,
}

/// The BPE's stand-in for a character the vocabulary lacks (SmolLM2 has no token for the byte
/// 0x06). llama.cpp drops such a character after merging, so its neighbours never merge across
/// it; `tokenizers` without an unknown token would drop it before merging and let them. As the
/// unknown token it stays in place during merges and is removed after. Its text holds U+0000,
/// which no byte-level piece contains.
const UNKNOWN_CHAR: &str = "\u{0}moefleet:unknown-character\u{0}";

/// Check `v` and build its tokenizer.
pub fn build(v: &GgufVocab) -> Result<Built> {
    let bad = |m: String| Error::Tokenizer(m);
    match v.model.as_str() {
        "gpt2" => {}
        "llama" => {
            return Err(bad(
                "tokenizer.ggml.model 'llama' (SentencePiece) is not supported: only 'gpt2' \
                 (byte-level BPE) is"
                    .into(),
            ))
        }
        m => {
            return Err(bad(format!(
                "tokenizer.ggml.model '{m}' is not supported: only 'gpt2' (byte-level BPE) is"
            )))
        }
    }
    let pre = pre::lookup(v.pre.as_deref())?;
    let n = v.tokens.len();
    if n == 0 {
        return Err(bad("tokenizer.ggml.tokens is empty".into()));
    }
    let n32 = u32::try_from(n).map_err(|_| bad(format!("{n} tokens do not fit u32 ids")))?;
    let texts: Vec<String> = v
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                t.clone()
            }
        })
        .collect();
    let mut index: HashMap<&str, u32> = HashMap::with_capacity(n);
    for (i, t) in texts.iter().enumerate() {
        if let Some(first) = index.insert(t.as_str(), i as u32) {
            return Err(bad(format!(
                "tokenizer.ggml.tokens: token {i} '{t}' repeats token {first}"
            )));
        }
    }
    let mut attrs: Vec<u32> = match &v.token_types {
        None => vec![attr::NORMAL; n],
        Some(t) if t.len() != n => {
            return Err(bad(format!(
                "tokenizer.ggml.token_type has {} entries for {n} tokens",
                t.len()
            )))
        }
        Some(t) => t.iter().map(|&t| special::attr_of_type(t)).collect(),
    };
    for (key, id) in [
        ("bos_token_id", v.bos),
        ("eos_token_id", v.eos),
        ("eot_token_id", v.eot),
        ("eom_token_id", v.eom),
        ("fim_pad_token_id", v.fim_pad),
        ("fim_rep_token_id", v.fim_rep),
        ("fim_sep_token_id", v.fim_sep),
    ] {
        if let Some(id) = id.filter(|&id| id >= n32) {
            return Err(bad(format!(
                "tokenizer.ggml.{key} {id} is outside the vocabulary of {n} tokens"
            )));
        }
    }
    let merges = parse_merges(v.merges.as_deref(), &index)?;

    let special = special::resolve(v, &index, &mut attrs, pre.add_bos);
    let mut vocab: Vocab = index.iter().map(|(t, &i)| (t.to_string(), i)).collect();
    vocab.insert(UNKNOWN_CHAR.to_string(), n32);
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .unk_token(UNKNOWN_CHAR.to_string())
        .ignore_merges(pre.ignore_merges)
        .build()
        .map_err(|e| bad(format!("BPE from tokenizer.ggml.tokens and merges: {e}")))?;
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(pre::pre_tokenizer(&pre)?));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    let added = |mask: u32, special: bool| -> Vec<AddedToken> {
        texts
            .iter()
            .zip(&attrs)
            .filter(|(_, &a)| a & mask != 0)
            .map(|(t, _)| AddedToken::from(t.clone(), special))
            .collect()
    };
    tokenizer.add_special_tokens(&added(attr::CONTROL | attr::UNKNOWN, true));
    // User-defined tokens that are also control tokens are already added.
    tokenizer.add_tokens(
        &added(attr::USER_DEFINED, false)
            .into_iter()
            .filter(|t| attrs[index[t.content.as_str()] as usize] & attr::CONTROL == 0)
            .collect::<Vec<_>>(),
    );
    let pieces = texts
        .iter()
        .zip(&attrs)
        .map(|(t, &a)| piece(t, a))
        .collect();
    Ok(Built {
        tokenizer,
        special,
        pieces,
        unknown: n32,
    })
}

/// `"left right"` strings as pairs, in rank order; a pair seen before keeps its first rank (as
/// llama.cpp's `bpe_ranks.emplace`).
fn parse_merges(
    merges: Option<&[String]>,
    index: &HashMap<&str, u32>,
) -> Result<Vec<(String, String)>> {
    let merges = merges.ok_or_else(|| {
        Error::Tokenizer("tokenizer.ggml.merges is missing (a BPE vocabulary needs it)".into())
    })?;
    let mut seen = std::collections::HashSet::with_capacity(merges.len());
    let mut out = Vec::with_capacity(merges.len());
    for (i, m) in merges.iter().enumerate() {
        // llama.cpp splits at the first space after the first byte, so a left part may be a space.
        let split = m.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1);
        let Some(at) = split else {
            return Err(Error::Tokenizer(format!(
                "tokenizer.ggml.merges entry {i} '{m}' is not two tokens separated by a space"
            )));
        };
        let (a, b) = (&m[..at], &m[at + 1..]);
        for part in [a, b, &format!("{a}{b}")] {
            if !index.contains_key(part) {
                return Err(Error::Tokenizer(format!(
                    "tokenizer.ggml.merges entry {i} '{m}': '{part}' is not a token"
                )));
            }
        }
        if seen.insert((a, b)) {
            out.push((a.to_string(), b.to_string()));
        }
    }
    Ok(out)
}

/// What token `text` with attributes `a` prints (`llama_vocab::token_to_piece`).
fn piece(text: &str, a: u32) -> Piece {
    let (bytes, special) = if a & (attr::UNKNOWN | attr::CONTROL) != 0 {
        (text.as_bytes().to_vec(), true)
    } else if a & attr::USER_DEFINED != 0 {
        (text.as_bytes().to_vec(), false)
    } else if a & attr::NORMAL != 0 {
        (byte_decode(text), false)
    } else if a & attr::BYTE != 0 {
        // "<0xXX>"
        let b = text
            .get(3..5)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or(0);
        (vec![b], false)
    } else {
        (Vec::new(), false)
    };
    Piece {
        bytes: bytes.into_boxed_slice(),
        special,
    }
}

/// GPT-2's byte alphabet: the character that stands for each byte (printable Latin-1 bytes
/// stand for themselves, the rest for U+0100 onwards in byte order).
fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let keeps = matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff);
        let c = if keeps {
            b as u32
        } else {
            next += 1;
            next - 1
        };
        out[b as usize] = char::from_u32(c).unwrap_or('\0');
    }
    out
}

/// A normal token's bytes: each character of the byte alphabet its byte; any other character
/// as llama.cpp's `llama_decode_text` writes it (`[UNK_BYTE_0x<utf-8 hex><token>]`).
fn byte_decode(text: &str) -> Vec<u8> {
    static BYTES: std::sync::OnceLock<HashMap<char, u8>> = std::sync::OnceLock::new();
    let map = BYTES.get_or_init(|| {
        byte_chars()
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect()
    });
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match map.get(&c) {
            Some(&b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// The text of `ids`: their pieces joined, control pieces only `with_special`; bytes that are not
/// UTF-8 (a character split across tokens) become U+FFFD.
pub fn decode(pieces: &[Piece], ids: &[u32], with_special: bool) -> Result<String> {
    let mut bytes = Vec::new();
    for &id in ids {
        let p = pieces.get(id as usize).ok_or_else(|| {
            Error::Tokenizer(format!(
                "token id {id} is outside the vocabulary of {} tokens",
                pieces.len()
            ))
        })?;
        if with_special || !p.special {
            bytes.extend_from_slice(&p.bytes);
        }
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
