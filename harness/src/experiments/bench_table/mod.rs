//! `moefleet-harness bench-table`: the kernel microbenchmarks (criterion's records of
//! `cargo bench -p moefleet-engine --bench kernels`) against this machine's ceilings (the
//! `ceilings.json` of `moefleet-harness ceilings`). For every benchmark: its median time per call,
//! the bytes or FLOPs per call it declares as throughput, the rate achieved and its share of the
//! all-threads read bandwidth or FMA rate; for the int4 and int8 products, time at n rows over
//! time at 1 row. Writes `OUT/kernels.csv` and `OUT/kernels.md`. Reads records only; runs
//! nothing.

pub mod ceiling;
pub mod criterion;
pub mod table;

use std::path::{Path, PathBuf};

use ceiling::Ceilings;
use table::KernelRow;

/// Why the table cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum BenchTableError {
    #[error(
        "criterion directory {0} not found (run `make bench`, or `cargo bench -p moefleet-engine \
         --bench kernels`, first)"
    )]
    NoCriterionDir(PathBuf),
    #[error(
        "no criterion benchmarks under {0} (no <group>/<function>/<param>/new/benchmark.json)"
    )]
    NoBenchmarks(PathBuf),
    #[error("ceilings file {0} not found (run `moefleet-harness ceilings --out DIR` first)")]
    NoCeilings(PathBuf),
    #[error("{path}: {why}")]
    Bad { path: PathBuf, why: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Read the records under `criterion_dir` and the ceilings of `ceilings` (a `ceilings.json` or a
/// directory holding one), write `out/kernels.csv` and `out/kernels.md` (`out` is created), and
/// return the rows and the markdown.
pub fn run(
    criterion_dir: &Path,
    ceilings: &Path,
    out: &Path,
) -> Result<(Vec<KernelRow>, String), BenchTableError> {
    let records = criterion::read_all(criterion_dir)?;
    let c = Ceilings::read(ceilings)?;
    let rows = table::rows(&records, &c);
    let md = table::render_md(&rows, &c, criterion_dir, &ceiling::ceilings_file(ceilings));
    let write = |name: &str, text: &str| {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|source| BenchTableError::Io { path, source })
    };
    std::fs::create_dir_all(out).map_err(|source| BenchTableError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    let csv = out.join("kernels.csv");
    crate::csv::write(&csv, &table::render_csv(&rows)).map_err(|e| BenchTableError::Bad {
        path: csv,
        why: format!("{e:#}"),
    })?;
    write("kernels.md", &md)?;
    Ok((rows, md))
}

#[cfg(test)]
mod tests {
    use super::criterion::tests::write;
    use super::*;

    #[test]
    fn writes_both_tables_from_a_criterion_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let crit = tmp.path().join("criterion");
        write(
            &crit,
            "int4",
            "gate",
            Some("1"),
            "new",
            r#"{"Bytes":1000000}"#,
            1e5,
        );
        write(
            &crit,
            "int4",
            "gate",
            Some("8"),
            "new",
            r#"{"Bytes":1000000}"#,
            3e5,
        );
        write(
            &crit,
            "int4",
            "gate",
            Some("8"),
            "base",
            r#"{"Bytes":1000000}"#,
            9e9,
        );
        write(
            &crit,
            "attention-group",
            "heads",
            Some("1024"),
            "new",
            r#"{"Elements":2000000}"#,
            1e5,
        );
        let ceil = tmp.path().join("ceil");
        std::fs::create_dir_all(&ceil).unwrap();
        std::fs::write(
            ceil.join("ceilings.json"),
            r#"{"record":"ceilings","host":{"cpu":"Test CPU"},"measurements":{
                "read_bandwidth_1t":{"median":8.0,"threads":1},
                "read_bandwidth_all":{"median":20.0,"threads":2},
                "fma_rate_all":{"median":80.0,"threads":2}}}"#,
        )
        .unwrap();
        let out = tmp.path().join("out/bench");

        let (rows, md) = run(&crit, &ceil.join("ceilings.json"), &out).unwrap();
        assert_eq!(rows.len(), 3);
        // 1 MB in 100 µs = 10 GB/s = 50 % of 20 GB/s; 8 rows take 3x one row
        assert_eq!(rows[0].pct_of_ceiling, Some(50.0));
        assert_eq!(rows[1].time_vs_1_row, Some(3.0));
        // 2 MFLOP in 100 µs = 20 GFLOP/s = 25 % of 80 GFLOP/s
        assert_eq!(rows[2].pct_of_ceiling, Some(25.0));
        let csv = std::fs::read_to_string(out.join("kernels.csv")).unwrap();
        assert_eq!(csv.lines().count(), 4);
        assert!(
            csv.contains("\nint4,gate,8,300.000,bytes,3.33333,16.6667,20.0000,3.00000\n"),
            "{csv}"
        );
        assert_eq!(std::fs::read_to_string(out.join("kernels.md")).unwrap(), md);
        assert!(
            md.contains("| int4 | gate | 8 | 300 | bytes | 3.33 GB/s | 17 | 20.0 GB/s | 3.00× |"),
            "{md}"
        );

        let e = run(&crit, &tmp.path().join("nowhere.json"), &out).unwrap_err();
        assert!(matches!(e, BenchTableError::NoCeilings(_)), "{e}");
    }
}
