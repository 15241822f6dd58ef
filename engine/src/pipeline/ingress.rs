//! Role 0: admission, scheduling and token return. One engine thread owns every slot and advances
//! in short steps (drain the inbox, admit, build and compute at most one frame, send it), so request
//! submission, admission, forward progress and completion interleave. HTTP handlers never touch
//! model state: they submit a `GenRequest` and read its event channel.
//!
//! Scheduling is data: a slot belongs to one of `n_groups` pipeline groups (the least-populated at
//! admission); a frame is built from one group's eligible rows (a prefill window of at most `window`
//! rows per prompt, or one decode row per stream whose previous token has returned); prefill
//! windows of one prompt may be in flight in several roles at once.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc as tmpsc, oneshot};

pub use super::events::{CaptureFile, FinishReason, GenEvent, GenRequest, Inbox};
use super::role::RoleEngine;
use super::stats::FleetStats;
use super::wire::{Message, RowHeader, TokenItem, FLAG_CAPTURE, FLAG_SAMPLE, NO_TOKEN};
use crate::model::ForwardTimings;

/// Operator choices for role 0's scheduler.
#[derive(Clone, Debug)]
pub struct SchedConfig {
    pub n_slots: usize,
    pub n_groups: usize,
    /// Prompt rows per prefill window.
    pub window: usize,
    /// Frames in flight at once (bounds queued work between roles).
    pub max_inflight: usize,
    /// Append one JSON line per frame role 0 computes to `DIR/role-0.jsonl`.
    pub profile_dir: Option<std::path::PathBuf>,
}

struct Active {
    req: GenRequest,
    /// Prompt rows already sent.
    sent: usize,
    generated: Vec<u32>,
    /// A sampled row is in flight.
    awaiting: bool,
    /// Rows of this slot in flight.
    rows_inflight: usize,
    /// Finished or cancelled: schedule nothing more; free once nothing is in flight.
    closing: bool,
    /// Rows sent with `FLAG_CAPTURE` (the last role holds a capture for this stream).
    capture_rows: usize,
    /// A capturing stream's `Done`, held until the last role reports its file.
    done: Option<GenEvent>,
}

/// A capturing stream whose slot was freed, waiting for the last role's report: its events and
/// its held `Done` (None if it was cancelled).
type CaptureWait = (tmpsc::UnboundedSender<GenEvent>, Option<GenEvent>);

/// A `/api/profile` request waiting for every role's reply: (reply, replies so far, asked at).
type ProfileWait = (
    oneshot::Sender<Vec<serde_json::Value>>,
    Vec<serde_json::Value>,
    Instant,
);

struct Slot {
    group: usize,
    active: Option<Active>,
}

/// Where frames go after role 0's layers: the next role, or (one role) straight to sampling.
pub enum Downstream {
    /// Encoded messages for the link writer (encoded once, here, so their size is counted free).
    Link(tmpsc::UnboundedSender<bytes::Bytes>),
    Local,
}

pub struct Scheduler {
    cfg: SchedConfig,
    engine: RoleEngine,
    down: Downstream,
    stats: Arc<FleetStats>,
    slots: Vec<Slot>,
    group_members: Vec<usize>,
    group_inflight: Vec<usize>,
    queue: VecDeque<GenRequest>,
    inflight: HashMap<u64, usize>,
    next_seq: u64,
    rr: usize,
    ready: bool,
    ping_nonce: u64,
    last_ping: Option<Instant>,
    failed: Option<String>,
    profiles: HashMap<u64, ProfileWait>,
    /// Capturing streams waiting for their report, by (slot, the slot's capture serial).
    capture_wait: HashMap<(usize, u64), CaptureWait>,
    /// Next capture serial per slot (the last role counts its closed captures the same way).
    capture_serial: HashMap<usize, u64>,
    records: Option<std::io::BufWriter<std::fs::File>>,
    t_start: Instant,
}

