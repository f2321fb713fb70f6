//! Seed 004 §4.2 on the real binary: HTTPDNS unreachable for `unicom/shanghai` devices only.
//! The policy controller degrades that place (no other) within two of its ticks of enough
//! evidence; its devices then resolve by LocalDNS at once instead of paying the service's
//! timeout first (both lookup times measured); when the service is back the place ramps up
//! step by step, steps back on a regression injected at the 25% step, and ends healthy.
//!
//! Devices are placed by a proxy per place in front of a dedicated `httpdns` (the controller's
//! settings time-compressed: ticks of 200 ms, steps held 4 s): it adds the place's address as
//! `X-Forwarded-For` (the server trusts loopback proxies) and, for Shanghai, can make the
//! resolution paths unreachable (held past the client's timeout) while config and events pass.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use httpdns_client::{CdnClient, ClientOptions, EventOptions, LocalDns};
use serde_json::{json, Value};

use crate::standin::StandIn;
use crate::topology::{Proc, Topology, TOKEN};
use crate::Row;

/// The controller's tick and step hold in this scenario.
const TICK_MS: u64 = 200;
/// Half of it is the settle after a change: the failures devices reported under the 25% step
/// until the test heals the service (its poll, their batches, the flush, a tick) must land
/// inside it even on a loaded CI machine; with 2 s (a 1 s settle) they once did not.
const STEP_SECONDS: u64 = 4;

#[derive(Clone)]
struct Place {
    http: reqwest::Client,
    server: String,
    xff: &'static str,
    /// The resolution paths (all but `/app/...`): [`PASS`], [`HANG`] (past the client's
    /// timeout: unreachable) or [`FAIL`] (503 at once).
    mode: Arc<AtomicU8>,
}

const PASS: u8 = 0;
const HANG: u8 = 1;
const FAIL: u8 = 2;

async fn proxy(State(p): State<Place>, req: Request) -> Response {
    let pq = req.uri().path_and_query().map_or("/", |x| x.as_str()).to_owned();
    match p.mode.load(Ordering::SeqCst) {
        HANG if !pq.starts_with("/app/") => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            return StatusCode::GATEWAY_TIMEOUT.into_response();
        }
        FAIL if !pq.starts_with("/app/") => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
        _ => {}
    }
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 4 << 20).await.unwrap_or_default();
    let mut out = p.http.request(parts.method, format!("{}{pq}", p.server)).header("x-forwarded-for", p.xff);
    for h in ["content-type", "content-encoding", "if-none-match"] {
        if let Some(v) = parts.headers.get(h) {
            out = out.header(h, v.as_bytes());
        }
    }
    let Ok(r) = out.body(body).send().await else { return StatusCode::BAD_GATEWAY.into_response() };
    let mut resp = Response::builder().status(r.status().as_u16());
    for h in ["content-type", "etag", "x-config-signature", "x-config-version", "cache-control"] {
        if let Some(v) = r.headers().get(h) {
            resp = resp.header(h, v.as_bytes());
        }
    }
    resp.body(Body::from(r.bytes().await.unwrap_or_default())).unwrap()
}

/// Device ids by `httpdnsRate` bucket: `n` ids in `lo..hi`.
fn ids(prefix: &str, lo: u64, hi: u64, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|d| (lo..hi).contains(&httpdns_config::rollout::bucket("httpdnsRate", d)))
        .take(n)
        .collect()
}

struct Setup {
    server: Proc,
    /// The server's own database, read directly (opened before the traffic: no migration).
    store: httpdns_store::Store,
    key: String,
    url: String,
}

fn options(t: &Topology, s: &Setup, proxy: &StandIn, device: &str) -> ClientOptions {
    let base = format!("http://{}", proxy.addr);
    let mut o = ClientOptions { device_id: device.into(), feedback: None, ..Default::default() };
    o.resolver.service.servers = vec![base.parse().unwrap()];
    o.resolver.service.timeout = Duration::from_secs(1);
    o.resolver.local_dns = LocalDns::Servers(vec![t.local.addrs["dns"]]);
    o.resolver.local_timeout = Duration::from_secs(1);
    o.resolver.allow_private = true;
    // Every request looks its name up again (no stale reuse): what the service does shows.
    o.resolver.reuse_expired = false;
    o.resolver.min_ttl = Duration::from_millis(300);
    o.resolver.max_ttl = Duration::from_millis(300);
    o.resolver.local_ttl = Duration::from_millis(300);
    o.resolver.service.sniff_interval = Duration::from_millis(100);
    o.config.url = Some(format!("{base}/app/config-center/module-config?module=cdn").parse().unwrap());
    o.config.public_key = Some(s.key.clone());
    o.config_interval = Some(Duration::from_millis(200));
    o.network_probe_port = t.public.addr.port();
    o.events = Some(EventOptions {
        url: Some(format!("{base}/app/events").parse().unwrap()),
        request_sample_rate: 1.0,
        localdns_sample_rate: 0.0,
        interval: Duration::from_millis(200),
        ..Default::default()
    });
    o
}

