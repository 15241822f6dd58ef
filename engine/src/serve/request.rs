//! Parsing and validating OpenAI-style request bodies into a prompt and generation limits. Every
//! problem becomes an `ApiError` with a message that says what is wrong; nothing here panics.

use serde_json::{Map, Value};

use super::error::ApiError;
use crate::sampling::Sampling;
use crate::tokenizer::TextTokenizer;

/// A validated request.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub stream: bool,
    pub include_usage: bool,
    /// Add moefleet's per-token fields (token id, logit, logit-row hash) to chunks.
    pub debug: bool,
    /// Keep generating past the end-of-text token (as llama.cpp's `ignore_eos`).
    pub ignore_eos: bool,
    /// Ask for the stream's capture file (`moefleet_capture`; the server needs --capture-dir).
    pub capture: bool,
    /// The `model` the request names (None: the served one).
    pub model: Option<String>,
    /// Greedy unless the request asks for a temperature above 0.
    pub sampling: Sampling,
    /// Text that ends the completion (excluded from it), at most four.
    pub stop: Vec<String>,
}

/// Limits the server enforces.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub budget: usize,
    pub max_tokens: usize,
    pub vocab: usize,
}

pub fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad(format!("request body is not valid JSON: {e}")))?;
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::bad("request body must be a JSON object")),
    }
}

fn get_bool(m: &Map<String, Value>, k: &str) -> Result<Option<bool>, ApiError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::bad(format!("field '{k}' must be a boolean"))),
    }
}

fn get_number(m: &Map<String, Value>, k: &str) -> Result<Option<f64>, ApiError> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(_) => Err(ApiError::bad(format!("field '{k}' must be a number"))),
    }
}

/// The output cap when a request names none: 16 tokens for `/v1/completions` (OpenAI's legacy
/// default, vLLM's too); for chat, what is left of the context (as OpenAI, vLLM and llama.cpp
/// do), within `--max-tokens-limit`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DefaultCap {
    Sixteen,
    RestOfContext,
}

/// The fields both endpoints share; `prompt` is already tokenised.
pub fn common(
    m: &Map<String, Value>,
    prompt: Vec<u32>,
    lim: &Limits,
    default: DefaultCap,
) -> Result<Parsed, ApiError> {
    // the newer name wins when it holds a value; clients send the other one as null
    let key = if m.get("max_completion_tokens").is_some_and(|v| !v.is_null()) {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let max_tokens = match m.get(key) {
        None | Some(Value::Null) => match default {
            DefaultCap::Sixteen => 16,
            DefaultCap::RestOfContext => lim
                .budget
                .saturating_sub(prompt.len())
                .min(lim.max_tokens)
                .max(1),
        },
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) if v >= 1 && v as usize <= lim.max_tokens => v as usize,
            _ => {
                return Err(ApiError::bad(format!(
                    "'{key}' must be an integer in 1..={}, got {n}",
                    lim.max_tokens
                )))
            }
        },
        Some(_) => return Err(ApiError::bad(format!("field '{key}' must be an integer"))),
    };
    let stream = get_bool(m, "stream")?.unwrap_or(false);
    let include_usage = match m.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => get_bool(o, "include_usage")?.unwrap_or(false),
        Some(_) => return Err(ApiError::bad("field 'stream_options' must be an object")),
    };
    for k in ["presence_penalty", "frequency_penalty"] {
        get_number(m, k)?; // accepted and type-checked; no penalties are applied
    }
    let sampling = sampling(m)?;
    let stop = stops(m)?;
    if let Some(n) = get_number(m, "n")? {
        if n != 1.0 {
            return Err(ApiError::bad("only n = 1 is supported"));
        }
    }
    let debug = get_bool(m, "moefleet_debug")?.unwrap_or(false);
    let ignore_eos = get_bool(m, "ignore_eos")?.unwrap_or(false);
    let capture = get_bool(m, "moefleet_capture")?.unwrap_or(false);
    let model = match m.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(ApiError::bad("field 'model' must be a string")),
    };
    if prompt.is_empty() {
        return Err(ApiError::bad("the prompt is empty"));
    }
    if prompt.len() + max_tokens > lim.budget {
        return Err(ApiError::bad(format!(
            "prompt of {} tokens plus max_tokens {max_tokens} exceeds the context budget of {} positions",
            prompt.len(),
            lim.budget
        )));
    }
    Ok(Parsed {
        prompt,
        max_tokens,
        stream,
        include_usage,
        debug,
        ignore_eos,
        capture,
        model,
        sampling,
        stop,
    })
}

