//! `httpdns backup` and `httpdns restore` on the real binary. A server with every kind of
//! resource (a deletion included), two config modules with history and a rollback, and stored
//! copies (filled from an origin and written through the admin API) is backed up while it
//! runs and takes writes; the backup is restored into a fresh database, a fresh mirror store
//! and an empty data directory; a server started there with the origin gone answers every
//! admin read, answer, config document (signature included) and stored copy byte for byte
//! as the first did. Also: a non-empty database is refused without `--force` and left as it
//! was, `--force` replaces it, and a damaged archive restores nothing.
//!
//! SQLite with the local store always; PostgreSQL with the S3 store (s3s-fs) when
//! `HTTPDNS_TEST_POSTGRES_URL` is set and s3s-fs is installed (`.ci/run` provides both).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::json;

use crate::mirror::S3Server;
use crate::origin::RunningOrigin;
use crate::support::{env, Db, Process, TOKEN};

/// The settings of one side: its database and mirror store, never its signing key (the
/// restored server must sign with the key the backup carries).
fn side(dir: &Path, db: &Db, s3: Option<&S3Server>) -> HashMap<String, String> {
    let mut e = env(dir, db);
    e.insert("HTTPDNS_MIRROR_ADDR".into(), "127.0.0.1:0".into());
    e.insert("HTTPDNS_ALLOW_LOCAL_ORIGINS".into(), "true".into());
    if let Some(s3) = s3 {
        e.insert("HTTPDNS_MIRROR_STORE".into(), "s3://mirror-test/copies".into());
        e.insert("HTTPDNS_MIRROR_S3_ENDPOINT".into(), s3.endpoint.clone());
        e.insert("AWS_ACCESS_KEY_ID".into(), "testkey".into());
        e.insert("AWS_SECRET_ACCESS_KEY".into(), "testsecret".into());
    }
    e
}

fn run(env: &HashMap<String, String>, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_httpdns"))
        .args(args)
        .envs(env)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run httpdns")
}

fn ok(out: &Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{what} failed: {stderr}");
    stderr
}

/// Everything a client or operator can read, by what was asked: admin lists (with revisions
/// and times), answers, config documents with ETag and signature, per-device documents,
/// history and every version, the public key, and each stored copy with its headers.
async fn observe(
    base: &str,
    mirror: &str,
    modules: &[(&str, i64)],
    objects: &[&str],
) -> BTreeMap<String, String> {
    let http = httpdns_test_support::http::client();
    let mut seen = BTreeMap::new();
    let mut asks = Vec::new();
    for kind in ["networks", "nodes", "pools", "domains", "accounts", "mirror/rules"] {
        asks.push((
            format!("list {kind}"),
            http.get(format!("{base}/admin/v1/{kind}?limit=1000")).bearer_auth(TOKEN),
        ));
    }
    asks.push(("deleted node".into(), http.get(format!("{base}/admin/v1/nodes/gone")).bearer_auth(TOKEN)));
    for ip in ["1.0.1.7", "1.0.2.7"] {
        asks.push((format!("/d {ip}"), http.get(format!("{base}/d?dn=www.example.com&ip={ip}&ttl=1"))));
        asks.push((
            format!("/resolve {ip}"),
            http.get(format!("{base}/resolve?host=www.example.com,static.example.com&ip={ip}&query=4,6")),
        ));
    }
    asks.push(("public key".into(), http.get(format!("{base}/app/config-center/public-key"))));
    asks.push(("config list".into(), http.get(format!("{base}/admin/v1/config")).bearer_auth(TOKEN)));
    for (m, versions) in modules {
        asks.push((
            format!("{m} current"),
            http.get(format!("{base}/app/config-center/module-config?module={m}")),
        ));
        asks.push((
            format!("{m} device"),
            http.post(format!("{base}/app/config-center/module-config"))
                .body(json!({"module": m, "deviceId": "a1b2c3d4e5f6"}).to_string()),
        ));
        asks.push((
            format!("{m} history"),
            http.get(format!("{base}/admin/v1/config/{m}/versions")).bearer_auth(TOKEN),
        ));
        for v in 1..=*versions {
            asks.push((
                format!("{m} version {v}"),
                http.get(format!("{base}/admin/v1/config/{m}/versions/{v}")).bearer_auth(TOKEN),
            ));
        }
    }
    for o in objects {
        asks.push((format!("copy {o}"), http.get(format!("{mirror}{o}"))));
        asks.push((format!("range {o}"), http.get(format!("{mirror}{o}")).header("range", "bytes=3-9")));
    }
    for (what, req) in asks {
        let r = req.send().await.unwrap();
        let mut text = format!("{}\n", r.status());
        // Lists without what was written while the backup ran (below), and without their length.
        let busy = what == "list nodes" || what == "list pools";
        let headers: &[&str] = if busy {
            &["etag", "content-type"]
        } else {
            &["etag", "x-config-signature", "content-type", "content-length", "x-cache", "last-modified"]
        };
        for h in headers {
            if let Some(v) = r.headers().get(*h) {
                text.push_str(&format!("{h}: {}\n", v.to_str().unwrap()));
            }
        }
        let body = r.bytes().await.unwrap();
        if busy {
            // The nodes written while the backup ran (and their pool) are checked on their own.
            let mut list: serde_json::Value = serde_json::from_slice(&body).unwrap();
            list["items"]
                .as_array_mut()
                .unwrap()
                .retain(|i| !i["name"].as_str().unwrap().starts_with("busy"));
            text.push_str(&list.to_string());
        } else {
            text.push_str(&String::from_utf8_lossy(&body));
        }
        seen.insert(what, text);
    }
    seen
}

