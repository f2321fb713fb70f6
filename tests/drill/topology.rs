//! The drill's machines, all on loopback: the real `httpdns` binary (API, DNS, mirror), a
//! second `httpdns` as the carrier's LocalDNS, a real origin, three CDN "vendors" whose edge
//! nodes pull from the mirror gateway, the original CDN host the URLs had before convergence,
//! a load balancer in front of the HTTPDNS service, and a public address for the network check.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};

use crate::origin::RunningOrigin;
use crate::standin::StandIn;

pub(crate) const TOKEN: &str = "drill-admin-token-0123456789";
/// Objects at the origin: `/bucket/img/{i}.jpg`.
pub(crate) const OBJECTS: usize = 400;

/// The `httpdns` binary as a child process.
pub(crate) struct Proc {
    child: Child,
    pub(crate) addrs: HashMap<String, SocketAddr>,
}

impl Proc {
    fn spawn(env: &[(&str, String)], roles: &[&str], log: &Path) -> Self {
        Self::spawn_args(env, &["serve"], roles, log)
    }

    /// [`Self::spawn`] with a configuration file.
    pub(crate) fn spawn_with_config(env: &[(&str, String)], file: &Path, roles: &[&str], log: &Path) -> Self {
        Self::spawn_args(env, &["--config", file.to_str().unwrap(), "serve"], roles, log)
    }

