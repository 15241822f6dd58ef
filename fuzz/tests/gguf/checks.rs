//! Every check of the reader refusing a hand-made hostile file with its field and byte offset (and
//! each refusal of a kind the fuzz checks know), and the inputs that make parsing allocate the
//! most per byte within the parser's bound (`parse::ALLOC_PER_BYTE`, measured by `PeakAlloc`).

use moefleet_engine::gguf::parse::{ALLOC_PER_BYTE, ALLOC_SLACK};
use moefleet_engine::gguf::{Gguf, Value};
use moefleet_fuzz::alloc::{measure_start, measured};

use super::{refused, Raw};

#[test]
fn header_checks_name_offset_and_field() {
    let mut r = Raw::header(3, 0, 0);
    r.0[3] = b'X';
    refused(&r.0, "magic", 0, "is not \"GGUF\"");
    refused(&Raw::header(1, 0, 0).0, "version", 4, "not supported");
    refused(&Raw::header(4, 0, 0).0, "version", 4, "not supported");
    refused(&Raw::header(3 << 24, 0, 0).0, "version", 4, "big-endian");
    refused(
        &Raw::header(3, 0, 0).0[..10],
        "tensor count",
        8,
        "truncated",
    );
    refused(
        &Raw::header(3, 0, 0).0[..20],
        "metadata count",
        16,
        "truncated",
    );
    refused(
        &Raw::header(3, u64::MAX, 0).0,
        "tensor count",
        8,
        "cannot fit",
    );
    refused(
        &Raw::header(3, 0, 1 << 40).0,
        "metadata count",
        16,
        "cannot fit",
    );
    // a header alone is an empty file; v2 reads the same
    for v in [2, 3] {
        let p = Gguf::parse_bytes(&Raw::header(v, 0, 0).0).unwrap();
        assert_eq!((p.version, p.alignment, p.data_start), (v, 32, 32));
    }
}

#[test]
fn metadata_checks_name_offset_and_field() {
    let mut r = Raw::header(3, 0, 1);
    r.u64(1 << 50).bytes(b"abcdefghijklmnop");
    refused(&r.0, "metadata key 0 name", 24, "exceeds the");

    let mut r = Raw::header(3, 0, 1);
    r.str("ab\u{e9}").u32(4).u32(0);
    r.0[24 + 8 + 2] = 0xff;
    refused(&r.0, "metadata key 0 name", 24 + 8 + 2, "not UTF-8");

    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(13).u32(0);
    refused(
        &r.0,
        "metadata key 0 (k) type",
        24 + 9,
        "unknown value type 13",
    );

    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(7).u8(2);
    refused(&r.0, "metadata key 0 (k)", 24 + 9 + 4, "neither 0 nor 1");

    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(4).bytes(&[1, 2]);
    refused(&r.0, "metadata key 0 (k)", 24 + 9 + 4, "truncated");

    // the example: a vocabulary whose count claims more than the file holds
    let mut r = Raw::header(3, 0, 2);
    r.str("general.architecture").u32(8).str("llama");
    r.str("tokenizer.ggml.tokens").u32(9).u32(8);
    let count_at = r.at();
    r.u64(49152).str("a").str("b");
    refused(
        &r.0,
        "metadata key 1 (tokenizer.ggml.tokens) array count",
        count_at,
        "49152 string elements cannot fit",
    );

    let mut r = Raw::header(3, 0, 1);
    r.str("x").u32(9).u32(8).u64(2).str("a");
    let at = r.at();
    r.u64(9).bytes(b"bc");
    refused(&r.0, "metadata key 0 (x) element 1", at, "exceeds the");

    let mut r = Raw::header(3, 0, 1);
    r.str("x").u32(9).u32(14);
    refused(
        &r.0,
        "metadata key 0 (x) array type",
        24 + 9 + 4,
        "unknown value type 14",
    );

    // arrays nest four deep, not five
    for (depth, ok) in [(4, true), (5, false)] {
        let mut r = Raw::header(3, 0, 1);
        r.str("n").u32(9);
        for _ in 1..depth {
            r.u32(9).u64(1);
        }
        let inner_at = r.at();
        r.u32(0).u64(1).u8(7);
        match Gguf::parse_bytes(&r.0) {
            Ok(p) if ok => {
                let mut v = &p.metadata[0].1;
                for _ in 1..depth {
                    v = &v.as_array().unwrap()[0];
                }
                assert_eq!(v, &Value::Array(vec![Value::U8(7)]));
            }
            _ if ok => panic!("{depth} deep refused"),
            _ => refused(
                &r.0,
                "metadata key 0 (n) element 0 element 0 element 0 element 0 array type",
                inner_at,
                "nested deeper than 4",
            ),
        }
    }

    let mut r = Raw::header(3, 0, 3);
    r.str("a").u32(4).u32(1);
    r.str("b").u32(4).u32(2);
    let dup_at = r.at();
    r.str("a").u32(4).u32(3);
    refused(&r.0, "metadata key 2 (a)", dup_at, "duplicate key");

    for (ty, v) in [(4u32, 0u32), (4, 48), (8, 2)] {
        let mut r = Raw::header(3, 0, 1);
        r.str("general.alignment");
        let at = r.at();
        r.u32(ty).u32(v);
        if ty == 8 {
            r.bytes(b"\0\0\0\0ab");
        }
        refused(
            &r.0,
            "metadata key 0 (general.alignment)",
            at,
            "power of two",
        );
    }
}