/// `temperature` (0..=2; absent or 0: greedy), `top_p` (0 < p <= 1), `top_k` (0 or -1: off) and `seed`
/// (absent: a fresh one per request).
fn sampling(m: &Map<String, Value>) -> Result<Sampling, ApiError> {
    let temperature = get_number(m, "temperature")?.unwrap_or(0.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::bad(format!(
            "'temperature' must be in 0..=2, got {temperature}"
        )));
    }
    let top_p = get_number(m, "top_p")?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad(format!(
            "'top_p' must be in (0, 1], got {top_p}"
        )));
    }
    let top_k = match m.get("top_k") {
        None | Some(Value::Null) => 0,
        // -1 is vLLM's spelling of "off", as 0 is here
        Some(Value::Number(n)) if n.as_i64() == Some(-1) => 0,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(k) if k <= u32::MAX as u64 => k as u32,
            _ => {
                return Err(ApiError::bad(format!(
                    "'top_k' must be an integer >= 0 (or -1: off), got {n}"
                )))
            }
        },
        Some(_) => return Err(ApiError::bad("field 'top_k' must be an integer")),
    };
    let seed = match m.get("seed") {
        None | Some(Value::Null) => fresh_seed(),
        Some(Value::Number(n)) => match (n.as_u64(), n.as_i64()) {
            (Some(s), _) => s,
            (None, Some(s)) => s as u64,
            _ => return Err(ApiError::bad(format!("'seed' must be an integer, got {n}"))),
        },
        Some(_) => return Err(ApiError::bad("field 'seed' must be an integer")),
    };
    Ok(Sampling {
        temperature: temperature as f32,
        top_p: top_p as f32,
        top_k,
        seed,
    })
}

/// A seed for a request that names none.
fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    crate::rng::mix64(t ^ N.fetch_add(1, Ordering::Relaxed).rotate_left(32))
}

/// `stop`: a string or an array of up to four non-empty strings.
fn stops(m: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let list = match m.get("stop") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::bad("'stop' must be a string or an array of strings"))?,
        Some(_) => {
            return Err(ApiError::bad(
                "'stop' must be a string or an array of strings",
            ))
        }
    };
    if list.len() > 4 {
        return Err(ApiError::bad("'stop' takes at most 4 sequences"));
    }
    if list.iter().any(String::is_empty) {
        return Err(ApiError::bad("a 'stop' sequence is empty"));
    }
    Ok(list)
}

/// `/v1/completions`: `prompt` is a string, a one-string array, or an array of token ids.
pub fn completion(body: &[u8], tk: &TextTokenizer, lim: &Limits) -> Result<Parsed, ApiError> {
    let m = object(body)?;
    let prompt = match m.get("prompt") {
        None => return Err(ApiError::bad("field 'prompt' is required")),
        Some(Value::String(s)) => encode(tk, s)?,
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            encode(tk, a[0].as_str().unwrap_or_default())?
        }
        Some(Value::Array(a)) if a.iter().all(|v| v.is_u64()) => {
            let ids: Vec<u32> = a
                .iter()
                .filter_map(|v| v.as_u64())
                .map(|v| v.min(u32::MAX as u64) as u32)
                .collect();
            if let Some(bad) = ids.iter().find(|&&t| t as usize >= lim.vocab) {
                return Err(ApiError::bad(format!(
                    "token id {bad} is outside the vocabulary of {}",
                    lim.vocab
                )));
            }
            ids
        }
        Some(_) => {
            return Err(ApiError::bad(
                "field 'prompt' must be a string, a one-string array or an array of token ids",
            ))
        }
    };
    common(&m, prompt, lim, DefaultCap::Sixteen)
}

