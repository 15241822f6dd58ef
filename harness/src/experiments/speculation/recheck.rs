//! `verify`'s side of the speculation experiment.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::recheck::{same_as_committed, Recheck};

/// Speculation experiments (`speculation_runs`): their tables from a fresh analysis of the runs.
pub struct SpeculationRuns;

impl Recheck for SpeculationRuns {
    fn key(&self) -> &'static str {
        "speculation_runs"
    }
    fn noun(&self) -> &'static str {
        "speculation experiment"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let dir = root.join(self.path(entry)?);
        let fresh = super::render(&dir, root);
        same_as_committed(&dir, fresh, "analysis of the runs (edited by hand?)")
    }
}
