//! `reproduction/claims.toml` (the machine-readable claims), `reproduction/CLAIMS.md` (rendered
//! from it), and `verify`: every claim recomputed from the committed records by its rule, every
//! referenced run re-analysed and compared byte for byte with its committed tables, and CLAIMS.md
//! compared with its rendering, so no number stands in CLAIMS.md without a checked row.
//!
//! `verify_where` here recomputes the claims, compares CLAIMS.md and runs the coverage check;
//! `rederive` lists every kind of re-derivation of a committed record (each a few lines calling
//! the module that owns that record), whose re-derived files the coverage check reads. The
//! comparisons they share (`same_as_committed`, `same_json`) stay here.

pub mod coverage;
pub mod readme_tables;
mod rederive;
pub mod rules;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;

pub use rules::Rule;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimsFile {
    /// Sections in order, like the paper's contributions.
    pub section: Vec<Section>,
    /// Run directories whose committed tables must equal a fresh analysis of their traces.
    #[serde(default)]
    pub runs: Vec<String>,
    /// Draft replay directories whose committed tables must equal a fresh tabulation of their
    /// anchor records.
    #[serde(default)]
    pub draft_runs: Vec<String>,
    /// Speculation experiments whose committed tables must equal a fresh analysis of their runs.
    #[serde(default)]
    pub speculation_runs: Vec<String>,
    /// Side-by-side runs with llama.cpp whose committed tables must equal a fresh tabulation of
    /// both sides' raw records.
    #[serde(default)]
    pub peer_runs: Vec<String>,
    /// Context scans whose committed `context.csv` must equal a fresh tabulation of their
    /// per-request records (`context.jsonl`).
    #[serde(default)]
    pub context_runs: Vec<String>,
    /// `context-fit` outputs (`fit.csv`, `fit.json`) that must equal a fresh fit of the scans and
    /// probes under their directory.
    #[serde(default)]
    pub context_fits: Vec<crate::experiments::context::report::FitRun>,
    /// Figure 6 directories whose `figure6.csv` and `figure6.md` must equal a fresh tabulation
    /// of their `reference/` and `windowed/` runs' phases.
    #[serde(default)]
    pub figure6_runs: Vec<String>,
    /// Emulated-link fleet directories (`links --fleet`) whose `links.md` must equal a fresh
    /// tabulation of their sweeps.
    #[serde(default)]
    pub links_fleet_runs: Vec<String>,
    /// tbf round-trip directories (`links --tbf`) whose `links.md` must equal a fresh tabulation.
    #[serde(default)]
    pub links_tbf_runs: Vec<String>,
    /// GGUF parity runs (`scripts/gguf_parity.sh`) whose `parity.csv` and `PARITY.md` must equal
    /// a fresh comparison of their raw records.
    #[serde(default)]
    pub parity_runs: Vec<String>,
    /// Files (or directories, ending in `/`) that claims read or `results/` holds but `verify`
    /// does not re-derive, each with the reason; any other such file fails `verify`.
    #[serde(default)]
    pub not_rederived: Vec<coverage::NotRederived>,
    /// `ceilings.json` records whose summaries and ratios must equal a fresh derivation from their
    /// samples.
    #[serde(default)]
    pub ceilings_runs: Vec<String>,
    /// Dense experiments whose committed `dense.csv` must equal a fresh tabulation of the
    /// per-call samples in their `dense.json`.
    #[serde(default)]
    pub dense_runs: Vec<String>,
    /// Context probes whose `context_probe.csv` and `probe.json` must equal a fresh summary of
    /// their per-role records (`probe-role-K.json`).
    #[serde(default)]
    pub probe_runs: Vec<String>,
    /// Soak and faults directories whose summaries must equal a fresh computation from their
    /// per-request rows and samples.
    #[serde(default)]
    pub reliability_runs: Vec<String>,
    /// docs/RESULTS.md's reliability table, which must equal its rendering from these records.
    pub reliability_table: Option<ReliabilityTable>,
    /// Fleet-simulator validations (`simulate validate`) whose `validation.json` must equal a
    /// fresh fit and replay from their `measured/` traces and `frames.csv.gz`.
    #[serde(default)]
    pub simulator_runs: Vec<String>,
    /// Paper comparisons (`simulate paper`) whose `paper.json` and `predictions.json` must equal
    /// a fresh run from the paper's profiles and the local validation's model.
    #[serde(default)]
    pub simulator_paper: Vec<SimulatorPaper>,
    /// docs/RESULTS.md's tables that must equal their rendering from a committed record.
    #[serde(default)]
    pub readme_tables: Vec<readme_tables::ReadmeTable>,
}

