//! Figures, one file each; they read tables (CSV written by `analysis`) only. Text is drawn with a
//! font compiled into the binary (Ubuntu Light from the `epaint_default_fonts` crate), so no system
//! fonts are needed. Every figure is written as PNG and SVG.

pub mod figure5;

use std::sync::Once;

/// Register the embedded font under the family name the figures use.
pub fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(
            "sans-serif",
            plotters::style::FontStyle::Normal,
            epaint_default_fonts::UBUNTU_LIGHT,
        );
    });
}

/// A CSV table as header names and rows of cells (the files `analysis` writes have no quoting).
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn read(path: &std::path::Path) -> anyhow::Result<Table> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let mut lines = text.lines();
        let header = lines
            .next()
            .ok_or_else(|| anyhow::anyhow!("{} is empty", path.display()))?
            .split(',')
            .map(str::to_string)
            .collect();
        let rows = lines
            .filter(|l| !l.is_empty())
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect();
        Ok(Table { header, rows })
    }

    /// Column `name` as numbers (None where empty or unparsable).
    pub fn col(&self, name: &str) -> anyhow::Result<Vec<Option<f64>>> {
        let i = self
            .header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| anyhow::anyhow!("no column '{name}'"))?;
        Ok(self
            .rows
            .iter()
            .map(|r| r.get(i).and_then(|v| v.parse().ok()))
            .collect())
    }
}