#[test]
fn tensor_checks_name_offset_and_field() {
    let one = |name: &str, dims: &[u64], type_id: u32, offset: u64, data: usize| {
        let mut r = Raw::header(3, 1, 0);
        r.tensor(name, dims, type_id, offset).data(data);
        r.0
    };
    // the entry of tensor "w" starts at 24; n_dims at 24 + 9, dims at 24 + 13
    let dims_at = 24 + 13;
    refused(
        &one("w", &[], 0, 0, 4),
        "tensor 0 (w) n_dims",
        24 + 9,
        "0 dims",
    );
    refused(
        &one("w", &[1; 5], 0, 0, 4),
        "tensor 0 (w) n_dims",
        24 + 9,
        "5 dims",
    );
    refused(
        &one("w", &[4, 0], 0, 0, 4),
        "tensor 0 (w) dims",
        dims_at,
        "hold no elements",
    );
    refused(
        &one("w", &[1 << 32, 1 << 32], 0, 0, 4),
        "tensor 0 (w) dims",
        dims_at,
        "overflows",
    );
    refused(
        &one("w", &[1 << 62], 0, 0, 4),
        "tensor 0 (w) dims",
        dims_at,
        "overflows",
    );
    refused(
        &one("w", &[32], 4, 0, 18),
        "tensor 0 (w) type",
        dims_at + 8,
        "unknown ggml type id 4",
    );
    refused(
        &one("w", &[16, 2], 2, 0, 18),
        "tensor 0 (w) dims",
        dims_at,
        "whole number of Q4_0",
    );
    let offset_at = dims_at + 8 + 4;
    refused(
        &one("w", &[8], 0, 16, 64),
        "tensor 0 (w) offset",
        offset_at,
        "multiple of the alignment",
    );
    refused(
        &one("w", &[8], 0, 32, 40),
        "tensor 0 (w) offset",
        offset_at,
        "past the end",
    );
    refused(
        &one("w", &[8], 0, u64::MAX - 31, 40),
        "tensor 0 (w) offset",
        offset_at,
        "past the end",
    );
    refused(
        &one("w", &[8], 0, 0, 31)[..],
        "tensor 0 (w) offset",
        offset_at,
        "past the end",
    );
    assert!(Gguf::parse_bytes(&one("w", &[8], 0, 0, 32)).is_ok());
    // a long name is cut in the field
    let long = "x".repeat(300);
    let e = Gguf::parse_bytes(&one(&long, &[], 0, 0, 4))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("tensor 0 ({}...) n_dims", "x".repeat(80))),
        "{e}"
    );

    // (name, elements, offset) of two F32 tensors
    let two = |a: (&str, u64, u64), b: (&str, u64, u64), data: usize| {
        let mut r = Raw::header(3, 2, 0);
        r.tensor(a.0, &[a.1], 0, a.2)
            .tensor(b.0, &[b.1], 0, b.2)
            .data(data);
        r.0
    };
    let second = 24 + 9 + 4 + 8 + 4 + 8;
    refused(
        &two(("a", 8, 0), ("a", 8, 32), 64),
        "tensor 1 (a) name",
        second,
        "duplicate tensor name",
    );
    let b_offset_at = second + 9 + 4 + 8 + 4;
    refused(
        &two(("a", 16, 0), ("b", 8, 32), 64),
        "tensor 1 (b) offset",
        b_offset_at,
        "overlap tensor 0 (a)",
    );
    let p = Gguf::parse_bytes(&two(("a", 8, 32), ("b", 8, 0), 64)).unwrap();
    assert_eq!(p.data_start, 96);
    assert_eq!((p.tensors[0].offset, p.tensors[1].offset), (128, 96));
    assert_eq!(p.tensor("b").unwrap().n_bytes, 32);
}

/// The inputs that make parsing allocate the most per byte stay within the fuzz checks' bound:
/// a long u8 array (a `Value` per byte), many empty arrays, many one-byte metadata pairs, many
/// tensors; and a vocabulary whose count claims more than the file holds allocates nothing for it.
#[test]
fn allocation_is_bounded_by_the_input() {
    let n = 100_000u64;
    let mut bytes_array = Raw::header(3, 0, 1);
    bytes_array.str("a").u32(9).u32(0).u64(n).data(n as usize);
    let mut empties = Raw::header(3, 0, 1);
    empties.str("a").u32(9).u32(9).u64(n / 12);
    for _ in 0..n / 12 {
        empties.u32(0).u64(0);
    }
    let mut pairs = Raw::header(3, 0, n / 16);
    for i in 0..n / 16 {
        pairs.str(&format!("{i:03x}")).u32(0).u8(1);
    }
    let mut tensors = Raw::header(3, n / 40, 0);
    for i in 0..n / 40 {
        tensors.tensor(&format!("{i:x}"), &[1], 0, 32 * i);
    }
    tensors.data(32 * (n / 40) as usize);
    for (name, r) in [
        ("u8 array", &bytes_array),
        ("empty arrays", &empties),
        ("pairs", &pairs),
        ("tensors", &tensors),
    ] {
        measure_start();
        let p = Gguf::parse_bytes(&r.0).unwrap();
        let (peak, total) = measured();
        eprintln!(
            "{name}: {} bytes, allocated {total} (largest {peak})",
            r.0.len()
        );
        assert!(
            total <= ALLOC_PER_BYTE * r.0.len() + ALLOC_SLACK,
            "{name}: {total}"
        );
        drop(p);
    }
    let mut claim = Raw::header(3, 0, 1);
    claim
        .str("tokenizer.ggml.tokens")
        .u32(9)
        .u32(8)
        .u64(1 << 40)
        .data(1000);
    measure_start();
    assert!(Gguf::parse_bytes(&claim.0).is_err());
    let (peak, _) = measured();
    assert!(peak < 1024, "largest allocation {peak}");
}
