//! Framed TCP links between roles: a length-delimited codec (little-endian u32 length, frames above
//! the wire limits refused by the codec before they are buffered) carrying `wire::Message`s.
//!
//! Two ends of the same format: async halves (`LinkReader`, `LinkWriter`) for tasks on a tokio
//! runtime, and blocking ones (`BlockingReader`, `BlockingWriter`) for a thread that reads and
//! writes its links itself. A role's compute thread does the latter: a frame then costs one
//! wake-up per hop (the read returning) instead of three (reader task, compute thread, writer
//! task), which on a loaded two-core machine was most of a fleet's per-token overhead.

use std::io::{BufReader, Read, Write};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use super::wire::{Message, WireLimits};

fn codec(lim: &WireLimits) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .little_endian()
        .length_field_length(4)
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
        match TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) if t0.elapsed() >= timeout => {
                return Err(LinkError::Io {
                    peer: addr.to_string(),
                    source: e,
                })
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
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

/// The receiving half of a link, read by the thread that calls `recv` (blocking).
pub struct BlockingReader {
    inner: BufReader<std::net::TcpStream>,
    lim: WireLimits,
    buf: Vec<u8>,
    pub peer: String,
}

/// The sending half of a link, written by whichever thread calls `send_bytes` (blocking; one
/// message at a time, whole, under a lock).
pub struct BlockingWriter {
    inner: Mutex<(std::net::TcpStream, Vec<u8>)>,
    pub peer: String,
}

/// Take a tokio stream off its runtime as a blocking reader and writer of the same connection.
pub fn blocking(
    stream: TcpStream,
    lim: WireLimits,
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
    let w = s.try_clone().map_err(io)?;
    Ok((
        BlockingReader {
            inner: BufReader::with_capacity(1 << 16, s),
            lim,
            buf: Vec::new(),
            peer: peer.clone(),
        },
        BlockingWriter {
            inner: Mutex::new((w, Vec::new())),
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
        LinkError::Io {
            peer: self.peer.clone(),
            source,
        }
    }
}

impl BlockingWriter {
    /// Send one encoded message (length prefix and body in one write); returns its size on the
    /// wire.
    pub fn send_bytes(&self, b: &[u8]) -> Result<usize, LinkError> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (stream, frame) = &mut *g;
        frame.clear();
        frame.extend_from_slice(&(b.len() as u32).to_le_bytes());
        frame.extend_from_slice(b);
        stream.write_all(frame).map_err(|source| LinkError::Io {
            peer: self.peer.clone(),
            source,
        })?;
        Ok(frame.len())
    }
}
