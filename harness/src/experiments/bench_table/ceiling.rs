//! The two ceilings of `ceilings.json` (written by `moefleet-harness ceilings`) the kernel table
//! compares with: the read bandwidth and the fp32 FMA rate with all threads, and where and when
//! they were measured.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::BenchTableError;

/// One measured limit: `/measurements/<key>/median` of `ceilings.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct Ceiling {
    /// `read_bandwidth_all`, `fma_rate_all` (or `_1t` on a one-CPU machine).
    pub key: String,
    /// Median of the samples, GB/s or GFLOP/s.
    pub median: f64,
    pub threads: Option<u64>,
}

/// The ceilings a kernel table compares with.
#[derive(Clone, Debug, PartialEq)]
pub struct Ceilings {
    /// Sustained read bandwidth, GB/s: the ceiling of benchmarks declaring bytes.
    pub read: Ceiling,
    /// fp32 FMA rate, GFLOP/s: the ceiling of benchmarks declaring FLOPs.
    pub fma: Ceiling,
    /// `/host/cpu`.
    pub cpu: Option<String>,
    /// `/host/date_utc` (`YYYY-MM-DDTHH:MM:SSZ`) and `/host/epoch_s`: when they were measured.
    pub date_utc: Option<String>,
    pub epoch_s: Option<u64>,
}

impl Ceilings {
    /// From the parsed `ceilings.json`.
    pub fn from_json(v: &Value) -> Result<Ceilings, String> {
        Ok(Ceilings {
            read: ceiling(v, "read_bandwidth")?,
            fma: ceiling(v, "fma_rate")?,
            cpu: v["host"]["cpu"].as_str().map(str::to_string),
            date_utc: v["host"]["date_utc"].as_str().map(str::to_string),
            epoch_s: v["host"]["epoch_s"].as_u64(),
        })
    }

    /// Read `path` (a `ceilings.json`, or a directory holding one).
    pub fn read(path: &Path) -> Result<Ceilings, BenchTableError> {
        let file = ceilings_file(path);
        if !file.is_file() {
            return Err(BenchTableError::NoCeilings(file));
        }
        let text = std::fs::read_to_string(&file).map_err(|source| BenchTableError::Io {
            path: file.clone(),
            source,
        })?;
        let bad = |why: String| BenchTableError::Bad {
            path: file.clone(),
            why,
        };
        let v: Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        Ceilings::from_json(&v).map_err(bad)
    }
}

/// `path` itself, or `path/ceilings.json` when `path` is a directory.
pub fn ceilings_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("ceilings.json")
    } else {
        path.to_path_buf()
    }
}

/// `<name>_all`; on a machine of one logical CPU `ceilings` measures only `<name>_1t`, which is
/// then all threads.
fn ceiling(v: &Value, name: &str) -> Result<Ceiling, String> {
    let ms = &v["measurements"];
    let key = [format!("{name}_all"), format!("{name}_1t")]
        .into_iter()
        .find(|k| !ms[k.as_str()].is_null())
        .ok_or_else(|| format!("no /measurements/{name}_all (nor {name}_1t)"))?;
    let m = &ms[key.as_str()];
    let median = m["median"]
        .as_f64()
        .filter(|x| x.is_finite() && *x > 0.0)
        .ok_or_else(|| format!("/measurements/{key}/median is not a positive number"))?;
    Ok(Ceiling {
        median,
        threads: m["threads"].as_u64(),
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn all_threads_preferred_one_thread_as_fallback() {
        let v = json!({
            "record": "ceilings",
            "host": {"cpu": "AMD EPYC", "date_utc": "2026-11-29T11:46:59Z", "epoch_s": 1795952819},
            "measurements": {
                "read_bandwidth_1t": {"median": 11.5, "threads": 1},
                "read_bandwidth_all": {"median": 12.5, "threads": 2},
                "fma_rate_1t": {"median": 93.0, "threads": 1},
            }
        });
        let c = Ceilings::from_json(&v).unwrap();
        assert_eq!(c.read.key, "read_bandwidth_all");
        assert_eq!((c.read.median, c.read.threads), (12.5, Some(2)));
        assert_eq!(c.fma.key, "fma_rate_1t");
        assert_eq!(c.fma.median, 93.0);
        assert_eq!(c.cpu.as_deref(), Some("AMD EPYC"));
        assert_eq!(c.epoch_s, Some(1795952819));

        let e =
            Ceilings::from_json(&json!({"measurements": {"read_bandwidth_all": {"median": 1.0}}}))
                .unwrap_err();
        assert!(e.contains("fma_rate_all"), "{e}");
        let e = Ceilings::from_json(&json!({"measurements": {
            "read_bandwidth_all": {"median": 0.0}, "fma_rate_all": {"median": 1.0}}}))
        .unwrap_err();
        assert!(e.contains("positive"), "{e}");
    }

    #[test]
    fn reads_a_file_or_its_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let e = Ceilings::read(tmp.path()).unwrap_err();
        assert!(matches!(e, BenchTableError::NoCeilings(_)), "{e}");
        assert!(e.to_string().contains("moefleet-harness ceilings"), "{e}");
        let text = r#"{"measurements": {"read_bandwidth_all": {"median": 10.0},
                        "fma_rate_all": {"median": 100.0}}}"#;
        std::fs::write(tmp.path().join("ceilings.json"), text).unwrap();
        assert_eq!(Ceilings::read(tmp.path()).unwrap().read.median, 10.0);
        let c = Ceilings::read(&tmp.path().join("ceilings.json")).unwrap();
        assert_eq!(c.fma.median, 100.0);
        std::fs::write(tmp.path().join("bad.json"), "{").unwrap();
        let e = Ceilings::read(&tmp.path().join("bad.json")).unwrap_err();
        assert!(e.to_string().contains("not JSON"), "{e}");
    }
}
