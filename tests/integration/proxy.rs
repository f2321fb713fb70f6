//! The PROXY protocol (v1, v2) on the API and DNS TCP listeners: believed from configured
//! proxies only.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::Message;
use hickory_proto::rr::{RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{env, Db, Server};

async fn server(trusted: &str) -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_TRUSTED_PROXIES".into(), trusted.into());
    e.insert("HTTPDNS_DNS_ADDR".into(), "127.0.0.1:0".into());
    let s = Server::start_with(e, None).await;
    s.seed().await;
    (s, tmp)
}

/// Sends `prefix` then `bytes` on one connection and returns all that comes back.
async fn exchange(addr: SocketAddr, prefix: &[u8], bytes: &[u8]) -> Vec<u8> {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&[prefix, bytes].concat()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    out
}

fn api_addr(s: &Server) -> SocketAddr {
    s.base.trim_start_matches("http://").parse().unwrap()
}

const GET: &[u8] = b"GET /d?dn=www.example.com&clientip=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

fn body(resp: &[u8]) -> String {
    let text = String::from_utf8_lossy(resp);
    text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned()
}

fn v2_tcp4(src: [u8; 4], port: u16) -> Vec<u8> {
    let mut h = httpdns_core::proxy_header::V2_SIGNATURE.to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0, 12]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&[127, 0, 0, 1]);
    h.extend_from_slice(&port.to_be_bytes());
    h.extend_from_slice(&80u16.to_be_bytes());
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_believes_proxy_headers_from_trusted_proxies_only() {
    let (s, _tmp) = server("127.0.0.0/8").await;
    let addr = api_addr(&s);
    // v1: a Unicom client in Shanghai gets Unicom nodes, and is echoed.
    let resp = exchange(addr, b"PROXY TCP4 1.0.2.7 127.0.0.1 40000 80\r\n", GET).await;
    assert_eq!(body(&resp), "2.2.2.1;2.2.2.2|1.0.2.7", "{}", String::from_utf8_lossy(&resp));
    // v2: a Telecom client in Beijing.
    let resp = exchange(addr, &v2_tcp4([1, 0, 1, 7], 40001), GET).await;
    assert_eq!(body(&resp), "1.1.1.1;1.1.1.2|1.0.1.7");
    // v2 LOCAL and v1 UNKNOWN keep the connection's address.
    let mut local = httpdns_core::proxy_header::V2_SIGNATURE.to_vec();
    local.extend_from_slice(&[0x20, 0x00, 0, 0]);
    assert!(body(&exchange(addr, &local, GET).await).ends_with("|127.0.0.1"));
    assert!(body(&exchange(addr, b"PROXY UNKNOWN\r\n", GET).await).ends_with("|127.0.0.1"));
    // A trusted proxy may also send no header at all.
    assert!(body(&exchange(addr, b"", GET).await).ends_with("|127.0.0.1"));
    // A malformed header closes the connection without an answer.
    assert!(exchange(addr, b"PROXY TCP4 1.0.2.7 nonsense\r\n", GET).await.is_empty());
    // Ordinary clients are unaffected.
    assert_eq!(s.get("/healthz").await.status(), 200);

    // From an address that is not a trusted proxy, a header is just bad HTTP.
    let (s, _tmp) = server("10.0.0.0/8").await;
    let resp = exchange(api_addr(&s), b"PROXY TCP4 1.0.2.7 127.0.0.1 40000 80\r\n", GET).await;
    let text = String::from_utf8_lossy(&resp);
    assert!(!text.contains("1.0.2.7") && !text.starts_with("HTTP/1.1 200"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_over_tcp_believes_proxy_headers_from_trusted_proxies() {
    let (s, _tmp) = server("127.0.0.1").await;
    let q = httpdns_dns::build_query(7, "www.example.com.", RecordType::A, None).unwrap();
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    let addrs = |resp: Vec<u8>| {
        let m = Message::from_vec(&resp[2..]).unwrap();
        m.answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0.to_string()),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let dns = s.dns.unwrap();
    // The connection is held open by the server after one answer; read what arrives.
    let one = |prefix: Vec<u8>, framed: Vec<u8>| async move {
        let mut c = tokio::net::TcpStream::connect(dns).await.unwrap();
        c.write_all(&[prefix, framed].concat()).await.unwrap();
        let mut len = [0u8; 2];
        tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut len)).await.unwrap().unwrap();
        let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
        c.read_exact(&mut msg).await.unwrap();
        [len.to_vec(), msg].concat()
    };
    let unicom = addrs(one(b"PROXY TCP4 1.0.2.7 127.0.0.1 40000 53\r\n".to_vec(), framed.clone()).await);
    assert_eq!(unicom, ["2.2.2.1", "2.2.2.2"]);
    let telecom = addrs(one(v2_tcp4([1, 0, 1, 7], 40001), framed.clone()).await);
    assert_eq!(telecom, ["1.1.1.1", "1.1.1.2"]);
}
