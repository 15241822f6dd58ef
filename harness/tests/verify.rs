//! `verify` on a copy of the committed claims and records: it passes as committed and fails, naming
//! what broke, when a committed number is edited by hand.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use moefleet_harness::claims;

/// The document holding the tables verify renders again.
const RESULTS: &str = "docs/RESULTS.md";

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
    // docs/RESULTS.md holds the tables verify renders again
    std::fs::create_dir_all(t.path().join("docs")).unwrap();
    std::fs::copy(repo().join(RESULTS), t.path().join(RESULTS)).unwrap();
    let f = claims::load(&repo()).unwrap();
    let mut dirs: Vec<String> = [
        &f.runs_of("runs"),
        &f.runs_of("draft_runs"),
        &f.runs_of("speculation_runs"),
        &f.runs_of("peer_runs"),
        &f.runs_of("context_runs"),
    ]
    .into_iter()
    .flatten()
    .cloned()
    .collect();
    // every results/<dir> the claims name anywhere (ratios name two)
    let text = std::fs::read_to_string(repo().join("reproduction/claims.toml")).unwrap();
    for (i, _) in text.match_indices("\"results/") {
        let rest = &text[i + 9..];
        let end = rest.find(['/', '"']).unwrap();
        dirs.push(format!("results/{}", &rest[..end]));
    }
    dirs.sort();
    dirs.dedup();
    for d in dirs {
        copy_dir(&repo().join(&d), &t.path().join(&d));
    }
    t
}

/// Every failure of a whole `verify`: each claim, CLAIMS.md, every re-derivation and the coverage
/// check.
fn failures(root: &Path) -> Vec<String> {
    let (_, f) = claims::verify(root).unwrap();
    f.iter().map(|x| format!("{}: {}", x.what, x.why)).collect()
}

/// The failures of `verify` limited to the re-derivations of `runs` (every claim and CLAIMS.md are
/// still checked): a test that edits one run re-derives that run, not every run, which is what
/// keeps these tests inside CI's budget. `committed_claims_hold` runs the whole verify.
fn failures_of(root: &Path, runs: &[&str]) -> Vec<String> {
    let only = |run: &str| runs.contains(&run);
    let (_, f) = claims::verify_where(root, Some(&only)).unwrap();
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
    let run = t.path().join(&f.runs_of("runs")[0]);
    let p = run.join("curve.csv");
    let text = std::fs::read_to_string(&p).unwrap();
    // change one digit of the first data row's q_decode_mean
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut cells: Vec<String> = lines[1].split(',').map(str::to_string).collect();
    cells[1] = format!("{}", cells[1].parse::<f64>().unwrap() * 1.01);
    lines[1] = cells.join(",");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    let fails = failures_of(t.path(), &[f.runs_of("runs")[0].as_str()]);
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
    let fails = failures_of(t.path(), &[]);
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
    let fails = failures_of(t.path(), &[]);
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
    let fails = failures_of(t.path(), &[]);
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
    let dir = t.path().join(&f.runs_of("draft_runs")[0]);
    let p = dir.join("table6.md");
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, text.replacen("12.12 %", "14.12 %", 1)).unwrap();
    let fails = failures_of(t.path(), &[f.runs_of("draft_runs")[0].as_str()]);
    assert!(
        fails.iter().any(|f| f.contains("table6.md differs")),
        "{fails:#?}"
    );
    // one anchor's prediction turned into a hit: the first-draft claim no longer holds
    let a = dir.join("anchors.csv.gz");
    let mut anchors = moefleet_harness::experiments::draft::anchors::Anchors::read_gz(&a).unwrap();
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
    let fails = failures_of(t.path(), &[f.runs_of("draft_runs")[0].as_str()]);
    assert!(
        fails
            .iter()
            .any(|f| f.starts_with("claim 'draft-first-draft-full'")),
        "{fails:#?}"
    );
}