    #[allow(clippy::zombie_processes, reason = "reaped in Drop")]
    fn spawn_args(env: &[(&str, String)], args: &[&str], roles: &[&str], log: &Path) -> Self {
        let stderr = std::fs::File::create(log).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_httpdns"))
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn httpdns");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let addrs: HashMap<String, SocketAddr> = text
                .lines()
                .filter(|l| l.contains("Listening."))
                .filter_map(|l| {
                    let role = l.split("role=\"").nth(1)?.split('"').next()?.to_owned();
                    let addr = l.split("addr=").nth(1)?.split_whitespace().next()?.parse().ok()?;
                    Some((role, addr))
                })
                .collect();
            if roles.iter().all(|r| addrs.contains_key(*r)) {
                return Self { child, addrs };
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("httpdns did not start:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn base(&self) -> String {
        format!("http://{}", self.addrs["api"])
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One edge node of a vendor.
pub(crate) struct Node {
    pub(crate) ip: IpAddr,
    pub(crate) standin: StandIn,
    /// 0: serve; 1: answer 503.
    pub(crate) mode: Arc<AtomicU8>,
    pub(crate) hits: Arc<AtomicUsize>,
}

/// A CDN host name and its edge nodes (all on one port).
pub(crate) struct Vendor {
    pub(crate) name: String,
    pub(crate) port: u16,
    pub(crate) nodes: Vec<Node>,
}

impl Vendor {
    /// `name:port`, as in the config document.
    pub(crate) fn host(&self) -> String {
        format!("{}:{}", self.name, self.port)
    }
    pub(crate) fn set_5xx(&self, on: bool) {
        for n in &self.nodes {
            n.mode.store(u8::from(on), Ordering::SeqCst);
        }
    }
    pub(crate) fn stop(&self) {
        for n in &self.nodes {
            n.standin.stop();
        }
    }
    pub(crate) async fn restart(&self) {
        for n in &self.nodes {
            n.standin.restart().await;
        }
    }
}

#[derive(Clone)]
struct Upstream {
    http: reqwest::Client,
    /// Prepended to the request path.
    base: String,
    mode: Arc<AtomicU8>,
    hits: Arc<AtomicUsize>,
}

/// An edge node: forwards `GET`/`HEAD` to its upstream (the mirror gateway, or the origin for
/// the original host), like a CDN pulling from its origin.
async fn edge(State(up): State<Upstream>, method: Method, uri: Uri) -> Response {
    up.hits.fetch_add(1, Ordering::SeqCst);
    if up.mode.load(Ordering::SeqCst) == 1 {
        return (StatusCode::SERVICE_UNAVAILABLE, "edge node failing").into_response();
    }
    let pq = uri.path_and_query().map_or("/", |p| p.as_str());
    match up.http.request(method, format!("{}{pq}", up.base)).send().await {
        Ok(r) => {
            let mut b = Response::builder().status(r.status().as_u16());
            for h in ["content-type", "etag", "x-cache", "last-modified"] {
                if let Some(v) = r.headers().get(h) {
                    b = b.header(h, v.as_bytes());
                }
            }
            let body = r.bytes().await.unwrap_or_default();
            b.body(Body::from(body)).unwrap()
        }
        Err(e) => {
            (StatusCode::BAD_GATEWAY, format!("edge could not reach its upstream: {e}")).into_response()
        }
    }
}

/// Load balancer modes in front of the HTTPDNS service.
pub(crate) const LB_PASS: u8 = 0;
pub(crate) const LB_503: u8 = 1;
/// Adds invalid addresses to every answer (a corrupted or hijacked answer).
pub(crate) const LB_INVALID: u8 = 2;
/// Adds a node of another carrier, labelled as such.
pub(crate) const LB_WRONG_ISP: u8 = 3;

async fn balancer(State(up): State<Upstream>, uri: Uri) -> Response {
    let pq = uri.path_and_query().map_or("/", |p| p.as_str());
    let mode = up.mode.load(Ordering::SeqCst);
    if mode == LB_503 {
        return (StatusCode::SERVICE_UNAVAILABLE, "no healthy backend").into_response();
    }
    let Ok(r) = up.http.get(format!("{}{pq}", up.base)).send().await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let status = r.status().as_u16();
    let mut body: Value = r.json().await.unwrap_or(Value::Null);
    if let Some(entries) = body.get_mut("dns").and_then(Value::as_array_mut) {
        for e in entries {
            match mode {
                LB_INVALID => {
                    let ips = e["ips"].as_array_mut().unwrap();
                    for bad in ["0.0.0.0", "255.255.255.255", "224.0.0.1", "240.0.0.1"] {
                        ips.insert(0, json!(bad));
                    }
                    e["ipsv6"] = json!(["::", "ff02::1"]);
                }
                LB_WRONG_ISP => {
                    e["ips"].as_array_mut().unwrap().insert(0, json!("127.0.0.15"));
                    e["ip_isp"]["127.0.0.15"] = json!("telecom");
                }
                _ => {}
            }
        }
    }
    (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response()
}

pub(crate) struct Topology {
    _tmp: tempfile::TempDir,
    pub(crate) server: Proc,
    pub(crate) local: Proc,
    pub(crate) origin: RunningOrigin,
    pub(crate) lb: StandIn,
    pub(crate) lb_mode: Arc<AtomicU8>,
    pub(crate) vendors: Vec<Vendor>,
    pub(crate) original: Vendor,
    /// Stands for the public DNS servers of `publicIpList` (TCP on its port).
    pub(crate) public: StandIn,
    pub(crate) public_key: String,
    pub(crate) http: reqwest::Client,
    published: std::sync::atomic::AtomicBool,
    /// Every drill client's event reporter, flushed and read back at the end.
    pub(crate) reporters: parking_lot::Mutex<Vec<httpdns_client::Reporter>>,
}

async fn vendor(name: &str, ips: &[&str], upstream: &str, http: &reqwest::Client) -> Vendor {
    // Every node of a host listens on the same port, as edge nodes do on 80/443.
    'retry: for _ in 0..20 {
        let mut nodes = Vec::new();
        let mut port = 0;
        for ip in ips {
            match node(ip, port, upstream, http).await {
                Ok(n) => {
                    port = n.standin.addr.port();
                    nodes.push(n);
                }
                Err(_) => continue 'retry,
            }
        }
        return Vendor { name: name.to_owned(), port, nodes };
    }
    panic!("no common port for {name}");
}

/// An edge node on `ip:port` (port 0 picks one) pulling from `upstream`.
async fn node(ip: &str, port: u16, upstream: &str, http: &reqwest::Client) -> std::io::Result<Node> {
    let ip: IpAddr = ip.parse().unwrap();
    let mode = Arc::new(AtomicU8::new(0));
    let hits = Arc::new(AtomicUsize::new(0));
    let up =
        Upstream { http: http.clone(), base: upstream.to_owned(), mode: mode.clone(), hits: hits.clone() };
    let standin =
        StandIn::start(SocketAddr::new(ip, port), Router::new().fallback(edge).with_state(up)).await?;
    Ok(Node { ip, standin, mode, hits })
}

impl Topology {
    pub(crate) async fn start() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let http = httpdns_test_support::http::client_builder().no_proxy().build().unwrap();

        let origin = RunningOrigin::start().await;
        for i in 0..OBJECTS {
            origin.origin.put(&format!("/bucket/img/{i}.jpg"), object(i), "image/jpeg");
        }

        let common = |dir: &str| {
            vec![
                ("HTTPDNS_API_ADDR", "127.0.0.1:0".to_owned()),
                ("HTTPDNS_DNS_ADDR", "127.0.0.1:0".to_owned()),
                ("HTTPDNS_DATA_DIR", tmp.path().join(dir).display().to_string()),
                ("HTTPDNS_ADMIN_TOKEN", TOKEN.to_owned()),
                ("HTTPDNS_SYNC_INTERVAL_MS", "100".to_owned()),
                ("HTTPDNS_ALLOW_PRIVATE_NODE_IPS", "true".to_owned()),
                // The drill's origin is on loopback.
                ("HTTPDNS_ALLOW_LOCAL_ORIGINS", "true".to_owned()),
                ("HTTPDNS_UPSTREAMS", "off".to_owned()),
            ]
        };
        let mut env = common("server");
        env.push(("HTTPDNS_MIRROR_ADDR", "127.0.0.1:0".to_owned()));
        let server = Proc::spawn(&env, &["api", "dns", "mirror"], &tmp.path().join("server.log"));
        let mut env = common("localdns");
        env.push(("HTTPDNS_MIRROR_ADDR", "off".to_owned()));
        let local = Proc::spawn(&env, &["api", "dns"], &tmp.path().join("localdns.log"));

        let mirror = format!("http://{}", server.addrs["mirror"]);
        let vendors = vec![
            vendor(
                "cdn-a.drill.test",
                &["127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14"],
                &mirror,
                &http,
            )
            .await,
            vendor("cdn-b.drill.test", &["127.0.0.21", "127.0.0.22"], &mirror, &http).await,
            vendor("cdn-c.drill.test", &["127.0.0.31"], &mirror, &http).await,
        ];
        // The carrier-foreign nodes of cdn-a: reachable, but for telecom clients.
        let foreign = node("127.0.0.15", vendors[0].port, &mirror, &http).await.unwrap();
        let original =
            vendor("image.drill.test", &["127.0.0.41"], &format!("{}/bucket", origin.url()), &http).await;

        let lb_mode = Arc::new(AtomicU8::new(LB_PASS));
        let lb_up = Upstream {
            http: http.clone(),
            base: server.base(),
            mode: lb_mode.clone(),
            hits: Default::default(),
        };
        let lb = StandIn::start(
            "127.0.0.1:0".parse().unwrap(),
            Router::new().fallback(balancer).with_state(lb_up),
        )
        .await
        .unwrap();
        let public = StandIn::start("127.0.0.1:0".parse().unwrap(), Router::new()).await.unwrap();

        let mut t = Self {
            _tmp: tmp,
            server,
            local,
            origin,
            lb,
            lb_mode,
            vendors,
            original,
            reporters: Default::default(),
            public,
            public_key: String::new(),
            http,
            published: Default::default(),
        };
        t.vendors[0].nodes.push(foreign);
        t.provision().await;
        t
    }

    pub(crate) async fn admin(
        &self,
        base: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{base}{path}")).bearer_auth(TOKEN);
        // Config modules are replaced with `If-Match: *` once they exist (the drill does not
        // race itself).
        if path.starts_with("/admin/v1/config/") && self.published.load(Ordering::SeqCst) {
            req = req.header("if-match", "*");
        }
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn put(&self, base: &str, path: &str, body: Value) {
        let (s, v) = self.admin(base, Method::PUT, path, Some(body)).await;
        assert!((200..300).contains(&s), "PUT {path}: {s} {v}");
    }

    async fn provision(&mut self) {
        let api = self.server.base();
        self.put(
            &api,
            "/admin/v1/mirror/rules/image",
            json!({"path_prefix": "/image", "origin": format!("{}/bucket", self.origin.url())}),
        )
        .await;
        // The drill's client is 127.0.0.1: a Unicom client in Shanghai.
        self.put(&api, "/admin/v1/networks/127.0.0.0%2F24", json!({"isp": "unicom", "region": "shanghai"}))
            .await;
        let pools = ["a", "b", "c"];
        for (v, pool) in self.vendors.iter().zip(pools) {
            self.put(
                &api,
                &format!("/admin/v1/pools/{pool}"),
                json!({"health_check": {"kind": "tcp", "port": v.port,
                "interval_ms": 200, "timeout_ms": 200, "healthy_threshold": 1, "unhealthy_threshold": 2}}),
            )
            .await;
            for n in &v.nodes {
                let isp = if n.ip.to_string() == "127.0.0.15" { "telecom" } else { "unicom" };
                let id = n.ip.to_string().replace('.', "-");
                self.put(
                    &api,
                    &format!("/admin/v1/nodes/{id}"),
                    json!({"ip": n.ip, "pool": pool, "isp": isp, "region": "shanghai"}),
                )
                .await;
            }
            self.put(
                &api,
                &format!("/admin/v1/domains/{}", v.name),
                json!({"pool": pool, "ttl": 60, "max_answers": 8}),
            )
            .await;
        }
        self.put(
            &api,
            "/admin/v1/nodes/127-0-0-41",
            json!({"ip": "127.0.0.41", "pool": "orig", "isp": "unicom", "region": "shanghai"}),
        )
        .await;
        self.put(&api, "/admin/v1/domains/image.drill.test", json!({"pool": "orig", "ttl": 60})).await;
        self.publish(&[0, 1, 2]).await;
        let key: Value = self
            .http
            .get(format!("{api}/app/config-center/public-key"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        self.public_key = key["public_key"].as_str().unwrap().to_owned();

        // The carrier's LocalDNS knows one node per host, whatever the carrier, and a name it
        // hijacks to private addresses.
        let local = self.local.base();
        for (i, v) in self.vendors.iter().enumerate() {
            let ip = v.nodes[0].ip;
            self.put(
                &local,
                &format!("/admin/v1/nodes/l{i}"),
                json!({"ip": ip, "pool": format!("l{i}"), "isp": "any", "region": "any"}),
            )
            .await;
            self.put(
                &local,
                &format!("/admin/v1/domains/{}", v.name),
                json!({"pool": format!("l{i}"), "ttl": 60}),
            )
            .await;
        }
        self.put(
            &local,
            "/admin/v1/nodes/lo",
            json!({"ip": "127.0.0.41", "pool": "lo", "isp": "any", "region": "any"}),
        )
        .await;
        self.put(&local, "/admin/v1/domains/image.drill.test", json!({"pool": "lo", "ttl": 60})).await;
        for (id, ip) in [("h1", "127.0.0.1"), ("h2", "10.0.0.1")] {
            self.put(
                &local,
                &format!("/admin/v1/nodes/{id}"),
                json!({"ip": ip, "pool": "hijack", "isp": "any", "region": "any"}),
            )
            .await;
        }
        self.put(&local, "/admin/v1/domains/hijacked.drill.test", json!({"pool": "hijack", "ttl": 60})).await;
        // Both servers apply writes within their sync interval; wait until answers show them.
        for (base, name) in [(&api, "image.drill.test"), (&local, "hijacked.drill.test")] {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let t =
                    self.http.get(format!("{base}/d?dn={name}")).send().await.unwrap().text().await.unwrap();
                if !t.is_empty() {
                    break;
                }
                assert!(Instant::now() < deadline, "{base} answers {name}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// Publishes the `cdn` module with the vendors at `order` as `hostListConfig`.
    pub(crate) async fn publish(&self, order: &[usize]) {
        let hosts: Vec<Value> =
            order.iter().map(|&i| json!({"host": self.vendors[i].host(), "rate": 1})).collect();
        let doc = json!({
            "mergeHostConfigs": [{"host": self.original.host(), "pathPrefix": "/image", "rate": 1}],
            "hostListConfig": hosts,
            "reviveProbeInterval": 10000,
            "configRequestInterval": 10000,
            "publicIpList": ["127.0.0.1"],
        });
        self.put(&self.server.base(), "/admin/v1/config/cdn", doc).await;
        self.published.store(true, Ordering::SeqCst);
    }

    /// The URL of object `i` as the app has it, before convergence.
    pub(crate) fn url(&self, i: usize) -> String {
        format!("http://{}/img/{}.jpg", self.original.host(), i % OBJECTS)
    }

    /// The directory of this drill's files.
    pub(crate) fn dir(&self) -> &Path {
        self._tmp.path()
    }

    pub(crate) fn lb_url(&self) -> String {
        format!("http://{}", self.lb.addr)
    }

    pub(crate) fn vendor_of(&self, host: &str) -> Option<usize> {
        self.vendors.iter().position(|v| v.host() == host)
    }
}

/// Object `i`'s bytes: distinct per object, so a wrong object is noticed.
pub(crate) fn object(i: usize) -> Vec<u8> {
    let mut v = format!("object {i}\n").into_bytes();
    v.resize(2048 + i, b'x');
    v
}
