//! `verify` on a copy of the committed claims and records: it passes as committed and fails, naming
//! what broke, when a committed number is edited by hand.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use moefleet_harness::claims;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// A scratch root with reproduction/ and every claimed run.
fn scratch() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    copy_dir(&repo().join("reproduction"), &t.path().join("reproduction"));
    let f = claims::load(&repo()).unwrap();
    let mut dirs: Vec<String> = f.runs.clone();
    for c in f.section.iter().flat_map(|s| &s.claim) {
        let d = c.rule.describe();
        if let Some(rest) = d.strip_prefix("`results/") {
            dirs.push(format!("results/{}", rest.split('/').next().unwrap()));
        }
    }
    dirs.sort();
    dirs.dedup();
    for d in dirs {
        copy_dir(&repo().join(&d), &t.path().join(&d));
    }
    t
}

fn failures(root: &Path) -> Vec<String> {
    let (_, f) = claims::verify(root).unwrap();
    f.iter().map(|x| format!("{}: {}", x.what, x.why)).collect()
}

#[test]
fn committed_claims_hold() {
    let f = failures(&repo());
    assert!(f.is_empty(), "{f:#?}");
}

#[test]
fn an_edited_table_number_fails_naming_the_run() {
    let t = scratch();
    let f = claims::load(t.path()).unwrap();
    let run = t.path().join(&f.runs[0]);
    let p = run.join("curve.csv");
    let text = std::fs::read_to_string(&p).unwrap();
    // change one digit of the first data row's q_decode_mean
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut cells: Vec<String> = lines[1].split(',').map(str::to_string).collect();
    cells[1] = format!("{}", cells[1].parse::<f64>().unwrap() * 1.01);
    lines[1] = cells.join(",");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    let fails = failures(t.path());
    assert!(
        fails.iter().any(|f| f.contains("curve.csv differs")),
        "{fails:#?}"
    );
    assert!(
        fails
            .iter()
            .any(|f| f.starts_with("claim 'fleet-single-stream-decode'")),
        "{fails:#?}"
    );
}

#[test]
fn an_edited_claims_md_or_claim_value_fails() {
    let t = scratch();
    let md = t.path().join("reproduction/CLAIMS.md");
    let text = std::fs::read_to_string(&md).unwrap();
    std::fs::write(&md, text.replacen("60.29", "61.29", 1)).unwrap();
    let fails = failures(t.path());
    assert!(
        fails
            .iter()
            .any(|f| f.starts_with("reproduction/CLAIMS.md")),
        "{fails:#?}"
    );

    let toml = t.path().join("reproduction/claims.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        text.replacen("value = 60.286375128761485", "value = 60.3", 1),
    )
    .unwrap();
    let fails = failures(t.path());
    assert!(
        fails
            .iter()
            .any(|f| f.starts_with("claim 'paper-peak-decode'")),
        "{fails:#?}"
    );
}

#[test]
fn a_missing_record_fails_naming_the_claim() {
    let t = scratch();
    std::fs::remove_file(t.path().join("reproduction/paper/derived.json")).unwrap();
    let fails = failures(t.path());
    assert!(
        fails
            .iter()
            .any(|f| f.starts_with("claim 'paper-mtp-vocabulary-pp'") && f.contains("missing")),
        "{fails:#?}"
    );
}

#[test]
fn an_edited_draft_table_or_anchor_fails() {
    let t = scratch();
    let f = claims::load(t.path()).unwrap();
    let dir = t.path().join(&f.draft_runs[0]);
    let p = dir.join("table6.md");
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, text.replacen("12.12 %", "14.12 %", 1)).unwrap();
    let fails = failures(t.path());
    assert!(
        fails.iter().any(|f| f.contains("table6.md differs")),
        "{fails:#?}"
    );
    // one anchor's prediction turned into a hit: the first-draft claim no longer holds
    let a = dir.join("anchors.csv.gz");
    let mut anchors = moefleet_harness::draft::anchors::Anchors::read_gz(&a).unwrap();
    let col = anchors
        .columns
        .iter()
        .position(|c| c == "fitted_teacher")
        .unwrap();
    let i = (0..anchors.len())
        .find(|&i| anchors.module[i] == 0 && anchors.preds[col][i] != anchors.target[i])
        .unwrap();
    anchors.preds[col][i] = anchors.target[i];
    anchors.write_gz(&a).unwrap();
    let fails = failures(t.path());
    assert!(
        fails
            .iter()
            .any(|f| f.starts_with("claim 'draft-first-draft-full'")),
        "{fails:#?}"
    );
}
