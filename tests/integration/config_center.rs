use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{backends, eventually, Db, Process, Server, TOKEN};

fn seed_doc() -> Value {
    json!({
        "mergeHostConfigs": [
            {"host": "image.xxx.com", "pathPrefix": "/image", "rate": 1},
            {"host": "product.xxx.com", "pathPrefix": "/product", "rate": 0.5},
            {"host": "community.xxx.com", "pathPrefix": "/community", "rate": 0.1}
        ],
        "hostListConfig": [
            {"host": "cdn.xxx.com", "rate": 1},
            {"host": "cdn-ss.xxx.com", "rate": 1},
            {"host": "cdn-bak.xxx.com", "rate": 1}
        ],
        "reviveProbeInterval": 600000,
        "configRequestInterval": 600000,
        "configVersion": 1,
        "publicIpList": ["223.5.5.5", "180.76.76.76"]
    })
}

async fn publish(s: &Server, module: &str, doc: &Value, if_match: Option<&str>) -> reqwest::Response {
    let mut req =
        s.http.put(s.url(&format!("/admin/v1/config/{module}"))).bearer_auth(TOKEN).body(doc.to_string());
    if let Some(m) = if_match {
        req = req.header("if-match", m);
    }
    req.send().await.unwrap()
}

async fn app_get(s: &Server, module: &str, etag: Option<&str>) -> reqwest::Response {
    let mut req = s.http.get(s.url(&format!("/app/config-center/module-config?module={module}")));
    if let Some(e) = etag {
        req = req.header("if-none-match", e);
    }
    req.send().await.unwrap()
}

async fn app_post(s: &Server, body: Value) -> reqwest::Response {
    s.http.post(s.url("/app/config-center/module-config")).body(body.to_string()).send().await.unwrap()
}

fn verify(public_key: &str, body: &[u8], signature: &str) -> bool {
    // Verified with ed25519-dalek directly, not through the server's own helper.
    let key: [u8; 32] = STANDARD.decode(public_key).unwrap().try_into().unwrap();
    let key = ed25519_dalek::VerifyingKey::from_bytes(&key).unwrap();
    let Ok(sig) = STANDARD.decode(signature) else { return false };
    let Ok(sig): Result<[u8; 64], _> = sig.try_into() else { return false };
    key.verify_strict(body, &ed25519_dalek::Signature::from_bytes(&sig)).is_ok()
}

