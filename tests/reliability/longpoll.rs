//! What a config long poll costs (docs/benchmarks.md, "Config long poll"): the real binary
//! holds `WAITERS` long polls from a hundred source addresses; the run prints the server's
//! memory per held request, its CPU while they wait, and after one publish how long each took to
//! be answered (p50, p99, max) and the CPU the wake took. It prints figures and checks only that
//! every held request was answered with the new version: no timed assertion.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::support::{env, Admin, Db, Process};
use super::{release_binary, rss_kib, ONE_AT_A_TIME};

/// Held long polls (a client descriptor here and a server descriptor there, each process
/// under this machine's hard limit of 20,000 descriptors).
const WAITERS: usize = 9_000;

/// The server process's user and system CPU time.
fn cpu(p: &Process) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", p.child.id())).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // Fields 14 and 15 of proc(5), counted from the state (field 3) here.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_long_poll_cost_and_wake_delay() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(bin) = release_binary() else { return };
    let nofile = (WAITERS + 1024) as u64;
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit { current: Some(nofile), maximum: Some(nofile) },
    )
    .expect("the test may raise its descriptor limit");
    let tmp = tempfile::tempdir().unwrap();
    let mut e = env(tmp.path(), &Db::Sqlite);
    // Caps above the waiters: this measures holding them, not the edge sparing connections.
    e.insert("HTTPDNS_MAX_CONNECTIONS".into(), (WAITERS + 200).to_string());
    e.insert("HTTPDNS_MAX_CONNECTIONS_PER_ADDR".into(), WAITERS.to_string());
    let p = Process::spawn_binary(
        std::path::Path::new("prlimit"),
        &e,
        tmp.path(),
        &[&format!("--nofile={nofile}:{nofile}"), "--", bin.to_str().unwrap(), "serve"],
    );
    let admin = Admin::new(&p.base);
    let doc = |host: &str| {
        serde_json::json!({"mergeHostConfigs": [], "hostListConfig": [{"host": host, "rate": 1}],
            "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": []})
    };
    admin.put("/admin/v1/config/cdn", doc("a.example.com")).await;
    let addr: std::net::SocketAddr = p.base.trim_start_matches("http://").parse().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = rss_kib(&p);
    // The server's own loops, for comparison with the same 5 s while requests are held.
    let cpu_alone_from = cpu(&p);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cpu_alone = cpu(&p).saturating_sub(cpu_alone_from);

    let request = format!(
        "GET /app/config-center/module-config?module=cdn&wait=60 HTTP/1.1\r\nHost: {addr}\r\nIf-None-Match: \"1\"\r\n\r\n"
    );
    // Connected first, the requests sent together after: the server's memory of the bare
    // connections and of the held requests on them, apart.
    let (go, ready) = tokio::sync::watch::channel(false);
    let connected = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut held = Vec::with_capacity(WAITERS);
    for i in 0..WAITERS {
        let source = std::net::IpAddr::from([127, 0, 3, 1 + (i % 100) as u8]);
        let request = request.clone();
        let (mut ready, connected) = (ready.clone(), connected.clone());
        held.push(tokio::spawn(async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind((source, 0).into()).unwrap();
            let mut s = socket.connect(addr).await.unwrap();
            connected.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            ready.wait_for(|go| *go).await.unwrap();
            s.write_all(request.as_bytes()).await.unwrap();
            let mut buf = [0u8; 512];
            let n = s.read(&mut buf).await.unwrap();
            let at = Instant::now();
            (String::from_utf8_lossy(&buf[..n]).into_owned(), at)
        }));
        if i % 1000 == 999 {
            // Let the server accept as it goes, as devices arrive over time.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // Within the header timeout (10 s), which closes connections that send nothing.
    while connected.load(std::sync::atomic::Ordering::Relaxed) < WAITERS {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_connected = rss_kib(&p);
    go.send(true).unwrap();
    // Every request held: the server's gauge says so.
    let http = httpdns_test_support::http::client();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = http.get(format!("{}/metrics", p.base)).send().await.unwrap().text().await.unwrap();
        let n = m
            .lines()
            .find_map(|l| l.strip_prefix("httpdns_config_waiters "))
            .unwrap_or("0")
            .trim()
            .to_owned();
        if n.parse::<usize>().unwrap_or(0) >= WAITERS || Instant::now() > deadline {
            println!("held: {n}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rss_held = rss_kib(&p);
    let cpu_idle_from = cpu(&p);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cpu_idle = cpu(&p).saturating_sub(cpu_idle_from);

    let cpu_wake_from = cpu(&p);
    let published = Instant::now();
    let resp = http
        .put(format!("{}/admin/v1/config/cdn", p.base))
        .bearer_auth(super::support::TOKEN)
        .header("if-match", "*")
        .body(doc("b.example.com").to_string())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let mut delays = Vec::with_capacity(WAITERS);
    for h in held {
        let (head, at) = h.await.unwrap();
        assert!(head.starts_with("HTTP/1.1 200") && head.contains("x-config-version: 2"), "{head}");
        delays.push(at.saturating_duration_since(published));
    }
    let cpu_wake = cpu(&p).saturating_sub(cpu_wake_from);
    delays.sort();
    println!(
        "long poll: {WAITERS} held; server RSS {rss_before} KiB, {rss_connected} KiB connected, {rss_held} KiB held \
         ({:.1} KiB per connection, {:.1} KiB more per held request); \
         CPU in 5 s {cpu_alone:?} alone, {:?} while held; after a publish: p50 {:?}, p99 {:?}, max {:?}; CPU of the wake {:?} ({:.1} µs per request)",
        (rss_connected.saturating_sub(rss_before)) as f64 / WAITERS as f64,
        (rss_held.saturating_sub(rss_connected)) as f64 / WAITERS as f64,
        cpu_idle,
        percentile(&delays, 0.5),
        percentile(&delays, 0.99),
        delays.last().unwrap(),
        cpu_wake,
        cpu_wake.as_micros() as f64 / WAITERS as f64,
    );
}
