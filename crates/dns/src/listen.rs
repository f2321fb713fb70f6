//! Plain DNS over UDP and TCP on one address.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio_util::sync::CancellationToken;

use crate::answer::{Reply, Transport};

/// Answers one message: the caller supplies the snapshot-backed handler.
pub type Handler = Arc<dyn Fn(&[u8], IpAddr, Transport) -> Option<Reply> + Send + Sync>;

/// How long an idle TCP connection is kept.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// Serves UDP until `shutdown`.
pub async fn serve_udp(socket: UdpSocket, handler: Handler, shutdown: CancellationToken) {
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
        // Answering is CPU-only and fast: done inline, no task per packet.
        if let Some(reply) = handler(&buf[..n], peer.ip().to_canonical(), Transport::Udp) {
            let _ = socket.send_to(&reply.bytes, peer).await;
        }
    }
}

/// Serves TCP (RFC 7766 length-prefixed messages, several per connection) until `shutdown`.
pub async fn serve_tcp(listener: TcpListener, handler: Handler, shutdown: CancellationToken) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                conns.spawn(connection(stream, peer, handler.clone(), shutdown.clone()));
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
}

async fn connection(mut stream: TcpStream, peer: SocketAddr, handler: Handler, shutdown: CancellationToken) {
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
        let Some(reply) = handler(&msg, peer.ip().to_canonical(), Transport::Stream) else { return };
        let Ok(n) = u16::try_from(reply.bytes.len()) else { return };
        let mut out = Vec::with_capacity(reply.bytes.len() + 2);
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(&reply.bytes);
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}