#[tokio::test]
async fn publish_conditional_get_preconditions_and_rollback() {
    for (db, _guard) in backends("config_publish_flow").await {
        let s = Server::start(&db).await;
        // Unknown module.
        let resp = app_get(&s, "cdn", None).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert_eq!(resp.json::<Value>().await.unwrap()["code"], "ModuleNotFound");

        // Create: no If-Match needed.
        let resp = publish(&s, "cdn", &seed_doc(), None).await;
        assert_eq!(resp.status(), StatusCode::CREATED, "{db:?}");
        assert_eq!(resp.headers()["etag"], "\"1\"");

        // Apps get exactly the seed's shape.
        let resp = app_get(&s, "cdn", None).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["etag"], "\"1\"");
        assert!(resp.headers()["cache-control"].to_str().unwrap().contains("max-age"));
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body, seed_doc());

        // Conditional GET.
        let resp = app_get(&s, "cdn", Some("\"1\"")).await;
        assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(resp.headers()["etag"], "\"1\"");
        assert_eq!(app_get(&s, "cdn", Some("W/\"1\"")).await.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(app_get(&s, "cdn", Some("\"0\", \"1\"")).await.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(app_get(&s, "cdn", Some("\"7\"")).await.status(), StatusCode::OK);

        // Replace: 428 without If-Match, 412 with a stale one, nothing stored either way.
        let mut v2 = seed_doc();
        v2["hostListConfig"][2]["host"] = json!("cdn-other.xxx.com");
        let resp = publish(&s, "cdn", &v2, None).await;
        assert_eq!(resp.status(), StatusCode::PRECONDITION_REQUIRED);
        let resp = publish(&s, "cdn", &v2, Some("\"7\"")).await;
        assert_eq!(resp.status(), StatusCode::PRECONDITION_FAILED);
        let resp = publish(&s, "cdn", &v2, Some("W/\"1\"")).await;
        assert_eq!(resp.status(), StatusCode::PRECONDITION_FAILED, "If-Match uses strong comparison");
        assert_eq!(app_get(&s, "cdn", None).await.headers()["etag"], "\"1\"");

        // Dry run validates, summarises, writes nothing.
        let resp = s
            .http
            .put(s.url("/admin/v1/config/cdn?dry_run=1"))
            .bearer_auth(TOKEN)
            .header("if-match", "\"1\"")
            .body(v2.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let dry: Value = resp.json().await.unwrap();
        assert_eq!(dry["valid"], true);
        assert_eq!(dry["summary"], "hostListConfig: +cdn-other.xxx.com, -cdn-bak.xxx.com");
        assert_eq!(app_get(&s, "cdn", None).await.headers()["etag"], "\"1\"");

        let resp = publish(&s, "cdn", &v2, Some("\"1\"")).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["etag"], "\"2\"");
        // The old ETag now gets the new document.
        let resp = app_get(&s, "cdn", Some("\"1\"")).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(
            (body["configVersion"].as_i64(), body["hostListConfig"][2]["host"].as_str()),
            (Some(2), Some("cdn-other.xxx.com"))
        );

        // Rollback to 1 publishes 1's content as version 3.
        let resp = s
            .http
            .post(s.url("/admin/v1/config/cdn/rollback"))
            .bearer_auth(TOKEN)
            .body(json!({"to": 1}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let body: Value = app_get(&s, "cdn", None).await.json().await.unwrap();
        let mut expect = seed_doc();
        expect["configVersion"] = json!(3);
        assert_eq!(body, expect);

        // History, newest first, paged.
        let (status, page) = s.admin(Method::GET, "/admin/v1/config/cdn/versions?limit=2", None).await;
        assert_eq!(status, StatusCode::OK);
        let versions: Vec<i64> =
            page["items"].as_array().unwrap().iter().map(|i| i["version"].as_i64().unwrap()).collect();
        assert_eq!(versions, [3, 2]);
        assert_eq!(page["items"][0]["rollback_of"], 1);
        assert!(page["items"][0]["summary"].as_str().unwrap().starts_with("rollback to version 1"));
        assert_eq!(page["next_before"], 2);
        let (_, page) = s.admin(Method::GET, "/admin/v1/config/cdn/versions?limit=2&before=2", None).await;
        assert_eq!(page["items"][0]["version"], 1);
        assert_eq!(page["items"][0]["summary"], "created: 3 hosts, 3 merge rules");
        assert!(page["next_before"].is_null());
        let (status, old) = s.admin(Method::GET, "/admin/v1/config/cdn/versions/2", None).await;
        assert_eq!((status, old["configVersion"].as_i64()), (StatusCode::OK, Some(2)));
        let (status, _) = s.admin(Method::GET, "/admin/v1/config/cdn/versions/9", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // Bare digits are taken as the entity tag too.
        let resp = publish(&s, "cdn", &seed_doc(), Some("2")).await;
        assert_eq!(resp.status(), StatusCode::PRECONDITION_FAILED);
        assert_eq!(
            publish(&s, "cdn", &seed_doc(), Some("3x")).await.status(),
            StatusCode::PRECONDITION_FAILED
        );

        // Force with If-Match: *.
        let resp = publish(&s, "cdn", &seed_doc(), Some("*")).await;
        assert_eq!(resp.headers()["etag"], "\"4\"");
        let (_, list) = s.admin(Method::GET, "/admin/v1/config", None).await;
        assert_eq!(list["items"][0]["module"], "cdn");
        assert_eq!(list["items"][0]["version"], 4);
    }
}

#[tokio::test]
async fn post_with_and_without_device_id() {
    for (db, _guard) in backends("config_post").await {
        post_with_and_without_device_id_on(&db).await;
    }
}

async fn post_with_and_without_device_id_on(db: &Db) {
    let s = Server::start(db).await;
    assert!(publish(&s, "cdn", &seed_doc(), None).await.status().is_success());
    let body: Value = app_post(&s, json!({"module": "cdn"})).await.json().await.unwrap();
    assert_eq!(body, seed_doc(), "without deviceId: the document as stored");

    let resp = app_post(
        &s,
        json!({"module": "cdn", "deviceId": "a1b2c3d4e5f6", "configVersion": 1, "platform": "android"}),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let body: Value = resp.json().await.unwrap();
    // Documented vectors: image 9171 < 10000 (rate 1), product 6936 >= 5000 (rate 0.5),
    // community 1618 >= 1000 (rate 0.1); every host of rate 1 is enabled.
    let flags: Vec<bool> = body["mergeHostConfigs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["enabled"].as_bool().unwrap())
        .collect();
    assert_eq!(flags, [true, false, false]);
    assert!(body["hostListConfig"].as_array().unwrap().iter().all(|e| e["enabled"] == true));

    // A device whose community bucket is inside 10%: find one by the documented rule.
    let inside = (0..10_000)
        .map(|i| format!("dev-{i}"))
        .find(|d| httpdns_config_bucket("community.xxx.com", d) < 1000)
        .unwrap();
    let body: Value = app_post(&s, json!({"module": "cdn", "deviceId": inside})).await.json().await.unwrap();
    assert_eq!(body["mergeHostConfigs"][2]["enabled"], true);
    assert_eq!(body["convergenceEnabled"], true, "no convergenceRate: on for everyone");

    // The global switch: published with the document, answered per device by its own bucket
    // (docs/config-center.md: device-0001 1077, device-0002 3703; at 0.2 only the first is on).
    let mut switched = seed_doc();
    switched["convergenceRate"] = json!(0.2);
    assert!(publish(&s, "cdn", &switched, Some("\"1\"")).await.status().is_success());
    for (dev, on) in [("device-0001", true), ("device-0002", false)] {
        let body: Value = app_post(&s, json!({"module": "cdn", "deviceId": dev})).await.json().await.unwrap();
        assert_eq!(
            (&body["convergenceRate"], &body["convergenceEnabled"]),
            (&json!(0.2), &json!(on)),
            "{dev}: {body}"
        );
        // Thin clients read only `enabled`: outside the switch every entry is off.
        assert_eq!(body["hostListConfig"][0]["enabled"], on, "{dev}: {body}");
    }
    let body: Value = app_post(&s, json!({"module": "cdn"})).await.json().await.unwrap();
    assert!(body.get("convergenceEnabled").is_none(), "{body}");
    let mut bad = seed_doc();
    bad["convergenceRate"] = json!(1.5);
    let resp = publish(&s, "cdn", &bad, Some("\"2\"")).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(resp.json::<Value>().await.unwrap()["field"], "convergenceRate");

    for (req, status, field) in [
        (json!({}), 400, "module"),
        (json!({"module": ""}), 400, "module"),
        (json!({"module": "Bad Name"}), 400, "module"),
        (json!({"module": "cdn", "deviceId": 5}), 400, "deviceId"),
        (json!({"module": "cdn", "configVersion": "x"}), 400, "configVersion"),
        (json!({"module": "nope"}), 404, "module"),
        (json!([1]), 400, "body"),
    ] {
        let resp = app_post(&s, req.clone()).await;
        assert_eq!(resp.status().as_u16(), status, "{req}");
        assert_eq!(resp.json::<Value>().await.unwrap()["field"], field, "{req}");
    }
    let resp = s.http.post(s.url("/app/config-center/module-config")).body("{not json").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
}

/// The documented rollout rule, written out again here from `docs/config-center.md`.
fn httpdns_config_bucket(host: &str, device: &str) -> u64 {
    let digest = sha256(format!("{host}.{device}").as_bytes());
    u64::from_be_bytes(digest[..8].try_into().unwrap()) % 10_000
}

fn sha256(data: &[u8]) -> [u8; 32] {
    // An independent SHA-256 (FIPS 180-4), so this check does not reuse the server's code.
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ];
    let mut h: [u32; 8] =
        [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes(chunk[4 * i..4 * i + 4].try_into().unwrap());
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh.wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, v) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&v.to_be_bytes());
    }
    out
}

#[tokio::test]
async fn invalid_documents_are_refused_with_the_field_named() {
    for (db, _guard) in backends("config_invalid").await {
        invalid_documents_on(&db).await;
    }
}

async fn invalid_documents_on(db: &Db) {
    let s = Server::start(db).await;
    let with = |path: &[&str], v: Value| {
        let mut d = seed_doc();
        let mut cur = &mut d;
        for (i, p) in path.iter().enumerate() {
            if i + 1 == path.len() {
                if let Ok(n) = p.parse::<usize>() {
                    cur[n] = v.clone();
                } else {
                    cur[*p] = v.clone();
                }
            } else if let Ok(n) = p.parse::<usize>() {
                cur = &mut cur[n];
            } else {
                cur = &mut cur[*p];
            }
        }
        d
    };
    let cases = [
        (with(&["hostListConfig"], json!([])), "hostListConfig"),
        (with(&["hostListConfig", "0", "rate"], json!(1.5)), "hostListConfig[0].rate"),
        (with(&["hostListConfig", "1", "host"], json!("cdn xxx")), "hostListConfig[1].host"),
        (with(&["hostListConfig", "1", "host"], json!("cdn.xxx.com")), "hostListConfig[1].host"),
        (with(&["mergeHostConfigs", "1", "pathPrefix"], json!("product")), "mergeHostConfigs[1].pathPrefix"),
        (with(&["mergeHostConfigs", "2", "pathPrefix"], json!("/image")), "mergeHostConfigs[2].pathPrefix"),
        (with(&["mergeHostConfigs", "0", "host"], json!("http://image.xxx.com")), "mergeHostConfigs[0].host"),
        (with(&["reviveProbeInterval"], json!(100)), "reviveProbeInterval"),
        (with(&["configRequestInterval"], json!(864000000)), "configRequestInterval"),
        (with(&["publicIpList", "0"], json!("223.5.5")), "publicIpList[0]"),
        (with(&["extra"], json!(true)), "extra"),
    ];
    for (doc, field) in cases {
        let resp = publish(&s, "cdn", &doc, None).await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{field}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["field"], field, "{body}");
    }
    let mut missing = seed_doc();
    missing.as_object_mut().unwrap().remove("hostListConfig");
    let body: Value = publish(&s, "cdn", &missing, None).await.json().await.unwrap();
    assert_eq!(body["field"], "hostListConfig");
    // Nothing was stored.
    assert_eq!(app_get(&s, "cdn", None).await.status(), StatusCode::NOT_FOUND);
    let (_, list) = s.admin(Method::GET, "/admin/v1/config", None).await;
    assert_eq!(list["items"], json!([]));
    // Private addresses are fine in publicIpList (intranets and tests need them).
    let ok = with(&["publicIpList"], json!(["127.0.0.1", "10.0.0.1"]));
    assert_eq!(publish(&s, "cdn", &ok, None).await.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn twenty_concurrent_publishers_over_http() {
    for (db, _guard) in backends("config_concurrent_http").await {
        let s = std::sync::Arc::new(Server::start(&db).await);
        assert!(publish(&s, "cdn", &seed_doc(), None).await.status().is_success());
        let mut tasks = Vec::new();
        for i in 0..20 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let mut doc = seed_doc();
                doc["hostListConfig"][0]["host"] = json!(format!("cdn{i}.xxx.com"));
                publish(&s, "cdn", &doc, Some("\"1\"")).await.status()
            }));
        }
        let mut statuses = Vec::new();
        for t in tasks {
            statuses.push(t.await.unwrap().as_u16());
        }
        statuses.sort();
        assert_eq!(statuses, [[200].as_slice(), &[412; 19]].concat(), "{db:?}");
        let (_, page) = s.admin(Method::GET, "/admin/v1/config/cdn/versions", None).await;
        let versions: Vec<i64> =
            page["items"].as_array().unwrap().iter().map(|i| i["version"].as_i64().unwrap()).collect();
        assert_eq!(versions, [2, 1]);
    }
}

