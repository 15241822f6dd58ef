//! The runs of a speculation experiment (`steps`): one sweep run per server
//! configuration under a root directory (`off/` without speculation, then one per proposer set),
//! each with the two passes of the speculation plan (`first_c001`, `repeat_c001`) and role 0's
//! frame and reply records under `records/` (or the fleet's `profiles/`).

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context};

use crate::analysis::metrics::request_decode_rate;
use crate::analysis::tables::{load_run, phase_rows};
use crate::trace::{read_records, TraceRecord};

/// Configurations in the order they are tabled; `off` is the reference.
pub const CONFIGS: [&str; 7] = [
    "off",
    "suffix",
    "phrase",
    "mtp",
    "mtp-every",
    "draft",
    "all",
];
/// Speculation off once more at the end of the session: how far the machine drifted.
pub const OFF_AGAIN: &str = "off-again";
/// The two passes' phase names.
pub const PASSES: [&str; 2] = ["first_c001", "repeat_c001"];

/// One request as the analysis needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub family: String,
    pub family_index: usize,
    pub text: String,
    pub tokens: u64,
    /// `(tokens − n_first) / (t_last − t_first)`.
    pub decode_tok_s: f64,
    pub started_epoch: f64,
    pub ended_epoch: f64,
    /// The server's per-request speculation summary (zeros when off).
    pub proposed: u64,
    pub accepted: u64,
    pub rewinds: u64,
    /// Drafts begun (runs of proposals verified one after another; 0 in runs recorded before the
    /// server reported them).
    pub drafts: u64,
}

/// One pass of one configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Pass {
    pub requests: Vec<Request>,
    /// Q_decode and Q_phase of the pass (MEASUREMENTS.md §2.3).
    pub q_decode: f64,
    pub q_phase: f64,
}

/// Role 0's timing of one frame: launched, and (for sampled rows) replied.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FrameTimes {
    pub launch_ns: Option<u64>,
    pub launch_epoch: Option<f64>,
    pub reply_ns: Option<u64>,
    pub reply_epoch: Option<f64>,
    pub outcome: Option<String>,
}

pub struct ConfigRun {
    pub name: String,
    pub passes: Vec<Pass>,
    /// seq -> times, from `profiles/role-0.jsonl` and `profiles/role-0-replies.jsonl`.
    pub frames: HashMap<u64, FrameTimes>,
    /// The machine's 1-minute load average when the sweep began and ended (`run.json`; absent
    /// in runs recorded before the sweep wrote it).
    pub load: [Option<f64>; 2],
}

fn request(r: &TraceRecord) -> anyhow::Result<Request> {
    if let Some(e) = &r.error {
        bail!("request {}/{} failed: {e}", r.family, r.prompt_index);
    }
    let spec = r.server_extra.as_ref().map(|x| &x["speculation"]);
    let n = |k: &str| spec.and_then(|s| s[k].as_u64()).unwrap_or(0);
    Ok(Request {
        family: r.family.clone(),
        family_index: r.family_index,
        text: r.text.clone(),
        tokens: r.tokens(),
        decode_tok_s: request_decode_rate(r)
            .with_context(|| format!("request {}: no decode interval", r.family))?,
        started_epoch: r.started,
        ended_epoch: r.ended,
        proposed: n("proposed"),
        accepted: n("accepted"),
        rewinds: n("rewinds"),
        drafts: n("drafts"),
    })
}

/// `dir/name.gz` when it exists (the committed form), else `dir/name`.
fn either(dir: &Path, name: &str) -> std::path::PathBuf {
    let gz = dir.join(format!("{name}.gz"));
    if gz.exists() {
        gz
    } else {
        dir.join(name)
    }
}

/// The traces and the phase row of pass `p` of the sweep run in `dir`.
pub fn pass_of<'a>(
    run: &'a crate::analysis::tables::Run,
    rows: &'a [crate::analysis::tables::PhaseRow],
    dir: &Path,
    p: &str,
) -> anyhow::Result<(&'a Vec<TraceRecord>, &'a crate::analysis::tables::PhaseRow)> {
    let traces = run
        .traces
        .get(p)
        .with_context(|| format!("{}: no phase {p}", dir.display()))?;
    let row = rows
        .iter()
        .find(|r| r.phase == p)
        .with_context(|| format!("{}: no phase row {p}", dir.display()))?;
    Ok((traces, row))
}

