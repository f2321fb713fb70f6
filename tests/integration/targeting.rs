//! Targeting (issue 42): a module's `targets` override the document for the devices they match,
//! by platform, app version, carrier and region (the server's classification of the device's
//! address) and labels; the first match wins and the per-device answer says which applied.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::{Db, Server};

async fn device(s: &Server, body: Value) -> Value {
    let resp = s.http.post(s.url("/app/config-center/module-config")).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().contains_key("x-config-signature"));
    resp.json().await.unwrap()
}

#[tokio::test]
async fn targets_match_by_each_attribute_and_the_first_match_wins() {
    let s = Server::start(&Db::Sqlite).await;
    // The test's own address is the device's: loopback, classified by an operator network.
    s.put_ok("/admin/v1/networks/127.0.0.0%2F8", json!({"isp": "unicom", "region": "shanghai"})).await;
    let doc = json!({
        "mergeHostConfigs": [], "hostListConfig": [{"host": "cdn.xxx.com", "rate": 1}],
        "reviveProbeInterval": 600000, "configRequestInterval": 600000, "publicIpList": [],
        "targets": [
            {"match": {"platform": "ios"}, "override": {"configRequestInterval": 60000}},
            {"match": {"appVersion": ">=5.2 <6"}, "override": {"reviveProbeInterval": 30000}},
            {"match": {"labels": {"channel": "beta"}}, "override": {"publicIpList": ["180.76.76.76"]}},
            {"match": {"isp": "unicom", "region": "beijing"}, "override": {"hostListConfig": [{"host": "cdn-bj.xxx.com", "rate": 1}]}},
            {"match": {"region": "shanghai"}, "override": {"hostListConfig": [{"host": "cdn-sh.xxx.com", "rate": 1}]}}
        ]
    });
    let (status, body) = s.put("/admin/v1/config/cdn", doc.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Operators read the targets back; apps never see them.
    let (_, admin) = s.admin(reqwest::Method::GET, "/admin/v1/config/cdn", None).await;
    assert_eq!(admin["targets"], doc["targets"]);
    let plain: Value = s.get("/app/config-center/module-config?module=cdn").await.json().await.unwrap();
    assert!(plain.get("targets").is_none() && plain.get("target").is_none(), "{plain}");

    let base = json!({"module": "cdn", "deviceId": "d1"});
    let with = |extra: Value| {
        let mut b = base.clone();
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };
    let ios = device(&s, with(json!({"platform": "ios", "appVersion": "5.3.0"}))).await;
    assert_eq!(
        (ios["target"].clone(), ios["configRequestInterval"].clone()),
        (json!(0), json!(60000)),
        "first match wins"
    );
    let app = device(&s, with(json!({"platform": "android", "appVersion": "5.3.0"}))).await;
    assert_eq!((app["target"].clone(), app["reviveProbeInterval"].clone()), (json!(1), json!(30000)));
    assert_eq!(app["configRequestInterval"], 600000, "fields not overridden stay the document's");
    let old = device(
        &s,
        with(json!({"platform": "android", "appVersion": "6.0.1", "labels": {"channel": "beta"}})),
    )
    .await;
    assert_eq!((old["target"].clone(), old["publicIpList"].clone()), (json!(2), json!(["180.76.76.76"])));
    let place = device(&s, with(json!({"platform": "android"}))).await;
    assert_eq!(place["target"], 4, "unicom shanghai, by the device's address");
    assert_eq!(place["hostListConfig"][0]["host"], "cdn-sh.xxx.com");
    assert_eq!(place["hostListConfig"][0]["enabled"], true, "the flags are the target's hosts'");

    s.put_ok("/admin/v1/networks/127.0.0.0%2F8", json!({"isp": "unicom", "region": "beijing"})).await;
    let moved = device(&s, with(json!({}))).await;
    assert_eq!(
        (moved["target"].clone(), moved["hostListConfig"][0]["host"].clone()),
        (json!(3), json!("cdn-bj.xxx.com"))
    );
    s.put_ok("/admin/v1/networks/127.0.0.0%2F8", json!({"isp": "telecom", "region": "guangzhou"})).await;
    let none = device(&s, with(json!({}))).await;
    assert!(none.get("target").is_none(), "no target: the document as it is: {none}");

    // A bad range or an override that makes an invalid document is refused by name.
    for (target, field) in [
        (json!({"match": {"appVersion": ">=five"}, "override": {}}), "targets[0].match.appVersion"),
        (json!({"match": {}, "override": {"hostListConfig": []}}), "targets[0].override.hostListConfig"),
        (json!({"match": {"os": "ios"}, "override": {}}), "targets[0].match.os"),
    ] {
        let mut bad = doc.clone();
        bad["targets"] = json!([target]);
        let resp = s
            .http
            .put(s.url("/admin/v1/config/cdn"))
            .bearer_auth(crate::support::TOKEN)
            .header("if-match", "*")
            .body(bad.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        let e: Value = resp.json().await.unwrap();
        assert_eq!(e["field"], field, "{e}");
    }
}