#[tokio::test]
async fn signatures_verify_independently_and_tampering_fails() {
    let s = Server::start(&Db::Sqlite).await;
    assert!(publish(&s, "cdn", &seed_doc(), None).await.status().is_success());
    let key: Value = s.get("/app/config-center/public-key").await.json().await.unwrap();
    assert_eq!(key["algorithm"], "ed25519");
    let public_key = key["public_key"].as_str().unwrap().to_owned();

    for resp in [
        app_get(&s, "cdn", None).await,
        app_post(&s, json!({"module": "cdn"})).await,
        app_post(&s, json!({"module": "cdn", "deviceId": "device-0001"})).await,
    ] {
        let sig = resp.headers()["x-config-signature"].to_str().unwrap().to_owned();
        let body = resp.bytes().await.unwrap();
        assert!(verify(&public_key, &body, &sig));
        let mut tampered = body.to_vec();
        let pos = tampered.windows(3).position(|w| w == b"cdn").unwrap();
        tampered[pos] = b'x';
        assert!(!verify(&public_key, &tampered, &sig));
        python_verify(&public_key, &body, &sig, true);
        python_verify(&public_key, &tampered, &sig, false);
    }
}

/// Verifies with Python's `cryptography` package, a second independent implementation.
fn python_verify(public_key: &str, body: &[u8], sig: &str, expect: bool) {
    use std::io::Write;
    let script = r#"
import base64, sys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.exceptions import InvalidSignature
key, sig = sys.argv[1], sys.argv[2]
body = sys.stdin.buffer.read()
try:
    Ed25519PublicKey.from_public_bytes(base64.b64decode(key)).verify(base64.b64decode(sig), body)
    print("valid")
except InvalidSignature:
    print("invalid")
"#;
    let child = std::process::Command::new("python3")
        .args(["-c", script, public_key, sig])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        httpdns_test_support::skipped("Python check of config signatures", "python3 not found");
        return;
    };
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success()
        && String::from_utf8_lossy(&out.stderr).contains("No module named 'cryptography'")
    {
        httpdns_test_support::skipped("Python check of config signatures", "`cryptography` not installed");
        return;
    }
    assert_eq!(
        stdout.trim(),
        if expect { "valid" } else { "invalid" },
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn restart_keeps_config_and_key() {
    for (db, _guard) in backends("config_restart").await {
        restart_keeps_config_and_key_on(&db).await;
    }
}

async fn restart_keeps_config_and_key_on(db: &Db) {
    let tmp = tempfile::tempdir().unwrap();
    let env = crate::support::env(tmp.path(), db);
    let (key1, body1) = {
        let s = Server::start_with(env.clone(), None).await;
        assert!(publish(&s, "cdn", &seed_doc(), None).await.status().is_success());
        let key: Value = s.get("/app/config-center/public-key").await.json().await.unwrap();
        (key["public_key"].clone(), app_get(&s, "cdn", None).await.text().await.unwrap())
    };
    let s = Server::start_with(env, None).await;
    let key: Value = s.get("/app/config-center/public-key").await.json().await.unwrap();
    assert_eq!(key["public_key"], key1, "the signing key survives a restart");
    assert_eq!(app_get(&s, "cdn", None).await.text().await.unwrap(), body1);
    let (_, page) = s.admin(Method::GET, "/admin/v1/config/cdn/versions", None).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn two_server_processes_serve_a_publish_within_a_second_and_never_go_backwards() {
    let Some(db) = httpdns_test_support::postgres::fresh_database("config_two_processes").await else {
        return;
    };
    let (tmp_a, tmp_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut env_a = crate::support::env(tmp_a.path(), &Db::Postgres(db.url.clone()));
    let mut env_b = crate::support::env(tmp_b.path(), &Db::Postgres(db.url.clone()));
    // Replicas share one signing key, as deployments must; the poll is slow on purpose so
    // that only LISTEN/NOTIFY can meet the one-second bound.
    for env in [&mut env_a, &mut env_b] {
        env.insert("HTTPDNS_CONFIG_SIGNING_KEY".into(), STANDARD.encode([9u8; 32]));
        env.insert("HTTPDNS_SYNC_INTERVAL_MS".into(), "5000".into());
    }
    let a = Process::spawn(&env_a, tmp_a.path());
    let b = Process::spawn(&env_b, tmp_b.path());
    let http = httpdns_test_support::http::client();
    let put = |v: u64, doc: Value| {
        let mut req =
            http.put(format!("{}/admin/v1/config/cdn", a.base)).bearer_auth(TOKEN).body(doc.to_string());
        if v > 0 {
            req = req.header("if-match", format!("\"{v}\""));
        }
        req.send()
    };
    let b_url = format!("{}/app/config-center/module-config?module=cdn", b.base);
    let b_version = |url: String| async move {
        let resp = reqwest::get(url).await.unwrap();
        resp.headers().get("x-config-version").map(|v| v.to_str().unwrap().parse::<i64>().unwrap())
    };

    assert!(put(0, seed_doc()).await.unwrap().status().is_success());
    let started = std::time::Instant::now();
    let seen =
        eventually(Duration::from_secs(1), || async { b_version(b_url.clone()).await.is_some() }).await;
    assert!(seen, "B serves A's publish within 1 s (took {:?})", started.elapsed());

    // B is watched continuously while A publishes 100 versions.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (url, stop) = (b_url.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut last, mut samples) = (0i64, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let v = reqwest::get(&url).await.unwrap().headers()["x-config-version"]
                    .to_str()
                    .unwrap()
                    .parse::<i64>()
                    .unwrap();
                assert!(v >= last, "B went backwards: {v} after {last}");
                last = v;
                samples += 1;
            }
            (last, samples)
        })
    };
    for v in 1..=100u64 {
        let mut doc = seed_doc();
        doc["reviveProbeInterval"] = json!(600000 + v);
        assert_eq!(put(v, doc).await.unwrap().status(), StatusCode::OK);
    }
    let caught_up =
        eventually(Duration::from_secs(1), || async { b_version(b_url.clone()).await == Some(101) }).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (last, samples) = watcher.await.unwrap();
    assert!(caught_up, "B reaches version 101 within 1 s of the last publish (last seen {last})");
    assert!(samples > 10, "the watcher sampled B while A published ({samples} samples)");
}