/// Every kind of committed run whose tables `verify` rebuilds from raw data: a peer run, a
/// speculation experiment, a context scan, a sweep, a dense experiment, a context probe and a
/// ceilings record each fail, naming the table
/// or measurement, when one derived number is edited (the claims may still hold: the record itself
/// is checked); so does a Parquet twin that stops holding its CSV's table.
#[test]
fn an_edited_derived_table_fails_for_every_run_kind() {
    let t = scratch();
    let f = claims::load(t.path()).unwrap();
    // (run, table, text to change, its replacement)
    let peer = &f.runs_of("peer_runs")[0];
    let spec = &f.runs_of("speculation_runs")[0];
    let scan = &f.runs_of("context_runs")[0];
    let sweep = &f.runs_of("runs").last().unwrap().clone();
    for (run, table) in [
        (peer, "peer.csv"),
        (spec, "model.csv"),
        (scan, "context.csv"),
        (sweep, "phases.csv"),
        (&f.runs_of("dense_runs")[0], "dense.csv"),
        (&f.runs_of("probe_runs")[0], "context_probe.csv"),
    ] {
        let p = t.path().join(run).join(table);
        let text = std::fs::read_to_string(&p).unwrap();
        // bump the first digit after the header line that is not 9
        let header = text.find('\n').unwrap() + 1;
        let at = header
            + text[header..]
                .find(|c: char| c.is_ascii_digit() && c != '9')
                .unwrap();
        let d = text.as_bytes()[at] - b'0';
        let mut edited = text.clone();
        edited.replace_range(at..at + 1, &((d + 1).to_string()));
        std::fs::write(&p, &edited).unwrap();
        let fails = failures_of(t.path(), &[run.as_str()]);
        assert!(
            fails
                .iter()
                .any(|x| x.contains(run.as_str()) && x.contains(&format!("{table} differs"))),
            "{run}/{table}: {fails:#?}"
        );
        std::fs::write(&p, text).unwrap();
    }
    // a ceilings record: an edited median, and an edited ratio
    let ceilings = &f.runs_of("ceilings_runs")[0];
    let p = t.path().join(ceilings);
    let text = std::fs::read_to_string(&p).unwrap();
    for (key, field) in [
        ("read_bandwidth_all", "median"),
        ("int4_expert_product_all", "pct_of_read_bandwidth"),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let m = &mut v["measurements"][key][field];
        *m = serde_json::json!(m.as_f64().unwrap() * 1.01);
        std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        let fails = failures_of(t.path(), &[ceilings.as_str()]);
        assert!(
            fails
                .iter()
                .any(|x| x.contains(ceilings.as_str()) && x.contains(&format!("{key} differs"))),
            "{ceilings}/{key}/{field}: {fails:#?}"
        );
    }
    std::fs::write(&p, &text).unwrap();
    // a Parquet twin that no longer holds its CSV's table
    let twin = t.path().join(sweep).join("curve.parquet");
    let kept = std::fs::read(&twin).unwrap();
    std::fs::copy(t.path().join(sweep).join("phases.parquet"), &twin).unwrap();
    let fails = failures_of(t.path(), &[sweep.as_str()]);
    assert!(
        fails
            .iter()
            .any(|x| x.contains(sweep.as_str()) && x.contains("curve.parquet")),
        "{fails:#?}"
    );
    std::fs::write(&twin, kept).unwrap();
    // a reliability record whose summary no longer follows from its rows, and a results table
    // edited by hand
    let reliability = f.runs_of("reliability_runs").last().unwrap().clone();
    for (run, file, from, to, named) in [
        (
            reliability.as_str(),
            format!("{reliability}/soak.json"),
            "\"truncated\": 0",
            "\"truncated\": 2",
            "reliability run",
        ),
        (
            RESULTS,
            RESULTS.to_string(),
            "| 0 corrupted, 0 truncated |",
            "| 0 corrupted, 1 truncated |",
            "docs/RESULTS.md reliability table",
        ),
    ] {
        let p = t.path().join(&file);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains(from), "{file} has no {from}");
        std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
        let fails = failures_of(t.path(), &[run]);
        assert!(
            fails.iter().any(|x| x.starts_with(named)),
            "{file}: {fails:#?}"
        );
        std::fs::write(&p, text).unwrap();
    }
    // every run edited above, restored, re-derives again
    let edited: [&str; 9] = [
        peer,
        spec,
        scan,
        sweep,
        &f.runs_of("dense_runs")[0],
        &f.runs_of("probe_runs")[0],
        ceilings,
        &reliability,
        RESULTS,
    ];
    let left = failures_of(t.path(), &edited);
    assert!(left.is_empty(), "restored, all must hold again: {left:#?}");
}

#[test]
fn an_edited_readme_table_fails_naming_the_table() {
    let t = scratch();
    let p = t.path().join(RESULTS);
    let text = std::fs::read_to_string(&p).unwrap();
    // the simulator's C = 176 prediction for our kernels at the paper's bandwidth
    let row = "| 176 | 54.2 | 54.2 | 91.6 | 1010.4 | 87.6 |";
    assert!(text.contains(row), "{RESULTS} no longer holds {row}");
    std::fs::write(
        &p,
        text.replacen(row, "| 176 | 54.2 | 54.2 | 91.6 | 1010.4 | 97.6 |", 1),
    )
    .unwrap();
    let fails = failures_of(t.path(), &[RESULTS]);
    assert!(
        fails
            .iter()
            .any(|f| f.starts_with("docs/RESULTS.md table simulator-predictions")),
        "{fails:#?}"
    );
}

