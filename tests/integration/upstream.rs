//! Names that are not managed here, resolved through an upstream DNS server that the test runs
//! on loopback and that records the client subnet it is sent.

use parking_lot::Mutex;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use reqwest::StatusCode;
use tokio::net::UdpSocket;

use crate::support::{eventually, Db, Server};

/// What the fake upstream saw: (name, client subnet).
pub(crate) type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// An authoritative-looking server: `*.partner.example` A records, 9.9.9.1 for clients in
/// 1.0.2.0/24 and 9.9.9.2 otherwise, with `ttl`; `nx.partner.example` is NXDOMAIN. Each
/// answer is delayed by `delay`, so concurrent askers really overlap.
pub(crate) async fn fake_upstream(
    addr: SocketAddr,
    ttl: u32,
    delay: Duration,
    seen: Seen,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let sock = Arc::new(UdpSocket::bind(addr).await.unwrap());
    let bound = sock.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, from)) = sock.recv_from(&mut buf).await else { return };
            let Ok(q) = Message::from_vec(&buf[..n]) else { continue };
            let subnet = q.edns.as_ref().and_then(|e| match e.option(EdnsCode::Subnet) {
                Some(EdnsOption::Subnet(s)) => Some(format!("{}/{}", s.addr(), s.source_prefix())),
                _ => None,
            });
            let question = q.queries[0].clone();
            let name = question.name().to_ascii();
            seen.lock().push((name.clone(), subnet.clone()));
            let (sock, delay) = (sock.clone(), delay);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let mut r = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
                r.metadata.recursion_available = true;
                r.add_query(question.clone());
                if name.starts_with("nx.") {
                    r.metadata.response_code = ResponseCode::NXDomain;
                } else if question.query_type() == RecordType::A {
                    let ip =
                        if subnet.as_deref() == Some("1.0.2.0/24") { [9, 9, 9, 1] } else { [9, 9, 9, 2] };
                    r.add_answer(Record::from_rdata(question.name().clone(), ttl, RData::A(A(ip.into()))));
                    // An address that must never reach a client.
                    r.add_answer(Record::from_rdata(
                        question.name().clone(),
                        ttl,
                        RData::A(A([0, 0, 0, 0].into())),
                    ));
                }
                let _ = sock.send_to(&r.to_vec().unwrap(), from).await;
            });
        }
    });
    (bound, task)
}

async fn server_with_upstream(upstream: SocketAddr) -> (Server, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    env.insert("HTTPDNS_UPSTREAMS".into(), upstream.to_string());
    env.insert("HTTPDNS_DNS_ADDR".into(), "127.0.0.1:0".into());
    let file = "[upstream]\nmin_ttl = 1\ntimeout_ms = 300\nstale_ms = 60000\n";
    let s = Server::start_with(env, Some(file)).await;
    s.seed().await;
    (s, tmp)
}

fn count(seen: &Seen, name: &str) -> usize {
    seen.lock().iter().filter(|(n, _)| n == name).count()
}

