//! The findings of each scenario from its events and rows (`findings`, `all_findings`, as `run`
//! writes them and `verify` recomputes them with `recheck`), and what passing means.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context};

use super::{Events, Fault, FaultsRecord, Findings, Row};
use crate::reliability::load::{Done, Status};
use crate::trace::read_records;

/// The findings of a scenario.
pub fn findings(ev: &Events, rows: &[&Done], references: &BTreeMap<usize, String>) -> Findings {
    let first_error = rows
        .iter()
        .filter(|d| d.status == Status::Broken && d.ended >= ev.t_fault)
        .map(|d| d.ended)
        .reduce(f64::min);
    let noticed = match (ev.t_unready, first_error) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let broken: Vec<&&Done> = rows.iter().filter(|d| d.status == Status::Broken).collect();
    let corrupt = |d: &Done| match d.status {
        Status::Miscounted => true,
        Status::Complete => {
            references.get(&d.prompt) != Some(&d.text_sha)
                || d.tokens != d.max_tokens as u64
                || d.finish.as_deref() != Some("length")
        }
        _ => false,
    };
    let after_ready: Vec<&&Done> = match ev.t_ready {
        Some(t) => rows.iter().filter(|d| d.started >= t).collect(),
        None => Vec::new(),
    };
    let victim_replaced = ev.victim_pid.map(|pid| {
        ev.victim_alive_after == Some(false) && !ev.processes_after.iter().any(|p| p.1 == pid)
    });
    let broken_after_unready = match noticed {
        Some(t) => broken.iter().filter(|d| d.started > t).count(),
        None => 0,
    };
    let mut f = Findings {
        fault: ev.fault.to_string(),
        detect_s: noticed.map(|t| t - ev.t_fault),
        ready_s: ev.t_ready.map(|t| t - ev.t_fault),
        in_flight_at_fault: rows
            .iter()
            .filter(|d| d.accepted() && d.started <= ev.t_fault && d.ended > ev.t_fault)
            .count(),
        broken: broken.len(),
        broken_after_unready,
        corrupted: rows.iter().filter(|d| corrupt(d)).count(),
        refused: rows.iter().filter(|d| d.status == Status::Refused).count(),
        after_ready: after_ready.len(),
        after_ready_complete: after_ready
            .iter()
            .filter(|d| d.status == Status::Complete)
            .count(),
        recoveries: ev.recoveries,
        outputs_unchanged: ev.changed_outputs.is_empty(),
        no_leaked_processes: ev.leaked.is_empty(),
        victim_replaced,
        ridden_through: noticed.is_none() && broken.is_empty(),
        passed: false,
        resumed: ev.held.map(|server| resumed(ev, rows, server)),
    };
    let common = f.corrupted == 0
        && f.outputs_unchanged
        && f.no_leaked_processes
        && f.resumed.as_ref().and_then(|r| r.counters_agree) != Some(false);
    f.passed = common
        && if f.ridden_through {
            f.recoveries == 0 && f.refused == 0 && matches!(ev.fault, Fault::Cut(_))
        } else {
            f.ready_s.is_some()
                && f.broken_after_unready == 0
                && f.after_ready > 0
                && f.after_ready_complete == f.after_ready
                && f.victim_replaced != Some(false)
                && f.recoveries == 1
                // a host gone: ready again through the spare, before the host came back
                && match ev.fault {
                    Fault::Gone(ms) => ev
                        .t_ready
                        .is_some_and(|r| r < ev.t_fault + ms as f64 / 1000.0),
                    _ => true,
                }
        };
    f
}

