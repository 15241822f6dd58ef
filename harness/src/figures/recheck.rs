//! `verify`'s side of Figure 6 (reference against windowed admission).

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::recheck::{same_as_committed, Recheck};

/// Figure 6 directories (`figure6_runs`): `figure6.csv` and `figure6.md` from their runs' phases.
pub struct Figure6Runs;

impl Recheck for Figure6Runs {
    fn key(&self) -> &'static str {
        "figure6_runs"
    }
    fn noun(&self) -> &'static str {
        "figure 6"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let dir = root.join(self.path(entry)?);
        let fresh = super::figure6::tables(&dir.join("reference"), &dir.join("windowed"));
        same_as_committed(
            &dir,
            fresh,
            "tabulation of its runs' phases (edited by hand?)",
        )
    }
}
