//! The project's subword tokenizer: byte-level BPE trained by `moefleet tokenizer` from the text
//! the project ships (`workloads/corpus/`), saved as `workloads/tokenizer.json` and loaded with the
//! `tokenizers` crate. The scaled presets use its vocabulary (`config::TOKENIZER_VOCAB`). The file
//! is compiled into the binary (`TextTokenizer::embedded`), so a binary copied to another host or
//! installed with `cargo install` needs no source tree; `--tokenizer FILE` still overrides it.

use std::path::{Path, PathBuf};

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, Tokenizer, TokenizerBuilder};

use crate::error::{Error, Result};

/// The end-of-text special token (id 0).
pub const END_OF_TEXT: &str = "<|endoftext|>";

/// `workloads/tokenizer.json` of this source tree: where `moefleet tokenizer` writes it and what
/// the tests compare with. Binaries read the embedded copy instead.
pub fn default_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../workloads/tokenizer.json")
}

/// The project's tokenizer as compiled into this binary.
const EMBEDDED: &[u8] = include_bytes!("../../workloads/tokenizer.json");

/// How a record names the tokenizer `path` chose (`None`: the embedded one).
pub fn describe(path: Option<&Path>) -> String {
    path.map_or_else(
        || "embedded workloads/tokenizer.json".to_string(),
        |p| p.display().to_string(),
    )
}

pub struct TextTokenizer {
    inner: Tokenizer,
}

impl TextTokenizer {
    pub fn load(path: &Path) -> Result<Self> {
        let inner = Tokenizer::from_file(path)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(TextTokenizer { inner })
    }

    /// The project's tokenizer, compiled into the binary.
    pub fn embedded() -> Result<Self> {
        let inner = Tokenizer::from_bytes(EMBEDDED)
            .map_err(|e| Error::Tokenizer(format!("the embedded tokenizer: {e}")))?;
        Ok(TextTokenizer { inner })
    }

    /// `path`, or the embedded tokenizer when there is none.
    pub fn open(path: Option<&Path>) -> Result<Self> {
        match path {
            Some(p) => Self::load(p),
            None => Self::embedded(),
        }
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, true)
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    pub fn end_of_text(&self) -> Option<u32> {
        self.inner.token_to_id(END_OF_TEXT)
    }
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
