//! `verify`'s side of the link experiments (emulated links, the kernel's shaper).

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{fleet_markdown, fleet_rows, tbf_markdown, tbf_rows};
use crate::recheck::{same_as_committed, Recheck};

/// Emulated-link fleets (`links_fleet_runs`): `links.md` from a fresh tabulation of the sweeps.
pub struct LinkFleets;

impl Recheck for LinkFleets {
    fn key(&self) -> &'static str {
        "links_fleet_runs"
    }
    fn noun(&self) -> &'static str {
        "emulated-link fleets"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let dir = root.join(self.path(entry)?);
        let fresh =
            fleet_rows(&dir).map(|rows| vec![("links.md".to_string(), fleet_markdown(&rows))]);
        same_as_committed(&dir, fresh, "tabulation of its sweeps (edited by hand?)")
    }
}

/// tbf round trips (`links_tbf_runs`): `links.md` from a fresh tabulation.
pub struct LinkTbf;

impl Recheck for LinkTbf {
    fn key(&self) -> &'static str {
        "links_tbf_runs"
    }
    fn noun(&self) -> &'static str {
        "tbf round trips"
    }
    fn recheck(&self, root: &Path, entry: &toml::Value) -> Result<Vec<PathBuf>> {
        let dir = root.join(self.path(entry)?);
        let fresh = tbf_rows(&dir).map(|rows| vec![("links.md".to_string(), tbf_markdown(&rows))]);
        same_as_committed(
            &dir,
            fresh,
            "tabulation of its round trips (edited by hand?)",
        )
    }
}
