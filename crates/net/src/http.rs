//! Serving an axum `Router` on a TCP listener with the process's connection rules: admission
//! by the [`ConnRegistry`], the reaper's timeouts, PROXY headers from trusted proxies, and a
//! graceful close (HTTP/2 `GOAWAY`, HTTP/1.1 after the response in progress).
//!
//! This replaces `axum::serve`, which has no header or idle timeout and no connection cap:
//! 20,000 sockets sending half a header line each once exhausted the process's descriptors.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use futures_util::future::Either;
use http_body::{Body as HttpBody, Frame, SizeHint};
use httpdns_core::cidr::CidrTable;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::metrics::ListenerMetrics;
use crate::registry::{
    Admitted, BodyWait, ConnHandle, ConnRegistry, ConnState, Held, InFlight, Refused, Signal, Timeouts,
};
use crate::sendfile::{self, Plan};
use crate::tls::TlsServer;
use crate::tracked::Tracked;

/// Largest request head (and read buffer) of an HTTP/1.1 connection: bigger heads get 431.
const MAX_HEAD_BYTES: usize = 64 << 10;
/// Streams one HTTP/2 connection may have open at once.
const MAX_H2_STREAMS: u32 = 128;
/// Bytes of a stream's response HTTP/2 buffers beyond the client's window (hyper's default is
/// 400 KiB): a stream whose client opened no window holds this and one body chunk.
const MAX_H2_SEND_BUF: usize = 64 << 10;

/// Whether a request came over TLS, and for which server name: an extension on every
/// request of a TLS listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secure {
    /// The SNI name the client asked for, if any.
    pub server_name: Option<String>,
}

/// The address a connection reached on this host (its socket's local address): an extension
/// on every routed request, for answers that name the server itself (`/ss` on a server that
/// announces no public address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalAddr(pub SocketAddr);

/// One HTTP listener's settings.
#[derive(Clone)]
pub struct HttpListener {
    pub registry: Arc<ConnRegistry>,
    pub metrics: Arc<ListenerMetrics>,
    pub timeouts: Timeouts,
    /// Peers whose PROXY protocol header (v1 or v2) names the client.
    pub trusted_proxies: Arc<CidrTable<()>>,
    /// TLS on this listener, when it is an HTTPS one.
    pub tls: Option<Arc<TlsServer>>,
}

impl std::fmt::Debug for HttpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpListener")
            .field("listener", &self.metrics.name)
            .field("timeouts", &self.timeouts)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// The head of a request offered to a [`Shortcut`]: what it may read, borrowed from hyper's
/// request before it becomes an axum one.
#[derive(Debug)]
pub struct Head<'a> {
    pub method: &'a axum::http::Method,
    pub uri: &'a axum::http::Uri,
    pub headers: &'a axum::http::HeaderMap,
    /// The client's socket address (after a trusted PROXY header), as `ConnectInfo` carries
    /// it for routed requests.
    pub peer: SocketAddr,
    /// Set on a TLS listener.
    pub secure: Option<&'a Secure>,
}

/// Answers the hottest requests (a `GET /d`, a config `GET`, a mirror hit from memory: no
/// request body, the answer in memory or, rarely, after a wait of its own) before the router
/// sees them. Per request, the router costs a boxed
/// request and response body, an extension map, the route table and a clone of the route's
/// boxed service: for a request answered in a few hundred nanoseconds that is a fifth of the
/// user-space time. Returns `None` for everything else, which then goes to the router
/// unchanged, so a shortcut only ever answers what the routed handler would answer the same.
pub trait Shortcut: Send + Sync + 'static {
    fn answer(&self, head: &Head<'_>) -> Option<Answer>;
}

/// A response as one buffer.
pub type Whole = axum::http::Response<Bytes>;

/// A shortcut's answer: at once, or after a wait of its own (a name asked upstream).
pub enum Answer {
    Ready(Whole),
    Later(Pin<Box<dyn std::future::Future<Output = Whole> + Send>>),
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ready(r) => f.debug_tuple("Ready").field(r).finish(),
            Self::Later(_) => f.write_str("Later(..)"),
        }
    }
}

/// What a listener serves: a router, and optionally a [`Shortcut`] tried first.
#[derive(Clone)]
pub struct App {
    pub router: axum::Router,
    pub shortcut: Option<Arc<dyn Shortcut>>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("router", &self.router)
            .field("shortcut", &self.shortcut.as_ref().map(|_| ".."))
            .finish()
    }
}

impl From<axum::Router> for App {
    fn from(router: axum::Router) -> Self {
        Self { router, shortcut: None }
    }
}

