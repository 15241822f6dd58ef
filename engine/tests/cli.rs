//! The `moefleet` binary as a user runs it: real files, real process, clear errors.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Output};

use common::skip;

fn moefleet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_moefleet"))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `--version` names the commit, so a log that prints it says which code ran.
#[test]
fn version_names_the_commit() {
    let o = moefleet(&["--version"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let commit = moefleet_engine::BUILD_COMMIT;
    assert_eq!(
        out.trim(),
        format!("moefleet {} (commit {commit})", env!("CARGO_PKG_VERSION"))
    );
    assert!(commit == "unknown" || commit.len() >= 40, "{commit}");
}

#[test]
fn generate_prints_text_and_rates() {
    let o = moefleet(&[
        "generate",
        "--preset",
        "inkling-nano",
        "--prompt",
        "The river runs",
        "--max-tokens",
        "12",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.starts_with("The river runs") && out.len() > "The river runs".len(),
        "{out}"
    );
    assert!(
        err.contains("prefill") && err.contains("decode 12 tokens at") && err.contains("tok/s"),
        "{err}"
    );
}

#[test]
fn export_inspect_and_generate_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let o = moefleet(&[
        "export",
        "--preset",
        "inkling-nano",
        "--seed",
        "7",
        "--out",
        d,
    ]);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = moefleet(&["inspect", d]);
    let (out, _) = text(&o);
    assert!(
        o.status.success() && out.contains("inkling-nano") && out.contains("experts"),
        "{out}"
    );
    let from_files = moefleet(&[
        "generate",
        "--weights",
        d,
        "--prompt",
        "Hello there",
        "--max-tokens",
        "8",
    ]);
    let generated = moefleet(&[
        "generate",
        "--preset",
        "inkling-nano",
        "--seed",
        "7",
        "--prompt",
        "Hello there",
        "--max-tokens",
        "8",
    ]);
    assert!(from_files.status.success(), "{}", text(&from_files).1);
    assert_eq!(
        from_files.stdout, generated.stdout,
        "an export generates the same text as its synthetic model"
    );
}

#[test]
fn inspect_inkling_reports_the_paper_accounting() {
    let o = moefleet(&["inspect", "inkling"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    // stored format 16.31 GB of experts; 16.76 with the zero points the paper's accounting counts
    assert!(
        out.contains("16.307 GB") && out.contains("16.760 GB"),
        "{out}"
    );
    assert!(
        out.contains("8.584 GB") && out.contains("1.235 GB"),
        "{out}"
    );
}

#[test]
fn bad_arguments_get_clear_errors_not_panics() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["generate", "--preset", "inkling-huge", "--prompt", "x"],
            "unknown preset",
        ),
        (
            &[
                "generate",
                "--preset",
                "inkling-nano",
                "--prompt",
                "x",
                "--max-tokens",
                "0",
            ],
            "max-tokens",
        ),
        (
            &["generate", "--preset", "inkling-nano", "--prompt", ""],
            "no tokens",
        ),
        (
            &["generate", "--weights", "/nonexistent/dir", "--prompt", "x"],
            "/nonexistent/dir",
        ),
        (
            &["inspect", "/nonexistent/dir"],
            "neither an export directory",
        ),
        (
            &[
                "export",
                "--preset",
                "inkling-nano",
                "--out",
                "/proc/forbidden/x",
            ],
            "/proc/forbidden",
        ),
        (
            &[
                "export",
                "--preset",
                "inkling-nano",
                "--layers",
                "99",
                "--out",
                "/tmp/x",
            ],
            "--layers",
        ),
        (
            &[
                "tokenizer",
                "--corpus",
                "/nonexistent.txt",
                "--out",
                "/tmp/t.json",
            ],
            "nonexistent",
        ),
    ];
    // the draft head's arguments, after a serve line that asks for it
    let serve = [
        "serve",
        "--preset",
        "inkling-nano",
        "--roles",
        "2",
        "--speculate",
        "--proposers",
        "mtp",
    ];
    let head: &[(&[&str], &str)] = &[
        (&[], "--mtp-head"),
        (&["--mtp-head", "/nonexistent/head"], "/nonexistent/head"),
        (&["--mtp-head", "/tmp", "--mtp-p-min", "2"], "--mtp-p-min"),
    ];
    let head: Vec<(Vec<&str>, &str)> = head
        .iter()
        .map(|(extra, want)| ([&serve[..], extra].concat(), *want))
        .collect();
    let cases = cases
        .iter()
        .map(|(a, w)| (*a, *w))
        .chain(head.iter().map(|(a, w)| (a.as_slice(), *w)));
    for (args, want) in cases {
        let o = moefleet(args);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: stderr lacks '{want}': {err}");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
}

#[test]
fn bench_prints_llama_bench_rows_and_writes_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("bench.json");
    let o = moefleet(&[
        "bench",
        "--preset",
        "inkling-nano",
        "--threads",
        "1,2",
        "--prompt",
        "16",
        "--gen",
        "8",
        "--repetitions",
        "2",
        "--json",
        rec.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for row in ["| 1 | pp16 |", "| 1 | tg8 |", "| 2 | pp16 |", "| 2 | tg8 |"] {
        assert!(out.contains(row), "{row} missing: {out}");
    }
    assert!(err.contains("load average"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&rec).unwrap()).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    for r in results {
        assert_eq!(r["tok_s"].as_array().unwrap().len(), 2);
        assert!(r["mean"].as_f64().unwrap() > 0.0, "{r}");
    }
    // this project runs on Linux, where /proc/loadavg always has the three averages
    for k in ["load_average_start", "load_average_end"] {
        assert_eq!(v[k].as_array().map(|a| a.len()), Some(3), "{k}: {}", v[k]);
    }
    assert_eq!(v["decode_profiles"].as_array().unwrap().len(), 2);
    // nothing to run, and zero threads, are clear errors
    let o = moefleet(&["bench", "--preset", "inkling-nano", "--prompt", "--gen"]);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("nothing to run"), "{}", text(&o).1);
    let o = moefleet(&["bench", "--preset", "inkling-nano", "--threads", "0"]);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("threads"), "{}", text(&o).1);
}

/// A short generation, run with and without the source tree.
const GENERATE: [&str; 7] = [
    "generate",
    "--preset",
    "inkling-nano",
    "--prompt",
    "The river runs",
    "--max-tokens",
    "8",
];

/// The binary needs no source tree: with `workloads/` hidden behind an empty tmpfs (a private
/// mount namespace), `generate` still tokenises with the embedded tokenizer and prints the same
/// text as with the tree visible. Skipped, with the reason printed, where `unshare` cannot make
/// the namespace; a failure instead with `MOEFLEET_REQUIRE_NETNS=1` (set by `.ci/run` where
/// namespaces can be made).
#[test]
fn generate_runs_without_the_source_tree() {
    let skip = |why: &str| {
        skip(
            "generate_runs_without_the_source_tree",
            "MOEFLEET_REQUIRE_NETNS",
            why,
        )
    };
    let workloads = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../workloads");
    let workloads = workloads.canonicalize().unwrap();
    let args = GENERATE.map(|a| format!("'{a}'")).join(" ");
    let exe = env!("CARGO_BIN_EXE_moefleet");
    let script = format!(
        "mount -t tmpfs none '{}' || exit 77; test ! -e '{}/tokenizer.json' || exit 78; exec '{exe}' {args}",
        workloads.display(),
        workloads.display()
    );
    let hidden = Command::new("unshare")
        .args(["-rm", "sh", "-c", &script])
        .output();
    let hidden = match hidden {
        Ok(o) if matches!(o.status.code(), Some(77) | Some(78)) || o.status.code().is_none() => {
            return skip(&format!("cannot hide workloads/ ({})", text(&o).1.trim()));
        }
        Err(e) => return skip(&format!("unshare is not available ({e})")),
        Ok(o) if text(&o).1.contains("unshare failed") => return skip(text(&o).1.trim()),
        Ok(o) => o,
    };
    let (out, err) = text(&hidden);
    assert!(hidden.status.success(), "without the source tree: {err}");
    let seen = moefleet(&GENERATE);
    assert!(seen.status.success());
    assert_eq!(out, text(&seen).0);
}
