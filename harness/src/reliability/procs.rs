//! The server's processes as /proc shows them: resident memory and open descriptors of each role
//! process `/api/stats` lists (`processes`: role and pid), read on this machine.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One process at one moment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcSample {
    pub role: usize,
    pub pid: u32,
    /// VmRSS in KiB (None: the process is gone or unreadable).
    pub rss_kib: Option<u64>,
    /// Entries of /proc/PID/fd.
    pub fds: Option<u64>,
}

/// (role, pid) of every process the stats list, by role.
pub fn processes(stats: &Value) -> Vec<(usize, u32)> {
    let mut out: Vec<(usize, u32)> = stats
        .get("processes")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((p["role"].as_u64()? as usize, p["pid"].as_u64()? as u32)))
                .collect()
        })
        .unwrap_or_default();
    out.sort_unstable();
    out
}

/// Read one process now.
pub fn sample(role: usize, pid: u32) -> ProcSample {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok();
    let rss_kib = status.as_deref().and_then(vm_rss_kib);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count() as u64);
    ProcSample {
        role,
        pid,
        rss_kib,
        fds,
    }
}

/// VmRSS of /proc/PID/status text, in KiB.
pub fn vm_rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Is the process running (not gone, not a zombie)?
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_this_process() {
        let me = sample(0, std::process::id());
        assert!(me.rss_kib.is_some_and(|r| r > 100), "{me:?}");
        assert!(me.fds.is_some_and(|f| f >= 3), "{me:?}");
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX - 1));
    }

    #[test]
    fn parses_status_and_stats() {
        assert_eq!(vm_rss_kib("Name:\tx\nVmRSS:\t   1234 kB\n"), Some(1234));
        assert_eq!(vm_rss_kib("Name:\tx\n"), None);
        let stats = json!({"processes": [{"role": 2, "pid": 30}, {"role": 0, "pid": 10}]});
        assert_eq!(processes(&stats), vec![(0, 10), (2, 30)]);
        assert!(processes(&json!({})).is_empty());
    }
}
