//! The house rules a newcomer can rely on: no Rust file over 600 lines and no function over 150
//! (a function is measured from its `fn` line to the closing brace at the same indent, as rustfmt
//! lays it out). An exception must be listed here with its reason.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 150;

/// Functions allowed to be longer, each with why (path relative to the root, function name).
const LONG_FUNCTIONS: [(&str, &str, &str); 0] = [];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if !p.ends_with("target") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The name and length in lines of every function with a body in `text`.
fn functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let t = ["pub(crate) ", "pub(super) ", "pub "]
            .iter()
            .find_map(|p| t.strip_prefix(p))
            .unwrap_or(t);
        let t = ["const ", "async ", "unsafe "]
            .iter()
            .fold(t, |t, p| t.strip_prefix(p).unwrap_or(t));
        let Some(rest) = t.strip_prefix("fn ") else {
            continue;
        };
        if l.trim_end().ends_with(';') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = format!("{indent}}}");
        if let Some(j) = lines[i + 1..].iter().position(|m| *m == close) {
            out.push((name, j + 2));
        }
    }
    out
}

#[test]
fn the_function_measure_counts_from_fn_to_its_brace() {
    let text = "fn a() {\n    x;\n}\n\n    pub(crate) async fn b(\n        y: u8,\n    ) {\n        z;\n    }\n";
    assert_eq!(
        functions(text),
        [("a".to_string(), 3), ("b".to_string(), 5)]
    );
}

#[test]
fn no_file_over_600_lines_and_no_function_over_150() {
    let root = repo();
    let mut files = Vec::new();
    for d in ["engine", "harness", "fuzz"] {
        rust_files(&root.join(d), &mut files);
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    let mut over = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        let n = text.lines().count();
        if n > MAX_FILE_LINES {
            over.push(format!("{rel}: {n} lines"));
        }
        for (name, len) in functions(&text) {
            let allowed = LONG_FUNCTIONS
                .iter()
                .any(|(p, n, _)| *p == rel && *n == name);
            if len > MAX_FN_LINES && !allowed {
                over.push(format!("{rel}: fn {name}, {len} lines"));
            }
        }
    }
    assert!(over.is_empty(), "over the limits: {over:#?}");
}
