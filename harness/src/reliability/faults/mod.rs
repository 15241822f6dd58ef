//! Faults under load (`moefleet-harness faults`): for each scenario (kill -9 a role, SIGSTOP a
//! role, or run a command that cuts a link and another that mends it), streams run, the fault is
//! made, `/health` is read every 20 ms until the fleet reports the loss and again until it is
//! ready, the streams run on a while, and then every prompt is asked again alone and must give
//! the output it gave before any fault. Rows go to OUT/requests.jsonl.gz as requests end (with
//! their scenario); OUT/faults.json holds each scenario's events and the findings [`findings`]
//! computes from them and the rows.
//!
//! This module holds the faults, the run's configuration and the records it writes; `run` makes
//! the scenarios (the streams, the fault, the watch on `/health`, every prompt alone afterwards)
//! and `assess` computes each scenario's findings from its events and rows and rechecks a
//! committed run (with the unit tests: in-flight streams against later losses, ride-through).

mod assess;
mod run;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use assess::{all_findings, findings, recheck};
pub use run::run;

use super::load::Done;

/// One fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// SIGKILL the role's process.
    Kill(usize),
    /// SIGSTOP the role's process (the fleet must notice the silence and replace it).
    Stop(usize),
    /// Run `--cut-cmd`, and `--heal-cmd` this many milliseconds later.
    Cut(u64),
    /// A host gone: `--cut-cmd`, and `--heal-cmd` this many milliseconds later, against a fleet
    /// whose fleet file lists a spare: the fleet must be ready again through the spare before the
    /// host returns (and the returning role must not be linked again; the engine's own test).
    Gone(u64),
}

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Fault, String> {
        let role = |r: &str| {
            r.parse::<usize>().ok().filter(|r| *r >= 1).ok_or(format!(
                "'{s}': the role must be a number from 1 (role 0 is the server)"
            ))
        };
        match s.split_once(':') {
            Some(("kill", r)) => Ok(Fault::Kill(role(r)?)),
            Some(("stop", r)) => Ok(Fault::Stop(role(r)?)),
            Some((kind @ ("cut" | "gone"), t)) => match t.parse::<f64>() {
                Ok(t) if t > 0.0 && t <= 3600.0 => {
                    let ms = (t * 1000.0).round() as u64;
                    Ok(if kind == "cut" {
                        Fault::Cut(ms)
                    } else {
                        Fault::Gone(ms)
                    })
                }
                _ => Err(format!(
                    "'{s}': the cut lasts SECONDS, more than 0 and at most 3600"
                )),
            },
            _ => Err(format!(
                "'{s}' is not kill:ROLE, stop:ROLE, cut:SECONDS or gone:SECONDS"
            )),
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Kill(r) => write!(f, "kill:{r}"),
            Fault::Stop(r) => write!(f, "stop:{r}"),
            Fault::Cut(ms) => write!(f, "cut:{}", *ms as f64 / 1000.0),
            Fault::Gone(ms) => write!(f, "gone:{}", *ms as f64 / 1000.0),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultsConfig {
    pub url: String,
    pub faults: Vec<Fault>,
    pub streams: usize,
    pub prompts: usize,
    pub min_tokens: usize,
    pub max_tokens: usize,
    /// Seconds of load before the fault, and after the fleet is ready again.
    pub lead_s: f64,
    pub tail_s: f64,
    /// Longest wait for the fleet to report the fault, and then to be ready.
    pub detect_limit_s: f64,
    pub ready_limit_s: f64,
    pub cut_cmd: Option<String>,
    pub heal_cmd: Option<String>,
}

/// A request of a scenario.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub scenario: usize,
    #[serde(flatten)]
    pub done: Done,
}

/// What happened in one scenario, as it was watched (seconds on the run's clock).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Events {
    pub fault: Fault,
    pub victim_pid: Option<u32>,
    pub processes_before: Vec<(usize, u32)>,
    pub processes_after: Vec<(usize, u32)>,
    /// Processes of `processes_before` still running at the end that are not in
    /// `processes_after` (leaked).
    pub leaked: Vec<u32>,
    /// The victim's process still ran (stopped or not) when the scenario ended.
    pub victim_alive_after: Option<bool>,
    pub t_fault: f64,
    /// First `/health` answer other than 200 after the fault (None: none was seen).
    pub t_unready: Option<f64>,
    pub t_healed: Option<f64>,
    /// First 200 after `t_unready`.
    pub t_ready: Option<f64>,
    pub t_end: f64,
    pub recoveries: u64,
    /// Prompts whose output alone after the fault differs from theirs before any fault (all of
    /// them when the fleet was not ready at the end).
    pub changed_outputs: Vec<usize>,
    pub load_average: Option<[f64; 3]>,
    /// The server's own count of what the fault cost (its `/api/stats` counters before and after
    /// the scenario); None from a server without them, and in records made before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldCounts>,
}