/// The streams in flight at the fault that completed through it, with their longest pauses.
fn resumed(ev: &Events, rows: &[&Done], server: super::HeldCounts) -> super::Resumed {
    let pauses: Vec<f64> = rows
        .iter()
        .filter(|d| d.status == Status::Complete && d.started <= ev.t_fault && d.ended > ev.t_fault)
        .filter_map(|d| d.longest_gap_s)
        .collect();
    let client: u64 = rows.iter().map(|d| d.tokens).sum();
    super::Resumed {
        streams: pauses.len(),
        pause_median_s: crate::stats::quantile(&pauses, 0.5),
        pause_max_s: pauses.iter().copied().reduce(f64::max),
        server,
        client_tokens: server.tokens.map(|_| client),
        counters_agree: server.tokens.map(|t| t == client),
    }
}

/// Findings of every scenario from the rows.
pub fn all_findings(
    scenarios: &[Events],
    rows: &[Row],
    references: &BTreeMap<usize, String>,
) -> Vec<Findings> {
    (scenarios.iter().enumerate())
        .map(|(i, ev)| {
            let mine: Vec<&Done> = rows
                .iter()
                .filter(|r| r.scenario == i)
                .map(|r| &r.done)
                .collect();
            findings(ev, &mine, references)
        })
        .collect()
}

