//! Pure part of `bench-table`: criterion records and the machine's ceilings -> one row per
//! benchmark, rendered as `kernels.csv` and `kernels.md`.
//!
//! achieved = work per call / median time per call (bytes/ns = GB/s, FLOP/ns = GFLOP/s);
//! pct_of_ceiling = 100 · achieved / ceiling; time_vs_1_row = median(n rows) / median(1 row).

use std::path::Path;

use super::ceiling::Ceilings;
use super::criterion::{BenchRecord, Work};

/// Columns of `kernels.csv`.
pub const HEADER: &str = "group,benchmark,param,median_us,throughput_unit,achieved,\
                          pct_of_ceiling,ceiling,time_vs_1_row";

/// Groups whose parameter is the number of input rows, scaled against their 1-row benchmark.
pub const ROW_GROUPS: [&str; 2] = ["int4", "int8"];

/// A record this far (seconds) from the ceilings' measurement is flagged as maybe stale.
pub const STALE_S: u64 = 6 * 3600;

/// One benchmark against its ceiling.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelRow {
    pub group: String,
    pub benchmark: String,
    pub param: String,
    pub median_us: f64,
    pub work: Option<Work>,
    /// GB/s for bytes, GFLOP/s for FLOPs.
    pub achieved: Option<f64>,
    /// All-threads read bandwidth (bytes) or FMA rate (FLOPs), same unit as `achieved`.
    pub ceiling: Option<f64>,
    pub pct_of_ceiling: Option<f64>,
    /// Median at n rows / median at 1 row of the same shape (`ROW_GROUPS` only).
    pub time_vs_1_row: Option<f64>,
    pub written_s: Option<u64>,
}

/// The rows of the table, in the records' order.
pub fn rows(records: &[BenchRecord], c: &Ceilings) -> Vec<KernelRow> {
    records
        .iter()
        .map(|r| {
            let (achieved, ceiling) = match r.work {
                Some(Work::Bytes(n)) => (Some(n as f64 / r.median_ns), Some(c.read.median)),
                Some(Work::Flops(n)) => (Some(n as f64 / r.median_ns), Some(c.fma.median)),
                None => (None, None),
            };
            let one_row = records
                .iter()
                .find(|o| o.group == r.group && o.benchmark == r.benchmark && o.param == "1");
            let time_vs_1_row = match one_row {
                Some(o)
                    if ROW_GROUPS.contains(&r.group.as_str()) && r.param.parse::<u64>().is_ok() =>
                {
                    Some(r.median_ns / o.median_ns)
                }
                _ => None,
            };
            KernelRow {
                group: r.group.clone(),
                benchmark: r.benchmark.clone(),
                param: r.param.clone(),
                median_us: r.median_ns / 1e3,
                work: r.work,
                achieved,
                ceiling,
                pct_of_ceiling: achieved.zip(ceiling).map(|(a, c)| 100.0 * a / c),
                time_vs_1_row,
                written_s: r.written_s,
            }
        })
        .collect()
}

/// `kernels.csv`: six significant digits, empty cells where a value does not apply.
pub fn render_csv(rows: &[KernelRow]) -> String {
    let num = |x: Option<f64>| x.map_or(String::new(), |x| sig(x, 6));
    let mut out = format!("{HEADER}\n");
    for r in rows {
        let cells = [
            cell(&r.group),
            cell(&r.benchmark),
            cell(&r.param),
            sig(r.median_us, 6),
            unit(r.work).to_string(),
            num(r.achieved),
            num(r.pct_of_ceiling),
            num(r.ceiling),
            num(r.time_vs_1_row),
        ];
        out += &cells.join(",");
        out.push('\n');
    }
    out
}

