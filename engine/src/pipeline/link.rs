//! Framed TCP links between roles: a length-delimited codec (little-endian u32 length, frames above
//! the wire limits refused by the codec before they are buffered) carrying `wire::Message`s.
//!
//! Two ends of the same format: async halves (`LinkReader`, `LinkWriter`) for tasks on a tokio
//! runtime, and blocking ones (`BlockingReader`, `BlockingWriter`) for a thread that reads and
//! writes its links itself. A role's compute thread does the latter: a frame then costs one
//! wake-up per hop (the read returning) instead of three (reader task, compute thread, writer
//! task), which on a loaded two-core machine was most of a fleet's per-token overhead.
//!
//! Liveness (`LinkTiming`): a sender writes a `Heartbeat` on a link that has been quiet for a
//! heartbeat interval (`keep_alive`), so a receiver that hears nothing for the stall bound knows
//! the sender stalled or the link was cut, whatever the frames cost to compute; a write blocked
//! that long fails too.

use std::io::{BufReader, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use super::emulation::{LinkEmulation, Pacer};
use super::wire::{Message, WireLimits};

/// How long a link may stay silent: a receiver that hears nothing for `stall` declares its sender
/// stalled or the link cut; senders write a heartbeat after `heartbeat()` of quiet.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkTiming {
    pub stall: Duration,
    /// The rate and latency every message is held to (`emulation`); off by default.
    #[serde(default)]
    pub emulate: LinkEmulation,
}

impl Default for LinkTiming {
    fn default() -> Self {
        LinkTiming {
            stall: Duration::from_secs(5),
            emulate: LinkEmulation::default(),
        }
    }
}

impl LinkTiming {
    /// A fifth of the stall bound: the sender's thread checks every half interval, so a heartbeat
    /// leaves at most 1.5 intervals after the last message and a live link is never silent for
    /// more than a third of the bound, even with the sender's thread scheduled late.
    pub fn heartbeat(&self) -> Duration {
        self.stall / 5
    }
}

fn codec(lim: &WireLimits) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .little_endian()
        .length_field_length(crate::pipeline::wire::LENGTH_PREFIX)
        .max_frame_length(lim.max_frame())
        .new_codec()
}

/// The receiving half of a link.
pub struct LinkReader {
    inner: FramedRead<OwnedReadHalf, LengthDelimitedCodec>,
    lim: WireLimits,
    pub peer: String,
}

/// The sending half of a link.
pub struct LinkWriter {
    inner: FramedWrite<OwnedWriteHalf, LengthDelimitedCodec>,
    pub peer: String,
}

/// Why a link stopped.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("link {peer}: closed by the peer")]
    Closed { peer: String },
    #[error("link {peer}: {source}")]
    Io {
        peer: String,
        #[source]
        source: std::io::Error,
    },
    #[error("link {peer}: bad message: {source}")]
    Wire {
        peer: String,
        #[source]
        source: super::wire::WireError,
    },
    #[error("link {peer}: silent for {after:?}")]
    Stalled { peer: String, after: Duration },
}

impl LinkError {
    /// `source` as a link error, a timed-out read or write as `Stalled`.
    pub(crate) fn from_io(
        peer: &str,
        source: std::io::Error,
        timing: Option<LinkTiming>,
    ) -> LinkError {
        match (source.kind(), timing) {
            (std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut, Some(t)) => {
                LinkError::Stalled {
                    peer: peer.to_string(),
                    after: t.stall,
                }
            }
            _ => LinkError::Io {
                peer: peer.to_string(),
                source,
            },
        }
    }

    /// The link timed out (as opposed to closing or failing).
    pub fn is_stall(&self) -> bool {
        matches!(self, LinkError::Stalled { .. })
    }
}

pub fn split(stream: TcpStream, lim: WireLimits) -> (LinkReader, LinkWriter) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let _ = stream.set_nodelay(true);
    let (r, w) = stream.into_split();
    (
        LinkReader {
            inner: FramedRead::new(r, codec(&lim)),
            lim,
            peer: peer.clone(),
        },
        LinkWriter {
            inner: FramedWrite::new(w, codec(&lim)),
            peer,
        },
    )
}

