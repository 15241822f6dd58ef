//! Criterion's records of the kernel benchmarks: every `<group>/<function>[/<param>]/new/` under
//! the criterion directory, holding `benchmark.json` (ids and the work declared per call) and
//! `estimates.json` (time per call, ns). Only `new/` (the latest run) is read: `base/` (the run
//! before), `change/` (the comparison of the two), saved baselines and `report/` are not.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde_json::Value;

use super::BenchTableError;

/// Groups of engine/benches/kernels.rs in the order they run; other groups follow by name.
pub const GROUP_ORDER: [&str; 4] = ["int4", "int8", "attention-group", "moe"];

/// Work one call does, as the benchmark declares it (criterion's `Throughput`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Work {
    /// Weight bytes read per call (`Throughput::Bytes` or `BytesDecimal`).
    Bytes(u64),
    /// FLOPs per call (`Throughput::Elements`, which kernels.rs uses for FLOPs).
    Flops(u64),
}

/// One benchmark's latest record.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchRecord {
    /// Criterion group (`int4`).
    pub group: String,
    /// Function id (`inkling-expert-gate`).
    pub benchmark: String,
    /// Parameter (`8`: input rows of a product, cached positions of attention); empty if none.
    pub param: String,
    /// Median time per call, ns (`estimates.json` /median/point_estimate).
    pub median_ns: f64,
    /// None when the benchmark declares no throughput.
    pub work: Option<Work>,
    /// When `estimates.json` was written, Unix seconds (None if the file system cannot say).
    pub written_s: Option<u64>,
}

/// One record from the texts of `benchmark.json` and `estimates.json`.
///
/// A function id with no parameter but a `/` (`bench_function("inkling-expert-fp16/1")`) is split
/// at its last `/` into benchmark and parameter, like `BenchmarkId::new(name, 1)`.
pub fn parse(benchmark_json: &str, estimates_json: &str) -> Result<BenchRecord, String> {
    let b: Value = serde_json::from_str(benchmark_json)
        .map_err(|e| format!("benchmark.json is not JSON: {e}"))?;
    let e: Value = serde_json::from_str(estimates_json)
        .map_err(|e| format!("estimates.json is not JSON: {e}"))?;
    let group = b["group_id"]
        .as_str()
        .ok_or("benchmark.json has no group_id")?
        .to_string();
    let function = b["function_id"].as_str().unwrap_or_default();
    let (benchmark, param) = match (b["value_str"].as_str(), function.rsplit_once('/')) {
        (Some(v), _) => (function.to_string(), v.to_string()),
        (None, Some((f, v))) => (f.to_string(), v.to_string()),
        (None, None) => (function.to_string(), String::new()),
    };
    let work = match &b["throughput"] {
        Value::Null => None,
        Value::Object(t) => Some(work_of(t)?),
        other => return Err(format!("throughput {other} is not criterion's form")),
    };
    let median_ns = e["median"]["point_estimate"]
        .as_f64()
        .ok_or("estimates.json has no /median/point_estimate")?;
    if !(median_ns.is_finite() && median_ns > 0.0) {
        return Err(format!("median {median_ns} ns is not a positive time"));
    }
    Ok(BenchRecord {
        group,
        benchmark,
        param,
        median_ns,
        work,
        written_s: None,
    })
}

/// `{"Bytes": n}`, `{"BytesDecimal": n}` or `{"Elements": n}`.
fn work_of(t: &serde_json::Map<String, Value>) -> Result<Work, String> {
    let mut it = t.iter();
    let (Some((kind, n)), None) = (it.next(), it.next()) else {
        return Err(format!("throughput {t:?} is not one kind"));
    };
    let n = n
        .as_u64()
        .ok_or_else(|| format!("throughput {kind} = {n} is not a count"))?;
    match kind.as_str() {
        "Bytes" | "BytesDecimal" => Ok(Work::Bytes(n)),
        "Elements" => Ok(Work::Flops(n)),
        _ => Err(format!("throughput kind {kind} is not bytes or elements")),
    }
}

