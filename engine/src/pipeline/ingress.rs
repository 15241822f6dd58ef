//! Role 0: admission, scheduling, token return and speculation. One engine thread owns every slot
//! and advances in short steps (drain the inbox, admit, plan and send at most one frame), so
//! request submission, admission, forward progress and completion interleave. HTTP handlers never
//! touch model state: they submit a `GenRequest` and read its event channel.
//!
//! Scheduling is data: a slot belongs to one of `n_groups` pipeline groups (the least-populated at
//! admission); `plan_group` reads the slots and returns a `FramePlan` (a prefill window of at most
//! `window` rows per prompt, or one decode row per stream with nothing in flight), `launch` commits
//! it (`commit`) and sends it. When exactly one stream is active and nothing waits, `plan_proposal`
//! may add a one-row frame whose input a proposer guessed (ARCHITECTURE.md §3.3); each reply
//! verifies the row behind it (`Stream::reply`), and a rejection rewinds every role (`Rewind`).
//!
//! Over 600 lines because the scheduler's state transitions (admit, plan, launch, reply, rewind,
//! fail, lose and recover the chain, free) share the slot table and must be read together; readiness, profiles, capture waits
//! and per-stream verification already live in their own modules.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::capture_wait::{CaptureWaits, Reported};
pub use super::events::{CaptureFile, FinishReason, GenEvent, GenRequest, Inbox, SpecSummary};
use super::profiles::ProfileRequests;
use super::readiness::Readiness;
use super::recovery::Recovery;
use super::role::{epoch_s, thread_cpu_ns, FrameLog, FrameRecord, ReplyRecord, RoleEngine};
use super::stats::FleetStats;
use super::stream::{InFlight, Stream, Verified};
use super::wire::{
    Message, RowHeader, TokenItem, FLAG_ALONE, FLAG_CAPTURE, FLAG_DRAFT, FLAG_SAMPLE, NO_TOKEN,
};
use crate::model::ForwardTimings;
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
}

