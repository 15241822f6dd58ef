//! `RoleEngine`: one role's layer range and the stream state of every slot it has seen; it runs a
//! frame's rows through its layers and, on the last role, samples. Pure computation: no sockets,
//! no scheduling (role 0 decides, the other roles execute).

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;

use super::wire::{
    logits_hash, Message, RowHeader, TokenItem, FLAG_CAPTURE, FLAG_DRAFT, FLAG_SAMPLE, NO_TOKEN,
};
use crate::capture::writer::{CaptureWriter, Report};
use crate::capture::NOT_SAMPLED;
use crate::error::{Error, Result};
use crate::model::{argmax, ForwardTimings, Model, Segment, StreamState};
use crate::spec::head::live::HeadRow;

/// Cumulative per-role counters (the `/api/profile` snapshot and the stage profiles).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RoleProfile {
    pub role: usize,
    pub layers: (usize, usize),
    pub frames: u64,
    pub rows: u64,
    pub sampled_rows: u64,
    pub compute_ns: u64,
    pub embed_ns: u64,
    pub attention_ns: u64,
    pub mlp_ns: u64,
    pub head_ns: u64,
    /// The last role's draft head: time spent, and sampled rows drafted after (`spec::head::live`).
    pub draft_ns: u64,
    pub drafted_rows: u64,
    /// Time the role's compute thread waited for its next message (workers; role 0 plans its
    /// frames and reports 0).
    pub idle_ns: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub slots_live: usize,
}

pub use moefleet_schema::{FrameRecord, ReplyOutcome, ReplyRecord};

/// CPU time the calling thread has used, in nanoseconds (0 where it cannot be read).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to the pointer it is given, which is valid.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Seconds since the Unix epoch.
pub fn epoch_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Where a role appends its records: a JSONL file under `--profile-dir`, or nowhere.
#[derive(Default)]
pub struct FrameLog(Option<std::io::BufWriter<std::fs::File>>);

impl FrameLog {
    /// Open `dir/role-{rank}.jsonl` (the directory is created), or a log that keeps nothing.
    pub fn open(dir: Option<&std::path::Path>, rank: usize) -> std::io::Result<Self> {
        FrameLog::named(dir, &format!("role-{rank}.jsonl"))
    }

    /// Open `dir/name`, or a log that keeps nothing.
    pub fn named(dir: Option<&std::path::Path>, name: &str) -> std::io::Result<Self> {
        let Some(d) = dir else {
            return Ok(FrameLog(None));
        };
        std::fs::create_dir_all(d)?;
        let f = std::fs::File::create(d.join(name))?;
        Ok(FrameLog(Some(std::io::BufWriter::new(f))))
    }

    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Append one JSON line (profiling must never stop a role, so errors are dropped).
    pub fn append(&mut self, rec: &impl Serialize) {
        if let Some(w) = self.0.as_mut() {
            use std::io::Write;
            if serde_json::to_writer(&mut *w, rec).is_ok() {
                let _ = w.write_all(b"\n");
            }
        }
    }

    pub fn flush(&mut self) {
        if let Some(w) = self.0.as_mut() {
            let _ = std::io::Write::flush(w);
        }
    }
}

pub struct RoleEngine {
    pub rank: usize,
    pub n_roles: usize,
    model: Model,
    slots: HashMap<u32, StreamState>,
    /// Slots that sample rather than take the argmax (last role; reset with the slot).
    sampling: HashMap<u32, crate::sampling::Sampling>,
    budget: usize,
    /// The last role's capture writer (None elsewhere: capture costs nothing there).
    capture: Option<CaptureWriter>,
    /// The last role's draft head, when the MTP proposer is on.
    head: Option<crate::spec::head::live::LiveHead>,
    pub profile: RoleProfile,
}

impl RoleEngine {
    pub fn new(rank: usize, n_roles: usize, model: Model, budget: usize) -> Self {
        let layers = (model.weights.layer_start, model.weights.layer_end);
        RoleEngine {
            rank,
            n_roles,
            model,
            slots: HashMap::new(),
            sampling: HashMap::new(),
            budget,
            capture: None,
            head: None,
            profile: RoleProfile {
                role: rank,
                layers,
                ..Default::default()
            },
        }
    }

