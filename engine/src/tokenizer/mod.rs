//! Text to token ids and back. Two sources, one type (`TextTokenizer`):
//!
//! - The project's own byte-level BPE, trained by `moefleet tokenizer` from the text the project
//!   ships (`workloads/corpus/`), saved as `workloads/tokenizer.json` and loaded with the
//!   `tokenizers` crate. The scaled presets use its vocabulary (`config::TOKENIZER_VOCAB`). The
//!   file is compiled into the binary (`TextTokenizer::embedded`), so a binary copied to another
//!   host or installed with `cargo install` needs no source tree; `--tokenizer FILE` overrides it.
//! - The tokenizer a GGUF file carries (`gguf`: its vocabulary, merges, pre-tokenizer, special
//!   tokens and token types), built to give the ids llama.cpp gives, and its chat template
//!   (`chat`).
//!
//! Encoding parses special-token text (`<|im_start|>` becomes one id), as llama-server does for
//! prompts; `encode_literal` does not. Decoding leaves control tokens out, as a served stream
//! does: the end-of-generation token that stops a stream is never printed.

pub mod chat;
pub mod gguf;
pub mod pre;
mod special;
mod vocab;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, Tokenizer, TokenizerBuilder};

use crate::error::{Error, Result};

pub use chat::ChatTemplate;
pub use gguf::GgufVocab;

/// The end-of-text special token (id 0).
pub const END_OF_TEXT: &str = "<|endoftext|>";

/// `workloads/tokenizer.json` of this source tree: where `moefleet tokenizer` writes it and what
/// the tests compare with. Binaries read the embedded copy instead.
pub fn default_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../workloads/tokenizer.json")
}

/// The project's tokenizer as compiled into this binary.
const EMBEDDED: &[u8] = include_bytes!("../../../workloads/tokenizer.json");

/// How a record names the tokenizer `path` chose (`None`: the embedded one).
pub fn describe(path: Option<&Path>) -> String {
    path.map_or_else(
        || "embedded workloads/tokenizer.json".to_string(),
        |p| p.display().to_string(),
    )
}

/// The special ids a tokenizer knows and what encoding a prompt adds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence.
    pub eos: Option<u32>,
    /// End of turn (chat models), when the vocabulary has one.
    pub eot: Option<u32>,
    /// Every id that ends generation (eos, eot and what llama.cpp treats alike), ascending.
    pub eog: Vec<u32>,
    /// `encode_prompt` starts with `bos`.
    pub add_bos: bool,
    /// `encode_prompt` ends with `eos`.
    pub add_eos: bool,
}

pub struct TextTokenizer {
    /// Splits special-token text out (parse_special on).
    inner: Tokenizer,
    /// The same with control tokens read as plain text; made on first use of `encode_literal`.
    literal: OnceLock<Tokenizer>,
    special: SpecialTokens,
    /// GGUF vocabularies: each id's bytes as llama.cpp prints them (`gguf::Piece`); decoding reads
    /// these instead of the `tokenizers` decoder, which knows no token types.
    pieces: Option<Vec<gguf::Piece>>,
    /// The file's `tokenizer.chat_template`.
    chat_template: Option<String>,
    /// That template parsed, on first use (every chat request renders it; parsing is once).
    chat: OnceLock<std::result::Result<Option<ChatTemplate>, String>>,
    /// GGUF vocabularies: the id `inner` gives a character the vocabulary lacks (the number of
    /// tokens), removed from every encoding.
    unknown: Option<u32>,
}

impl TextTokenizer {
    fn from_json_tokenizer(inner: Tokenizer) -> Self {
        let eot = inner.token_to_id(END_OF_TEXT);
        TextTokenizer {
            inner,
            literal: OnceLock::new(),
            special: SpecialTokens {
                bos: None,
                eos: eot,
                eot,
                eog: eot.into_iter().collect(),
                add_bos: false,
                add_eos: false,
            },
            pieces: None,
            chat_template: None,
            chat: OnceLock::new(),
            unknown: None,
        }
    }

    pub fn load(path: &Path) -> Result<Self> {
        let inner = Tokenizer::from_file(path)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(Self::from_json_tokenizer(inner))
    }

    /// The project's tokenizer, compiled into the binary.
    pub fn embedded() -> Result<Self> {
        let inner = Tokenizer::from_bytes(EMBEDDED)
            .map_err(|e| Error::Tokenizer(format!("the embedded tokenizer: {e}")))?;
        Ok(Self::from_json_tokenizer(inner))
    }

    /// `path` (a tokenizer.json, or a GGUF file whose vocabulary is read), or the embedded
    /// tokenizer when there is none.
    pub fn open(path: Option<&Path>) -> Result<Self> {
        match path {
            Some(p) if p.extension().is_some_and(|e| e == "gguf") => {
                Self::from_vocab(&GgufVocab::from_gguf(&crate::gguf::Gguf::open(p)?)?)
            }
            Some(p) => Self::load(p),
            None => Self::embedded(),
        }
    }

    /// The tokenizer of a GGUF file's metadata (see `gguf` for what is checked and how the
    /// pre-tokenizer, special tokens and end-of-generation set follow llama.cpp).
    pub fn from_vocab(vocab: &GgufVocab) -> Result<Self> {
        let built = gguf::build(vocab)?;
        Ok(TextTokenizer {
            inner: built.tokenizer,
            literal: OnceLock::new(),
            special: built.special,
            pieces: Some(built.pieces),
            chat_template: vocab.chat_template.clone(),
            chat: OnceLock::new(),
            unknown: Some(built.unknown),
        })
    }

    pub fn vocab_size(&self) -> usize {
        match &self.pieces {
            Some(p) => p.len(),
            None => self.inner.get_vocab_size(true),
        }
    }