/// Serves `app` on `listener` until `shutdown`, then lets the requests in progress finish.
pub async fn serve(
    listener: TcpListener,
    settings: HttpListener,
    app: impl Into<App>,
    shutdown: CancellationToken,
) {
    let app: App = app.into();
    let mut conns = JoinSet::new();
    loop {
        settings.registry.accept_pause().await;
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            a = listener.accept() => a,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: wait instead of spinning.
                tracing::warn!(listener = settings.metrics.name, error = %e, "Accept failed.");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let admitted = match settings.registry.admit(peer.ip(), &settings.metrics, settings.timeouts) {
            Ok(a) => a,
            Err(why) => {
                if settings.tls.is_none() {
                    refuse(&stream, why);
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        conns.spawn(connection(stream, peer, admitted, settings.clone(), app.clone()));
    }
    // No more connections: closing the socket refuses those the kernel would queue unserved.
    drop(listener);
    // Each connection finishes the request it is answering and closes (the process bounds
    // the wait).
    settings.registry.drain(&settings.metrics);
    while conns.join_next().await.is_some() {}
}

/// The answer to an HTTP/2 stream past the connection caps.
fn refused_stream(why: Refused) -> Whole {
    let (status, msg): (_, &'static [u8]) = match why {
        Refused::Full => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            b"{\"code\":\"TooManyConnections\",\"error\":\"the server has no connection free\"}",
        ),
        Refused::PerAddress => (
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            b"{\"code\":\"TooManyConnections\",\"error\":\"too many streams from this address\"}",
        ),
    };
    let mut r = axum::http::Response::new(Bytes::from_static(msg));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
    h.insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
    r
}

/// A short answer before closing a refused plain-HTTP connection; best effort, never waits.
fn refuse(stream: &TcpStream, why: Refused) {
    let response: &[u8] = match why {
        Refused::Full => {
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 73\r\nretry-after: 1\r\nconnection: close\r\n\r\n{\"code\":\"TooManyConnections\",\"error\":\"the server has no connection free\"}"
        }
        Refused::PerAddress => {
            b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: 77\r\nretry-after: 1\r\nconnection: close\r\n\r\n{\"code\":\"TooManyConnections\",\"error\":\"too many connections from this address\"}"
        }
    };
    let _ = stream.try_write(response);
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    admitted: Admitted,
    settings: HttpListener,
    app: App,
) {
    let state = admitted.state.clone();
    let handle = admitted.handle();
    // Boxed: a connection's HTTP state is allocated when its task first runs, not in the
    // accept loop. Until the first bytes arrive, hyper-util waits on a 24-byte buffer (it reads
    // the HTTP/2 preface to choose the protocol), so a silent socket holds no read buffer.
    Box::pin(serve_connection(stream, peer, (state, handle), settings, app)).await;
    drop(admitted);
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    (state, handle): (Arc<ConnState>, ConnHandle),
    settings: HttpListener,
    app: App,
) {
    let local = stream.local_addr().ok().map(LocalAddr);
    // The PROXY header and the TLS handshake are part of the connection's first request, so
    // they fall under its header timeout (the reaper's, and this bound in case of a slow peer).
    let setup = async {
        let (stream, client) = crate::proxied::accept(stream, peer, &settings.trusted_proxies).await?;
        let io = Tracked::new(stream, state.clone());
        match &settings.tls {
            None => Some((Io::Plain(io, settings.metrics.sendfile_bytes.clone()), client, None)),
            Some(tls) => match tls.accept(io).await {
                Ok((io, secure)) => Some((Io::Tls(Box::new(io)), client, Some(secure))),
                Err(e) => {
                    settings.metrics.tls_failures.inc();
                    tracing::debug!(%peer, error = %e, "TLS handshake failed.");
                    None
                }
            },
        }
    };
    let ready = tokio::select! {
        r = tokio::time::timeout(settings.timeouts.header, setup) => r,
        _ = state.signalled() => return,
    };
    let (io, client, secure) = match ready {
        Ok(Some(r)) => r,
        Ok(None) => return,
        Err(_) => {
            if settings.tls.is_some() {
                settings.metrics.tls_failures.inc();
            }
            return;
        }
    };
    let conn_state = state.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        // A stream beside others on one HTTP/2 connection is a unit of its own against the
        // caps (each can hold a file and buffers): past them it is answered at once.
        let extra = if req.version() == axum::http::Version::HTTP_2 {
            conn_state.set_multiplexed();
            (conn_state.in_flight() > 0).then(|| handle.hold())
        } else {
            None
        };
        let in_flight = conn_state.begin();
        let held = match extra {
            Some(Err(why)) => {
                let resp = refused_stream(why).map(|b| Counted {
                    body: Reply::Full(Some(b)),
                    _held: None,
                    in_flight,
                });
                return Either::Left(std::future::ready(Ok::<_, Infallible>(resp)));
            }
            Some(Ok(held)) => Some(held),
            None => None,
        };
        let shortcut = app.shortcut.as_ref().and_then(|s| {
            s.answer(&Head {
                method: req.method(),
                uri: req.uri(),
                headers: req.headers(),
                peer: client,
                secure: secure.as_ref(),
            })
        });
        let routed = match shortcut {
            Some(resp) => Err(resp),
            None => {
                let state = conn_state.clone();
                let mut req = req.map(|body| Body::new(Upload { body, state, wait: None }));
                req.extensions_mut().insert(ConnectInfo(client));
                req.extensions_mut().insert(handle.clone());
                if let Some(l) = local {
                    req.extensions_mut().insert(l);
                }
                if let Some(s) = &secure {
                    req.extensions_mut().insert(s.clone());
                }
                Ok((app.router.clone(), req))
            }
        };
        Either::Right(async move {
            let counted = |body| Counted { body, _held: held, in_flight };
            let resp = match routed {
                Err(Answer::Ready(resp)) => resp.map(|b| counted(Reply::Full(Some(b)))),
                Err(Answer::Later(wait)) => wait.await.map(|b| counted(Reply::Full(Some(b)))),
                Ok((router, req)) => {
                    let resp = router.oneshot(req).await.unwrap_or_else(|e: Infallible| match e {});
                    resp.map(|body| counted(Reply::Routed(body)))
                }
            };
            Ok::<_, Infallible>(resp)
        })
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().max_buf_size(MAX_HEAD_BYTES).half_close(false);
    builder
        .http2()
        .max_concurrent_streams(MAX_H2_STREAMS)
        .max_header_list_size(MAX_HEAD_BYTES as u32)
        .max_send_buf_size(MAX_H2_SEND_BUF);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    // Biased: polled on every wake-up of the connection, the connection first; the signal is
    // one atomic waker, no lock.
    let signal = tokio::select! {
        biased;
        _ = conn.as_mut() => return,
        s = state.signalled() => s,
    };
    match signal {
        // Timed out or evicted: such a connection has no request in progress (a busy one is
        // only told after it stalled), so it goes at once and its descriptor with it.
        Signal::Close(_) => {}
        Signal::Drain => {
            // Shutting down: the requests in progress finish; the process bounds the wait
            // (its grace period), since the reaper stops with the same shutdown.
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                biased;
                _ = conn.as_mut() => {}
                _ = state.closed() => {}
            }
        }
    }
}

/// The connection's stream: plain (with the bytes it sent from files counted) or TLS, both
/// tracked. Plain writes of [file-backed](crate::sendfile) bodies go out with `sendfile`.
enum Io {
    Plain(Tracked<crate::proxied::ProxiedStream>, prometheus::IntCounter),
    Tls(Box<tokio_rustls::server::TlsStream<Tracked<crate::proxied::ProxiedStream>>>),
}

impl tokio::io::AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s, _) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            io @ Io::Plain(..) => Pin::new(io).poll_write_vectored(cx, &[std::io::IoSlice::new(buf)]),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s, from_files) => match sendfile::plan(bufs) {
                Plan::Memory => Pin::new(s).poll_write_vectored(cx, bufs),
                Plan::Before(n) => s.poll_send(cx, |tcp| sendfile::send_more(tcp, &bufs[..n])),
                Plan::File { body, file, offset, len } => {
                    match s.poll_send(cx, |tcp| sendfile::send_span(tcp, &file, offset, len)) {
                        Poll::Ready(Ok(n)) => {
                            from_files.inc_by(n as u64);
                            Poll::Ready(Ok(n))
                        }
                        // The file's side failed (no sendfile on its file system, a file cut
                        // short): the same bytes go from memory.
                        Poll::Ready(Err(e)) if !sendfile::is_socket_error(&e) => {
                            sendfile::failed(body, &e);
                            Pin::new(s).poll_write_vectored(cx, bufs)
                        }
                        other => other,
                    }
                }
            },
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(s, _) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s, _) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s, _) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A response body that keeps its request counted as in progress until it is sent or dropped,
/// so a download that is still streaming is never taken for an idle connection, and tells the
/// reaper when its frames move.
struct Counted {
    body: Reply,
    /// The unit of an HTTP/2 stream beside others, released with the stream.
    _held: Option<Held>,
    in_flight: InFlight,
}

