//! `verify`'s side of the comparison with llama.cpp.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::recheck::{same_as_committed, Recheck};

/// Side-by-side runs with llama.cpp (`peer_runs`): their tables from both sides' raw records.
pub struct PeerRuns;

impl Recheck for PeerRuns {
    fn key(&self) -> &'static str {
        "peer_runs"
    }
    fn noun(&self) -> &'static str {
        "peer run"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let dir = root.join(self.path(entry)?);
        let fresh = super::render(&dir);
        same_as_committed(&dir, fresh, "tabulation of the records (edited by hand?)")
    }
}