/// Every benchmark's latest record under `root` (the criterion directory, or one group of it),
/// in group order, then by benchmark and parameter (numerically where both are numbers).
pub fn read_all(root: &Path) -> Result<Vec<BenchRecord>, BenchTableError> {
    if !root.is_dir() {
        return Err(BenchTableError::NoCriterionDir(root.to_path_buf()));
    }
    let mut dirs = Vec::new();
    find_new_dirs(root, &mut dirs)?;
    if dirs.is_empty() {
        return Err(BenchTableError::NoBenchmarks(root.to_path_buf()));
    }
    let mut out = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let text = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| BenchTableError::Io { path, source })
        };
        let mut r = parse(&text("benchmark.json")?, &text("estimates.json")?).map_err(|why| {
            BenchTableError::Bad {
                path: dir.clone(),
                why,
            }
        })?;
        r.written_s = std::fs::metadata(dir.join("estimates.json"))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs());
        out.push(r);
    }
    out.sort_by(order);
    Ok(out)
}

/// The `new/` directories holding a `benchmark.json` below `dir` (symlinks not followed).
fn find_new_dirs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), BenchTableError> {
    let io = |source| BenchTableError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(io)?
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if !entry.file_type().map_err(io)?.is_dir() {
            continue;
        }
        let path = entry.path();
        match entry.file_name().to_str() {
            Some("new") => {
                if path.join("benchmark.json").is_file() {
                    out.push(path);
                }
            }
            Some("base" | "change" | "report") => {}
            _ => find_new_dirs(&path, out)?,
        }
    }
    Ok(())
}

