//! The mirror in production (issue 44), on the real binary: the byte cap under concurrent
//! fills, origins failing in turn, header rules as the origin sees them, proxy rules that never
//! store, a private S3 origin (`s3s-fs` requiring credentials), and prefetch through a kill -9.
//! Slices and `format,auto` are in `mirror_slices.rs`, with the origin and gateway from here.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{env, Db, Process, TOKEN};
use httpdns_mirror::prefetch::JOB_CONCURRENCY;

/// An origin that serves `body(path)` (or 404), records every request's headers, answers
/// `Range` and `If-None-Match`, and can be told to fail every request or to wait first.
#[derive(Clone, Default)]
struct Recorder {
    inner: Arc<Mutex<RecorderInner>>,
}

#[derive(Default)]
struct RecorderInner {
    name: String,
    objects: HashMap<String, bytes::Bytes>,
    fail: Option<u16>,
    delay: Duration,
    /// Bodies go out in 64 KiB chunks with this pause between them.
    throttle: Option<Duration>,
    /// Requests with exactly this `Range` get a 500, once each.
    fail_once: Vec<String>,
    /// The object's entity tag (`"v1"` unless changed).
    etag: Option<String>,
    seen: Vec<(String, HeaderMap)>,
    /// Requests being answered now, and the most there ever were at once.
    in_flight: usize,
    max_in_flight: usize,
}

/// Counts a request in flight until it is answered.
struct InFlight(Recorder);

