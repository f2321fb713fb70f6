//! Reliability under hostile load, against the real binary: floods and the soak test.
//!
//! A binary of its own, so its floods (tens of thousands of sockets, a busy CPU) never run
//! beside the integration suite's timing-sensitive tests; its own tests run one at a time.

#![allow(clippy::print_stderr, reason = "the floods report what they measured")]

#[path = "../integration/origin.rs"]
#[allow(dead_code, reason = "shared with the integration suite, which uses all of it")]
mod origin;
#[path = "../integration/support.rs"]
#[allow(dead_code, reason = "shared with the integration suite, which uses all of it")]
mod support;

mod floods;
mod images;
mod longpoll;

use std::time::{Duration, Instant};

use support::{env, Admin, Db, Process};

/// The descriptor limit of the flooded server.
const DESCRIPTORS: u32 = 4096;

/// The tests here each load the whole machine: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The binary under load: the release build, as operators run it (an unoptimised build spends
/// ten times the CPU per connection, and a flood then measures the compiler's settings, not
/// the server). `.ci/run` builds it first, in `CARGO_TARGET_DIR` when that is set (a target
/// directory shared between checkouts); `HTTPDNS_RELEASE_BIN` names another.
fn release_binary() -> Option<std::path::PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let bin = std::env::var_os("HTTPDNS_RELEASE_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| target.join("release/httpdns"));
    if bin.is_file() {
        return Some(bin);
    }
    httpdns_test_support::skipped(
        "reliability floods and soak",
        &format!("no release build at {} (cargo build --release; .ci/run does)", bin.display()),
    );
    None
}

/// A flood of half-sent requests (and silent sockets) on the API and mirror listeners, from a
/// hundred source addresses each, twice as many connections as the server may open
/// descriptors, while a patient client keeps asking `/healthz`, `/d`, a stored mirror copy and
/// DNS over TCP on fresh connections: every one of those is answered, and the server's memory
/// comes back down once the flood ends.
///
/// The server runs with 4,096 descriptors (`prlimit`), so the flood is 8,000 connections: the
/// same fault as 20,000 against the 20,000 of this machine's limit (which is how it was
/// reported), at a scale this machine's loopback can churn without the kernel itself dropping
/// the patient client's SYNs for seconds. `docs/reliability.md` has the 20,000-connection run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_flood_leaves_every_front_end_answering() {
    let _one = ONE_AT_A_TIME.lock().await;
    let origin = origin::RunningOrigin::start().await;
    origin.origin.put("/a.txt", b"hello from the origin".to_vec(), "text/plain");
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    e.insert("HTTPDNS_DNS_ADDR".into(), "127.0.0.1:0".into());
    let Some(bin) = release_binary() else { return };
    let p = Process::spawn_binary(
        std::path::Path::new("prlimit"),
        &e,
        tmp.path(),
        &[&format!("--nofile={DESCRIPTORS}:{DESCRIPTORS}"), "--", bin.to_str().unwrap(), "serve"],
    );
    let admin = Admin::new(&p.base);
    seed(&admin).await;
    admin
        .put(
            "/admin/v1/mirror/rules/static",
            serde_json::json!({"path_prefix": "/static", "origin": origin.url()}),
        )
        .await;
    let mirror = format!("http://{}/static/a.txt", p.mirror.unwrap());
    let dns = p.addr_of("dns").unwrap();
    // Fresh connections for every probe, as mobile clients make them.
    let probe = httpdns_test_support::http::client_builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    assert_eq!(probe.get(&mirror).send().await.unwrap().text().await.unwrap(), "hello from the origin");
    for _ in 0..50 {
        probe.get(format!("{}/healthz", p.base)).send().await.unwrap();
    }
    let baseline = rss_kib(&p);

    let flood = |addr: std::net::SocketAddr, sources: &str, extra: &[&str]| {
        std::process::Command::new("python3")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/slowloris.py"))
            .args([
                addr.to_string(),
                (DESCRIPTORS as usize).to_string(),
                "20".into(),
                "--sources".into(),
                sources.into(),
            ])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs the flood")
    };
    let api_addr: std::net::SocketAddr = p.base.trim_start_matches("http://").parse().unwrap();
    let floods = [
        flood(api_addr, "127.0.1.1-127.0.1.100", &[]),
        flood(p.mirror.unwrap(), "127.0.2.1-127.0.2.100", &["--silent"]),
    ];
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut peak = 0;
    let mut latencies: Vec<(&str, Duration)> = Vec::new();
    let until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < until {
        for (what, url) in [
            ("healthz", format!("{}/healthz", p.base)),
            ("d", format!("{}/d?dn=www.example.com&ip=1.0.2.7", p.base)),
            ("mirror", mirror.clone()),
        ] {
            let started = Instant::now();
            let resp =
                probe.get(&url).send().await.unwrap_or_else(|e| panic!("{what} during the flood: {e:?}"));
            assert_eq!(resp.status(), 200, "{what}");
            let body = resp.text().await.unwrap();
            assert!(!body.is_empty(), "{what}");
            latencies.push((what, started.elapsed()));
        }
        let started = Instant::now();
        assert!(dns_over_tcp(dns, "www.example.com.").await, "DNS over TCP during the flood");
        latencies.push(("dns_tcp", started.elapsed()));
        peak = peak.max(rss_kib(&p));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut stats = Vec::new();
    for f in floods {
        let out = f.wait_with_output().unwrap();
        let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        stats.push(
            serde_json::from_str::<serde_json::Value>(&line).unwrap_or_else(|_| panic!("flood: {line}")),
        );
    }
    // The flood really held thousands of connections, and the server shed them.
    for s in &stats {
        assert!(s["opened"].as_u64().unwrap() >= u64::from(DESCRIPTORS), "{s}");
        assert!(s["closed_by_server"].as_u64().unwrap() > 0, "{s}");
    }
    let metrics = probe.get(format!("{}/metrics", p.base)).send().await.unwrap().text().await.unwrap();
    let counter = |needle: &str| -> u64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    assert!(
        counter("httpdns_connections_closed_total{listener=\"api\",reason=\"evicted\"}") > 1000,
        "{metrics}"
    );
    assert!(
        counter("httpdns_connections_closed_total{listener=\"mirror\",reason=\"evicted\"}") > 1000,
        "{metrics}"
    );
    let mut by_kind: std::collections::BTreeMap<&str, Vec<Duration>> = Default::default();
    for (k, d) in &latencies {
        by_kind.entry(k).or_default().push(*d);
    }
    for (k, v) in by_kind.iter_mut() {
        v.sort();
        let median = v[v.len() / 2];
        let p90 = v[v.len() * 9 / 10];
        eprintln!(
            "during the flood: {k}: {} probes, median {median:?}, p90 {p90:?}, max {:?}",
            v.len(),
            v[v.len() - 1]
        );
        assert!(median < Duration::from_millis(50), "{k}: median {median:?}");
    }
    // Memory comes back down once the flood's connections are gone, while the server goes on
    // serving (a few requests a second, as in service: the allocator hands freed memory back
    // as its threads run).
    let trend = rss_settles(&p, &probe, &format!("{}/healthz", p.base), baseline).await;
    let after = *trend.last().unwrap();
    eprintln!("RSS after the flood, every 0.5 s: {trend:?}");
    eprintln!("RSS: baseline {baseline} KiB, peak {peak} KiB, after {after} KiB; floods: {stats:?}");
    assert!(after <= baseline + 32 * 1024, "RSS {after} KiB after the flood, {baseline} KiB before");
}

