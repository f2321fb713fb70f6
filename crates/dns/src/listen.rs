//! Plain DNS over UDP and TCP on one address.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use httpdns_core::cidr::CidrTable;
use httpdns_net::registry::ConnState;
use httpdns_net::tls::TlsServer;
use httpdns_net::tracked::Tracked;
use httpdns_net::{ConnRegistry, ListenerMetrics, Timeouts};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;

use crate::answer::{Answer, Transport};
use crate::batch::Batch;
use crate::metrics::{DnsMetrics, Frontend};
use httpdns_net::proxied::ProxiedStream;
use httpdns_upstream::Upstream;

/// Answers one message from the snapshot: the caller supplies it.
pub type Handler = Arc<dyn Fn(&[u8], IpAddr, Transport) -> Option<Answer> + Send + Sync>;

/// The most UDP sockets [`bind_udp`] opens on one address.
pub const MAX_UDP_SOCKETS: usize = 8;

/// Binds UDP on `addr`: with a fixed port, one socket per CPU this process may use (at most
/// [`MAX_UDP_SOCKETS`]) sharing the port through `SO_REUSEPORT`, so the kernel spreads clients
/// over them, each served by a thread of its own ([`serve_udp`]); with port 0 (tests, ad-hoc
/// runs) a single socket on a port of its own, since a port picked for a reuse-port socket may
/// be one another such socket holds.
pub fn bind_udp(addr: SocketAddr) -> std::io::Result<Vec<UdpSocket>> {
    use nix::sys::socket::{
        bind, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage,
    };
    use std::os::fd::AsRawFd;
    if addr.port() == 0 {
        let socket = std::net::UdpSocket::bind(addr)?;
        socket.set_nonblocking(true)?;
        return Ok(vec![UdpSocket::from_std(socket)?]);
    }
    let count = std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_UDP_SOCKETS);
    let family = if addr.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 };
    (0..count)
        .map(|_| {
            let fd =
                socket(family, SockType::Datagram, SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC, None)?;
            setsockopt(&fd, sockopt::ReusePort, &true)?;
            bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
            UdpSocket::from_std(std::net::UdpSocket::from(fd))
        })
        .collect()
}

/// Serves UDP until `shutdown` (or until this future is dropped), on a thread of its own.
///
/// Why a thread and not a runtime task: a socket registered with the runtime's epoll keeps a
/// waiter on its wait queue for good, so the kernel runs a wake-up for every reply it frees
/// after sending (`sock_wfree`, the socket's write space) and for every query it queues; under
/// dnsperf the first alone was about 3% of the server's CPU (docs/benchmarks.md). The thread reads
/// what has queued ([`crate::batch`]) until the socket is empty and only then sleeps in
/// `poll(2)`, so while it is busy nothing waits on the socket and those wake-ups are skipped,
/// as in Knot's UDP workers. Questions that go upstream still run as runtime tasks.
pub async fn serve_udp(
    socket: UdpSocket,
    handler: Handler,
    upstream: Arc<Upstream>,
    metrics: Arc<DnsMetrics>,
    shutdown: CancellationToken,
) {
    let socket = match socket.into_std() {
        Ok(s) => Arc::new(s),
        Err(e) => {
            tracing::error!(error = %e, "DNS UDP socket could not leave the runtime.");
            return;
        }
    };
    let (stop_rx, stop_tx) = match std::os::unix::net::UnixDatagram::pair() {
        Ok(pair) => pair,
        Err(e) => {
            tracing::error!(error = %e, "No descriptors for the DNS UDP thread.");
            return;
        }
    };
    let stopped = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Handle::current();
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = Stop { flag: stopped.clone(), wake: stop_rx };
    let spawned = std::thread::Builder::new().name("dns-udp".into()).spawn(move || {
        udp_thread(&socket, &stop, &handler, &upstream, &metrics, &runtime);
        let _ = done_tx.send(());
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "The DNS UDP thread could not start.");
        return;
    }
    // Dropped when this future ends or is dropped: the thread stops either way.
    let _stop = StopOnDrop(Stop { flag: stopped, wake: stop_tx });
    tokio::select! {
        () = shutdown.cancelled() => {}
        _ = &mut done_rx => return,
    }
    drop(_stop);
    // The batch in progress finishes (microseconds); the thread then closes the socket.
    let _ = done_rx.await;
}

/// The UDP thread's stop signal: a flag it reads before every batch (a flood may never let
/// the socket empty) and one end of a socket pair whose byte wakes it from `poll`. The thread
/// holds the reading end; [`StopOnDrop`] the writing one.
struct Stop {
    flag: Arc<AtomicBool>,
    wake: std::os::unix::net::UnixDatagram,
}

