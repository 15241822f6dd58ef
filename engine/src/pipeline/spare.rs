//! Spare hosts: machines listed in the fleet file (`[[spare]] addr = "host:port"`) that run
//! `moefleet spare --listen ADDR` and wait. When the chain has stayed broken past
//! `--spare-after-s`, role 0 connects to every rank's address; a rank that cannot be reached (its
//! host is gone, asleep or cut off) is handed to the next spare as a `RoleLaunch` (the fleet's
//! configuration as data, the same launch a local restart uses), the roster names the spare for
//! that rank, and the chain is linked again through it. Each spare is used once.
//!
//! The exchange on the spare's port: role 0 writes the launch as one JSON line; the spare binds
//! the role's listener on that same address, answers with one `Listening` line (or an `error`
//! line, and goes on waiting) and from then on is that role.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::children::{Listening, RoleLaunch};
use super::roster::Roster;
use super::run_config::RunConfig;

/// How long a rank's address may take to accept a connection before its host counts as gone.
pub const REACH_WITHIN: Duration = Duration::from_secs(1);
/// How long a spare may take to bind the role's listener and say so.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// How long role 0 may take to send its launch once connected.
const LAUNCH_WITHIN: Duration = Duration::from_secs(10);

/// Role 0's spares: those not used yet, in fleet-file order, and what it launches on them.
pub struct Spares {
    unused: Mutex<Vec<String>>,
    run: RunConfig,
    /// How long the chain stays broken before role 0 looks for unreachable hosts.
    pub after: Duration,
}

impl Spares {
    pub fn new(addrs: Vec<String>, run: RunConfig, after: Duration) -> Spares {
        Spares {
            unused: Mutex::new(addrs),
            run,
            // looked for at most ten times a second, however small the bound
            after: after.max(Duration::from_millis(100)),
        }
    }

    pub fn any(&self) -> bool {
        !self
            .unused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Hand every rank whose host cannot be reached to a spare, highest rank first (a spare's
    /// launch names its downstream neighbour, which may itself have just been replaced). The
    /// ranks taken, with their spares.
    pub async fn replace_unreachable(&self, roster: &Roster) -> Vec<(usize, String)> {
        let addrs = roster.addrs();
        let n = addrs.len();
        let mut taken = Vec::new();
        for rank in unreachable(&addrs[1..])
            .await
            .into_iter()
            .map(|r| r + 1)
            .rev()
        {
            while let Some(spare) = self.next_unused() {
                let launch = RoleLaunch {
                    run: self.run.clone(),
                    rank,
                    listen: spare.clone(),
                    next: roster.get((rank + 1) % n),
                    threads: None,
                    roster: Some(roster.get(0)),
                };
                match launch_on(&spare, &launch).await {
                    Ok(()) => {
                        tracing::warn!(rank, %spare, was = %addrs[rank], "a spare took the role");
                        roster.set(rank, spare.clone());
                        taken.push((rank, spare));
                        break;
                    }
                    Err(e) => tracing::error!(rank, %spare, "the spare could not take it: {e:#}"),
                }
            }
        }
        taken
    }

    fn next_unused(&self) -> Option<String> {
        let mut u = self.unused.lock().unwrap_or_else(|e| e.into_inner());
        (!u.is_empty()).then(|| u.remove(0))
    }
}

/// The indices of `addrs` that do not accept a TCP connection within `REACH_WITHIN`, tried
/// together. (A reached role sees one connection close without a hello: it drops it as stale.)
async fn unreachable(addrs: &[String]) -> Vec<usize> {
    let tries: Vec<_> = addrs
        .iter()
        .cloned()
        .map(|a| {
            tokio::spawn(async move {
                matches!(
                    tokio::time::timeout(REACH_WITHIN, TcpStream::connect(a)).await,
                    Ok(Ok(_))
                )
            })
        })
        .collect();
    let mut out = Vec::new();
    for (i, t) in tries.into_iter().enumerate() {
        if !t.await.unwrap_or(false) {
            out.push(i);
        }
    }
    out
}

/// Hand `launch` to the spare at `spare` and wait for it to listen as that role.
async fn launch_on(spare: &str, launch: &RoleLaunch) -> anyhow::Result<()> {
    let s = tokio::time::timeout(REACH_WITHIN, TcpStream::connect(spare))
        .await
        .map_err(|_| anyhow!("no answer within {REACH_WITHIN:?}"))?
        .with_context(|| format!("connecting to {spare}"))?;
    let (r, mut w) = s.into_split();
    let mut line = serde_json::to_string(launch)?;
    line.push('\n');
    w.write_all(line.as_bytes()).await?;
    let mut answer = String::new();
    tokio::time::timeout(ANSWER_WITHIN, BufReader::new(r).read_line(&mut answer))
        .await
        .map_err(|_| anyhow!("no answer within {ANSWER_WITHIN:?}"))??;
    let said: Listening = serde_json::from_str(answer.trim())
        .map_err(|_| anyhow!("it answered {:?}", answer.trim()))?;
    let port = |a: &str| a.rsplit(':').next().map(str::to_string);
    if said.role != launch.rank || port(&said.listening) != port(&launch.listen) {
        bail!(
            "it answered as role {} on {}, not as role {} on {}",
            said.role,
            said.listening,
            launch.rank,
            launch.listen
        );
    }
    Ok(())
}

/// The spare's side: wait on `listener` (bound to `addr`) until role 0 hands over a launch for it.
/// Returns the launch and the connection to answer on, the listener closed (the role binds the
/// address itself). A launch that is not for this address, or not a launch, is answered with an
/// error line and the wait goes on.
pub async fn wait_for_launch(
    listener: TcpListener,
    addr: &str,
) -> anyhow::Result<(RoleLaunch, TcpStream)> {
    loop {
        let (s, peer) = listener.accept().await?;
        match read_launch(s, addr).await {
            Ok((launch, s)) => {
                tracing::warn!(%peer, rank = launch.rank, "taking role {}", launch.rank);
                return Ok((launch, s));
            }
            Err(e) => tracing::warn!(%peer, "refused a launch: {e:#}"),
        }
    }
}

async fn read_launch(s: TcpStream, addr: &str) -> anyhow::Result<(RoleLaunch, TcpStream)> {
    let mut s = BufReader::new(s);
    let mut line = String::new();
    tokio::time::timeout(LAUNCH_WITHIN, s.read_line(&mut line))
        .await
        .map_err(|_| anyhow!("no launch within {LAUNCH_WITHIN:?}"))??;
    let mut s = s.into_inner();
    let checked = serde_json::from_str::<RoleLaunch>(line.trim())
        .context("not a moefleet RoleLaunch")
        .and_then(|l| {
            if l.listen != addr {
                bail!("the launch is for {}, this spare is {addr}", l.listen)
            }
            if l.rank == 0 || l.rank >= l.run.n_roles {
                bail!(
                    "rank {} is not a worker rank of {} roles",
                    l.rank,
                    l.run.n_roles
                )
            }
            Ok(l)
        });
    match checked {
        Ok(l) => Ok((l, s)),
        Err(e) => {
            let said = serde_json::json!({ "error": format!("{e:#}") }).to_string() + "\n";
            let _ = s.write_all(said.as_bytes()).await;
            Err(e)
        }
    }
}

/// The spare's answer once the role listens on `bound`.
pub fn answer(s: &mut std::net::TcpStream, rank: usize, bound: SocketAddr) -> std::io::Result<()> {
    use std::io::Write;
    let line = serde_json::to_string(&Listening {
        role: rank,
        listening: bound.to_string(),
    })?;
    writeln!(s, "{line}")?;
    s.flush()
}