/// The message roles of OpenAI's chat API (`function` is its deprecated spelling of `tool`).
pub const CHAT_ROLES: [&str; 6] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// `/v1/chat/completions`: messages rendered as `role: content` lines, then `assistant:`.
pub fn chat(body: &[u8], tk: &TextTokenizer, lim: &Limits) -> Result<Parsed, ApiError> {
    let m = object(body)?;
    let msgs = match m.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(ApiError::bad("field 'messages' is empty")),
        None => return Err(ApiError::bad("field 'messages' is required")),
        Some(_) => return Err(ApiError::bad("field 'messages' must be an array")),
    };
    let mut turns = Vec::with_capacity(msgs.len());
    for (i, msg) in msgs.iter().enumerate() {
        let role = msg
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::bad(format!("messages[{i}].role must be a string")))?;
        if !CHAT_ROLES.contains(&role) {
            return Err(ApiError::bad(format!(
                "messages[{i}].role '{role}' is not one of {}",
                CHAT_ROLES.join(", ")
            )));
        }
        let content = match msg.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
            _ => {
                return Err(ApiError::bad(format!(
                    "messages[{i}].content must be a string or an array of text parts"
                )))
            }
        };
        turns.push((role.to_string(), content));
    }
    let text = chat_text(tk, &turns).map_err(ApiError::bad)?;
    let prompt = encode(tk, &text)?;
    common(&m, prompt, lim, DefaultCap::RestOfContext)
}

/// The text a chat is fed as: the model's own chat template when its file has one (GGUF), else
/// `render_chat`.
pub fn chat_text(tk: &TextTokenizer, turns: &[(String, String)]) -> Result<String, String> {
    match tk.chat_template() {
        Ok(Some(t)) => t
            .render(turns, true)
            .map_err(|e| format!("the model's chat template failed: {e}")),
        Ok(None) => Ok(render_chat(turns)),
        Err(e) => Err(format!("the model's chat template: {e}")),
    }
}

/// The plain prompt text of a chat: one `role: content` line per message, then `assistant:` (what the
/// model is fed for `/v1/chat/completions`; the capture checks re-render it).
pub fn render_chat(turns: &[(String, String)]) -> String {
    let mut text = String::new();
    for (role, content) in turns {
        text.push_str(&format!("{role}: {content}\n"));
    }
    text.push_str("assistant:");
    text
}

fn encode(tk: &TextTokenizer, s: &str) -> Result<Vec<u32>, ApiError> {
    if s.is_empty() {
        return Err(ApiError::bad("the prompt is empty"));
    }
    tk.encode_prompt(s)
        .map_err(|e| ApiError::bad(format!("cannot tokenise the prompt: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: Limits = Limits {
        budget: 1024,
        max_tokens: 1000,
        vocab: 100,
    };

    fn capped(body: &str, prompt: usize, default: DefaultCap) -> Result<usize, String> {
        let m = object(body.as_bytes()).unwrap();
        common(&m, vec![1; prompt], &LIM, default)
            .map(|p| p.max_tokens)
            .map_err(|e| e.message)
    }

    fn max_tokens(body: &str) -> usize {
        capped(body, 1, DefaultCap::Sixteen).unwrap()
    }

    /// Without a cap, chat runs to the end of the context (within the server's limit); a prompt
    /// that fills the context is refused rather than given a cap of nothing.
    #[test]
    fn chat_without_a_cap_gets_the_rest_of_the_context() {
        let chat = DefaultCap::RestOfContext;
        assert_eq!(capped("{}", 100, chat), Ok(924));
        assert_eq!(capped("{}", 10, chat), Ok(1000));
        assert_eq!(capped(r#"{"max_tokens": 5}"#, 100, chat), Ok(5));
        assert!(capped("{}", 1024, chat).is_err());
        assert_eq!(capped("{}", 100, DefaultCap::Sixteen), Ok(16));
    }

    #[test]
    fn top_k_minus_one_is_off_and_other_negatives_are_refused() {
        let m = object(br#"{"top_k": -1, "temperature": 1}"#).unwrap();
        assert_eq!(sampling(&m).unwrap().top_k, 0);
        let m = object(br#"{"top_k": -2}"#).unwrap();
        assert!(sampling(&m).is_err());
    }

    /// `max_completion_tokens` wins when it holds a number; a null one leaves `max_tokens` in force.
    #[test]
    fn the_token_cap_comes_from_whichever_name_holds_a_value() {
        assert_eq!(max_tokens(r#"{"max_tokens": 200}"#), 200);
        assert_eq!(
            max_tokens(r#"{"max_completion_tokens": 50, "max_tokens": 200}"#),
            50
        );
        assert_eq!(
            max_tokens(r#"{"max_completion_tokens": null, "max_tokens": 200}"#),
            200
        );
        assert_eq!(max_tokens(r#"{"max_completion_tokens": null}"#), 16);
        assert_eq!(max_tokens("{}"), 16);
    }
}
