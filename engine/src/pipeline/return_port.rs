//! Role 0's return port: the listener the last role links back to, which also answers roster
//! queries (`roster`) at any time, the chain linked or not. Every accepted connection is written a
//! heartbeat, then read for its first message: a hello (`link::connect_hello`) offers a return
//! link, queued for the next `ReturnPort::accept_live`; a `RosterQuery` is answered with the
//! roster and the connection closed; anything else is dropped.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Mutex};

use super::link::{self, LinkError};
use super::liveness;
use super::roster::Roster;
use super::wire::{Message, WireLimits};

/// Return links offered while none was wanted, kept for the next linking (more are dropped).
const QUEUED: usize = 16;
/// The largest first message a connection may send (a hello or a roster query).
const FIRST_MAX: usize = 64;

pub struct ReturnPort {
    local: String,
    offered: Mutex<mpsc::Receiver<(TcpStream, SocketAddr)>>,
    /// The task that owns the listener: stopped (and the port closed) with the port.
    serving: tokio::task::JoinHandle<()>,
}

impl Drop for ReturnPort {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

impl ReturnPort {
    /// Serve `listener` from now on; `stall` bounds how long a connection may take to say what it
    /// is.
    pub fn spawn(
        listener: TcpListener,
        roster: Roster,
        lim: WireLimits,
        stall: Duration,
    ) -> ReturnPort {
        let local = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let (tx, rx) = mpsc::channel(QUEUED);
        let serving = tokio::spawn(async move {
            loop {
                let Ok((s, addr)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let (tx, roster) = (tx.clone(), roster.clone());
                tokio::spawn(async move {
                    if let Some(s) = sort(s, addr, &roster, lim, stall).await {
                        if tx.try_send((s, addr)).is_err() {
                            tracing::warn!(%addr, "dropped a return link nobody waited for");
                        }
                    }
                });
            }
        });
        ReturnPort {
            local,
            offered: Mutex::new(rx),
            serving,
        }
    }

    /// The next return link offered and still open, within `timeout`. A link that broke leaves
    /// connections its sender has since abandoned (made while the link was cut, or before a
    /// relink): one closed since it was offered is dropped and the next taken.
    pub async fn accept_live(
        &self,
        timeout: Duration,
    ) -> Result<(TcpStream, SocketAddr), LinkError> {
        let t0 = Instant::now();
        let mut offered = self.offered.lock().await;
        loop {
            let left = timeout.saturating_sub(t0.elapsed());
            match tokio::time::timeout(left, offered.recv()).await {
                Ok(Some((mut s, addr))) => {
                    if liveness::still_open(&mut s).await {
                        return Ok((s, addr));
                    }
                    tracing::warn!(%addr, "dropped a stale connection");
                }
                Ok(None) | Err(_) => {
                    return Err(LinkError::Io {
                        peer: self.local.clone(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("no connection within {timeout:?}"),
                        ),
                    })
                }
            }
        }
    }
}

/// What an accepted connection is: a return link (returned), or a roster query (answered here).
async fn sort(
    mut s: TcpStream,
    addr: SocketAddr,
    roster: &Roster,
    lim: WireLimits,
    stall: Duration,
) -> Option<TcpStream> {
    s.write_all(&link::heartbeat_frame()).await.ok()?;
    // a connection whose sender has already closed it shows a reset within a round trip
    tokio::time::sleep(liveness::LIVE_WITHIN).await;
    let first = tokio::time::timeout(stall, async {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await.ok()?;
        let len = u32::from_le_bytes(len) as usize;
        if len > FIRST_MAX {
            return None;
        }
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).await.ok()?;
        Message::decode(&body, &lim).ok()
    })
    .await
    .ok()
    .flatten();
    match first {
        Some(Message::Heartbeat) => liveness::still_open(&mut s).await.then_some(s),
        Some(Message::RosterQuery { rank }) => {
            let answer = link::framed(&Message::Roster {
                addrs: roster.text(),
            });
            if s.write_all(&answer).await.is_ok() {
                tracing::debug!(%addr, rank, "answered a roster query");
            }
            None
        }
        other => {
            tracing::warn!(%addr, "dropped a connection that said {other:?} first");
            None
        }
    }
}