    pub fn hidden(&self) -> usize {
        self.model.config().hidden
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn is_last(&self) -> bool {
        self.rank + 1 == self.n_roles
    }

    /// Record rows flagged `FLAG_CAPTURE` through `w` (the last role).
    pub fn set_capture(&mut self, w: CaptureWriter) {
        self.capture = Some(w);
    }

    /// Run `head` on the rows flagged `FLAG_DRAFT` (the last role).
    pub fn set_head(&mut self, head: crate::spec::head::live::LiveHead) {
        self.head = Some(head);
    }

    /// The draft head's drafts after the sampled rows of a frame flagged `FLAG_DRAFT` (`tokens`:
    /// each row's token as `sample` returned it, `NO_TOKEN` where not sampled), as the `Drafts`
    /// messages that follow its `Tokens`.
    pub fn drafts(
        &mut self,
        seq: u64,
        rows: &[RowHeader],
        x: &[f32],
        tokens: &[u32],
    ) -> Result<Vec<Message>> {
        let Some(head) = self.head.as_mut() else {
            return Ok(Vec::new());
        };
        let h = self.model.config().hidden;
        let t0 = Instant::now();
        let picked: Vec<HeadRow<'_>> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.flags & FLAG_DRAFT != 0)
            .map(|(i, r)| HeadRow {
                slot: r.slot,
                pos: r.pos as usize,
                input: r.token,
                residual: &x[i * h..(i + 1) * h],
                sampled: (tokens[i] != NO_TOKEN).then_some(tokens[i]),
            })
            .collect();
        if picked.is_empty() {
            return Ok(Vec::new());
        }
        let out = head.rows(&picked)?;
        self.profile.draft_ns += t0.elapsed().as_nanos() as u64;
        self.profile.drafted_rows += out.len() as u64;
        Ok(out
            .into_iter()
            .map(|d| Message::Drafts {
                seq,
                slot: d.slot,
                pos: d.pos as u32,
                tokens: d.tokens,
            })
            .collect())
    }

    /// Embed the rows' tokens (role 0 only) into a fresh residual [rows, H].
    pub fn embed(&mut self, rows: &[RowHeader]) -> Result<Vec<f32>> {
        let t0 = Instant::now();
        let toks: Vec<u32> = rows.iter().map(|r| r.token).collect();
        let mut x = vec![0.0f32; rows.len() * self.hidden()];
        self.model.embed(&toks, &mut x)?;
        self.profile.embed_ns += t0.elapsed().as_nanos() as u64;
        Ok(x)
    }

    /// Run this role's layers over the rows of a frame, in place. Rows of one slot must be
    /// contiguous and at consecutive positions continuing that slot's state; a row at position 0
    /// starts the slot afresh.
    pub fn run(&mut self, rows: &[RowHeader], x: &mut [f32], t: &mut ForwardTimings) -> Result<()> {
        // (slot, first row, row count) runs
        let mut runs: Vec<(u32, usize, usize)> = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            match runs.last_mut() {
                Some((s, start, n)) if *s == r.slot && rows[*start + *n - 1].pos + 1 == r.pos => {
                    *n += 1
                }
                _ => {
                    if runs.iter().any(|(s, _, _)| *s == r.slot) {
                        return Err(Error::State(format!(
                            "slot {} appears twice in one frame",
                            r.slot
                        )));
                    }
                    runs.push((r.slot, i, 1));
                }
            }
        }
        let mut taken: Vec<(u32, StreamState)> = Vec::with_capacity(runs.len());
        for &(slot, start, _) in &runs {
            let pos = rows[start].pos as usize;
            let st = match self.slots.remove(&slot) {
                Some(mut st) if pos == 0 => {
                    st.reset();
                    st
                }
                None if pos == 0 => self.model.new_stream(self.budget),
                Some(st) if st.pos() == pos => st,
                other => {
                    let have = other.as_ref().map(|s| s.pos());
                    if let Some(st) = other {
                        self.slots.insert(slot, st);
                    }
                    for (s, st) in taken {
                        self.slots.insert(s, st);
                    }
                    return Err(Error::State(format!(
                        "role {}: slot {slot} row at position {pos}, but the slot is at {have:?}",
                        self.rank
                    )));
                }
            };
            taken.push((slot, st));
        }
        let result = {
            let mut segs: Vec<Segment<'_>> = taken
                .iter_mut()
                .zip(&runs)
                .map(|((_, st), &(_, _, n))| Segment { state: st, rows: n })
                .collect();
            self.model.forward_timed(&mut segs, x, t)
        };
        for (s, st) in taken {
            self.slots.insert(s, st);
        }
        self.profile.slots_live = self.slots.len();
        result
    }

