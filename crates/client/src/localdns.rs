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

/// Why LocalDNS gave no addresses.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalDnsError {
    #[error("LocalDNS fallback is off")]
    Off,
    #[error("system resolver timed out after {0:?}")]
    SystemTimeout(Duration),
    #[error("system resolver: {0}")]
    System(#[source] std::io::Error),
    #[error("no server configured")]
    NoServer,
    /// The last configured server asked gave no answer (the others did not either).
    #[error("{server}: {source}")]
    Server {
        server: SocketAddr,
        #[source]
        source: AskError,
    },
}

/// Why one server gave no answer to one question.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// The name is not one a DNS question can carry.
    #[error("{0}")]
    Name(#[source] hickory_proto::ProtoError),
    /// The exchange with the server failed (no answer in time, or a broken one).
    #[error("{0}")]
    Exchange(#[source] httpdns_exchange::ExchangeError),
}

impl LocalDns {
    /// The addresses of `name`, IPv4 first.
    pub async fn lookup(&self, name: &str, timeout: Duration) -> Result<Vec<IpAddr>, LocalDnsError> {
        match self {
            LocalDns::Off => Err(LocalDnsError::Off),
            LocalDns::System => {
                let addrs = tokio::time::timeout(timeout, tokio::net::lookup_host((name, 0)))
                    .await
                    .map_err(|_| LocalDnsError::SystemTimeout(timeout))?
                    .map_err(LocalDnsError::System)?;
                let mut ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
                ips.sort_by_key(|ip| ip.is_ipv6());
                ips.dedup();
                Ok(ips)
            }
            LocalDns::Servers(servers) => {
                let mut last = LocalDnsError::NoServer;
                for server in servers {
                    let (v4, v6) = tokio::join!(
                        ask(*server, name, RecordType::A, timeout),
                        ask(*server, name, RecordType::AAAA, timeout)
                    );
                    match (v4, v6) {
                        (Err(source), Err(_)) => last = LocalDnsError::Server { server: *server, source },
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
) -> Result<Vec<IpAddr>, AskError> {
    let qname = Name::from_ascii(format!("{}.", name.trim_end_matches('.'))).map_err(AskError::Name)?;
    let q = httpdns_exchange::Question { name: qname, qtype, edns: None };
    let m = httpdns_exchange::exchange(server, &q, timeout).await.map_err(AskError::Exchange)?;
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
        let err = dns.lookup("a.example.com", Duration::from_millis(200)).await.unwrap_err().to_string();
        assert!(err.contains("no answer within"), "{err}");
    }
}
