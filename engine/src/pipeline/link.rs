//! Framed TCP links between roles: a length-delimited codec (little-endian u32 length, frames above
//! the wire limits refused by the codec before they are buffered) carrying `wire::Message`s.

use std::net::SocketAddr;
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
    let t0 = Instant::now();
    loop {
        match TcpStream::connect(addr).await {
            Ok(s) => return Ok(split(s, lim)),
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
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    match tokio::time::timeout(timeout, listener.accept()).await {
        Ok(Ok((s, addr))) => {
            let (r, w) = split(s, lim);
            Ok((r, w, addr))
        }
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
