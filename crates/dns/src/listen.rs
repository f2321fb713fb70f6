//! Plain DNS over UDP and TCP on one address.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use httpdns_core::cidr::CidrTable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;

use crate::answer::{Answer, Transport};
use crate::proxied::ProxiedStream;
use crate::upstream::Upstream;

/// Answers one message from the snapshot: the caller supplies it.
pub type Handler = Arc<dyn Fn(&[u8], IpAddr, Transport) -> Option<Answer> + Send + Sync>;

/// How long an idle TCP connection is kept.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// Serves UDP until `shutdown`.
pub async fn serve_udp(
    socket: UdpSocket,
    handler: Handler,
    upstream: Arc<Upstream>,
    shutdown: CancellationToken,
) {
    let socket = Arc::new(socket);
    let mut buf = vec![0u8; 65_535];
    loop {
        let (n, peer) = tokio::select! {
            () = shutdown.cancelled() => return,
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(error = %e, "DNS UDP receive failed.");
                    continue;
                }
            },
        };
        // Answering from the snapshot is CPU-only and fast: done inline, no task per packet.
        // Only upstream questions get a task, so a slow upstream never stalls the socket.
        match handler(&buf[..n], peer.ip().to_canonical(), Transport::Udp) {
            Some(Answer::Reply(reply)) => {
                let _ = socket.send_to(&reply.bytes, peer).await;
            }
            Some(Answer::Forward(f)) => {
                let (socket, upstream) = (socket.clone(), upstream.clone());
                tokio::spawn(async move {
                    let lookup = upstream.lookup(&f.name, f.qtype, f.client).await;
                    let _ = socket.send_to(&f.finish(lookup).bytes, peer).await;
                });
            }
            None => {}
        }
    }
}

/// Serves TCP (RFC 7766 length-prefixed messages, several per connection) until `shutdown`.
/// Connections from `trusted_proxies` may start with a PROXY protocol header naming the client.
pub async fn serve_tcp(
    listener: TcpListener,
    handler: Handler,
    upstream: Arc<Upstream>,
    trusted_proxies: Arc<CidrTable<()>>,
    shutdown: CancellationToken,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                let (handler, upstream, shutdown, trusted) =
                    (handler.clone(), upstream.clone(), shutdown.clone(), trusted_proxies.clone());
                conns.spawn(async move {
                    if let Some((stream, client)) = crate::proxied::accept(stream, peer, &trusted).await {
                        connection(stream, client, handler, upstream, shutdown).await;
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
}

async fn connection(
    mut stream: ProxiedStream,
    peer: SocketAddr,
    handler: Handler,
    upstream: Arc<Upstream>,
    shutdown: CancellationToken,
) {
    let mut len = [0u8; 2];
    loop {
        let read = tokio::select! {
            () = shutdown.cancelled() => return,
            r = tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut len)) => r,
        };
        if !matches!(read, Ok(Ok(_))) {
            return;
        }
        let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if !matches!(tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut msg)).await, Ok(Ok(_))) {
            return;
        }
        let reply = match handler(&msg, peer.ip().to_canonical(), Transport::Stream) {
            Some(Answer::Reply(r)) => r,
            Some(Answer::Forward(f)) => {
                let lookup = upstream.lookup(&f.name, f.qtype, f.client).await;
                f.finish(lookup)
            }
            None => return,
        };
        let Ok(n) = u16::try_from(reply.bytes.len()) else { return };
        let mut out = Vec::with_capacity(reply.bytes.len() + 2);
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(&reply.bytes);
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}
