//! A stream that tells its connection's [`ConnState`] when bytes move, for the reaper, and
//! resets (rather than closes) a connection the server dropped for taking too long or to
//! make room.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::registry::ConnState;

/// A stream over a TCP socket, whose socket options can be set.
pub trait OverTcp {
    fn tcp(&self) -> &tokio::net::TcpStream;
}

impl OverTcp for tokio::net::TcpStream {
    fn tcp(&self) -> &tokio::net::TcpStream {
        self
    }
}

/// `S` with every successful read and write noted (two relaxed stores, no clock read).
#[derive(Debug)]
pub struct Tracked<S: OverTcp> {
    inner: S,
    state: Arc<ConnState>,
}

impl<S: OverTcp> Tracked<S> {
    pub fn new(inner: S, state: Arc<ConnState>) -> Self {
        Self { inner, state }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Runs `write` (a non-blocking send on the socket itself, past any wrapper: `sendfile`,
    /// `sendmsg` with flags) when the socket can take bytes, as a `poll_write` would.
    pub(crate) fn poll_send(
        &self,
        cx: &mut Context<'_>,
        mut write: impl FnMut(&tokio::net::TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        let tcp = self.inner.tcp();
        loop {
            std::task::ready!(tcp.poll_write_ready(cx))?;
            match tcp.try_io(tokio::io::Interest::WRITABLE, || write(tcp)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Ok(n) => {
                    if n > 0 {
                        self.state.note_write();
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl<S: OverTcp> Drop for Tracked<S> {
    /// A connection closed for a header timeout, a stall or to make room is reset (SO_LINGER 0,
    /// as nginx's `reset_timedout_connection`): neither side keeps it in TIME_WAIT, which a
    /// flood would otherwise fill with tens of thousands of sockets. Idle keep-alive ones and
    /// everything else close normally.
    fn drop(&mut self) {
        if self.state.reset_on_close() {
            let _ = socket2::SockRef::from(self.inner.tcp()).set_linger(Some(std::time::Duration::ZERO));
        }
    }
}

impl<S: OverTcp + AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.state.note_read();
        }
        r
    }
}

impl<S: OverTcp + AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.state.note_write();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.state.note_write();
        }
        r
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
