//! The process of a role after role 0: accept the link from the previous role, connect to the
//! next one (the last role connects back to role 0), and execute what arrives, in order: forward
//! frames through this role's layers (sampling on the last role), control messages applied and
//! passed on.
//!
//! A worker lives through many link sessions. A session ends when its upstream link closes, fails
//! or falls silent past the stall bound (`LinkTiming`), or when a `Fault` passes through: the
//! worker says so downstream (a `Fault` naming the role upstream of it, which reaches role 0),
//! forgets every stream (role 0 replays the ones it holds), closes both links so its neighbours
//! notice at once, and links again: connect to the next role, accept the previous one. So a role
//! restarted on its old address (by role 0 on one machine, by hand or a supervisor across hosts)
//! rejoins without the others restarting. Only `Shutdown`, or no rejoin within the bound, ends
//! the process.
//!
//! In a session the compute thread reads its upstream link, computes and writes downstream itself
//! (`link::blocking_timed`): one wake-up per frame. `Worker::handle` is the state machine: one
//! message in, the messages it causes out, and whether to go on.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use super::link::{self, BlockingWriter, LinkError, LinkTiming};
use super::liveness;
use super::role::{epoch_s, report_message, thread_cpu_ns, FrameLog, FrameRecord, RoleEngine};
use super::roster::{self, Standing};
use super::wire::{Message, RowHeader, WireLimits, FLAG_ALONE, FLAG_DRAFT};
use crate::capture::writer::CaptureWriter;
use crate::model::ForwardTimings;

/// Where a worker listens and whom it feeds.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub rank: usize,
    pub n_roles: usize,
    /// Address to listen on for the previous role (port 0: any free port).
    pub listen: String,
    /// The next role (or role 0's return port for the last role).
    pub next: String,
    /// How long the first linking waits for the neighbours (covers their weight generation).
    pub connect_timeout: Duration,
    /// How long a broken chain waits to link again before this role gives up.
    pub rejoin_timeout: Duration,
    pub timing: LinkTiming,
    /// Append one JSON line per frame to `DIR/role-K.jsonl`.
    pub profile_dir: Option<PathBuf>,
    /// Where the last role writes captures (ARCHITECTURE.md §3.4); None refuses them.
    pub capture_dir: Option<PathBuf>,
    /// Role 0's return port, asked for the roster while linking (`roster`): for roles across
    /// hosts, whose neighbour may have been moved to a spare, or who may have been replaced.
    pub roster: Option<String>,
}

/// Whether the worker goes on after a message.
enum Flow {
    Continue,
    /// The chain broke (the message says where): end this link session and link again.
    Relink(String),
    /// `Shutdown`: the process ends.
    Exit,
}

/// One role's execution state: its engine, where its messages go, its frame log.
struct Worker {
    rank: usize,
    n_roles: usize,
    engine: RoleEngine,
    out: Arc<BlockingWriter>,
    /// A send failed: the session ends after the message being handled. No `Fault` is sent (there
    /// is no way downstream); role 0 learns of the failure from the roles after it, or from its
    /// own links as the closing travels upstream.
    broken: Option<String>,
    log: FrameLog,
    t_start: Instant,
}

impl Worker {
    /// Send downstream; returns the bytes it takes on the wire. A failure is kept in `broken`.
    fn send(&mut self, m: Message) -> u64 {
        let b = m.encode();
        let n = b.len() as u64 + 4;
        if self.broken.is_none() {
            if let Err(e) = self.out.send_bytes(&b) {
                tracing::error!(rank = self.rank, "downstream link failed: {e}");
                self.broken = Some(format!("role {}'s link downstream failed ({e})", self.rank));
            }
        }
        n
    }

    /// Pass a control message on, unless this is the last role.
    fn pass(&mut self, m: Message) {
        if !self.engine.is_last() {
            self.send(m);
        }
    }

    /// Tell role 0 (through the roles downstream) that `role` failed, and end the session.
    fn fault(&mut self, role: usize, message: String) -> Flow {
        tracing::error!(rank = self.rank, "{message}");
        self.send(Message::Fault {
            role: role as u32,
            message: message.clone(),
        });
        Flow::Relink(message)
    }

