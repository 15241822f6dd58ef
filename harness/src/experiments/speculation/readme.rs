//! docs/RESULTS.md's short tables of a real checkpoint's speculation run, rendered from its `onoff.csv`
//! and `llama.csv` (which `verify` re-derives from the traces): each proposer set's decode rate on
//! over off in both passes, with its proposals, and llama-server's the same way.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use super::tables::{cell, num_at};
use crate::csv::Table;

/// The fleet's configurations as docs/RESULTS.md names them, in its order.
const FLEET: [(&str, &str); 7] = [
    ("suffix", "suffix match"),
    ("phrase", "phrase table"),
    ("mtp", "draft head, live (p ≥ 0.5)"),
    ("mtp-every", "draft head, every draft"),
    ("draft", "the model as its own draft model"),
    ("all", "suffix, phrase and head"),
    ("off-again", "off again, at the end"),
];

/// llama-server's configurations as docs/RESULTS.md names them.
const LLAMA: [(&str, &str); 3] = [
    ("ngram", "prompt lookup (`--spec-type ngram-simple`)"),
    ("draft", "the file as its own draft (`--model-draft`)"),
    ("off-again", "off again, at the end"),
];

fn read(dir: &Path, file: &str) -> anyhow::Result<Table> {
    let path = dir.join(file);
    Table::read(&path).with_context(|| format!("reading {}", path.display()))
}

/// The row of `key` (`config/pass`), by its first column.
fn row<'a>(t: &'a Table, key: &str) -> anyhow::Result<&'a Vec<String>> {
    t.rows
        .iter()
        .find(|r| r.first().is_some_and(|k| k == key))
        .with_context(|| format!("no row {key}"))
}

/// Accepted / proposed, or nothing where nothing was proposed.
fn share(accepted: &str, proposed: &str) -> String {
    if proposed == "0" {
        String::new()
    } else {
        format!("{accepted} / {proposed}")
    }
}

pub fn fleet_md(dir: &Path) -> anyhow::Result<String> {
    let t = read(dir, "onoff.csv")?;
    let mut s = String::from(
        "| proposers (fleet) | first pass, on / off | repeated | accepted / proposed, first | repeated | tokens per step, first |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for (name, label) in FLEET {
        let (a, b) = (
            row(&t, &format!("{name}/first_c001"))?,
            row(&t, &format!("{name}/repeat_c001"))?,
        );
        let _ = writeln!(
            s,
            "| {label} | {}× | {}× | {} | {} | {} |",
            cell(num_at(a, 5), 2),
            cell(num_at(b, 5), 2),
            share(&a[8], &a[7]),
            share(&b[8], &b[7]),
            if a[7] == "0" {
                String::new()
            } else {
                cell(num_at(a, 16), 2)
            },
        );
    }
    Ok(s)
}

pub fn llama_md(dir: &Path) -> anyhow::Result<String> {
    let t = read(dir, "llama.csv")?;
    let mut s = String::from(
        "| llama-server on the same file | first pass, on / off | repeated | accepted / drafted, first |\n\
         |---|---:|---:|---:|\n",
    );
    for (name, label) in LLAMA {
        let (a, b) = (
            row(&t, &format!("{name}/first_c001"))?,
            row(&t, &format!("{name}/repeat_c001"))?,
        );
        let _ = writeln!(
            s,
            "| {label} | {}× | {}× | {} |",
            cell(num_at(a, 5), 2),
            cell(num_at(b, 5), 2),
            share(&a[8], &a[7]),
        );
    }
    Ok(s)
}
