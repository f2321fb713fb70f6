//! "Is the device's network working?" (seed `000` §3.3).
//!
//! A host is disabled for a connection failure only when the network itself works, otherwise
//! a phone in a lift would disable every host. The seed pings the public DNS servers of
//! `publicIpList`; ICMP needs privileges an app (and this library) does not have, so a TCP
//! connection to port 53 of each address stands in (the public DNS servers of the seed answer
//! DNS over TCP): a completed handshake with any of them means the network works. A refused
//! connection does not count, since a local firewall or captive network refuses on behalf of
//! hosts it cannot reach. The result is kept for a short time so a burst of failures probes
//! once.

use parking_lot::Mutex;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

#[derive(Debug)]
pub struct NetworkCheck {
    port: u16,
    timeout: Duration,
    remember: Duration,
    last: Mutex<Option<(Instant, Vec<IpAddr>, bool)>>,
}

impl NetworkCheck {
    pub fn new(port: u16, timeout: Duration, remember: Duration) -> Self {
        Self { port, timeout, remember, last: Mutex::new(None) }
    }

    /// Whether one of `public_ips` answers. An empty list means "assume it works": without
    /// the list there is no way to tell, and not failing over would be worse.
    pub async fn network_works(&self, public_ips: &[IpAddr]) -> bool {
        if public_ips.is_empty() {
            return true;
        }
        if let Some((at, ips, ok)) = self.last.lock().as_ref() {
            if at.elapsed() < self.remember && ips == public_ips {
                return *ok;
            }
        }
        let mut probes = tokio::task::JoinSet::new();
        for ip in public_ips {
            let (addr, timeout) = (SocketAddr::new(*ip, self.port), self.timeout);
            probes.spawn(async move {
                match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
                    Ok(Ok(_)) => true,
                    Ok(Err(_)) | Err(_) => false,
                }
            });
        }
        // The first working address settles it; dropping the set aborts the others.
        let mut ok = false;
        while let Some(r) = probes.join_next().await {
            if r.unwrap_or(false) {
                ok = true;
                break;
            }
        }
        *self.last.lock() = Some((Instant::now(), public_ips.to_vec(), ok));
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_handshake_means_working_and_a_refusal_does_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let check = NetworkCheck::new(port, Duration::from_millis(300), Duration::ZERO);
        assert!(check.network_works(&["127.0.0.1".parse().unwrap()]).await);
        // One of several is enough.
        assert!(check.network_works(&["127.0.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap()]).await);
        drop(listener);
        assert!(!check.network_works(&["127.0.0.1".parse().unwrap()]).await);
        assert!(check.network_works(&[]).await);
        // Results are remembered for `remember`.
        let cached = NetworkCheck::new(port, Duration::from_millis(300), Duration::from_secs(60));
        let l = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        assert!(cached.network_works(&["127.0.0.1".parse().unwrap()]).await);
        drop(l);
        assert!(cached.network_works(&["127.0.0.1".parse().unwrap()]).await);
    }
}