    /// The link from upstream broke or fell silent.
    fn lost_upstream(&mut self, e: LinkError) -> Flow {
        let (up, me) = (self.rank - 1, self.rank);
        let message = if e.is_stall() {
            format!("role {up} stalled or its link to role {me} was cut ({e})")
        } else {
            format!("role {up} failed: role {me} lost its link from it ({e})")
        };
        self.fault(up, message)
    }

    /// Handle one message that took `nbytes` on the wire, after the compute thread waited `idle`
    /// for it.
    fn handle(&mut self, msg: Message, nbytes: usize, idle: Duration) -> Flow {
        self.engine.profile.bytes_in += nbytes as u64;
        let rank = self.rank;
        match msg {
            Message::Forward {
                seq,
                group,
                rows,
                hidden,
                residual,
            } => self.forward(seq, group, rows, hidden, residual, nbytes, idle),
            Message::Reset { slot } => {
                self.engine.reset(slot);
                self.pass(Message::Reset { slot });
                Flow::Continue
            }
            Message::Sampling { slot, sampling } => {
                self.engine.set_sampling(slot, sampling);
                self.pass(Message::Sampling { slot, sampling });
                Flow::Continue
            }
            Message::Rewind { slot, pos } => match self.engine.truncate(slot, pos) {
                Ok(()) => {
                    self.pass(Message::Rewind { slot, pos });
                    Flow::Continue
                }
                Err(e) => self.fault(rank, format!("role {rank} failed: {e}")),
            },
            Message::Ping { nonce } => {
                if self.engine.is_last() {
                    self.send(Message::Pong {
                        nonce,
                        roles: self.n_roles as u32,
                    });
                } else {
                    self.send(Message::Ping { nonce });
                }
                Flow::Continue
            }
            Message::ProfileRequest { nonce } => {
                let json = serde_json::to_string(&self.engine.profile).unwrap_or_default();
                self.send(Message::ProfileReply {
                    nonce,
                    role: rank as u32,
                    json,
                });
                self.pass(Message::ProfileRequest { nonce });
                Flow::Continue
            }
            m @ Message::ProfileReply { .. } => {
                self.send(m);
                Flow::Continue
            }
            Message::Fault { role, message } => {
                self.send(Message::Fault {
                    role,
                    message: message.clone(),
                });
                Flow::Relink(message)
            }
            Message::Shutdown => {
                self.pass(Message::Shutdown);
                Flow::Exit
            }
            Message::Heartbeat => Flow::Continue,
            m @ (Message::Tokens { .. }
            | Message::Pong { .. }
            | Message::CaptureReport { .. }
            | Message::Drafts { .. }
            | Message::RosterQuery { .. }
            | Message::Roster { .. }) => self.fault(
                rank,
                format!("role {rank} failed: unexpected {m:?} from upstream"),
            ),
        }
    }