/// A `simulate paper` output and what it was made from (paths relative to the root).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulatorPaper {
    pub out: String,
    pub local: String,
    pub paper: String,
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
    rederive::records_and_tables(root, &f, &want, &mut rendered);
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

fn read_json(file: &Path) -> anyhow::Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", file.display()))
}

/// Equal JSON, numbers within 1e-14 relative, objects key by key both ways. serde_json's default
/// float parsing can land one ulp from the written value (its exact `float_roundtrip` mode would
/// change how every committed trace parses, and with it their byte-identical tables), and a
/// derived value is a few operations on parsed samples (an interpolated quantile, a ratio of two
/// medians, a time recovered from a rate): a few ulps, far inside 1e-14 (about 45 ulps), while any
/// edit by hand moves a value by orders of magnitude more.
pub(crate) fn same_json(stored: &serde_json::Value, fresh: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (stored, fresh) {
        (Value::Number(_), Value::Number(_)) => {
            let (a, b) = (
                stored.as_f64().unwrap_or(f64::NAN),
                fresh.as_f64().unwrap_or(f64::NAN),
            );
            a == b || (a - b).abs() <= 1e-14 * a.abs().max(b.abs())
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same_json(v, w))
        }
        _ => stored == fresh,
    }
}

/// Derive a ceilings record's summaries and ratios afresh from its samples and compare.
pub fn rederive_matches(file: &Path) -> anyhow::Result<()> {
    let record = read_json(file)?;
    let fresh = crate::experiments::ceilings::rederive::rederive(&record)?;
    let stored = record["measurements"]
        .as_object()
        .context("no measurements object")?;
    for (key, v) in fresh.as_object().into_iter().flatten() {
        let s = stored.get(key).and_then(|s| s.as_object());
        let fields = v.as_object().into_iter().flatten();
        let keys = s
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
            .chain(fields.map(|(k, _)| k));
        for field in keys {
            let (was, now) = (s.and_then(|s| s.get(field)), v.get(field));
            if !matches!((was, now), (Some(a), Some(b)) if same_json(a, b)) {
                bail!(
                    "{key} differs from a fresh derivation from its samples: {field} is {}, \
                     recomputed {} (edited by hand?)",
                    was.unwrap_or(&serde_json::Value::Null),
                    now.unwrap_or(&serde_json::Value::Null)
                );
            }
        }
    }
    Ok(())
}

/// Tabulate a draft replay's anchors afresh and compare with its committed tables byte for byte.
pub fn retabulate_matches(dir: &Path, root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    same_as_committed(
        dir,
        crate::experiments::draft::tables::render(dir, root),
        "tabulation of anchors.csv.gz (edited by hand, or the anchors changed)",
    )
}

/// Analyse a run's traces afresh and compare with its committed tables byte for byte.
pub fn reanalyse_matches(run: &Path) -> anyhow::Result<Vec<PathBuf>> {
    same_as_committed(
        run,
        crate::analysis::tables::render(run),
        "analysis of the traces (edited by hand, or traces changed)",
    )
}

/// Every freshly rendered table equals the committed file of the same name under `dir`; returns
/// the files compared (with each CSV's Parquet twin, also checked).
fn same_as_committed(
    dir: &Path,
    fresh: anyhow::Result<Vec<(String, String)>>,
    what: &str,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (name, text) in fresh? {
        let p = dir.join(&name);
        let committed =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        if committed != text {
            bail!("{name} differs from a fresh {what}");
        }
        if name.ends_with(".csv") {
            crate::csv::check_twin(&p)?;
            files.push(crate::csv::twin_of(&p));
        }
        files.push(p);
    }
    Ok(files)
}
