//! `verify`'s side of the ceilings records: summaries and ratios derived afresh from the samples.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::recheck::{read_json, same_json, Recheck};

/// `ceilings.json` records (`ceilings_runs`): every summary and ratio from the samples.
pub struct CeilingsRecords;

impl Recheck for CeilingsRecords {
    fn key(&self) -> &'static str {
        "ceilings_runs"
    }
    fn noun(&self) -> &'static str {
        "ceilings record"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let path = root.join(self.path(entry)?);
        rederive_matches(&path)?;
        Ok(vec![path])
    }
}

/// Derive a ceilings record's summaries and ratios afresh from its samples and compare.
pub fn rederive_matches(file: &Path) -> Result<()> {
    let record = read_json(file)?;
    let fresh = super::rederive::rederive(&record)?;
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
