//! A written file opened: typed getters, errors naming keys and tensors, zero-copy tensor bytes.

use moefleet_engine::gguf::write::{self, TensorData};
use moefleet_engine::gguf::{Gguf, Value};
use moefleet_engine::kernels::blocks::BlockFormat;
use moefleet_engine::Error;

/// Each valid file written (every value type, arrays of arrays, tensors of each computable format,
/// 3-dim stacks) and opened: typed getters, errors naming keys and tensors, zero-copy bytes.
#[test]
fn open_getters_and_zero_copy_bytes() {
    let meta = |k: &str, v: Value| (k.to_string(), v);
    let metadata = vec![
        meta("general.architecture", Value::Str("qwen3moe".into())),
        meta("general.alignment", Value::U32(64)),
        meta("m.u8", Value::U8(200)),
        meta("m.i32", Value::I32(-5)),
        meta("m.i64", Value::I64(7)),
        meta("m.u64.big", Value::U64(1 << 40)),
        meta("m.f32", Value::F32(0.25)),
        meta("m.f64", Value::F64(1e-6)),
        meta("m.bool", Value::Bool(true)),
        meta(
            "m.tokens",
            Value::Array(["<s>", "é", "𝄞"].map(|s| Value::Str(s.into())).to_vec()),
        ),
        meta("m.types", Value::Array(vec![Value::I32(1), Value::U8(2)])),
        meta("m.ints", Value::Array(vec![Value::I32(1), Value::I32(-2)])),
        meta(
            "m.scores",
            Value::Array(vec![Value::F32(0.5), Value::F32(-1.5)]),
        ),
        meta(
            "m.nested",
            Value::Array(vec![
                Value::Array(vec![Value::U16(1)]),
                Value::Array(vec![]),
            ]),
        ),
    ];
    // the writer refuses an array of mixed types
    assert!(write::to_bytes(&metadata, &[]).is_err());
    let metadata: Vec<_> = metadata
        .into_iter()
        .filter(|(k, _)| k != "m.types")
        .collect();

    let embd: Vec<u8> = (0..34 * 4).map(|i| i as u8).collect();
    let experts: Vec<u8> = (0..18 * 2 * 3).map(|i| (i * 7) as u8).collect();
    let norm: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let tensors = [
        TensorData {
            name: "token_embd.weight",
            dims: &[64, 2],
            format: BlockFormat::Q8_0,
            bytes: &embd,
        },
        TensorData {
            name: "blk.0.ffn_up_exps.weight",
            dims: &[32, 2, 3],
            format: BlockFormat::Q4_0,
            bytes: &experts,
        },
        TensorData {
            name: "output_norm.weight",
            dims: &[3],
            format: BlockFormat::F32,
            bytes: &norm,
        },
    ];
    let bytes = write::to_bytes(&metadata, &tensors).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let g = Gguf::open(&path).unwrap();

    assert_eq!((g.version, g.alignment, g.metadata.len()), (3, 64, 13));
    assert_eq!(g.architecture().unwrap(), "qwen3moe");
    assert_eq!(g.u32("m.u8").unwrap(), 200);
    assert_eq!(g.usize("m.i64").unwrap(), 7);
    assert_eq!(g.u64("m.u64.big").unwrap(), 1 << 40);
    assert_eq!(g.f32("m.f32").unwrap(), 0.25);
    assert_eq!(g.f32("m.f64").unwrap(), 1e-6f64 as f32);
    assert!(g.bool("m.bool").unwrap());
    assert_eq!(g.str_array("m.tokens").unwrap(), ["<s>", "é", "𝄞"]);
    assert_eq!(g.i32_array("m.ints").unwrap(), [1, -2]);
    assert_eq!(g.f32_array("m.scores").unwrap(), [0.5, -1.5]);
    assert_eq!(g.opt_u32("absent").unwrap(), None);
    assert_eq!(g.opt_str("absent").unwrap(), None);
    assert_eq!(g.opt_bool("m.bool").unwrap(), Some(true));
    assert_eq!(g.opt_f32("m.f32").unwrap(), Some(0.25));
    assert_eq!(g.opt_usize("m.u8").unwrap(), Some(200));
    assert_eq!(g.get("m.nested").unwrap().as_array().unwrap().len(), 2);

    let err = |r: Result<String, Error>| r.unwrap_err().to_string();
    let p = path.display();
    let i32_at = bytes.windows(5).position(|w| w == b"m.i32").unwrap() + 5;
    assert_eq!(
        err(g.u32("m.i32").map(|v| v.to_string())),
        format!("{p}: GGUF metadata key 3 (m.i32) at byte {i32_at}: expected u32, found i32 -5")
    );
    assert!(err(g.u32("m.u64.big").map(|v| v.to_string())).contains("found u64 1099511627776"));
    assert_eq!(
        err(g.u32("llama.block_count").map(|v| v.to_string())),
        format!("{p}: GGUF metadata key llama.block_count: missing (expected u32)")
    );
    assert!(
        err(g.opt_u32("m.tokens").map(|v| format!("{v:?}"))).contains("found array of 3 string")
    );
    assert!(
        err(g.opt_bool("m.u8").map(|v| format!("{v:?}"))).contains("expected bool, found u8 200")
    );
    assert!(err(g.str("m.f32").map(String::from)).contains("expected string, found f32 0.25"));
    assert!(err(g.i32_array("m.tokens").map(|v| format!("{v:?}")))
        .contains("(element 0 is string of 3 bytes)"));
    assert!(
        err(g.f32_array("m.ints").map(|v| format!("{v:?}"))).contains("expected an array of f32")
    );
    assert!(err(g.str_array("m.u8").map(|v| format!("{v:?}"))).contains("found u8 200"));
    assert!(err(g.tensor("output.weight").map(|t| t.name.clone()))
        .ends_with("GGUF tensor output.weight: not in the file (it has 3 tensors)"));

    assert!(g.has_tensor("output_norm.weight") && !g.has_tensor("output.weight"));
    let t = g.tensor("blk.0.ffn_up_exps.weight").unwrap();
    assert_eq!(
        (t.n_elements(), t.rows_cols(), t.n_bytes),
        (192, (6, 32), 108)
    );
    assert_eq!(g.tensor("token_embd.weight").unwrap().rows_cols(), (2, 64));
    for (t, d) in g.tensors.iter().zip(&tensors) {
        assert_eq!(t.offset % 64, 0);
        let b = g.bytes(t);
        assert!(b.is_mapped());
        assert_eq!(&b[..], d.bytes, "{}", t.name);
    }
    // a hand-made entry outside the file gives no bytes
    let mut outside = g.tensors[0].clone();
    outside.offset = bytes.len() as u64;
    assert!(g.bytes(&outside).is_empty());

    // an empty file, a missing one
    let empty = dir.path().join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    let e = Gguf::open(&empty).unwrap_err().to_string();
    assert!(e.contains("GGUF magic at byte 0: truncated"), "{e}");
    assert!(matches!(
        Gguf::open(&dir.path().join("none.gguf")),
        Err(Error::Io { .. })
    ));
}
