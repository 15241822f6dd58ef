//! Reading and writing table cells for the speculation experiment's tables (`tables`, `families`,
//! `llama`, `readme`): a column of a row as a number, a number as a cell.

/// Column `i` of a table row as a number (NaN when absent or not one).
pub(super) fn num_at(r: &[String], i: usize) -> f64 {
    r.get(i)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(f64::NAN)
}

pub(super) fn cell(x: f64, d: usize) -> String {
    if x.is_finite() {
        format!("{x:.d$}")
    } else {
        "–".into()
    }
}
