//! What `ceilings` prints: a table of every measurement, then one line per product and decode
//! comparing it with the bandwidths of its thread count.

use super::{Measurement, SHAPES};

/// A number among a measurement's details (NaN where it has none: printed as such).
fn number(m: &Measurement, key: &str) -> f64 {
    m.details[key].as_f64().unwrap_or(f64::NAN)
}

/// The summary table (one line per measurement).
pub fn table(ms: &[Measurement]) -> anyhow::Result<String> {
    let mut out = format!(
        "{:<46} {:>7} {:>10} {:>10} {:>8}  {}\n",
        "measurement", "threads", "median", "best", "unit", "notes"
    );
    for m in ms {
        let s = m.summary()?;
        let notes = match m.details["call_ms"]["median"].as_f64() {
            Some(c) => format!(
                "{:.3} ms/call, {:.2} MB, {:.0} % of bandwidth, {:.0} % of FMA",
                c,
                number(m, "bytes") / 1e6,
                number(m, "pct_of_read_bandwidth"),
                number(m, "pct_of_fma_rate"),
            ),
            None => match m.details["tok_s_median"].as_f64() {
                Some(r) => format!(
                    "{:.1} tok/s, {:.2} MB a token, {:.0} % of bandwidth, {:.0} % of its reads",
                    r,
                    number(m, "bytes_per_token") / 1e6,
                    number(m, "pct_of_read_bandwidth"),
                    number(m, "pct_of_token_read"),
                ),
                None => String::new(),
            },
        };
        out += &format!(
            "{:<46} {:>7} {:>10.2} {:>10.2} {:>8}  {}\n",
            m.label, m.threads, s.median, s.max, m.unit, notes
        );
    }
    Ok(out)
}

/// `INT4 expert product: X GB/s = Y % of measured read bandwidth (...)` for each product.
pub fn lines(ms: &[Measurement]) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for shape in &SHAPES {
        for m in ms.iter().filter(|m| m.key.starts_with(shape.key)) {
            let pct = number(m, "pct_of_read_bandwidth");
            let vs = if m.key.ends_with("_1t") {
                "1 thread, vs 1-thread bandwidth".to_string()
            } else {
                format!("{0} threads, vs {0}-thread bandwidth", m.threads)
            };
            let name = match m.details["kernel_path"].as_str() {
                Some(k) => format!("{} ({k})", shape.line),
                None => shape.line.to_string(),
            };
            out.push(format!(
                "{name}: {:.2} GB/s = {:.1} % of measured read bandwidth ({vs})",
                m.summary()?.median,
                pct
            ));
            if let Some(p) = m.details["pct_of_interleaved_read"].as_f64() {
                out.push(format!(
                    "{name}: {:.1} % of the plain reads timed between its calls ({} thread{})",
                    p,
                    m.threads,
                    if m.threads == 1 { "" } else { "s" }
                ));
            }
        }
    }
    for m in ms.iter().filter(|m| m.key.starts_with("decode_")) {
        out.push(format!(
            "Decode {} ({}): {:.2} GB/s = {:.1} % of measured read bandwidth, {:.1} % of reads \
             laid out as its token's ({} thread{}): {:.1} tok/s x {:.2} MB a token",
            m.details["model"].as_str().unwrap_or("?"),
            m.details["kernel_path"].as_str().unwrap_or("?"),
            m.summary()?.median,
            number(m, "pct_of_read_bandwidth"),
            number(m, "pct_of_token_read"),
            m.threads,
            if m.threads == 1 { "" } else { "s" },
            number(m, "tok_s_median"),
            number(m, "bytes_per_token") / 1e6,
        ));
    }
    Ok(out)
}