    /// Run this role's layers over a frame; forward it, or (the last role) sample and reply.
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &mut self,
        seq: u64,
        group: u32,
        rows: Vec<RowHeader>,
        hidden: u32,
        mut residual: Vec<f32>,
        nbytes: usize,
        idle: Duration,
    ) -> Flow {
        let rank = self.rank;
        let t0 = Instant::now();
        // the clocks of the frame record, read only when frames are recorded
        let logged = self.log.is_on();
        let start_s = if logged { epoch_s() } else { 0.0 };
        let cpu0 = if logged { thread_cpu_ns() } else { 0 };
        let alone = rows.first().is_some_and(|r| r.flags & FLAG_ALONE != 0);
        let mut t = ForwardTimings::default();
        let width = super::frame_width(&rows);
        let engine = &mut self.engine;
        let last = engine.is_last();
        // the last role samples; the others pass the residual on
        let done = crate::kernels::with_width(width, || {
            engine
                .run(&rows, &mut residual, &mut t)
                .and_then(|_| match last {
                    true => engine.sample(&rows, &residual),
                    false => Ok(Vec::new()),
                })
        });
        let compute_ns = t0.elapsed().as_nanos() as u64;
        let cpu_ns = if logged {
            thread_cpu_ns().saturating_sub(cpu0)
        } else {
            0
        };
        let items = match done {
            Ok(items) => items,
            Err(e) => return self.fault(rank, format!("role {rank} failed: {e}")),
        };
        // the hop to the next role starts here (the record's `epoch_s` is read after the write)
        let sent_s = if logged { epoch_s() } else { 0.0 };
        let bytes_out = if !last {
            self.send(Message::Forward {
                seq,
                group,
                rows: rows.clone(),
                hidden,
                residual,
            })
        } else {
            // the rows' tokens, kept only when the draft head will run on them
            let tokens: Option<Vec<u32>> = rows
                .iter()
                .any(|r| r.flags & FLAG_DRAFT != 0)
                .then(|| items.iter().map(|i| i.token).collect());
            let mut n = self.send(Message::Tokens { seq, group, items });
            // the draft head runs after the tokens are on their way: role 0 emits them meanwhile
            if let Some(tokens) = tokens {
                let engine = &mut self.engine;
                let drafted = crate::kernels::with_width(width, || {
                    engine.drafts(seq, &rows, &residual, &tokens)
                });
                match drafted {
                    Ok(ms) => ms.into_iter().for_each(|m| n += self.send(m)),
                    Err(e) => return self.fault(rank, format!("role {rank} failed: {e}")),
                }
            }
            n
        };
        let idle_ns = idle.as_nanos() as u64;
        let p = &mut self.engine.profile;
        p.frames += 1;
        p.rows += rows.len() as u64;
        p.compute_ns += compute_ns;
        p.attention_ns += t.attention_ns;
        p.mlp_ns += t.mlp_ns;
        p.idle_ns += idle_ns;
        p.bytes_out += bytes_out;
        if self.log.is_on() {
            self.log.append(&FrameRecord {
                role: rank,
                seq,
                group,
                rows: rows.len(),
                epoch_s: Some(epoch_s()),
                start_s: Some(start_s),
                sent_s: Some(sent_s),
                cpu_ns: Some(cpu_ns),
                alone,
                t_ns: Some(t0.duration_since(self.t_start).as_nanos() as u64),
                idle_ns,
                compute_ns,
                attention_ns: t.attention_ns,
                mlp_ns: t.mlp_ns,
                head_ns: 0,
                bytes_in: nbytes as u64,
                bytes_out,
            });
        }
        Flow::Continue
    }
}

