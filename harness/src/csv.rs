//! The small CSV tables the harness writes and reads (no quoting: cells never contain commas), and
//! their Parquet twins: every table written through [`write`] also lands as `name.parquet` beside
//! `name.csv`, the same columns typed (a column whose cells all parse as integers is Int64, as
//! numbers Float64, as `true`/`false` Boolean, else String; an empty cell is null), so a table loads
//! into polars, pandas or DuckDB without a parser. The CSV stays the diffable form `verify` compares
//! byte for byte; [`check_twin`] holds the Parquet to the same table.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use polars::prelude::{
    Column, DataFrame, NamedFrom, ParquetReader, ParquetWriter, SerReader, Series,
};

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

/// Write a table file; a `.csv` also gets its Parquet twin.
pub fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    if path.extension().is_some_and(|e| e == "csv") {
        write_twin(path)?;
    }
    Ok(())
}

/// `x.parquet` beside `x.csv`.
pub fn twin_of(csv: &Path) -> PathBuf {
    csv.with_extension("parquet")
}

/// Write the Parquet twin of the CSV table at `csv`.
pub fn write_twin(csv: &Path) -> anyhow::Result<()> {
    let mut df = frame(&Table::read(csv)?).with_context(|| format!("typing {}", csv.display()))?;
    let out = twin_of(csv);
    let f = std::fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?;
    ParquetWriter::new(f)
        .finish(&mut df)
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

/// The Parquet twin of `csv` exists and holds the same table (columns, types and values).
pub fn check_twin(csv: &Path) -> anyhow::Result<()> {
    let p = twin_of(csv);
    let f = std::fs::File::open(&p).with_context(|| {
        format!(
            "opening {} (write it with `moefleet-harness parquet {}`)",
            p.display(),
            csv.parent().unwrap_or(Path::new(".")).display()
        )
    })?;
    let stored = ParquetReader::new(f)
        .finish()
        .with_context(|| format!("reading {}", p.display()))?;
    let want = frame(&Table::read(csv)?)?;
    // equals_missing compares values only (an Int64 column stored as Float64 would pass)
    if stored.dtypes() != want.dtypes() || !stored.equals_missing(&want) {
        bail!(
            "{} does not hold the table of {}",
            p.display(),
            csv.display()
        );
    }
    Ok(())
}

/// Every `.csv` file under `dir`, recursively, sorted.
pub fn tables_under(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "csv") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The table as a typed DataFrame.
pub fn frame(t: &Table) -> anyhow::Result<DataFrame> {
    let width = t.header.len();
    if let Some(i) = t.rows.iter().position(|r| r.len() != width) {
        bail!(
            "row {} has {} cells, the header {width}",
            i + 2,
            t.rows[i].len()
        );
    }
    let mut cols = Vec::with_capacity(width);
    for (j, name) in t.header.iter().enumerate() {
        let cells: Vec<Option<&str>> = t
            .rows
            .iter()
            .map(|r| Some(r[j].as_str()).filter(|c| !c.is_empty()))
            .collect();
        cols.push(Column::from(typed(name, &cells)));
    }
    Ok(DataFrame::new(cols)?)
}

/// One column, typed by what every non-empty cell parses as.
fn typed(name: &str, cells: &[Option<&str>]) -> Series {
    fn all<T: std::str::FromStr>(cells: &[Option<&str>]) -> Option<Vec<Option<T>>> {
        cells
            .iter()
            .map(|c| {
                c.map(|c| c.parse::<T>().ok())
                    .map_or(Some(None), |v| v.map(Some))
            })
            .collect()
    }
    let name = name.into();
    if let Some(v) = all::<i64>(cells) {
        Series::new(name, v)
    } else if let Some(v) = all::<f64>(cells) {
        Series::new(name, v)
    } else if let Some(v) = all::<bool>(cells) {
        Series::new(name, v)
    } else {
        Series::new(name, cells.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_twin_holds_the_typed_table_and_an_edit_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        write(&p, "a,b,c,d\n1,0.5,true,x\n2,,false,\n-3,1e-3,true,y z\n").unwrap();
        let f = std::fs::File::open(twin_of(&p)).unwrap();
        let df = ParquetReader::new(f).finish().unwrap();
        let dtypes: Vec<String> = df.dtypes().iter().map(|d| d.to_string()).collect();
        assert_eq!(dtypes, ["i64", "f64", "bool", "str"]);
        assert_eq!(df.column("b").unwrap().null_count(), 1);
        check_twin(&p).unwrap();
        // the CSV changed after the twin was written
        std::fs::write(&p, "a,b,c,d\n1,0.5,true,x\n2,,false,\n-3,1e-3,true,y\n").unwrap();
        assert!(check_twin(&p).is_err());
        // a row of the wrong width is an error, not a twin
        std::fs::write(&p, "a,b\n1\n").unwrap();
        assert!(write_twin(&p).is_err());
    }
}