#[tokio::test]
async fn upstream_answers_with_client_subnet_cache_and_single_flight() {
    let seen: Seen = Arc::default();
    let (up, _task) =
        fake_upstream("127.0.0.1:0".parse().unwrap(), 300, Duration::from_millis(200), seen.clone()).await;
    let (s, _tmp) = server_with_upstream(up).await;

    let resp = s.get("/d?dn=a.partner.example&ip=1.0.2.77&ttl=1").await;
    assert_eq!(resp.headers()["x-httpdns-status"], "upstream");
    let body = resp.text().await.unwrap();
    assert!(body.starts_with("9.9.9.1,"), "{body} (and never 0.0.0.0)");
    assert_eq!(seen.lock()[0], ("a.partner.example.".to_owned(), Some("1.0.2.0/24".to_owned())));
    // Another client subnet is another cache entry; the same one is a hit.
    assert!(s.text("/d?dn=a.partner.example&ip=8.8.8.8").await.starts_with("9.9.9.2"));
    assert!(s.text("/d?dn=a.partner.example&ip=1.0.2.5").await.starts_with("9.9.9.1"));
    assert_eq!(count(&seen, "a.partner.example."), 2);
    // A private client address is never sent upstream.
    s.text("/d?dn=b.partner.example&ip=10.1.2.3").await;
    assert_eq!(seen.lock().last().unwrap(), &("b.partner.example.".to_owned(), None));

    // 200 concurrent askers of one uncached name: one upstream query.
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let (http, url) = (s.http.clone(), s.url("/d?dn=c.partner.example&ip=1.0.2.9"));
        tasks.push(tokio::spawn(async move { http.get(url).send().await.unwrap().text().await.unwrap() }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), "9.9.9.1");
    }
    assert_eq!(count(&seen, "c.partner.example."), 1, "one upstream query for 200 askers");
    // The cache results are exported: one miss fetched, the other askers coalesced on it (or
    // hit the cache once it was filled), and the earlier repeat was a hit.
    let metrics = s.text("/metrics").await;
    let value = |result: &str| -> u64 {
        let key = format!("httpdns_upstream_cache_total{{result=\"{result}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(&key)).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    assert_eq!(value("miss"), 4, "a (twice: two subnets), b, c\n{metrics}");
    assert_eq!(value("hit") + value("coalesced"), 199 + 1, "{metrics}");
    assert_eq!(value("error") + value("stale"), 0);

    // /resolve and plain DNS use the same resolver.
    let body: serde_json::Value =
        s.get("/resolve?host=a.partner.example&ip=1.0.2.77").await.json().await.unwrap();
    assert_eq!(body["dns"][0]["ips"], serde_json::json!(["9.9.9.1"]));
    let q = httpdns_dns::build_query(
        5,
        "a.partner.example.",
        RecordType::A,
        Some(("1.0.2.0".parse::<IpAddr>().unwrap(), 24)),
    )
    .unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(&q, s.dns.unwrap()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let (n, _) =
        tokio::time::timeout(Duration::from_secs(5), sock.recv_from(&mut buf)).await.unwrap().unwrap();
    let m = Message::from_vec(&buf[..n]).unwrap();
    assert!(m.metadata.recursion_available && !m.metadata.authoritative);
    assert_eq!(m.answers.len(), 1);
    // A question in mixed case (0x20) gets its own spelling back, in the question and the
    // answer's owner name (resolvers that randomise case match by it).
    let q = httpdns_dns::build_query(7, "A.PaRtNeR.eXaMpLe.", RecordType::A, None).unwrap();
    sock.send_to(&q, s.dns.unwrap()).await.unwrap();
    let (n, _) =
        tokio::time::timeout(Duration::from_secs(5), sock.recv_from(&mut buf)).await.unwrap().unwrap();
    let m = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!(m.queries[0].name().to_string(), "A.PaRtNeR.eXaMpLe.");
    assert_eq!(m.answers.len(), 1);
    assert_eq!(m.answers[0].name.to_string(), "A.PaRtNeR.eXaMpLe.", "{m:?}");
    // NXDOMAIN passes through and is cached.
    let q = httpdns_dns::build_query(6, "nx.partner.example.", RecordType::A, None).unwrap();
    sock.send_to(&q, s.dns.unwrap()).await.unwrap();
    let (n, _) =
        tokio::time::timeout(Duration::from_secs(5), sock.recv_from(&mut buf)).await.unwrap().unwrap();
    assert_eq!(Message::from_vec(&buf[..n]).unwrap().metadata.response_code, ResponseCode::NXDomain);
    s.text("/d?dn=nx.partner.example").await;
    assert_eq!(count(&seen, "nx.partner.example."), 1, "negative answers are cached");
}

#[tokio::test]
async fn upstream_down_serves_stale_fails_new_names_cleanly_and_recovers() {
    let seen: Seen = Arc::default();
    let (up, task) = fake_upstream("127.0.0.1:0".parse().unwrap(), 1, Duration::ZERO, seen.clone()).await;
    let (s, _tmp) = server_with_upstream(up).await;
    assert!(s.text("/d?dn=stale.partner.example&ip=1.0.2.7").await.starts_with("9.9.9.1"));
    task.abort();
    let _ = task.await;
    // Past its 1 s TTL, with the upstream gone: the expired answer is served, marked stale,
    // with a 30 s TTL (RFC 8767).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let resp = s.get("/d?dn=stale.partner.example&ip=1.0.2.7&ttl=1").await;
    assert_eq!(resp.headers()["x-httpdns-status"], "upstream-stale");
    assert_eq!(resp.text().await.unwrap(), "9.9.9.1,30");
    let resp = s.get("/d?dn=fresh.partner.example&ip=1.0.2.7").await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["x-httpdns-status"], "upstream-error");
    assert_eq!(resp.text().await.unwrap(), "");
    let resp = s.get("/resolve?host=fresh.partner.example").await;
    assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(resp.json::<serde_json::Value>().await.unwrap()["code"], "InternalError");

    // The upstream comes back on the same address.
    let (_, _task) = fake_upstream(up, 300, Duration::ZERO, seen.clone()).await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            s.text("/d?dn=fresh.partner.example&ip=1.0.2.7").await.starts_with("9.9.9.1")
        })
        .await
    );
}

#[tokio::test]
async fn popular_names_are_refreshed_ahead_of_expiry() {
    let seen: Seen = Arc::default();
    let (up, _task) =
        fake_upstream("127.0.0.1:0".parse().unwrap(), 4, Duration::from_millis(50), seen.clone()).await;
    let (s, _tmp) = server_with_upstream(up).await;
    let started = std::time::Instant::now();
    let ask = || s.text("/d?dn=hot.partner.example&ip=1.0.2.9");
    assert_eq!(ask().await, "9.9.9.1");
    assert_eq!(count(&seen, "hot.partner.example."), 1);
    // Early in the TTL: a plain cache hit.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(ask().await, "9.9.9.1");
    assert_eq!(count(&seen, "hot.partner.example."), 1, "no refresh before 75% of the TTL");
    // Past 75% of the 4 s TTL: answered from the cache, and refreshed in the background.
    tokio::time::sleep(Duration::from_millis(3200).saturating_sub(started.elapsed())).await;
    assert_eq!(ask().await, "9.9.9.1");
    assert!(
        eventually(Duration::from_secs(1), || async { count(&seen, "hot.partner.example.") == 2 }).await,
        "a background refresh"
    );
    // Past the original expiry the refreshed entry answers: no query of its own.
    tokio::time::sleep(Duration::from_millis(4500).saturating_sub(started.elapsed())).await;
    assert_eq!(ask().await, "9.9.9.1");
    assert_eq!(count(&seen, "hot.partner.example."), 2, "the refreshed entry is still fresh after 4 s");
}
