//! The served side of a peer run: the same harness sweep against llama-server (`served-llama/`)
//! and our fleet (`served-moefleet/`), level by level, as `served.csv` and PEER.md's served
//! tables.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context};
use serde_json::Value;

use super::load_text;

/// One sweep level, both servers: paired mean Q_decode (tok/s) and pooled TTFT median (s), and
/// each pass's Q_decode on its own (the plan's ascending pass, then its descending pass), since a
/// server whose state after the largest level slows its descending pass shows it only there.
#[derive(Clone, Debug, PartialEq)]
pub struct Served {
    pub concurrency: usize,
    pub ours: (Option<f64>, Option<f64>),
    pub theirs: (Option<f64>, Option<f64>),
    /// Q_decode of each phase at this level in run order (ascending pass first), ours and theirs.
    pub ours_passes: Vec<Option<f64>>,
    pub theirs_passes: Vec<Option<f64>>,
    /// Requests of the level recorded with an error (ours, theirs).
    pub errors: (usize, usize),
}

impl Served {
    pub fn ratio(&self) -> Option<f64> {
        Some(self.ours.0? / self.theirs.0?)
    }

    /// ours / theirs in pass `i` (0: ascending, 1: descending).
    pub fn pass_ratio(&self, i: usize) -> Option<f64> {
        Some(self.ours_passes.get(i).copied()?? / self.theirs_passes.get(i).copied()??)
    }
}

/// One level of a sweep: its paired curve row, the Q_decode of each of its phases in run order,
/// and the requests recorded with an error.
type Level = (crate::analysis::tables::CurveRow, Vec<Option<f64>>, usize);

/// The sweeps of one side: `dir` itself, or, when the servers were started afresh for each level
/// (`peer.json`'s `served` = `per-level`), its `cN/` runs in order of N.
pub fn sweeps(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    if dir.join("phases.jsonl").exists() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut runs: Vec<(usize, std::path::PathBuf)> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| {
            let p = e.ok()?.path();
            let c = p.file_name()?.to_str()?.strip_prefix('c')?.parse().ok()?;
            p.join("phases.jsonl").exists().then_some((c, p))
        })
        .collect();
    if runs.is_empty() {
        bail!(
            "{} holds no sweep (phases.jsonl) and no per-level cN/ sweeps",
            dir.display()
        );
    }
    runs.sort();
    Ok(runs.into_iter().map(|r| r.1).collect())
}

/// A side's levels, from its sweep or its per-level sweeps.
fn curve_of(dir: &Path) -> anyhow::Result<Vec<Level>> {
    let mut levels = Vec::new();
    for run in sweeps(dir)? {
        levels.extend(levels_of(&run)?);
    }
    Ok(levels)
}

/// One sweep's levels.
fn levels_of(dir: &Path) -> anyhow::Result<Vec<Level>> {
    use crate::analysis::tables::{load_run, tables};
    let run = load_run(dir).with_context(|| format!("reading the sweep in {}", dir.display()))?;
    let (rows, curve) = tables(&run)?;
    Ok(curve
        .into_iter()
        .map(|c| {
            let at = || rows.iter().filter(|r| r.concurrency == c.concurrency);
            let passes = at().map(|r| r.decode_tok_s).collect();
            let errors = at().map(|r| r.errors).sum();
            (c, passes, errors)
        })
        .collect())
}

/// The served comparison from the two sweeps' traces, level by level (levels both ran).
pub fn served(dir: &Path) -> anyhow::Result<Option<Vec<Served>>> {
    let (ours, theirs) = (dir.join("served-moefleet"), dir.join("served-llama"));
    match (ours.is_dir(), theirs.is_dir()) {
        (false, false) => return Ok(None),
        (true, true) => {}
        _ => bail!("a served comparison needs both served-moefleet/ and served-llama/"),
    }
    let (ours, theirs) = (curve_of(&ours)?, curve_of(&theirs)?);
    let rows: Vec<Served> = ours
        .iter()
        .filter_map(|(o, op, oe)| {
            let (t, tp, te) = theirs.iter().find(|t| t.0.concurrency == o.concurrency)?;
            Some(Served {
                concurrency: o.concurrency,
                ours: (o.q_decode_mean, o.ttft_median_s),
                theirs: (t.q_decode_mean, t.ttft_median_s),
                ours_passes: op.clone(),
                theirs_passes: tp.clone(),
                errors: (*oe, *te),
            })
        })
        .collect();
    if rows.is_empty() {
        bail!("the two sweeps share no level");
    }
    Ok(Some(rows))
}

fn cell(v: Option<f64>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// `served.csv`.
pub fn served_csv(rows: &[Served]) -> String {
    let mut s = String::from(
        "concurrency,moefleet_q_decode,llama_q_decode,ratio,moefleet_ttft_median_s,llama_ttft_median_s,moefleet_errors,llama_errors,\
         moefleet_q_decode_ascending,moefleet_q_decode_descending,llama_q_decode_ascending,llama_q_decode_descending,ratio_ascending,ratio_descending\n",
    );
    let pass = |v: &[Option<f64>], i: usize| v.get(i).copied().flatten();
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.concurrency,
            cell(r.ours.0),
            cell(r.theirs.0),
            cell(r.ratio()),
            cell(r.ours.1),
            cell(r.theirs.1),
            r.errors.0,
            r.errors.1,
            cell(pass(&r.ours_passes, 0)),
            cell(pass(&r.ours_passes, 1)),
            cell(pass(&r.theirs_passes, 0)),
            cell(pass(&r.theirs_passes, 1)),
            cell(r.pass_ratio(0)),
            cell(r.pass_ratio(1)),
        );
    }
    s
}

