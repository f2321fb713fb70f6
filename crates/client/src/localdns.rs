//! LocalDNS: the resolver the device would use without HTTPDNS, the fallback when the service
//! is down or answers nothing.
//!
//! `System` is the operating system's resolver (`getaddrinfo`, through tokio), which is what
//! an app gets. `Servers` asks given DNS servers directly over UDP (retrying over TCP is not
//! needed for A/AAAA answers of a few addresses); it is how a test or a drill points LocalDNS
//! at a server it controls, and how an app can pin a public resolver.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_proto::rr::{Name, RData, RecordType};

#[derive(Debug, Clone, Default)]
pub enum LocalDns {
    #[default]
    System,
    Servers(Vec<SocketAddr>),
    /// No fallback: the service's answer or nothing.
    Off,
}

impl LocalDns {
    /// The addresses of `name`, IPv4 first. Errors are strings: they are only reported.
    pub async fn lookup(&self, name: &str, timeout: Duration) -> Result<Vec<IpAddr>, String> {
        match self {
            LocalDns::Off => Err("LocalDNS fallback is off".into()),
            LocalDns::System => {
                let addrs = tokio::time::timeout(timeout, tokio::net::lookup_host((name, 0)))
                    .await
                    .map_err(|_| format!("system resolver timed out after {timeout:?}"))?
                    .map_err(|e| format!("system resolver: {e}"))?;
                let mut ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
                ips.sort_by_key(|ip| ip.is_ipv6());
                ips.dedup();
                Ok(ips)
            }
            LocalDns::Servers(servers) => {
                let mut last = String::from("no server configured");
                for server in servers {
                    let (v4, v6) = tokio::join!(
                        ask(*server, name, RecordType::A, timeout),
                        ask(*server, name, RecordType::AAAA, timeout)
                    );
                    match (v4, v6) {
                        (Err(e), Err(_)) => last = format!("{server}: {e}"),
                        (a, b) => {
                            let mut ips = a.unwrap_or_default();
                            ips.extend(b.unwrap_or_default());
                            return Ok(ips);
                        }
                    }
                }
                Err(last)
            }
        }
    }
}

async fn ask(
    server: SocketAddr,
    name: &str,
    qtype: RecordType,
    timeout: Duration,
) -> Result<Vec<IpAddr>, String> {
    let qname = Name::from_ascii(format!("{}.", name.trim_end_matches('.'))).map_err(|e| e.to_string())?;
    let q = httpdns_exchange::Question { name: qname, qtype, edns: None };
    let m = httpdns_exchange::exchange(server, &q, timeout).await.map_err(|e| e.to_string())?;
    Ok(m.answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UdpSocket;

    #[tokio::test]
    async fn system_resolver_answers_localhost() {
        let ips = LocalDns::System.lookup("localhost", Duration::from_secs(5)).await.unwrap();
        assert!(ips.iter().all(|ip| ip.is_loopback()), "{ips:?}");
        assert!(!ips.is_empty());
    }

    #[tokio::test]
    async fn off_is_an_error_and_a_silent_server_times_out() {
        assert!(LocalDns::Off.lookup("a.example.com", Duration::from_secs(1)).await.is_err());
        // A bound socket that never answers.
        let silent = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let dns = LocalDns::Servers(vec![silent.local_addr().unwrap()]);
        let err = dns.lookup("a.example.com", Duration::from_millis(200)).await.unwrap_err();
        assert!(err.contains("no answer within"), "{err}");
    }
}
