use std::sync::Arc;

use httpdns_core::model::{HealthCheckKind, HealthCheckMethod, HealthCheckSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

fn spec(kind: HealthCheckKind, port: u16) -> HealthCheckSpec {
    HealthCheckSpec {
        kind,
        port,
        path: Some("/health".into()),
        method: HealthCheckMethod::Get,
        sni: None,
        interval_ms: 1000,
        timeout_ms: 500,
        healthy_threshold: 1,
        unhealthy_threshold: 1,
        expected_status: Vec::new(),
        body_match: None,
    }
}

/// A TLS server with a fresh self-signed certificate answering `status`.
async fn tls_server(status: u16) -> SocketAddr {
    let cert = rcgen::generate_simple_self_signed(vec!["node.example".into()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(sock).await else { return };
                let mut buf = [0u8; 1024];
                let n = tls.read(&mut buf).await.unwrap_or(0);
                assert!(buf[..n].starts_with(b"GET /health HTTP/1.1\r\n"));
                let resp = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn https_checks_pass_on_2xx_and_fail_otherwise() {
    let ok = tls_server(204).await;
    assert!(probe(ok, &spec(HealthCheckKind::Https, ok.port())).await.is_ok());
    let mut with_sni = spec(HealthCheckKind::Https, ok.port());
    with_sni.sni = Some(httpdns_core::DomainName::parse("node.example").unwrap());
    assert!(probe(ok, &with_sni).await.is_ok());
    let failing = tls_server(503).await;
    assert_eq!(
        probe(failing, &spec(HealthCheckKind::Https, failing.port())).await,
        Err(ProbeError::Status(503))
    );
}

#[tokio::test]
async fn https_against_plain_http_fails_the_handshake() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await;
        }
    });
    assert!(matches!(probe(addr, &spec(HealthCheckKind::Https, addr.port())).await, Err(ProbeError::Tls(_))));
    assert!(probe(addr, &spec(HealthCheckKind::Http, addr.port())).await.is_ok());
}

#[tokio::test]
async fn tcp_refused_and_stalled() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    assert!(matches!(
        probe(addr, &spec(HealthCheckKind::Tcp, addr.port())).await,
        Err(ProbeError::Connect(_))
    ));
    // Accepts but never answers an HTTP request: a timeout.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    assert!(probe(addr, &spec(HealthCheckKind::Tcp, addr.port())).await.is_ok());
    assert_eq!(probe(addr, &spec(HealthCheckKind::Http, addr.port())).await, Err(ProbeError::Timeout));
}

/// A plain HTTP server answering every request with `response`, then closing.
async fn http_server(response: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(response.as_bytes()).await;
            let _ = s.shutdown().await;
        }
    });
    addr
}

#[tokio::test]
async fn expected_statuses_and_body_match_decide() {
    let moved = http_server("HTTP/1.1 301 Moved\r\nContent-Length: 0\r\n\r\n").await;
    let mut check = spec(HealthCheckKind::Http, moved.port());
    assert_eq!(probe(moved, &check).await, Err(ProbeError::Status(301)), "the default is 2xx");
    check.expected_status = vec![200, 301];
    assert!(probe(moved, &check).await.is_ok());

    let body = http_server("HTTP/1.1 200 OK\r\nContent-Length: 18\r\n\r\n{\"status\":\"ready\"}").await;
    let mut check = spec(HealthCheckKind::Http, body.port());
    check.body_match = Some("\"ready\"".into());
    assert!(probe(body, &check).await.is_ok());
    check.body_match = Some("draining".into());
    assert_eq!(probe(body, &check).await, Err(ProbeError::BodyMismatch));
    // The marker in a header is not in the body.
    let header = http_server("HTTP/1.1 200 OK\r\nX-State: ready\r\nContent-Length: 2\r\n\r\nno").await;
    let mut check = spec(HealthCheckKind::Http, header.port());
    check.body_match = Some("ready".into());
    assert_eq!(probe(header, &check).await, Err(ProbeError::BodyMismatch));
}