impl LinkReader {
    /// The next message with its encoded size; `Closed` at a clean end of stream.
    pub async fn recv(&mut self) -> Result<(Message, usize), LinkError> {
        match self.inner.next().await {
            None => Err(LinkError::Closed {
                peer: self.peer.clone(),
            }),
            Some(Err(e)) => Err(LinkError::Io {
                peer: self.peer.clone(),
                source: e,
            }),
            Some(Ok(buf)) => Message::decode(&buf, &self.lim)
                .map(|m| (m, buf.len() + 4))
                .map_err(|e| LinkError::Wire {
                    peer: self.peer.clone(),
                    source: e,
                }),
        }
    }
}

impl LinkWriter {
    /// Send one message; returns its size on the wire.
    pub async fn send(&mut self, m: &Message) -> Result<usize, LinkError> {
        self.send_bytes(m.encode()).await
    }

    pub async fn send_bytes(&mut self, b: Bytes) -> Result<usize, LinkError> {
        let n = b.len() + 4;
        self.inner.send(b).await.map_err(|e| LinkError::Io {
            peer: self.peer.clone(),
            source: e,
        })?;
        Ok(n)
    }
}

/// How long one connection attempt may take before a fresh one is made: a SYN lost on a cut link
/// is otherwise retried by the kernel only after 1, 2, 4, 8 … s.
const ATTEMPT: Duration = Duration::from_secs(1);

/// Connect to `addr`, retrying until `timeout` passes (the peer may still be starting).
pub async fn connect(
    addr: &str,
    lim: WireLimits,
    timeout: Duration,
) -> Result<(LinkReader, LinkWriter), LinkError> {
    Ok(split(connect_stream(addr, timeout).await?, lim))
}