impl InFlight {
    fn enter(rec: &Recorder) -> Self {
        let mut inner = rec.inner.lock();
        inner.in_flight += 1;
        inner.max_in_flight = inner.max_in_flight.max(inner.in_flight);
        Self(rec.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.inner.lock().in_flight -= 1;
    }
}

pub(crate) struct RunningRecorder {
    rec: Recorder,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RunningRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RunningRecorder {
    pub(crate) async fn start(name: &str) -> Self {
        let rec = Recorder::default();
        rec.inner.lock().name = name.into();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(recorded).with_state(rec.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { rec, addr, task }
    }
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
    pub(crate) fn put(&self, path: &str, body: Vec<u8>) {
        self.rec.inner.lock().objects.insert(path.into(), body.into());
    }
    pub(crate) fn throttle(&self, pause: Duration) {
        self.rec.inner.lock().throttle = Some(pause);
    }
    pub(crate) fn fail_once(&self, range: &str) {
        self.rec.inner.lock().fail_once.push(range.into());
    }
    pub(crate) fn set_etag(&self, etag: &str) {
        self.rec.inner.lock().etag = Some(etag.into());
    }
    pub(crate) fn fail(&self, status: Option<u16>) {
        self.rec.inner.lock().fail = status;
    }
    pub(crate) fn delay(&self, d: Duration) {
        self.rec.inner.lock().delay = d;
    }
    pub(crate) fn seen(&self) -> Vec<(String, HeaderMap)> {
        self.rec.inner.lock().seen.clone()
    }
    pub(crate) fn requests(&self) -> usize {
        self.rec.inner.lock().seen.len()
    }

    /// The most requests the origin was answering at once (bodies sent whole after the delay).
    pub(crate) fn max_in_flight(&self) -> usize {
        self.rec.inner.lock().max_in_flight
    }
}

async fn recorded(State(rec): State<Recorder>, method: Method, uri: Uri, mut headers: HeaderMap) -> Response {
    // The method goes with the headers seen, under a name no client sends.
    headers.insert("x-seen-method", method.as_str().parse().unwrap());
    let range = headers.get("range").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let _in_flight = InFlight::enter(&rec);
    let (object, mut fail, delay, name, throttle, etag) = {
        let mut inner = rec.inner.lock();
        inner.seen.push((uri.path().to_owned(), headers.clone()));
        let once = inner.fail_once.iter().position(|r| *r == range).map(|i| inner.fail_once.remove(i));
        let etag = inner.etag.clone().unwrap_or_else(|| "\"v1\"".into());
        (
            inner.objects.get(uri.path()).cloned(),
            inner.fail.or(once.map(|_| 500)),
            inner.delay,
            inner.name.clone(),
            inner.throttle,
            etag,
        )
    };
    if headers.get("if-match").is_some_and(|v| v.to_str().unwrap() != etag) {
        fail = Some(412);
    }
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(s) = fail {
        return StatusCode::from_u16(s).unwrap().into_response();
    }
    let Some(body) = object else { return StatusCode::NOT_FOUND.into_response() };
    let etag = etag.as_str();
    let send = move |b: bytes::Bytes| match throttle {
        None => Body::from(b),
        Some(pause) => {
            let chunks: Vec<bytes::Bytes> =
                (0..b.len()).step_by(64 << 10).map(|i| b.slice(i..(i + (64 << 10)).min(b.len()))).collect();
            Body::from_stream(futures_util::stream::iter(chunks).then(move |c| async move {
                tokio::time::sleep(pause).await;
                Ok::<_, std::io::Error>(c)
            }))
        }
    };
    let base = || {
        Response::builder()
            .header("etag", etag)
            .header("x-origin", name.clone())
            .header("content-type", "application/octet-stream")
            .header("accept-ranges", "bytes")
    };
    if headers.get("if-none-match").is_some_and(|v| v == etag) {
        return base().status(304).body(Body::empty()).unwrap();
    }
    if body.is_empty() && headers.contains_key("range") {
        return base().status(416).header("content-range", "bytes */0").body(Body::empty()).unwrap();
    }
    if let Some(r) = headers.get("range").and_then(|v| v.to_str().ok()) {
        let (a, b) = r.trim_start_matches("bytes=").split_once('-').unwrap();
        let a: usize = a.parse().unwrap();
        let b: usize = b.parse::<usize>().unwrap_or(body.len() - 1).min(body.len() - 1);
        return base()
            .status(206)
            .header("content-range", format!("bytes {a}-{b}/{}", body.len()))
            .header("content-length", (b + 1 - a).to_string())
            .body(send(body.slice(a..=b)))
            .unwrap();
    }
    base().header("content-length", body.len().to_string()).body(send(body)).unwrap()
}

pub(crate) struct Gateway {
    pub(crate) process: Process,
    data: tempfile::TempDir,
    pub(crate) http: reqwest::Client,
}

fn gateway_env(data: &std::path::Path, extra: &[(&str, &str)]) -> HashMap<String, String> {
    let mut e = env(data, &Db::Sqlite);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    for (k, v) in extra {
        e.insert((*k).into(), (*v).into());
    }
    e
}

impl Gateway {
    pub(crate) fn start(extra: &[(&str, &str)]) -> Self {
        let data = tempfile::tempdir().unwrap();
        let process = Process::spawn(&gateway_env(data.path(), extra), data.path());
        Self { process, data, http: httpdns_test_support::http::client() }
    }

    pub(crate) fn restart(&mut self, extra: &[(&str, &str)]) {
        let process = Process::spawn(&gateway_env(self.data.path(), extra), self.data.path());
        self.process = process;
    }

    pub(crate) fn mirror(&self, path: &str) -> String {
        format!("http://{}{path}", self.process.mirror.unwrap())
    }

    pub(crate) async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.process.base)).bearer_auth(TOKEN);
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub(crate) async fn rule(&self, name: &str, body: Value) {
        let (status, resp) =
            self.admin(Method::PUT, &format!("/admin/v1/mirror/rules/{name}"), Some(body)).await;
        assert!(status.is_success(), "rule {name}: {status} {resp}");
    }

    pub(crate) async fn get(&self, path: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap, Vec<u8>) {
        let mut req = self.http.get(self.mirror(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap();
        let (status, h) = (resp.status(), resp.headers().clone());
        (status, h, resp.bytes().await.unwrap().to_vec())
    }

    pub(crate) async fn metric(&self, name: &str) -> f64 {
        let text = self.http.get(format!("{}/metrics", self.process.base)).send().await.unwrap();
        let text = text.text().await.unwrap();
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    }

    pub(crate) fn store_dir(&self) -> std::path::PathBuf {
        self.data.path().join("mirror").join("store")
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.process.log).unwrap_or_default()
    }
}

/// Bytes and number of the copy files under `dir`.
pub(crate) fn disk_usage(dir: &std::path::Path) -> (u64, usize) {
    let mut stack = vec![dir.to_path_buf()];
    let (mut bytes, mut files) = (0, 0);
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if let Ok(m) = e.metadata() {
                bytes += m.len();
                files += 1;
            }
        }
    }
    (bytes, files)
}

