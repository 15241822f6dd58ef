//! Role 0: admission, scheduling, token return and speculation. One engine thread owns every slot
//! and advances in short steps (drain the inbox, admit, plan and send at most one frame), so
//! request submission, admission, forward progress and completion interleave. HTTP handlers never
//! touch model state: they submit a `GenRequest` and read its event channel.
//!
//! Scheduling is data: a slot belongs to one of `n_groups` pipeline groups (the least-populated at
//! admission); `plan_group` reads the slots and returns a `FramePlan` (a prefill window of at most
//! `window` rows per prompt, or one decode row per stream with nothing in flight), `launch` commits
//! it (`commit`) and sends it. When exactly one stream is active and nothing waits, `proposal_target`
//! and `propose` may add a one-row frame whose input a proposer guessed (ARCHITECTURE.md §3.3); each reply
//! verifies the row behind it (`Stream::reply`), and a rejection rewinds every role (`Rewind`).
//!
//! This module holds the scheduler's types and its loop (`run`, `handle`, `admit`, `step`, `send`).
//! Its transitions are in submodules, one `impl Scheduler` block each: `plan` (what a group or a
//! proposal may send; changes nothing), `launch` (commit a plan, compute role 0's layers, send the
//! frame), `replies` (token and draft replies, the speculation counters) and `chain` (ending
//! streams, failing, losing and recovering the chain, shutdown, freeing slots). Readiness,
//! profiles, capture waits and per-stream verification live in their own modules.

mod chain;
mod launch;
mod plan;
mod replies;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::capture_wait::{CaptureWaits, Reported};
pub use super::events::{CaptureFile, FinishReason, GenEvent, GenRequest, Inbox, SpecSummary};
use super::profiles::ProfileRequests;
use super::readiness::Readiness;
use super::recovery::Recovery;
use super::role::{FrameLog, RoleEngine};
pub use super::run_config::Admission;
use super::stats::FleetStats;
use super::stream::Stream;
use super::wire::{Message, RowHeader};
use crate::spec::{ProposerKind, Proposers};

/// Operator choices for role 0's scheduler.
#[derive(Clone, Debug)]
pub struct SchedConfig {
    pub n_slots: usize,
    pub n_groups: usize,
    /// Prompt rows per prefill window.
    pub window: usize,
    /// How prompts enter: in windows alongside everything else, or whole and one at a time.
    pub admission: Admission,
    /// Frames in flight at once (bounds queued work between roles).
    pub max_inflight: usize,
    /// Context budget per stream, in positions.
    pub budget: usize,
    /// Sampled rows of a lone stream in flight at once, its confirmed one included (1 or less:
    /// no speculation). At most the model's rewind slack.
    pub spec_depth: usize,
    /// Append one JSON line per frame role 0 computes to `DIR/role-0.jsonl`.
    pub profile_dir: Option<std::path::PathBuf>,
    /// Where the phrase table is saved on shutdown and on demand.
    pub phrase_file: Option<std::path::PathBuf>,
    /// Times a stream may be replayed after a lost chain (`chain`).
    pub stream_replays: usize,
    /// How long held streams wait for the chain to come back.
    pub resume_deadline: Duration,
}

/// Rows per frame of a whole prompt under `Admission::Reference`: the wire's frame limit.
pub const REFERENCE_ROWS: usize = 4096;

struct Slot {
    group: usize,
    stream: Option<Stream>,
    /// Admission order of its stream (reference admission serves prompts in it).
    admitted: u64,
}

/// Where frames go after role 0's layers: the next role, or (one role) straight to sampling.
pub enum Downstream {
    /// The link to role 1, written by the scheduler's thread itself (one wake-up per frame, at
    /// role 1; a heartbeat thread shares it).
    Link(Arc<super::link::BlockingWriter>),
    /// The chain broke and is being linked again: nothing is sent.
    Down,
    Local,
}

/// The rows of one frame, decided before anything changes.
#[derive(Clone, Debug, PartialEq)]
pub struct FramePlan {
    pub group: usize,
    pub rows: Vec<RowHeader>,
    /// A one-row frame whose input this proposer guessed.
    pub proposal: Option<ProposerKind>,
}