/// Stops the UDP thread when dropped: sets its flag, then wakes it.
struct StopOnDrop(Stop);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.flag.store(true, Ordering::Relaxed);
        let _ = self.0.wake.send(&[1]);
    }
}

/// The longest one `poll` of the UDP thread sleeps (the stop byte stays readable until read,
/// so none is missed; the bound is there so that no wait is unbounded).
const UDP_POLL: Duration = Duration::from_secs(1);
/// The longest the UDP thread waits for send space for one batch's replies before it drops
/// the rest, as a lost datagram would be.
const UDP_SEND_WAIT: Duration = Duration::from_millis(200);

fn udp_thread(
    socket: &Arc<std::net::UdpSocket>,
    stop: &Stop,
    handler: &Handler,
    upstream: &Arc<Upstream>,
    metrics: &Arc<DnsMetrics>,
    runtime: &tokio::runtime::Handle,
) {
    let mut batch = Batch::new();
    let mut tally = metrics.tally(Frontend::Udp);
    while !stop.flag.load(Ordering::Relaxed) {
        let started = std::time::Instant::now();
        let answered = batch.exchange(socket, |query, peer| {
            // Answering from the snapshot is CPU-only and fast: done inline. Only upstream
            // questions become tasks, so a slow upstream never stalls the socket.
            match handler(query, peer.ip().to_canonical(), Transport::Udp) {
                Some(Answer::Reply(reply)) => {
                    tally.count(Some(reply.rcode));
                    Some(reply.bytes)
                }
                Some(Answer::Forward(f)) => {
                    let (socket, upstream, metrics) = (socket.clone(), upstream.clone(), metrics.clone());
                    runtime.spawn(async move {
                        let lookup = upstream.lookup(&f.name, f.qtype, f.client).await;
                        let reply = f.finish(lookup);
                        // Never waits: with the send buffer full the reply is dropped, as a
                        // lost datagram would be, and the client asks again.
                        let _ = socket.send_to(&reply.bytes, peer);
                        metrics.observe(Frontend::Udp, Some(reply.rcode), started);
                    });
                    None
                }
                None => {
                    tally.count(None);
                    None
                }
            }
        });
        match answered {
            Ok(rest) => {
                if !rest.is_empty() {
                    send_rest(socket, rest);
                }
                tally.flush(started.elapsed());
            }
            Err(e) => {
                if e.kind() != std::io::ErrorKind::WouldBlock {
                    tracing::debug!(error = %e, "DNS UDP receive failed.");
                }
                if !wait_readable(socket, &stop.wake) {
                    return;
                }
            }
        }
    }
}

/// Sleeps until `socket` has a datagram (true) or `stop` is signalled (false), waking at
/// least every [`UDP_POLL`].
fn wait_readable(socket: &std::net::UdpSocket, stop: &std::os::unix::net::UnixDatagram) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let mut fds =
        [PollFd::new(socket.as_fd(), PollFlags::POLLIN), PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
    let timeout = PollTimeout::try_from(UDP_POLL).unwrap_or(PollTimeout::MAX);
    match poll(&mut fds, timeout) {
        // Stopped when the stop socket has anything to say (its byte, or an error).
        Ok(_) => fds[1].revents().is_none_or(|r| r.is_empty()),
        // Interrupted: look again.
        Err(nix::errno::Errno::EINTR) => true,
        // Out of kernel memory and the like: look again after a pause rather than spin.
        Err(e) => {
            tracing::debug!(error = %e, "Waiting on the DNS UDP socket failed.");
            std::thread::sleep(Duration::from_millis(10));
            true
        }
    }
}

/// Sends the replies `sendmmsg` did not take, one by one, waiting for send space at most
/// [`UDP_SEND_WAIT`] in all; what is left then is dropped, as a lost datagram would be.
fn send_rest(socket: &std::net::UdpSocket, rest: Vec<(Vec<u8>, SocketAddr)>) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let deadline = std::time::Instant::now() + UDP_SEND_WAIT;
    for (bytes, peer) in rest {
        loop {
            match socket.send_to(&bytes, peer) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return;
                    }
                    let mut fds = [PollFd::new(socket.as_fd(), PollFlags::POLLOUT)];
                    let _ = poll(&mut fds, PollTimeout::try_from(left).unwrap_or(PollTimeout::ZERO));
                }
                // Sent, or refused for this peer alone: on to the next.
                _ => break,
            }
        }
    }
}

