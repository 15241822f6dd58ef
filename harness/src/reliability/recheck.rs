//! `verify`'s side of the reliability experiments: faults and soaks.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::recheck::Recheck;

/// Soak and faults directories (`reliability_runs`): their summaries from the per-request rows.
pub struct ReliabilityRuns;

impl Recheck for ReliabilityRuns {
    fn key(&self) -> &'static str {
        "reliability_runs"
    }
    fn noun(&self) -> &'static str {
        "reliability run"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let dir = root.join(self.path(entry)?);
        if dir.join("soak.json").exists() {
            super::soak::recheck(&dir)?;
            Ok(vec![dir.join("soak.json")])
        } else {
            super::faults::recheck(&dir)?;
            Ok(vec![dir.join("faults.json")])
        }
    }
}