pub struct Scheduler {
    cfg: SchedConfig,
    engine: RoleEngine,
    down: Downstream,
    stats: Arc<FleetStats>,
    slots: Vec<Slot>,
    group_members: Vec<usize>,
    queue: VecDeque<GenRequest>,
    /// Frames in flight: seq -> group.
    inflight: HashMap<u64, usize>,
    /// Sampled rows whose replies no longer count: (seq, slot).
    discarded: HashSet<(u64, u32)>,
    next_seq: u64,
    /// Streams admitted so far.
    admissions: u64,
    rr: usize,
    readiness: Readiness,
    profiles: ProfileRequests,
    captures: CaptureWaits,
    proposers: Proposers,
    failed: Option<String>,
    /// Where the scheduler reports a broken chain (None: one role, or no supervisor).
    recovery: Option<tokio::sync::mpsc::UnboundedSender<Recovery>>,
    /// The chain broke and has not answered the readiness probe since.
    recovering: bool,
    /// When the chain broke and why, while streams are held for replay (`chain`).
    lost: Option<(Instant, String)>,
    /// Frames numbered below this were sent before the chain last broke: a late reply to one is
    /// an echo of the old links (its stream, if held, is being replayed).
    seq_floor: u64,
    log: FrameLog,
    replies: FrameLog,
    t_start: Instant,
    /// The kernels' width of the frame launched last (`pipeline::frame_width`): a draft model's
    /// proposal computes at it, as it follows that frame.
    width: usize,
}

impl Scheduler {
    pub fn new(
        cfg: SchedConfig,
        engine: RoleEngine,
        down: Downstream,
        stats: Arc<FleetStats>,
        proposers: Proposers,
    ) -> Self {
        let slots = (0..cfg.n_slots)
            .map(|i| Slot {
                group: i % cfg.n_groups,
                stream: None,
                admitted: 0,
            })
            .collect();
        stats.set_slots_total(cfg.n_slots as u64);
        stats.set_pipeline_groups(cfg.n_groups as u64);
        let log = FrameLog::open(cfg.profile_dir.as_deref(), 0).unwrap_or_else(|e| {
            tracing::warn!("no frame records for role 0: {e}");
            FrameLog::default()
        });
        let replies =
            FrameLog::named(cfg.profile_dir.as_deref(), "role-0-replies.jsonl").unwrap_or_default();
        let speculating =
            cfg.spec_depth > 1 && proposers.any() && matches!(down, Downstream::Link(_));
        stats.set_speculating(speculating);
        Scheduler {
            group_members: vec![0; cfg.n_groups],
            cfg,
            engine,
            down,
            stats,
            slots,
            queue: VecDeque::new(),
            inflight: HashMap::new(),
            discarded: HashSet::new(),
            next_seq: 0,
            admissions: 0,
            rr: 0,
            readiness: Readiness::default(),
            profiles: ProfileRequests::default(),
            captures: CaptureWaits::default(),
            proposers,
            failed: None,
            recovery: None,
            recovering: false,
            lost: None,
            seq_floor: 0,
            log,
            replies,
            t_start: Instant::now(),
            width: usize::MAX,
        }
    }

    /// Report a broken chain to `tx` (the supervisor) instead of failing for good.
    pub fn with_recovery(mut self, tx: tokio::sync::mpsc::UnboundedSender<Recovery>) -> Self {
        self.recovery = Some(tx);
        self
    }

