//! `reproduction/claims.toml` (the machine-readable claims), `reproduction/CLAIMS.md` (rendered
//! from it), and `verify`: every claim recomputed from the committed records by its rule, every
//! referenced run re-analysed and compared byte for byte with its committed tables, and CLAIMS.md
//! compared with its rendering, so no number stands in CLAIMS.md without a checked row.
//!
//! `verify_where` here recomputes the claims, compares CLAIMS.md and runs the coverage check;
//! `rederive` re-derives every committed run through the experiments' registry
//! (`experiments::registry`, each experiment's `Recheck`) and docs/RESULTS.md's tables, and the
//! coverage check reads the files they re-derived. The comparisons live in `crate::recheck`.

pub mod across;
pub mod coverage;
pub mod readme_tables;
mod rederive;
pub mod rules;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;

pub use rules::Rule;

use crate::experiments::registry;

/// `reproduction/claims.toml`. Beside the claims it lists the committed runs `verify` re-derives,
/// one list per kind of run under the key of its [`Recheck`](crate::recheck::Recheck) (`runs`, `speculation_runs`, ...;
/// `experiments::registry` lists the kinds); a key no kind claims is an error.
#[derive(Clone, Debug, Deserialize)]
pub struct ClaimsFile {
    /// Sections in order, like the paper's contributions.
    pub section: Vec<Section>,
    /// Files (or directories, ending in `/`) that claims read or `results/` holds but `verify`
    /// does not re-derive, each with the reason; any other such file fails `verify`.
    #[serde(default)]
    pub not_rederived: Vec<coverage::NotRederived>,
    /// docs/RESULTS.md's reliability table, which must equal its rendering from these records.
    pub reliability_table: Option<ReliabilityTable>,
    /// docs/RESULTS.md's tables that must equal their rendering from a committed record.
    #[serde(default)]
    pub readme_tables: Vec<readme_tables::ReadmeTable>,
    /// The committed runs of each kind, by the kind's key.
    #[serde(flatten)]
    pub recorded: BTreeMap<String, Vec<toml::Value>>,
}

impl ClaimsFile {
    /// The runs listed under `key`, as the paths that name them.
    pub fn runs_of(&self, key: &str) -> Vec<String> {
        let Some(r) = registry::find(key) else {
            return Vec::new();
        };
        self.recorded
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|e| r.path(e).ok())
            .collect()
    }
}

/// The records the reliability table (docs/RESULTS.md) is rendered from (paths relative to the root).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReliabilityTable {
    pub faults: Vec<String>,
    pub soak: String,
    pub fuzz: String,
}

/// The lines of docs/RESULTS.md that hold the reliability table, between these markers.
pub const TABLE_BEGIN: &str =
    "<!-- reliability-table: rendered by moefleet-harness reliability; verify checks it -->";
pub const TABLE_END: &str = "<!-- reliability-table end -->";