    /// Token ids of `text`, special-token text parsed (`<|im_start|>` is one id), nothing added:
    /// llama.cpp's `tokenize(text, add_special = false, parse_special = true)`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        encode_with(&self.inner, text, self.unknown)
    }

    /// Token ids of `text` with control-token text read as plain text (user-defined tokens are
    /// still split out): llama.cpp's `parse_special = false`.
    pub fn encode_literal(&self, text: &str) -> Result<Vec<u32>> {
        let tk = self.literal.get_or_init(|| {
            let mut t = self.inner.clone();
            t.set_encode_special_tokens(true);
            t
        });
        encode_with(tk, text, self.unknown)
    }

    /// A prompt's ids: `encode`, with BOS first and EOS last when the vocabulary asks for them
    /// (llama.cpp's `add_special = true`; SmolLM2 asks for neither).
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if self.special.add_bos {
            ids.push(self.special.bos.ok_or_else(|| {
                Error::Tokenizer("the vocabulary asks for a BOS token but has none".into())
            })?);
        }
        ids.extend(self.encode(text)?);
        if self.special.add_eos {
            ids.push(self.special.eos.ok_or_else(|| {
                Error::Tokenizer("the vocabulary asks for an EOS token but has none".into())
            })?);
        }
        Ok(ids)
    }

    /// The text of `ids` as a stream shows it: control tokens (BOS, EOS, `<|im_end|>`) left out.
    /// Bytes of a character split across tokens decode as U+FFFD until completed.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match &self.pieces {
            Some(p) => gguf::decode(p, ids, false),
            None => self
                .inner
                .decode(ids, true)
                .map_err(|e| Error::Tokenizer(e.to_string())),
        }
    }

    /// The text of `ids` with control tokens written out (llama-server's `/detokenize`).
    pub fn decode_with_special(&self, ids: &[u32]) -> Result<String> {
        match &self.pieces {
            Some(p) => gguf::decode(p, ids, true),
            None => self
                .inner
                .decode(ids, false)
                .map_err(|e| Error::Tokenizer(e.to_string())),
        }
    }

    pub fn end_of_text(&self) -> Option<u32> {
        self.inner.token_to_id(END_OF_TEXT)
    }

    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    pub fn bos(&self) -> Option<u32> {
        self.special.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.special.eos
    }

    /// Whether `encode_prompt` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.special.add_bos
    }

    /// The ids that end generation, ascending: a stream stops at any of them (finish reason
    /// `stop`) and does not print it.
    pub fn eog_ids(&self) -> &[u32] {
        &self.special.eog
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.special.eog.binary_search(&id).is_ok()
    }

    /// The id of a token's text, special tokens included.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The chat template source the GGUF file carries, if any.
    pub fn chat_template_source(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The file's chat template, ready to render with its BOS and EOS text, stripping what
    /// `encode_prompt` adds anyway (as llama.cpp does); `None` when the file has no template.
    /// Parsed once, on first use.
    pub fn chat_template(&self) -> Result<Option<&ChatTemplate>> {
        self.chat
            .get_or_init(|| self.parse_chat_template().map_err(|e| e.to_string()))
            .as_ref()
            .map(Option::as_ref)
            .map_err(|e| Error::Tokenizer(e.clone()))
    }

    fn parse_chat_template(&self) -> Result<Option<ChatTemplate>> {
        let Some(src) = &self.chat_template else {
            return Ok(None);
        };
        let text = |id: Option<u32>| -> Result<String> {
            id.map_or(Ok(String::new()), |i| self.decode_with_special(&[i]))
        };
        let t = ChatTemplate::new(src, &text(self.special.bos)?, &text(self.special.eos)?)?
            .strip_added(self.special.add_bos, self.special.add_eos);
        Ok(Some(t))
    }
}

fn encode_with(tk: &Tokenizer, text: &str, unknown: Option<u32>) -> Result<Vec<u32>> {
    let enc = tk
        .encode(text, false)
        .map_err(|e| Error::Tokenizer(e.to_string()))?;
    let ids = enc.get_ids();
    Ok(match unknown {
        Some(u) => ids.iter().copied().filter(|&id| id != u).collect(),
        None => ids.to_vec(),
    })
}

/// Train a byte-level BPE of `vocab` tokens (special token included) on `files`, write it to
/// `out`, and return the vocabulary size reached.
pub fn train(files: &[PathBuf], vocab: usize, out: &Path) -> Result<usize> {
    if files.is_empty() {
        return Err(Error::Tokenizer("no corpus files given".into()));
    }
    if let Some(missing) = files.iter().find(|p| !p.is_file()) {
        return Err(Error::Tokenizer(format!(
            "corpus file {} does not exist",
            missing.display()
        )));
    }
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab)
        .min_frequency(2)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .special_tokens(vec![AddedToken::from(END_OF_TEXT, true)])
        .build();
    let mut tk = TokenizerBuilder::<
        BPE,
        NormalizerWrapper,
        ByteLevel,
        PostProcessorWrapper,
        ByteLevelDecoder,
    >::new()
    .with_model(BPE::default())
    .with_normalizer(None)
    .with_pre_tokenizer(Some(ByteLevel::new(false, true, true)))
    .with_post_processor(None)
    .with_decoder(Some(ByteLevelDecoder::default()))
    .build()
    .map_err(|e| Error::Tokenizer(e.to_string()))?;
    let names: Vec<String> = files
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    tk.train_from_files(&mut trainer, names)
        .map_err(|e| Error::Tokenizer(format!("training: {e}")))?;
    tk.save(out, true)
        .map_err(|e| Error::Tokenizer(format!("{}: {e}", out.display())))?;
    Ok(tk.get_vocab_size(true))
}
