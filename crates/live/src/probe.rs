//! One probe of one node: a TCP connect, or an HTTP/1.1 request (optionally over TLS) whose
//! status must be 2xx or one of `expected_status`, and whose body must hold `body_match` when
//! the check has one (searched in the first [`MAX_BODY`] bytes after the header, as sent: a
//! chunked body's size lines are not removed, which a short marker almost never straddles).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use httpdns_core::model::{HealthCheckKind, HealthCheckMethod, HealthCheckSpec};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why a probe failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeError {
    Timeout,
    Connect(String),
    Tls(String),
    Io(String),
    BadResponse,
    Status(u16),
    /// The body did not hold `body_match`.
    BodyMismatch,
}

/// How much of a response a check with `body_match` reads at most (header included).
pub const MAX_BODY: usize = 64 * 1024;

/// Probes `addr` as `check` says. Returns the TCP connect time on success: it is the probe's
/// latency sample, independent of how long the health endpoint takes to compute its answer.
pub async fn probe(addr: SocketAddr, check: &HealthCheckSpec) -> Result<Duration, ProbeError> {
    let timeout = Duration::from_millis(check.timeout_ms);
    tokio::time::timeout(timeout, run(addr, check)).await.map_err(|_| ProbeError::Timeout)?
}

async fn run(addr: SocketAddr, check: &HealthCheckSpec) -> Result<Duration, ProbeError> {
    let started = Instant::now();
    let stream = TcpStream::connect(addr).await.map_err(|e| ProbeError::Connect(e.to_string()))?;
    let connect = started.elapsed();
    // Close with a reset instead of leaving the socket in TIME_WAIT: at hundreds of probes a
    // second, TIME_WAIT sockets pile up by the ten thousand in the kernel's tables. A zero
    // linger never blocks on drop, which is what the deprecation warns about.
    #[allow(deprecated, reason = "a zero linger never blocks on drop (see above)")]
    let _ = stream.set_linger(Some(Duration::ZERO));
    let _ = stream.set_nodelay(true);
    match check.kind {
        HealthCheckKind::Tcp => Ok(connect),
        HealthCheckKind::Http => http_status(stream, addr, check).await.map(|()| connect),
        HealthCheckKind::Https => {
            let name = match &check.sni {
                Some(d) => {
                    ServerName::try_from(d.as_str().to_owned()).map_err(|e| ProbeError::Tls(e.to_string()))?
                }
                None => ServerName::IpAddress(addr.ip().into()),
            };
            let tls = tokio_rustls::TlsConnector::from(tls_config())
                .connect(name, stream)
                .await
                .map_err(|e| ProbeError::Tls(e.to_string()))?;
            http_status(tls, addr, check).await.map(|()| connect)
        }
    }
}

/// Sends the request and reads the status line (bounded).
async fn http_status<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    addr: SocketAddr,
    check: &HealthCheckSpec,
) -> Result<(), ProbeError> {
    let method = match check.method {
        HealthCheckMethod::Get => "GET",
        HealthCheckMethod::Head => "HEAD",
    };
    let path = check.path.as_deref().unwrap_or("/");
    let host = match (&check.sni, addr) {
        (Some(name), _) => name.to_string(),
        (None, SocketAddr::V4(a)) => a.to_string(),
        (None, SocketAddr::V6(a)) => format!("[{}]:{}", a.ip(), a.port()),
    };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: httpdns-health-check/1\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.map_err(|e| ProbeError::Io(e.to_string()))?;
    stream.flush().await.map_err(|e| ProbeError::Io(e.to_string()))?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 4096];
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
    let line_end = buf.windows(2).position(|w| w == b"\r\n").unwrap_or(buf.len());
    let line = std::str::from_utf8(&buf[..line_end]).map_err(|_| ProbeError::BadResponse)?;
    let mut parts = line.split(' ');
    let version = parts.next().unwrap_or("");
    let status = parts.next().and_then(|s| s.parse::<u16>().ok());
    let (true, Some(code)) = (version.starts_with("HTTP/1."), status) else {
        return Err(ProbeError::BadResponse);
    };
    let expected = if check.expected_status.is_empty() {
        (200..300).contains(&code)
    } else {
        check.expected_status.contains(&code)
    };
    if !expected {
        return Err(ProbeError::Status(code));
    }
    let Some(needle) = check.body_match.as_deref().map(str::as_bytes) else { return Ok(()) };
    // Read until the marker shows up after the header, the server closes, or the bound.
    loop {
        if let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            if buf[head_end + 4..].windows(needle.len()).any(|w| w == needle) {
                return Ok(());
            }
        }
        if buf.len() >= MAX_BODY {
            return Err(ProbeError::BodyMismatch);
        }
        let room = chunk.len().min(MAX_BODY - buf.len());
        let n = stream.read(&mut chunk[..room]).await.map_err(|e| ProbeError::Io(e.to_string()))?;
        if n == 0 {
            return Err(ProbeError::BodyMismatch);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The TLS client of `https` checks: any certificate is accepted, since nodes are probed by
/// address and the check is about liveness, not identity (like a load balancer's checks).
fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    // The handshake signatures are still checked: a peer must hold the key of the
    // certificate it presents, whatever that certificate is.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests;