async fn admin(
    http: &reqwest::Client,
    base: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let mut req = http.request(method, format!("{base}{path}")).bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    let v = r.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{path}: {status} {v}");
    v
}

async fn setup(t: &Topology) -> Setup {
    let dir = t.dir().join("places");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("httpdns.toml");
    std::fs::write(&file, "[events]\nflush_ms = 100\n").unwrap();
    let env = [
        ("HTTPDNS_API_ADDR", "127.0.0.1:0".to_owned()),
        ("HTTPDNS_DNS_ADDR", "off".to_owned()),
        ("HTTPDNS_MIRROR_ADDR", "off".to_owned()),
        ("HTTPDNS_DATA_DIR", dir.display().to_string()),
        ("HTTPDNS_ADMIN_TOKEN", TOKEN.to_owned()),
        ("HTTPDNS_SYNC_INTERVAL_MS", "100".to_owned()),
        ("HTTPDNS_ALLOW_PRIVATE_NODE_IPS", "true".to_owned()),
        ("HTTPDNS_UPSTREAMS", "off".to_owned()),
        ("HTTPDNS_TRUSTED_PROXIES", "127.0.0.1/32".to_owned()),
        ("HTTPDNS_CONTROL_TICK_MS", TICK_MS.to_string()),
        ("HTTPDNS_POLICY_STEP_SECONDS", STEP_SECONDS.to_string()),
        ("HTTPDNS_POLICY_MIN_REQUESTS", "40".to_owned()),
    ];
    let server = Proc::spawn_with_config(&env, &file, &["api"], &dir.join("server.log"));
    let api = server.base();
    let http = &t.http;
    let put = |path: &'static str, body: Value| {
        let api = api.clone();
        async move { admin(http, &api, reqwest::Method::PUT, path, Some(body)).await }
    };
    put("/admin/v1/networks/10.1.0.0%2F16", json!({"isp": "unicom", "region": "shanghai"})).await;
    put("/admin/v1/networks/10.2.0.0%2F16", json!({"isp": "telecom", "region": "beijing"})).await;
    put("/admin/v1/pools/a", json!({})).await;
    let v = &t.vendors[0];
    // cdn-a's nodes: Unicom's in Shanghai, and one of Telecom's (127.0.0.15) for Beijing's
    // devices (a client drops nodes of another carrier).
    for n in &v.nodes {
        let id = format!("/admin/v1/nodes/{}", n.ip.to_string().replace('.', "-"));
        let telecom = n.ip.to_string() == "127.0.0.15";
        let (isp, region) = if telecom { ("telecom", "beijing") } else { ("unicom", "shanghai") };
        let body = json!({"ip": n.ip, "pool": "a", "isp": isp, "region": region});
        admin(http, &api, reqwest::Method::PUT, &id, Some(body)).await;
    }
    admin(
        http,
        &api,
        reqwest::Method::PUT,
        &format!("/admin/v1/domains/{}", v.name),
        Some(json!({"pool": "a", "ttl": 60})),
    )
    .await;
    put(
        "/admin/v1/config/cdn",
        json!({"mergeHostConfigs": [], "hostListConfig": [{"host": v.host(), "rate": 1}],
            "reviveProbeInterval": 10000, "configRequestInterval": 10000, "publicIpList": ["127.0.0.1"],
            "resolutionPolicy": {"default": {"httpdnsRate": 1, "timeoutMs": 1000}}}),
    )
    .await;
    let key = admin(http, &api, reqwest::Method::GET, "/app/config-center/public-key", None).await;
    // Opened and warmed now, before the traffic: a first connection sets its pragmas, which can
    // wait on the server's writers.
    let store =
        httpdns_store::Store::open(&format!("sqlite://{}", dir.join("httpdns.db").display())).await.unwrap();
    store.policy_places().await.unwrap();
    Setup {
        store,
        key: key["public_key"].as_str().unwrap().to_owned(),
        url: format!("http://{}/image/img/", v.host()),
        server,
    }
}