/// The value a claim's rule reads in `text` (CSV or JSON), changed by half of itself (or set to 1
/// where it is 0); None for rules over raw records (gzipped anchors, token files, a load search's
/// per-request records), which are not re-derived.
fn edit_what_the_rule_reads(rule: &claims::Rule, text: &str) -> Option<String> {
    use claims::Rule::*;
    let bump = |v: f64| if v == 0.0 { 1.0 } else { v * 1.5 };
    let (col, key): (&str, Option<(&str, &str)>) = match rule {
        CsvValue {
            key_col, key, col, ..
        } => (col.as_str(), Some((key_col.as_str(), key.as_str()))),
        CsvAll { col, .. } | CsvMax { col, .. } | CsvMean { col, .. } => (col.as_str(), None),
        CsvMeanRatio {
            key_col,
            col,
            numerator,
            ..
        } => (
            col.as_str(),
            Some((key_col.as_str(), numerator[0].as_str())),
        ),
        PaperPairedMean { col, .. } => (col.as_str(), None),
        PeakLevel { .. } => ("q_decode_mean", None),
        JsonValue { pointer, .. } | JsonDifferencePp { a: pointer, .. } => {
            let mut v: serde_json::Value = serde_json::from_str(text).ok()?;
            let x = v.pointer_mut(pointer)?;
            *x = match x.as_bool() {
                Some(b) => serde_json::json!(!b),
                None => serde_json::json!(bump(x.as_f64()?)),
            };
            return serde_json::to_string_pretty(&v).ok();
        }
        JsonAcross(r) => {
            let mut v: serde_json::Value = serde_json::from_str(text).ok()?;
            let x = v.pointer_mut(&r.pointer)?;
            *x = serde_json::json!(bump(x.as_f64()?));
            return serde_json::to_string_pretty(&v).ok();
        }
        JsonSum { pointers, .. } => {
            let mut v: serde_json::Value = serde_json::from_str(text).ok()?;
            let x = v.pointer_mut(&pointers[0])?;
            *x = serde_json::json!(bump(x.as_f64()?));
            return serde_json::to_string_pretty(&v).ok();
        }
        JsonMean { pointer, .. } | JsonMedian { pointer, .. } => {
            let mut v: serde_json::Value = serde_json::from_str(text).ok()?;
            for x in v.pointer_mut(pointer)?.as_array_mut()? {
                *x = serde_json::json!(bump(x.as_f64()?));
            }
            return serde_json::to_string_pretty(&v).ok();
        }
        Ratio { .. }
        | DraftAgreement { .. }
        | DraftDifferencePp { .. }
        | DraftExpected { .. }
        | GgufParity { .. }
        | LoadSearch { .. }
        | LoadArms { .. }
        | LoadStep(_) => return None,
    };
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let c = header.iter().position(|h| *h == col)?;
    let k = key.map(|(kc, _)| header.iter().position(|h| *h == kc));
    let row = (1..lines.len()).find(|&i| {
        let cells: Vec<&str> = lines[i].split(',').collect();
        match (k, key) {
            (Some(Some(k)), Some((_, want))) => cells.get(k) == Some(&want),
            _ => cells.get(c).is_some_and(|v| !v.is_empty()),
        }
    })?;
    let mut cells: Vec<String> = lines[row].split(',').map(str::to_string).collect();
    cells[c] = match cells[c].parse::<f64>() {
        Ok(v) => bump(v).to_string(),
        Err(_) if cells[c] == "true" => "false".to_string(),
        Err(_) => format!("{}x", cells[c]),
    };
    lines[row] = cells.join(",");
    Some(lines.join("\n") + "\n")
}

/// The leaf rules of a claim (a ratio's two sides).
fn leaves(rule: &claims::Rule) -> Vec<&claims::Rule> {
    match rule {
        claims::Rule::Ratio { num, den } => {
            let mut v = leaves(num);
            v.extend(leaves(den));
            v
        }
        r => vec![r],
    }
}

