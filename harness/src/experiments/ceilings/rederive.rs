//! A `ceilings.json` record's derived numbers recomputed from its samples, for `verify`.

use anyhow::Context;
use serde_json::Value;

use super::{add_ratios, Measurement};

/// Fields of a measurement that `to_json` and `add_ratios` derive from its samples and the other
/// measurements' medians; everything else in a record is what was measured or configured.
const DERIVED: [&str; 8] = [
    "median",
    "best",
    "p10",
    "p90",
    "n",
    "compared_with",
    "pct_of_read_bandwidth",
    "pct_of_fma_rate",
];

/// `ceilings.json`'s measurements derived afresh from their samples (summaries, and each product
/// against the bandwidth and FMA medians of its thread count), for `verify`: equal to the
/// committed ones unless a derived number was edited. `call_ms` and `gflops_median` come from
/// per-call times the record does not keep, and are taken as recorded.
pub fn rederive(record: &Value) -> anyhow::Result<Value> {
    let measured = record["measurements"]
        .as_object()
        .context("no measurements object")?;
    let mut ms = Vec::new();
    for (key, v) in measured {
        let mut details = v.clone();
        let d = details
            .as_object_mut()
            .context("a measurement is not an object")?;
        for f in DERIVED
            .iter()
            .chain(&["label", "unit", "threads", "samples"])
        {
            d.remove(*f);
        }
        let samples: Vec<f64> = v["samples"]
            .as_array()
            .with_context(|| format!("{key}: no samples"))?
            .iter()
            .map(|x| {
                x.as_f64()
                    .with_context(|| format!("{key}: a sample is not a number"))
            })
            .collect::<anyhow::Result<_>>()?;
        ms.push(Measurement {
            key: key.clone(),
            label: v["label"].as_str().unwrap_or_default().to_string(),
            unit: match v["unit"].as_str() {
                Some("GB/s") => "GB/s",
                Some("GFLOP/s") => "GFLOP/s",
                other => anyhow::bail!("{key}: unit {other:?}"),
            },
            threads: v["threads"].as_u64().context("no thread count")? as usize,
            samples,
            details,
        });
    }
    let had_ratios: Vec<bool> = measured
        .values()
        .map(|v| v.get("compared_with").is_some())
        .collect();
    add_ratios(&mut ms)?;
    for (m, had) in ms.iter_mut().zip(had_ratios) {
        if !had {
            if let Value::Object(d) = &mut m.details {
                for f in ["compared_with", "pct_of_read_bandwidth", "pct_of_fma_rate"] {
                    d.remove(f);
                }
            }
        }
    }
    Ok(Value::Object(
        ms.iter()
            .map(|m| Ok((m.key.clone(), m.to_json()?)))
            .collect::<anyhow::Result<serde_json::Map<String, Value>>>()?,
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record() -> Value {
        let m = |samples: Vec<f64>, details: Value| Measurement {
            key: String::new(),
            label: "x".into(),
            unit: "GB/s",
            threads: 1,
            samples,
            details,
        };
        let mut ms = vec![
            m(vec![10.0, 12.0, 11.0], json!({"kernel": "k"})),
            m(vec![100.0, 90.0], json!({"kernel": "f"})),
            m(
                vec![5.0, 6.0, 7.0, 5.5],
                json!({"gflops_median": 20.0, "bytes": 1}),
            ),
        ];
        for (m, k) in ms
            .iter_mut()
            .zip(["read_bandwidth_1t", "fma_rate_1t", "int4_x_product_1t"])
        {
            m.key = k.into();
        }
        ms[1].unit = "GFLOP/s";
        add_ratios(&mut ms).unwrap();
        json!({"measurements": ms.iter().map(|m| (m.key.clone(), m.to_json().unwrap())).collect::<serde_json::Map<_, _>>()})
    }

    #[test]
    fn a_record_rederives_to_itself_and_an_edited_median_or_ratio_does_not() {
        let r = record();
        assert_eq!(rederive(&r).unwrap(), r["measurements"]);
        let pct = r["measurements"]["int4_x_product_1t"]["pct_of_read_bandwidth"].as_f64();
        assert_eq!(pct, Some(100.0 * 5.75 / 11.0));
        for (k, f) in [
            ("read_bandwidth_1t", "median"),
            ("int4_x_product_1t", "pct_of_read_bandwidth"),
            ("fma_rate_1t", "p90"),
        ] {
            let mut e = r.clone();
            e["measurements"][k][f] = json!(1.5);
            assert_ne!(rederive(&e).unwrap(), e["measurements"], "{k}/{f}");
        }
    }
}
