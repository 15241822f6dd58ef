//! The process of a role after role 0: accept the link from the previous role, connect to the
//! next one (the last role connects back to role 0), and execute what arrives, in order: forward
//! frames through this role's layers (sampling on the last role), control messages applied and
//! passed on. A link that closes without a `Shutdown` first is a failure: the role says so
//! downstream (a `Fault` naming the role upstream of it) and exits.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::link::{self, LinkError};
use super::role::{report_message, FrameRecord, RoleEngine};
use super::wire::{Message, WireLimits};
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

/// What the compute thread hands the writer.
enum Out {
    /// An encoded message (encoded once; its size feeds the profile).
    Send(bytes::Bytes),
    Close,
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
    std::io::stdout().flush()?;
    let mut engine = build()?;
    let lim = WireLimits::new(engine.hidden());
    let rank = cfg.rank;
    let (_next_r, mut next_w) = rt.block_on(link::connect(&cfg.next, lim, cfg.connect_timeout))?;
    let (mut prev_r, _prev_w, peer) =
        rt.block_on(link::accept(&listener, lim, cfg.connect_timeout))?;
    tracing::info!(rank, %peer, next = %cfg.next, "role linked");

    // reader: messages with their size and arrival time
    let (in_tx, mut in_rx) =
        mpsc::unbounded_channel::<Result<(Message, usize, Instant), LinkError>>();
    rt.spawn(async move {
        loop {
            let r = prev_r.recv().await.map(|(m, n)| (m, n, Instant::now()));
            let stop = r.is_err();
            if in_tx.send(r).is_err() || stop {
                break;
            }
        }
    });
    // writer
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Out>();
    if engine.is_last() {
        let tx = out_tx.clone();
        let sink = Box::new(move |r| {
            let _ = tx.send(Out::Send(report_message(r).encode()));
        });
        let w = CaptureWriter::new(
            rank as u32,
            engine.hidden(),
            cfg.capture_dir.as_deref(),
            sink,
        )?;
        engine.set_capture(w);
    }
    let writer = rt.spawn(async move {
        while let Some(o) = out_rx.recv().await {
            match o {
                Out::Send(b) => {
                    if let Err(e) = next_w.send_bytes(b).await {
                        tracing::error!(rank, "downstream link failed: {e}");
                        return Err(e);
                    }
                }
                Out::Close => break,
            }
        }
        Ok(())
    });

    let mut records = match &cfg.profile_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            Some(std::io::BufWriter::new(std::fs::File::create(
                d.join(format!("role-{rank}.jsonl")),
            )?))
        }
        None => None,
    };
    let t_start = Instant::now();
    let send = |m: Message| {
        let b = m.encode();
        let n = b.len() as u64 + 4;
        let _ = out_tx.send(Out::Send(b));
        n
    };
    let outcome: anyhow::Result<()> = loop {
        let Some(next) = in_rx.blocking_recv() else {
            break Ok(());
        };
        let (msg, nbytes, arrived) = match next {
            Ok(v) => v,
            Err(e) => {
                let upstream = rank - 1;
                let message =
                    format!("role {upstream} failed: role {rank} lost its link from it ({e})");
                tracing::error!(rank, "{message}");
                send(Message::Fault {
                    role: upstream as u32,
                    message: message.clone(),
                });
                break Err(anyhow::anyhow!(message));
            }
        };
        engine.profile.bytes_in += nbytes as u64;
        match msg {
            Message::Forward {
                seq,
                group,
                rows,
                hidden,
                mut residual,
            } => {
                let t0 = Instant::now();
                let mut t = ForwardTimings::default();
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
                    Err(e) => {
                        let message = format!("role {rank} failed: {e}");
                        send(Message::Fault {
                            role: rank as u32,
                            message: message.clone(),
                        });
                        break Err(anyhow::anyhow!(message));
                    }
                };
                let bytes_out = send(out);
                let p = &mut engine.profile;
                let wait = t0.duration_since(arrived).as_nanos() as u64;
                p.frames += 1;
                p.rows += rows.len() as u64;
                p.compute_ns += compute_ns;
                p.attention_ns += t.attention_ns;
                p.mlp_ns += t.mlp_ns;
                p.queue_wait_ns += wait;
                p.bytes_out += bytes_out;
                if let Some(w) = records.as_mut() {
                    FrameRecord {
                        role: rank,
                        seq,
                        group,
                        rows: rows.len(),
                        epoch_s: super::role::epoch_s(),
                        t_ns: t0.duration_since(t_start).as_nanos() as u64,
                        queue_wait_ns: wait,
                        compute_ns,
                        attention_ns: t.attention_ns,
                        mlp_ns: t.mlp_ns,
                        head_ns: 0,
                        bytes_in: nbytes as u64,
                        bytes_out,
                    }
                    .append(w);
                }
            }
            Message::Reset { slot } => {
                engine.reset(slot);
                if !engine.is_last() {
                    send(Message::Reset { slot });
                }
            }
            Message::Ping { nonce } => {
                if engine.is_last() {
                    send(Message::Pong {
                        nonce,
                        roles: cfg.n_roles as u32,
                    });
                } else {
                    send(Message::Ping { nonce });
                }
            }
            Message::ProfileRequest { nonce } => {
                let json = serde_json::to_string(&engine.profile)?;
                send(Message::ProfileReply {
                    nonce,
                    role: rank as u32,
                    json,
                });
                if !engine.is_last() {
                    send(Message::ProfileRequest { nonce });
                }
            }
            m @ Message::ProfileReply { .. } => {
                send(m);
            }
            Message::Fault { role, message } => {
                send(Message::Fault {
                    role,
                    message: message.clone(),
                });
                break Err(anyhow::anyhow!(message));
            }
            Message::Shutdown => {
                if !engine.is_last() {
                    send(Message::Shutdown);
                }
                break Ok(());
            }
            m @ (Message::Tokens { .. } | Message::Pong { .. } | Message::CaptureReport { .. }) => {
                let message = format!("role {rank} failed: unexpected {m:?} from upstream");
                send(Message::Fault {
                    role: rank as u32,
                    message: message.clone(),
                });
                break Err(anyhow::anyhow!(message));
            }
        }
    };
    if let Some(mut w) = records {
        let _ = w.flush();
    }
    let _ = out_tx.send(Out::Close);
    // let the writer drain what was queued (bounded wait)
    let _ = rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), writer).await });
    rt.shutdown_timeout(Duration::from_millis(100));
    outcome
}
