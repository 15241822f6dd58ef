//! The JSON records the harness writes: pretty-printed, ending in one newline, an error naming the
//! file. (`recheck::read_json` reads them back for `verify`.)

use std::path::Path;

use anyhow::Context;

/// `value` as pretty JSON and a final newline into `path`.
pub fn write(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)
        .with_context(|| format!("serialising {}", path.display()))?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}