/// A shortcut's whole body (taken when sent), or the router's.
enum Reply {
    Full(Option<Bytes>),
    Routed(Body),
}

impl HttpBody for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let frame = match &mut this.body {
            Reply::Full(b) => Poll::Ready(b.take().filter(|b| !b.is_empty()).map(|b| Ok(Frame::data(b)))),
            Reply::Routed(body) => Pin::new(body).poll_frame(cx),
        };
        if let Poll::Ready(Some(Ok(_))) = &frame {
            this.in_flight.state().note_moved();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        match &self.body {
            Reply::Full(b) => b.as_ref().is_none_or(Bytes::is_empty),
            Reply::Routed(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.body {
            Reply::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Reply::Routed(body) => body.size_hint(),
        }
    }
}

/// A request body that tells the reaper when the handler waits for bytes the client has not
/// sent, and when they arrive: a body that stops arriving, or arrives a byte every few seconds,
/// is the client's delay, with timeouts of its own, and its connection can be spared.
struct Upload {
    body: Incoming,
    state: Arc<ConnState>,
    wait: Option<BodyWait>,
}

impl HttpBody for Upload {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        match &frame {
            Poll::Pending => {
                if this.wait.is_none() {
                    this.wait = Some(this.state.wait_body());
                }
            }
            Poll::Ready(r) => {
                this.wait = None;
                if matches!(r, Some(Ok(_))) {
                    this.state.note_moved();
                }
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
