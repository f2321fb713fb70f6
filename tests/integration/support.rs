//! Starting real servers for the integration tests, on port 0.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use httpdns_server::{Config, Running};
use reqwest::{Client, Method, Response, StatusCode};
use serde_json::Value;

pub(crate) const TOKEN: &str = "test-admin-token-0123456789";

/// Which database a test runs against.
#[derive(Debug, Clone)]
pub(crate) enum Db {
    Sqlite,
    Postgres(String),
}

/// A server started in this process.
pub(crate) struct Server {
    // Held so the server lives as long as this value: dropping it aborts the tasks.
    _running: Option<Running>,
    pub(crate) base: String,
    /// The plain DNS address, when the test turned the listener on.
    pub(crate) dns: Option<SocketAddr>,
    /// The mirror gateway's address, when the test turned the listener on.
    pub(crate) mirror: Option<SocketAddr>,
    pub(crate) http: Client,
    _tmp: Option<tempfile::TempDir>,
}

/// Settings for [`Server::start`], as `HTTPDNS_*` environment values.
pub(crate) fn env(data_dir: &Path, db: &Db) -> HashMap<String, String> {
    let mut env = HashMap::new();
    env.insert("HTTPDNS_API_ADDR".into(), "127.0.0.1:0".into());
    env.insert("HTTPDNS_MIRROR_ADDR".into(), "off".into());
    env.insert("HTTPDNS_DNS_ADDR".into(), "off".into());
    env.insert("HTTPDNS_DATA_DIR".into(), data_dir.display().to_string());
    env.insert("HTTPDNS_ADMIN_TOKEN".into(), TOKEN.into());
    env.insert("HTTPDNS_SYNC_INTERVAL_MS".into(), "100".into());
    // No upstream unless a test starts one: tests talk to loopback only.
    env.insert("HTTPDNS_UPSTREAMS".into(), "off".into());
    // Origins on loopback are the test's own; a real deployment refuses them.
    env.insert("HTTPDNS_ALLOW_LOCAL_ORIGINS".into(), "true".into());
    if let Db::Postgres(url) = db {
        env.insert("HTTPDNS_DATABASE_URL".into(), url.clone());
    }
    env
}

impl Server {
    pub(crate) async fn start(db: &Db) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let e = env(tmp.path(), db);
        let mut s = Self::start_with(e, None).await;
        s._tmp = Some(tmp);
        s
    }

    pub(crate) async fn start_with(env: HashMap<String, String>, file: Option<&str>) -> Self {
        let config = Config::load(file, |k| env.get(k).cloned()).expect("config");
        let running = httpdns_server::start(config).await.expect("server starts");
        let base = format!("http://{}", running.api_addr.unwrap());
        let dns = running.dns_addr;
        let mirror = running.mirror_addr;
        Self {
            _running: Some(running),
            base,
            dns,
            mirror,
            http: httpdns_test_support::http::client(),
            _tmp: None,
        }
    }

    /// The running server (its TLS and metrics listeners' addresses).
    pub(crate) fn running(&self) -> &Running {
        self._running.as_ref().expect("started in this process")
    }

    /// A URL on the mirror listener.
    pub(crate) fn mirror_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.mirror.expect("mirror listener on"))
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = self.http.request(method, self.url(path)).bearer_auth(TOKEN);
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub(crate) async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.admin(Method::PUT, path, Some(body)).await
    }

    /// PUT that must succeed.
    pub(crate) async fn put_ok(&self, path: &str, body: Value) {
        let (status, resp) = self.put(path, body).await;
        assert!(status.is_success(), "PUT {path}: {status} {resp}");
    }

    pub(crate) async fn get(&self, path: &str) -> Response {
        self.http.get(self.url(path)).send().await.unwrap()
    }

    /// `GET path`, expecting 200, returning the body.
    pub(crate) async fn text(&self, path: &str) -> String {
        let resp = self.get(path).await;
        assert_eq!(resp.status(), StatusCode::OK, "GET {path}");
        resp.text().await.unwrap()
    }

    /// A small model: telecom and unicom nodes in Beijing and Shanghai, an IPv6 node, the
    /// operator networks 1.0.1.0/24 (telecom, beijing) and 1.0.2.0/24 (unicom, shanghai), and
    /// `www.example.com` on pool `edge`.
    pub(crate) async fn seed(&self) {
        for (id, ip, isp, region, latency) in [
            ("t-bj", "1.1.1.1", "telecom", "beijing", 10),
            ("t-sh", "1.1.1.2", "telecom", "shanghai", 5),
            ("u-bj", "2.2.2.1", "unicom", "beijing", 1),
            ("u-sh", "2.2.2.2", "unicom", "shanghai", 30),
            ("t-bj6", "2402:4e00::1", "telecom", "beijing", 10),
        ] {
            self.put_ok(
                &format!("/admin/v1/nodes/{id}"),
                serde_json::json!({"ip": ip, "pool": "edge", "isp": isp, "region": region,
                    "bandwidth_mbps": 1000, "load_pct": 20, "latency_ms": latency, "enabled": true}),
            )
            .await;
        }
        self.put_ok(
            "/admin/v1/networks/1.0.1.0%2F24",
            serde_json::json!({"isp": "telecom", "region": "beijing"}),
        )
        .await;
        self.put_ok(
            "/admin/v1/networks/1.0.2.0%2F24",
            serde_json::json!({"isp": "unicom", "region": "shanghai"}),
        )
        .await;
        self.put_ok(
            "/admin/v1/domains/www.example.com",
            serde_json::json!({"pool": "edge", "ttl": 60, "max_answers": 4}),
        )
        .await;
    }
}