/// A server with a bit of everything; returns the modules with their version counts and the
/// mirror paths of the stored copies.
async fn populate(
    base: &str,
    mirror: &str,
    origin: &RunningOrigin,
) -> (Vec<(&'static str, i64)>, Vec<&'static str>) {
    let http = httpdns_test_support::http::client();
    let put = |path: String, body: serde_json::Value| {
        let req = http.put(format!("{base}{path}")).bearer_auth(TOKEN).body(body.to_string());
        async move {
            let r = req.send().await.unwrap();
            assert!(r.status().is_success(), "PUT {path}: {}", r.text().await.unwrap());
        }
    };
    put("/admin/v1/networks/1.0.1.0%2F24".into(), json!({"isp": "telecom", "region": "beijing"})).await;
    put("/admin/v1/networks/1.0.2.0%2F24".into(), json!({"isp": "unicom", "region": "shanghai"})).await;
    // No health check: probes would go to the nodes' public addresses.
    put("/admin/v1/pools/edge".into(), json!({})).await;
    for (id, ip, isp, region, latency) in [
        ("t-bj", "1.1.1.1", "telecom", "beijing", 10.5),
        ("t-sh", "1.1.1.2", "telecom", "shanghai", 5.25),
        ("u-sh", "2.2.2.2", "unicom", "shanghai", 30.0),
        ("t-bj6", "2402:4e00::1", "telecom", "beijing", 10.0),
        ("gone", "3.3.3.3", "unicom", "beijing", 1.0),
    ] {
        put(
            format!("/admin/v1/nodes/{id}"),
            json!({"ip": ip, "pool": "edge", "isp": isp, "region": region, "latency_ms": latency, "load_pct": 20}),
        )
        .await;
    }
    let r = http.delete(format!("{base}/admin/v1/nodes/gone")).bearer_auth(TOKEN).send().await.unwrap();
    assert!(r.status().is_success());
    put("/admin/v1/domains/www.example.com".into(), json!({"pool": "edge", "ttl": 60, "max_answers": 4}))
        .await;
    put("/admin/v1/accounts/100001".into(), json!({"secret": "s3cr3t-account-key", "rate_limit_qps": 50}))
        .await;
    put(
        "/admin/v1/mirror/rules/img".into(),
        json!({"path_prefix": "/img", "origin": format!("{}/o", origin.url())}),
    )
    .await;

    // Config: module cdn with three publishes and a rollback (4 versions), module demo with one.
    let doc = |host: &str, rate: f64| {
        json!({"mergeHostConfigs": [{"host": "image.xxx.com", "pathPrefix": "/image", "rate": rate}],
               "hostListConfig": [{"host": host, "rate": 1}],
               "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": ["223.5.5.5"]})
    };
    for (v, host, rate) in [(0, "cdn-a.xxx.com", 1.0), (1, "cdn-b.xxx.com", 0.5), (2, "cdn-c.xxx.com", 0.25)]
    {
        let r = http
            .put(format!("{base}/admin/v1/config/cdn"))
            .bearer_auth(TOKEN)
            .header("if-match", format!("\"{v}\""))
            .body(doc(host, rate).to_string())
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "publish cdn: {}", r.text().await.unwrap());
    }
    let r = http
        .post(format!("{base}/admin/v1/config/cdn/rollback"))
        .bearer_auth(TOKEN)
        .body(json!({"to": 2}).to_string())
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "rollback: {}", r.text().await.unwrap());
    put("/admin/v1/config/demo".into(), doc("cdn-demo.xxx.com", 1.0)).await;

    // Stored copies: two filled from the origin (one larger than the in-memory limit), one
    // written through the admin API (it exists nowhere else).
    origin.origin.put("/o/logo.png", (0..=255u8).cycle().take(10_000).collect(), "image/png");
    origin.origin.put(
        "/o/big.bin",
        (0..2_000_000u32).map(|i| (i % 251) as u8).collect(),
        "application/octet-stream",
    );
    for p in ["/img/logo.png", "/img/big.bin"] {
        let r = http.get(format!("{mirror}{p}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "fill {p}");
        r.bytes().await.unwrap();
    }
    let r = http
        .put(format!("{base}/admin/v1/mirror/objects/img/only-here.txt"))
        .bearer_auth(TOKEN)
        .header("content-type", "text/plain")
        .body("written through the admin API only")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    (vec![("cdn", 4), ("demo", 1)], vec!["/img/logo.png", "/img/big.bin", "/img/only-here.txt"])
}

async fn round_trip(test: &str, a_db: Db, b_db: Db, s3: Option<(S3Server, S3Server)>) {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let env_a = side(dir_a.path(), &a_db, s3.as_ref().map(|s| &s.0));
    let env_b = side(dir_b.path(), &b_db, s3.as_ref().map(|s| &s.1));
    let origin = RunningOrigin::start().await;
    let a = Process::spawn(&env_a, dir_a.path());
    let mirror_a = format!("http://{}", a.mirror.unwrap());
    let (modules, objects) = populate(&a.base, &mirror_a, &origin).await;
    let before = observe(&a.base, &mirror_a, &modules, &objects).await;
    assert!(before["cdn current"].contains("x-config-signature: "), "{}", before["cdn current"]);
    assert!(before["cdn history"].contains(r#""rollback_of":2"#), "{}", before["cdn history"]);
    assert!(before["copy /img/only-here.txt"].contains("written through the admin API only"));

    // The backup runs while the server takes writes; the dump is one point in time, so the
    // restored revision is exactly the newest write it holds.
    let archive = dir_a.path().join("backups/httpdns.tar");
    std::fs::create_dir_all(archive.parent().unwrap()).unwrap();
    // The writer goes on until the backup is done (at most 20000 writes), so the dump's
    // point in time falls between its first and its last write whatever the machine's load.
    let written = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (base, http) = (a.base.clone(), httpdns_test_support::http::client());
        let (written, stop) = (written.clone(), stop.clone());
        tokio::spawn(async move {
            use std::sync::atomic::Ordering;
            for i in 0..20_000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let body = json!({"ip": "4.4.4.4", "pool": "busy", "isp": "mobile", "region": "beijing"});
                let r = http
                    .put(format!("{base}/admin/v1/nodes/busy-{i}"))
                    .bearer_auth(TOKEN)
                    .body(body.to_string())
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success());
                written.store(i + 1, Ordering::SeqCst);
            }
        })
    };
    assert!(
        crate::support::eventually(Duration::from_secs(10), || {
            let n = written.load(std::sync::atomic::Ordering::SeqCst);
            async move { n >= 1 }
        })
        .await,
        "the writer writes"
    );
    let out = {
        let (env_a, archive) = (env_a.clone(), archive.clone());
        tokio::task::spawn_blocking(move || run(&env_a, &["backup", "-o", archive.to_str().unwrap()]))
            .await
            .unwrap()
    };
    // One more write after the backup returned, so the last one is certainly after the dump.
    let floor = written.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        crate::support::eventually(Duration::from_secs(10), || {
            let n = written.load(std::sync::atomic::Ordering::SeqCst);
            async move { n > floor }
        })
        .await,
        "the writer goes on after the backup"
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.await.unwrap();
    let written = written.load(std::sync::atomic::Ordering::SeqCst);
    let said = ok(&out, "backup");
    assert!(said.contains("3 stored copies"), "{said}");
    let leftovers: Vec<_> =
        std::fs::read_dir(archive.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, ["httpdns.tar"], "only the finished archive is left");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&archive).unwrap().permissions().mode() & 0o777, 0o600);
    }
    assert_eq!(a.terminate().code(), Some(0));
    let origin_gone = origin.stop();
    drop(origin_gone);

    // A damaged archive restores nothing: the database stays empty, no copy is written.
    let damaged = dir_b.path().join("damaged.tar");
    let bytes = std::fs::read(&archive).unwrap();
    std::fs::write(&damaged, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let out = run(&env_b, &["restore", damaged.to_str().unwrap()]);
    assert!(!out.status.success(), "a cut archive must not restore");
    let mut flipped = bytes.clone();
    let at = flipped.len() / 2;
    flipped[at] ^= 0x55;
    std::fs::write(&damaged, &flipped).unwrap();
    let out = run(&env_b, &["restore", damaged.to_str().unwrap()]);
    assert!(!out.status.success(), "an altered archive must not restore");
    // Nothing written by a refused restore: no secret file, and the restore below, which
    // refuses a database or store that is not empty, goes through.
    assert!(!dir_b.path().join("config-signing-key").exists(), "nothing written by a refused restore");

    // A configured signing key other than the backup's would sign differently: refused.
    let mut other_key = env_b.clone();
    other_key
        .insert("HTTPDNS_CONFIG_SIGNING_KEY".into(), "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=".into());
    let out = run(&other_key, &["restore", archive.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("HTTPDNS_CONFIG_SIGNING_KEY"), "{said}");

    let said = ok(&run(&env_b, &["restore", archive.to_str().unwrap()]), "restore");
    assert!(said.contains("3 stored copies"), "{said}");

    let b = Process::spawn(&env_b, dir_b.path());
    let mirror_b = format!("http://{}", b.mirror.unwrap());
    let after = observe(&b.base, &mirror_b, &modules, &objects).await;
    for (what, was) in &before {
        assert_eq!(&after[what], was, "{test}: {what} differs after the restore");
    }
    // The concurrent writes: a prefix of them, exactly up to the restored revision.
    let http = httpdns_test_support::http::client();
    let ready: serde_json::Value = serde_json::from_str(
        &http.get(format!("{}/readyz", b.base)).send().await.unwrap().text().await.unwrap(),
    )
    .unwrap();
    let revision = ready["snapshot_revision"].as_i64().unwrap();
    let busy: serde_json::Value = serde_json::from_str(
        &http
            .get(format!("{}/admin/v1/nodes?limit=1000", b.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    let items = busy["items"].as_array().unwrap();
    let newest = items.iter().map(|i| i["revision"].as_i64().unwrap()).max().unwrap();
    let busy_count = items.iter().filter(|i| i["name"].as_str().unwrap().starts_with("busy-")).count();
    assert!(
        (1..written).contains(&busy_count),
        "{test}: the backup ran while nodes were written ({busy_count} of {written})"
    );
    assert_eq!(newest, revision, "{test}: the restored revision is the newest restored write");
    for i in 0..busy_count {
        assert!(
            items.iter().any(|x| x["name"] == format!("busy-{i}")),
            "{test}: busy-{i} missing while {busy_count} busy nodes were restored (not a prefix)"
        );
    }

    // Restoring over a database that is not empty is refused, and changes nothing.
    let out = run(&env_b, &["restore", archive.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("not empty") && said.contains("--force"), "{said}");
    let r = http
        .put(format!("{}/admin/v1/nodes/after-restore", b.base))
        .bearer_auth(TOKEN)
        .body(json!({"ip": "5.5.5.5", "pool": "edge", "isp": "telecom", "region": "beijing"}).to_string())
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    assert_eq!(b.terminate().code(), Some(0));
    ok(&run(&env_b, &["restore", "--force", archive.to_str().unwrap()]), "forced restore");
    let b = Process::spawn(&env_b, dir_b.path());
    let r =
        http.get(format!("{}/admin/v1/nodes/after-restore", b.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 404, "--force replaced the database's content");
    let again = observe(&b.base, &format!("http://{}", b.mirror.unwrap()), &modules, &objects).await;
    assert_eq!(again["cdn current"], before["cdn current"]);
    assert_eq!(again["copy /img/big.bin"], before["copy /img/big.bin"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backup_restores_everything_sqlite_local_store() {
    round_trip("sqlite", Db::Sqlite, Db::Sqlite, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backup_restores_everything_postgres_s3() {
    let Some(db_a) =
        httpdns_test_support::postgres::fresh_database("backup_restores_everything_postgres_s3").await
    else {
        return;
    };
    let Some(db_b) =
        httpdns_test_support::postgres::fresh_database("backup_restores_everything_postgres_s3").await
    else {
        return;
    };
    let (Some(s3_a), Some(s3_b)) = (S3Server::start(), S3Server::start()) else { return };
    round_trip(
        "postgres+s3",
        Db::Postgres(db_a.url.clone()),
        Db::Postgres(db_b.url.clone()),
        Some((s3_a, s3_b)),
    )
    .await;
}

/// A SQLite backup restores into PostgreSQL (moving from one instance to replicas).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sqlite_backup_restores_into_postgres() {
    let Some(db) =
        httpdns_test_support::postgres::fresh_database("a_sqlite_backup_restores_into_postgres").await
    else {
        return;
    };
    round_trip("sqlite->postgres", Db::Sqlite, Db::Postgres(db.url.clone()), None).await;
}

/// A backup killed mid-way (kill -9 runs no cleanup) leaves its partial archive beside the
/// output; the next backup into that directory removes it. An archive another backup is
/// writing right now (its lock held) is left alone.
#[tokio::test]
async fn a_killed_backups_partial_archive_is_removed_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let e = side(dir.path(), &Db::Sqlite, None);
    // A server ran here once: the database exists.
    drop(Process::spawn(&e, dir.path()));
    let out_dir = dir.path().join("backups");
    std::fs::create_dir_all(&out_dir).unwrap();
    let abandoned = out_dir.join(".httpdns-backup-Ab12Cd");
    std::fs::write(&abandoned, vec![0u8; 1 << 20]).unwrap();
    let running = out_dir.join(".httpdns-backup-Ef34Gh");
    let held = std::fs::File::create(&running).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let archive = out_dir.join("httpdns.tar");
    let out = {
        let (e, archive) = (e.clone(), archive.clone());
        tokio::task::spawn_blocking(move || run(&e, &["backup", "-o", archive.to_str().unwrap()]))
            .await
            .unwrap()
    };
    ok(&out, "backup");
    assert!(archive.is_file());
    assert!(!abandoned.exists(), "the killed backup's archive is still there");
    assert!(running.exists(), "a running backup's archive was removed");
    let left: Vec<_> = std::fs::read_dir(&out_dir).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    drop(held);
}