/// Run a worker role until `Shutdown` (Ok) or until it cannot rejoin the chain (an error).
/// `announce` is told the listening address as soon as it is bound; `build` then makes the role
/// engine (weights generated or loaded), so the parent learns the port early.
pub fn run(
    cfg: WorkerConfig,
    announce: impl FnOnce(std::net::SocketAddr) -> std::io::Result<()>,
    build: impl FnOnce() -> anyhow::Result<RoleEngine>,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let listener = rt
        .block_on(TcpListener::bind(&cfg.listen))
        .map_err(|e| anyhow::anyhow!("role {}: cannot listen on {}: {e}", cfg.rank, cfg.listen))?;
    announce(listener.local_addr()?)?;
    let mut engine = build()?;
    let lim = WireLimits::new(engine.hidden());
    let rank = cfg.rank;
    // the last role's capture reports go down whichever link is current
    let current: Arc<Mutex<Option<Arc<BlockingWriter>>>> = Arc::new(Mutex::new(None));
    if engine.is_last() {
        let current = current.clone();
        let sink = Box::new(move |r| {
            let out = current.lock().ok().and_then(|c| c.clone());
            let sent = out.map(|o| o.send_bytes(&report_message(r).encode()));
            if !matches!(sent, Some(Ok(_))) {
                tracing::error!(rank, "capture report lost: no live link to role 0");
            }
        });
        let w = CaptureWriter::new(
            rank as u32,
            engine.hidden(),
            cfg.capture_dir.as_deref(),
            sink,
        )?;
        engine.set_capture(w);
    }
    let mut log = Some(FrameLog::open(cfg.profile_dir.as_deref(), rank)?);
    let t_start = Instant::now();
    let mut engine = Some(engine);
    // the next role's address: the roster may move it to a spare
    let mut next = cfg.next.clone();
    for session in 0u64.. {
        let wait = if session == 0 {
            cfg.connect_timeout
        } else {
            cfg.rejoin_timeout
        };
        let unlinked = |e: LinkError| {
            anyhow::anyhow!("role {rank}: could not link into the chain within {wait:?}: {e}")
        };
        // downstream first, kept alive from the start: the next role may accept it (and start
        // timing its silence) long before the previous role connects here
        let t_link = Instant::now();
        let deadline = t_link + wait;
        let mut down = connect_down(&rt, &cfg, lim, &mut next, deadline, &unlinked)?;
        let (prev, peer) = loop {
            // a fleet with a roster is asked again every few seconds while this role waits
            let left = deadline.saturating_duration_since(Instant::now());
            let window = cfg.roster.as_ref().map_or(left, |_| left.min(RECHECK));
            match rt.block_on(liveness::accept_live(&listener, window, cfg.timing.stall)) {
                Ok(got) => break got,
                Err(e) if Instant::now() >= deadline => return Err(unlinked(e)),
                Err(_) => {
                    let was = next.clone();
                    consult(&rt, &cfg, lim, &mut next)?;
                    if next != was {
                        down.stop_beat();
                        down = connect_down(&rt, &cfg, lim, &mut next, deadline, &unlinked)?;
                    }
                }
            }
        };
        // made before the chain was mended, the downstream connection may have gone into the
        // listen queue of a stopped process that role 0 has since killed and replaced: it is reset
        // by now, and is made again rather than failing the session's first write
        while down.out.broken() {
            tracing::warn!(rank, %next, "the downstream connection was reset before use; connecting again");
            down.stop_beat();
            down = connect_down(&rt, &cfg, lim, &mut next, deadline, &unlinked)?;
        }
        let out = down.out.clone();
        tracing::info!(rank, session, %peer, %next, "role linked");
        let (prev_r, prev_w) = {
            let _in_runtime = rt.enter();
            link::blocking_timed(prev, lim, Some(cfg.timing))?
        };
        *current.lock().unwrap_or_else(|e| e.into_inner()) = Some(out.clone());
        let w = Worker {
            rank,
            n_roles: cfg.n_roles,
            engine: engine.take().ok_or_else(|| anyhow::anyhow!("no engine"))?,
            out: out.clone(),
            broken: None,
            log: log.take().unwrap_or_default(),
            t_start,
        };
        let (flow, mut w) = serve_session(w, prev_r)?;
        down.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        w.log.flush();
        match flow {
            Flow::Exit | Flow::Continue => return Ok(()),
            Flow::Relink(why) => {
                tracing::warn!(rank, "link session {session} ended ({why}); linking again");
                w.engine.reset_all();
                // both neighbours see the end at once (the one downstream after any Fault sent)
                out.close();
                prev_w.close();
                *current.lock().unwrap_or_else(|e| e.into_inner()) = None;
                down.stop_beat();
            }
        }
        engine = Some(w.engine);
        log = Some(w.log);
    }
    Ok(())
}

/// The link downstream as a session holds it: its writer, and the keep-alive thread with its
/// stop flag.
struct DownLink {
    out: Arc<link::BlockingWriter>,
    stop: Arc<AtomicBool>,
    beat: std::thread::JoinHandle<()>,
}

impl DownLink {
    /// Connect downstream (with a hello) to `next` and keep the link alive from then on.
    fn connect(
        rt: &tokio::runtime::Runtime,
        cfg: &WorkerConfig,
        lim: WireLimits,
        addr: &str,
        wait: Duration,
    ) -> Result<DownLink, LinkError> {
        let next = rt.block_on(link::connect_hello(addr, wait))?;
        // the link leaves the runtime: the compute thread writes it itself
        let (_, next_w) = {
            let _in_runtime = rt.enter();
            link::blocking_timed(next, lim, Some(cfg.timing))?
        };
        let out = Arc::new(next_w);
        let stop = Arc::new(AtomicBool::new(false));
        let beat = link::keep_alive(out.clone(), cfg.timing, stop.clone())
            .map_err(|e| LinkError::from_io(addr, e, None))?;
        Ok(DownLink { out, stop, beat })
    }

