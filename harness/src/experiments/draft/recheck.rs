//! `verify`'s side of the captured-state draft replay.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::recheck::{same_as_committed, Recheck};

/// Draft replays (`draft_runs`): their tables from a fresh tabulation of the anchors.
pub struct DraftRuns;

impl Recheck for DraftRuns {
    fn key(&self) -> &'static str {
        "draft_runs"
    }
    fn noun(&self) -> &'static str {
        "draft replay"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        retabulate_matches(&root.join(self.path(entry)?), root)
    }
}

/// Tabulate a draft replay's anchors afresh and compare with its committed tables byte for byte.
pub fn retabulate_matches(dir: &Path, root: &Path) -> Result<Vec<PathBuf>> {
    same_as_committed(
        dir,
        super::tables::render(dir, root),
        "tabulation of anchors.csv.gz (edited by hand, or the anchors changed)",
    )
}
