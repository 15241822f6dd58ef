//! Every section the code and documents cite exists in `docs/`: `ARCHITECTURE.md §3.3`,
//! `MEASUREMENTS.md §2.1–2.2` (every number of a list or range), `FORMAT.md "Capture files"`.
//! Scans the sources, scripts and Markdown of the repository (not `results/`, whose records quote
//! text as it was when they were written).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files that may cite a document.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            if !["target", "results", ".git", "node_modules", "corpus"].contains(&name.as_str()) {
                sources(&p, out);
            }
        } else if [".rs", ".md", ".sh", ".py", ".toml"]
            .iter()
            .any(|x| name.ends_with(x))
            || name == "Makefile"
        {
            out.push(p);
        }
    }
}

/// The section numbers cited right after each `doc` ("ARCHITECTURE.md") in `text`: "§1.3, 1.5",
/// "§2.1–2.2" and "§1.7, §3.3" give every number; a bare "ARCHITECTURE.md" gives none.
fn numbers_cited(text: &str, doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices(doc) {
        let mut rest = text[at + doc.len()..].strip_prefix(' ').unwrap_or("");
        loop {
            rest = rest.strip_prefix('§').unwrap_or(rest);
            let len = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            let n = rest[..len].trim_end_matches('.');
            if n.is_empty() || !n.starts_with(|c: char| c.is_ascii_digit()) {
                break;
            }
            out.push(n.to_string());
            // a list or range goes on with ", ", "-" or "–" and another number
            let after = rest[len..].trim_start_matches([',', '-', '–', ' ']);
            let sep = &rest[len..rest.len() - after.len()];
            if !sep.contains([',', '-', '–']) {
                break;
            }
            rest = after;
        }
    }
    out
}

/// The section names cited as `FORMAT.md "Name"` or `FORMAT.md, "Name"`.
fn names_cited(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("FORMAT.md") {
        let rest = text[at + "FORMAT.md".len()..].trim_start_matches([',', ' ']);
        if let Some(q) = rest.strip_prefix('"') {
            if let Some(end) = q.find('"') {
                out.push(q[..end].to_string());
            }
        }
    }
    out
}

/// `text` with each line break and the comment marker or indent after it made one space, so a
/// citation wrapped over two comment lines reads as one.
fn joined(text: &str) -> String {
    text.lines()
        .map(|l| {
            let t = l.trim_start();
            ["//!", "///", "//", "#"]
                .iter()
                .find_map(|m| t.strip_prefix(m))
                .unwrap_or(t)
                .trim()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn headings(doc: &str) -> Vec<String> {
    std::fs::read_to_string(repo().join("docs").join(doc))
        .unwrap_or_else(|e| panic!("docs/{doc}: {e}"))
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim().to_string())
        .collect()
}

#[test]
fn the_citation_scanner_reads_lists_and_ranges() {
    let t = "see ARCHITECTURE.md §1.3, 1.5, 1.6; the and ARCHITECTURE.md §1.7, §3.3 and \
             MEASUREMENTS.md §2.1–2.2 or MEASUREMENTS.md §5. Then MEASUREMENTS.md 2.2 (old)";
    assert_eq!(
        numbers_cited(t, "ARCHITECTURE.md"),
        ["1.3", "1.5", "1.6", "1.7", "3.3"]
    );
    assert_eq!(
        numbers_cited(t, "MEASUREMENTS.md"),
        ["2.1", "2.2", "5", "2.2"]
    );
    assert_eq!(
        names_cited(r#"FORMAT.md "Capture files" and (FORMAT.md, "Numeric choices")"#),
        ["Capture files", "Numeric choices"]
    );
}

#[test]
fn every_cited_section_exists_in_docs() {
    let mut files = Vec::new();
    sources(&repo(), &mut files);
    // this file quotes the forms it looks for
    files.retain(|f| !f.ends_with("tests/docs.rs"));
    assert!(files.len() > 100, "found only {} files", files.len());
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in ["ARCHITECTURE.md", "MEASUREMENTS.md"] {
        let heads = headings(doc);
        for f in &files {
            let text = joined(&std::fs::read_to_string(f).unwrap_or_default());
            for n in numbers_cited(&text, doc) {
                checked += 1;
                // "## 3. ..." for a top-level number, "### 3.3 ..." for a subsection
                let found = heads.iter().any(|h| {
                    h.strip_prefix(&n)
                        .is_some_and(|r| r.starts_with(". ") || r.starts_with(' '))
                });
                if !found {
                    missing.push(format!("{}: {doc} §{n}", f.display()));
                }
            }
        }
    }
    let heads = headings("FORMAT.md");
    for f in &files {
        let text = joined(&std::fs::read_to_string(f).unwrap_or_default());
        for name in names_cited(&text) {
            checked += 1;
            if !heads.iter().any(|h| h == &name) {
                missing.push(format!("{}: FORMAT.md \"{name}\"", f.display()));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} citations found: is the scanner reading?"
    );
    assert!(
        missing.is_empty(),
        "cited sections missing from docs/: {missing:#?}"
    );
}

#[test]
fn nothing_cites_documents_outside_the_repository() {
    let mut files = Vec::new();
    sources(&repo(), &mut files);
    let outside: Vec<String> = files
        .iter()
        // the paper's source note names the shared copy it was taken from; this file names both
        .filter(|f| !f.ends_with("reproduction/paper/SOURCE.md") && !f.ends_with("tests/docs.rs"))
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            text.contains("shared/spec/") || text.contains("engine/FORMAT.md")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(outside.is_empty(), "{outside:#?}");
}
