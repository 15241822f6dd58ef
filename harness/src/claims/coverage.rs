//! What `verify` re-derives, and the check that nothing a claim reads or `results/` tabulates is
//! taken on trust without saying so: every file a claim's rule reads, and every CSV or Markdown
//! table under `results/`, must either be re-derived from raw data by one of verify's checks or be
//! listed in `claims.toml`'s `not_rederived` with the reason (a raw measurement, the paper's
//! published data, or a derivation verify cannot repeat). A listed path that does not exist, or
//! a listed file verify does re-derive, is an error too, so the list cannot go stale.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use super::Failure;

/// A file, or a directory ending in `/` (everything under it), that verify takes as it is.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotRederived {
    pub path: String,
    pub why: String,
}

impl NotRederived {
    fn matches(&self, file: &str) -> bool {
        if self.path.ends_with('/') {
            file.starts_with(&self.path)
        } else {
            file == self.path
        }
    }
}

/// The files verify's checks re-derived, relative to the repository root.
#[derive(Debug)]
pub struct Covered {
    root: PathBuf,
    files: BTreeSet<String>,
}

/// Tables under `results/` that must be accounted for.
const TABLE_EXTENSIONS: [&str; 2] = ["csv", "md"];

impl Covered {
    pub fn new(root: &Path) -> Self {
        Covered {
            root: root.to_path_buf(),
            files: BTreeSet::new(),
        }
    }

    /// `path` relative to the root, with `/` separators (as claims.toml names files).
    fn relative(&self, path: &Path) -> String {
        let rel = path.strip_prefix(&self.root).unwrap_or(path);
        rel.components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/")
    }

    pub fn extend(&mut self, files: impl IntoIterator<Item = PathBuf>) {
        for f in files {
            let rel = self.relative(&f);
            self.files.insert(rel);
        }
    }

    pub fn contains(&self, file: &str) -> bool {
        self.files.contains(file)
    }

    /// Every claim's files and every table under `results/` re-derived or listed; every listed
    /// path present and not also re-derived.
    pub fn check<'a>(
        &self,
        claim_files: impl IntoIterator<Item = (&'a str, &'a str)>,
        listed: &[NotRederived],
    ) -> anyhow::Result<Vec<Failure>> {
        let mut fails = Vec::new();
        let is_listed = |file: &str| listed.iter().any(|l| l.matches(file));
        for (id, file) in claim_files {
            if !self.contains(file) && !is_listed(file) {
                fails.push(Failure {
                    what: format!("claim '{id}'"),
                    why: format!(
                        "reads {file}, which verify does not re-derive (or its re-derivation \
                         failed above) and claims.toml's not_rederived does not list"
                    ),
                });
            }
        }
        for file in tables_under(&self.root, "results")? {
            if !self.contains(&file) && !is_listed(&file) {
                fails.push(Failure {
                    what: file.clone(),
                    why: "a committed table that verify does not re-derive and claims.toml's \
                          not_rederived does not list (add its run to a re-derived list, or list \
                          it with the reason)"
                        .into(),
                });
            }
        }
        for l in listed {
            let what = format!("not_rederived entry {}", l.path);
            if l.why.trim().is_empty() {
                fails.push(Failure {
                    what: what.clone(),
                    why: "gives no reason".into(),
                });
            }
            if !self.root.join(l.path.trim_end_matches('/')).exists() {
                fails.push(Failure {
                    what,
                    why: "names a path that does not exist".into(),
                });
            } else if !l.path.ends_with('/') && self.contains(&l.path) {
                fails.push(Failure {
                    what,
                    why: "verify re-derives this file: it is not to be listed as not re-derived"
                        .into(),
                });
            }
        }
        Ok(fails)
    }
}