/// Load `root/name`.
pub fn load(root: &Path, name: &str) -> anyhow::Result<ConfigRun> {
    let dir = root.join(name);
    let run = load_run(&dir)?;
    let rows = phase_rows(&run)?;
    let mut passes = Vec::new();
    for p in PASSES {
        let (traces, row) = pass_of(&run, &rows, &dir, p)?;
        let mut requests = traces
            .iter()
            .map(request)
            .collect::<anyhow::Result<Vec<_>>>()?;
        requests.sort_by_key(|r| r.family_index);
        passes.push(Pass {
            requests,
            q_decode: row.decode_tok_s.unwrap_or(f64::NAN),
            q_phase: row.phase_tok_s,
        });
    }
    let manifest = crate::driver::manifest::RunManifest::read(&dir)?;
    let load = [manifest.load_average_start, manifest.load_average_end].map(|l| l.map(|l| l[0]));
    let mut frames: HashMap<u64, FrameTimes> = HashMap::new();
    // records/ as the unit's steps keep them, else the fleet's --profile-dir
    let prof = if dir.join("records").is_dir() {
        dir.join("records")
    } else {
        dir.join("profiles")
    };
    let launches: Vec<moefleet_schema::FrameRecord> = read_records(&either(&prof, "role-0.jsonl"))
        .with_context(|| format!("{}: role 0's frame records", dir.display()))?;
    for l in launches {
        let (Some(t), Some(e)) = (l.t_ns, l.epoch_s) else {
            bail!(
                "{}: role 0's frame record {} has no t_ns or epoch_s",
                dir.display(),
                l.seq
            );
        };
        let f = frames.entry(l.seq).or_default();
        f.launch_ns = Some(t);
        f.launch_epoch = Some(e);
    }
    let replies: Vec<moefleet_schema::ReplyRecord> =
        read_records(&either(&prof, "role-0-replies.jsonl"))
            .with_context(|| format!("{}: role 0's reply records", dir.display()))?;
    for r in replies {
        let f = frames.entry(r.seq).or_default();
        f.reply_ns = Some(r.t_ns);
        f.reply_epoch = Some(r.epoch_s);
        f.outcome = Some(r.outcome.as_str().to_string());
    }
    Ok(ConfigRun {
        name: name.to_string(),
        passes,
        frames,
        load,
    })
}

/// The depth sweep under `root/depth/` (`depth-N`, the phrase table alone at depth N), by depth.
pub fn load_depths(root: &Path) -> anyhow::Result<Vec<(usize, ConfigRun)>> {
    let dir = root.join("depth");
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(out);
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(d) = name
            .strip_prefix("depth-")
            .and_then(|d| d.parse::<usize>().ok())
        {
            out.push((d, load(&dir, &name)?));
        }
    }
    out.sort_by_key(|(d, _)| *d);
    Ok(out)
}

/// `root/off-again` when the run has it.
pub fn load_off_again(root: &Path) -> anyhow::Result<Option<ConfigRun>> {
    if root.join(OFF_AGAIN).join("phases.jsonl").exists() {
        return load(root, OFF_AGAIN).map(Some);
    }
    Ok(None)
}

/// Every configuration present under `root` (at least `off` and one other).
pub fn load_all(root: &Path) -> anyhow::Result<Vec<ConfigRun>> {
    let mut out = Vec::new();
    for c in CONFIGS {
        if root.join(c).join("phases.jsonl").exists() {
            out.push(load(root, c)?);
        }
    }
    if out.first().map(|c| c.name.as_str()) != Some("off") || out.len() < 2 {
        bail!(
            "{}: a speculation experiment needs off/ and at least one of {:?} (reproduce --only speculation)",
            root.display(),
            &CONFIGS[1..]
        );
    }
    Ok(out)
}
