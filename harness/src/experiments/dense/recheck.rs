//! `verify`'s side of the dense experiment: `dense.csv` tabulated afresh from `dense.json`.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::recheck::{read_json, same_as_committed, Recheck};

/// Dense experiments (`dense_runs`): `dense.csv` from the per-call samples in `dense.json`.
pub struct DenseRuns;

impl Recheck for DenseRuns {
    fn key(&self) -> &'static str {
        "dense_runs"
    }
    fn noun(&self) -> &'static str {
        "dense experiment"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let dir = root.join(self.path(entry)?);
        let fresh = read_json(&dir.join("dense.json"))
            .and_then(|r| super::table::csv_from_record(&r))
            .map(|t| vec![("dense.csv".to_string(), t)]);
        same_as_committed(
            &dir,
            fresh,
            "tabulation of dense.json's samples (edited by hand?)",
        )
    }
}
