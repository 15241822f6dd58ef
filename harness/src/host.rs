//! Facts about the machine a measurement ran on: the engine's `host_facts` (CPU model name,
//! vendor, family/model/stepping, SIMD flags, cores, memory, kernel, the kernels' instruction set,
//! load averages) with the harness's thread count and the date.

use serde_json::{json, Value};

/// Host facts as a JSON object (fields that cannot be read are null).
pub fn facts() -> Value {
    let mut v = moefleet_engine::bench::host_facts();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let extra = json!({
        "rayon_threads": rayon::current_num_threads(),
        "date_utc": utc_date_time(now),
        "epoch_s": now,
    });
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v
}

/// The 1-, 5- and 15-minute load averages from /proc/loadavg (None where unreadable): every
/// timed record carries them, since these machines are shared.
pub fn load_average() -> Option<[f64; 3]> {
    moefleet_engine::bench::load_average()
}

/// `YYYY-MM-DDTHH:MM:SSZ` of Unix seconds (proleptic Gregorian, days-from-civil inverse).
pub fn utc_date_time(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Logical CPUs this process may use (1 if unknown).
pub fn logical_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc_date_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_date_time(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_date_time(1_795_945_716), "2026-11-29T09:48:36Z");
    }
}
