//! The small CSV tables the harness writes and reads (no quoting: cells never contain commas).

use std::path::Path;

use anyhow::anyhow;

/// A CSV table as header names and rows of cells.
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Parse text (CRLF tolerated, as in some published files).
    pub fn parse(text: &str) -> Table {
        let mut lines = text.lines().map(|l| l.trim_end_matches('\r'));
        let header = lines
            .next()
            .unwrap_or_default()
            .split(',')
            .map(str::to_string)
            .collect();
        let rows = lines
            .filter(|l| !l.is_empty())
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect();
        Table { header, rows }
    }

    pub fn read(path: &Path) -> anyhow::Result<Table> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        if text.trim().is_empty() {
            return Err(anyhow!("{} is empty", path.display()));
        }
        Ok(Table::parse(&text))
    }

    /// Index of column `name`.
    pub fn index(&self, name: &str) -> anyhow::Result<usize> {
        self.header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| anyhow!("no column '{name}'"))
    }

    /// The number in `row` at column index `col`.
    pub fn num(&self, row: &[String], col: usize) -> anyhow::Result<f64> {
        let cell = row.get(col).ok_or_else(|| anyhow!("short row"))?;
        cell.parse()
            .map_err(|_| anyhow!("cell '{cell}' is not a number"))
    }

    /// Column `name` as numbers (None where empty or unparsable).
    pub fn col(&self, name: &str) -> anyhow::Result<Vec<Option<f64>>> {
        let i = self.index(name)?;
        Ok(self
            .rows
            .iter()
            .map(|r| r.get(i).and_then(|v| v.parse().ok()))
            .collect())
    }
}