/// Streams the server held through a lost chain, streams in flight it lost, and the rows its
/// replays sent again, over one scenario (`/api/stats` differences).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldCounts {
    pub streams_resumed: u64,
    pub streams_lost: u64,
    pub replay_rows: u64,
    /// Tokens the server delivered over the scenario's requests (`tokens_total`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
}

/// The findings of one scenario from its events and rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Findings {
    pub fault: String,
    /// Fault to the first sign of it: `/health` unready or a stream ending in error.
    pub detect_s: Option<f64>,
    /// Fault to ready again.
    pub ready_s: Option<f64>,
    pub in_flight_at_fault: usize,
    /// Streams that ended in error.
    pub broken: usize,
    /// Of those, the ones that began after the fleet reported the fault (must be none).
    pub broken_after_unready: usize,
    /// Streams that ended complete but with wrong counts, short, or with other text than alone.
    pub corrupted: usize,
    /// Requests refused (503) while the fleet recovered.
    pub refused: usize,
    /// Requests that began after the fleet was ready again, and how many of them completed.
    pub after_ready: usize,
    pub after_ready_complete: usize,
    pub recoveries: u64,
    pub outputs_unchanged: bool,
    pub no_leaked_processes: bool,
    pub victim_replaced: Option<bool>,
    /// The fleet never reported the fault and no stream broke: it rode through (a cut shorter
    /// than the stall bound).
    pub ridden_through: bool,
    /// Nothing lost beyond the streams in flight when the fleet reported the fault, one recovery
    /// brought the fleet back (or it rode through with nothing lost), and it serves what it
    /// served before.
    pub passed: bool,
    /// With the server's counts (`Events::held`): the streams in flight at the fault that
    /// completed, and their longest pause (median and largest, seconds): the time to resume a
    /// held stream as its client saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<Resumed>,
}

/// What holding the streams in flight cost, as their clients and the server saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resumed {
    pub streams: usize,
    pub pause_median_s: Option<f64>,
    pub pause_max_s: Option<f64>,
    /// The server's counts over the scenario.
    pub server: HeldCounts,
    /// Tokens the scenario's streams showed their clients, and whether the server's count over
    /// the scenario is the same (None: the record has no server count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters_agree: Option<bool>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultsRecord {
    pub config: FaultsConfig,
    pub model: String,
    pub engine_commit: Value,
    pub roles: Option<usize>,
    pub host: Value,
    pub references: BTreeMap<usize, String>,
    pub scenarios: Vec<Events>,
    pub findings: Vec<Findings>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_faults() {
        assert_eq!("kill:3".parse::<Fault>(), Ok(Fault::Kill(3)));
        assert_eq!("stop:10".parse::<Fault>(), Ok(Fault::Stop(10)));
        assert_eq!("cut:2.5".parse::<Fault>(), Ok(Fault::Cut(2500)));
        assert_eq!(Fault::Cut(2500).to_string(), "cut:2.5");
        assert_eq!("gone:30".parse::<Fault>(), Ok(Fault::Gone(30000)));
        assert_eq!(Fault::Gone(30000).to_string(), "gone:30");
        for bad in ["kill:0", "kill:x", "cut:0", "cut", "nap:1"] {
            assert!(bad.parse::<Fault>().is_err(), "{bad}");
        }
    }
}
