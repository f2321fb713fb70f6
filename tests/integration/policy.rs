//! The policy controller on the real binary (docs/policy.md), time-compressed (ticks of
//! 200 ms, steps held 1 s) but through the same code paths: events posted per place and per
//! cohort degrade one place only, the per-device answers follow, and the recovery ramps step
//! by step, steps back on a regression at 25% and ends healthy. Every change is a config
//! version by `controller` with its reason, listed by `/admin/v1/policy/places`, exported on
//! `/metrics`, and kept across a restart.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{backends, env, eventually, Server};

/// A device in unicom/shanghai and one in telecom/beijing, as the trusted proxy says.
const SHANGHAI: &str = "10.1.0.7";
const BEIJING: &str = "10.2.0.7";
/// A place the document pins.
const GUANGZHOU: &str = "10.3.0.7";

fn now_s() -> u64 {
    httpdns_core::clock::unix_s()
}

fn settings(tmp: &std::path::Path, db: &crate::support::Db) -> HashMap<String, String> {
    let mut e = env(tmp, db);
    for (k, v) in [
        ("HTTPDNS_TRUSTED_PROXIES", "127.0.0.1/32"),
        ("HTTPDNS_CONTROL_TICK_MS", "200"),
        ("HTTPDNS_POLICY_STEP_SECONDS", "1"),
        ("HTTPDNS_POLICY_MIN_REQUESTS", "40"),
    ] {
        e.insert(k.into(), v.into());
    }
    e
}

const FILE: &str = "[events]\nflush_ms = 100\n";

async fn start(e: &HashMap<String, String>) -> Server {
    Server::start_with(e.clone(), Some(FILE)).await
}

/// `n` request events from `from` on the `enabled` side, `failed` of them failed.
async fn report(s: &Server, from: &str, enabled: Option<bool>, n: usize, failed: usize, latency: u64) {
    let events: Vec<Value> = (0..n)
        .map(|i| {
            let mut e = json!({"event": "request", "timestamp": now_s(), "host": "cdn.example.com",
                "outcome": if i < failed { "timeout" } else { "ok" }, "latency_ms": latency});
            if let Some(b) = enabled {
                e["httpdns_enabled"] = json!(b);
            }
            e
        })
        .collect();
    let resp = s
        .http
        .post(s.url("/app/events"))
        .header("x-forwarded-for", from)
        .json(&json!({ "events": events }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
}

async fn places(s: &Server) -> Value {
    let (status, v) = s.admin(Method::GET, "/admin/v1/policy/places", None).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    v
}

fn place<'a>(v: &'a Value, isp: &str) -> Option<&'a Value> {
    v["places"].as_array().unwrap().iter().find(|p| p["isp"] == isp)
}

async fn state_of(s: &Server, isp: &str) -> (String, f64) {
    let v = places(s).await;
    place(&v, isp).map_or(("unknown".into(), 1.0), |p| {
        (p["state"].as_str().unwrap().to_owned(), p["share"].as_f64().unwrap())
    })
}

