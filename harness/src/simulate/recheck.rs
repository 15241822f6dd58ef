//! `verify`'s side of the fleet simulator: validations and the comparison with the paper.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::recheck::{entry_as, Recheck};

/// Fleet-simulator validations (`simulator_runs`): `validation.json` from a fresh fit and replay.
pub struct Validations;

impl Recheck for Validations {
    fn key(&self) -> &'static str {
        "simulator_runs"
    }
    fn noun(&self) -> &'static str {
        "simulator validation"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let dir = root.join(self.path(entry)?);
        super::validate::recheck(&dir)?;
        Ok(vec![
            dir.join("validation.json"),
            dir.join("validation.csv"),
        ])
    }
}

/// A `simulate paper` output and what it was made from (paths relative to the root).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulatorPaper {
    pub out: String,
    pub local: String,
    pub paper: String,
}

/// Paper comparisons (`simulator_paper`): `paper.json` and `predictions.json` from a fresh run.
pub struct PaperComparisons;

impl Recheck for PaperComparisons {
    fn key(&self) -> &'static str {
        "simulator_paper"
    }
    fn noun(&self) -> &'static str {
        "simulator paper comparison"
    }
    fn path(&self, entry: &toml::Value) -> Result<String> {
        Ok(entry_as::<SimulatorPaper>(entry)?.out)
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let p: SimulatorPaper = entry_as(entry)?;
        let out = root.join(&p.out);
        super::paper::recheck(root, &out, &root.join(&p.local), &root.join(&p.paper))?;
        Ok([
            "paper.json",
            "predictions.json",
            "paper.csv",
            "predictions.md",
        ]
        .map(|f| out.join(f))
        .to_vec())
    }
}