/// `connect`, returning the stream itself (for `blocking`).
pub async fn connect_stream(addr: &str, timeout: Duration) -> Result<TcpStream, LinkError> {
    let t0 = Instant::now();
    loop {
        let attempt = tokio::time::timeout(ATTEMPT, TcpStream::connect(addr)).await;
        let e = match attempt {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => e,
            Err(_) => std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {ATTEMPT:?}"),
            ),
        };
        if t0.elapsed() >= timeout {
            return Err(LinkError::Io {
                peer: addr.to_string(),
                source: e,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Accept one connection on `listener` within `timeout`.
pub async fn accept(
    listener: &TcpListener,
    lim: WireLimits,
    timeout: Duration,
) -> Result<(LinkReader, LinkWriter, SocketAddr), LinkError> {
    let (s, addr) = accept_stream(listener, timeout).await?;
    let (r, w) = split(s, lim);
    Ok((r, w, addr))
}

/// `accept`, returning the stream itself (for `blocking`).
pub async fn accept_stream(
    listener: &TcpListener,
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), LinkError> {
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    match tokio::time::timeout(timeout, listener.accept()).await {
        Ok(Ok(pair)) => Ok(pair),
        Ok(Err(e)) => Err(LinkError::Io {
            peer: local,
            source: e,
        }),
        Err(_) => Err(LinkError::Io {
            peer: local,
            source: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {timeout:?}"),
            ),
        }),
    }
}

/// Connect to `addr` within `timeout` and say hello (a `Heartbeat`), so that the acceptor can
/// tell this connection from a stale one (`liveness::accept_live`).
pub async fn connect_hello(addr: &str, timeout: Duration) -> Result<TcpStream, LinkError> {
    use tokio::io::AsyncWriteExt;
    let mut s = connect_stream(addr, timeout).await?;
    s.write_all(&heartbeat_frame())
        .await
        .map_err(|e| LinkError::from_io(addr, e, None))?;
    Ok(s)
}

/// `m` with its length prefix, as it goes on the wire.
pub(crate) fn framed(m: &Message) -> Vec<u8> {
    let m = m.encode();
    let mut frame = (m.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&m);
    frame
}

/// A `Heartbeat` with its length prefix.
pub(crate) fn heartbeat_frame() -> Vec<u8> {
    framed(&Message::Heartbeat)
}

/// The receiving half of a link, read by the thread that calls `recv` (blocking).
pub struct BlockingReader {
    inner: BufReader<std::net::TcpStream>,
    lim: WireLimits,
    buf: Vec<u8>,
    timing: Option<LinkTiming>,
    pub peer: String,
}

/// The sending half of a link, written by whichever thread calls `send_bytes` (blocking; one
/// message at a time, whole, under a lock).
pub struct BlockingWriter {
    inner: Mutex<WriterState>,
    timing: Option<LinkTiming>,
    pub peer: String,
}

struct WriterState {
    stream: std::net::TcpStream,
    /// Writes the messages at their emulated arrival times (`--link-rate`, `--link-latency`).
    pacer: Option<Pacer>,
    frame: Vec<u8>,
    /// When the last message left (heartbeats are due after a quiet interval).
    last: Instant,
}

/// Take a tokio stream off its runtime as a blocking reader and writer of the same connection,
/// without time limits.
pub fn blocking(
    stream: TcpStream,
    lim: WireLimits,
) -> Result<(BlockingReader, BlockingWriter), LinkError> {
    blocking_timed(stream, lim, None)
}

/// `blocking`, with reads and writes that fail as `Stalled` after `timing.stall`.
pub fn blocking_timed(
    stream: TcpStream,
    lim: WireLimits,
    timing: Option<LinkTiming>,
) -> Result<(BlockingReader, BlockingWriter), LinkError> {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let io = |source| LinkError::Io {
        peer: peer.clone(),
        source,
    };
    let s = stream.into_std().map_err(io)?;
    s.set_nonblocking(false).map_err(io)?;
    let _ = s.set_nodelay(true);
    if let Some(t) = timing {
        s.set_read_timeout(Some(t.stall)).map_err(io)?;
        s.set_write_timeout(Some(t.stall)).map_err(io)?;
    }
    let w = s.try_clone().map_err(io)?;
    let pacer = match timing {
        Some(t) if t.emulate.is_on() => {
            let paced = w.try_clone().map_err(io)?;
            Some(Pacer::start(paced, t.emulate, t.stall).map_err(io)?)
        }
        _ => None,
    };
    Ok((
        BlockingReader {
            inner: BufReader::with_capacity(1 << 16, s),
            lim,
            buf: Vec::new(),
            timing,
            peer: peer.clone(),
        },
        BlockingWriter {
            inner: Mutex::new(WriterState {
                stream: w,
                pacer,
                frame: Vec::new(),
                last: Instant::now(),
            }),
            timing,
            peer,
        },
    ))
}

impl BlockingReader {
    /// The next message with its encoded size; `Closed` at a clean end of stream (between
    /// messages), an error for a frame above the wire limits (refused before it is buffered) or
    /// cut short (its length prefix included).
    pub fn recv(&mut self) -> Result<(Message, usize), LinkError> {
        let mut len = [0u8; 4];
        if let Err(e) = self.inner.read_exact(&mut len[..1]) {
            return Err(if e.kind() == std::io::ErrorKind::UnexpectedEof {
                LinkError::Closed {
                    peer: self.peer.clone(),
                }
            } else {
                self.io(e)
            });
        }
        if let Err(e) = self.inner.read_exact(&mut len[1..]) {
            return Err(self.io(e));
        }
        let n = u32::from_le_bytes(len) as usize;
        if n > self.lim.max_frame() {
            return Err(self.io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "frame of {n} bytes above the limit of {}",
                    self.lim.max_frame()
                ),
            )));
        }
        self.buf.resize(n, 0);
        if let Err(e) = self.inner.read_exact(&mut self.buf) {
            return Err(self.io(e));
        }
        Message::decode(&self.buf, &self.lim)
            .map(|m| (m, n + 4))
            .map_err(|e| LinkError::Wire {
                peer: self.peer.clone(),
                source: e,
            })
    }

    fn io(&self, source: std::io::Error) -> LinkError {
        LinkError::from_io(&self.peer, source, self.timing)
    }
}

