//! Token attributes and special ids of a GGUF vocabulary, resolved as llama.cpp resolves them
//! (`llama_vocab::impl::load`): the type of each token from `tokenizer.ggml.token_type`; BOS and
//! EOS from their keys or the BPE defaults; the end-of-turn, end-of-message and fill-in-the-middle
//! tokens from their keys or found by their text; the end-of-generation set from those and from a
//! list of token texts. A token found by its text that was not a control token becomes one, so it
//! is parsed out of prompts and left out of printed text, as in llama.cpp.
//!
//! Where llama.cpp picks among several candidate texts in hash-map order (a vocabulary holding both
//! `<|im_end|>` and `<|endoftext|>` for end of turn), the lowest id is taken; the
//! end-of-generation set, which takes every candidate, is the same either way.

use std::collections::{BTreeSet, HashMap};

use super::vocab::GgufVocab;
use super::SpecialTokens;

/// `llama_token_attr` bits.
pub mod attr {
    pub const UNKNOWN: u32 = 1 << 0;
    pub const UNUSED: u32 = 1 << 1;
    pub const NORMAL: u32 = 1 << 2;
    pub const CONTROL: u32 = 1 << 3;
    pub const USER_DEFINED: u32 = 1 << 4;
    pub const BYTE: u32 = 1 << 5;
}

/// The attribute of a `tokenizer.ggml.token_type` value (1 normal, 2 unknown, 3 control,
/// 4 user-defined, 5 unused, 6 byte; anything else undefined, no bit).
pub fn attr_of_type(t: i32) -> u32 {
    match t {
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => 0,
    }
}

const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Token texts that end generation whatever their type.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// gpt-oss tokens llama.cpp always prints (user-defined whatever the file says).
const ALWAYS_PRINTED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// llama.cpp's BOS and EOS for a BPE vocabulary whose file names none.
const BPE_DEFAULT_BOS_EOS: u32 = 11;

/// Resolve the special ids of `v` (whose ids `index` maps and whose attributes are `attrs`, both
/// already checked), updating `attrs` as llama.cpp does. `default_add_bos` is the pre-tokenizer's.
pub fn resolve(
    v: &GgufVocab,
    index: &HashMap<&str, u32>,
    attrs: &mut [u32],
    default_add_bos: bool,
) -> SpecialTokens {
    let n = attrs.len() as u32;
    let default = (BPE_DEFAULT_BOS_EOS < n).then_some(BPE_DEFAULT_BOS_EOS);
    let bos = v.bos.or(default);
    let eos = v.eos.or(default);
    // The first of `texts` the vocabulary has (lowest id), made a control token.
    let find = |key: Option<u32>, texts: &[&str], attrs: &mut [u32]| -> Option<u32> {
        if key.is_some() {
            return key;
        }
        let id = texts.iter().filter_map(|t| index.get(t).copied()).min()?;
        attrs[id as usize] |= attr::CONTROL;
        Some(id)
    };
    let eot = find(v.eot, EOT_TEXTS, attrs);
    let eom = find(v.eom, EOM_TEXTS, attrs);
    for texts in [FIM_PRE_TEXTS, FIM_SUF_TEXTS, FIM_MID_TEXTS] {
        find(None, texts, attrs);
    }
    let fim_pad = find(v.fim_pad, FIM_PAD_TEXTS, attrs);
    let fim_rep = find(v.fim_rep, FIM_REP_TEXTS, attrs);
    let fim_sep = find(v.fim_sep, FIM_SEP_TEXTS, attrs);

    let mut eog: BTreeSet<u32> = [fim_pad, fim_rep, fim_sep].into_iter().flatten().collect();
    for t in EOG_TEXTS {
        if let Some(&id) = index.get(t) {
            eog.insert(id);
            attrs[id as usize] |= attr::CONTROL;
        }
    }
    for t in ALWAYS_PRINTED {
        if let Some(&id) = index.get(t) {
            attrs[id as usize] = attr::USER_DEFINED;
        }
    }
    eog.extend([eos, eot, eom].into_iter().flatten());

    let text = |id: u32| v.tokens[id as usize].as_str();
    let has = |eog: &BTreeSet<u32>, t: &str| eog.iter().any(|&id| text(id) == t);
    // gpt-oss and solar-open end a message with <|end|> but generation with <|return|> or <|call|>.
    if let Some(&end) = index.get("<|end|>") {
        let (ret, call, flush) = (
            has(&eog, "<|return|>"),
            has(&eog, "<|call|>") || has(&eog, "<|calls|>"),
            has(&eog, "<|flush|>"),
        );
        if eog.contains(&end) && call && (ret || flush) {
            eog.remove(&end);
            attrs[end as usize] = attr::USER_DEFINED;
        }
    }
    // gemma4 and plamo have a normal </s>.
    if let Some(&s) = index.get("</s>") {
        if (has(&eog, "<|tool_response>") || has(&eog, "<|plamo:eos|>")) && eog.remove(&s) {
            attrs[s as usize] = attr::NORMAL;
        }
    }
    SpecialTokens {
        bos,
        eos,
        eot,
        eog: eog.into_iter().collect(),
        add_bos: v.add_bos.unwrap_or(default_add_bos),
        add_eos: v.add_eos.unwrap_or(false),
    }
}
