//! Telling a live connection from a stale one. A link that broke leaves connections in listen
//! queues that their senders have since given up: made while the link was cut, or by a recovery
//! attempt abandoned while it waited for the rest of the chain (a spare took a rank meanwhile).
//! Taking one for the next session's link would end that session at once, and every relink after
//! it would take the previous attempt's connection in turn. A live connection says hello
//! (`link::connect_hello`), survives a probe written back, and is not closed after its hello and
//! whatever heartbeats followed it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

use super::link::{accept_stream, heartbeat_frame, LinkError};

/// How long an accepted connection has to show it is live: a probe written back to a connection
/// whose sender has already closed it is answered with a reset within a round trip.
pub const LIVE_WITHIN: Duration = Duration::from_millis(100);

/// Accept the next live connection within `timeout`. A link that broke leaves connections its
/// sender has since abandoned in the listen queue (made while the link was cut, or before a
/// relink); each accepted one is written a heartbeat and must then hold the sender's hello
/// (`link::connect_hello`) without a reset or an end of stream after it, within `stall`, or it is
/// dropped and the next one taken.
pub async fn accept_live(
    listener: &TcpListener,
    timeout: Duration,
    stall: Duration,
) -> Result<(TcpStream, SocketAddr), LinkError> {
    use tokio::io::AsyncWriteExt;
    let t0 = Instant::now();
    loop {
        let left = timeout.saturating_sub(t0.elapsed());
        let (mut s, addr) = accept_stream(listener, left).await?;
        if s.write_all(&heartbeat_frame()).await.is_err() {
            continue;
        }
        tokio::time::sleep(LIVE_WITHIN).await;
        if hello_then_open(&mut s, stall).await {
            return Ok((s, addr));
        }
        tracing::warn!(%addr, "dropped a stale connection");
    }
}

/// Whether an accepted connection holds the sender's hello (read off here; readers skip
/// heartbeats anyway) and was not closed after it. A sender that gave up on a link it had
/// greeted (a recovery attempt abandoned) shut it down: its hello is followed by the end of the
/// stream, perhaps after heartbeats (`still_open`), and that connection must not be taken for
/// the next session's.
async fn hello_then_open(s: &mut TcpStream, stall: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let hello = heartbeat_frame();
    let mut got = vec![0u8; hello.len()];
    match tokio::time::timeout(stall, s.read_exact(&mut got)).await {
        Ok(Ok(_)) if got == hello => {}
        _ => return false,
    }
    still_open(s).await
}

/// Whether a connection was not closed by its sender. A sender that kept a link alive for a while
/// before giving it up (a recovery attempt abandoned while it waited for the rest of the chain)
/// leaves heartbeats queued *before* its end of stream, so the heartbeats already queued are read
/// off first (readers skip them anyway), at most `QUEUED_BEATS` of them. Then nothing yet, or data
/// that is not a heartbeat (a frame), is open; an end of stream, a reset, or an error the socket
/// already holds (the reset that answered a probe written to it) is not.
pub async fn still_open(s: &mut TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    if !matches!(s.take_error(), Ok(None)) {
        return false;
    }
    let beat = heartbeat_frame();
    let mut next = vec![0u8; beat.len()];
    for _ in 0..QUEUED_BEATS {
        match tokio::time::timeout(CLOSED_WITHIN, s.peek(&mut next)).await {
            Err(_) => return true,
            Ok(Ok(0)) | Ok(Err(_)) => return false,
            Ok(Ok(n)) if n == beat.len() && next == beat => {
                if s.read_exact(&mut next).await.is_err() {
                    return false;
                }
            }
            Ok(Ok(_)) => return true,
        }
    }
    true
}

/// How many queued heartbeats `still_open` reads past: far more than a sender writes in the
/// rejoin bound (one per `LinkTiming::heartbeat`), so only a sender flooding heartbeats reaches it.
const QUEUED_BEATS: usize = 4096;

/// How long `hello_then_open` waits for a close that has already arrived to show (it is in the
/// socket's queue after the hello's round trip; the wait only lets the runtime poll it).
const CLOSED_WITHIN: Duration = Duration::from_millis(5);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::link::{connect_hello, framed};
    use crate::pipeline::wire::Message;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Greet `addr`, then write `beats` heartbeats; the connection and its local address.
    async fn greeted(addr: &str, beats: usize) -> (TcpStream, SocketAddr) {
        use tokio::io::AsyncWriteExt;
        let mut s = connect_hello(addr, Duration::from_secs(5)).await.unwrap();
        for _ in 0..beats {
            s.write_all(&heartbeat_frame()).await.unwrap();
        }
        let at = s.local_addr().unwrap();
        (s, at)
    }

    /// A recovery attempt abandoned while it waited for the rest of the chain leaves a greeted
    /// connection in the listen queue that carried heartbeats before its sender closed it. It is
    /// dropped as stale, and the live connection queued behind it is taken: taking the stale one
    /// would end the next session at once, and every relink after it would take the previous
    /// attempt's connection again.
    #[test]
    fn accept_live_drops_a_link_abandoned_after_heartbeats_and_takes_the_next() {
        runtime().block_on(async {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let (abandoned, _) = greeted(&addr, 3).await;
            drop(abandoned);
            let (_live, live_at) = greeted(&addr, 2).await;
            let (_, peer) = accept_live(&l, Duration::from_secs(5), Duration::from_secs(1))
                .await
                .unwrap();
            assert_eq!(peer, live_at, "took the abandoned connection");
        });
    }

    /// Heartbeats queued on a live connection do not make it look closed, and a frame queued after
    /// them is still there for the reader.
    #[test]
    fn still_open_reads_past_queued_heartbeats_and_keeps_a_frame() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        runtime().block_on(async {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let (mut live, _) = greeted(&addr, 4).await;
            let frame = framed(&Message::Shutdown);
            live.write_all(&frame).await.unwrap();
            let (mut s, _) = accept_stream(&l, Duration::from_secs(5)).await.unwrap();
            tokio::time::sleep(LIVE_WITHIN).await;
            assert!(still_open(&mut s).await);
            // the hello and the four heartbeats were read off; the frame is next
            let mut got = vec![0u8; frame.len()];
            s.read_exact(&mut got).await.unwrap();
            assert_eq!(got, frame);
        });
    }
}
