//! `GgufVocab`: the `tokenizer.*` metadata of a GGUF file as stored, read without checking what
//! it means. `gguf` checks it and builds the tokenizer; `special` resolves its special ids.

use crate::error::Result;
use crate::gguf::Gguf;

/// The `tokenizer.*` metadata of a GGUF file, as stored (`None`: the key is absent).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: "gpt2" is byte-level BPE.
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer's name.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`, by id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`, one per token (absent: all normal).
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges`, "left right" by rank.
    pub merges: Option<Vec<String>>,
    /// `tokenizer.ggml.{bos,eos,eot,eom}_token_id`.
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    /// `tokenizer.ggml.fim_{pad,rep,sep}_token_id` (end-of-generation in llama.cpp).
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
    /// `tokenizer.ggml.add_{bos,eos}_token`.
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    /// `tokenizer.chat_template` (Jinja).
    pub chat_template: Option<String>,
}

impl GgufVocab {
    /// Read the `tokenizer.*` keys of `g`; a key of the wrong type is an error naming it, a
    /// missing `tokenizer.ggml.model` or `tokens` too (what the rest means is `build`'s to check).
    pub fn from_gguf(g: &Gguf) -> Result<GgufVocab> {
        let key = |k: &str| format!("tokenizer.ggml.{k}");
        let owned = |v: Vec<&str>| v.into_iter().map(str::to_string).collect::<Vec<_>>();
        let id = |k: &str| g.opt_u32(&key(k));
        Ok(GgufVocab {
            model: g.str(&key("model"))?.to_string(),
            pre: g.opt_str(&key("pre"))?.map(str::to_string),
            tokens: owned(g.str_array(&key("tokens"))?),
            token_types: match g.get(&key("token_type")) {
                Some(_) => Some(g.i32_array(&key("token_type"))?),
                None => None,
            },
            merges: match g.get(&key("merges")) {
                Some(_) => Some(owned(g.str_array(&key("merges"))?)),
                None => None,
            },
            bos: id("bos_token_id")?,
            eos: id("eos_token_id")?,
            eot: id("eot_token_id")?,
            eom: id("eom_token_id")?,
            fim_pad: id("fim_pad_token_id")?,
            fim_rep: id("fim_rep_token_id")?,
            fim_sep: id("fim_sep_token_id")?,
            add_bos: g.opt_bool(&key("add_bos_token"))?,
            add_eos: g.opt_bool(&key("add_eos_token"))?,
            chat_template: g.opt_str("tokenizer.chat_template")?.map(str::to_string),
        })
    }
}
