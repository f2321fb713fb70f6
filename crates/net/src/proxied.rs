//! Accepting TCP connections that may start with a PROXY protocol header (v1 or v2).
//!
//! The header is believed only from configured proxy addresses; from anyone else the stream
//! is passed on untouched (a client cannot claim another address by sending a header). From a
//! trusted proxy the first bytes are read — with a deadline, on the connection's own task, so
//! a slow proxy holds up nobody — and either a header is consumed and its source address used,
//! or there is none and the bytes read are replayed to the protocol handler. A malformed
//! header closes the connection.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use httpdns_core::cidr::CidrTable;
use httpdns_core::proxy_header::{self, Parsed, V1_MAX, V2_MAX_BODY};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How long a trusted proxy may take to send its header.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// A TCP stream with the bytes read while looking for a header put back in front.
#[derive(Debug)]
pub struct ProxiedStream {
    prefix: Vec<u8>,
    at: usize,
    inner: TcpStream,
}

impl ProxiedStream {
    pub fn plain(inner: TcpStream) -> Self {
        Self { prefix: Vec::new(), at: 0, inner }
    }

    pub fn get_ref(&self) -> &TcpStream {
        &self.inner
    }
}

impl crate::tracked::OverTcp for ProxiedStream {
    fn tcp(&self) -> &TcpStream {
        &self.inner
    }
}

/// The client's address for a connection from `peer`, and the stream to serve. `None`: close
/// it (a bad or missing-in-time header from a trusted proxy).
pub async fn accept(
    mut stream: TcpStream,
    peer: SocketAddr,
    trusted: &CidrTable<()>,
) -> Option<(ProxiedStream, SocketAddr)> {
    if trusted.lookup(peer.ip().to_canonical()).is_none() {
        return Some((ProxiedStream::plain(stream), peer));
    }
    let mut buf = Vec::with_capacity(256);
    let read = tokio::time::timeout(HEADER_TIMEOUT, async {
        let mut chunk = [0u8; 256];
        loop {
            match proxy_header::parse(&buf) {
                Parsed::Incomplete => {}
                other => return Some(other),
            }
            if buf.len() > 16 + V2_MAX_BODY.max(V1_MAX) {
                return Some(Parsed::Invalid("header too long"));
            }
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    match read {
        Ok(Some(Parsed::NotProxy)) => Some((ProxiedStream { prefix: buf, at: 0, inner: stream }, peer)),
        Ok(Some(Parsed::Header { len, source })) => {
            let client = source.map_or(peer, |s| SocketAddr::new(s.ip().to_canonical(), s.port()));
            Some((ProxiedStream { prefix: buf, at: len, inner: stream }, client))
        }
        Ok(Some(Parsed::Invalid(why))) => {
            tracing::debug!(%peer, why, "Closing a proxied connection with a bad PROXY header.");
            None
        }
        _ => None,
    }
}

impl AsyncRead for ProxiedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = (self.prefix.len() - self.at).min(out.remaining());
            let at = self.at;
            out.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            if self.at == self.prefix.len() {
                self.prefix = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, out)
    }
}

impl AsyncWrite for ProxiedStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