pub(crate) fn x_cache(h: &HeaderMap) -> &str {
    h.get("x-cache").and_then(|v| v.to_str().ok()).unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cap_holds_under_concurrent_fills_and_the_hot_copies_stay() {
    const CAP: u64 = 2 << 20;
    let origin = RunningRecorder::start("o").await;
    for i in 0..1000 {
        origin.put(&format!("/k/{i}"), vec![(i % 251) as u8; 8 << 10]);
    }
    for i in 0..20 {
        origin.put(&format!("/hot/{i}"), vec![7; 8 << 10]);
    }
    let gw = Gateway::start(&[("HTTPDNS_MIRROR_MAX_BYTES", "2M")]);
    gw.rule("k", json!({"path_prefix": "/k", "origin": format!("{}/k", origin.url())})).await;
    gw.rule("hot", json!({"path_prefix": "/hot", "origin": format!("{}/hot", origin.url())})).await;
    // The hot set: filled, then read again (a second read is what makes a copy hot).
    for round in 0..3 {
        for i in 0..20 {
            let (s, h, _) = gw.get(&format!("/hot/{i}"), &[]).await;
            assert_eq!(s, 200);
            if round == 2 {
                assert_eq!(x_cache(&h), "HIT");
            }
        }
    }
    let hot_requests = origin.requests();
    // 1,000 distinct keys, 32 at a time, the hot set read all along, the disk sampled.
    let gw = Arc::new(gw);
    let sampler = {
        let dir = gw.store_dir();
        tokio::spawn(async move {
            let mut worst = 0;
            for _ in 0..400 {
                worst = worst.max(disk_usage(&dir).0);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            worst
        })
    };
    let misses = futures_util::stream::iter(0..1000)
        .map(|i| {
            let gw = gw.clone();
            async move {
                let (s, _, body) = gw.get(&format!("/k/{i}"), &[]).await;
                assert_eq!((s, body.len()), (StatusCode::OK, 8 << 10), "/k/{i}");
                if i % 10 == 0 {
                    let (s, _, _) = gw.get(&format!("/hot/{}", i / 10 % 20), &[]).await;
                    assert_eq!(s, 200);
                }
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>();
    tokio::time::timeout(Duration::from_secs(120), misses).await.expect("1,000 fills in time");
    let worst = sampler.await.unwrap();
    let (bytes, files) = disk_usage(&gw.store_dir());
    assert!(worst <= CAP, "the store went to {worst} bytes, over the cap of {CAP}");
    assert!(bytes <= CAP, "{bytes} bytes in {files} files");
    assert!(bytes > CAP / 2, "the store is used ({bytes} bytes)");
    assert!(gw.metric("httpdns_mirror_store_bytes").await as u64 <= CAP);
    assert!(gw.metric("httpdns_mirror_store_evictions_total").await >= 700.0);
    gw.metric("httpdns_mirror_store_oldest_copy_age_seconds").await;
    // The hot copies stayed: every one a hit, none fetched again.
    for i in 0..20 {
        let (_, h, _) = gw.get(&format!("/hot/{i}"), &[]).await;
        assert_eq!(x_cache(&h), "HIT", "/hot/{i} was evicted");
    }
    let hot_again = origin.seen().iter().skip(hot_requests).filter(|(p, _)| p.starts_with("/hot/")).count();
    assert_eq!(hot_again, 0, "hot copies were fetched again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_origins_fail_in_turn_and_header_rules_reach_the_origin() {
    let origins = [
        RunningRecorder::start("o1").await,
        RunningRecorder::start("o2").await,
        RunningRecorder::start("o3").await,
        RunningRecorder::start("o4").await,
    ];
    for o in &origins {
        for k in ["a", "b", "c", "d", "e"] {
            o.put(&format!("/{k}"), k.as_bytes().to_vec());
        }
    }
    let gw = Gateway::start(&[]);
    // `origin` first, then `origins` by priority whatever their order here.
    gw.rule(
        "multi",
        json!({
            "path_prefix": "/m",
            "origin": origins[0].url(),
            "origins": [
                {"url": origins[3].url(), "priority": 9},
                {"url": origins[1].url(), "priority": 1},
                {"url": origins[2].url(), "priority": 5},
            ],
            "headers": {"pass": ["X-Trace"], "set": {"X-Gateway": "hdns"}},
        }),
    )
    .await;
    let served = |k: &str| -> Vec<usize> {
        (0..4).filter(|i| origins[*i].seen().iter().any(|(p, _)| p == &format!("/{k}"))).collect()
    };
    let client = [("x-trace", "t1"), ("cookie", "session=1"), ("authorization", "Bearer mine")];
    let (s, _, body) = gw.get("/m/a", &client).await;
    assert_eq!((s, body.as_slice()), (StatusCode::OK, &b"a"[..]));
    assert_eq!(served("a"), [0]);
    for (failing, key) in [(0, "b"), (1, "c"), (2, "d")] {
        origins[failing].fail(Some(503));
        let (s, _, body) = gw.get(&format!("/m/{key}"), &client).await;
        assert_eq!((s, body.as_slice()), (StatusCode::OK, key.as_bytes()), "{key}");
        // The failing origin, then the next by priority; those that failed before are marked
        // down for a probe interval and go to the end of the list, so they are not asked.
        assert_eq!(served(key), [failing, failing + 1], "{key} went down the list in order");
    }
    origins[3].fail(Some(503));
    let (s, _, _) = gw.get("/m/e", &client).await;
    assert_eq!(s, StatusCode::BAD_GATEWAY);
    assert_eq!(served("e"), [0, 1, 2, 3]);
    // What every origin saw: the passed header and the set one; never the cookie nor the
    // client's credentials.
    for o in &origins {
        for (path, h) in o.seen() {
            assert_eq!(h.get("x-trace").map(|v| v.to_str().unwrap()), Some("t1"), "{path}");
            assert_eq!(h.get("x-gateway").map(|v| v.to_str().unwrap()), Some("hdns"), "{path}");
            assert!(h.get("cookie").is_none() && h.get("authorization").is_none(), "{path}");
        }
    }
    // pass_all with remove.
    let o = RunningRecorder::start("all").await;
    o.put("/x", b"x".to_vec());
    gw.rule(
        "all",
        json!({"path_prefix": "/all", "origin": o.url(), "headers": {"pass_all": true, "remove": ["Cookie"]}}),
    )
    .await;
    let (s, _, _) =
        gw.get("/all/x", &[("x-one", "1"), ("x-two", "2"), ("cookie", "c"), ("range", "bytes=0-0")]).await;
    assert_eq!(s, 206);
    let (_, h) = o.seen().pop().unwrap();
    assert_eq!((h["x-one"].to_str().unwrap(), h["x-two"].to_str().unwrap()), ("1", "2"));
    assert!(h.get("cookie").is_none(), "removed");
    assert!(h.get("range").is_none(), "a fill never passes the client's Range");
    // Bad header rules name their field.
    for (body, field) in [
        (
            json!({"path_prefix": "/z", "origin": o.url(), "headers": {"pass": ["Content-Length"]}}),
            "headers.pass",
        ),
        (json!({"path_prefix": "/z", "origin": o.url(), "headers": {"remove": ["a"]}}), "headers.remove"),
        (json!({"path_prefix": "/z", "origins": [{"url": "ftp://x", "priority": 1}]}), "origins"),
        (json!({"path_prefix": "/z"}), "origin"),
    ] {
        let (s, resp) = gw.admin(Method::PUT, "/admin/v1/mirror/rules/z", Some(body)).await;
        assert_eq!((s, resp["field"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{resp}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_rule_streams_ranges_and_conditionals_and_never_stores() {
    let origin = RunningRecorder::start("p").await;
    let body: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    origin.put("/v.bin", body.clone());
    let gw = Gateway::start(&[]);
    gw.rule("live", json!({"path_prefix": "/live", "origin": origin.url(), "store": false})).await;
    for _ in 0..3 {
        let (s, h, got) = gw.get("/live/v.bin", &[]).await;
        assert_eq!((s, got.len()), (StatusCode::OK, body.len()));
        assert_eq!(got, body);
        assert_eq!(h.get("etag").unwrap(), "\"v1\"");
    }
    let (s, h, got) = gw.get("/live/v.bin", &[("range", "bytes=10-19")]).await;
    assert_eq!(s, StatusCode::PARTIAL_CONTENT);
    assert_eq!(got, &body[10..20]);
    assert_eq!(h.get("content-range").unwrap(), "bytes 10-19/100000");
    let (s, _, got) = gw.get("/live/v.bin", &[("if-none-match", "\"v1\"")]).await;
    assert_eq!((s, got.len()), (StatusCode::NOT_MODIFIED, 0));
    let resp = gw.http.head(gw.mirror("/live/v.bin")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let (s, _, _) = gw.get("/live/v.bin?x-oss-process=image/resize,w_10", &[]).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // Every request went to the origin (the HEAD as a HEAD) ...
    assert_eq!(origin.requests(), 6);
    let seen = origin.seen();
    assert_eq!(seen[3].1.get("range").unwrap(), "bytes=10-19");
    assert_eq!(seen[4].1.get("if-none-match").unwrap(), "\"v1\"");
    assert_eq!(seen[5].1["x-seen-method"], "HEAD");
    assert_eq!(seen[0].1["x-seen-method"], "GET");
    // ... and nothing was kept.
    assert_eq!(disk_usage(&gw.store_dir()).1, 0, "a proxy rule stored a copy");
    let (s, _) = gw.admin(Method::GET, "/admin/v1/mirror/objects/live/v.bin", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_bucket_is_fetched_with_sigv4_and_the_secret_never_shows() {
    let Some(s3) = crate::mirror::S3Server::start() else { return };
    let object: Vec<u8> = (0..50_000u32).map(|i| (i % 241) as u8).collect();
    let dir = s3.dir().join("mirror-test").join("private");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.bin"), &object).unwrap();
    std::fs::write(dir.join("b.bin"), b"bee").unwrap();
    let gw = Gateway::start(&[]);
    let bucket = format!("{}/mirror-test/private", s3.endpoint);
    // Without credentials the bucket refuses.
    gw.rule("anon", json!({"path_prefix": "/anon", "origin": bucket})).await;
    let (s, _, _) = gw.get("/anon/a.bin", &[]).await;
    assert_eq!(s, StatusCode::BAD_GATEWAY);
    let auth = json!({"kind": "s3", "access_key_id": "testkey", "secret_access_key": "testsecret", "region": "us-east-1"});
    gw.rule("priv", json!({"path_prefix": "/priv", "origin": bucket, "origin_auth": auth})).await;
    let (s, h, got) = gw.get("/priv/a.bin", &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(x_cache(&h), "MISS");
    assert_eq!(got, object);
    // A wrong secret is refused too.
    let wrong =
        json!({"kind": "s3", "access_key_id": "testkey", "secret_access_key": "nope", "region": "us-east-1"});
    gw.rule("wrong", json!({"path_prefix": "/wrong", "origin": bucket, "origin_auth": wrong})).await;
    let (s, _, _) = gw.get("/wrong/b.bin", &[]).await;
    assert_eq!(s, StatusCode::BAD_GATEWAY);
    // Reads show the rule without its secret; writing back what was read keeps the secret.
    let (_, rule) = gw.admin(Method::GET, "/admin/v1/mirror/rules/priv", None).await;
    assert_eq!(rule["origin_auth"]["secret_access_key"], "<redacted>");
    assert_eq!(rule["origin_auth"]["access_key_id"], "testkey");
    let (_, list) = gw.admin(Method::GET, "/admin/v1/mirror/rules", None).await;
    assert!(!list.to_string().contains("testsecret"), "{list}");
    // A search never matches inside the secret (one guess at a time would reveal it).
    let (_, found) = gw.admin(Method::GET, "/admin/v1/mirror/rules?q=testsec", None).await;
    assert_eq!(found["items"].as_array().map(Vec::len), Some(0), "{found}");
    let (_, found) = gw.admin(Method::GET, "/admin/v1/mirror/rules?q=testkey", None).await;
    assert_eq!(found["items"].as_array().map(Vec::len), Some(2), "the key id is searchable: {found}");
    let (s, back) = gw.admin(Method::PUT, "/admin/v1/mirror/rules/priv", Some(rule.clone())).await;
    assert_eq!(s, StatusCode::OK, "{back}");
    assert!(!back.to_string().contains("testsecret"));
    let (s, _, got) = gw.get("/priv/b.bin", &[]).await;
    assert_eq!((s, got.as_slice()), (StatusCode::OK, &b"bee"[..]), "the kept secret still signs");
    // `httpdns export` writes the rule without its secret, and applying that file back changes
    // nothing (the stored secret stays and still signs).
    let file = gw.data.path().join("state.yaml");
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_httpdns"))
            .args(args)
            .args(["--server", gw.process.base.as_str(), "--token", TOKEN])
            .env_remove("HTTPDNS_ADMIN_TOKEN")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    cli(&["export", "-o", file.to_str().unwrap()]);
    let exported = std::fs::read_to_string(&file).unwrap();
    assert!(exported.contains("<redacted>") && !exported.contains("testsecret"), "{exported}");
    // An edit of the exported file, applied: the rules are written with `<redacted>`.
    assert!(exported.contains("negative_ttl_ms: 10000"), "{exported}");
    std::fs::write(&file, exported.replace("negative_ttl_ms: 10000", "negative_ttl_ms: 20000")).unwrap();
    cli(&["apply", "-f", file.to_str().unwrap()]);
    let (_, rule) = gw.admin(Method::GET, "/admin/v1/mirror/rules/priv", None).await;
    assert_eq!(rule["negative_ttl_ms"], 20000, "{rule}");
    gw.admin(Method::POST, "/admin/v1/mirror/purge", Some(json!({"path": "/priv/b.bin"}))).await;
    let (s, _, got) = gw.get("/priv/b.bin", &[]).await;
    assert_eq!((s, got.as_slice()), (StatusCode::OK, &b"bee"[..]), "signed after export and apply");
    // `<redacted>` with nothing stored to keep (a new rule, another key id) is refused.
    let mut copy = rule.clone();
    copy["path_prefix"] = json!("/copy");
    let (s, resp) = gw.admin(Method::PUT, "/admin/v1/mirror/rules/copy", Some(copy)).await;
    assert_eq!((s, resp["field"].as_str()), (StatusCode::BAD_REQUEST, Some("origin_auth.secret_access_key")));
    let mut other = rule.clone();
    other["origin_auth"]["access_key_id"] = json!("otherkey");
    let (s, _) = gw.admin(Method::PUT, "/admin/v1/mirror/rules/priv", Some(other)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // Bad credentials name their field.
    let bad = json!({"path_prefix": "/x", "origin": bucket, "origin_auth": {"kind": "gcs", "access_key_id": "a", "secret_access_key": "b"}});
    let (s, resp) = gw.admin(Method::PUT, "/admin/v1/mirror/rules/x", Some(bad)).await;
    assert_eq!((s, resp["field"].as_str()), (StatusCode::BAD_REQUEST, Some("origin_auth.kind")));
    let metrics =
        gw.http.get(format!("{}/metrics", gw.process.base)).send().await.unwrap().text().await.unwrap();
    assert!(!metrics.contains("testsecret"));
    let (_, overview) = gw.admin(Method::GET, "/admin/v1/overview", None).await;
    assert!(!overview.to_string().contains("testsecret"));
    assert!(!gw.log().contains("testsecret"), "the secret is in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prefetch_fills_a_thousand_keys_with_progress_through_a_kill() {
    let origin = RunningRecorder::start("pf").await;
    let paths: Vec<String> = (0..1000).map(|i| format!("/pf/{i}.bin")).collect();
    for i in 0..1000 {
        origin.put(&format!("/{i}.bin"), format!("object {i}").into_bytes());
    }
    origin.delay(Duration::from_millis(15));
    let mut gw = Gateway::start(&[]);
    gw.rule("pf", json!({"path_prefix": "/pf", "origin": origin.url()})).await;
    // Bad input: named, nothing started.
    for (body, field) in [
        (json!({"paths": []}), "paths"),
        (json!({"paths": ["/pf/a", "/nowhere/b"]}), "paths[1]"),
        (json!({"paths": ["relative"]}), "paths[0]"),
        (json!({"pathz": ["/pf/a"]}), "pathz"),
    ] {
        let (s, resp) = gw.admin(Method::POST, "/admin/v1/mirror/prefetch", Some(body)).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{resp}");
        assert!(resp["field"].as_str().unwrap_or("").contains(field), "{resp}");
    }
    let (s, _) = gw.admin(Method::GET, "/admin/v1/mirror/prefetch/0123456789abcdef", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    let (s, started) =
        gw.admin(Method::POST, "/admin/v1/mirror/prefetch", Some(json!({"paths": paths}))).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let progress_url = format!("/admin/v1/mirror/prefetch/{id}");
    // Progress moves; the process is killed part-way.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen_done = Vec::new();
    loop {
        let (_, p) = gw.admin(Method::GET, &progress_url, None).await;
        assert_eq!(p["total"], 1000);
        assert_eq!(p["state"], "running");
        let done = p["done"].as_u64().unwrap();
        seen_done.push(done);
        if done >= 300 {
            break;
        }
        assert!(Instant::now() < deadline, "prefetch progress stalled at {done}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen_done.windows(2).all(|w| w[0] <= w[1]), "{seen_done:?}");
    // Live traffic is not queued behind the job: a viewer's miss goes to the origin at once.
    origin.put("/live.bin", b"live".to_vec());
    let asked = Instant::now();
    let (s, h, body) = gw.get("/pf/live.bin", &[]).await;
    assert_eq!((s, x_cache(&h), body.as_slice()), (StatusCode::OK, "MISS", &b"live"[..]));
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "a live miss took {:?} during the prefetch",
        asked.elapsed()
    );
    gw.process.child.kill().unwrap();
    gw.process.child.wait().unwrap();
    let before_restart = origin.requests();
    assert!(before_restart < 1000, "killed before the end ({before_restart} fetched)");

    let shown_before_kill = *seen_done.last().unwrap();
    gw.restart(&[]);
    // Progress goes on from the last save (every 50 paths), not from 0, and never goes back.
    let (_, resumed) = gw.admin(Method::GET, &progress_url, None).await;
    let resumed_at = resumed["done"].as_u64().unwrap();
    assert!(
        resumed_at + 50 >= shown_before_kill,
        "resumed at {resumed_at} after {shown_before_kill} shown before the kill"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut previous = resumed_at;
    let last = loop {
        let (s, p) = gw.admin(Method::GET, &progress_url, None).await;
        assert_eq!(s, StatusCode::OK, "the job survived the kill");
        let done = p["done"].as_u64().unwrap();
        assert!(done >= previous, "progress went back from {previous} to {done}");
        previous = done;
        if p["state"] == "done" {
            break p;
        }
        assert!(Instant::now() < deadline, "the resumed job did not finish: {p}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (last["total"].as_u64(), last["done"].as_u64(), last["failed"].as_u64()),
        (Some(1000), Some(1000), Some(0)),
        "{last}"
    );
    assert_eq!(last["resumed"], 1);
    // What was filled before the kill was not fetched again (a few fills in flight were).
    let total = origin.requests() - 1;
    assert!((1000..=1000 + 2 * 8).contains(&total), "{total} origin requests for 1,000 keys");
    // The job's bound on the origin: four fills at a time (and the live miss beside them).
    let most = origin.max_in_flight();
    assert!((2..=JOB_CONCURRENCY + 1).contains(&most), "{most} origin requests at once");
    for i in (0..1000).step_by(37) {
        let (s, h, body) = gw.get(&format!("/pf/{i}.bin"), &[]).await;
        assert_eq!((s, x_cache(&h)), (StatusCode::OK, "HIT"), "/pf/{i}.bin");
        assert_eq!(body, format!("object {i}").into_bytes());
    }
    assert_eq!(origin.requests(), total + 1);

    // Paths the origin does not have are counted and named; stored ones are not fetched again.
    let (s, started) = gw
        .admin(
            Method::POST,
            "/admin/v1/mirror/prefetch",
            Some(json!({"paths": ["/pf/1.bin", "/pf/nowhere.bin", "/pf/2.bin"]})),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{started}");
    let url = format!("/admin/v1/mirror/prefetch/{}", started["id"].as_str().unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let p = loop {
        let (_, p) = gw.admin(Method::GET, &url, None).await;
        if p["state"] == "done" {
            break p;
        }
        assert!(Instant::now() < deadline, "the second job did not finish: {p}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((p["done"].as_u64(), p["failed"].as_u64()), (Some(2), Some(1)), "{p}");
    assert_eq!(p["errors"][0][0], "/pf/nowhere.bin", "{p}");
    assert_eq!(origin.requests(), total + 2, "only the missing path went to the origin");
}
