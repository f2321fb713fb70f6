//! A file-backed body (`httpdns_net::sendfile`) leaves a plain HTTP/1.1 connection from its
//! file, and a TLS connection, or a plain one whose file fails, from memory. In service the two
//! hold the same bytes; here they differ, so each response shows which path it took. Real
//! clients: a raw socket with pipelined requests, and curl over TLS.

use std::io::Write as _;
use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use httpdns_core::cidr::CidrTable;
use httpdns_net::http::{Answer, Head, HttpListener, Shortcut};
use httpdns_net::{ConnLimits, ConnRegistry, NetMetrics, Timeouts};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

/// Larger than the loopback socket buffers: the sender waits for the reader mid-body.
const LEN: usize = 8 << 20;
const SLICE: std::ops::Range<usize> = 100_000..3_000_000;

fn file_bytes() -> Vec<u8> {
    (0..LEN).map(|i| (i % 251) as u8).collect()
}

struct Serve(Bytes);

impl Shortcut for Serve {
    fn answer(&self, head: &Head<'_>) -> Option<Answer> {
        let body = match head.uri.path() {
            "/whole" => self.0.clone(),
            "/slice" => self.0.slice(SLICE),
            _ => return None,
        };
        Some(Answer::Ready(axum::http::Response::new(body)))
    }
}

fn listen(
    body: Bytes,
    tls: Option<Arc<httpdns_net::tls::TlsServer>>,
    shutdown: &CancellationToken,
) -> (std::net::SocketAddr, Arc<httpdns_net::ListenerMetrics>) {
    let listener = httpdns_net::bind_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let none = Arc::new(CidrTable::new([]));
    let metrics = NetMetrics::new(&prometheus::Registry::new()).listener("mirror");
    let settings = HttpListener {
        registry: ConnRegistry::new(ConnLimits::for_descriptors(4096), none.clone()),
        metrics: metrics.clone(),
        timeouts: Timeouts::default(),
        trusted_proxies: none,
        tls,
    };
    let app = httpdns_net::http::App { router: axum::Router::new(), shortcut: Some(Arc::new(Serve(body))) };
    tokio::spawn(httpdns_net::http::serve(listener, settings, app, shutdown.clone()));
    (addr, metrics)
}

/// The bodies of the responses in `raw`, in order (each with a `content-length`).
fn bodies(mut raw: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while !raw.is_empty() {
        let end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
        let head = std::str::from_utf8(&raw[..end]).unwrap().to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{head}");
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .expect("a length")
            .trim()
            .parse()
            .unwrap();
        out.push(&raw[end..end + len]);
        raw = &raw[end + len..];
    }
    out
}

/// `GET first` and `GET second` pipelined on one connection (closed after the second), read
/// to the end after a pause.
async fn pipelined(addr: std::net::SocketAddr, first: &str, second: &str) -> Vec<u8> {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let requests = format!(
        "GET {first} HTTP/1.1\r\nhost: t\r\n\r\nGET {second} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n"
    );
    conn.write_all(requests.as_bytes()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let mut raw = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(20), conn.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    raw
}

fn curl(args: &[&str]) -> Vec<u8> {
    let out = Command::new("curl").args(["-sS", "--max-time", "20"]).args(args).output().unwrap();
    assert!(out.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http1_sends_file_backed_bodies_from_the_file() {
    if !crate::tls::have_all(&["curl", "openssl"]) {
        httpdns_test_support::skipped("sendfile tests", "curl or openssl is not installed");
        return;
    }
    let on_disk = file_bytes();
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(&on_disk).unwrap();
    let in_memory = vec![b'm'; LEN];
    let body = httpdns_net::sendfile::Budget::new(4).file_backed(in_memory.clone(), Arc::new(file), 0);
    let shutdown = CancellationToken::new();
    let (addr, metrics) = listen(body.clone(), None, &shutdown);

    // Two pipelined requests on one connection; the reader starts late, so the server's
    // socket fills and the sends resume on readiness.
    let raw = pipelined(addr, "/whole", "/slice").await;
    let got = bodies(&raw);
    assert_eq!(got.len(), 2);
    assert!(got[0] == on_disk, "the whole body came from the file");
    assert!(got[1] == &on_disk[SLICE], "a slice came from the file at its offset");
    // All but the last bytes of each, which a short remainder may take from memory.
    let sent = metrics.sendfile_bytes.get();
    assert!(sent as usize > LEN + SLICE.len() - 32_768, "{sent}");

    // A file cut behind the store's back (here: empty): the sends fail, and the same
    // connection gets the whole body from memory, twice.
    let cut = httpdns_net::sendfile::Budget::new(4).file_backed(
        in_memory.clone(),
        Arc::new(tempfile::tempfile().unwrap()),
        0,
    );
    let (cut_addr, cut_metrics) = listen(cut, None, &shutdown);
    let raw = pipelined(cut_addr, "/whole", "/slice").await;
    let got = bodies(&raw);
    assert!(got[0] == in_memory && got[1] == &in_memory[SLICE], "from memory, whole and sliced");
    assert_eq!(cut_metrics.sendfile_bytes.get(), 0);

    // TLS seals its records from memory.
    let dir = tempfile::tempdir().unwrap();
    let ca = crate::tls::TestCa::new(dir.path());
    let (cert, key) = ca.leaf("leaf", "127.0.0.1", "IP:127.0.0.1", 30);
    let certs = httpdns_net::tls::TlsCerts::load(&cert, &key, &prometheus::Registry::new()).unwrap();
    let tls = httpdns_net::tls::TlsServer::new(certs, &[b"http/1.1"]).unwrap();
    let (tls_addr, tls_metrics) = listen(body, Some(tls), &shutdown);
    let ca_path = ca.ca();
    let over_tls = curl(&["--cacert", ca_path.to_str().unwrap(), &format!("https://{tls_addr}/slice")]);
    assert!(over_tls == in_memory[SLICE], "TLS records are sealed from memory");
    assert_eq!(tls_metrics.sendfile_bytes.get(), 0);
    shutdown.cancel();
}