impl Scheduler {
    pub fn new(
        cfg: SchedConfig,
        engine: RoleEngine,
        down: Downstream,
        stats: Arc<FleetStats>,
    ) -> Self {
        let slots = (0..cfg.n_slots)
            .map(|i| Slot {
                group: i % cfg.n_groups,
                active: None,
            })
            .collect();
        stats
            .slots_total
            .store(cfg.n_slots as u64, Ordering::Relaxed);
        let records = cfg.profile_dir.as_ref().and_then(|d| {
            std::fs::create_dir_all(d).ok()?;
            std::fs::File::create(d.join("role-0.jsonl"))
                .ok()
                .map(std::io::BufWriter::new)
        });
        Scheduler {
            group_members: vec![0; cfg.n_groups],
            group_inflight: vec![0; cfg.n_groups],
            cfg,
            engine,
            down,
            stats,
            slots,
            queue: VecDeque::new(),
            inflight: HashMap::new(),
            next_seq: 0,
            rr: 0,
            ready: false,
            ping_nonce: 1,
            last_ping: None,
            failed: None,
            profiles: HashMap::new(),
            capture_wait: HashMap::new(),
            capture_serial: HashMap::new(),
            records,
            t_start: Instant::now(),
        }
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
                    Ok(Inbox::Shutdown) => {
                        self.shutdown();
                        return self.failed;
                    }
                    Ok(m) => {
                        self.handle(m);
                        busy = true;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        self.shutdown();
                        return self.failed;
                    }
                }
            }
            self.ping_if_needed();
            self.reap();
            self.admit();
            busy |= self.step();
            self.expire_profiles();
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
        self.ready = true;
        self.stats.ready.store(true, Ordering::Relaxed);
    }

    fn ping_if_needed(&mut self) {
        if self.ready || self.failed.is_some() {
            return;
        }
        if self
            .last_ping
            .is_none_or(|t| t.elapsed() > Duration::from_millis(500))
        {
            self.ping_nonce += 1;
            self.last_ping = Some(Instant::now());
            self.send(Message::Ping {
                nonce: self.ping_nonce,
            });
        }
    }

    fn send(&mut self, m: Message) {
        if let Downstream::Link(tx) = &self.down {
            let b = m.encode();
            self.engine.profile.bytes_out += b.len() as u64 + 4;
            if tx.send(b).is_err() {
                self.fail("role 1 failed: the link from role 0 is closed".into());
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
            Inbox::Link(Message::Pong { nonce, .. }) if nonce == self.ping_nonce => {
                self.set_ready()
            }
            Inbox::Link(Message::Pong { .. }) => {}
            Inbox::Link(Message::ProfileReply { nonce, json, .. }) => {
                if let Some((_, got, _)) = self.profiles.get_mut(&nonce) {
                    got.push(
                        serde_json::from_str(&json).unwrap_or(serde_json::Value::String(json)),
                    );
                }
                self.finish_profile(nonce, false);
            }
            Inbox::Link(Message::Fault { message, .. }) => self.fail(message),
            Inbox::Link(Message::CaptureReport {
                slot,
                serial,
                ok,
                sequence,
                bytes,
                text,
            }) => {
                let waiting = self.capture_wait.remove(&(slot as usize, serial));
                match waiting {
                    Some((
                        events,
                        Some(GenEvent::Done {
                            reason,
                            prompt_tokens,
                            completion_tokens,
                            ..
                        }),
                    )) => {
                        let _ = events.send(if ok {
                            GenEvent::Done {
                                reason,
                                prompt_tokens,
                                completion_tokens,
                                capture: Some(CaptureFile {
                                    path: text,
                                    sequence,
                                    bytes,
                                }),
                            }
                        } else {
                            GenEvent::Error(text)
                        });
                    }
                    Some(_) => {} // the request was cancelled; nobody waits for the file
                    None => tracing::warn!(
                        slot,
                        serial,
                        "capture report with no capture waiting: {text}"
                    ),
                }
            }
            Inbox::Link(other) => self.fail(format!(
                "role 0: unexpected message from the last role: {other:?}"
            )),
            Inbox::Failed(message) => self.fail(message),
            Inbox::Profile(tx) => {
                let own = serde_json::to_value(&self.engine.profile).unwrap_or_default();
                self.ping_nonce += 1;
                let nonce = self.ping_nonce;
                self.profiles.insert(nonce, (tx, vec![own], Instant::now()));
                if matches!(self.down, Downstream::Link(_)) && self.failed.is_none() {
                    self.send(Message::ProfileRequest { nonce });
                }
                self.finish_profile(nonce, false);
            }
            Inbox::Shutdown => {}
        }
    }

    fn finish_profile(&mut self, nonce: u64, force: bool) {
        let done = self
            .profiles
            .get(&nonce)
            .is_some_and(|(_, got, _)| got.len() >= self.engine.n_roles);
        if done || force {
            if let Some((tx, mut got, _)) = self.profiles.remove(&nonce) {
                got.sort_by_key(|v| v.get("role").and_then(|r| r.as_u64()).unwrap_or(0));
                let _ = tx.send(got);
            }
        }
    }

    fn expire_profiles(&mut self) {
        let old: Vec<u64> = self
            .profiles
            .iter()
            .filter(|(_, (_, _, t))| t.elapsed() > Duration::from_secs(2))
            .map(|(n, _)| *n)
            .collect();
        for n in old {
            self.finish_profile(n, true);
        }
    }

    /// The fleet is broken: every request ends with the message; nothing more is admitted.
    fn fail(&mut self, message: String) {
        if self.failed.is_some() {
            return;
        }
        tracing::error!("{message}");
        self.failed = Some(message.clone());
        self.ready = false;
        self.stats.ready.store(false, Ordering::Relaxed);
        *self.stats.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.clone());
        for s in &mut self.slots {
            if let Some(a) = s.active.take() {
                let _ = a.req.events.send(GenEvent::Error(message.clone()));
                self.stats.pending.fetch_sub(1, Ordering::Relaxed);
                self.stats
                    .requests_in_flight
                    .fetch_sub(1, Ordering::Relaxed);
            }
        }
        for r in self.queue.drain(..) {
            let _ = r.events.send(GenEvent::Error(message.clone()));
            self.stats.pending.fetch_sub(1, Ordering::Relaxed);
        }
        self.end_capture_waits(&message);
        self.stats.slots_busy.store(0, Ordering::Relaxed);
        self.stats.queue_depth.store(0, Ordering::Relaxed);
    }

    fn shutdown(&mut self) {
        if let Some(w) = self.records.as_mut() {
            let _ = std::io::Write::flush(w);
        }
        if self.failed.is_none() {
            self.send(Message::Shutdown);
        }
        let msg = "the server is shutting down".to_string();
        for s in &mut self.slots {
            if let Some(a) = s.active.take() {
                let _ = a.req.events.send(GenEvent::Error(msg.clone()));
            }
        }
        for r in self.queue.drain(..) {
            let _ = r.events.send(GenEvent::Error(msg.clone()));
        }
        self.end_capture_waits(&msg);
        self.stats.ready.store(false, Ordering::Relaxed);
    }

    /// No capture report will come: every stream still waiting for one ends with `message`.
    fn end_capture_waits(&mut self, message: &str) {
        for (_, (events, done)) in self.capture_wait.drain() {
            if done.is_some() {
                let _ = events.send(GenEvent::Error(message.to_string()));
            }
        }
    }

    /// Mark requests whose client went away; free slots with nothing in flight.
    fn reap(&mut self) {
        for i in 0..self.slots.len() {
            let free = match &mut self.slots[i].active {
                Some(a) => {
                    if a.req.events.is_closed() {
                        a.closing = true;
                    }
                    a.closing && a.rows_inflight == 0
                }
                None => false,
            };
            if free {
                self.free_slot(i);
            }
        }
        self.queue.retain(|r| {
            let keep = !r.events.is_closed();
            if !keep {
                self.stats.pending.fetch_sub(1, Ordering::Relaxed);
            }
            keep
        });
    }

    fn free_slot(&mut self, i: usize) {
        if let Some(a) = self.slots[i].active.take() {
            if a.capture_rows > 0 {
                // the Reset below closes the capture; its report (same slot, same serial) answers
                // this entry
                let serial = self.capture_serial.entry(i).or_insert(0);
                self.capture_wait
                    .insert((i, *serial), (a.req.events, a.done));
                *serial += 1;
            }
            let g = self.slots[i].group;
            self.group_members[g] -= 1;
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
        if !self.ready {
            return;
        }
        while !self.queue.is_empty() {
            let best = (0..self.slots.len())
                .filter(|&i| self.slots[i].active.is_none())
                .min_by_key(|&i| (self.group_members[self.slots[i].group], i));
            let Some(i) = best else { break };
            let Some(req) = self.queue.pop_front() else {
                break;
            };
            self.group_members[self.slots[i].group] += 1;
            self.slots[i].active = Some(Active {
                req,
                sent: 0,
                generated: Vec::new(),
                awaiting: false,
                rows_inflight: 0,
                closing: false,
                capture_rows: 0,
                done: None,
            });
            self.stats.slots_busy.fetch_add(1, Ordering::Relaxed);
            self.stats
                .requests_in_flight
                .fetch_add(1, Ordering::Relaxed);
        }
        self.stats
            .queue_depth
            .store(self.queue.len() as u64, Ordering::Relaxed);
    }

    /// Build, compute and send at most one frame. Returns whether one was sent.
    fn step(&mut self) -> bool {
        if !self.ready || self.inflight.len() >= self.cfg.max_inflight {
            return false;
        }
        for k in 0..self.cfg.n_groups {
            let g = (self.rr + k) % self.cfg.n_groups;
            let rows = self.plan(g);
            if rows.is_empty() {
                continue;
            }
            self.rr = (g + 1) % self.cfg.n_groups;
            self.launch(g, rows);
            return true;
        }
        false
    }

    /// The rows group g can send now (and mark them in flight).
    fn plan(&mut self, g: usize) -> Vec<RowHeader> {
        let mut rows = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            if s.group != g {
                continue;
            }
            let Some(a) = s.active.as_mut() else { continue };
            if a.closing {
                continue;
            }
            let plen = a.req.prompt.len();
            let capture = if a.req.capture { FLAG_CAPTURE } else { 0 };
            if a.sent < plen {
                let n = self.cfg.window.min(plen - a.sent);
                for j in 0..n {
                    let pos = a.sent + j;
                    let last = pos + 1 == plen;
                    rows.push(RowHeader {
                        slot: i as u32,
                        pos: pos as u32,
                        token: a.req.prompt[pos],
                        flags: capture | if last { FLAG_SAMPLE } else { 0 },
                    });
                }
                a.sent += n;
                a.rows_inflight += n;
                if a.req.capture {
                    a.capture_rows += n;
                }
                a.awaiting = a.sent == plen;
            } else if !a.awaiting && !a.generated.is_empty() && a.generated.len() < a.req.max_tokens
            {
                let pos = plen + a.generated.len() - 1;
                let token = *a.generated.last().unwrap_or(&0);
                rows.push(RowHeader {
                    slot: i as u32,
                    pos: pos as u32,
                    token,
                    flags: capture | FLAG_SAMPLE,
                });
                a.rows_inflight += 1;
                if a.req.capture {
                    a.capture_rows += 1;
                }
                a.awaiting = true;
            }
        }
        rows
    }

    fn launch(&mut self, g: usize, rows: Vec<RowHeader>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.inflight.insert(seq, g);
        self.group_inflight[g] += 1;
        let t0 = Instant::now();
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
                    group: g as u32,
                    rows,
                    hidden,
                    residual,
                });
            }
            Downstream::Local => {
                let items = self.engine.sample(&rows, &residual);
                self.engine.profile.compute_ns += t0.elapsed().as_nanos() as u64;
                match items {
                    Ok(items) => self.tokens(seq, &items),
                    Err(e) => self.fail(format!("role 0 failed: {e}")),
                }
            }
        }
        if let Some(w) = self.records.as_mut() {
            super::role::FrameRecord {
                role: 0,
                seq,
                group: g as u32,
                rows: n_rows,
                epoch_s: super::role::epoch_s(),
                t_ns: t0.duration_since(self.t_start).as_nanos() as u64,
                queue_wait_ns: 0,
                compute_ns: t0.elapsed().as_nanos() as u64,
                attention_ns: t.attention_ns,
                mlp_ns: t.mlp_ns,
                head_ns: 0,
                bytes_in: 0,
                bytes_out: self.engine.profile.bytes_out - bytes_before,
            }
            .append(w);
        }
    }

    /// Token replies of frame `seq` from the last role.
    fn tokens(&mut self, seq: u64, items: &[TokenItem]) {
        if let Some(g) = self.inflight.remove(&seq) {
            self.group_inflight[g] -= 1;
        }
        for it in items {
            let i = it.slot as usize;
            let Some(a) = self.slots.get_mut(i).and_then(|s| s.active.as_mut()) else {
                continue;
            };
            a.rows_inflight = a.rows_inflight.saturating_sub(1);
            if it.token == NO_TOKEN {
                continue;
            }
            a.awaiting = false;
            if a.closing {
                continue;
            }
            a.generated.push(it.token);
            self.stats.tokens_total.fetch_add(1, Ordering::Relaxed);
            let sent = a.req.events.send(GenEvent::Token {
                id: it.token,
                logit: it.logit,
                hash: it.hash,
            });
            let reason = if a.req.stop_token == Some(it.token) {
                Some(FinishReason::Stop)
            } else if a.generated.len() >= a.req.max_tokens {
                Some(FinishReason::Length)
            } else {
                None
            };
            if let Some(reason) = reason {
                let done = GenEvent::Done {
                    reason,
                    prompt_tokens: a.req.prompt.len(),
                    completion_tokens: a.generated.len(),
                    capture: None,
                };
                if a.capture_rows > 0 {
                    a.done = Some(done); // sent with the file's path once the last role reports it
                } else {
                    let _ = a.req.events.send(done);
                }
                a.closing = true;
            }
            if sent.is_err() {
                a.closing = true;
            }
        }
        // free finished slots at once (their rows are all back)
        for it in items {
            let i = it.slot as usize;
            if self
                .slots
                .get(i)
                .and_then(|s| s.active.as_ref())
                .is_some_and(|a| a.closing && a.rows_inflight == 0)
            {
                self.free_slot(i);
            }
        }
    }
}