async fn state(t: &Topology, s: &Setup, isp: &str) -> (String, f64) {
    let v = admin(&t.http, &s.server.base(), reqwest::Method::GET, "/admin/v1/policy/places", None).await;
    v["places"].as_array().unwrap().iter().find(|p| p["isp"] == isp).map_or(("healthy".into(), 1.0), |p| {
        (p["state"].as_str().unwrap().to_owned(), p["share"].as_f64().unwrap())
    })
}

/// One device's first lookup (empty cache), in the state its config says.
async fn first_lookup(t: &Topology, s: &Setup, proxy: &StandIn, id: &str) -> Duration {
    let c = CdnClient::new(options(t, s, proxy, id)).unwrap();
    let _bg = c.start().await;
    let started = Instant::now();
    c.resolver().resolve(&t.vendors[0].name).await.expect("an answer, by HTTPDNS or LocalDNS");
    started.elapsed()
}

pub(crate) async fn run(t: &Topology) -> Vec<Row> {
    let s = setup(t).await;
    let http = t.http.clone();
    let shanghai_mode = Arc::new(AtomicU8::new(HANG));
    let start_proxy = |xff: &'static str, mode: Arc<AtomicU8>| {
        let place = Place { http: http.clone(), server: s.server.base(), xff, mode };
        async move {
            StandIn::start("127.0.0.1:0".parse().unwrap(), Router::new().fallback(proxy).with_state(place))
                .await
                .unwrap()
        }
    };
    let shanghai = start_proxy("10.1.0.7", shanghai_mode.clone()).await;
    let beijing = start_proxy("10.2.0.7", Arc::new(AtomicU8::new(PASS))).await;

    // Shanghai's devices by bucket: the probe share (1%), and the 5% and 25% cohorts' others.
    let mut sh_ids = ids("sh", 0, 100, 2);
    sh_ids.extend(ids("sh", 100, 500, 3));
    sh_ids.extend(ids("sh", 500, 2500, 5));
    sh_ids.extend(ids("sh", 2500, 10_000, 10));

    // Before: every Shanghai device pays the service's timeout, then LocalDNS.
    let mut before = row("unicom/shanghai unreachable, before the controller: timeout + LocalDNS");
    for id in &sh_ids {
        before.times.push(first_lookup(t, &s, &shanghai, id).await);
        before.requests += 1;
    }

    // Traffic: every device requests an object every 100 ms until the scenario ends.
    // The clients first (building one takes a while: its HTTP clients load the TLS roots).
    let clients: Vec<CdnClient> = sh_ids
        .iter()
        .map(|i| (&shanghai, i.clone()))
        .chain(ids("bj", 0, 10_000, 10).into_iter().map(|i| (&beijing, i)))
        .map(|(proxy, id)| CdnClient::new(options(t, &s, proxy, &id)).unwrap())
        .collect();
    let traffic = Instant::now();
    let running = Arc::new(AtomicBool::new(true));
    let mut devices = Vec::new();
    for c in clients {
        let (running, url) = (running.clone(), s.url.clone());
        devices.push(tokio::spawn(async move {
            let _bg = c.start().await;
            let mut i = 0usize;
            while running.load(Ordering::SeqCst) {
                let _ = c.get(&format!("{url}{}.jpg", i % crate::topology::OBJECTS)).await;
                i += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }

    // Degraded within two ticks of enough evidence; Beijing untouched.
    // Enough evidence: the rows the controller reads (the server's own store, read here
    // directly) hold 40 Shanghai requests of devices on HTTPDNS; from then, it has them at its
    // next tick.
    let mut degrade = row("unicom/shanghai: degraded by the controller");
    degrade.what = "since evidence";
    let deadline = traffic + Duration::from_secs(30);
    let mut evidence: Option<Instant> = None;
    let get = reqwest::Method::GET;
    let degraded = |rows: Vec<httpdns_store::policy::PlaceRow>| {
        rows.iter().any(|r| r.isp == "unicom" && r.state == "degraded")
    };
    while !degraded(s.store.policy_places().await.unwrap()) {
        assert!(Instant::now() < deadline, "unicom/shanghai never degraded");
        if evidence.is_none() {
            let minute = (httpdns_core::clock::unix_s() / 60) as i64;
            let rows = s.store.policy_minutes(minute - 5, minute).await.unwrap();
            let seen: f64 = rows
                .iter()
                .filter(|r| r.isp == "unicom" && r.cohort != "off")
                .map(|r| r.counts.requests)
                .sum();
            if seen >= 40.0 {
                evidence = Some(Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let evidence = evidence.expect("the store held the evidence before the change");
    degrade.times.push(evidence.elapsed());
    degrade.requests = 1;
    assert!(
        evidence.elapsed() < Duration::from_millis(2 * TICK_MS + 100 + 500),
        "degraded {:?} after the evidence: more than two ticks (and a flush, and the polling): {}",
        evidence.elapsed(),
        admin(&t.http, &s.server.base(), get.clone(), "/admin/v1/policy/places", None).await
    );
    assert_eq!(state(t, &s, "telecom").await.0, "healthy", "only the failing place changes");
    degrade.note = format!(
        "{} ms after the first app request; telecom/beijing stays healthy; tick {TICK_MS} ms, evidence 40 requests \
         (events batched every 200 ms by the devices, flushed every 100 ms by the server)",
        traffic.elapsed().as_millis()
    );

    // After: new Shanghai devices go to LocalDNS at once (the 1% probe share still asks).
    let mut after = row("unicom/shanghai degraded: LocalDNS at once");
    for id in sh_ids.iter().map(|i| format!("{i}-new")) {
        after.times.push(first_lookup(t, &s, &shanghai, &id).await);
        after.requests += 1;
    }

    // Recovery: the service comes back; a regression (503s) is injected once at the 25% step
    // and healed when the controller has stepped back.
    let mut ramp = row("unicom/shanghai recovery ramp (0.01, 0.05, 0.25, 1), regression at 25%");
    ramp.what = "since recovery";
    shanghai_mode.store(PASS, Ordering::SeqCst);
    let mut seen: Vec<(String, f64)> = vec![("degraded".into(), 0.01)];
    let mut injected = false;
    let deadline = Instant::now() + Duration::from_secs(90);
    let step_started = Instant::now();
    loop {
        let now = state(t, &s, "unicom").await;
        if seen.last() != Some(&now) {
            eprintln!("drill: unicom/shanghai {} at {}", now.0, now.1);
            seen.push(now.clone());
            ramp.times.push(step_started.elapsed());
            if now == ("recovering".to_owned(), 0.25) && !injected {
                injected = true;
                shanghai_mode.store(FAIL, Ordering::SeqCst);
            } else if injected && now == ("recovering".to_owned(), 0.05) {
                shanghai_mode.store(PASS, Ordering::SeqCst);
            }
        }
        if now.0 == "healthy" {
            break;
        }
        assert!(Instant::now() < deadline, "no healthy end: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.store(false, Ordering::SeqCst);
    for d in devices {
        let _ = d.await;
    }
    let expect: Vec<(String, f64)> = [
        ("degraded", 0.01),
        ("recovering", 0.05),
        ("recovering", 0.25),
        ("recovering", 0.05),
        ("recovering", 0.25),
        ("healthy", 1.0),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), *b))
    .collect();
    assert_eq!(seen, expect, "the ramp, the step back at 25% and the healthy end");
    assert_eq!(state(t, &s, "telecom").await.0, "healthy");
    ramp.requests = seen.len() - 1;
    ramp.note = format!(
        "each change's time since the service came back: {}; steps held {STEP_SECONDS} s",
        seen.iter()
            .skip(1)
            .zip(&ramp.times)
            .map(|((s, f), t)| format!("{s} {f} at {} ms", t.as_millis()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let p90 = |r: &Row| {
        let mut t = r.times.clone();
        t.sort();
        t[(t.len() * 9).div_ceil(10) - 1]
    };
    assert!(
        p90(&after) * 4 < p90(&before),
        "degraded, the place's p90 lookup is LocalDNS's ({:?}), not timeout + LocalDNS ({:?})",
        p90(&after),
        p90(&before)
    );
    vec![before, degrade, after, ramp]
}

fn row(fault: &'static str) -> Row {
    Row { fault, requests: 0, failed: 0, switched: 0, times: vec![], what: "lookup", note: String::new() }
}