/// What the run's llama-server command configures, in words, and what it does to the passes.
fn llama_server_setup(command: &str) -> String {
    let args: Vec<&str> = command.split_whitespace().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| *a == flag)
            .and_then(|i| args.get(i + 1))
            .copied()
    };
    let unified = args.iter().any(|a| *a == "--kv-unified" || *a == "-kvu");
    let slots = value("-np").unwrap_or("?");
    if unified {
        format!(
            "llama-server is one process of two threads with {slots} slots sharing one unified KV \
             cache (`--kv-unified`), batching all active slots in each step"
        )
    } else {
        format!(
            "llama-server is one process of two threads with {slots} slots, each with its own KV \
             stream (its default when `-np` is given: `kv_unified = false`), batching all active \
             slots in each step. In that configuration a step's attention spans every stream \
             between the lowest and the highest slot id in the batch (llama.cpp's \
             `llama_kv_cache::get_k`/`get_v` view streams `s0..=s1`, masked), so a batch of a few \
             slots scattered over many ids costs like a batch of all of them: the ascending pass \
             takes free slots in order (ids 175, 174, ..., adjacent), while the descending pass, \
             after the largest level, takes the slots whose cached prompts best match (scattered \
             ids); its log names the slot each request took"
        )
    }
}

pub(super) fn served_md(rows: &[Served], run: &Value) -> String {
    let f = |v: Option<f64>, d: usize| v.map_or("–".into(), |x| format!("{x:.d$}"));
    let x = |v: Option<f64>| v.map_or("–".into(), |x| format!("{x:.2}×"));
    let llama_cmd = run["commands"]["llama_server"].as_str().unwrap_or("?");
    let per_level = run["served"].as_str() == Some("per-level");
    let setup = if per_level {
        "Level by level, each on fresh servers: llama-server with one slot per stream of that \
         level (C slots, each with its own KV stream, batching all active slots in each step), \
         its two passes, then our fleet and its two passes. One llama-server sized for the \
         largest level slows the passes after it: with a KV stream per slot a batch's attention \
         spans every stream between its lowest and highest slot id, and those passes take \
         scattered slots; with `--kv-unified` one buffer holds every slot's cells and attention \
         spans them all (`results/llama-server-slots-20261203`)"
            .to_string()
    } else {
        llama_server_setup(llama_cmd)
    };
    let mut s = format!(
        "\nServed, the same harness sweep against both servers one after the other (`{}`; \
         paired mean Q_decode over the plan's ascending and descending phases of each level, \
         TTFT median pooled over them, both recomputed here from the traces, and each pass on \
         its own): llama-server on the same GGUF (`{}`), then our fleet (`{}`). Load averages \
         before llama-server: {}, before the fleet: {}, after it: {}. {}. Our fleet is \
         its role processes linked over loopback TCP on the same two cores (when they outnumber \
         the cores, each computes a frame on one thread, or, from commit c44a1e1 on, on both \
         when role 0 sent the frame with no other in flight), speculation off (its default). A request whose counted tokens differ from its usage is an \
         error in its trace, its events kept; the last column counts them ({}).\n\n| C | moefleet Q_decode (tok/s) | llama-server Q_decode (tok/s) | ratio | \
         moefleet TTFT median (s) | llama-server TTFT median (s) | errors (ours / theirs) \
         |\n|---:|---:|---:|---:|---:|---:|---:|\n",
        run["commands"]["sweep"].as_str().unwrap_or("?"),
        llama_cmd,
        run["commands"]["fleet"].as_str().unwrap_or("?"),
        load_text(&run["load_average"]["before_llama_server"]),
        load_text(&run["load_average"]["before_fleet"]),
        load_text(&run["load_average"]["after_fleet"]),
        setup,
        if run["moefleet_reads"].as_str() == Some("the same file") {
            "seen with llama-server around characters of several tokens: it holds back the bytes \
             of an incomplete UTF-8 character, so a chunk can carry more than one token"
        } else {
            "seen with llama-server around invalid UTF-8 from the random weights: it holds back \
             the bytes of an incomplete character, so a chunk can carry more than one token"
        },
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} / {} |",
            r.concurrency,
            f(r.ours.0, 1),
            f(r.theirs.0, 1),
            x(r.ratio()),
            f(r.ours.1, 2),
            f(r.theirs.1, 2),
            r.errors.0,
            r.errors.1
        );
    }
    s.push_str(
        "\nEach pass on its own (Q_decode, tok/s; the ascending pass runs before the largest level, \
         the descending pass after it):\n\n| C | moefleet ascending | moefleet descending | \
         llama-server ascending | llama-server descending | ratio ascending | ratio descending \
         |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let pass = |v: &[Option<f64>], i: usize| v.get(i).copied().flatten();
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.concurrency,
            f(pass(&r.ours_passes, 0), 1),
            f(pass(&r.ours_passes, 1), 1),
            f(pass(&r.theirs_passes, 0), 1),
            f(pass(&r.theirs_passes, 1), 1),
            x(r.pass_ratio(0)),
            x(r.pass_ratio(1)),
        );
    }
    s
}