fn order(a: &BenchRecord, b: &BenchRecord) -> Ordering {
    let rank = |g: &str| {
        GROUP_ORDER
            .iter()
            .position(|&k| k == g)
            .unwrap_or(usize::MAX)
    };
    let param = |a: &str, b: &str| match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    };
    rank(&a.group)
        .cmp(&rank(&b.group))
        .then_with(|| a.group.cmp(&b.group))
        .then_with(|| a.benchmark.cmp(&b.benchmark))
        .then_with(|| param(&a.param, &b.param))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes `DIR/<group>/<dir>/<sub>/{benchmark,estimates}.json` as criterion 0.5 does.
    pub fn write(
        root: &Path,
        group: &str,
        function: &str,
        value: Option<&str>,
        sub: &str,
        throughput: &str,
        median_ns: f64,
    ) {
        let dir_name = match value {
            Some(v) => format!("{group}/{}/{v}", function.replace('/', "_")),
            None => format!("{group}/{}", function.replace('/', "_")),
        };
        let dir = root.join(&dir_name).join(sub);
        std::fs::create_dir_all(&dir).unwrap();
        let value_str = value.map_or("null".to_string(), |v| format!("\"{v}\""));
        std::fs::write(
            dir.join("benchmark.json"),
            format!(
                r#"{{"group_id":"{group}","function_id":"{function}","value_str":{value_str},"throughput":{throughput},"full_id":"{dir_name}","directory_name":"{dir_name}","title":"{dir_name}"}}"#
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("estimates.json"),
            format!(
                r#"{{"mean":{{"point_estimate":{m}}},"median":{{"confidence_interval":{{"confidence_level":0.95,"lower_bound":1.0,"upper_bound":2.0}},"point_estimate":{median_ns},"standard_error":1.0}}}}"#,
                m = median_ns * 1.1
            ),
        )
        .unwrap();
    }

    #[test]
    fn reads_new_records_only_and_orders_them() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(
            root,
            "moe",
            "inkling-expert-fp16/1",
            None,
            "new",
            r#"{"Bytes":300}"#,
            9e5,
        );
        write(
            root,
            "attention-group",
            "heads",
            Some("1024"),
            "new",
            r#"{"Elements":4000}"#,
            1e3,
        );
        write(
            root,
            "int4",
            "gate",
            Some("8"),
            "new",
            r#"{"Bytes":1000}"#,
            2e3,
        );
        write(
            root,
            "int4",
            "gate",
            Some("64"),
            "new",
            r#"{"Bytes":1000}"#,
            9e3,
        );
        write(
            root,
            "int4",
            "gate",
            Some("1"),
            "new",
            r#"{"Bytes":1000}"#,
            1e3,
        );
        // the previous run and the comparison: ignored
        write(
            root,
            "int4",
            "gate",
            Some("1"),
            "base",
            r#"{"Bytes":1000}"#,
            5e3,
        );
        write(
            root,
            "int4",
            "gate",
            Some("1"),
            "change",
            r#"{"Bytes":1000}"#,
            7e3,
        );
        // only a previous run: not a benchmark of this run
        write(
            root,
            "int8",
            "q",
            Some("1"),
            "base",
            r#"{"Bytes":1000}"#,
            5e3,
        );
        std::fs::create_dir_all(root.join("report")).unwrap();

        let rs = read_all(root).unwrap();
        let ids: Vec<_> = rs
            .iter()
            .map(|r| format!("{}/{}/{}", r.group, r.benchmark, r.param))
            .collect();
        assert_eq!(
            ids,
            [
                "int4/gate/1",
                "int4/gate/8",
                "int4/gate/64",
                "attention-group/heads/1024",
                "moe/inkling-expert-fp16/1"
            ]
        );
        assert_eq!(rs[0].median_ns, 1e3);
        assert_eq!(rs[0].work, Some(Work::Bytes(1000)));
        assert_eq!(rs[3].work, Some(Work::Flops(4000)));
        assert!(rs[0].written_s.is_some());

        // a group directory alone will do
        assert_eq!(read_all(&root.join("int4")).unwrap().len(), 3);
    }

    #[test]
    fn parses_criterion_json() {
        let b = r#"{"group_id":"int4","function_id":"inkling-expert-gate","value_str":"1","throughput":{"Bytes":10616832},"full_id":"int4/inkling-expert-gate/1"}"#;
        let e = r#"{"median":{"point_estimate":1591492.6296296297}}"#;
        let r = parse(b, e).unwrap();
        assert_eq!(r.benchmark, "inkling-expert-gate");
        assert_eq!(r.param, "1");
        assert_eq!(r.median_ns, 1591492.6296296297);
        assert_eq!(r.work, Some(Work::Bytes(10616832)));

        let no_tp = r#"{"group_id":"g","function_id":"f","value_str":null,"throughput":null}"#;
        let r = parse(no_tp, e).unwrap();
        assert_eq!((r.param.as_str(), r.work), ("", None));
        let decimal = r#"{"group_id":"g","function_id":"f","throughput":{"BytesDecimal":5}}"#;
        assert_eq!(parse(decimal, e).unwrap().work, Some(Work::Bytes(5)));

        assert!(parse(b, r#"{"mean":{"point_estimate":1.0}}"#)
            .unwrap_err()
            .contains("/median/point_estimate"));
        assert!(parse(b, r#"{"median":{"point_estimate":0.0}}"#).is_err());
        let odd = r#"{"group_id":"g","function_id":"f","throughput":{"Lines":5}}"#;
        assert!(parse(odd, e).unwrap_err().contains("Lines"));
        assert!(parse("{", e).unwrap_err().contains("benchmark.json"));
    }

    #[test]
    fn missing_or_empty_directories_are_clear_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let gone = tmp.path().join("criterion");
        let e = read_all(&gone).unwrap_err();
        assert!(matches!(e, BenchTableError::NoCriterionDir(_)), "{e}");
        assert!(e.to_string().contains("not found"), "{e}");

        write(
            tmp.path(),
            "int8",
            "q",
            Some("1"),
            "base",
            r#"{"Bytes":1}"#,
            5.0,
        );
        let e = read_all(tmp.path()).unwrap_err();
        assert!(matches!(e, BenchTableError::NoBenchmarks(_)), "{e}");

        let dir = tmp.path().join("int4/broken/1/new");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("benchmark.json"), "{}").unwrap();
        let e = read_all(tmp.path()).unwrap_err();
        assert!(e.to_string().contains("estimates.json"), "{e}");
    }
}