    /// Stop the keep-alive (the link itself is closed by its owners).
    fn stop_beat(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.beat.join();
    }
}

/// How often a role that waits to link asks role 0 for the roster again.
const RECHECK: Duration = Duration::from_secs(2);

/// Ask role 0 for the roster, if this fleet has one and role 0 answers: `next` becomes the
/// neighbour's address as it stands; an error if this role's rank is now held by another address
/// (a spare took it while this host was away: linking now would put two roles in one place).
fn consult(
    rt: &tokio::runtime::Runtime,
    cfg: &WorkerConfig,
    lim: WireLimits,
    next: &mut String,
) -> anyhow::Result<()> {
    let Some(role0) = &cfg.roster else {
        return Ok(());
    };
    let Ok(addrs) = rt.block_on(roster::ask(role0, cfg.rank, lim)) else {
        return Ok(()); // role 0 cannot be asked now: keep the addresses this role has
    };
    match roster::standing(&addrs, cfg.rank, &cfg.listen) {
        Some(Standing::Replaced { by }) => anyhow::bail!(
            "role {}: role 0 says {by} holds this rank now (a spare took it while {} was \
             unreachable); leaving rather than linking into the chain twice",
            cfg.rank,
            cfg.listen
        ),
        Some(Standing::Member { next: now }) if now != *next => {
            tracing::warn!(rank = cfg.rank, was = %next, %now, "the roster moved the next role");
            *next = now;
        }
        _ => {}
    }
    Ok(())
}

/// Connect downstream by `deadline`, asking the roster (if any) where the next role is before
/// each try of a few seconds, and once more after connecting: a role replaced meanwhile leaves.
fn connect_down(
    rt: &tokio::runtime::Runtime,
    cfg: &WorkerConfig,
    lim: WireLimits,
    next: &mut String,
    deadline: Instant,
    unlinked: &dyn Fn(LinkError) -> anyhow::Error,
) -> anyhow::Result<DownLink> {
    loop {
        consult(rt, cfg, lim, next)?;
        let left = deadline.saturating_duration_since(Instant::now());
        let window = cfg.roster.as_ref().map_or(left, |_| left.min(RECHECK));
        match DownLink::connect(rt, cfg, lim, next, window) {
            Ok(down) => {
                let linked_to = next.clone();
                if let Err(e) = consult(rt, cfg, lim, next) {
                    down.out.close();
                    down.stop_beat();
                    return Err(e);
                }
                if *next == linked_to {
                    return Ok(down);
                }
                down.out.close();
                down.stop_beat();
            }
            Err(e) if Instant::now() >= deadline => return Err(unlinked(e)),
            Err(_) => {}
        }
    }
}

/// One link session on the role's compute pool: read, handle, until the session ends.
fn serve_session(
    mut w: Worker,
    mut prev_r: link::BlockingReader,
) -> anyhow::Result<(Flow, Worker)> {
    let rank = w.rank;
    Ok(super::on_compute_pool(
        &format!("role{rank}-compute"),
        move || {
            let mut t_wait = Instant::now();
            let flow = loop {
                match prev_r.recv() {
                    Err(e) => break w.lost_upstream(e),
                    // a heartbeat only says the link is alive: the wait for work goes on
                    Ok((Message::Heartbeat, _)) => {}
                    Ok((msg, nbytes)) => {
                        match w.handle(msg, nbytes, t_wait.elapsed()) {
                            Flow::Continue => {}
                            end => break end,
                        }
                        if let Some(why) = w.broken.take() {
                            break Flow::Relink(why);
                        }
                        t_wait = Instant::now();
                    }
                }
            };
            (flow, w)
        },
    )?)
}