/// The connection rules of a DNS-over-TCP (or DNS-over-TLS) listener.
#[derive(Debug, Clone)]
pub struct TcpSettings {
    pub registry: Arc<ConnRegistry>,
    pub metrics: Arc<ListenerMetrics>,
    /// `header`: the first message (and the TLS handshake); `idle`: between messages (RFC 7766
    /// suggests seconds); `stalled`: a message in progress that moves no byte.
    pub timeouts: Timeouts,
    /// Peers whose PROXY protocol header names the client.
    pub trusted_proxies: Arc<CidrTable<()>>,
    /// DNS over TLS (RFC 7858) when set.
    pub tls: Option<Arc<TlsServer>>,
    pub dns_metrics: Arc<DnsMetrics>,
}

/// Serves TCP (RFC 7766 length-prefixed messages, several per connection), or DNS over TLS,
/// until `shutdown`. Connections are admitted and reaped by the process's registry.
pub async fn serve_tcp(
    listener: TcpListener,
    handler: Handler,
    upstream: Arc<Upstream>,
    settings: TcpSettings,
    shutdown: CancellationToken,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        settings.registry.accept_pause().await;
        tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(listener = settings.metrics.name, error = %e, "Accept failed.");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(admitted) = settings.registry.admit(peer.ip(), &settings.metrics, settings.timeouts) else {
                    continue;
                };
                let (handler, upstream, shutdown, settings) =
                    (handler.clone(), upstream.clone(), shutdown.clone(), settings.clone());
                conns.spawn(async move {
                    let state = admitted.state.clone();
                    let setup = async {
                        let (stream, client) =
                            httpdns_net::proxied::accept(stream, peer, &settings.trusted_proxies).await?;
                        let io = Tracked::new(stream, state.clone());
                        match &settings.tls {
                            None => Some((Stream::Plain(io), client)),
                            Some(tls) => match tls.accept(io).await {
                                Ok((io, _)) => Some((Stream::Tls(Box::new(io)), client)),
                                Err(e) => {
                                    settings.metrics.tls_failures.inc();
                                    tracing::debug!(%peer, error = %e, "DNS over TLS handshake failed.");
                                    None
                                }
                            },
                        }
                    };
                    let ready = tokio::select! {
                        r = tokio::time::timeout(settings.timeouts.header, setup) => r,
                        _ = state.closed() => return,
                    };
                    let Ok(Some((stream, client))) = ready else { return };
                    let (transport, frontend) = if settings.tls.is_some() {
                        (Transport::Encrypted, Frontend::Dot)
                    } else {
                        (Transport::Stream, Frontend::Tcp)
                    };
                    let counted = (frontend, settings.dns_metrics.as_ref());
                    tokio::select! {
                        () = connection(stream, client, transport, &state, handler, upstream, counted) => {}
                        _ = state.closed() => {}
                        () = shutdown.cancelled() => {}
                    }
                    drop(admitted);
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
}

/// A DNS connection's stream, plain or TLS.
enum Stream {
    Plain(Tracked<ProxiedStream>),
    Tls(Box<tokio_rustls::server::TlsStream<Tracked<ProxiedStream>>>),
}

impl Stream {
    async fn read_exact(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read_exact(buf).await,
            Stream::Tls(s) => s.read_exact(buf).await,
        }
    }

    async fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.write_all(buf).await,
            Stream::Tls(s) => {
                s.write_all(buf).await?;
                s.flush().await
            }
        }
    }
}

/// Answers messages until the peer closes or a read fails; the reaper bounds the waits.
async fn connection(
    mut stream: Stream,
    peer: SocketAddr,
    transport: Transport,
    state: &Arc<ConnState>,
    handler: Handler,
    upstream: Arc<Upstream>,
    (frontend, metrics): (Frontend, &DnsMetrics),
) {
    let mut len = [0u8; 2];
    loop {
        if stream.read_exact(&mut len).await.is_err() {
            return;
        }
        // The message is the request's head: while it arrives the reaper holds it to the
        // header timeout and the connection can be spared; a request begins once it is whole.
        let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if stream.read_exact(&mut msg).await.is_err() {
            return;
        }
        let _in_flight = state.begin();
        let started = std::time::Instant::now();
        let reply = match handler(&msg, peer.ip().to_canonical(), transport) {
            Some(Answer::Reply(r)) => r,
            Some(Answer::Forward(f)) => {
                let lookup = upstream.lookup(&f.name, f.qtype, f.client).await;
                f.finish(lookup)
            }
            None => {
                metrics.observe(frontend, None, started);
                return;
            }
        };
        metrics.observe(frontend, Some(reply.rcode), started);
        let Ok(n) = u16::try_from(reply.bytes.len()) else { return };
        let mut out = Vec::with_capacity(reply.bytes.len() + 2);
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(&reply.bytes);
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}