    /// Run until shutdown. Returns the failure message if the fleet failed.
    pub fn run(mut self, inbox: mpsc::Receiver<Inbox>) -> Option<String> {
        if matches!(self.down, Downstream::Local) {
            self.set_ready();
        }
        loop {
            let mut busy = false;
            loop {
                match inbox.try_recv() {
                    Ok(Inbox::Shutdown) | Err(mpsc::TryRecvError::Disconnected) => {
                        self.shutdown();
                        return self.failed;
                    }
                    Ok(m) => {
                        self.handle(m);
                        busy = true;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            if self.failed.is_none() {
                if let Some(nonce) = self.readiness.due(Instant::now()) {
                    self.send(Message::Ping { nonce });
                }
            }
            self.reap();
            self.expire_held(Instant::now());
            self.admit();
            busy |= self.step();
            self.profiles.expire(Instant::now());
            self.count_proposals();
            if !busy {
                match inbox.recv_timeout(Duration::from_millis(5)) {
                    Ok(Inbox::Shutdown) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                        self.shutdown();
                        return self.failed;
                    }
                    Ok(m) => self.handle(m),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
            }
        }
    }

    fn set_ready(&mut self) {
        self.readiness.set_ready();
        self.stats.ready_now();
    }

    fn speculating(&self) -> bool {
        self.stats.speculating()
    }

    fn send(&mut self, m: Message) {
        if let Downstream::Link(w) = &self.down {
            let b = m.encode();
            self.engine.profile.bytes_out += b.len() as u64 + 4;
            if let Err(e) = w.send_bytes(&b) {
                let message = if e.is_stall() {
                    format!("role 1 stalled or its link from role 0 was cut ({e})")
                } else {
                    format!("role 1 failed: the link from role 0 broke ({e})")
                };
                self.lose(Some(1), message);
            }
        }
    }

    fn handle(&mut self, m: Inbox) {
        match m {
            Inbox::Submit(req) => {
                if let Some(f) = &self.failed {
                    let _ = req.events.send(GenEvent::Error(f.clone()));
                    self.stats.unreserve();
                } else {
                    self.queue.push_back(req);
                    self.stats.queued(self.queue.len());
                }
            }
            Inbox::Link(Message::Tokens { seq, items, .. }) => self.tokens(seq, &items),
            Inbox::Link(Message::Pong { nonce, .. }) => {
                if self.readiness.pong(nonce) {
                    self.set_ready();
                    if self.recovering {
                        self.recovered();
                    }
                }
            }
            Inbox::Link(Message::ProfileReply { nonce, json, .. }) => {
                self.profiles.add(nonce, json, self.engine.n_roles)
            }
            Inbox::Link(Message::Fault { role, message }) => {
                self.lose(Some(role as usize), message)
            }
            Inbox::Link(Message::CaptureReport {
                slot,
                serial,
                ok,
                sequence,
                bytes,
                text,
            }) => self.captures.report(Reported {
                slot,
                serial,
                ok,
                sequence,
                bytes,
                text,
            }),
            Inbox::Link(Message::Drafts {
                seq,
                slot,
                pos,
                tokens,
            }) => self.drafts(seq, slot, pos as usize, tokens),
            Inbox::Link(Message::Heartbeat) => {}
            Inbox::Link(other) => self.fail(format!(
                "role 0: unexpected message from the last role: {other:?}"
            )),
            Inbox::Lost { role, message } => self.lose(role, message),
            Inbox::Relinked(w) => {
                if self.recovering && self.failed.is_none() {
                    self.down = Downstream::Link(w);
                    self.readiness.probe_now();
                }
            }
            Inbox::Failed(message) => self.fail(message),
            Inbox::Profile(tx) => {
                let own = serde_json::to_value(&self.engine.profile).unwrap_or_default();
                let nonce = self.profiles.start(tx, own);
                if matches!(self.down, Downstream::Link(_)) && self.failed.is_none() {
                    self.send(Message::ProfileRequest { nonce });
                }
                self.profiles.complete(nonce, self.engine.n_roles);
            }
            Inbox::SavePhrases(tx) => {
                let _ = tx.send(self.save_phrases());
            }
            Inbox::Shutdown => {}
        }
    }

    /// Save the phrase table to its file.
    fn save_phrases(&self) -> Result<String, String> {
        match (&self.proposers.phrases, &self.cfg.phrase_file) {
            (Some((t, _)), Some(path)) => t
                .save(path)
                .map(|_| {
                    format!(
                        "{} ({} contexts, {} observations)",
                        path.display(),
                        t.contexts(),
                        t.observations()
                    )
                })
                .map_err(|e| e.to_string()),
            (None, _) => Err("the phrase-table proposer is off".into()),
            (_, None) => Err("no phrase-table file (start with --phrase-table FILE)".into()),
        }
    }

    /// Admit queued requests into free slots, each into the least-populated group.
    fn admit(&mut self) {
        if !self.readiness.is_ready() {
            return;
        }
        while !self.queue.is_empty() {
            let best = (0..self.slots.len())
                .filter(|&i| self.slots[i].stream.is_none())
                .min_by_key(|&i| (self.group_members[self.slots[i].group], i));
            let Some(i) = best else { break };
            let Some(req) = self.queue.pop_front() else {
                break;
            };
            self.group_members[self.slots[i].group] += 1;
            let sampling = req.sampling;
            // the draft head drafts a stream admitted alone (it pays only while one is)
            let alone = self.queue.is_empty() && self.slots.iter().all(|s| s.stream.is_none());
            let mut st = Stream::new(req);
            st.drafted =
                alone && !st.req.capture && self.speculating() && self.proposers.mtp.is_some();
            self.slots[i].stream = Some(st);
            self.slots[i].admitted = self.admissions;
            self.admissions += 1;
            // counted before anything is sent: a send that breaks the chain ends this stream
            // with the others, and ending it takes these counts back
            self.stats.admitted();
            if !sampling.is_greedy() {
                // ahead of the slot's first frame on every link
                match self.down {
                    Downstream::Local => self.engine.set_sampling(i as u32, sampling),
                    _ => self.send(Message::Sampling {
                        slot: i as u32,
                        sampling,
                    }),
                }
            }
            if !self.readiness.is_ready() {
                break; // that send lost the chain
            }
        }
        self.stats.queued(self.queue.len());
    }

    /// Plan, commit, compute and send at most one frame. Returns whether one was sent.
    fn step(&mut self) -> bool {
        if !self.readiness.is_ready() || self.inflight.len() >= self.cfg.max_inflight {
            return false;
        }
        for k in 0..self.cfg.n_groups {
            let g = (self.rr + k) % self.cfg.n_groups;
            if let Some(plan) = self.plan_group(g) {
                self.rr = (g + 1) % self.cfg.n_groups;
                self.launch(plan);
                return true;
            }
        }
        let width = self.width;
        let proposal = self
            .proposal_target()
            .and_then(|t| crate::kernels::with_width(width, || self.propose(t)));
        match proposal {
            Some(plan) => {
                self.launch(plan);
                true
            }
            None => false,
        }
    }
}
