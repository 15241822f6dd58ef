//! A `ceilings.json` record's derived numbers recomputed from its samples, for `verify`.

use anyhow::Context;
use serde_json::Value;

use super::{add_ratios, Measurement};

/// Fields of a measurement that `to_json` and `add_ratios` derive from its samples and the other
/// measurements' medians; everything else in a record is what was measured or configured.
const DERIVED: [&str; 13] = [
    "median",
    "best",
    "p10",
    "p90",
    "n",
    "compared_with",
    "pct_of_read_bandwidth",
    "pct_of_fma_rate",
    "pct_of_interleaved_read",
    "pct_of_token_read",
    "call_ms",
    "gflops_median",
    "tok_s_median",
];

/// `ceilings.json`'s measurements derived afresh from their samples (summaries, and each product
/// against the bandwidth and FMA medians of its thread count), for `verify`: equal to the
/// committed ones unless a derived number was edited. A product's samples are `bytes / seconds`
/// per call, so its per-call times (`call_ms`) and `gflops_median` are recovered from them (to a
/// few ulps: compare with a relative tolerance).
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
        if let Some(bytes) = d.get("bytes").and_then(Value::as_f64) {
            let shape = &v["shape"];
            let (rows, cols) = (shape["rows_out"].as_f64(), shape["cols_in"].as_f64());
            let (rows, cols) = rows.zip(cols).with_context(|| format!("{key}: no shape"))?;
            let ms_per_call: Vec<f64> = samples.iter().map(|g| bytes / (g * 1e9) * 1e3).collect();
            let call = crate::stats::Summary::of(&ms_per_call)
                .with_context(|| format!("{key}: no valid samples"))?;
            d.insert("call_ms".into(), serde_json::to_value(call)?);
            // one input row: 2 FLOP per weight
            let flop = 2.0 * rows * cols;
            d.insert(
                "gflops_median".into(),
                serde_json::json!(flop / (call.median * 1e-3) / 1e9),
            );
        }
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
    add_ratios(&mut ms)?;
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
            // 4e6 bytes at 5-7 GB/s: calls of 0.8, 0.667, 0.571 and 0.727 ms; 2 x 1000 x 2000 FLOP
            m(
                vec![5.0, 6.0, 7.0, 5.5],
                json!({
                    "bytes": 4_000_000,
                    "shape": {"rows_out": 1000, "cols_in": 2000},
                    "call_ms": {"n": 4, "median": 0.6969696969696969, "p10": 0.6, "p90": 0.7781818181818182, "min": 0.5714285714285714, "max": 0.8},
                    "gflops_median": 5.739130434782609,
                }),
            ),
        ];
        // a decode of 2e6 bytes a token at 8-10 GB/s: 4000-5000 tokens a second
        ms.push(m(
            vec![8.0, 10.0, 9.0],
            json!({"bytes_per_token": 2_000_000.0, "tok_s_median": 4500.0,
                   "token_read": "read_token_x_1t"}),
        ));
        // reads laid out as its token's, at 12-15 GB/s
        ms.push(m(vec![12.0, 15.0], json!({"bytes_per_pass": 128_000_000})));
        for (m, k) in ms.iter_mut().zip([
            "read_bandwidth_1t",
            "fma_rate_1t",
            "int4_x_product_1t",
            "decode_x_1t",
            "read_token_x_1t",
        ]) {
            m.key = k.into();
        }
        ms[1].unit = "GFLOP/s";
        add_ratios(&mut ms).unwrap();
        json!({"measurements": ms.iter().map(|m| (m.key.clone(), m.to_json().unwrap())).collect::<serde_json::Map<_, _>>()})
    }

    #[test]
    fn a_record_rederives_to_itself_and_an_edited_median_or_ratio_does_not() {
        let r = record();
        let fresh = rederive(&r).unwrap();
        assert!(
            crate::recheck::same_json(&r["measurements"], &fresh),
            "{fresh:#}"
        );
        let pct = r["measurements"]["int4_x_product_1t"]["pct_of_read_bandwidth"].as_f64();
        assert_eq!(pct, Some(100.0 * 5.75 / 11.0));
        // decode: its median against the bandwidth, and tokens a second at that median; no FMA share
        let d = &r["measurements"]["decode_x_1t"];
        assert_eq!(
            d["pct_of_read_bandwidth"].as_f64(),
            Some(100.0 * 9.0 / 11.0)
        );
        assert_eq!(d["tok_s_median"].as_f64(), Some(4500.0));
        assert_eq!(d["pct_of_token_read"].as_f64(), Some(100.0 * 9.0 / 13.5));
        assert!(d.get("pct_of_fma_rate").is_none());
        for (k, f) in [
            ("read_bandwidth_1t", "median"),
            ("int4_x_product_1t", "pct_of_read_bandwidth"),
            ("fma_rate_1t", "p90"),
            ("int4_x_product_1t", "gflops_median"),
            ("decode_x_1t", "tok_s_median"),
            ("decode_x_1t", "pct_of_read_bandwidth"),
            ("decode_x_1t", "pct_of_token_read"),
            ("read_token_x_1t", "median"),
        ] {
            let mut e = r.clone();
            e["measurements"][k][f] = json!(1.5);
            let fresh = rederive(&e).unwrap();
            assert!(
                !crate::recheck::same_json(&e["measurements"], &fresh),
                "{k}/{f}"
            );
        }
        // a product whose ratio fields were deleted gets them back: the deletion is caught
        let mut e = r.clone();
        let m = e["measurements"]["int4_x_product_1t"]
            .as_object_mut()
            .unwrap();
        m.remove("compared_with");
        m.remove("pct_of_read_bandwidth");
        assert!(!crate::recheck::same_json(
            &e["measurements"],
            &rederive(&e).unwrap()
        ));
    }
}
