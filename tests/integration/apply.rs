//! `httpdns export` and `httpdns apply -f` against a running server: the round trip is a
//! no-op, a changed file applies exactly its diff, applying twice changes nothing.

use std::process::Command;

use serde_json::json;

use crate::support::{env, Db, Process, TOKEN};

fn httpdns(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_httpdns"))
        .args(args)
        .env_remove("HTTPDNS_ADMIN_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_apply_round_trip_diff_and_idempotence() {
    let tmp = tempfile::tempdir().unwrap();
    let p = Process::spawn(&env(tmp.path(), &Db::Sqlite), tmp.path());
    let http = httpdns_test_support::http::client();
    let put = |path: &str, body: serde_json::Value| {
        let req = http.put(format!("{}{path}", p.base)).bearer_auth(TOKEN).body(body.to_string());
        async move {
            let r = req.send().await.unwrap();
            assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        }
    };
    put("/admin/v1/networks/1.0.1.0%2F24", json!({"isp": "telecom", "region": "beijing"})).await;
    put("/admin/v1/networks/1.0.2.0%2F24", json!({"isp": "unicom", "region": "shanghai"})).await;
    put("/admin/v1/pools/edge", json!({"health_check": {"kind": "tcp", "port": 443}})).await;
    put(
        "/admin/v1/nodes/n1",
        json!({"ip": "1.1.1.1", "pool": "edge", "isp": "telecom", "region": "beijing"}),
    )
    .await;
    put(
        "/admin/v1/nodes/n2",
        json!({"ip": "2.2.2.2", "pool": "edge", "isp": "unicom", "region": "shanghai", "latency_ms": 5}),
    )
    .await;
    put("/admin/v1/domains/www.example.com", json!({"pool": "edge", "ttl": 60})).await;
    put(
        "/admin/v1/mirror/rules/image",
        json!({"path_prefix": "/image", "origin": "http://127.0.0.1:9/bucket"}),
    )
    .await;
    put("/admin/v1/mirror/styles/thumb", json!({"process": "image/resize,w_200/format,webp"})).await;
    put(
        "/admin/v1/config/cdn",
        json!({"mergeHostConfigs": [{"host": "image.xxx.com", "pathPrefix": "/image", "rate": 0.5}],
            "hostListConfig": [{"host": "cdn.xxx.com", "rate": 1}],
            "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": ["223.5.5.5"]}),
    )
    .await;
    let admin = ["--server", p.base.as_str(), "--token", TOKEN];
    let yaml = tmp.path().join("state.yaml");
    let toml = tmp.path().join("state.toml");

    // Export, in both formats; applying the export back is no change.
    for file in [&yaml, &toml] {
        let (ok, _, err) = httpdns(&[&["export", "-o", file.to_str().unwrap()][..], &admin].concat());
        assert!(ok, "{err}");
        let (ok, out, err) =
            httpdns(&[&["apply", "-f", file.to_str().unwrap(), "--dry-run", "--prune"][..], &admin].concat());
        assert!(ok, "{err}");
        assert_eq!(out.trim(), "no changes", "{}", std::fs::read_to_string(file).unwrap());
    }
    let text = std::fs::read_to_string(&yaml).unwrap();
    assert!(
        text.contains("1.0.1.0/24")
            && text.contains("www.example.com")
            && text.contains("hostListConfig")
            && text.contains("image/resize,w_200/format,webp"),
        "{text}"
    );

    // Change the file: one update, two creates, one delete, one config edit.
    let mut state: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    state["domains"]["www.example.com"]["ttl"] = 120.into();
    state["nodes"]["n3"] =
        serde_norway::from_str("{ip: 3.3.3.3, pool: edge, isp: mobile, region: beijing}").unwrap();
    state["networks"].as_mapping_mut().unwrap().remove("1.0.2.0/24");
    state["image_styles"]["small"] = serde_norway::from_str("{process: \"image/resize,w_50\"}").unwrap();
    state["config"]["cdn"]["reviveProbeInterval"] = 300000.into();
    std::fs::write(&yaml, serde_norway::to_string(&state).unwrap()).unwrap();
    let (ok, out, err) =
        httpdns(&[&["apply", "-f", yaml.to_str().unwrap(), "--dry-run", "--prune"][..], &admin].concat());
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "+ nodes/n3",
            "~ domains/www.example.com: ttl: 60 -> 120;",
            "+ image_styles/small",
            "~ config/cdn: reviveProbeInterval: 600000 -> 300000;",
            "- networks/1.0.2.0/24",
            "5 change(s) (dry run: nothing written)",
        ],
        "{out}"
    );
    // The dry run wrote nothing.
    let d: serde_json::Value = http
        .get(format!("{}/admin/v1/domains/www.example.com", p.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(d["ttl"], 60);

    // Without --prune, nothing is deleted; with it, exactly the diff is applied.
    let (ok, out, _) = httpdns(&[&["apply", "-f", yaml.to_str().unwrap(), "--dry-run"][..], &admin].concat());
    assert!(ok && !out.contains("- networks"), "{out}");
    let (ok, out, err) = httpdns(&[&["apply", "-f", yaml.to_str().unwrap(), "--prune"][..], &admin].concat());
    assert!(ok, "{err}");
    assert!(out.ends_with("5 change(s) applied\n"), "{out}");
    let get = |path: String| {
        let req = http.get(format!("{}{path}", p.base)).bearer_auth(TOKEN);
        async move { req.send().await.unwrap() }
    };
    assert_eq!(
        get("/admin/v1/domains/www.example.com".into()).await.json::<serde_json::Value>().await.unwrap()
            ["ttl"],
        120
    );
    assert_eq!(get("/admin/v1/nodes/n3".into()).await.status(), 200);
    assert_eq!(
        get("/admin/v1/mirror/styles/small".into()).await.json::<serde_json::Value>().await.unwrap()
            ["process"],
        "image/resize,w_50"
    );
    assert_eq!(get("/admin/v1/networks/1.0.2.0%2F24".into()).await.status(), 404);
    let cfg = get("/admin/v1/config/cdn".into()).await;
    assert_eq!(cfg.headers()["etag"], "\"2\"", "one new config version");

    // Applying again is a no-op: nothing is written (the store revision stays).
    let revision =
        |m: String| m.lines().find_map(|l| l.strip_prefix("httpdns_snapshot_revision ")).unwrap().to_owned();
    let before = revision(get("/metrics".into()).await.text().await.unwrap());
    let (ok, out, _) = httpdns(&[&["apply", "-f", yaml.to_str().unwrap(), "--prune"][..], &admin].concat());
    assert!(ok);
    assert_eq!(out.trim(), "no changes");
    assert_eq!(revision(get("/metrics".into()).await.text().await.unwrap()), before);

    // A bad file is refused before anything is sent, naming the place.
    std::fs::write(&yaml, "domains:\n  www.example.com: {pool: edge, ttl: 0}\n").unwrap();
    let (ok, _, err) = httpdns(&[&["apply", "-f", yaml.to_str().unwrap()][..], &admin].concat());
    assert!(!ok && err.contains("domains.www.example.com.ttl"), "{err}");
    std::fs::write(&yaml, "image_styles:\n  x: {process: \"image/resize,w_0\"}\n").unwrap();
    let (ok, _, err) = httpdns(&[&["apply", "-f", yaml.to_str().unwrap()][..], &admin].concat());
    assert!(!ok && err.contains("image_styles.x.process"), "{err}");
}