/// Recompute a committed faults run's findings from its rows and events; Err names what differs.
pub fn recheck(dir: &Path) -> anyhow::Result<Vec<Findings>> {
    let path = dir.join("faults.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let record: FaultsRecord =
        serde_json::from_str(&text).with_context(|| path.display().to_string())?;
    let rows: Vec<Row> = read_records(&dir.join("requests.jsonl.gz"))?;
    let fresh = all_findings(&record.scenarios, &rows, &record.references);
    if !crate::recheck::same_json(
        &serde_json::to_value(&fresh)?,
        &serde_json::to_value(&record.findings)?,
    ) {
        bail!(
            "{}: the findings differ from a fresh computation from its rows",
            path.display()
        );
    }
    Ok(fresh)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: Status, started: f64, ended: f64) -> Done {
        Done {
            id: 0,
            worker: 0,
            prompt: 0,
            max_tokens: 4,
            started,
            ended,
            status,
            tokens: if status == Status::Complete { 4 } else { 1 },
            usage: Some(4),
            finish: Some("length".into()),
            capacity_retries: 0,
            text_sha: "aa".into(),
            error: None,
            longest_gap_s: None,
        }
    }

    fn events(fault: Fault) -> Events {
        Events {
            fault,
            victim_pid: Some(99),
            processes_before: vec![(0, 1), (1, 99)],
            processes_after: vec![(0, 1), (1, 100)],
            leaked: vec![],
            victim_alive_after: Some(false),
            t_fault: 10.0,
            t_unready: Some(10.5),
            t_healed: None,
            t_ready: Some(11.0),
            t_end: 20.0,
            recoveries: 1,
            changed_outputs: vec![],
            load_average: None,
            held: None,
        }
    }

    #[test]
    fn in_flight_streams_may_be_lost_and_nothing_else() {
        let refs = BTreeMap::from([(0, "aa".to_string())]);
        let ev = events(Fault::Kill(1));
        let rows = [
            row(Status::Complete, 1.0, 5.0),
            row(Status::Broken, 8.0, 10.3),
            row(Status::Refused, 10.6, 10.6),
            row(Status::Complete, 11.2, 14.0),
        ];
        let refs_rows: Vec<&Done> = rows.iter().collect();
        let f = findings(&ev, &refs_rows, &refs);
        assert!(f.passed, "{f:?}");
        assert_eq!(f.in_flight_at_fault, 1);
        assert!(
            (f.detect_s.unwrap() - 0.3).abs() < 1e-9,
            "the broken stream came first"
        );
        assert!((f.ready_s.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!((f.after_ready, f.after_ready_complete), (1, 1));
        // a stream begun after the fleet knew, and broken: lost beyond the in-flight ones
        let mut late = rows.to_vec();
        late.push(row(Status::Broken, 10.7, 10.8));
        let f = findings(&ev, &late.iter().collect::<Vec<_>>(), &refs);
        assert_eq!(f.broken_after_unready, 1);
        assert!(!f.passed);
        // two recoveries for one fault, a victim left running, other outputs: each fails
        for spoil in [
            |e: &mut Events| e.recoveries = 2,
            |e: &mut Events| e.victim_alive_after = Some(true),
            |e: &mut Events| e.changed_outputs = vec![0],
            |e: &mut Events| e.t_ready = None,
        ] {
            let mut e = events(Fault::Kill(1));
            spoil(&mut e);
            assert!(!findings(&e, &refs_rows, &refs).passed);
        }
    }

    #[test]
    fn findings_read_back_from_the_record_are_the_ones_written() {
        // `run` computes findings from events held in memory, `recheck` from the same events read
        // back from faults.json; each time is a difference of two clock readings, so a time read
        // back one unit in the last place off moves a finding by more than any relative tolerance
        // can excuse. Records must round-trip floats exactly.
        let refs = BTreeMap::from([(0, "aa".to_string())]);
        let rows = [row(Status::Broken, 8.0, 10.3)];
        let rows: Vec<&Done> = rows.iter().collect();
        for k in 0..20_000 {
            let mut ev = events(Fault::Kill(1));
            let t = 10.0 + k as f64 * std::f64::consts::PI * 1e-3;
            (ev.t_fault, ev.t_unready, ev.t_ready) = (t, Some(t + 0.7), Some(t + 1.9));
            let text = serde_json::to_string(&ev).unwrap();
            let back: Events = serde_json::from_str(&text).unwrap();
            assert_eq!(back.t_fault.to_bits(), t.to_bits(), "{text}");
            assert_eq!(
                back.t_unready.map(f64::to_bits),
                ev.t_unready.map(f64::to_bits)
            );
            assert_eq!(
                serde_json::to_value(findings(&back, &rows, &refs)).unwrap(),
                serde_json::to_value(findings(&ev, &rows, &refs)).unwrap()
            );
        }
    }

    #[test]
    fn a_short_cut_is_ridden_through() {
        let refs = BTreeMap::from([(0, "aa".to_string())]);
        let mut ev = events(Fault::Cut(2000));
        ev.victim_pid = None;
        ev.victim_alive_after = None;
        (ev.t_unready, ev.t_ready, ev.recoveries) = (None, None, 0);
        let rows = [row(Status::Complete, 9.0, 14.0)];
        let f = findings(&ev, &rows.iter().collect::<Vec<_>>(), &refs);
        assert!(f.ridden_through && f.passed, "{f:?}");
        // a kill that nobody noticed is not a ride-through
        let mut kill = ev.clone();
        kill.fault = Fault::Kill(1);
        assert!(!findings(&kill, &rows.iter().collect::<Vec<_>>(), &refs).passed);
    }

    /// A host gone passes only if the fleet was ready through the spare before the host came back
    /// (ready after it would be the host's return, not the spare, bringing the fleet back).
    #[test]
    fn a_host_gone_must_be_served_through_the_spare_before_it_returns() {
        let refs = BTreeMap::from([(0, "aa".to_string())]);
        let mut ev = events(Fault::Gone(30_000));
        ev.victim_pid = None;
        ev.victim_alive_after = None;
        (ev.t_unready, ev.t_ready) = (Some(15.0), Some(24.0));
        let rows = [
            row(Status::Complete, 9.0, 30.0),
            row(Status::Complete, 25.0, 26.0),
        ];
        let all: Vec<&Done> = rows.iter().collect();
        assert!(findings(&ev, &all, &refs).passed);
        // the fault at 10 s lasted 30: ready at 41 s is after the host returned
        ev.t_ready = Some(41.0);
        let late = [
            row(Status::Complete, 9.0, 45.0),
            row(Status::Complete, 42.0, 43.0),
        ];
        assert!(!findings(&ev, &late.iter().collect::<Vec<_>>(), &refs).passed);
    }
}
