use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::support::{eventually, Db, Process, Server};

async fn seed_over_http(base: &str, token: &str) {
    let http = httpdns_test_support::http::client();
    for (path, body) in [
        (
            "/admin/v1/nodes/t1",
            json!({"ip": "1.1.1.1", "pool": "edge", "isp": "telecom", "region": "beijing"}),
        ),
        (
            "/admin/v1/nodes/u1",
            json!({"ip": "2.2.2.2", "pool": "edge", "isp": "unicom", "region": "beijing"}),
        ),
        ("/admin/v1/networks/1.0.1.0%2F24", json!({"isp": "telecom", "region": "beijing"})),
        ("/admin/v1/domains/www.example.com", json!({"pool": "edge", "ttl": 120})),
    ] {
        let resp =
            http.put(format!("{base}{path}")).bearer_auth(token).body(body.to_string()).send().await.unwrap();
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
    }
}

#[tokio::test]
async fn restart_with_the_same_data_directory_keeps_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let mut env = crate::support::env(tmp.path(), &Db::Sqlite);
    // No configured token: one is generated into the data directory and reused.
    env.remove("HTTPDNS_ADMIN_TOKEN");
    let first = Process::spawn(&env, tmp.path());
    let token = std::fs::read_to_string(tmp.path().join("admin-token")).unwrap();
    seed_over_http(&first.base, token.trim()).await;
    let answer = |base: String| async move {
        reqwest::get(format!("{base}/d?dn=www.example.com&ip=1.0.1.9&ttl=1"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    assert_eq!(answer(first.base.clone()).await, "1.1.1.1,120");
    let status = first.terminate();
    assert!(status.success(), "clean exit on SIGTERM: {status:?}");

    let second = Process::spawn(&env, tmp.path());
    assert_eq!(answer(second.base.clone()).await, "1.1.1.1,120");
    assert_eq!(std::fs::read_to_string(tmp.path().join("admin-token")).unwrap(), token, "token kept");
    let resp = httpdns_test_support::http::client()
        .get(format!("{}/admin/v1/nodes/u1", second.base))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

/// A TCP forwarder between the server and PostgreSQL that a test can cut and restore, to
/// take the database away from a running server without touching the shared PostgreSQL.
struct Cuttable {
    addr: std::net::SocketAddr,
    cut: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Cuttable {
    async fn start(target: String, addr: Option<std::net::SocketAddr>) -> Self {
        let listener =
            TcpListener::bind(addr.unwrap_or_else(|| "127.0.0.1:0".parse().unwrap())).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(Notify::new());
        let c = cut.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    () = c.notified() => { conns.abort_all(); return; }
                    accepted = listener.accept() => {
                        let Ok((mut inbound, _)) = accepted else { continue };
                        let target = target.clone();
                        conns.spawn(async move {
                            if let Ok(mut outbound) = TcpStream::connect(target).await {
                                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            }
                        });
                    }
                }
            }
        });
        Self { addr, cut, task }
    }

    async fn cut(self) -> std::net::SocketAddr {
        self.cut.notify_one();
        let _ = self.task.await;
        self.addr
    }
}

#[tokio::test]
async fn database_outage_keeps_answers_flowing_and_readyz_says_degraded() {
    let Some(db) = httpdns_test_support::postgres::fresh_database("database_outage").await else {
        return;
    };
    // Route the server's connections through the forwarder.
    let url = reqwest::Url::parse(&db.url).unwrap();
    let target = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432));
    let proxy = Cuttable::start(target.clone(), None).await;
    let mut via_proxy = url.clone();
    via_proxy.set_host(Some("127.0.0.1")).unwrap();
    via_proxy.set_port(Some(proxy.addr.port())).unwrap();

    let s = Server::start(&Db::Postgres(via_proxy.to_string())).await;
    s.seed().await;
    assert_eq!(s.text("/d?dn=www.example.com&ip=1.0.1.7").await, "1.1.1.1;1.1.1.2");

    let addr = proxy.cut().await;
    // A sync fails once the pool has waited its 5 s for a connection; one already waiting at
    // the cut can spend that twice, and CI runs many servers at once (10 s was seen here).
    let degraded = eventually(Duration::from_secs(20), || async {
        let body: Value = s.get("/readyz").await.json().await.unwrap();
        body["status"] == "degraded" && body["store"] == "unreachable"
    })
    .await;
    assert!(degraded, "readyz reports the store outage");
    assert_eq!(s.get("/readyz").await.status(), 200, "still ready to answer");
    for _ in 0..20 {
        assert_eq!(
            s.text("/d?dn=www.example.com&ip=1.0.1.7").await,
            "1.1.1.1;1.1.1.2",
            "answers keep flowing"
        );
    }
    // Writes fail cleanly while the database is away.
    let (status, body) = s.put("/admin/v1/domains/new.example.com", json!({"pool": "edge"})).await;
    assert_eq!(status, 503, "{body}");

    // The database comes back on the same address: sync resumes.
    let _proxy = Cuttable::start(target, Some(addr)).await;
    let recovered = eventually(Duration::from_secs(15), || async {
        let body: Value = s.get("/readyz").await.json().await.unwrap();
        body["status"] == "ready"
    })
    .await;
    assert!(recovered, "sync resumes when the database is back");
    s.put_ok("/admin/v1/domains/new.example.com", json!({"pool": "edge"})).await;
    assert_eq!(s.text("/d?dn=new.example.com&ip=1.0.1.7").await, "1.1.1.1;1.1.1.2");
}

#[tokio::test]
async fn two_replicas_on_one_postgres_database_see_each_others_writes() {
    let Some(db) = httpdns_test_support::postgres::fresh_database("two_replicas").await else {
        return;
    };
    let a = Server::start(&Db::Postgres(db.url.clone())).await;
    let b = Server::start(&Db::Postgres(db.url.clone())).await;
    a.seed().await;
    let seen = eventually(Duration::from_secs(1), || async {
        b.text("/d?dn=www.example.com&ip=1.0.1.7").await == "1.1.1.1;1.1.1.2"
    })
    .await;
    assert!(seen, "a node added on replica A is answered by replica B within 1 s");
    let (status, _) = b.admin(reqwest::Method::DELETE, "/admin/v1/nodes/t-bj", None).await;
    assert_eq!(status, 204);
    let seen = eventually(Duration::from_secs(1), || async {
        a.text("/d?dn=www.example.com&ip=1.0.1.7").await == "1.1.1.2"
    })
    .await;
    assert!(seen, "a delete on B reaches A");
}
