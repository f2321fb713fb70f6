//! Stand-ins for the machines of the drill (CDN edge nodes, the load balancer in front of the
//! HTTPDNS service, a public address for the network check): real HTTP servers on loopback
//! that can be stopped, so connections are refused, and started again on the same address.

use parking_lot::Mutex;
use std::net::SocketAddr;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

pub(crate) struct StandIn {
    pub(crate) addr: SocketAddr,
    router: Router,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl StandIn {
    /// Binds `addr` (port 0 picks one) and serves `router`.
    pub(crate) async fn start(addr: SocketAddr, router: Router) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let s = Self { addr, router, task: Mutex::new(None) };
        s.run(listener);
        Ok(s)
    }

    fn run(&self, listener: TcpListener) {
        let router = self.router.clone();
        let task = tokio::spawn(async move {
            // Connections live in this set: aborting the task closes every one of them, so a
            // stopped stand-in looks like a dead machine, not like one that finishes its
            // keep-alive connections.
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((sock, _)) = accepted else { continue };
                        let svc = TowerToHyperService::new(router.clone());
                        conns.spawn(async move {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(sock), svc)
                                .await;
                        });
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        *self.task.lock() = Some(task);
    }

    /// Closes the listener and every connection: new connections are refused.
    pub(crate) fn stop(&self) {
        if let Some(t) = self.task.lock().take() {
            t.abort();
        }
    }

    /// Listens again on the same address.
    pub(crate) async fn restart(&self) {
        self.stop();
        // The aborted task drops its listener when it is next polled; retry the bind briefly.
        for _ in 0..100 {
            if let Ok(l) = TcpListener::bind(self.addr).await {
                self.run(l);
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("could not listen on {} again", self.addr);
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop();
    }
}
