//! The process of a role after role 0: accept the link from the previous role, connect to the
//! next one (the last role connects back to role 0), and execute what arrives, in order: forward
//! frames through this role's layers (sampling on the last role), control messages applied and
//! passed on. A link that closes without a `Shutdown` first is a failure: the role says so
//! downstream (a `Fault` naming the role upstream of it) and exits.
//!
//! `run` sets up the links, then the compute thread reads its upstream link, computes and writes
//! downstream itself (`link::blocking`): one wake-up per frame. `Worker::handle` is the state
//! machine: one message in, the messages it causes out, and whether to go on.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use super::link::{self, BlockingWriter, LinkError};
use super::role::{epoch_s, report_message, FrameLog, FrameRecord, RoleEngine};
use super::wire::{Message, RowHeader, WireLimits};
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
    pub connect_timeout: Duration,
    /// Append one JSON line per frame to `DIR/role-K.jsonl`.
    pub profile_dir: Option<PathBuf>,
    /// Where the last role writes captures (ARCHITECTURE.md §3.4); None refuses them.
    pub capture_dir: Option<PathBuf>,
}

/// Whether the worker goes on after a message.
enum Flow {
    Continue,
    Stop(anyhow::Result<()>),
}

/// One role's execution state: its engine, where its messages go, its frame log.
struct Worker {
    rank: usize,
    n_roles: usize,
    engine: RoleEngine,
    out: Arc<BlockingWriter>,
    /// A send failed: later messages are dropped (the role goes on until its upstream closes, so
    /// that role 0 learns of the failure from the role that actually failed, not from this one).
    broken: bool,
    log: FrameLog,
    t_start: Instant,
}

impl Worker {
    /// Send downstream; returns the bytes it takes on the wire. A failure is kept in `broken`.
    fn send(&mut self, m: Message) -> u64 {
        let b = m.encode();
        let n = b.len() as u64 + 4;
        if !self.broken {
            if let Err(e) = self.out.send_bytes(&b) {
                tracing::error!(rank = self.rank, "downstream link failed: {e}");
                self.broken = true;
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

    /// Tell role 0 (through the roles downstream) that `role` failed, and stop.
    fn fault(&mut self, role: usize, message: String) -> Flow {
        tracing::error!(rank = self.rank, "{message}");
        self.send(Message::Fault {
            role: role as u32,
            message: message.clone(),
        });
        Flow::Stop(Err(anyhow::anyhow!(message)))
    }

    /// The link from upstream broke.
    fn lost_upstream(&mut self, e: LinkError) -> anyhow::Result<()> {
        let upstream = self.rank - 1;
        match self.fault(
            upstream,
            format!(
                "role {upstream} failed: role {} lost its link from it ({e})",
                self.rank
            ),
        ) {
            Flow::Stop(r) => r,
            Flow::Continue => Ok(()),
        }
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
                Flow::Stop(Err(anyhow::anyhow!(message)))
            }
            Message::Shutdown => {
                self.pass(Message::Shutdown);
                Flow::Stop(Ok(()))
            }
            Message::Heartbeat => Flow::Continue,
            m @ (Message::Tokens { .. } | Message::Pong { .. } | Message::CaptureReport { .. }) => {
                self.fault(
                    rank,
                    format!("role {rank} failed: unexpected {m:?} from upstream"),
                )
            }
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
        let mut t = ForwardTimings::default();
        super::frame_width(&rows);
        let engine = &mut self.engine;
        let done = engine.run(&rows, &mut residual, &mut t).and_then(|_| {
            if engine.is_last() {
                engine
                    .sample(&rows, &residual)
                    .map(|items| Message::Tokens { seq, group, items })
            } else {
                Ok(Message::Forward {
                    seq,
                    group,
                    rows: rows.clone(),
                    hidden,
                    residual,
                })
            }
        });
        let compute_ns = t0.elapsed().as_nanos() as u64;
        let out = match done {
            Ok(m) => m,
            Err(e) => return self.fault(rank, format!("role {rank} failed: {e}")),
        };
        let bytes_out = self.send(out);
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
                epoch_s: epoch_s(),
                t_ns: t0.duration_since(self.t_start).as_nanos() as u64,
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

/// Run a worker role until shutdown or failure. `build` makes the role engine (weights generated
/// or loaded) after the listener is up, so the parent learns the port early.
pub fn run(
    cfg: WorkerConfig,
    build: impl FnOnce() -> anyhow::Result<RoleEngine>,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let listener = rt.block_on(TcpListener::bind(&cfg.listen))?;
    let local = listener.local_addr()?;
    // the parent (or an operator) reads this line to learn the port
    println!("moefleet role {} listening on {local}", cfg.rank);
    std::io::Write::flush(&mut std::io::stdout())?;
    let mut engine = build()?;
    let lim = WireLimits::new(engine.hidden());
    let rank = cfg.rank;
    let next = rt.block_on(link::connect_stream(&cfg.next, cfg.connect_timeout))?;
    let (prev, peer) = rt.block_on(link::accept_stream(&listener, cfg.connect_timeout))?;
    tracing::info!(rank, %peer, next = %cfg.next, "role linked");
    // both links leave the runtime: the compute thread reads and writes them itself (dropping the
    // unused halves closes only their descriptors, not the connections)
    let ((_, next_w), (mut prev_r, _)) = {
        let _in_runtime = rt.enter();
        (link::blocking(next, lim)?, link::blocking(prev, lim)?)
    };
    rt.shutdown_timeout(Duration::from_millis(100));
    let out = Arc::new(next_w);
    if engine.is_last() {
        let out = out.clone();
        let sink = Box::new(move |r| {
            if let Err(e) = out.send_bytes(&report_message(r).encode()) {
                tracing::error!(rank, "capture report lost: {e}");
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
    let mut w = Worker {
        rank,
        n_roles: cfg.n_roles,
        engine,
        out,
        broken: false,
        log: FrameLog::open(cfg.profile_dir.as_deref(), rank)?,
        t_start: Instant::now(),
    };
    let (outcome, mut w) = super::on_compute_pool(&format!("role{rank}-compute"), move || {
        let outcome: anyhow::Result<()> = loop {
            let t_wait = Instant::now();
            match prev_r.recv() {
                Err(e) => break w.lost_upstream(e),
                Ok((msg, nbytes)) => {
                    if let Flow::Stop(r) = w.handle(msg, nbytes, t_wait.elapsed()) {
                        break r;
                    }
                }
            }
        };
        (outcome, w)
    })?;
    w.log.flush();
    outcome
}
