//! `verify`'s side of the sweep: committed runs analysed afresh from their traces.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::recheck::{same_as_committed, Recheck};

/// Sweep runs (`runs`): the tables a fresh analysis of the traces gives, byte for byte.
pub struct SweepRuns;

impl Recheck for SweepRuns {
    fn key(&self) -> &'static str {
        "runs"
    }
    fn noun(&self) -> &'static str {
        "run"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        reanalyse_matches(&root.join(self.path(entry)?))
    }
}

/// Analyse a run's traces afresh and compare with its committed tables byte for byte.
pub fn reanalyse_matches(run: &Path) -> Result<Vec<PathBuf>> {
    same_as_committed(
        run,
        crate::analysis::tables::render(run),
        "analysis of the traces (edited by hand, or traces changed)",
    )
}