impl BlockingWriter {
    /// Send one encoded message (length prefix and body in one write); returns its size on the
    /// wire.
    pub fn send_bytes(&self, b: &[u8]) -> Result<usize, LinkError> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        self.write_locked(&mut g, b)
    }

    fn write_locked(&self, g: &mut WriterState, b: &[u8]) -> Result<usize, LinkError> {
        if u32::try_from(b.len()).is_err() {
            let e = std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "a message of {} bytes does not fit the u32 length prefix",
                    b.len()
                ),
            );
            return Err(LinkError::from_io(&self.peer, e, None));
        }
        g.frame.clear();
        g.frame.extend_from_slice(&(b.len() as u32).to_le_bytes());
        g.frame.extend_from_slice(b);
        let n = g.frame.len();
        let WriterState {
            stream,
            pacer,
            frame,
            ..
        } = g;
        match pacer {
            Some(p) => p.send(std::mem::take(frame)),
            None => stream.write_all(frame),
        }
        .map_err(|source| LinkError::from_io(&self.peer, source, self.timing))?;
        g.last = Instant::now();
        Ok(n)
    }

    /// Write a `Heartbeat` if nothing has left for `quiet`.
    pub fn heartbeat_if_quiet(&self, quiet: Duration) -> Result<(), LinkError> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.last.elapsed() >= quiet {
            self.write_locked(&mut g, &Message::Heartbeat.encode())?;
        }
        Ok(())
    }

    /// Has the peer reset this connection? Looked at without waiting: what the peer sent back
    /// (its acceptance probe) is peeked at, not read. A connection made into the listen queue of
    /// a process that was then killed is reset when it dies. (An orderly close is not counted:
    /// role 0 closes its side of the return link once accepted.)
    pub fn broken(&self) -> bool {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.stream.set_nonblocking(true).is_err() {
            return true;
        }
        let mut b = [0u8; 1];
        let peeked = g.stream.peek(&mut b);
        let restored = g.stream.set_nonblocking(false).is_ok();
        match peeked {
            Ok(_) => !restored,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => !restored,
            Err(_) => true,
        }
    }

    /// Shut the connection down both ways (the peer reads its end at once, and a thread blocked
    /// reading this connection here returns).
    pub fn close(&self) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let _ = g.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// Keep `w` alive: a heartbeat after every quiet interval of `timing`, until `stop` is set or a
/// write fails (the link's reader reports that failure).
pub fn keep_alive(
    w: Arc<BlockingWriter>,
    timing: LinkTiming,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let every = timing.heartbeat();
    std::thread::Builder::new()
        .name("link-heartbeat".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(every / 2);
                if stop.load(Ordering::Relaxed) || w.heartbeat_if_quiet(every).is_err() {
                    break;
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::wire::{tokens_wire_bytes, LENGTH_PREFIX};
    use tokio_util::codec::Encoder;

    /// The codec and the blocking writer put `wire::LENGTH_PREFIX` bytes before a message.
    #[test]
    fn links_prefix_what_the_wire_module_says() {
        let body = Message::Tokens {
            seq: 1,
            group: 0,
            items: vec![],
        }
        .encode();
        let mut out = bytes::BytesMut::new();
        codec(&WireLimits::new(8))
            .encode(body.clone(), &mut out)
            .unwrap();
        assert_eq!(out.len(), tokens_wire_bytes(0));
        assert_eq!(out.len(), LENGTH_PREFIX + body.len());
        assert_eq!(
            heartbeat_frame().len(),
            LENGTH_PREFIX + Message::Heartbeat.encode().len()
        );
    }
}
