//! The per-anchor record of a draft replay (`anchors.csv.gz`): one row per (sequence, module,
//! anchor) with the token the model emitted there and every calculation's prediction. It is the
//! replay's trace: every agreement, chain statistic and table is a pure function of it
//! (`stats`), and `verify` recomputes the claims from it.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;

/// Fixed leading columns.
const KEYS: [&str; 6] = [
    "seq",
    "family",
    "anchor",
    "module",
    "target",
    "target_shuffled",
];

/// Column-oriented anchor rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Anchors {
    /// Prediction columns, in file order.
    pub columns: Vec<String>,
    pub seq: Vec<u32>,
    pub family: Vec<String>,
    pub anchor: Vec<u32>,
    /// Module index 0..7 (the paper's draft k = module + 1).
    pub module: Vec<u8>,
    /// The token the model emitted at anchor + module + 2.
    pub target: Vec<u32>,
    /// The targets of each module, permuted across that module's rows (a fixed seed): the
    /// shuffled-label check.
    pub target_shuffled: Vec<u32>,
    /// `preds[c][i]`: column c's prediction at row i.
    pub preds: Vec<Vec<u32>>,
}

impl Anchors {
    pub fn len(&self) -> usize {
        self.target.len()
    }

    pub fn is_empty(&self) -> bool {
        self.target.is_empty()
    }

    /// The predictions of a column.
    pub fn column(&self, name: &str) -> anyhow::Result<&[u32]> {
        self.columns
            .iter()
            .position(|c| c == name)
            .map(|i| self.preds[i].as_slice())
            .ok_or_else(|| {
                anyhow!(
                    "no prediction column {name} (have {})",
                    self.columns.join(", ")
                )
            })
    }

    pub fn write_gz(&self, path: &Path) -> anyhow::Result<()> {
        let f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut w = GzEncoder::new(std::io::BufWriter::new(f), Compression::best());
        let mut header: Vec<&str> = KEYS.to_vec();
        header.extend(self.columns.iter().map(String::as_str));
        writeln!(w, "{}", header.join(","))?;
        for i in 0..self.len() {
            write!(
                w,
                "{},{},{},{},{},{}",
                self.seq[i],
                self.family[i],
                self.anchor[i],
                self.module[i],
                self.target[i],
                self.target_shuffled[i]
            )?;
            for col in &self.preds {
                write!(w, ",{}", col[i])?;
            }
            writeln!(w)?;
        }
        w.finish()?.flush()?;
        Ok(())
    }

    pub fn read_gz(path: &Path) -> anyhow::Result<Anchors> {
        let bytes =
            std::fs::read(path).with_context(|| format!("record {} is missing", path.display()))?;
        Anchors::from_gz(&bytes, path)
    }

    /// The anchors of `bytes`, the gzip CSV read from `path` (named in errors).
    pub fn from_gz(bytes: &[u8], path: &Path) -> anyhow::Result<Anchors> {
        let mut text = String::new();
        GzDecoder::new(bytes)
            .read_to_string(&mut text)
            .with_context(|| format!("{}: not a gzip CSV", path.display()))?;
        Anchors::parse(&text).with_context(|| format!("reading {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Anchors> {
        let mut lines = BufReader::new(text.as_bytes()).lines();
        let header = lines.next().ok_or_else(|| anyhow!("empty"))??;
        let cols: Vec<&str> = header.split(',').collect();
        if cols.len() < KEYS.len() || cols[..KEYS.len()] != KEYS {
            bail!("header does not start with {}", KEYS.join(","));
        }
        let mut a = Anchors {
            columns: cols[KEYS.len()..].iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        a.preds = vec![Vec::new(); a.columns.len()];
        for (i, line) in lines.enumerate() {
            let line = line?;
            if line.is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split(',').collect();
            if f.len() != cols.len() {
                bail!(
                    "line {}: {} fields, header has {}",
                    i + 2,
                    f.len(),
                    cols.len()
                );
            }
            let num = |s: &str| -> anyhow::Result<u32> {
                s.parse()
                    .map_err(|_| anyhow!("line {}: '{s}' is not a token id", i + 2))
            };
            a.seq.push(num(f[0])?);
            a.family.push(f[1].to_string());
            a.anchor.push(num(f[2])?);
            let m = num(f[3])?;
            if m >= 32 {
                bail!(
                    "line {}: module {m} (a draft head has at most 32 modules)",
                    i + 2
                );
            }
            a.module.push(m as u8);
            a.target.push(num(f[4])?);
            a.target_shuffled.push(num(f[5])?);
            for (c, v) in f[KEYS.len()..].iter().enumerate() {
                a.preds[c].push(num(v)?);
            }
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let a = Anchors {
            columns: vec!["fitted_teacher".into(), "bigram".into()],
            seq: vec![0, 0, 1],
            family: vec!["code".into(), "code".into(), "poem".into()],
            anchor: vec![20, 20, 31],
            module: vec![0, 1, 0],
            target: vec![5, 6, 7],
            target_shuffled: vec![7, 6, 5],
            preds: vec![vec![5, 1, 7], vec![2, 6, 7]],
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.csv.gz");
        a.write_gz(&p).unwrap();
        assert_eq!(Anchors::read_gz(&p).unwrap(), a);
        assert_eq!(a.column("bigram").unwrap(), &[2, 6, 7]);
        assert!(a.column("nope").is_err());
        assert!(Anchors::parse("seq,family\n").is_err());
        let bad = "seq,family,anchor,module,target,target_shuffled,x\n0,code,1,0,5,5\n";
        assert!(Anchors::parse(bad)
            .unwrap_err()
            .to_string()
            .contains("fields"));
    }
}