/// One A query over a fresh TCP connection; whether it was answered with an address.
async fn dns_over_tcp(addr: std::net::SocketAddr, name: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let q = httpdns_dns::build_query(9, name, hickory_proto::rr::RecordType::A, None).unwrap();
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let mut out = (q.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&q);
        s.write_all(&out).await.ok()?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).await.ok()?;
        let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut msg).await.ok()?;
        hickory_proto::op::Message::from_vec(&msg).ok()
    };
    match tokio::time::timeout(Duration::from_secs(5), exchange).await {
        Ok(Some(m)) => !m.answers.is_empty(),
        _ => false,
    }
}

/// RSS samples every 0.5 s, while `url` is asked five times between samples (a server in
/// service), until RSS is within 32 MiB of `baseline` or 30 s have passed; the last is now.
async fn rss_settles(p: &Process, probe: &reqwest::Client, url: &str, baseline: u64) -> Vec<u64> {
    let mut trend = vec![rss_kib(p)];
    let deadline = Instant::now() + Duration::from_secs(30);
    while trend[trend.len() - 1] > baseline + 32 * 1024 && Instant::now() < deadline {
        for _ in 0..5 {
            let _ = probe.get(url).send().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        trend.push(rss_kib(p));
    }
    trend
}

/// The process's resident memory, in KiB.
fn rss_kib(p: &Process) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", p.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// A node and a managed domain: `www.example.com` answers 2.2.2.1 to Unicom clients.
async fn seed(admin: &Admin) {
    admin
        .put("/admin/v1/networks/1.0.2.0%2F24", serde_json::json!({"isp": "unicom", "region": "shanghai"}))
        .await;
    admin
        .put(
            "/admin/v1/nodes/u-sh",
            serde_json::json!({"ip": "2.2.2.1", "pool": "edge", "isp": "unicom", "region": "shanghai"}),
        )
        .await;
    admin.put("/admin/v1/domains/www.example.com", serde_json::json!({"pool": "edge", "ttl": 60})).await;
}

/// The soak: normal traffic of every front-end for a few minutes (`HTTPDNS_SOAK_SECONDS`,
/// default 120) beside hostile clients (a slowloris trickle, clients hanging up mid-lookup and
/// mid-fill, floods of distinct upstream names, unsigned and malformed requests). Not one
/// normal request may fail, and memory must stay flat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_normal_traffic_beside_hostile_clients() {
    let _one = ONE_AT_A_TIME.lock().await;
    let seconds: u64 = std::env::var("HTTPDNS_SOAK_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(120);
    let origin = origin::RunningOrigin::start().await;
    for i in 0..50 {
        origin.origin.put(&format!("/hot/{i}.txt"), format!("hot object {i}").into_bytes(), "text/plain");
    }
    origin.origin.put("/slow/big.bin", vec![1u8; 1 << 20], "application/octet-stream");
    origin.origin.mode("/slow/big.bin", origin::Mode::Slow(Duration::from_millis(50)));
    let upstream = SlowUpstream::start(Duration::from_millis(800)).await;
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    e.insert("HTTPDNS_DNS_ADDR".into(), "127.0.0.1:0".into());
    e.insert("HTTPDNS_UPSTREAMS".into(), upstream.addr.to_string());
    let Some(bin) = release_binary() else { return };
    let p = Process::spawn_binary(&bin, &e, tmp.path(), &["serve"]);
    let admin = Admin::new(&p.base);
    seed(&admin).await;
    admin
        .put("/admin/v1/mirror/rules/m", serde_json::json!({"path_prefix": "/m", "origin": origin.url()}))
        .await;
    admin
        .put(
            "/admin/v1/config/cdn",
            serde_json::json!({"mergeHostConfigs": [], "hostListConfig": [{"host": "cdn.example.com", "rate": 1}],
                "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []}),
        )
        .await;
    let api: std::net::SocketAddr = p.base.trim_start_matches("http://").parse().unwrap();
    let mirror = p.mirror.unwrap();
    let dns = p.addr_of("dns").unwrap();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let stop = tokio_util::sync::CancellationToken::new();

    // Hostile: a slowloris trickle that stays under the caps, for the whole run.
    let slowloris = std::process::Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/slowloris.py"))
        .args([
            api.to_string(),
            "2000".into(),
            seconds.to_string(),
            "--sources".into(),
            "127.0.3.1-127.0.3.20".into(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs the flood");
    let mut hostile = tokio::task::JoinSet::new();
    // Hostile: clients that hang up mid-upstream-lookup and mid-fill, and floods of names.
    {
        let (stop, base, mirror) = (stop.clone(), p.base.clone(), mirror);
        hostile.spawn(async move {
            let quick = httpdns_test_support::http::client_builder()
                .timeout(Duration::from_millis(100))
                .build()
                .unwrap();
            let mut n = 0u64;
            while !stop.is_cancelled() {
                n += 1;
                let _ = quick.get(format!("{base}/d?dn=n{n}.partner.example")).send().await;
                let _ = quick.get(format!("{base}/resolve?host=r{}.partner.example", n % 50)).send().await;
                let _ = quick.get(format!("http://{mirror}/m/slow/big.bin")).send().await;
                let _ = quick.post(format!("{base}/feedback")).body("[{\"ip\": 1}]").send().await;
                let _ = quick.get(format!("{base}/d?dn=..bad..&ip=zzz")).send().await;
                let _ = quick.get(format!("http://{mirror}/m/%2e%2e/etc/passwd")).send().await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
    }
    // Normal traffic: every front-end, kept-alive and fresh connections, checked answers.
    let mut failures: Vec<String> = Vec::new();
    let mut served = 0u64;
    let mut retried = 0u64;
    let mut rss = Vec::new();
    let kept = httpdns_test_support::http::client_builder().timeout(Duration::from_secs(5)).build().unwrap();
    let fresh = httpdns_test_support::http::client_builder()
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut i = 0u64;
    let mut next_sample = Instant::now();
    while Instant::now() < deadline {
        i += 1;
        let c = if i % 2 == 0 { &kept } else { &fresh };
        let checks: [(&str, String, &str); 4] = [
            ("d", format!("{}/d?dn=www.example.com&ip=1.0.2.7", p.base), "2.2.2.1"),
            ("resolve", format!("{}/resolve?host=www.example.com&ip=1.0.2.7", p.base), "2.2.2.1"),
            ("mirror", format!("http://{mirror}/m/hot/{}.txt", i % 50), "hot object"),
            ("config", format!("{}/app/config-center/module-config?module=cdn", p.base), "cdn.example.com"),
        ];
        for (what, url, expect) in checks {
            let mut sent = c.get(&url).send().await;
            // A kept-alive connection the server closed as the request went out: a client
            // retries an idempotent request on a fresh one (RFC 9112 §9.3.1; OkHttp and the
            // browsers do), so this one does too, once, and counts it.
            if i % 2 == 0 && sent.as_ref().is_err_and(reused_connection_lost) {
                retried += 1;
                sent = c.get(&url).send().await;
            }
            match sent {
                Ok(r) if r.status() == 200 => match r.text().await {
                    Ok(body) if body.contains(expect) => served += 1,
                    other => failures.push(format!("{what}: {other:?}")),
                },
                other => failures.push(format!("{what}: {other:?}")),
            }
        }
        if udp_query(dns, "www.example.com.").await {
            served += 1;
        } else {
            failures.push("dns udp".into());
        }
        if i % 10 == 0 {
            if dns_over_tcp(dns, "www.example.com.").await {
                served += 1;
            } else {
                failures.push("dns tcp".into());
            }
        }
        if Instant::now() >= next_sample {
            rss.push(rss_kib(&p));
            next_sample += Duration::from_secs(5);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    while hostile.join_next().await.is_some() {}
    let flood = slowloris.wait_with_output().unwrap();
    let flood = String::from_utf8_lossy(&flood.stdout).trim().to_owned();
    assert!(
        failures.is_empty(),
        "{} of {} normal requests failed: {:?}",
        failures.len(),
        served,
        &failures[..failures.len().min(10)]
    );
    // A kept connection lost under the request is rare (the server closes idle ones only to
    // make room, and idle ones first): one in a thousand would be a regression.
    assert!(
        retried * 1000 <= served,
        "{retried} requests retried on lost kept-alive connections of {served}"
    );
    // Flat memory: the last third of the run peaks no higher than the first third (plus slack
    // for caches that were still filling).
    let third = (rss.len() / 3).max(1);
    let early = *rss[..third].iter().max().unwrap();
    let late = *rss[rss.len() - third..].iter().max().unwrap();
    eprintln!(
        "soak: {seconds} s, {served} normal requests, 0 failed ({retried} retried on a lost kept-alive connection); RSS KiB every 5 s: {rss:?}; slowloris: {flood}; upstream queries: {}",
        upstream.queries()
    );
    assert!(late <= early + 24 * 1024, "memory grew: {early} KiB early, {late} KiB late: {rss:?}");
}

/// Whether a request failed because its kept-alive connection was reset or closed under it,
/// before any answer: what a client retries once on a new connection.
fn reused_connection_lost(e: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if matches!(io.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe) {
                return true;
            }
        }
        if s.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_incomplete_message) {
            return true;
        }
        source = s.source();
    }
    false
}

/// One A query over UDP; whether it was answered with an address.
async fn udp_query(addr: std::net::SocketAddr, name: &str) -> bool {
    let q = httpdns_dns::build_query(7, name, hickory_proto::rr::RecordType::A, None).unwrap();
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut buf = vec![0u8; 4096];
    for _ in 0..3 {
        sock.send_to(&q, addr).await.unwrap();
        if let Ok(Ok((n, _))) = tokio::time::timeout(Duration::from_secs(1), sock.recv_from(&mut buf)).await {
            return hickory_proto::op::Message::from_vec(&buf[..n]).is_ok_and(|m| !m.answers.is_empty());
        }
    }
    false
}

/// An upstream DNS server that answers every A question with 9.9.9.9 after `delay`.
struct SlowUpstream {
    addr: std::net::SocketAddr,
    queries: std::sync::Arc<std::sync::atomic::AtomicU64>,
    _task: tokio::task::JoinHandle<()>,
}

impl SlowUpstream {
    async fn start(delay: Duration) -> Self {
        use hickory_proto::op::{Message, MessageType, OpCode};
        use hickory_proto::rr::{rdata::A, RData, Record};
        let sock = std::sync::Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let addr = sock.local_addr().unwrap();
        let queries = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = queries.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, from)) = sock.recv_from(&mut buf).await else { return };
                let Ok(q) = Message::from_vec(&buf[..n]) else { continue };
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let sock = sock.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let mut r = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
                    r.metadata.recursion_available = true;
                    let question = q.queries[0].clone();
                    r.add_query(question.clone());
                    r.add_answer(Record::from_rdata(
                        question.name().clone(),
                        60,
                        RData::A(A([9, 9, 9, 9].into())),
                    ));
                    let _ = sock.send_to(&r.to_vec().unwrap(), from).await;
                });
            }
        });
        Self { addr, queries, _task: task }
    }

    fn queries(&self) -> u64 {
        self.queries.load(std::sync::atomic::Ordering::Relaxed)
    }
}