    /// Last role: logits of the rows flagged for sampling; greedy token, its logit and the hash of
    /// the whole logit row. Other rows get a progress-only item.
    pub fn sample(&mut self, rows: &[RowHeader], x: &[f32]) -> Result<Vec<TokenItem>> {
        let t0 = Instant::now();
        let h = self.hidden();
        let picked: Vec<usize> = (0..rows.len())
            .filter(|&i| rows[i].flags & FLAG_SAMPLE != 0)
            .collect();
        let mut xs = Vec::with_capacity(picked.len() * h);
        for &i in &picked {
            xs.extend_from_slice(&x[i * h..(i + 1) * h]);
        }
        let logits = if picked.is_empty() {
            Vec::new()
        } else {
            self.model.logits(&xs)?
        };
        let v = self.model.config().vocab_size;
        let mut items: Vec<TokenItem> = rows
            .iter()
            .map(|r| TokenItem {
                slot: r.slot,
                pos: r.pos,
                token: NO_TOKEN,
                logit: f32::NAN,
                hash: 0,
            })
            .collect();
        for (k, &i) in picked.iter().enumerate() {
            let row = &logits[k * v..(k + 1) * v];
            let tok = match self.sampling.get(&rows[i].slot) {
                Some(s) => s.pick(row, rows[i].pos),
                None => argmax(row),
            };
            items[i] = TokenItem {
                slot: rows[i].slot,
                pos: rows[i].pos,
                token: tok,
                logit: row[tok as usize],
                hash: logits_hash(row),
            };
        }
        self.profile.head_ns += t0.elapsed().as_nanos() as u64;
        self.profile.sampled_rows += picked.len() as u64;
        if let Some(c) = self.capture.as_mut() {
            for (i, r) in rows.iter().enumerate() {
                if r.flags & FLAG_CAPTURE != 0 {
                    let emitted = match items[i].token {
                        NO_TOKEN => NOT_SAMPLED,
                        t => t,
                    };
                    c.observe(r.slot, r.pos, r.token, emitted, &x[i * h..(i + 1) * h]);
                }
            }
        }
        Ok(items)
    }

    /// Rewind a slot to position `pos` (a rejected proposal and what followed it are undone).
    pub fn truncate(&mut self, slot: u32, pos: u32) -> Result<()> {
        if let Some(h) = self.head.as_mut() {
            h.truncate(slot, pos as usize)?;
        }
        match self.slots.get_mut(&slot) {
            Some(st) => st.truncate(pos as usize),
            None => Err(Error::State(format!(
                "role {}: rewind of slot {slot}, which holds no stream",
                self.rank
            ))),
        }
    }

    /// Sample `slot`'s rows so until it is reset (greedy: the argmax, the default).
    pub fn set_sampling(&mut self, slot: u32, s: crate::sampling::Sampling) {
        if s.is_greedy() {
            self.sampling.remove(&slot);
        } else {
            self.sampling.insert(slot, s);
        }
    }

    /// Forget every slot (the chain was broken and is being relinked: role 0 ended its requests).
    pub fn reset_all(&mut self) {
        let slots: Vec<u32> = self.slots.keys().copied().collect();
        for s in slots {
            self.reset(s);
        }
        self.sampling.clear();
        if let Some(h) = self.head.as_mut() {
            h.forget_all();
        }
    }

    /// Forget a slot (request finished or cancelled): frees its caches and hands its capture, if
    /// any, to the writer.
    pub fn reset(&mut self, slot: u32) {
        self.slots.remove(&slot);
        self.sampling.remove(&slot);
        if let Some(h) = self.head.as_mut() {
            h.forget(slot);
        }
        if let Some(c) = self.capture.as_mut() {
            c.close(slot);
        }
        self.profile.slots_live = self.slots.len();
    }
}

/// The wire message that carries a capture report to role 0.
pub fn report_message(r: Report) -> Message {
    match r.outcome {
        Ok(w) => Message::CaptureReport {
            slot: r.slot,
            serial: r.serial,
            ok: true,
            sequence: w.sequence,
            bytes: w.bytes,
            text: w.path,
        },
        Err(e) => Message::CaptureReport {
            slot: r.slot,
            serial: r.serial,
            ok: false,
            sequence: 0,
            bytes: 0,
            text: e,
        },
    }
}