/// `kernels.md`: how it was measured, what the columns mean, and the table (three significant
/// digits).
pub fn render_md(
    rows: &[KernelRow],
    c: &Ceilings,
    criterion_dir: &Path,
    ceilings_file: &Path,
) -> String {
    let written: Vec<u64> = rows.iter().filter_map(|r| r.written_s).collect();
    let span = match (written.iter().min(), written.iter().max()) {
        (Some(&a), Some(&b)) => format!(
            ", written {} to {}",
            crate::host::utc_date_time(a),
            crate::host::utc_date_time(b)
        ),
        _ => String::new(),
    };
    let at = [c.cpu.as_deref(), c.date_utc.as_deref()]
        .into_iter()
        .flatten()
        .map(|s| format!(", {s}"))
        .collect::<String>();
    let threads = |t: Option<u64>| t.map_or(String::new(), |t| format!(", {t} threads"));
    let mut out = String::from("# Kernel benchmarks against this machine's ceilings\n\n");
    out += &format!(
        "Measured with criterion medians from `make bench` (engine/benches/kernels.rs; {} \
         benchmarks under `{}`{span}) and ceilings from `moefleet-harness ceilings` (`{}`{at}), \
         same session.\n\n",
        rows.len(),
        criterion_dir.display(),
        ceilings_file.display(),
    );
    out += &format!(
        "achieved = work per call / median time per call. Bytes (weight bytes read per call) are \
         compared with the all-threads read bandwidth (`{}` = {} GB/s{}); FLOPs with the \
         all-threads fp32 FMA rate (`{}` = {} GFLOP/s{}). time vs 1 row ({}; param = input \
         rows): median at n rows / median at 1 row of the same shape; under n means the rows \
         share one read of the weights.\n\n",
        c.read.key,
        sig(c.read.median, 3),
        threads(c.read.threads),
        c.fma.key,
        sig(c.fma.median, 3),
        threads(c.fma.threads),
        ROW_GROUPS.join(", "),
    );
    if let Some(t) = c.epoch_s {
        let far = written.iter().filter(|&&w| w.abs_diff(t) > STALE_S).count();
        if far > 0 {
            out += &format!(
                "**Note:** {far} of these records were written more than {} h from the ceilings' \
                 measurement: records of an earlier run may be mixed in (criterion keeps every \
                 benchmark it ever ran).\n\n",
                STALE_S / 3600
            );
        }
    }
    out += "| group | benchmark | param | median µs | throughput | achieved | % of ceiling | ceiling | time vs 1 row |\n";
    out += "| :-- | :-- | --: | --: | :-- | --: | --: | --: | --: |\n";
    for r in rows {
        let rate = rate_unit(r.work);
        let with_unit =
            |x: Option<f64>| x.map_or(String::new(), |x| format!("{} {rate}", sig(x, 3)));
        let pct = r.pct_of_ceiling.map_or(String::new(), |p| {
            if p >= 10.0 {
                format!("{p:.0}")
            } else {
                format!("{p:.1}")
            }
        });
        let ratio = r
            .time_vs_1_row
            .map_or(String::new(), |x| format!("{x:.2}×"));
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {pct} | {} | {ratio} |\n",
            r.group,
            r.benchmark,
            r.param,
            sig(r.median_us, 3),
            unit(r.work),
            with_unit(r.achieved),
            with_unit(r.ceiling),
        );
    }
    out
}

/// `bytes`, `flops`, or empty.
fn unit(w: Option<Work>) -> &'static str {
    match w {
        Some(Work::Bytes(_)) => "bytes",
        Some(Work::Flops(_)) => "flops",
        None => "",
    }
}

fn rate_unit(w: Option<Work>) -> &'static str {
    match w {
        Some(Work::Bytes(_)) => "GB/s",
        Some(Work::Flops(_)) => "GFLOP/s",
        None => "",
    }
}

/// `x` to `digits` significant digits, never in exponent form (integers keep all their digits).
pub fn sig(x: f64, digits: i32) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let decimals = (digits - 1 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.decimals$}")
}

