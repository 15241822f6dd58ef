//! A sweep run's files as the analysis reads them (`Run`: its phase records, each phase's traces in
//! request order, and the stats polls), loaded by `load_run`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;

use crate::trace::{read_records, PhaseRecord, StatsPoll, TraceRecord};

pub struct Run {
    pub phases: Vec<PhaseRecord>,
    pub traces: BTreeMap<String, Vec<TraceRecord>>,
    pub polls: Vec<StatsPoll>,
}

pub fn load_run(dir: &Path) -> anyhow::Result<Run> {
    let phases: Vec<PhaseRecord> = read_records(&dir.join("phases.jsonl"))
        .with_context(|| format!("{} is not a sweep run", dir.display()))?;
    let mut traces = BTreeMap::new();
    for p in &phases {
        let path = dir.join("traces").join(format!("{}.jsonl.gz", p.phase));
        let mut recs: Vec<TraceRecord> = read_records(&path)?;
        recs.sort_by(|a, b| {
            (a.cohort, a.family_index, a.prompt_index).cmp(&(
                b.cohort,
                b.family_index,
                b.prompt_index,
            ))
        });
        traces.insert(p.phase.clone(), recs);
    }
    let poll_path = dir.join("stats_poll.jsonl");
    let polls = if poll_path.exists() {
        read_records(&poll_path)?
    } else {
        Vec::new()
    };
    Ok(Run {
        phases,
        traces,
        polls,
    })
}