/// The per-device answer from `from`.
async fn resolution(s: &Server, from: &str, device: &str) -> Value {
    let resp = s
        .http
        .post(s.url("/app/config-center/module-config"))
        .header("x-forwarded-for", from)
        .json(&json!({"module": "cdn", "deviceId": device, "configVersion": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let v: Value = resp.json().await.unwrap();
    v["resolution"].clone()
}

async fn publish(s: &Server) {
    let doc = json!({
        "mergeHostConfigs": [], "hostListConfig": [{"host": "cdn.example.com", "rate": 1}],
        "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": [],
        "resolutionPolicy": {"default": {"httpdnsRate": 1, "timeoutMs": 1500},
            "places": [{"isp": "mobile", "region": "guangzhou", "httpdnsRate": 0.5}],
            "preResolveHosts": ["img.example.com"]}
    });
    let (status, v) = s.admin(Method::PUT, "/admin/v1/config/cdn", Some(doc)).await;
    assert!(status.is_success(), "{v}");
}

/// Waits (bounded) until `isp` is in `state` at `share`; feeds `feed` between looks.
async fn until<F, Fut>(s: &Server, isp: &str, state: &str, share: f64, mut feed: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut last = (String::new(), 0.0);
    for _ in 0..60 {
        last = state_of(s, isp).await;
        if last.0 == state && (last.1 - share).abs() < 1e-9 {
            return;
        }
        feed().await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{isp} never reached {state} at {share}; last {last:?}: {}", places(s).await);
}

#[tokio::test]
async fn one_place_degrades_recovers_by_steps_and_steps_back_on_a_regression() {
    for (db, _guard) in backends("policy_controller").await {
        let tmp = tempfile::tempdir().unwrap();
        let e = settings(tmp.path(), &db);
        let s = start(&e).await;
        s.put_ok("/admin/v1/networks/10.1.0.0%2F16", json!({"isp": "unicom", "region": "shanghai"})).await;
        s.put_ok("/admin/v1/networks/10.2.0.0%2F16", json!({"isp": "telecom", "region": "beijing"})).await;
        s.put_ok("/admin/v1/networks/10.3.0.0%2F16", json!({"isp": "mobile", "region": "guangzhou"})).await;
        publish(&s).await;

        // Healthy: every device on HTTPDNS, with the document's timeout and pre-resolve list.
        let r = resolution(&s, SHANGHAI, "device-1").await;
        assert_eq!(r["httpdns"], true, "{r}");
        assert_eq!(r["timeoutMs"], 1500);
        assert_eq!(r["place"], json!({"isp": "unicom", "region": "shanghai"}));
        assert_eq!(r["state"], "healthy");
        assert_eq!(r["preResolveHosts"], json!(["img.example.com"]));

        // Shanghai's devices fail half their requests; Beijing's do not.
        report(&s, BEIJING, Some(true), 60, 0, 40).await;
        report(&s, SHANGHAI, None, 60, 30, 900).await;
        until(&s, "unicom", "degraded", 0.01, || async {}).await;
        assert_eq!(state_of(&s, "telecom").await.0, "healthy");
        let v = places(&s).await;
        let sh = place(&v, "unicom").unwrap();
        assert_eq!(sh["httpdns_rate"]["cdn"], json!(0.01), "{sh}");
        let step = &sh["steps"][0];
        assert_eq!((step["from"].as_str(), step["to"].as_str()), (Some("healthy"), Some("degraded")));
        assert!(step["why"].as_str().unwrap().contains("50.00%"), "{step}");
        assert_eq!(step["versions"], json!(["cdn:2"]), "the change is config version 2");
        let (_, history) = s.admin(Method::GET, "/admin/v1/config/cdn/versions", None).await;
        assert!(history.to_string().contains("controller"), "{history}");
        assert!(history.to_string().contains("unicom/shanghai healthy -> degraded"), "{history}");
        // And in the audit log, by `controller`, with the config version before and after.
        let (_, audit) = s.admin(Method::GET, "/admin/v1/audit?limit=100", None).await;
        let entry = audit["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["actor"] == "controller")
            .unwrap_or_else(|| panic!("no controller entry in {audit}"))
            .clone();
        assert_eq!(
            (entry["path"].as_str(), entry["revision_before"].as_i64(), entry["revision_after"].as_i64()),
            (Some("/admin/v1/config/cdn"), Some(1), Some(2)),
            "{entry}"
        );
        assert!(entry["detail"].as_str().unwrap().contains("unicom/shanghai healthy -> degraded"), "{entry}");

        // Devices there: 1% on HTTPDNS (by the bucket), the rest told LocalDNS at once.
        let mut on = 0;
        for i in 0..400 {
            let r = resolution(&s, SHANGHAI, &format!("d{i}")).await;
            assert_eq!(r["state"], "degraded");
            let bucket = httpdns_config::rollout::bucket("httpdnsRate", &format!("d{i}"));
            assert_eq!(r["httpdns"], json!(bucket < 100), "device d{i}, bucket {bucket}");
            on += usize::from(r["httpdns"] == true);
        }
        assert!(on < 20, "{on} of 400 at 1%");
        assert_eq!(resolution(&s, BEIJING, "d1").await["state"], "healthy");
        assert_eq!(
            s.text("/metrics").await.lines().find(|l| l.starts_with(
                "httpdns_policy_place_state{isp=\"unicom\",region=\"shanghai\",state=\"degraded\"}"
            )),
            Some("httpdns_policy_place_state{isp=\"unicom\",region=\"shanghai\",state=\"degraded\"} 1")
        );

        // A pinned place is the operator's: however its devices fare, its answer is the
        // document's.
        report(&s, GUANGZHOU, None, 60, 60, 900).await;
        until(&s, "mobile", "degraded", 0.01, || async {}).await;
        let r = resolution(&s, GUANGZHOU, "d1").await;
        assert_eq!(
            (r["state"].as_str(), r["httpdnsRate"].as_f64(), r["decidedBy"].as_str()),
            (Some("healthy"), Some(0.5), Some("place"))
        );

        // The probe share succeeds again: recovering at 5%, then 25%.
        until(&s, "unicom", "recovering", 0.05, || report(&s, SHANGHAI, Some(true), 50, 0, 40)).await;
        let good = || async {
            report(&s, SHANGHAI, Some(true), 50, 0, 40).await;
            report(&s, SHANGHAI, Some(false), 50, 0, 40).await;
        };
        until(&s, "unicom", "recovering", 0.25, good).await;
        // A regression at 25%: the ramped cohort fails where the held-back one does not.
        let bad = || async {
            report(&s, SHANGHAI, Some(true), 50, 25, 40).await;
            report(&s, SHANGHAI, Some(false), 50, 0, 40).await;
        };
        until(&s, "unicom", "recovering", 0.05, bad).await;
        let v = places(&s).await;
        let why = v["places"].as_array().unwrap().iter().find(|p| p["isp"] == "unicom").unwrap()["steps"][0]
            ["why"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(why.contains("regression at the 25.00% step"), "{why}");
        // It holds: within the step's hold, good events do not move it up again.
        report(&s, SHANGHAI, Some(true), 50, 0, 40).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(state_of(&s, "unicom").await, ("recovering".into(), 0.05));
        until(&s, "unicom", "healthy", 1.0, good).await;
        let v = places(&s).await;
        let steps: Vec<(String, f64)> = place(&v, "unicom").unwrap()["steps"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .map(|s| (s["to"].as_str().unwrap().to_owned(), s["to_share"].as_f64().unwrap()))
            .collect();
        let expect: Vec<(String, f64)> = [
            ("degraded", 0.01),
            ("recovering", 0.05),
            ("recovering", 0.25),
            ("recovering", 0.05),
            ("recovering", 0.25),
            ("healthy", 1.0),
        ]
        .iter()
        .map(|(s, f)| ((*s).to_owned(), *f))
        .collect();
        assert_eq!(steps, expect);
        assert_eq!(state_of(&s, "telecom").await.0, "healthy", "no other place moved");
        drop(s);
    }
}

#[tokio::test]
async fn the_state_survives_a_restart_and_auto_false_turns_the_controller_off() {
    for (db, _guard) in backends("policy_restart").await {
        let tmp = tempfile::tempdir().unwrap();
        let e = settings(tmp.path(), &db);
        let s = start(&e).await;
        s.put_ok("/admin/v1/networks/10.1.0.0%2F16", json!({"isp": "unicom", "region": "shanghai"})).await;
        publish(&s).await;
        report(&s, SHANGHAI, None, 60, 60, 900).await;
        until(&s, "unicom", "degraded", 0.01, || async {}).await;
        drop(s);

        let again = start(&e).await;
        assert_eq!(state_of(&again, "unicom").await, ("degraded".into(), 0.01), "kept in the store");
        assert_eq!(resolution(&again, SHANGHAI, "d1").await["state"], "degraded");
        drop(again);

        // Off: devices follow the document alone, and nothing changes by itself.
        let mut off = e.clone();
        off.insert("HTTPDNS_POLICY_AUTO".into(), "false".into());
        let manual = start(&off).await;
        let v = places(&manual).await;
        assert_eq!(v["auto"], false);
        assert_eq!(resolution(&manual, SHANGHAI, "d1").await["state"], "healthy");
        report(&manual, SHANGHAI, Some(true), 60, 0, 40).await;
        assert!(
            !eventually(Duration::from_millis(1500), || async {
                state_of(&manual, "unicom").await.0 != "degraded"
            })
            .await,
            "the controller is off: the stored state stays"
        );
    }
}

/// Sampled events are weighted by `1 / sample_rate`: one failing event sampled at `1e-6` (an
/// unsigned one weighs at most 100, past the 40 requests a decision needs here) is still one
/// report, and moves nothing; twenty real reports of the same failures do.
#[tokio::test]
async fn one_heavily_weighted_event_degrades_no_place() {
    for (db, _guard) in backends("policy_weights").await {
        let tmp = tempfile::tempdir().unwrap();
        let s = start(&settings(tmp.path(), &db)).await;
        s.put_ok("/admin/v1/networks/10.1.0.0%2F16", json!({"isp": "unicom", "region": "shanghai"})).await;
        publish(&s).await;
        let heavy = json!({"events": [{"event": "request", "timestamp": now_s(), "host": "cdn.example.com",
            "outcome": "timeout", "latency_ms": 900, "sample_rate": 1e-6}]});
        let resp = s
            .http
            .post(s.url("/app/events"))
            .header("x-forwarded-for", SHANGHAI)
            .json(&heavy)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        // The controller has seen it (weighted) and still does not move.
        let seen = eventually(Duration::from_secs(5), || async {
            let v = places(&s).await;
            place(&v, "unicom").is_some_and(|p| p["rates"]["unknown"]["requests"].as_f64() >= Some(40.0))
        })
        .await;
        assert!(seen, "the weighted event reached the controller: {}", places(&s).await);
        let v = places(&s).await;
        let p = place(&v, "unicom").unwrap();
        assert_eq!(p["rates"]["unknown"]["reports"], 1.0, "{p}");
        assert!(
            !eventually(Duration::from_millis(1500), || async {
                state_of(&s, "unicom").await.0 == "degraded"
            })
            .await,
            "one report degraded the place: {}",
            places(&s).await
        );
        // Enough real reports of the same failure rate do.
        report(&s, SHANGHAI, None, 20, 20, 900).await;
        until(&s, "unicom", "degraded", 0.01, || async {}).await;
    }
}

/// A service address that takes connections and never answers, counting them.
async fn black_hole() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(conn);
        }
    });
    (url, seen)
}

/// A device id whose `httpdnsRate` bucket is below 100 (`inside`) or not.
fn device(inside: bool) -> String {
    (0..)
        .map(|i| format!("rust-device-{i}"))
        .find(|d| (httpdns_config::rollout::bucket("httpdnsRate", d) < 100) == inside)
        .unwrap()
}

async fn client(s: &Server, service: &str, id: &str) -> httpdns_client::CdnClient {
    let key: Value = s.get("/app/config-center/public-key").await.json().await.unwrap();
    let mut o = httpdns_client::ClientOptions {
        device_id: id.into(),
        events: None,
        feedback: None,
        ..Default::default()
    };
    o.resolver.service.servers = vec![service.parse().unwrap()];
    o.resolver.local_dns = httpdns_client::LocalDns::System;
    o.resolver.allow_private = true;
    o.config.url = Some(s.url("/app/config-center/module-config?module=cdn").parse().unwrap());
    o.config.public_key = Some(key["public_key"].as_str().unwrap().to_owned());
    httpdns_client::CdnClient::new(o).unwrap()
}

/// The Rust client obeys its place's policy: in a degraded place a device outside the probe
/// share goes to LocalDNS without asking the service (the black hole sees no connection); one
/// inside asks it; `localDnsFallback: false` answers no LocalDNS when the service fails.
#[tokio::test]
async fn the_rust_client_obeys_the_policy_of_its_place() {
    let tmp = tempfile::tempdir().unwrap();
    let e = settings(tmp.path(), &crate::support::Db::Sqlite);
    let s = start(&e).await;
    // The client's own address (loopback) is in unicom/shanghai.
    s.put_ok("/admin/v1/networks/127.0.0.0%2F8", json!({"isp": "unicom", "region": "shanghai"})).await;
    let mut doc = json!({
        "mergeHostConfigs": [], "hostListConfig": [{"host": "cdn.example.com", "rate": 1}],
        "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": [],
        "resolutionPolicy": {"default": {"httpdnsRate": 1, "timeoutMs": 300}}
    });
    let (status, v) = s.admin(Method::PUT, "/admin/v1/config/cdn", Some(doc.clone())).await;
    assert!(status.is_success(), "{v}");
    report(&s, "127.0.0.1", None, 60, 60, 900).await;
    until(&s, "unicom", "degraded", 0.01, || async {}).await;

    let (hole, seen) = black_hole().await;
    let out = client(&s, &hole, &device(false)).await;
    let _bg = out.start().await;
    let policy = out.resolver().policy();
    assert_eq!((policy.httpdns, policy.state.as_deref()), (false, Some("degraded")));
    assert_eq!(policy.timeout, Some(Duration::from_millis(300)));
    let r = out.resolver().resolve("localhost").await.unwrap();
    assert_eq!(r.path, httpdns_client::Path::LocalDns);
    assert!(r.service_error.unwrap().contains("resolution policy"));
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 0, "the service was not asked");

    let probe = client(&s, &hole, &device(true)).await;
    let _bg2 = probe.start().await;
    assert!(probe.resolver().policy().httpdns, "inside the 1% probe share");
    assert_eq!(probe.resolver().resolve("localhost").await.unwrap().path, httpdns_client::Path::LocalDns);
    assert!(seen.load(std::sync::atomic::Ordering::SeqCst) >= 1, "the probe asked the service first");

    // The operator pins the place, LocalDNS not allowed (it lies there): no LocalDNS answer.
    doc["resolutionPolicy"]["places"] =
        json!([{"isp": "unicom", "region": "shanghai", "httpdnsRate": 1, "localDnsFallback": false}]);
    let (status, v) = s.admin(Method::GET, "/admin/v1/config/cdn", None).await;
    assert_eq!(status, StatusCode::OK);
    let current = v["configVersion"].as_i64().unwrap();
    let resp = s
        .http
        .put(s.url("/admin/v1/config/cdn"))
        .bearer_auth(crate::support::TOKEN)
        .header("if-match", format!("\"{current}\""))
        .json(&doc)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    let pinned = client(&s, &hole, &device(false)).await;
    let _bg3 = pinned.start().await;
    let p = pinned.resolver().policy();
    assert_eq!((p.httpdns, p.local_dns_fallback), (true, false));
    let err = pinned.resolver().resolve("localhost").await.unwrap_err().to_string();
    assert!(err.contains("no LocalDNS fallback"), "{err}");
}

/// The bar: a published policy changes the per-device answers exactly as `vectors/` says
/// (every case the controller has no word in, from an address of the case's place).
#[tokio::test]
async fn per_device_answers_match_the_shared_vectors() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors/resolution.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let s = start(&settings(tmp.path(), &crate::support::Db::Sqlite)).await;
    s.put_ok("/admin/v1/networks/10.1.0.0%2F16", json!({"isp": "unicom", "region": "shanghai"})).await;
    s.put_ok("/admin/v1/networks/10.2.0.0%2F16", json!({"isp": "telecom", "region": "beijing"})).await;
    let doc = json!({
        "mergeHostConfigs": [], "hostListConfig": [{"host": "cdn.example.com", "rate": 1}],
        "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": [],
        "resolutionPolicy": v["policy"],
    });
    let (status, body) = s.admin(Method::PUT, "/admin/v1/config/cdn", Some(doc)).await;
    assert!(status.is_success(), "{body}");
    let mut checked = 0;
    for c in v["cases"].as_array().unwrap().iter().filter(|c| c["controllerShare"].is_null()) {
        let from = match c["place"]["isp"].as_str().unwrap() {
            "unicom" => SHANGHAI,
            "telecom" => BEIJING,
            _ => "10.9.0.1",
        };
        let mut req = json!({"module": "cdn", "deviceId": c["deviceId"]});
        if !c["segment"].is_null() {
            req["segment"] = c["segment"].clone();
        }
        let resp = s
            .http
            .post(s.url("/app/config-center/module-config"))
            .header("x-forwarded-for", from)
            .json(&req)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let r = resp.json::<Value>().await.unwrap()["resolution"].clone();
        for k in ["httpdns", "localDnsFallback", "timeoutMs", "decidedBy", "state"] {
            assert_eq!(r[k], c[k], "{k} of {c}: {r}");
        }
        assert_eq!(r["place"], c["place"]);
        assert_eq!(r["preResolveHosts"], v["policy"]["preResolveHosts"]);
        checked += 1;
    }
    assert_eq!(checked, 72);
    // A segment that is not a token is named.
    let resp = s
        .http
        .post(s.url("/app/config-center/module-config"))
        .json(&json!({"module": "cdn", "deviceId": "d", "segment": "Premium Users"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(resp.json::<Value>().await.unwrap()["field"], "segment");
}