/// A CSV cell, quoted if it holds a comma, quote or line break.
fn cell(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::super::ceiling::Ceiling;
    use super::*;

    fn rec(
        group: &str,
        benchmark: &str,
        param: &str,
        median_ns: f64,
        work: Option<Work>,
    ) -> BenchRecord {
        BenchRecord {
            group: group.into(),
            benchmark: benchmark.into(),
            param: param.into(),
            median_ns,
            work,
            written_s: Some(1_795_952_819),
        }
    }

    fn ceilings() -> Ceilings {
        Ceilings {
            read: Ceiling {
                key: "read_bandwidth_all".into(),
                median: 12.5,
                threads: Some(2),
            },
            fma: Ceiling {
                key: "fma_rate_all".into(),
                median: 100.0,
                threads: Some(2),
            },
            cpu: Some("AMD EPYC".into()),
            date_utc: Some("2026-11-29T11:46:59Z".into()),
            epoch_s: Some(1_795_952_819 + 60),
        }
    }

    fn records() -> Vec<BenchRecord> {
        vec![
            // 10 MB in 1 ms = 10 GB/s = 80 % of 12.5 GB/s
            rec("int4", "gate", "1", 1e6, Some(Work::Bytes(10_000_000))),
            rec("int4", "gate", "8", 2.5e6, Some(Work::Bytes(10_000_000))),
            rec("int8", "q", "8", 3e6, Some(Work::Bytes(10_000_000))),
            // 4 MFLOP in 100 µs = 40 GFLOP/s = 40 % of 100 GFLOP/s
            rec(
                "attention-group",
                "heads",
                "1",
                1e5,
                Some(Work::Flops(4_000_000)),
            ),
            rec(
                "attention-group",
                "heads",
                "4096",
                4e5,
                Some(Work::Flops(16_000_000)),
            ),
            rec("moe", "routing", "1", 500.0, None),
        ]
    }

    #[test]
    fn achieved_percent_and_row_scaling() {
        let rs = rows(&records(), &ceilings());
        assert_eq!(rs[0].median_us, 1000.0);
        assert_eq!(rs[0].achieved, Some(10.0));
        assert_eq!(rs[0].ceiling, Some(12.5));
        assert_eq!(rs[0].pct_of_ceiling, Some(80.0));
        assert_eq!(rs[0].time_vs_1_row, Some(1.0));
        // 8 rows in 2.5x the time of one
        assert_eq!(rs[1].time_vs_1_row, Some(2.5));
        assert_eq!(rs[1].pct_of_ceiling, Some(32.0));
        // no 1-row benchmark of the shape
        assert_eq!(rs[2].time_vs_1_row, None);
        assert_eq!(rs[3].achieved, Some(40.0));
        assert_eq!(rs[3].ceiling, Some(100.0));
        assert_eq!(rs[3].pct_of_ceiling, Some(40.0));
        // the parameter of attention is positions, not rows
        assert_eq!(rs[4].time_vs_1_row, None);
        assert_eq!(rs[5].achieved, None);
        assert_eq!(rs[5].pct_of_ceiling, None);
    }

    #[test]
    fn csv_and_markdown() {
        let rs = rows(&records(), &ceilings());
        let csv = render_csv(&rs);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "group,benchmark,param,median_us,throughput_unit,achieved,pct_of_ceiling,ceiling,time_vs_1_row"
        );
        assert_eq!(
            lines[2],
            "int4,gate,8,2500.00,bytes,4.00000,32.0000,12.5000,2.50000"
        );
        assert_eq!(
            lines[4],
            "attention-group,heads,1,100.000,flops,40.0000,40.0000,100.000,"
        );
        assert_eq!(lines[6], "moe,routing,1,0.500000,,,,,");
        let md = render_md(
            &rs,
            &ceilings(),
            Path::new("target/criterion"),
            Path::new("c.json"),
        );
        assert!(md.contains("criterion medians from `make bench`"), "{md}");
        assert!(md.contains("`moefleet-harness ceilings` (`c.json`, AMD EPYC, 2026-11-29T11:46:59Z), same session"), "{md}");
        assert!(
            md.contains("`read_bandwidth_all` = 12.5 GB/s, 2 threads"),
            "{md}"
        );
        assert!(
            md.contains("| int4 | gate | 8 | 2500 | bytes | 4.00 GB/s | 32 | 12.5 GB/s | 2.50× |"),
            "{md}"
        );
        assert!(md.contains("| attention-group | heads | 1 | 100 | flops | 40.0 GFLOP/s | 40 | 100 GFLOP/s |  |"), "{md}");
        assert!(!md.contains("**Note:**"), "{md}");
        let mut stale = ceilings();
        stale.epoch_s = Some(1_795_952_819 + STALE_S + 1);
        assert!(render_md(&rs, &stale, Path::new("d"), Path::new("c")).contains("**Note:** 6 of"));
    }

    #[test]
    fn significant_digits() {
        assert_eq!(sig(1591.4926, 3), "1591");
        assert_eq!(sig(6.6711, 3), "6.67");
        assert_eq!(sig(0.01234, 3), "0.0123");
        assert_eq!(sig(12.17851, 6), "12.1785");
        assert_eq!(sig(0.0, 3), "0");
        assert_eq!(cell("a,b"), "\"a,b\"");
    }
}
