//! The re-derivations `verify` runs: every committed run of every kind in
//! `experiments::registry` (in the registry's order, each run by the experiment that owns it),
//! then docs/RESULTS.md's rendered tables. Each result, with the files it re-derived, goes to
//! `rendered`; a run `want` refuses is skipped.

use std::path::{Path, PathBuf};

use anyhow::bail;

use super::{readme_table, readme_tables, ClaimsFile};
use crate::experiments::registry;

/// What `rendered` is given: what was re-derived, and the files it covered or the error.
pub(super) type Rendered<'a> = dyn FnMut(String, anyhow::Result<Vec<PathBuf>>) + 'a;

/// Every committed run of every registered kind.
pub(super) fn experiments(
    root: &Path,
    f: &ClaimsFile,
    want: &dyn Fn(&str) -> bool,
    rendered: &mut Rendered<'_>,
) {
    for r in registry::rechecks() {
        for entry in f.recorded.get(r.key()).into_iter().flatten() {
            let path = match r.path(entry) {
                Ok(p) => p,
                Err(e) => {
                    rendered(format!("{} in claims.toml's {}", r.noun(), r.key()), Err(e));
                    continue;
                }
            };
            if want(&path) {
                rendered(format!("{} {path}", r.noun()), r.recheck(root, entry));
            }
        }
    }
}

/// docs/RESULTS.md's tables rendered from records, and its reliability table.
pub(super) fn tables(
    root: &Path,
    f: &ClaimsFile,
    want: &dyn Fn(&str) -> bool,
    rendered: &mut Rendered<'_>,
) {
    for t in &f.readme_tables {
        if !want(readme_tables::RESULTS_MD) {
            continue;
        }
        rendered(
            format!("{} table {}", readme_tables::RESULTS_MD, t.name),
            readme_tables::check(root, t).map(|()| Vec::new()),
        );
    }
    if let Some(t) = f
        .reliability_table
        .as_ref()
        .filter(|_| want(readme_tables::RESULTS_MD))
    {
        let r = crate::reliability::table::render(root, &t.faults, &t.soak, &t.fuzz).and_then(
            |fresh| {
                if readme_table(root)? != fresh {
                    bail!(
                        "differs from its rendering from the records; print it with \
                         `moefleet-harness reliability` and paste it between the markers"
                    );
                }
                Ok(Vec::new())
            },
        );
        rendered(
            format!("{} reliability table", readme_tables::RESULTS_MD),
            r,
        );
    }
}