/// Every CSV or Markdown file under `root/dir`, relative to `root`, sorted: the files git tracks
/// there when `root` is in a git work tree (the committed tables; a run `make reproduce` has just
/// written under `results/` is not committed yet, and its own closing verify must not fail on
/// it), else every such file on disk.
fn tables_under(root: &Path, dir: &str) -> anyhow::Result<Vec<String>> {
    let is_table = |p: &Path| {
        p.extension()
            .is_some_and(|e| TABLE_EXTENSIONS.iter().any(|t| e == *t))
    };
    if let Some(files) = tracked(root, dir) {
        let mut out: Vec<String> = files
            .into_iter()
            .filter(|f| is_table(Path::new(f)))
            .collect();
        out.sort();
        return Ok(out);
    }
    let mut out = Vec::new();
    let mut stack = vec![root.join(dir)];
    while let Some(d) = stack.pop() {
        if !d.exists() {
            continue;
        }
        for entry in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let p = entry?.path();
            if p.is_dir() {
                stack.push(p);
            } else if is_table(&p) {
                let rel = p.strip_prefix(root).unwrap_or(&p);
                out.push(
                    rel.components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect::<Vec<_>>()
                        .join("/"),
                );
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The files git tracks under `root/dir`, relative to `root` (None outside a git work tree, or
/// without git).
fn tracked(root: &Path, dir: &str) -> Option<Vec<String>> {
    // without --full-name, ls-files names paths from the directory it runs in: `root`
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z", "--", dir])
        .output()
        .ok()?;
    out.status.success().then(|| {
        out.stdout
            .split(|b| *b == 0)
            .filter(|f| !f.is_empty())
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(root: &Path, rel: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "x\n").unwrap();
    }

    fn listed(path: &str) -> NotRederived {
        NotRederived {
            path: path.into(),
            why: "raw".into(),
        }
    }

    /// In a git work tree only the tracked tables count: a run just written under `results/`
    /// (untracked) does not fail its own closing verify; outside one, every file on disk counts.
    #[test]
    fn in_a_git_work_tree_only_committed_tables_count() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(root, "results/a/curve.csv");
        touch(root, "results/new-run/curve.csv");
        touch(root, "results/a/notes.txt");
        assert_eq!(
            tables_under(root, "results").unwrap(),
            ["results/a/curve.csv", "results/new-run/curve.csv"]
        );
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .arg("-C")
                .arg(root)
                .args(args)
                .output()
                .is_ok_and(|o| o.status.success());
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q"]);
        git(&["add", "results/a/curve.csv", "results/a/notes.txt"]);
        assert_eq!(
            tables_under(root, "results").unwrap(),
            ["results/a/curve.csv"]
        );
    }

    #[test]
    fn a_file_neither_rederived_nor_listed_fails_and_the_list_cannot_go_stale() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for f in [
            "results/a/curve.csv",
            "results/a/phases.csv",
            "results/b/bench.json",
            "results/c/notes.md",
            "reproduction/paper/x.csv",
        ] {
            touch(root, f);
        }
        let mut c = Covered::new(root);
        c.extend([root.join("results/a/curve.csv")]);
        let claims = [
            ("ok", "results/a/curve.csv"),
            ("raw", "results/b/bench.json"),
            ("paper", "reproduction/paper/x.csv"),
            ("orphan", "results/a/phases.csv"),
        ];
        let list = [
            listed("results/b/bench.json"),
            listed("reproduction/paper/"),
        ];
        let fails = c.check(claims, &list).unwrap();
        let whats: Vec<&str> = fails.iter().map(|f| f.what.as_str()).collect();
        // the claim reading an unchecked table, that table, and the unlisted Markdown file
        assert_eq!(
            whats,
            [
                "claim 'orphan'",
                "results/a/phases.csv",
                "results/c/notes.md"
            ],
            "{fails:?}"
        );

        // listing a re-derived file, a missing path or no reason is refused
        let bad = [
            listed("results/a/curve.csv"),
            listed("results/gone.csv"),
            NotRederived {
                path: "results/c/notes.md".into(),
                why: " ".into(),
            },
        ];
        let fails = c.check([("ok", "results/a/curve.csv")], &bad).unwrap();
        let whys: Vec<String> = fails
            .iter()
            .map(|f| format!("{}: {}", f.what, f.why))
            .collect();
        assert!(
            whys.iter()
                .any(|w| w.contains("curve.csv: verify re-derives")),
            "{whys:?}"
        );
        assert!(
            whys.iter().any(|w| w.contains("gone.csv: names a path")),
            "{whys:?}"
        );
        assert!(
            whys.iter().any(|w| w.contains("notes.md: gives no reason")),
            "{whys:?}"
        );
    }
}