/// Issue 29: for every file a claim reads that verify re-derives (everything claims.toml's
/// not_rederived does not list), an edit of the very value the claim reads fails a re-derivation
/// check, not only the claim: a hand edit of the record and the claim together cannot pass.
#[test]
fn an_edit_of_any_value_a_claim_reads_fails_its_rederivation() {
    let t = scratch();
    let f = claims::load(t.path()).unwrap();
    let listed = |file: &str| {
        f.not_rederived.iter().any(|l| {
            if l.path.ends_with('/') {
                file.starts_with(&l.path)
            } else {
                file == l.path
            }
        })
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut checked = 0;
    for c in f.section.iter().flat_map(|s| &s.claim) {
        for rule in leaves(&c.rule) {
            let file = rule.files()[0].to_string();
            if listed(&file) || !seen.insert(file.clone()) {
                continue;
            }
            let p = t.path().join(&file);
            let text = std::fs::read_to_string(&p).unwrap();
            let Some(edited) = edit_what_the_rule_reads(rule, &text) else {
                panic!("claim '{}': cannot edit what it reads in {file}", c.id);
            };
            assert_ne!(edited, text, "{file}");
            std::fs::write(&p, &edited).unwrap();
            let only = |run: &str| file.starts_with(run);
            let (_, fails) = claims::verify_where(t.path(), Some(&only)).unwrap();
            let rederived: Vec<String> = fails
                .iter()
                .filter(|x| !x.what.starts_with("claim "))
                .map(|x| format!("{}: {}", x.what, x.why))
                .collect();
            assert!(
                !rederived.is_empty(),
                "claim '{}': an edit of {file} failed no re-derivation: {:#?}",
                c.id,
                fails.iter().map(|x| &x.what).collect::<Vec<_>>()
            );
            std::fs::write(&p, &text).unwrap();
            checked += 1;
        }
    }
    eprintln!("{checked} claimed files edited, each caught by its re-derivation");
    assert!(checked >= 30, "only {checked} files checked");
}

/// A GGUF parity run: its tables are re-derived from the raw records, and its claims
/// are recomputed from the raw records themselves (one fleet token changed fails the fleet claim).
#[test]
fn an_edited_parity_table_or_record_fails() {
    let t = scratch();
    let f = claims::load(t.path()).unwrap();
    let run = f.runs_of("parity_runs")[0].clone();
    let only = |r: &str| r == run;
    let fails = || -> Vec<String> {
        let (_, f) = claims::verify_where(t.path(), Some(&only)).unwrap();
        f.iter().map(|x| format!("{}: {}", x.what, x.why)).collect()
    };
    assert!(fails().is_empty(), "{:#?}", fails());
    for (file, from, to) in [
        ("parity.csv", ",true,", ",false,"),
        ("margins.csv", "\n1,0.0001,0.001,", "\n1,0.0001,0.001,1"),
        ("PARITY.md", "| 100.0 % |", "| 99.0 % |"),
    ] {
        let p = t.path().join(&run).join(file);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains(from), "{file} has no {from}");
        std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
        let fl = fails();
        assert!(
            fl.iter().any(|x| x.contains(&format!("{file} differs"))),
            "{file}: {fl:#?}"
        );
        std::fs::write(&p, text).unwrap();
    }
    let p = t.path().join(&run).join("fleet.jsonl");
    let text = std::fs::read_to_string(&p).unwrap();
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let first = &mut lines[0]["generated_ids"][0];
    *first = serde_json::json!(first.as_u64().unwrap() + 1);
    let edited: String = lines.iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(&p, edited).unwrap();
    let fl = fails();
    assert!(
        fl.iter()
            .any(|x| x.starts_with("claim 'gguf-parity-fleet-identical'")),
        "{fl:#?}"
    );
    std::fs::write(&p, text).unwrap();
}

/// A search's `search` (its share and target) edited in search.json alone fails: verify holds it
/// to the command the run recorded.
#[test]
fn an_edited_search_configuration_fails() {
    let t = scratch();
    let f = claims::load(t.path()).unwrap();
    let run = f
        .runs_of("load_runs")
        .iter()
        .find(|r| t.path().join(r).join("search.json").is_file())
        .unwrap()
        .clone();
    let p = t.path().join(&run).join("search.json");
    let text = std::fs::read_to_string(&p).unwrap();
    let edited = text.replacen("\"share\": 0.9", "\"share\": 0.5", 1);
    assert_ne!(edited, text);
    std::fs::write(&p, edited).unwrap();
    let fails = failures_of(t.path(), &[run.as_str()]);
    assert!(
        fails
            .iter()
            .any(|x| x.contains("is not the one its command ran")),
        "{fails:#?}"
    );
}
