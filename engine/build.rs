//! The commit a crate is built from, for `/api/stats`, `--version` and the records
//! (`MOEFLEET_BUILD_COMMIT`): `git rev-parse HEAD`, with `-dirty` when tracked files differ from it,
//! or `unknown` outside a git checkout. The engine's build script and the harness's (its Cargo.toml
//! points here): paths are relative to the crate being built. Re-run when HEAD, the index or that
//! crate's sources change; an edit elsewhere that is never staged does not mark the build dirty.
//!
//! `git status` runs without optional locks: otherwise, in a fresh clone (files as new as the
//! index), it rewrites the index to refresh its stat data, which makes the next cargo command
//! re-run this script and rebuild the engine and everything above it (CI lost minutes to that).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    for p in ["../.git/HEAD", "../.git/index", "../.git/logs/HEAD", "src"] {
        println!("cargo:rerun-if-changed={p}");
    }
    let commit = match git(&["rev-parse", "HEAD"]) {
        Some(c) if !c.is_empty() => {
            let dirty = git(&[
                "--no-optional-locks",
                "status",
                "--porcelain",
                "--untracked-files=no",
            ])
            .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{c}-dirty")
            } else {
                c
            }
        }
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=MOEFLEET_BUILD_COMMIT={commit}");
}
