//! `verify`'s side of the GGUF parity runs.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::recheck::{same_as_committed, Recheck};

/// GGUF parity runs (`parity_runs`): `parity.csv` and `PARITY.md` from a fresh comparison.
pub struct ParityRuns;

impl Recheck for ParityRuns {
    fn key(&self) -> &'static str {
        "parity_runs"
    }
    fn noun(&self) -> &'static str {
        "GGUF parity run"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let dir = root.join(self.path(entry)?);
        let fresh = super::render(&dir);
        same_as_committed(
            &dir,
            fresh,
            "comparison of the raw records (edited by hand?)",
        )
    }
}