/// How role 0 lets prompts into the pipeline (the two sides of the paper's Figure 6).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum Admission {
    /// Prompts enter as windows of at most `window` rows, every admitted prompt at once, beside
    /// the decode rows of running streams (ARCHITECTURE.md §3.2).
    #[default]
    Windowed,
    /// The reference the windows are measured against: one prompt at a time, whole (in frames of
    /// up to `REFERENCE_ROWS` rows), the next prompt waiting until the previous one has returned
    /// its first token; decode rows of running streams go on meanwhile.
    Reference,
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
    log: FrameLog,
    replies: FrameLog,
    t_start: Instant,
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
        stats
            .slots_total
            .store(cfg.n_slots as u64, Ordering::Relaxed);
        let log = FrameLog::open(cfg.profile_dir.as_deref(), 0).unwrap_or_else(|e| {
            tracing::warn!("no frame records for role 0: {e}");
            FrameLog::default()
        });
        let replies =
            FrameLog::named(cfg.profile_dir.as_deref(), "role-0-replies.jsonl").unwrap_or_default();
        let speculating =
            cfg.spec_depth > 1 && proposers.any() && matches!(down, Downstream::Link(_));
        stats.spec_enabled.store(speculating, Ordering::Relaxed);
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
            log,
            replies,
            t_start: Instant::now(),
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

    /// Publish the proposals in flight: rows a proposer guessed, sent, and still waiting for the
    /// reply that verifies them, i.e. every row of a stream's chain behind its front (the front is
    /// a confirmed input or a proposal already accepted: `Stream::reply` verifies the row behind
    /// the one it answers). Counted from the chains after every pass of the loop, so the gauge
    /// cannot drift from them.
    fn count_proposals(&self) {
        if !self.speculating() {
            return;
        }
        let n = self
            .slots
            .iter()
            .filter_map(|s| s.stream.as_ref())
            .flat_map(|st| st.chain.iter().skip(1))
            .filter(|r| r.proposer.is_some())
            .count();
        self.stats.spec_in_flight.store(n as u64, Ordering::Relaxed);
    }

    fn set_ready(&mut self) {
        self.readiness.set_ready();
        self.stats.ready.store(true, Ordering::Relaxed);
    }

    fn speculating(&self) -> bool {
        self.stats.spec_enabled.load(Ordering::Relaxed)
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
                    self.stats.pending.fetch_sub(1, Ordering::Relaxed);
                } else {
                    self.queue.push_back(req);
                    self.stats
                        .queue_depth
                        .store(self.queue.len() as u64, Ordering::Relaxed);
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

    /// Every stream, queued request and capture wait ends with `message`.
    fn end_all(&mut self, message: &str) {
        for (i, s) in self.slots.iter_mut().enumerate() {
            if let Some(st) = s.stream.take() {
                self.proposers.forget(i as u32);
                let _ = st.req.events.send(GenEvent::Error(message.to_string()));
                self.stats.pending.fetch_sub(1, Ordering::Relaxed);
                self.stats
                    .requests_in_flight
                    .fetch_sub(1, Ordering::Relaxed);
            }
        }
        for r in self.queue.drain(..) {
            let _ = r.events.send(GenEvent::Error(message.to_string()));
            self.stats.pending.fetch_sub(1, Ordering::Relaxed);
        }
        self.captures.end_all(message);
        self.stats.spec_in_flight.store(0, Ordering::Relaxed);
        self.stats.slots_busy.store(0, Ordering::Relaxed);
        self.stats.queue_depth.store(0, Ordering::Relaxed);
    }

    /// The fleet is broken for good: every request ends with the message; nothing more is
    /// admitted.
    fn fail(&mut self, message: String) {
        if self.failed.is_some() {
            return;
        }
        tracing::error!("{message}");
        self.failed = Some(message.clone());
        self.readiness.lost();
        self.stats.ready.store(false, Ordering::Relaxed);
        *self.stats.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.clone());
        *self
            .stats
            .recovering
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        self.end_all(&message);
    }

    /// The chain broke (`role` named when known): requests in flight end with the message, every
    /// stream is forgotten (the other roles forget theirs as their links close), and the
    /// supervisor links the chain again. Without a supervisor this is `fail`.
    fn lose(&mut self, role: Option<usize>, message: String) {
        // once the chain is down, later reports are echoes of the same break; a relinked chain
        // that breaks while it is probed is a new loss
        if self.failed.is_some() || matches!(self.down, Downstream::Down) {
            return;
        }
        let Some(tx) = self.recovery.clone() else {
            return self.fail(message);
        };
        tracing::error!("{message}");
        self.recovering = true;
        self.readiness.lost();
        self.stats.ready.store(false, Ordering::Relaxed);
        *self
            .stats
            .recovering
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(message.clone());
        self.end_all(&message);
        for i in 0..self.slots.len() {
            self.proposers.forget(i as u32);
        }
        self.engine.reset_all();
        self.group_members.fill(0);
        self.inflight.clear();
        self.discarded.clear();
        if let Downstream::Link(w) = &self.down {
            w.close();
        }
        self.down = Downstream::Down;
        if tx.send(Recovery::Lost { role, message }).is_err() {
            self.fail("role 0: the chain's supervisor has stopped".into());
        }
    }

    /// The relinked chain answered the readiness probe.
    fn recovered(&mut self) {
        self.recovering = false;
        *self
            .stats
            .recovering
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        self.stats.recoveries_total.fetch_add(1, Ordering::Relaxed);
        if let Some(tx) = &self.recovery {
            let _ = tx.send(Recovery::Ready);
        }
    }

    fn shutdown(&mut self) {
        self.log.flush();
        self.replies.flush();
        if self.cfg.phrase_file.is_some() && self.proposers.phrases.is_some() {
            match self.save_phrases() {
                Ok(what) => tracing::info!("phrase table saved to {what}"),
                Err(e) => tracing::error!("phrase table not saved: {e}"),
            }
        }
        if self.failed.is_none() {
            self.send(Message::Shutdown);
        }
        self.end_all("the server is shutting down");
        self.readiness.lost();
        self.stats.ready.store(false, Ordering::Relaxed);
    }

    /// Mark requests whose client went away; free slots with nothing in flight.
    fn reap(&mut self) {
        for i in 0..self.slots.len() {
            let free = match &mut self.slots[i].stream {
                Some(s) => {
                    if s.req.events.is_closed() {
                        s.closing = true;
                    }
                    s.closing && s.rows_inflight == 0
                }
                None => false,
            };
            if free {
                self.free_slot(i);
            }
        }
        let stats = &self.stats;
        self.queue.retain(|r| {
            let keep = !r.events.is_closed();
            if !keep {
                stats.pending.fetch_sub(1, Ordering::Relaxed);
            }
            keep
        });
    }

    fn free_slot(&mut self, i: usize) {
        if let Some(s) = self.slots[i].stream.take() {
            if s.capture_rows > 0 {
                // the Reset below closes the capture; its report answers this wait
                self.captures.expect(i, s.req.events, s.done);
            }
            let g = self.slots[i].group;
            self.group_members[g] -= 1;
            self.proposers.forget(i as u32);
            self.engine.reset(i as u32);
            self.send(Message::Reset { slot: i as u32 });
            self.stats.slots_busy.fetch_sub(1, Ordering::Relaxed);
            self.stats
                .requests_in_flight
                .fetch_sub(1, Ordering::Relaxed);
            self.stats.pending.fetch_sub(1, Ordering::Relaxed);
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
            self.stats.slots_busy.fetch_add(1, Ordering::Relaxed);
            self.stats
                .requests_in_flight
                .fetch_add(1, Ordering::Relaxed);
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
        self.stats
            .queue_depth
            .store(self.queue.len() as u64, Ordering::Relaxed);
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
        match self.plan_proposal() {
            Some(plan) => {
                self.launch(plan);
                true
            }
            None => false,
        }
    }

    /// The rows group g can send now: each stream's next prefill window or its confirmed decode
    /// row. Changes nothing.
    pub fn plan_group(&self, g: usize) -> Option<FramePlan> {
        let (window, turn) = match self.cfg.admission {
            Admission::Windowed => (self.cfg.window, None),
            Admission::Reference => (REFERENCE_ROWS, self.prefill_turn()),
        };
        let mut rows = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if s.group != g {
                continue;
            }
            let Some(st) = s.stream.as_ref() else {
                continue;
            };
            // the flags every row of the stream carries
            let flags = if st.req.capture { FLAG_CAPTURE } else { 0 }
                | if st.drafted { FLAG_DRAFT } else { 0 };
            if let Some(window) = st.next_prefill(window) {
                if turn.is_some_and(|t| t != i) {
                    continue; // reference admission: another prompt has the pipeline
                }
                for pos in window {
                    let last = pos + 1 == st.plen();
                    rows.push(RowHeader {
                        slot: i as u32,
                        pos: pos as u32,
                        token: st.req.prompt[pos],
                        flags: flags | if last { FLAG_SAMPLE } else { 0 },
                    });
                }
            } else if let Some((pos, token)) = st.next_decode() {
                rows.push(RowHeader {
                    slot: i as u32,
                    pos: pos as u32,
                    token,
                    flags: flags | FLAG_SAMPLE,
                });
            }
        }
        (!rows.is_empty()).then_some(FramePlan {
            group: g,
            rows,
            proposal: None,
        })
    }

    /// Under reference admission, the slot whose prompt may be sent: the earliest admitted stream
    /// that has not yet returned its first token.
    fn prefill_turn(&self) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.stream
                    .as_ref()
                    .is_some_and(|st| !st.closing && st.generated.is_empty())
            })
            .min_by_key(|(_, s)| s.admitted)
            .map(|(i, _)| i)
    }

    /// A one-row frame with a proposed input for the lone active stream, when speculation is on,
    /// nothing else is active or waiting, and a proposer has a guess.
    fn plan_proposal(&mut self) -> Option<FramePlan> {
        if !self.speculating() || !self.queue.is_empty() {
            return None;
        }
        let mut active = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.stream.is_some());
        let (i, slot) = active.next()?;
        if active.next().is_some() {
            return None;
        }
        let st = slot.stream.as_ref()?;
        let pos = st.next_proposal(self.cfg.spec_depth, self.cfg.budget)?;
        let ctx = st.context();
        debug_assert_eq!(ctx.len(), pos);
        let (group, drafted) = (slot.group, st.drafted);
        match self.proposers.propose(i as u32, &ctx) {
            Ok(Some((token, kind))) => Some(FramePlan {
                group,
                rows: vec![RowHeader {
                    slot: i as u32,
                    pos: pos as u32,
                    token,
                    flags: FLAG_SAMPLE | if drafted { FLAG_DRAFT } else { 0 },
                }],
                proposal: Some(kind),
            }),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!("draft proposer failed; speculating without it: {e}");
                self.proposers.draft = None;
                None
            }
        }
    }

    /// Apply a plan to the streams it touches (frame `seq`).
    fn commit(&mut self, plan: &FramePlan, seq: u64) {
        for r in &plan.rows {
            let Some(st) = self.slots[r.slot as usize].stream.as_mut() else {
                continue;
            };
            let pos = r.pos as usize;
            st.rows_inflight += 1;
            if pos < st.plen() {
                st.sent = st.sent.max(pos + 1);
            }
            if r.flags & FLAG_CAPTURE != 0 {
                st.capture_rows += 1;
            }
            if r.flags & FLAG_SAMPLE != 0 {
                st.chain.push_back(InFlight {
                    seq,
                    pos,
                    input: r.token,
                    proposer: plan.proposal,
                });
            }
            if let Some(kind) = plan.proposal {
                st.spec.proposed += 1;
                self.stats.spec_add(kind, 0);
            }
        }
    }

    fn launch(&mut self, plan: FramePlan) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let alone = self.inflight.is_empty();
        self.inflight.insert(seq, plan.group);
        self.commit(&plan, seq);
        let FramePlan {
            group, mut rows, ..
        } = plan;
        if alone {
            rows.iter_mut().for_each(|r| r.flags |= FLAG_ALONE);
        }
        super::frame_width(&rows);
        let t0 = Instant::now();
        // the clocks of the frame record, read only when frames are recorded
        let logged = self.log.is_on();
        let start_s = if logged { epoch_s() } else { 0.0 };
        let cpu0 = if logged { thread_cpu_ns() } else { 0 };
        let mut t = ForwardTimings::default();
        let result = self
            .engine
            .embed(&rows)
            .and_then(|mut x| self.engine.run(&rows, &mut x, &mut t).map(|_| x));
        let p = &mut self.engine.profile;
        p.frames += 1;
        p.rows += rows.len() as u64;
        p.attention_ns += t.attention_ns;
        p.mlp_ns += t.mlp_ns;
        let residual = match result {
            Ok(x) => x,
            Err(e) => {
                self.fail(format!("role 0 failed: {e}"));
                return;
            }
        };
        let n_rows = rows.len();
        let bytes_before = self.engine.profile.bytes_out;
        match &self.down {
            Downstream::Link(_) => {
                let hidden = self.engine.hidden() as u32;
                self.engine.profile.compute_ns += t0.elapsed().as_nanos() as u64;
                self.send(Message::Forward {
                    seq,
                    group: group as u32,
                    rows,
                    hidden,
                    residual,
                });
            }
            // the chain broke while this frame was planned: its streams have ended
            Downstream::Down => {}
            Downstream::Local => {
                let items = self.engine.sample(&rows, &residual);
                self.engine.profile.compute_ns += t0.elapsed().as_nanos() as u64;
                match items {
                    Ok(items) => self.tokens(seq, &items),
                    Err(e) => self.fail(format!("role 0 failed: {e}")),
                }
            }
        }
        if self.log.is_on() {
            let bytes_out = self.engine.profile.bytes_out - bytes_before;
            self.log.append(&FrameRecord {
                role: 0,
                seq,
                group: group as u32,
                rows: n_rows,
                epoch_s: epoch_s(),
                start_s,
                cpu_ns: thread_cpu_ns().saturating_sub(cpu0),
                alone,
                t_ns: t0.duration_since(self.t_start).as_nanos() as u64,
                idle_ns: 0,
                compute_ns: t0.elapsed().as_nanos() as u64,
                attention_ns: t.attention_ns,
                mlp_ns: t.mlp_ns,
                head_ns: 0,
                bytes_in: 0,
                bytes_out,
            });
        }
    }

    /// Token replies of frame `seq` from the last role.
    fn tokens(&mut self, seq: u64, items: &[TokenItem]) {
        self.inflight.remove(&seq);
        for it in items {
            let i = it.slot as usize;
            let Some(st) = self.slots.get_mut(i).and_then(|s| s.stream.as_mut()) else {
                continue;
            };
            st.rows_inflight = st.rows_inflight.saturating_sub(1);
            if it.token == NO_TOKEN {
                continue;
            }
            let dropped = self.discarded.remove(&(seq, it.slot)) || st.closing;
            if self.replies.is_on() {
                let outcome = match (dropped, st.chain.front().map(|r| r.proposer)) {
                    (true, _) => "discarded",
                    (false, Some(Some(_))) => "accepted",
                    _ => "confirmed",
                };
                self.replies.append(&ReplyRecord {
                    seq,
                    slot: it.slot,
                    pos: it.pos,
                    epoch_s: epoch_s(),
                    t_ns: self.t_start.elapsed().as_nanos() as u64,
                    outcome,
                });
            }
            if dropped {
                continue;
            }
            let v = match st.reply(seq, it.token) {
                Ok(v) => v,
                Err(e) => {
                    self.fail(format!("role 0 failed: slot {i}: {e}"));
                    return;
                }
            };
            self.account(&v);
            let Some(st) = self.slots[i].stream.as_mut() else {
                continue;
            };
            self.stats.tokens_total.fetch_add(1, Ordering::Relaxed);
            let sent = st.req.events.send(GenEvent::Token {
                id: it.token,
                logit: it.logit,
                hash: it.hash,
            });
            if let Some(r) = v.rejected {
                for s in r.discarded {
                    self.discarded.insert((s, it.slot));
                }
                // every role undoes the rejected rows (behind them on every link) before the
                // model's token is fed at their position
                if let Err(e) = self.engine.truncate(it.slot, r.pos as u32) {
                    self.fail(format!("role 0 failed: {e}"));
                    return;
                }
                self.send(Message::Rewind {
                    slot: it.slot,
                    pos: r.pos as u32,
                });
            }
            let Some(st) = self.slots[i].stream.as_mut() else {
                continue;
            };
            let reason = if st.req.stop_token == Some(it.token) {
                Some(FinishReason::Stop)
            } else if st.generated.len() >= st.req.max_tokens {
                Some(FinishReason::Length)
            } else {
                None
            };
            if let Some(reason) = reason {
                for s in st.discard_chain() {
                    self.discarded.insert((s, it.slot));
                }
                let done = GenEvent::Done {
                    reason,
                    prompt_tokens: st.plen(),
                    completion_tokens: st.generated.len(),
                    capture: None,
                    speculation: self
                        .stats
                        .spec_enabled
                        .load(Ordering::Relaxed)
                        .then(|| st.spec.clone()),
                };
                if st.capture_rows > 0 {
                    st.done = Some(done); // sent with the file's path once the last role reports it
                } else {
                    let _ = st.req.events.send(done);
                }
                st.closing = true;
                let mut seq_all = st.req.prompt.clone();
                seq_all.extend_from_slice(&st.generated);
                self.proposers.finished(&seq_all);
            } else if sent.is_err() {
                st.closing = true;
            }
        }
        // free finished slots at once (their rows are all back)
        for it in items {
            let i = it.slot as usize;
            if self
                .slots
                .get(i)
                .and_then(|s| s.stream.as_ref())
                .is_some_and(|s| s.closing && s.rows_inflight == 0)
            {
                self.free_slot(i);
            }
        }
    }

    /// The draft head's drafts after the row at `pos` of `slot` (frame `seq`): kept when that row's
    /// token was the stream's newest emitted one, i.e. the row was not discarded.
    fn drafts(&mut self, seq: u64, slot: u32, pos: usize, tokens: Vec<u32>) {
        let Some(st) = self
            .slots
            .get(slot as usize)
            .and_then(|s| s.stream.as_ref())
        else {
            return;
        };
        if st.closing || st.last_reply != Some((seq, pos)) {
            return;
        }
        if let Some(m) = self.proposers.mtp.as_mut() {
            m.offer(slot, pos, tokens);
        }
    }

    /// The fleet's speculation counters, and the proposers' acceptance gate.
    fn account(&mut self, v: &Verified) {
        if let Some(k) = v.draft {
            self.stats.spec_add(k, 3);
        }
        if let Some(k) = v.accepted {
            self.stats.spec_add(k, 1);
            self.proposers.gate.observe(k, true);
        }
        if let Some(k) = v.accepted_in_draft_of {
            self.stats.spec_add(k, 4);
        }
        if let Some(r) = &v.rejected {
            self.stats.spec_add(r.proposer, 2);
            self.proposers.gate.observe(r.proposer, false);
        }
    }
}
