//! The API listener when proxies are trusted: connections from them may start with a PROXY
//! protocol header (v1 or v2) naming the client, which then becomes the connection's address
//! (`ConnectInfo`) for everything downstream, classification and rate limits included.
//!
//! Accepting runs on its own task and each header is read on the connection's own task, so a
//! proxy that is slow to send its header never delays other connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use httpdns_core::cidr::CidrTable;
use httpdns_dns::proxied::{self, ProxiedStream};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// An `axum` listener yielding connections with their header already handled.
pub(crate) struct ProxyListener {
    rx: mpsc::Receiver<(ProxiedStream, SocketAddr)>,
    local: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl Drop for ProxyListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl ProxyListener {
    pub(crate) fn new(listener: TcpListener, trusted: Arc<CidrTable<()>>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        // A few ready connections may wait for axum; more wait in the kernel's backlog.
        let (tx, rx) = mpsc::channel(64);
        let acceptor = tokio::spawn(async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: wait instead of spinning.
                        tracing::warn!(error = %e, "API accept failed.");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (tx, trusted) = (tx.clone(), trusted.clone());
                tokio::spawn(async move {
                    if let Some(accepted) = proxied::accept(stream, peer, &trusted).await {
                        let _ = tx.send(accepted).await;
                    }
                });
            }
        });
        Ok(Self { rx, local, acceptor })
    }
}

impl axum::serve::Listener for ProxyListener {
    type Io = ProxiedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(accepted) => accepted,
            // The acceptor only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
