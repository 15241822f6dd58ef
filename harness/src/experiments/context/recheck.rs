//! `verify`'s side of the context-length experiment: scans, fits and probes.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::recheck::{entry_as, same_as_committed, Recheck};

/// Context scans (`context_runs`): `context.csv` from their per-request records.
pub struct ContextScans;

impl Recheck for ContextScans {
    fn key(&self) -> &'static str {
        "context_runs"
    }
    fn noun(&self) -> &'static str {
        "context scan"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let dir = root.join(self.path(entry)?);
        let fresh = super::table::render_dir(&dir);
        same_as_committed(&dir, fresh, "tabulation of context.jsonl (edited by hand?)")
    }
}

/// `context-fit` outputs (`context_fits`): a fresh fit of the scans and probes under each.
pub struct ContextFits;

impl Recheck for ContextFits {
    fn key(&self) -> &'static str {
        "context_fits"
    }
    fn noun(&self) -> &'static str {
        "context fit"
    }
    fn path(&self, entry: &toml::Value) -> Result<String> {
        Ok(entry_as::<super::report::FitRun>(entry)?.dir)
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        super::report::rederive_matches(root, &entry_as(entry)?)
    }
}

/// Context probes (`probe_runs`): `context_probe.csv` and `probe.json` from the per-role records.
pub struct ContextProbes;

impl Recheck for ContextProbes {
    fn key(&self) -> &'static str {
        "probe_runs"
    }
    fn noun(&self) -> &'static str {
        "context probe"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let dir = root.join(self.path(entry)?);
        super::probe::rederive_matches(&dir)?;
        let csv = dir.join("context_probe.csv");
        Ok(vec![crate::csv::twin_of(&csv), csv, dir.join("probe.json")])
    }
}
