//! One probe of one node: a TCP connect, or an HTTP/1.1 request whose status must be 2xx.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use httpdns_core::model::{HealthCheckKind, HealthCheckMethod, HealthCheckSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why a probe failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeError {
    Timeout,
    Connect(String),
    Io(String),
    BadResponse,
    Status(u16),
}

/// Probes `addr` as `check` says. Returns the TCP connect time on success: it is the probe's
/// latency sample, independent of how long the health endpoint takes to compute its answer.
pub async fn probe(addr: SocketAddr, check: &HealthCheckSpec) -> Result<Duration, ProbeError> {
    let timeout = Duration::from_millis(check.timeout_ms);
    tokio::time::timeout(timeout, run(addr, check)).await.map_err(|_| ProbeError::Timeout)?
}

async fn run(addr: SocketAddr, check: &HealthCheckSpec) -> Result<Duration, ProbeError> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).await.map_err(|e| ProbeError::Connect(e.to_string()))?;
    let connect = started.elapsed();
    // Close with a reset instead of leaving the socket in TIME_WAIT: at hundreds of probes a
    // second, TIME_WAIT sockets pile up by the ten thousand in the kernel's tables. A zero
    // linger never blocks on drop, which is what the deprecation warns about.
    #[allow(deprecated)]
    let _ = stream.set_linger(Some(Duration::ZERO));
    if check.kind == HealthCheckKind::Tcp {
        return Ok(connect);
    }
    let _ = stream.set_nodelay(true);
    let method = match check.method {
        HealthCheckMethod::Get => "GET",
        HealthCheckMethod::Head => "HEAD",
    };
    let path = check.path.as_deref().unwrap_or("/");
    let host = match addr {
        SocketAddr::V4(a) => a.to_string(),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: httpdns-health-check/1\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.map_err(|e| ProbeError::Io(e.to_string()))?;
    // Only the status line matters; read until its end (bounded).
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !buf.windows(2).any(|w| w == b"\r\n") {
        if buf.len() > 1024 {
            return Err(ProbeError::BadResponse);
        }
        let n = stream.read(&mut chunk).await.map_err(|e| ProbeError::Io(e.to_string()))?;
        if n == 0 {
            return Err(ProbeError::BadResponse);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = std::str::from_utf8(&buf).map_err(|_| ProbeError::BadResponse)?;
    let mut parts = line.split(' ');
    let version = parts.next().unwrap_or("");
    let status = parts.next().and_then(|s| s.parse::<u16>().ok());
    match (version.starts_with("HTTP/1."), status) {
        (true, Some(code)) if (200..300).contains(&code) => Ok(connect),
        (true, Some(code)) => Err(ProbeError::Status(code)),
        _ => Err(ProbeError::BadResponse),
    }
}