/// The table between the markers of docs/RESULTS.md.
pub fn readme_table(root: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(root.join(readme_tables::RESULTS_MD))
        .context(readme_tables::RESULTS_MD)?;
    Ok(text[readme_tables::between(&text, TABLE_BEGIN, TABLE_END)?].to_string())
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Section {
    pub title: String,
    pub intro: String,
    pub claim: Vec<Claim>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub id: String,
    pub claim: String,
    /// The number as CLAIMS.md states it.
    pub value: f64,
    /// Decimals shown in CLAIMS.md.
    #[serde(default)]
    pub decimals: usize,
    pub unit: Option<String>,
    /// `measured` (our runs) or `paper-arithmetic` (a check of published data).
    pub evidence: String,
    pub tolerance: f64,
    pub rule: Rule,
}

pub fn load(root: &Path) -> anyhow::Result<ClaimsFile> {
    let p = root.join("reproduction/claims.toml");
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    let f: ClaimsFile =
        toml::from_str(&text).with_context(|| format!("parsing {}", p.display()))?;
    for key in f.recorded.keys() {
        if registry::find(key).is_none() {
            let known: Vec<_> = registry::rechecks().map(|r| r.key()).collect();
            bail!(
                "{}: unknown key {key:?} (the lists of runs are {})",
                p.display(),
                known.join(", ")
            );
        }
    }
    let mut ids = std::collections::BTreeSet::new();
    for c in f.section.iter().flat_map(|s| &s.claim) {
        if !ids.insert(c.id.clone()) {
            bail!("claim id '{}' is used twice", c.id);
        }
        if !["measured", "paper-arithmetic", "simulated"].contains(&c.evidence.as_str()) {
            bail!(
                "claim '{}': evidence must be 'measured', 'paper-arithmetic' or 'simulated'",
                c.id
            );
        }
    }
    Ok(f)
}

/// CLAIMS.md as rendered from the claims file.
pub fn render(f: &ClaimsFile) -> String {
    let mut s = String::from(
        "# Claims\n\nEvery number this project reports, the record it comes from, the rule that derives it, and the \
         tolerance within which `make verify` (`moefleet-harness verify`) recomputes it. This file is rendered \
         from `claims.toml` by `moefleet-harness claims`; verify fails if the two differ, if a record is missing, \
         or if a recomputed value falls outside its tolerance.\n",
    );
    for sec in &f.section {
        let _ = write!(s, "\n## {}\n\n{}\n\n| id | claim | value | record and rule | evidence | tolerance |\n|---|---|---:|---|---|---:|\n", sec.title, sec.intro);
        for c in &sec.claim {
            let unit = c
                .unit
                .as_deref()
                .map(|u| format!(" {u}"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "| `{}` | {} | {:.*}{} | {} | {} | {} |",
                c.id,
                c.claim,
                c.decimals,
                c.value,
                unit,
                c.rule.describe(),
                c.evidence,
                c.tolerance
            );
        }
    }
    if !f.not_rederived.is_empty() {
        s.push_str(
            "\n## Read but not re-derived\n\nFiles that claims read, or tables under `results/`, that `verify` takes as they \
             are rather than deriving them again from raw data, and why. Every other such file is re-derived, and verify \
             fails on one that is neither.\n\n| path | why |\n|---|---|\n",
        );
        for l in &f.not_rederived {
            let _ = writeln!(s, "| `{}` | {} |", l.path, l.why);
        }
    }
    s
}

/// One failed check.
#[derive(Debug)]
pub struct Failure {
    pub what: String,
    pub why: String,
}

/// Recompute everything; returns the failures (empty: all claims hold).
pub fn verify(root: &Path) -> anyhow::Result<(usize, Vec<Failure>)> {
    verify_where(root, None)
}

/// `verify`, or with `only`, limited to the re-derivations whose run (directory or file, relative
/// to the root; `docs/RESULTS.md` for its rendered tables) it accepts: every claim is still recomputed,
/// and the coverage check runs only without `only`. Tests use it to re-derive one run after
/// editing one of its files, without the minutes a whole verify takes.
pub fn verify_where(
    root: &Path,
    only: Option<&dyn Fn(&str) -> bool>,
) -> anyhow::Result<(usize, Vec<Failure>)> {
    let want = |run: &str| only.is_none_or(|f| f(run));
    let f = load(root)?;
    let mut fails = Vec::new();
    let mut n = 0;
    for c in f.section.iter().flat_map(|s| &s.claim) {
        n += 1;
        match c.rule.eval(root) {
            Ok(v) if (v - c.value).abs() <= c.tolerance => {}
            Ok(v) => fails.push(Failure {
                what: format!("claim '{}'", c.id),
                why: format!(
                    "recomputed {v}, CLAIMS states {} (tolerance {})",
                    c.value, c.tolerance
                ),
            }),
            Err(e) => fails.push(Failure {
                what: format!("claim '{}'", c.id),
                why: format!("{e:#}"),
            }),
        }
    }
    let md = root.join("reproduction/CLAIMS.md");
    match std::fs::read_to_string(&md) {
        Ok(text) if text == render(&f) => {}
        Ok(_) => fails.push(Failure {
            what: "reproduction/CLAIMS.md".into(),
            why: "differs from its rendering of claims.toml (a number without a checked row, or an edit by hand); run `moefleet-harness claims`".into(),
        }),
        Err(e) => fails.push(Failure { what: "reproduction/CLAIMS.md".into(), why: e.to_string() }),
    }
    // every committed experiment's tables must equal a fresh rendering of its raw records; each
    // check returns the files it re-derived, which the coverage check below reads
    let mut covered = coverage::Covered::new(root);
    let mut rendered = |what: String, r: anyhow::Result<Vec<PathBuf>>| {
        n += 1;
        match r {
            Ok(files) => covered.extend(files),
            Err(e) => fails.push(Failure {
                what,
                why: format!("{e:#}"),
            }),
        }
    };
    rederive::experiments(root, &f, &want, &mut rendered);
    rederive::tables(root, &f, &want, &mut rendered);
    // every file a claim reads, and every table under results/, is re-derived above (`rederive`)
    // or listed in claims.toml's not_rederived with the reason
    let claim_files = f.section.iter().flat_map(|s| &s.claim).flat_map(|c| {
        c.rule
            .files()
            .into_iter()
            .map(move |file| (c.id.as_str(), file))
    });
    if only.is_some() {
        return Ok((n, fails));
    }
    for problem in covered.check(claim_files, &f.not_rederived)? {
        n += 1;
        fails.push(problem);
    }
    Ok((n, fails))
}
