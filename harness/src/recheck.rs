//! What `verify` asks of each experiment: a [`Recheck`] re-derives one committed run from its raw
//! records and compares the result with what is committed. Every experiment's folder implements it
//! for its runs, its unit (`experiments::unit::Experiment::rechecks`) names them, and `claims`
//! iterates `experiments::registry::rechecks()` (a new experiment is one folder and one line in the
//! registry, plus its key in `claims.toml`). The comparisons every implementation shares live here
//! too, so experiments never import `claims`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// One kind of committed run that `verify` re-derives.
pub trait Recheck: Sync {
    /// The list in `reproduction/claims.toml` that names the committed runs of this kind.
    fn key(&self) -> &'static str;
    /// How a failure names one run ("speculation experiment" for `results/speculation-x`).
    fn noun(&self) -> &'static str;
    /// The run an entry of the list names (relative to the root), which the `only` filter of
    /// `claims::verify_where` matches: by default the entry itself, a path.
    fn path(&self, entry: &toml::Value) -> Result<String> {
        entry
            .as_str()
            .map(str::to_string)
            .context("expected a path relative to the repository (a string)")
    }
    /// Re-derive the run `entry` names and compare it with its committed files; the files
    /// re-derived (for the coverage check), or what differs.
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>>;
}

/// `entry` (a table of the list) as `T`.
pub fn entry_as<T: serde::de::DeserializeOwned>(entry: &toml::Value) -> Result<T> {
    entry.clone().try_into().context("reading the entry")
}

pub fn read_json(file: &Path) -> Result<serde_json::Value> {
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
pub fn same_json(stored: &serde_json::Value, fresh: &serde_json::Value) -> bool {
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

/// Every freshly rendered table equals the committed file of the same name under `dir`; returns
/// the files compared (with each CSV's Parquet twin, also checked).
pub fn same_as_committed(
    dir: &Path,
    fresh: Result<Vec<(String, String)>>,
    what: &str,
) -> Result<Vec<PathBuf>> {
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