/// The backends to run on: SQLite always, PostgreSQL when configured (a fresh database).
pub(crate) async fn backends(test: &str) -> Vec<(Db, Option<httpdns_test_support::postgres::TestDatabase>)> {
    let mut v = vec![(Db::Sqlite, None)];
    if let Some(db) = httpdns_test_support::postgres::fresh_database(test).await {
        v.push((Db::Postgres(db.url.clone()), Some(db)));
    }
    v
}

/// The `httpdns` binary run as a child process, as an operator runs it.
pub(crate) struct Process {
    pub(crate) child: Child,
    pub(crate) base: String,
    /// The mirror gateway's address, when it listens.
    pub(crate) mirror: Option<SocketAddr>,
    /// Where its stderr (the log) goes.
    pub(crate) log: std::path::PathBuf,
}

/// The address a listener `role` logged in `log` (`Listening. role="..." addr=...`).
fn listening_in(log: &str, role: &str) -> Option<SocketAddr> {
    log.lines()
        .find(|l| l.contains("Listening.") && l.contains(&format!("role=\"{role}\"")))
        .and_then(|l| l.split("addr=").nth(1))
        .and_then(|a| a.split_whitespace().next())
        .and_then(|a| a.parse::<SocketAddr>().ok())
}

impl Process {
    /// The bound address of listener `role` (`dns`, `api_tls`, ...), from the log.
    pub(crate) fn addr_of(&self, role: &str) -> Option<SocketAddr> {
        listening_in(&std::fs::read_to_string(&self.log).unwrap_or_default(), role)
    }

    /// Spawns `httpdns serve` with `env` and waits until it logs its API address.
    #[allow(
        clippy::zombie_processes,
        reason = "the child moves into `Process`, whose `Drop` kills and reaps it"
    )]
    pub(crate) fn spawn(env: &HashMap<String, String>, log_dir: &Path) -> Self {
        Self::spawn_with_args(env, log_dir, &["serve"])
    }

    /// As [`Process::spawn`], with these command-line arguments.
    pub(crate) fn spawn_with_args(env: &HashMap<String, String>, log_dir: &Path, args: &[&str]) -> Self {
        Self::spawn_binary(Path::new(env!("CARGO_BIN_EXE_httpdns")), env, log_dir, args)
    }

    /// As [`Process::spawn_with_args`], running `binary` (a release build, say).
    #[allow(
        clippy::zombie_processes,
        reason = "the child moves into `Process`, whose `Drop` kills and reaps it"
    )]
    pub(crate) fn spawn_binary(
        binary: &Path,
        env: &HashMap<String, String>,
        log_dir: &Path,
        args: &[&str],
    ) -> Self {
        let stderr_log = log_dir.join(format!("httpdns-{}.log", std::process::id() ^ rand_u32()));
        let stderr = std::fs::File::create(&stderr_log).unwrap();
        let mut child = Command::new(binary)
            .args(args)
            .envs(env)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn httpdns");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = std::fs::read_to_string(&stderr_log).unwrap_or_default();
            let listening = |role: &str| listening_in(&log, role);
            let mirror_on = env.get("HTTPDNS_MIRROR_ADDR").is_some_and(|v| v != "off");
            if let Some(addr) = listening("api") {
                let mirror = listening("mirror");
                if !mirror_on || mirror.is_some() {
                    return Self { child, base: format!("http://{addr}"), mirror, log: stderr_log };
                }
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("httpdns did not start:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub(crate) fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "httpdns did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rand_u32() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed).wrapping_mul(2_654_435_761)
}

/// Polls `check` every 20 ms until it returns true or `within` passes.
pub(crate) async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The admin API of a [`Process`].
pub(crate) struct Admin {
    base: String,
    http: Client,
}

impl Admin {
    pub(crate) fn new(base: &str) -> Self {
        Self { base: base.to_owned(), http: httpdns_test_support::http::client() }
    }

    pub(crate) async fn put(&self, path: &str, body: Value) -> Value {
        let resp = self
            .http
            .put(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or_default();
        assert!(status.is_success(), "PUT {path}: {status} {body}");
        body
    }
}
